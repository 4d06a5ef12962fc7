"""``RunContext``: what the runner hands each stage (backends, sandbox, upstream tables).

A context is small and picklable so a Ray task can receive it; the heavy things it hands out
(loaded models, the sandbox pool) live in per-process caches, so a Ray worker that runs many
shards loads each model once, like an actor would.

``run_dir`` is a local path or a ``pyarrow.fs`` URI (``s3://bucket/runs/r1``): every read and
write in it goes through ``arenaforge.pipeline.store.RunStore``. ``cache_dir`` is always local (see
``RunStore.cache_path``) and a stage gets a cache as a ``table_cache`` (it never sees the
folder); the request cache follows ``runner.request_cache_store``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from arenaforge.pipeline.backends.base import LogprobUnsupportedError
from arenaforge.pipeline.filesystem import is_uri
from arenaforge.pipeline.store import RunStore

_BACKENDS: dict[tuple, Any] = {}
_SANDBOX: dict[tuple, Any] = {}
_EMBEDDERS: dict[tuple, Any] = {}
_TABLES: dict[tuple, pa.Table] = {}
_REGISTRIES: dict[tuple, dict[str, Any]] = {}
_LOCK = threading.Lock()
_REGISTRY_LOCK = threading.Lock()  # registry() is called with _LOCK held (backend())


class _TimedBackend:
    """Forwards to a backend; adds model seconds and request-cache hits to the context."""

    def __init__(self, inner: Any, ctx: RunContext):
        self._inner, self._ctx = inner, ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _stats(self) -> dict[str, int]:
        stats = getattr(self._inner, "cache_stats", None)
        return stats() if callable(stats) else {}

    def _timed(self, method: str, *args: Any, **kwargs: Any) -> Any:
        before = self._stats()
        start = time.perf_counter()
        try:
            return getattr(self._inner, method)(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            after = self._stats()
            with _LOCK:  # several models of one shard may be called at once (model_fanout)
                self._ctx.model_seconds += elapsed
                for key in ("hits", "misses"):
                    self._ctx.cache[key] += after.get(key, 0) - before.get(key, 0)

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("complete", *args, **kwargs)

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        return self._timed("chat", *args, **kwargs)

    def traits(self) -> Any:
        from arenaforge.pipeline.backends.capabilities import traits_of

        return traits_of(self._inner)

    def next_token_logprobs(self, *args: Any, **kwargs: Any) -> Any:
        if not hasattr(self._inner, "next_token_logprobs"):
            raise LogprobUnsupportedError(f"model {self._inner.model_id!r}: this backend gives "
                                          "no next-token probabilities")
        return self._timed("next_token_logprobs", *args, **kwargs)


class UndeclaredReadError(KeyError):
    """A stage read an earlier output, column or artifact its ``StageSpec`` does not declare."""

    def __str__(self) -> str:
        return str(self.args[0])


class RunContext:
    """Implements ``arenaforge.pipeline.stage.StageContext`` for one run directory.

    The runner hands each stage ``ctx.for_stage(spec, threads)``: a copy that serves only the
    reads the spec declares, so an undeclared read fails in the first test, not on a cluster.
    """

    def __init__(self, run_dir: Path | str, config: Any, threads: int | None = None,
                 stage: Any = None, engines: Any = None, embeddings: Any = None):
        # a Path when local, the URI string when remote (Path("s3://b") would drop a slash)
        self.run_dir = run_dir if is_uri(run_dir) else Path(run_dir)
        self.config = config
        self.seed = config.seed
        self.threads = threads or max(1, os.cpu_count() or 1)
        self.stage = stage  # the StageSpec this context serves (None: unrestricted, for tools)
        self.engines = engines  # the run's engine directory on Ray (arenaforge.pipeline.engines), or None
        # the run's embedding service on Ray (arenaforge.pipeline.embedding_service), or None
        self.embeddings = embeddings
        self.model_seconds = 0.0
        self.cache = {"hits": 0, "misses": 0}  # request-cache counts of this shard
        self.progress_rows = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "config": self.config, "threads": self.threads,
                "stage": self.stage, "engines": self.engines, "embeddings": self.embeddings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["run_dir"], state["config"], state["threads"], state.get("stage"),
                      state.get("engines"), state.get("embeddings"))

    def for_stage(self, spec: Any, threads: int | None = None, engines: Any = None,
                  embeddings: Any = None) -> RunContext:
        """A fresh context for one stage's workers (``threads`` per model worker; ``engines``:
        the engine directory that serves local models on Ray; ``embeddings``: the embedding
        service there)."""
        return RunContext(self.run_dir, self.config, threads or self.threads, stage=spec,
                          engines=engines, embeddings=embeddings)

    def store(self) -> RunStore:
        """The run directory's store (local caches under ``runner.local_cache_dir`` if set)."""
        return RunStore(self.run_dir, getattr(self.config.runner, "local_cache_dir", None))

    def _request_cache(self) -> tuple[Path | str, str] | None:
        if not self.config.runner.request_cache:
            return None
        return self.store().request_cache(getattr(self.config.runner, "request_cache_store",
                                                  "auto"))

    def request_cache_dir(self) -> Path | str | None:
        """Where the request cache lives: a local directory, or a URI in a remote run
        directory (the ``files`` store); None when caching is off."""
        cache = self._request_cache()
        return cache[0] if cache else None

    def request_cache_store(self) -> str:
        """``sqlite`` or ``files`` (``auto`` resolved against the run directory)."""
        cache = self._request_cache()
        return cache[1] if cache else "sqlite"

    @property
    def run_id(self) -> str:
        return RunStore(self.run_dir).name

    def config_hash(self) -> str | None:
        """The run config's hash (what a dataset row records as its provenance)."""
        config_hash = getattr(self.config, "config_hash", None)
        return config_hash() if callable(config_hash) else None

    # -- models -----------------------------------------------------------------------------
    def registry(self) -> dict[str, Any]:
        """The run's model registry, parsed once per process and file version: a model stage
        asks for it for every model of every shard, and parsing the YAML (~2.5 ms for three
        served experts) was most of the CPU a served ``difficulty`` shard spent outside HTTP."""
        from arenaforge.pipeline.models import load_registry

        path = self.config.models_file
        try:
            st = os.stat(path)
        except OSError:  # load_registry says what is wrong with it
            return load_registry(path)
        key = (str(path), st.st_mtime_ns, st.st_size)
        with _REGISTRY_LOCK:
            if key not in _REGISTRIES:
                _REGISTRIES[key] = load_registry(path)
            return dict(_REGISTRIES[key])

    def model_spec(self, model_id: str) -> Any:
        registry = self.registry()
        if model_id not in registry:
            raise KeyError(f"model {model_id!r} is not in {self.config.models_file}")
        return registry[model_id]

    def backend(self, model_id: str) -> Any:
        from arenaforge.pipeline.backends import create_backend
        from arenaforge.pipeline.engines import LOCAL_BACKENDS, RemoteBackend

        if self.engines is not None and self.model_spec(model_id).backend in LOCAL_BACKENDS:
            # one client per model and process: it keeps going to the replica it used last
            key = ("remote", model_id, str(getattr(self.engines, "_actor_id", id(self.engines))))
            with _LOCK:
                if key not in _BACKENDS:
                    _BACKENDS[key] = RemoteBackend(self.engines, model_id)
                return _TimedBackend(_BACKENDS[key], self)
        cache_dir = self.request_cache_dir()
        key = (model_id, str(self.config.models_file), self.threads, str(cache_dir))
        with _LOCK:
            if key not in _BACKENDS:
                _BACKENDS[key] = create_backend(self.model_spec(model_id), n_threads=self.threads,
                                                cache_dir=cache_dir,
                                                cache_store=self.request_cache_store())
            return _TimedBackend(_BACKENDS[key], self)

    def embedder(self, model_path: Path, device: str | None = None) -> Any:
        """The sentence-embedding model (``arenaforge.pipeline.embedder``): on Ray the run's
        embedding service, which loads it once for the run; else this process's, loaded once
        per process (like a backend)."""
        if self.embeddings is not None:
            from arenaforge.pipeline.embedding_service import RemoteEmbedder

            return RemoteEmbedder(self.embeddings, model_path, device)
        key = (str(model_path), device)
        with _LOCK:
            if key not in _EMBEDDERS:
                from arenaforge.pipeline.embedder import LocalEmbedder

                _EMBEDDERS[key] = LocalEmbedder(model_path, device)
            return _EMBEDDERS[key]

    # -- sandbox ----------------------------------------------------------------------------
    def sandbox(self) -> Any:
        from arenaforge.pipeline.sandbox import SandboxPool

        key = (self.config.sandbox.model_dump_json(),)
        with _LOCK:
            if key not in _SANDBOX:
                _SANDBOX[key] = SandboxPool.from_config(self.config.sandbox)
            return _SANDBOX[key]

    # -- data -------------------------------------------------------------------------------
    def _declared_columns(self, stage: str, columns: Sequence[str] | None) -> list[str] | None:
        if self.stage is None:
            return list(columns) if columns is not None else None
        name = self.stage.name
        if stage not in self.stage.reads:
            raise UndeclaredReadError(
                f"stage {name!r} reads stage {stage!r} without declaring it "
                f"(StageSpec.reads has {sorted(self.stage.reads)})")
        declared = list(self.stage.reads[stage])
        if columns is None:
            return declared
        extra = [c for c in columns if c not in declared]
        if extra:
            raise UndeclaredReadError(
                f"stage {name!r} reads columns {extra} of stage {stage!r} without declaring "
                f"them (declared: {declared})")
        return list(columns)

    def read(self, stage: str, columns: Sequence[str] | None = None,
             instruction_ids: Sequence[str] | None = None) -> pa.Table:
        columns = self._declared_columns(stage, columns)
        # a stage reads only the columns it declared of another: the whole output of every
        # upstream stage (the answers' text, tests' code, votes), four of them cached, held
        # 5.1 GB in emit's worker at 50,000 instructions
        declared = self._declared_columns(stage, None)
        store = self.store().stage(stage)
        info = store.success()
        if info is None:
            if self.stage is not None and stage in self.stage.optional:
                raise KeyError(f"optional stage {stage!r} did not run in "
                               f"{self.store().location}")
            raise RuntimeError(f"stage {stage!r} has not completed in {self.store().location}")
        key = (str(store.dir), info.get("fingerprint"),
               None if declared is None else tuple(declared))
        with _LOCK:
            table = _TABLES.get(key)
        if table is None:
            table = store.read(columns=declared)
            with _LOCK:
                while len(_TABLES) >= 4:  # bounded: upstream outputs can be large
                    _TABLES.pop(next(iter(_TABLES)))
                _TABLES[key] = table
        if instruction_ids is not None:
            table = table.filter(pc.is_in(table.column("instruction_id"),
                                          value_set=pa.array(list(instruction_ids), pa.string())))
        if columns is not None:
            table = table.select([c for c in columns if c in table.column_names]
                                 if self.stage is None else columns)
        return table

    def read_artifact(self, relpath: str) -> bytes | None:
        if self.stage is not None and relpath not in self.stage.artifacts:
            raise UndeclaredReadError(
                f"stage {self.stage.name!r} reads artifact {relpath!r} without declaring it "
                f"(StageSpec.artifacts has {list(self.stage.artifacts)})")
        return self.store().read_artifact(relpath)

    def funnel(self) -> Any:
        return self.store().funnel()

    def remove_artifacts(self, folder: str, pattern: str, keep: Sequence[str]) -> list[str]:
        return self.store().remove_artifacts(folder, pattern, keep)

    def write_artifact(self, relpath: str, data: bytes | str | pa.Table) -> Path | str:
        return self.store().write_artifact(relpath, data)

    def table_cache(self, name: str) -> Any:
        """A local cache of this run as Parquet parts (``arenaforge.pipeline.store.TableCache``;
        the store owns where it lives and how a part is written)."""
        return self.store().table_cache(name)

    def advance(self, rows: int) -> None:
        self.progress_rows += rows


def release_backends(keep: set[str]) -> list[str]:
    """Close this process's cached backends of models not in ``keep`` (an inline run's engines
    between stages; Ray's engine clients stay, their pools are released by the directory).

    Returns:
        The model ids closed.
    """
    closed = []
    with _LOCK:
        for key in [k for k in _BACKENDS if k[0] != "remote" and k[0] not in keep]:
            backend = _BACKENDS.pop(key)
            try:
                backend.close()
            except Exception as exc:  # noqa: BLE001 - released anyway; a later stage reloads
                logging.getLogger(__name__).debug("closing %r failed: %s", backend, exc)
            closed.append(key[0])
    return sorted(set(closed))


def release_embedders() -> None:
    """Close this process's sentence-embedding models (an inline run, after the last stage
    that embeds: their memory is not needed by the model stages that follow)."""
    with _LOCK:
        embedders = list(_EMBEDDERS.values())
        _EMBEDDERS.clear()
    for embedder in embedders:
        embedder.close()


def close_process_resources() -> None:
    """Close cached backends and sandbox pools (end of run, or between tests)."""
    with _LOCK:
        for obj in list(_BACKENDS.values()) + list(_SANDBOX.values()) + list(_EMBEDDERS.values()):
            try:
                obj.close()
            except Exception as exc:  # noqa: BLE001 - best effort: the run is ending anyway
                logging.getLogger(__name__).debug("closing %r failed: %s", obj, exc)
        _BACKENDS.clear()
        _SANDBOX.clear()
        _EMBEDDERS.clear()
        _TABLES.clear()
