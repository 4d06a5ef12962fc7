"""A persistent request cache in front of any backend, so reruns do not pay twice.

Keys are sha256 over (model id, weights identity, method, prompt or conversation, sampling
params); values are the completions of one request. Two stores: ``sqlite`` (``diskcache``) is
process-safe, so Ray workers on one machine share a cache directory; ``files`` writes one JSON
file per request, which many nodes can write at once on a shared filesystem (NFS), where
SQLite's locks are not safe, or on an object store (``s3://``): its root is a local path or a
``pyarrow.fs`` URI, and each entry is written whole (temp name then rename locally, one upload
on an object store), so a reader sees no entry or a complete one. Failed completions are never
stored: a rerun retries them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import sqlite3
import threading
from pathlib import Path

from arenaforge.pipeline import filesystem as fsys
from arenaforge.pipeline.backends.base import (
    Backend,
    BackendError,
    Completion,
    Conversation,
    LogprobReading,
    LogprobUnsupportedError,
    SamplingParams,
)

# Bump when the stored value layout or key recipe changes, so old entries are ignored.
CACHE_FORMAT = 1


@dataclasses.dataclass
class CacheStats:
    """Hit and miss counts of one cached backend (this process only)."""

    hits: int = 0
    misses: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses}


class FileStore:
    """One file per key under ``root/<2 hex>/``; a reader sees no file or a whole one.

    The ``get``/``set`` subset of ``diskcache.Cache`` that the cache uses. Written by hand:
    diskcache and sqlitedict are SQLite underneath, and a shared mount is where that breaks.
    ``root``: a local path or a ``pyarrow.fs`` URI (``arenaforge.pipeline.filesystem``).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = root
        self.fs, self.path = fsys.resolve(root)
        fsys.make_dir(self.fs, self.path)

    def _path(self, key: str) -> str:
        return f"{self.path}/{key[:2]}/{key}.json"

    def get(self, key: str):
        try:
            data = fsys.read_bytes(self.fs, self._path(key))
            return None if data is None else json.loads(data.decode("utf-8"))
        except (OSError, ValueError):
            return None  # unreadable or torn by a foreign writer: a miss, recomputed

    def set(self, key: str, value) -> None:
        # the same answer from two writers: either one wins, both are whole
        fsys.write_bytes(self.fs, self._path(key),
                         json.dumps(value, ensure_ascii=False).encode("utf-8"))

    def close(self) -> None:
        pass


def request_key(model_id: str, weights_id: str, method: str, request: str | Conversation,
                params: SamplingParams) -> str:
    """Hex sha256 identifying one request; stable across processes and runs."""
    payload = json.dumps([CACHE_FORMAT, model_id, weights_id, method, request, params.to_json()],
                         ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class CachedBackend:
    """Wraps a backend; ``complete``/``chat`` answer from the cache when they can.

    Args:
        inner: the backend that serves misses.
        cache_dir: directory of the cache (created if missing): a local path, or for the
            ``files`` store also a ``pyarrow.fs`` URI.
        weights_id: what identifies the weights beyond the model id (their sha256, or the
            served model name for a remote server).
        store: ``sqlite`` (one machine) or ``files`` (several nodes on a shared filesystem).
    """

    def __init__(self, inner: Backend, cache_dir: str | Path, weights_id: str,
                 store: str = "sqlite") -> None:
        import diskcache

        self.inner = inner
        self.model_id = inner.model_id
        self.weights_id = weights_id
        if store not in ("sqlite", "files"):
            raise ValueError(f"request cache store {store!r}: expected 'sqlite' or 'files'")
        try:
            self._cache = (FileStore(fsys.join(cache_dir, "files")) if store == "files"
                           else diskcache.Cache(str(cache_dir)))
        except sqlite3.OperationalError as exc:  # "disk I/O error" alone names neither
            raise BackendError(f"request cache {cache_dir} cannot be opened: {exc} "
                               "(disk full or not writable?)") from exc
        self._stats = CacheStats()
        self._lock = threading.Lock()

    def complete(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        """Cached :meth:`Backend.complete`."""
        return self._cached("complete", prompts, params, self.inner.complete)

    def chat(self, conversations: list[Conversation],
             params: SamplingParams) -> list[list[Completion]]:
        """Cached :meth:`Backend.chat`."""
        return self._cached("chat", conversations, params, self.inner.chat)

    def _misses(self, keys: list[str], results: list) -> dict[str, list[int]]:
        """Each missing key once, with every position that asked for it: a batch that repeats
        a request (identical answers to reworded instructions, judged alike) sends it
        once, as a sequence of one-request calls would have after the first stored it."""
        missing: dict[str, list[int]] = {}
        for i, r in enumerate(results):
            if r is None:
                missing.setdefault(keys[i], []).append(i)
        with self._lock:
            self._stats.hits += len(keys) - len(missing)
            self._stats.misses += len(missing)
        return missing

    def _cached(self, method, requests, params, call) -> list[list[Completion]]:
        keys = [request_key(self.model_id, self.weights_id, method, r, params) for r in requests]
        results: list[list[Completion] | None] = [self._get(k) for k in keys]
        missing = self._misses(keys, results)
        if missing:
            fresh = call([requests[where[0]] for where in missing.values()], params)
            done = {}
            for (key, where), completions in zip(missing.items(), fresh, strict=True):
                for i in where:
                    results[i] = completions
                if all(c.error is None for c in completions):
                    done[key] = [c.to_dict() for c in completions]
            self._store(done)
        return results  # type: ignore[return-value]

    def next_token_logprobs(self, conversations: list[Conversation], candidates: list[str],
                            prefill: str = "") -> list[LogprobReading]:
        """Cached :meth:`LogprobBackend.next_token_logprobs`; failed readings are not stored."""
        read = getattr(self.inner, "next_token_logprobs", None)
        if read is None:
            raise LogprobUnsupportedError(f"model {self.model_id!r}: this backend gives no "
                                          "next-token probabilities")
        method = "next_token_logprobs:" + json.dumps([sorted(candidates), prefill],
                                                      ensure_ascii=False)
        top_k = getattr(self.inner, "logprobs_top_k", None)
        if top_k is not None:  # servers and vLLM read the top k only: k decides what is -inf
            method += f":top{top_k}"
        keys = [request_key(self.model_id, self.weights_id, method, c, SamplingParams())
                for c in conversations]
        results: list[LogprobReading | None] = [
            (stored, None) if (stored := self._cache.get(k)) is not None else None for k in keys]
        missing = self._misses(keys, results)
        if missing:
            fresh = read([conversations[where[0]] for where in missing.values()], candidates,
                         prefill)
            for (key, where), reading in zip(missing.items(), fresh, strict=True):
                for i in where:
                    results[i] = reading
            self._store({key: reading[0] for key, reading in zip(missing, fresh)
                         if reading[1] is None})
        return results  # type: ignore[return-value]

    def _store(self, entries: dict) -> None:
        """Store a call's answers, in one SQLite transaction where the store has them: a commit
        per entry cost ~0.065 ms of CPU against ~0.025 (diskcache, measured), for answers
        that come by the tens of thousands."""
        transact = getattr(self._cache, "transact", None)
        with transact() if transact is not None and entries else contextlib.nullcontext():
            for key, value in entries.items():
                self._cache.set(key, value)

    def _get(self, key: str) -> list[Completion] | None:
        stored = self._cache.get(key)
        return None if stored is None else [Completion(**c) for c in stored]

    def cache_stats(self) -> dict[str, int]:
        """``{"hits": ..., "misses": ...}`` counted per request (prompt or conversation)."""
        with self._lock:
            return self._stats.to_dict()

    def chat_template(self) -> str | None:
        return self.inner.chat_template()

    def apply_chat_template(self, messages: Conversation,
                            add_generation_prompt: bool = True) -> str:
        return self.inner.apply_chat_template(messages, add_generation_prompt)

    def tokenize(self, text: str) -> list[int]:
        return self.inner.tokenize(text)

    def traits(self):
        """The wrapped engine's :class:`~arenaforge.pipeline.backends.capabilities.EngineTraits`."""
        from arenaforge.pipeline.backends.capabilities import traits_of

        return traits_of(self.inner)

    def close(self) -> None:
        self.inner.close()
        self._cache.close()

    def __getattr__(self, name: str):
        # Backend-specific extras (e.g. the llama.cpp handle for benchmarks) pass through.
        if name == "inner":  # not yet set: avoid recursing during a failed __init__
            raise AttributeError(name)
        return getattr(self.inner, name)
