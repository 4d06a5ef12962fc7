"""The servers of one model (a server and its replicas) and who gets the next request.

A continuous-batching server (``vllm serve``, SGLang, ``llama-server --parallel N``) is only
as fast as its slots are full, so each server keeps up to ``max_concurrency`` requests in
flight; a request goes to the replica with the fewest in flight (ties: the one that was given
work least recently, i.e. round-robin among equals). A replica that refused or dropped a
connection is benched for a moment so that the others take its share while it restarts.

Example::

    >>> pool = ServerPool(["http://a/v1", "http://b/v1"], max_concurrency=2)
    >>> with pool.lease() as first, pool.lease() as second:
    ...     sorted([first.url, second.url])
    ['http://a/v1', 'http://b/v1']
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import Iterator, Sequence


@dataclasses.dataclass
class Server:
    """One server: its API root and what it is doing now."""

    url: str
    in_flight: int = 0
    served: int = 0  # requests handed to it so far (this process)
    benched_until: float = 0.0  # monotonic time before which it gets no new request
    last_pick: int = 0


class ServerPool:
    """Hands out servers for requests, at most ``max_concurrency`` in flight on each.

    Args:
        urls: API roots of servers that serve the same model.
        max_concurrency: requests in flight per server.
        bench_s: how long a server that dropped a connection is skipped (when another is up).
    """

    def __init__(self, urls: Sequence[str], max_concurrency: int, bench_s: float = 1.0) -> None:
        if not urls:
            raise ValueError("ServerPool needs at least one server URL")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.servers = [Server(url.rstrip("/")) for url in dict.fromkeys(urls)]
        self.max_concurrency = max_concurrency
        self.bench_s = bench_s
        self._cond = threading.Condition()
        self._ticks = itertools.count(1)

    @property
    def capacity(self) -> int:
        """Requests that can be in flight at once over all servers."""
        return self.max_concurrency * len(self.servers)

    def _choose(self, now: float) -> Server | None:
        free = [s for s in self.servers if s.in_flight < self.max_concurrency]
        if not free:
            return None
        up = [s for s in free if s.benched_until <= now]
        # Every free server benched: still use one (the caller backs off and retries), rather
        # than wait while nothing else can serve.
        return min(up or free, key=lambda s: (s.in_flight, s.last_pick))

    @contextlib.contextmanager
    def lease(self) -> Iterator[Server]:
        """Block until a server has a free slot; hold the slot for the ``with`` body."""
        with self._cond:
            while (server := self._choose(time.monotonic())) is None:
                self._cond.wait()
            server.in_flight += 1
            server.served += 1
            server.last_pick = next(self._ticks)
        try:
            yield server
        finally:
            with self._cond:
                server.in_flight -= 1
                self._cond.notify()

    def bench(self, server: Server) -> None:
        """Skip ``server`` for ``bench_s`` (it refused or dropped a connection)."""
        with self._cond:
            server.benched_until = time.monotonic() + self.bench_s

    def all_benched(self) -> bool:
        """Whether every server has recently failed (the model is unreachable right now)."""
        now = time.monotonic()
        with self._cond:
            return all(s.benched_until > now for s in self.servers)

    def stats(self) -> dict[str, int]:
        """Requests handed to each server so far, by URL."""
        with self._cond:
            return {s.url: s.served for s in self.servers}
