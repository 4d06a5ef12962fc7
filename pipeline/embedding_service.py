"""The run's embedding service on Ray: one actor that holds the sentence-embedding model.

``decontaminate`` and ``compress`` (the stages whose ``StageSpec.uses_embeddings`` is set) ask
``ctx.embedder(model_path, device)`` for vectors; on Ray that is a :class:`RemoteEmbedder`,
which sends the texts to this actor. The runner starts the actor at the start of a run that has
such a stage to compute and has it import its libraries then (:meth:`EmbeddingService.warm`),
so that start-up overlaps the stages before (a service that takes a GPU share is started by
the first such stage instead), and stops it after the last one
(``arenaforge.pipeline.runner.run_stages``): a run imports torch and loads the model once,
whatever the number of shards and worker processes.
Before it, each Ray worker that ran a ``decontaminate`` shard imported torch and loaded MiniLM
itself: a fixed cost per worker, 74 s of a 505 s stage at 12,000 instructions on 2 cores.

The actor asks Ray for no CPU: the shard tasks that call it wait in ``ray.get``, which gives
their CPUs back to Ray, and its ``lanes`` (one per core of its node) encode the batches of every
request in flight (``arenaforge.pipeline.embedder.LocalEmbedder``). With ``runner.task_gpus``
naming an embedding stage, the actor asks for the largest such share of a GPU (it lives through
all of them) and those stages' tasks ask for none; the placement plan counts it so.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

# Requests one actor accepts at once: every shard task in flight (their batches share the lanes).
MAX_CALLERS = 64
# Texts a prefetch embeds at a time: enough of one token length to fill batches (about 100
# of each length among 12,000 instructions), short enough that a stage's request that arrives
# meanwhile repeats little (a chunk is ~14 s of two lanes)
PREFETCH_CHUNK = 2048
# Restarts of a service whose process died (and retries of each call in flight then)
RESTARTS = 3


class EmbeddingService:
    """Holds one :class:`~arenaforge.pipeline.embedder.LocalEmbedder` per (model, device)."""

    def __init__(self, lanes: int):
        self.lanes = max(1, lanes)
        self._lock = threading.Lock()
        self._embedders: dict[tuple[str, str | None], Any] = {}
        # (model, device, resolved precision) -> text -> vector: every vector computed here. A
        # vector is a function of its text alone (arenaforge.pipeline.embedder), so one
        # computed ahead, or for another request, is the one this request would compute
        self._memo: dict[tuple[str, str | None, str], dict[str, np.ndarray]] = {}
        # the same key -> text -> the computation that has it in hand
        self._pending: dict[tuple[str, str | None, str], dict[str, Future]] = {}
        self.started_at = time.time()
        self.warm_seconds = 0.0
        self.shared_requests = 0
        self.memo_hits = 0
        self.prefetched = 0
        self.prefetch_seconds = 0.0

    def warm(self) -> float:
        """Import sentence-transformers and torch now (seconds taken): the runner calls it at
        the start of a run, so the imports (~8 s on 2 cores, most of a service's start) overlap
        the stages before the first that embeds instead of stalling its first shards."""
        start = time.perf_counter()
        import sentence_transformers  # noqa: F401
        import torch  # noqa: F401

        self.warm_seconds = time.perf_counter() - start
        return self.warm_seconds

    def _embedder(self, model_path: str, device: str | None) -> Any:
        from arenaforge.pipeline.embedder import LocalEmbedder

        with self._lock:
            key = (model_path, device)
            if key not in self._embedders:
                self._embedders[key] = LocalEmbedder(model_path, device, lanes=self.lanes)
            return self._embedders[key]

    def embed(self, model_path: str, device: str | None, texts: list[str], batch_size: int,
              precision: str) -> np.ndarray:
        """The embeddings of ``texts``: from the memo where this service computed them before
        (ahead, :meth:`prefetch`, or for another request); those another computation has in
        hand are waited for; the rest are computed now. Every shard of ``decontaminate`` asks
        for the benchmark documents' vectors, and the shards that start together all miss the
        run's cache at once (at 1,000 instructions on 2 cores four of them embedded
        HumanEval's 164 docstrings side by side, 656 texts where 164 do)."""
        embedder = self._embedder(model_path, device)
        resolved = embedder.precision(precision)
        if not texts:
            return embedder.embed([], batch_size, resolved)
        found = self._vectors(embedder, (model_path, device, resolved),
                              list(dict.fromkeys(texts)), batch_size)
        return np.stack([found[t] for t in texts]).astype(np.float32, copy=False)

    def _vectors(self, embedder: Any, key: tuple[str, str | None, str], texts: list[str],
                 batch_size: int) -> dict[str, np.ndarray]:
        """``{text: vector}`` for distinct ``texts``: known, awaited or computed here."""
        memo, pending = self._slots(key)
        found: dict[str, np.ndarray] = {}
        waits: dict[Future, list[str]] = {}
        mine: list[str] = []
        with self._lock:
            for t in texts:
                if t in memo:
                    found[t] = memo[t]
                elif t in pending:
                    waits.setdefault(pending[t], []).append(t)
                else:
                    mine.append(t)
            self.memo_hits += len(found)
            self.shared_requests += bool(waits)
            done = Future()
            for t in mine:
                pending[t] = done
        if mine:
            try:
                vecs = embedder.embed(mine, batch_size, key[2])
            except BaseException as exc:
                self._settle(key, mine, done, None, exc)
                raise
            self._settle(key, mine, done, vecs, None)
            found.update(zip(mine, vecs))
        for future, wanted in waits.items():
            if future.exception() is not None:  # that computation failed: do it here
                found.update(self._vectors(embedder, key, wanted, batch_size))
                continue
            with self._lock:
                found.update((t, memo[t]) for t in wanted)
        return found

    def _slots(self, key: tuple) -> tuple[dict[str, np.ndarray], dict[str, Future]]:
        """The memo and the computations in hand of one (model, device, precision)."""
        with self._lock:
            return self._memo.setdefault(key, {}), self._pending.setdefault(key, {})

    def _settle(self, key: tuple, texts: list[str], done: Future, vecs: np.ndarray | None,
                error: BaseException | None) -> None:
        """Record a computation's vectors (or its failure) and wake whoever waits on it."""
        with self._lock:
            if vecs is not None:
                self._memo[key].update(zip(texts, vecs))
            for t in texts:
                self._pending[key].pop(t, None)
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(None)

    def prefetch(self, model_path: str, device: str | None, texts: list[str], batch_size: int,
                 precision: str) -> None:
        """Start embedding ``texts`` ahead of the stage that will ask for them, in a thread of
        its own (returns at once): the runner sends what ``decontaminate`` will embed while
        the stage before it waits on its servers. Every text is claimed at once, in chunks of
        ``PREFETCH_CHUNK`` computed in turn; a stage's request for a claimed text waits for
        its chunk instead of computing it again in a smaller batch."""
        embedder = self._embedder(model_path, device)
        key = (model_path, device, embedder.precision(precision))
        memo, pending = self._slots(key)
        plan: list[tuple[list[str], Future]] = []
        with self._lock:
            todo = [t for t in dict.fromkeys(texts) if t not in memo and t not in pending]
            for i in range(0, len(todo), PREFETCH_CHUNK):
                chunk, done = todo[i:i + PREFETCH_CHUNK], Future()
                for t in chunk:
                    pending[t] = done
                plan.append((chunk, done))
        threading.Thread(target=self._prefetch, daemon=True, name="embed-prefetch",
                         args=(embedder, key, plan, batch_size)).start()

    def _prefetch(self, embedder: Any, key: tuple, plan: list[tuple[list[str], Future]],
                  batch_size: int) -> None:
        start = time.perf_counter()
        for i, (chunk, done) in enumerate(plan):
            try:
                vecs = embedder.embed(chunk, batch_size, key[2])
            except Exception as exc:  # noqa: BLE001 - only an optimisation: waiters compute
                logging.getLogger(__name__).warning("embedding prefetch stopped: %s", exc)
                for rest, later in plan[i:]:
                    self._settle(key, rest, later, None, exc)
                break
            self._settle(key, chunk, done, vecs, None)
            with self._lock:
                self.prefetched += len(chunk)
        self.prefetch_seconds += time.perf_counter() - start

    def precision(self, model_path: str, device: str | None, asked: str) -> str:
        return self._embedder(model_path, device).precision(asked)

    def stats(self) -> list[dict[str, Any]]:
        """Per model loaded: its load time, texts embedded and seconds spent, requests answered
        by another's computation, the early imports' seconds, and this pid."""
        with self._lock:
            embedders = list(self._embedders.values())
        return [{**e.stats(), "pid": os.getpid(), "started_at": self.started_at,
                 "warm_seconds": self.warm_seconds, "shared_requests": self.shared_requests,
                 "memo_hits": self.memo_hits, "prefetched": self.prefetched,
                 "prefetch_seconds": self.prefetch_seconds}
                for e in embedders if e.load_seconds]

    def close(self) -> None:
        with self._lock:
            for e in self._embedders.values():
                e.close()
            self._embedders.clear()
            self._memo.clear()


def prefetch_request(service: Any, request: Any) -> None:
    """Send a stage's :class:`~arenaforge.pipeline.stage.EmbedAhead` to the service."""
    service.prefetch.remote(request.model_path, request.device, list(request.texts),
                            request.batch_size, request.precision)


class RemoteEmbedder:
    """What ``ctx.embedder`` returns on Ray: the embedder protocol over the service actor."""

    def __init__(self, service: Any, model_path: Path | str, device: str | None = None):
        self._service, self.model_path, self._device = service, str(model_path), device
        self._resolved: dict[str, str] = {}

    def precision(self, asked: str) -> str:
        if asked not in self._resolved:
            import ray

            self._resolved[asked] = ray.get(self._service.precision.remote(
                self.model_path, self._device, asked))
        return self._resolved[asked]

    def embed(self, texts: list[str], batch_size: int = 64,
              precision: str = "float32") -> np.ndarray:
        import ray

        return ray.get(self._service.embed.remote(self.model_path, self._device, list(texts),
                                                  batch_size, precision))


def service_gpus(task_gpus: dict[str, float]) -> float:
    """The GPU share the service asks Ray for: the largest ``runner.task_gpus`` of a stage that
    embeds (it embeds for all of them, from the first to the last; their tasks ask for none).

    >>> service_gpus({"decontaminate": 0.25, "compress": 1, "answer": 2})
    1
    """
    from arenaforge.stages import get_stage

    return max([v for k, v in task_gpus.items() if get_stage(k).uses_embeddings] or [0.0])


def start_service(lanes: int, num_gpus: float = 0.0) -> Any:
    """Start the embedding service actor (it loads a model on the first request for it)."""
    import ray

    # a service whose process dies is restarted and the calls in flight are sent again
    # (embedding is idempotent): it reloads the model on the next request
    cls = ray.remote(EmbeddingService).options(num_cpus=0, num_gpus=num_gpus,
                                               max_concurrency=MAX_CALLERS,
                                               max_restarts=RESTARTS, max_task_retries=RESTARTS)
    return cls.remote(lanes)


def stop_service(service: Any) -> list[dict[str, Any]]:
    """Stop the actor; returns its :meth:`EmbeddingService.stats` (empty if it died)."""
    import ray

    stats: list[dict[str, Any]] = []
    try:
        stats = ray.get(service.stats.remote(), timeout=30)
        ray.get(service.close.remote(), timeout=30)
    except Exception as exc:  # noqa: BLE001 - it is being stopped; kill it regardless
        logging.getLogger(__name__).warning("embedding service did not stop cleanly: %s", exc)
    ray.kill(service)
    return stats
