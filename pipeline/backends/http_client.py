"""The HTTP client of the OpenAI-compatible backend: urllib3's connection pools, no retries of
its own (``arenaforge.pipeline.backends.openai_requests`` decides what is retried).

Why urllib3 and not httpx: the client's CPU per request is what a run through fast servers
spends most of its own time on (every logprob reading of a server that takes one prompt a
request is one request). Measured on loopback against ``scripts/load_server.py`` (2-core AMD
EPYC, 16 threads, 1,600 single-prompt ``/completions`` requests with ``logprobs: 20``):
httpx.Client 0.72-0.87 ms of client CPU per request, urllib3 0.42-0.43 (``http.client`` alone
0.24-0.27, without pooling or thread safety). httpx's pool also looks at every connection for
every request, which grows with ``max_concurrency`` times the replicas.

What the caller sees is a small slice of httpx's surface (``post(url, json=...)``, ``get``,
a response with ``status_code``, ``headers``, ``text`` and ``json()``), and :func:`failure`
sorts the exceptions into what the request logic acts on.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
import urllib.request
from typing import Any, Literal

import urllib3
from urllib3.exceptions import (
    HTTPError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
)
from urllib3.exceptions import (
    TimeoutError as Urllib3Timeout,
)

Failure = Literal["down", "timeout", "error"]


class Response:
    """A whole answer (status, headers, body), read before the connection goes back."""

    def __init__(self, status_code: int, headers: Any, content: bytes) -> None:
        self.status_code, self.headers, self.content = status_code, headers, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON (``ValueError`` when it is not)."""
        return json.loads(self.content)


class HttpClient:
    """Keep-alive connections to any number of servers, safe to share between threads.

    Args:
        headers: sent with every request (``Authorization``...).
        timeout_s: how long to wait for an answer once connected.
        connect_s: how long to wait for a connection.
        per_server: connections kept open to each server (its requests in flight at once).
    """

    def __init__(self, headers: dict[str, str] | None = None, *, timeout_s: float,
                 connect_s: float = 10.0, per_server: int = 4) -> None:
        self._options = {"num_pools": 64, "maxsize": max(1, per_server), "retries": False,
                         "timeout": urllib3.Timeout(connect=connect_s, read=timeout_s),
                         "headers": {"Content-Type": "application/json", **(headers or {})}}
        self._manager = urllib3.PoolManager(**self._options)
        # read once, as httpx reads them when its client is made: looking them up per request
        # scanned the environment each time (~43 us, a tenth of a request's client CPU)
        self._env_proxies = urllib.request.getproxies_environment()
        self._by_host: dict[tuple[str, str], Any] = {}  # (scheme, host) -> its manager
        self._proxies: dict[str, Any] = {}  # proxy URL -> its manager
        self._lock = threading.Lock()

    def post(self, url: str, json: dict) -> Response:
        body = _dumps(json)
        return self._send("POST", url, body=body)

    def get(self, url: str, timeout: float | None = None) -> Response:
        return self._send("GET", url, timeout=timeout)

    def _send(self, method: str, url: str, body: bytes | None = None,
              timeout: float | None = None) -> Response:
        extra = {} if timeout is None else {"timeout": urllib3.Timeout(connect=timeout,
                                                                       read=timeout)}
        manager = self._manager_for(url)
        answer = manager.request(method, url, body=body, preload_content=True, **extra)
        return Response(answer.status, answer.headers, answer.data)

    def _manager_for(self, url: str) -> Any:
        """The proxy the environment named for ``url`` when this client was made
        (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, minus ``NO_PROXY``), as httpx and
        requests honour them, else direct; decided once per scheme and host."""
        parts = urllib.parse.urlsplit(url)
        host = (parts.scheme, parts.hostname or "")
        manager = self._by_host.get(host)
        if manager is not None:
            return manager
        proxies = self._env_proxies
        proxy = proxies.get(parts.scheme) or proxies.get("all")
        with self._lock:
            if not proxy or urllib.request.proxy_bypass_environment(host[1], proxies):
                manager = self._manager
            else:
                if proxy not in self._proxies:
                    self._proxies[proxy] = urllib3.ProxyManager(proxy, **self._options)
                manager = self._proxies[proxy]
            return self._by_host.setdefault(host, manager)

    def close(self) -> None:
        self._manager.clear()
        for manager in self._proxies.values():
            manager.clear()


def failure(exc: BaseException) -> Failure | None:
    """What a request that raised ``exc`` tells: ``down`` (the server refused or dropped the
    connection, also mid-answer), ``timeout`` (no answer in time), ``error`` (any other
    HTTP-level failure), or ``None`` (not an HTTP failure: the caller's bug, raised).

    >>> failure(ReadTimeoutError(None, "/v1", "read timed out"))
    'timeout'
    >>> failure(ProtocolError("Connection aborted.", ConnectionResetError()))
    'down'
    >>> failure(KeyError("x")) is None
    True
    """
    if isinstance(exc, (NewConnectionError, ProtocolError, ConnectionError)):
        return "down"
    if isinstance(exc, Urllib3Timeout):  # a connect timeout is a server that is not there
        return "timeout" if isinstance(exc, ReadTimeoutError) else "down"
    if isinstance(exc, HTTPError):
        return "error"
    return None


def _dumps(body: dict) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
