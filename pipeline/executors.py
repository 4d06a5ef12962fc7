"""Where shards run: in this process (``inline``) or on Ray (local or a cluster).

Both executors take the same jobs and yield each shard's marker as it completes, so the runner
(and the stages) cannot tell them apart. On Ray every shard is a task (one CPU, retried when its
worker dies; ``runner.task_gpus`` gives a stage's tasks GPUs too); the models a model stage calls
live in engine pools, one per model, started by the first stage that uses it and released when
the next model stage does not (``arenaforge.pipeline.engines``), which restart and retry their
calls when their process dies. The sentence-embedding model lives in one embedding service
(``arenaforge.pipeline.embedding_service``) from the first stage that embeds to the last; it
takes those stages' ``task_gpus``.

How many shards run at once depends on what a stage waits on: a CPU stage, or one whose models
run here (llama.cpp, vLLM engines), one a core; a stage whose models are all served
(``backend: openai``) ``runner.model_workers`` of them, whatever the cores, each on a share of
a core, since they wait on the servers.

A stage sees its executor only through ``ctx.map`` (``StageContext.map``): each executor hands
its stages a ``MapContext``, whose ``map`` runs a whole-table stage's pieces one after another
here (``InlineMap``) or each as a Ray task on the run's CPUs (``RayMap``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
from arenaforge.pipeline.shards import execute_shard
from arenaforge.pipeline.stage import StageConfig, StageSpec

log = logging.getLogger(__name__)

Job = tuple[int, pa.Table, str]  # (shard index, input rows, input hash)


class InlineMap:
    """``ctx.map`` in this process: the items one after another."""

    workers = 1

    def __call__(self, fn: Callable[[Any, Any], Any], items: Sequence[Any],
                 ctx: Any) -> list[Any]:
        return [fn(item, MapContext(ctx, self)) for item in items]


@dataclasses.dataclass(frozen=True)
class RayMap:
    """``ctx.map`` on Ray: each item a task of one CPU (``workers`` of them run at once on
    the run's CPUs; the task that waits on them gives its own CPU back), retried when its
    worker dies. An item's context is the stage's, with an inline ``map``."""

    workers: int
    max_retries: int = 3

    def __call__(self, fn: Callable[[Any, Any], Any], items: Sequence[Any],
                 ctx: Any) -> list[Any]:
        import ray

        if not items:
            return []
        task = ray.remote(_run_item).options(num_cpus=1, max_retries=self.max_retries)
        ctx_ref = ray.put(MapContext(ctx, InlineMap()))  # once, not with every item
        refs = [task.remote(fn, item, ctx_ref) for item in items]
        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as exc:
            for ref in refs:
                ray.cancel(ref, force=True)
            # the item's own error, as inline raises it (Ray's text stays as its cause)
            raise task_error(exc) from exc


def _run_item(fn: Callable[[Any, Any], Any], item: Any, ctx: Any) -> Any:
    return fn(item, ctx)


class MapContext:
    """The context a stage gets from an executor: the runner's context (every attribute read
    and written through to it) plus ``map`` and ``map_workers`` (``StageContext``), which run
    on ``mapper``. It pickles as the two, so a Ray task gets a working ``map`` too."""

    def __init__(self, ctx: Any, mapper: InlineMap | RayMap):
        if isinstance(ctx, MapContext):  # one layer: the innermost context holds the state
            ctx = ctx.inner
        object.__setattr__(self, "inner", ctx)
        object.__setattr__(self, "mapper", mapper)

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "mapper"):  # not yet set (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.inner, name, value)

    def __reduce__(self) -> tuple[Any, tuple[Any, Any]]:
        return MapContext, (self.inner, self.mapper)

    def map(self, fn: Callable[[Any, Any], Any], items: Sequence[Any]) -> list[Any]:
        return self.mapper(fn, list(items), self.inner)

    def map_workers(self) -> int:
        return self.mapper.workers


class InlineExecutor:
    """Runs shards one after another in this process (debugging, tests, tiny runs)."""

    name = "inline"

    def __init__(self, cpus: int | None = None):
        self.cpus = cpus or os.cpu_count() or 1

    def parallelism(self, spec: StageSpec, cfg: StageConfig | None = None,
                    ctx: Any = None) -> int:
        return 1

    def threads(self, spec: StageSpec, cfg: StageConfig | None = None, ctx: Any = None) -> int:
        return self.cpus

    def engines(self, ctx: Any) -> None:
        return None  # models load in this process (arenaforge.pipeline.context caches them)

    def embeddings(self, ctx: Any) -> None:
        return None  # the embedding model loads in this process, once (RunContext.embedder)

    def warm_embeddings(self, ctx: Any) -> None:
        return None  # this process is the one that decodes: an early import would only move it

    def embed_ahead(self, request: Any) -> bool:
        return False  # one process: nothing runs beside the stage

    def release_embeddings(self) -> None:
        """Drop this process's embedding models (after the last stage that embeds)."""
        from arenaforge.pipeline.context import release_embedders

        release_embedders()

    def release_engines(self, keep: set[str]) -> list[str]:
        """Close the models this process loaded that the next model stage does not use."""
        from arenaforge.pipeline.context import release_backends

        return release_backends(keep)

    def map_shards(self, spec: StageSpec, cfg: StageConfig, ctx: Any,
                   jobs: list[Job]) -> Iterator[dict[str, Any]]:
        ctx = MapContext(ctx, InlineMap())
        for index, table, input_hash in jobs:
            yield dict(execute_shard(spec, cfg, ctx, index, table, input_hash), shard=index)

    def close(self) -> None:
        pass

    def abandon(self) -> None:
        """Nothing runs beside this process: a stop has nothing more to end."""


def task_error(exc: BaseException) -> BaseException:
    """The exception a Ray task raised, out of Ray's wrapping (twice wrapped when an engine
    actor raised it to the task)."""
    from ray.exceptions import RayTaskError

    while isinstance(exc, RayTaskError) and isinstance(exc.cause, BaseException):
        exc = exc.cause
    return exc


def _run_task(spec, cfg, ctx, index, table, input_hash):
    return dict(execute_shard(spec, cfg, ctx, index, table, input_hash), shard=index)


class RayExecutor:
    """Runs shards on Ray; ``address=None`` starts (or joins) a local Ray."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None,
                 max_retries: int = 3, model_workers: int | None = None,
                 threads_per_worker: int | None = None,
                 task_gpus: dict[str, float] | None = None, gpu_memory_gb: float | None = None):
        import ray

        self.ray = ray
        address = address or os.environ.get("RAY_ADDRESS")
        self.started_ray = not ray.is_initialized()  # then a stop shuts it down (abandon)
        if self.started_ray:
            with _keeping_sigterm_handler():
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    ray.init(num_cpus=num_cpus or os.cpu_count(), include_dashboard=False,
                             log_to_driver=False, configure_logging=False)
        self.cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.max_retries = max_retries
        # One single-threaded model worker per core by default. Measured on 2 cores (Qwen 0.5B,
        # idle): two 1-thread processes decode 14 tok/s each (28 together), one 2-thread process
        # 22-24 tok/s with spinning OpenMP threads and 14.6 with OMP_WAIT_POLICY=PASSIVE, which
        # it needs to survive sharing the cores (spinning: 2.4 tok/s each when two run at once).
        self.model_workers = min(model_workers or self.cpus, self.cpus)
        # A stage whose models are all served waits on the servers, not on these cores: it
        # runs as many shards at once as runner.model_workers asks, above the core count too
        # (each keeps its backend's max_concurrency requests in flight), on a share of a core
        # each. Unset: one a core, as before.
        self.served_workers = model_workers or self.cpus
        # a worker's threads must fit on one node (six CPUs over three nodes is two a node)
        node_cpus = max([int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n["Alive"]]
                        or [self.cpus])
        self.threads_per_model_worker = threads_per_worker or max(
            1, min(node_cpus, self.cpus // self.model_workers))
        self._directory = None
        self.task_gpus = dict(task_gpus or {})  # stage name -> GPUs of each of its tasks
        self.gpu_memory_gb = gpu_memory_gb  # set: place engines by the placement plan
        self.plan: Any = None  # the RunPlan the engines were placed by
        self._embeddings: Any = None  # the embedding service actor, while a stage needs it
        self.embedding_stats: list[dict[str, Any]] = []  # what each service did, once stopped

    def parallelism(self, spec: StageSpec, cfg: StageConfig | None = None,
                    ctx: Any = None) -> int:
        """Shards of ``spec`` that run at once (the runner plans shard counts as multiples):
        a core each for CPU work and local engines, ``served_workers`` for a stage that only
        waits on servers (known from ``cfg`` and ``ctx``'s registry)."""
        if not spec.uses_models:
            return self.cpus
        if cfg is not None and ctx is not None and self.waits_on_servers(spec, cfg, ctx):
            return self.served_workers
        return self.model_workers

    def threads(self, spec: StageSpec, cfg: StageConfig | None = None, ctx: Any = None) -> int:
        """Threads one worker of ``spec`` may use (a CPU task gets one core)."""
        if not spec.uses_models or (cfg is not None and ctx is not None
                                    and self.waits_on_servers(spec, cfg, ctx)):
            return 1
        return self.threads_per_model_worker

    @staticmethod
    def waits_on_servers(spec: StageSpec, cfg: StageConfig, ctx: Any) -> bool:
        """Whether every model the stage calls is served (``backend: openai``): its shards then
        wait on HTTP, and their number is not bounded by this machine's cores."""
        if not spec.uses_models:
            return False
        from arenaforge.pipeline.models import stage_models

        registry = ctx.registry()
        used = stage_models(cfg, set(registry)) or set(getattr(ctx.config, "experts", ()))
        return bool(used) and all(m in registry and registry[m].served for m in used)

    def _task_cpus(self, spec: StageSpec, cfg: StageConfig, ctx: Any) -> float:
        """The CPU one shard task asks Ray for: a served stage's tasks share the cores so that
        ``served_workers`` of them run at once (they mostly wait on sockets)."""
        if self.served_workers > self.cpus and self.waits_on_servers(spec, cfg, ctx):
            # rounded down to Ray's resource precision (1e-4): 3 x 0.6667 CPUs would not fit
            # on 2, and the third shard would wait
            return math.floor(self.cpus / self.served_workers * 10_000) / 10_000
        return 1

    def engines(self, ctx: Any) -> Any:
        """The run's engine directory (started on the first model stage, kept to the end).

        With ``runner.gpu_memory_gb`` the run's placement plan is made first, for this
        cluster's GPUs, and the engines are placed by it; a run that cannot fit stops here,
        before any engine loads (``PlacementError`` names the stage and the engine).
        """
        if self._directory is None:
            from arenaforge.pipeline.engines import start_directory

            placements = None
            if self.gpu_memory_gb is not None:
                from arenaforge.pipeline.placement import plan_run

                gpus = int(self.ray.cluster_resources().get("GPU", 0))
                self.plan = plan_run(ctx.config, gpus, self.gpu_memory_gb).require_fit()
                placements = self.plan.ray_placements()
            self._directory = start_directory(
                getattr(ctx.config, "models_file", None), self.model_workers,
                self.threads_per_model_worker,
                self.max_retries, ctx.request_cache_dir(), ctx.request_cache_store(),
                placements)
        return self._directory

    def embeddings(self, ctx: Any) -> Any:
        """The run's embedding service (``arenaforge.pipeline.embedding_service``), started
        by the first stage that embeds; it loads each model on its first request."""
        if self._embeddings is None:
            from arenaforge.pipeline.embedding_service import service_gpus, start_service

            node_cpus = max([int(n["Resources"].get("CPU", 0))
                             for n in self.ray.nodes() if n["Alive"]] or [self.cpus])
            self._embeddings = start_service(node_cpus, service_gpus(self.task_gpus))
        return self._embeddings

    def warm_embeddings(self, ctx: Any) -> None:
        """Start the embedding service now and have it import its libraries while the stages
        before the first that embeds run (it asks no CPU of Ray). A service that takes a GPU
        share is still started by its first stage: earlier, that share could be one an engine
        of an earlier model stage is waiting for."""
        from arenaforge.pipeline.embedding_service import service_gpus

        if self._embeddings is None and not service_gpus(self.task_gpus):
            self.embeddings(ctx).warm.remote()

    def embed_ahead(self, request: Any) -> bool:
        """Have the embedding service, when :meth:`warm_embeddings` started it, compute
        ``request`` (a stage's ``EmbedAhead``) while the next stage runs; whether it was sent."""
        if self._embeddings is None:
            return False
        from arenaforge.pipeline.embedding_service import prefetch_request

        prefetch_request(self._embeddings, request)
        return True

    def release_embeddings(self) -> None:
        """Stop the embedding service (after the last stage that embeds); what it did is kept
        for ``loaded_models``."""
        if self._embeddings is not None:
            from arenaforge.pipeline.embedding_service import stop_service

            self.embedding_stats.extend(stop_service(self._embeddings))
            self._embeddings = None

    def release_engines(self, keep: set[str]) -> list[str]:
        """Stop the engine pools the next model stage does not use (their GPUs go back)."""
        if self._directory is None:
            return []
        return self.ray.get(self._directory.release_except.remote(sorted(keep)))

    def loaded_models(self) -> dict[str, list[dict[str, Any]]]:
        """Per model, the replicas loaded so far (pid, GPU ids, load seconds); the embedding
        models under ``embeddings:<model directory>`` (load seconds, texts, seconds embedding)."""
        out = {} if self._directory is None else self.ray.get(self._directory.loaded.remote())
        for stats in self.embedding_stats:
            out.setdefault(f"embeddings:{stats['model']}", []).append(stats)
        return out

    @staticmethod
    def calls_engines(spec: StageSpec, cfg: StageConfig, ctx: Any) -> bool:
        """Whether the stage's shards call engine actors: a model it names holds weights in
        process (``arenaforge.pipeline.engines.LOCAL_BACKENDS``); served models are called directly."""
        if not spec.uses_models:
            return False
        from arenaforge.pipeline.engines import LOCAL_BACKENDS
        from arenaforge.pipeline.models import stage_models

        registry = ctx.registry()
        return any(registry[m].backend in LOCAL_BACKENDS
                   for m in stage_models(cfg, set(registry)))

    def map_shards(self, spec: StageSpec, cfg: StageConfig, ctx: Any,
                   jobs: list[Job]) -> Iterator[dict[str, Any]]:
        ray = self.ray
        if not jobs:
            return
        # Every shard is a task; a model stage's tasks send their requests to the models'
        # engine pools (arenaforge.pipeline.engines), so a task holds no model and may run on any node.
        # Ray hands the next queued shard to whichever CPU frees first.
        # A bounded number in flight, the next one submitted as one finishes. A stage that calls
        # engine actors gets exactly `parallelism`: a task blocked in ray.get on an engine gives
        # its CPU back to Ray, which would otherwise start every queued shard at once (the
        # default run's mine stage had 4 running for 2 engines). Any other stage keeps one more
        # shard queued per worker, which Ray hands to the worker that frees first without
        # waiting for this loop (that wait was 8-38 ms a shard at 50k instructions).
        depth = self.parallelism(spec, cfg, ctx) * (1 if self.calls_engines(spec, cfg, ctx)
                                                     else 2)
        # an embedding stage's GPU share goes to the embedding service, which embeds for it
        gpus = 0 if spec.uses_embeddings else self.task_gpus.get(spec.name, 0)
        task = ray.remote(_run_task).options(num_cpus=self._task_cpus(spec, cfg, ctx),
                                             max_retries=self.max_retries, num_gpus=gpus)
        # the stage's arguments go to the object store once, not with every shard
        # a whole-table stage's ctx.map spreads over the run's CPUs; a sharded stage's shards
        # already fill them, and its map runs inline in its task
        mapper = InlineMap() if spec.sharded else RayMap(self.cpus, self.max_retries)
        spec_ref, cfg_ref = ray.put(spec), ray.put(cfg)
        ctx_ref = ray.put(MapContext(ctx, mapper))
        queue = list(jobs)
        pending = [task.remote(spec_ref, cfg_ref, ctx_ref, *queue.pop(0))
                   for _ in range(min(depth, len(queue)))]
        try:
            while pending:
                # a bounded wait, so that a stop's signal handler runs within a second
                done, pending = ray.wait(pending, num_returns=1, timeout=1.0)
                if not done:
                    continue
                if queue:
                    pending.append(task.remote(spec_ref, cfg_ref, ctx_ref, *queue.pop(0)))
                try:
                    marker = ray.get(done[0])
                except ray.exceptions.RayTaskError as exc:
                    # the shard's own error, as inline raises it: a full disk keeps its errno
                    # and a server that is down its message (the CLI says which, in one line);
                    # Ray's text with the worker's traceback stays attached as its cause
                    raise task_error(exc) from exc
                yield marker
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    def close(self) -> None:
        # engines end with the run; the Ray session outlives it so tests and notebooks reuse it
        self.release_embeddings()
        if self._directory is not None:
            try:
                self.ray.get(self._directory.shutdown.remote(), timeout=120)
            finally:
                self.ray.kill(self._directory)
                self._directory = None

    def abandon(self) -> None:
        """End a stopped run at once: the engines and the embedding service are killed without
        waiting for the calls in progress (a graceful ``close`` waits for them, a minute on a
        CPU), and a Ray this executor started or joined is shut down, its local processes
        (workers, raylet, GCS, agents) with it; a Ray the caller started stays."""
        for actor in (self._directory, self._embeddings):  # the engines die with their owner
            if actor is not None:
                with contextlib.suppress(Exception):
                    self.ray.kill(actor)
        self._directory = self._embeddings = None
        if self.started_ray:
            self.ray.shutdown()


@contextlib.contextmanager
def _keeping_sigterm_handler() -> Iterator[None]:
    """Keep the SIGTERM handler that the caller installed across ``ray.init``, which installs
    its own (a ``sys.exit``, then its core worker's abort) in the main thread: a run stops as
    ``arenaforge.pipeline.stopping`` says. Python's default stays Ray's to replace."""
    import signal
    import threading

    mine = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if mine else None
    yield
    if callable(before):
        signal.signal(signal.SIGTERM, before)


def make_executor(runner_cfg: Any) -> InlineExecutor | RayExecutor:
    if runner_cfg.kind == "inline":
        return InlineExecutor(runner_cfg.threads_per_worker)
    return RayExecutor(address=runner_cfg.ray_address, num_cpus=runner_cfg.num_cpus,
                       max_retries=runner_cfg.max_retries, model_workers=runner_cfg.model_workers,
                       threads_per_worker=runner_cfg.threads_per_worker,
                       task_gpus=runner_cfg.task_gpus, gpu_memory_gb=runner_cfg.gpu_memory_gb)
