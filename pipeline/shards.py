"""Run one shard of a stage: isolate poisoned rows, normalise dropped rows, write atomically.

This is the unit of work the executors (inline or Ray) schedule; it is a plain function so a
Ray task or actor can run it, and everything it needs travels in its arguments.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import socket
import sqlite3
import time
import traceback
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from arenaforge.pipeline.stage import StageConfig, StageResult, StageSpec, as_result
from arenaforge.pipeline.store import RunStore

log = logging.getLogger(__name__)

DROPPED_SCHEMA = pa.schema([
    ("instruction_id", pa.string()),
    ("stage", pa.string()),
    ("reason", pa.string()),
    ("detail", pa.string()),
    ("row", pa.string()),
])


@dataclasses.dataclass(frozen=True)
class ShardRef:
    """The rows of an earlier stage's output that make one shard, read by the worker itself.

    ``key`` None: the whole output (an unsharded stage). The driver plans shards from the key
    column alone and ships these references, never the rows.
    """

    stage: str
    key: str | None = None
    keys: tuple[str, ...] = ()
    parts: tuple[int, ...] | None = None  # the source shards holding ``keys`` (None: any)

    def read(self, run_dir: Any) -> pa.Table:
        source = RunStore(run_dir).stage(self.stage)
        if self.key is None:
            return source.read()
        return source.read_where(self.key, self.keys, self.parts)


class ContractError(RuntimeError):
    """A stage broke its declared contract (missing columns): a bug, never isolated per row."""


class FatalStageError(RuntimeError):
    """Raise from a stage for errors that no row caused (a model that is missing, say)."""


# Errors no single row can cause: they stop the stage instead of dropping rows one by one.
_FATAL = (ContractError, FatalStageError, MemoryError, KeyboardInterrupt, ImportError)


def _fatal_types() -> tuple[type[BaseException], ...]:
    # Unreachable servers, missing weights and a missing sandbox fail every row alike.
    from arenaforge.pipeline.backends.base import BackendError
    from arenaforge.pipeline.backends.chat_template import ChatTemplateError
    from arenaforge.pipeline.models.weights import ModelNotInstalledError, WeightsCorruptError
    from arenaforge.pipeline.sandbox.pool import SandboxUnavailable
    from arenaforge.pipeline.sandbox.worker import SandboxStartError

    ray_lost: tuple[type[BaseException], ...] = ()
    try:  # a worker, actor or node that Ray lost: no row's fault (ray is optional inline)
        from ray.exceptions import NodeDiedError, ObjectLostError, RayActorError, WorkerCrashedError

        ray_lost = (NodeDiedError, ObjectLostError, RayActorError, WorkerCrashedError)
    except ImportError:
        pass
    return _FATAL + ray_lost + (BackendError, ChatTemplateError, ModelNotInstalledError,
                                WeightsCorruptError, SandboxUnavailable, SandboxStartError)


def is_fatal(exc: BaseException) -> bool:
    if isinstance(exc, _fatal_types()):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        # The request cache's database (disk full, I/O error, locked): no row causes that, and
        # isolating would commit the shard's rows as dropped "errors" that a rerun never retries.
        return True
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def normalize_dropped(table: pa.Table | None, stage: str) -> pa.Table:
    """Dropped rows of any schema -> the run-wide ``dropped.parquet`` schema."""
    if table is None or table.num_rows == 0:
        return DROPPED_SCHEMA.empty_table()
    if "reason" not in table.column_names:
        raise ContractError(f"stage {stage!r} returned dropped rows without a 'reason' column")
    rows = table.to_pylist()
    out = {name: [] for name in DROPPED_SCHEMA.names}
    for row in rows:
        reason = row.pop("reason")
        detail = row.pop("detail", None)
        out["instruction_id"].append(row.get("instruction_id"))
        out["stage"].append(stage)
        out["reason"].append(str(reason))
        out["detail"].append(None if detail is None else str(detail))
        out["row"].append(json.dumps(row, default=str, ensure_ascii=False))
    return pa.table(out, schema=DROPPED_SCHEMA)


def _poisoned(table: pa.Table, exc: BaseException) -> StageResult:
    detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]
    dropped = table.append_column("reason", pa.array(["error"] * table.num_rows, pa.string()))
    dropped = dropped.append_column("detail", pa.array([detail] * table.num_rows, pa.string()))
    return StageResult(table=pa.table({}), dropped=dropped, stats={"poisoned_rows": table.num_rows})


def _split_by_key(table: pa.Table, key: str) -> tuple[pa.Table, pa.Table] | None:
    keys = list(dict.fromkeys(table.column(key).to_pylist())) if key in table.column_names else []
    if len(keys) < 2:
        return None
    first = set(keys[: len(keys) // 2])
    mask = pa.array([k in first for k in table.column(key).to_pylist()])
    return table.filter(mask), table.filter(pc.invert(mask))


def _concat_results(parts: list[StageResult]) -> StageResult:
    tables = [p.table for p in parts if p.table.num_columns]
    dropped = [p.dropped for p in parts if p.dropped is not None and p.dropped.num_rows]
    stats: Counter = Counter()
    for p in parts:
        stats.update(p.stats)
    return StageResult(
        table=pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({}),
        dropped=pa.concat_tables(dropped, promote_options="permissive") if dropped else None,
        stats=dict(stats))


def run_isolating(spec: StageSpec, table: pa.Table, cfg: StageConfig, ctx: Any) -> StageResult:
    """Run the stage; if it raises, bisect by shard key until the poisoned rows are found.

    Rows whose stage call raises on their own are dropped with reason ``error`` and the
    exception text; the rest of the shard goes on. If every part fails, the error is systemic
    and is raised. Model calls already made are served from the request cache on retry.
    """
    try:
        return as_result(spec.run(table, cfg, ctx))
    except BaseException as exc:
        if is_fatal(exc) or not spec.sharded:
            raise
        halves = _split_by_key(table, spec.shard_key)
        if halves is None:
            log.warning("stage %s: dropping poisoned rows: %s", spec.name, exc)
            return _poisoned(table, exc)
        parts = [run_isolating(spec, half, cfg, ctx) for half in halves]
        if all(p.stats.get("poisoned_rows") == h.num_rows for p, h in zip(parts, halves)):
            raise
        return _concat_results(parts)


def check_outputs(spec: StageSpec, table: pa.Table) -> None:
    missing = [c for c in spec.outputs if c not in table.column_names]
    if table.num_rows and missing:
        raise ContractError(f"stage {spec.name!r} did not produce declared columns {missing}")


def execute_shard(spec: StageSpec, cfg: StageConfig, ctx: Any, index: int,
                  rows: pa.Table | ShardRef, input_hash: str) -> dict[str, Any]:
    """Compute shard ``index`` of a stage and commit it; returns the marker written."""
    started_at, begin = time.time(), time.perf_counter()
    store = RunStore(ctx.run_dir).stage(spec.name)
    table = rows.read(ctx.run_dir) if isinstance(rows, ShardRef) else rows
    ctx.model_seconds = 0.0
    ctx.cache = {"hits": 0, "misses": 0}
    start = time.perf_counter()
    result = run_isolating(spec, table, cfg, ctx)
    check_outputs(spec, result.table)
    dropped = normalize_dropped(result.dropped, spec.name)
    info = {
        "input_hash": input_hash,
        "input_rows": table.num_rows,
        "seconds": time.perf_counter() - start,
        "model_seconds": ctx.model_seconds,
        "cache_hits": ctx.cache["hits"],
        "cache_misses": ctx.cache["misses"],
        "reasons": dict(Counter(dropped.column("reason").to_pylist())),
        "stats": {k: float(v) for k, v in result.stats.items()},
        # where the shard ran and its I/O apart from the work: the runner's gaps between one
        # shard's ``written_at`` and the next one's ``started_at`` on a worker are scheduling
        "worker": f"{socket.gethostname()}:{os.getpid()}",
        "started_at": started_at,
        "read_seconds": start - begin,
    }
    write_start = time.perf_counter()
    marker = store.write_shard(index, result.table, dropped, info)
    return dict(marker, write_seconds=time.perf_counter() - write_start)
