"""Order the stages, check their column contracts, shard, execute, resume.

``run_pipeline(cfg)`` is what ``arenaforge run`` calls (through ``arenaforge.pipeline.run``).
``run_stages`` is the engine under it and takes any list of ``StageSpec`` (the tests drive it
with toy stages). A stage whose ``_SUCCESS`` fingerprint matches its current input is skipped;
inside a stage, shards whose marker matches their input are skipped; everything else is
(re)computed. Killing the process at any moment and running again therefore ends with each row
exactly once. ``run_pipeline`` stops on SIGINT and
SIGTERM within seconds, with no process of the run left (``arenaforge.pipeline.stopping``).

The runner imports no application: what a user's run does after its stages (the audit page)
its caller hands in as ``after_run`` hooks (``arenaforge run`` and ``arenaforge.pipeline.run``
hand in the report application's ``report_after_run``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from arenaforge.pipeline import fingerprint as fp
from arenaforge.pipeline import layout
from arenaforge.pipeline.context import RunContext
from arenaforge.pipeline.executors import make_executor
from arenaforge.pipeline.filesystem import join
from arenaforge.pipeline.funnel import Funnel, StageCounts
from arenaforge.pipeline.progress import Progress, render_funnel
from arenaforge.pipeline.shards import DROPPED_SCHEMA, ShardRef
from arenaforge.pipeline.stage import StageSpec
from arenaforge.pipeline.stopping import RunStopped, stop_on_signals, stopped_in
from arenaforge.pipeline.store import RunStore, StoreError, table_hash
from arenaforge.pipeline.toolchain_check import check_toolchains

log = logging.getLogger(__name__)


class ContractChainError(ValueError):
    """The configured stages do not fit together (missing columns or missing stages)."""


class StageFailedError(RuntimeError):
    """A stage raised on every row: a systemic failure, reported instead of an empty output."""


class ModelUnavailableError(ValueError):
    """A model the configured stages use has no weights here (checked before any work)."""


@dataclasses.dataclass
class RunResult:
    run_dir: Path | str  # a URI string when the run directory is remote
    funnel: Funnel
    seconds: float


# A post-run hook: (the run's store, its funnel) -> None, called once every stage has completed
# and the run's summary is written (``stats.json``, ``dropped.parquet``).
AfterRun = Callable[[RunStore, Funnel], None]


def check_chain(specs: list[StageSpec], completed: Mapping[str, Any] | set[str] = frozenset(),
                store: RunStore | None = None) -> None:
    """Check, before any model is loaded, that every stage's inputs can be satisfied.

    For each stage: its source and every stage it ``reads`` (or whose artifacts it reads) is
    configured before it or complete in the run directory, and every column it names is among
    that stage's columns: its declared outputs plus those of its source (stages pass their
    input columns through), or, for a stage complete on disk and not rerun, its stored schema.
    """
    by_name = {s.name: s for s in specs}
    position = {name: i for i, name in enumerate(by_name)}
    available: dict[str, set[str]] = {}
    if store is not None:
        for name in completed:
            if name not in by_name and (schema := store.stage(name).schema()) is not None:
                available[name] = set(schema.names)

    def columns_of(dep: str) -> set[str] | None:
        return available.get(dep)

    for spec in specs:
        for dep in spec.upstream:
            optional = dep in spec.optional
            if dep not in by_name and dep not in completed:
                if optional:
                    continue
                raise ContractChainError(
                    f"stage {spec.name!r} needs stage {dep!r}, which is neither configured "
                    f"before it nor complete in the run directory")
            if dep in by_name and position[dep] > position[spec.name]:
                raise ContractChainError(f"stage {spec.name!r} needs {dep!r}, which runs after it")
        wanted = [(spec.source, spec.inputs, "needs columns")] if spec.source else []
        wanted += [(dep, cols, "reads columns") for dep, cols in spec.reads.items()]
        for dep, cols, what in wanted:
            have = columns_of(dep)
            if have is None:
                continue
            missing = [c for c in cols if c not in have]
            if missing:
                raise ContractChainError(
                    f"stage {spec.name!r} {what} {missing} that stage {dep!r} does not provide "
                    f"(it provides {sorted(have)})")
        inherited = available.get(spec.source, set(spec.inputs)) if spec.source else set()
        available[spec.name] = set(spec.outputs) | inherited


def plan_shards(table: pa.Table, key: str, shard_size: int, sharded: bool,
                parallelism: int = 1) -> list[pa.Table]:
    """Split rows into near-equal shards of at most ``shard_size`` key values, order kept.

    The shard count is rounded up to a multiple of ``parallelism`` (the executor's concurrent
    workers, while there are keys enough) and keys are dealt out evenly, so every worker gets the
    same share. Fixed-size shards left cores idle: 41 instructions in shards of 24 gave one model
    worker 24 and the other 17, and the second sat idle for the last ~100 s of the answer stage.
    """
    if not sharded or table.num_rows == 0 or key not in table.column_names:
        return [table]
    values = table.column(key).to_pylist()
    order = list(dict.fromkeys(values))
    n = -(-len(order) // shard_size)
    n = min(len(order), -(-n // parallelism) * parallelism)
    size, extra = divmod(len(order), n)
    # the first ``extra`` shards take one key more than the rest
    bounds = [s * size + min(s, extra) for s in range(n + 1)]
    shard_of = {k: s for s in range(n) for k in order[bounds[s]:bounds[s + 1]]}
    ids = pa.array([shard_of[v] for v in values], pa.int32())
    import pyarrow.compute as pc

    return [table.filter(pc.equal(ids, i)) for i in range(n)]


def fingerprint_parts(spec: StageSpec, cfg: Any, store: RunStore,
                      planned: pa.Table | None) -> dict:
    """Everything a stage's rows depend on, each part hashed (see ``arenaforge.pipeline.fingerprint``).

    A stage's input is its source's output, which that stage's ``output_hash`` (a digest of its
    shard checksums) already names; only a planned input (the first stage) is hashed here.
    """
    return {
        "config": fp.digest([spec.name, cfg.model_dump(mode="json")]),
        "upstream": {dep: (store.stage(dep).success() or {}).get("output_hash")
                     for dep in spec.upstream},
        "input": table_hash(planned) if planned is not None else None,
        "code": fp.code_digests(spec.run.__module__),
        "prompts": fp.prompt_digests(spec.prompts),
    }


def _source_shards(spec: StageSpec, store: RunStore, shard_size: int,
                   parallelism: int) -> tuple[list[ShardRef], int]:
    """Shards of a stage whose input is an earlier output, planned from its key column only:
    the driver never holds the rows, each worker reads its own (``ShardRef.read``)."""
    source = store.stage(spec.source)
    rows = int((source.success() or {}).get("rows_out") or 0)
    schema = source.schema()
    names = schema.names if schema is not None else []
    missing = [c for c in spec.inputs if c not in names]
    if rows and missing:
        raise ContractChainError(f"stage {spec.name!r}: input lacks columns {missing}")
    key = spec.shard_key
    if not (spec.sharded and rows and key in names):
        return [ShardRef(spec.source)], rows
    parts_of: dict[Any, set[int]] = {}
    ordered: list = []
    for index, values in source.key_parts(key):
        for value in values:
            parts_of.setdefault(value, set()).add(index)
        ordered.extend(values)
    keys = pa.table({key: ordered})
    refs = []
    for part in plan_shards(keys, key, shard_size, True, parallelism):
        values = tuple(dict.fromkeys(part.column(key).to_pylist()))
        holders = tuple(sorted(set().union(*(parts_of[v] for v in values))))
        refs.append(ShardRef(spec.source, key, values, holders))
    return refs, rows


def shard_timing(markers: list[dict[str, Any]]) -> dict[str, float]:
    """Where a stage's time outside its shards' work went (this attempt's shards):
    ``io_seconds_last_attempt``, the workers reading their input and writing their output, and
    ``gap_seconds_last_attempt``, each worker's idle time between finishing one shard and
    starting its next (scheduling: the driver's loop, Ray's dispatch, argument transfer)."""
    io = sum(m.get("read_seconds", 0.0) + m.get("write_seconds", 0.0) for m in markers)
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for m in markers:
        if "started_at" in m and "worker" in m:
            by_worker.setdefault(m["worker"], []).append(m)
    gap = 0.0
    for ms in by_worker.values():
        ms.sort(key=lambda m: m["started_at"])
        gap += sum(max(0.0, nxt["started_at"] - prev["written_at"])
                   for prev, nxt in itertools.pairwise(ms))
    return {"io_seconds_last_attempt": io, "gap_seconds_last_attempt": gap}


def run_stage(spec: StageSpec, cfg: Any, ctx: RunContext, store: RunStore, executor: Any,
              shard_size: int, progress: Progress | None = None) -> StageCounts:
    """Bring one stage to completion (skipping what is already done); returns its counts."""
    stage_store = store.stage(spec.name)
    ctx = ctx.for_stage(spec, executor.threads(spec, cfg, ctx),
                        executor.engines(ctx) if spec.uses_models else None)
    planned = spec.plan(cfg, ctx) if spec.plan is not None else None
    if planned is not None:
        missing = [c for c in spec.inputs if c not in planned.column_names]
        if planned.num_rows and missing:
            raise ContractChainError(f"stage {spec.name!r}: input lacks columns {missing}")
    parts = fingerprint_parts(spec, cfg, store, planned)
    fingerprint = fp.digest(parts)
    done = stage_store.success()
    if done and done.get("fingerprint") == fingerprint and not stage_store.verify():
        if progress:
            progress.skip(spec.name, done["rows_in"])
        return dataclasses.replace(StageCounts.from_record(spec.name, done), recomputed=None)
    recomputed = fp.explain_change(done, parts)
    if done:
        log.info("stage %s is recomputed: %s", spec.name, recomputed)
    stage_store.clear_success()

    parallelism = executor.parallelism(spec, cfg, ctx)
    # a shard is reusable only if made from the same rows by the same stage version (code,
    # prompts, config): a killed attempt's shards resume, an upgraded stage's are recomputed
    shards: list[pa.Table] | list[ShardRef]
    if planned is not None:
        shards = plan_shards(planned, spec.shard_key, shard_size, spec.sharded, parallelism)
        hashes = [fp.digest([fingerprint, table_hash(s)]) for s in shards]
        rows_in = planned.num_rows
    else:
        # the source's output_hash is in the fingerprint: its keys name the rows
        shards, rows_in = _source_shards(spec, store, shard_size, parallelism)
        hashes = [fp.digest([fingerprint, list(ref.keys)]) for ref in shards]
    stage_store.remove_stale(len(shards))
    markers: dict[int, dict[str, Any]] = {}
    todo = []
    for i, (shard, h) in enumerate(zip(shards, hashes)):
        marker = stage_store.shard_done(i, h)
        if marker is not None:
            markers[i] = marker
        else:
            todo.append((i, shard, h))
    if progress:
        progress.start(spec.name, total=rows_in,
                       done=sum(m["input_rows"] for m in markers.values()), shards=len(shards),
                       shards_done=len(markers), why=recomputed if done else None)
    if spec.uses_embeddings and todo:
        # the run's embedding service, started by the first stage with shards to embed (a
        # resumed run whose embedding stages are done starts none)
        ctx.embeddings = executor.embeddings(ctx)
    start = time.perf_counter()
    busy = 0.0
    attempt: list[dict[str, Any]] = []
    for marker in executor.map_shards(spec, cfg, ctx, todo):
        markers[marker["shard"]] = marker
        attempt.append(marker)
        busy += marker["seconds"]
        if progress:
            progress.advance(spec.name, marker["input_rows"])
    wall = time.perf_counter() - start
    workers = min(parallelism, len(todo))

    ordered = [markers[i] for i in range(len(shards))]
    reasons: Counter = Counter()
    extra: Counter = Counter()
    for m in ordered:
        reasons.update(m.get("reasons", {}))
        extra.update(m.get("stats", {}))
    info = {
        "fingerprint": fingerprint,
        "fingerprint_parts": parts,
        "recomputed": recomputed,
        "output_hash": fp.digest([m["sha256"] for m in ordered]),
        "shards": len(shards),
        "rows_in": rows_in,
        "rows_out": sum(m["rows"] for m in ordered),
        "dropped": dict(reasons),
        "seconds": sum(m["seconds"] for m in ordered),
        "model_seconds": sum(m.get("model_seconds", 0.0) for m in ordered),
        # requests answered from the cache in the attempt that wrote each shard
        "cache_hits": sum(m.get("cache_hits", 0) for m in ordered),
        "cache_misses": sum(m.get("cache_misses", 0) for m in ordered),
        "wall_seconds_last_attempt": wall,
        # share of the workers' time spent in shards: the rest is idle cores (a tail where one
        # shard runs alone) or scheduling
        "utilization_last_attempt": busy / (wall * workers) if workers and wall > 0 else None,
        **shard_timing(attempt),
        "workers": workers,
        "stats": dict(extra),
        "executor": executor.name,
    }
    if rows_in and extra.get("poisoned_rows", 0) >= rows_in:
        # Every row "poisoned" is a broken stage or model, not bad rows: fail loudly instead of
        # completing with nothing. Shards stay on disk; a fixed rerun recomputes them.
        first = stage_store.read_dropped_detail()
        raise StageFailedError(f"stage {spec.name!r}: every one of {rows_in} rows raised; "
                               f"first error: {first}")
    stage_store.mark_success(info)
    store.update_stage(spec.name, {"status": "complete",
                                   **{k: v for k, v in info.items() if k != "fingerprint_parts"}})
    if progress:
        progress.finish(spec.name)
    return StageCounts.from_record(spec.name, info)


def run_stages(specs: list[StageSpec], stage_cfgs: dict[str, Any], ctx: RunContext,
               store: RunStore, executor: Any, shard_size: int,
               show_progress: bool = True, after_run: Sequence[AfterRun] = ()) -> Funnel:
    """Run stages in order, then each ``after_run`` hook; returns the funnel."""
    from arenaforge.pipeline.engine_lifetimes import holds_gpu, models_to_keep, stage_model_sets

    complete = store.completed()
    check_chain(specs, complete, store)
    funnel = Funnel()
    # engines live from the first stage that uses them to the last of a run of such stages
    registry = ctx.registry() if any(s.uses_models for s in specs) else {}
    used = stage_model_sets(specs, stage_cfgs, set(registry), getattr(ctx.config, "experts", ()))
    on_cpu = {m for m, spec in registry.items() if not holds_gpu(spec)}  # never released
    # the embedding model lives from the first stage that embeds to the last (one load a run)
    last_embedding = max((i for i, s in enumerate(specs) if s.uses_embeddings), default=-1)
    if any(s.uses_embeddings and s.name not in complete for s in specs):
        # its start-up overlaps the stages before the first that embeds
        executor.warm_embeddings(ctx)
    with Progress(enabled=show_progress) as progress:
        for i, spec in enumerate(specs):
            try:
                if i + 1 < len(specs):
                    _embed_ahead(spec, specs[i + 1], stage_cfgs, store, executor, complete)
                funnel = funnel.plus(run_stage(spec, stage_cfgs[spec.name], ctx, store,
                                               executor, shard_size, progress))
                executor.release_engines(models_to_keep(used, i) | on_cpu)
                if i == last_embedding:
                    executor.release_embeddings()
            except KeyboardInterrupt as exc:  # where the run stopped, for the one line it prints
                raise stopped_in(exc, spec.name) from None
    _write_run_summary(store, funnel)
    for hook in after_run:
        hook(store, funnel)
    return funnel


def _embed_ahead(spec: StageSpec, after: StageSpec, stage_cfgs: dict[str, Any],
                 store: RunStore, executor: Any, complete: dict[str, Any]) -> None:
    """Before ``spec`` runs: when the next stage embeds what ``spec`` passes on
    (``StageSpec.embeds_ahead``), send what it will embed, read from ``spec``'s own input, to
    the run's embedding service, which computes it while ``spec`` waits on its models."""
    if (after.embeds_ahead is None or after.source != spec.name or spec.source is None
            or after.name in complete or not store.stage(spec.source).success()):
        return
    rows = store.stage(spec.source).read(columns=list(after.inputs))
    request = after.embeds_ahead(rows, stage_cfgs[after.name]) if rows.num_rows else None
    if request is not None and executor.embed_ahead(request):
        log.info("embedding %d texts for %s while %s runs", len(request.texts), after.name,
                 spec.name)


def _write_run_summary(store: RunStore, funnel: Funnel) -> None:
    store.write_dropped_summary(funnel.names(), DROPPED_SCHEMA)
    summary = {row.stage: {k: v for k, v in row.as_dict().items() if k != "stage"}
               for row in funnel}
    store.write_artifact(layout.STATS, json.dumps(summary, indent=2, sort_keys=True) + "\n")


def check_models_available(cfg: Any, specs: list[StageSpec]) -> None:
    """Fail before any work when a model the model stages use has no local weights.

    Without this a missing weights file surfaces inside the first shard, after the run
    directory exists, as one failed row per request. Cheap: pip metadata and ``stat`` only
    (served models are not probed here: an unreachable server fails its stage with the URL).
    """
    from arenaforge.pipeline.models import load_registry, package_files, stage_models

    model_specs = [s for s in specs if s.uses_models]
    if not model_specs:
        return
    registry = load_registry(cfg.models_file)
    used: set[str] = set()
    for spec in model_specs:
        used |= stage_models(cfg.stage_config(spec.name), set(registry))
    for model_id in sorted(used & set(registry)):
        entry = registry[model_id]
        try:
            if entry.backend == "openai":
                continue  # served; a local path there only supplies the chat template
            if entry.path is not None:
                path = Path(os.path.expandvars(entry.path)).expanduser()
                if not path.exists():
                    raise FileNotFoundError(f"path {path} does not exist")
            elif entry.packages:
                package_files(entry)
        except (LookupError, OSError) as exc:
            raise ModelUnavailableError(
                f"model {model_id!r} ({cfg.models_file}) cannot be loaded: {exc}") from None


def run_pipeline(cfg: Any, fresh: bool = False, show_progress: bool = True,
                 after_run: Sequence[AfterRun] = ()) -> RunResult:
    """Run the configured stages of ``cfg`` into ``<artifacts_dir>/<name>/``, then each
    ``after_run`` hook (``run_stages``).

    ``artifacts_dir`` is a local path or a ``pyarrow.fs`` URI (``s3://bucket/runs``); see
    ``arenaforge.pipeline.filesystem`` for where S3 options and credentials come from.

    Raises:
        RunStopped: SIGINT or SIGTERM stopped it (``arenaforge.pipeline.stopping``): the shards
            then running were abandoned, the committed ones kept, and Ray shut down.
        StoreError: the run directory was made by a different config (use ``fresh=True``), or
            a SQLite request cache was asked for a remote run directory.
        ContractChainError: the configured stages do not fit together.
        ModelUnavailableError: a model the stages use is not installed (nothing was written).
    """
    from arenaforge.pipeline.config import run_dir_yaml
    from arenaforge.pipeline.context import close_process_resources
    from arenaforge.stages import get_stage

    start = time.perf_counter()
    specs = [get_stage(name) for name in cfg.stages]
    run_dir = join(cfg.artifacts_dir, cfg.name)
    try:
        store = RunStore(run_dir, cfg.runner.local_cache_dir)
    except ValueError as exc:  # a URI pyarrow cannot open: the user's field, not a crash
        raise StoreError(f"artifacts_dir: {exc}") from None
    if cfg.runner.request_cache:
        store.request_cache(cfg.runner.request_cache_store)  # refuses SQLite on a remote store
    check_chain(specs, store.completed() if not fresh else {}, None if fresh else store)
    check_models_available(cfg, specs)
    # a missing compiler would otherwise stop the tests stage, after the models ran
    check_toolchains(cfg)
    for warning in cfg.role_warnings():
        log.warning("%s", warning)
    store.open(cfg.config_hash(), run_dir_yaml(cfg, run_dir), fresh=fresh)
    with stop_on_signals():  # SIGINT, SIGTERM: RunStopped, the running shards abandoned
        executor = make_executor(cfg.runner)
        ctx = RunContext(run_dir, cfg)
        stopped = False
        try:
            funnel = run_stages(specs, {s.name: cfg.stage_config(s.name) for s in specs}, ctx,
                                store, executor, cfg.runner.shard_size, show_progress,
                                after_run)
            engines = executor.loaded_models() if hasattr(executor, "loaded_models") else {}
            if engines:  # where each model ran: node, GPUs, load time per replica
                store.write_artifact(layout.ENGINES, json.dumps(engines, indent=2) + "\n")
        except KeyboardInterrupt as exc:
            stopped = True
            raise stopped_in(exc) from None
        finally:
            close_process_resources()
            if stopped:  # no wait for the model calls in progress; Ray is shut down
                executor.abandon()
            else:
                executor.close()
    seconds = time.perf_counter() - start
    if show_progress:
        render_funnel(funnel, seconds)
    return RunResult(run_dir=run_dir, funnel=funnel, seconds=seconds)


__all__ = [
    "AfterRun",
    "ContractChainError",
    "ModelUnavailableError",
    "RunResult",
    "RunStopped",
    "StageFailedError",
    "StoreError",
    "check_chain",
    "check_models_available",
    "plan_shards",
    "run_pipeline",
    "run_stage",
    "run_stages",
]
