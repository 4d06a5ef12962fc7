"""One model's requests to its OpenAI-compatible servers: retries, servers that are down.

Per request, whatever the route:

* **retried** ``max_retries`` times with exponential backoff (``Retry-After`` honoured): an
  answer 429 or 500, a timeout (no answer within ``timeout_s``), and a 200 answer that is not
  what was asked for: a body that is not JSON (truncated, a proxy's HTML page) or one the
  caller's ``check`` finds wanting (no choices, no log probabilities, an empty completion).
  Each is one request's bad luck, so it costs that request its retries; a request that keeps
  failing returns an error text, which the backend makes a failed completion or reading of its
  own row, never of its batch. A JSON answer still wanting after the last retry is returned as
  it is, for the caller's parser to judge (an empty completion every time is what the model
  says);
* **down**: a server that refuses or drops connections (also mid-reply), or answers
  502/503/504 (restarting, loading its model, behind a proxy), is benched
  (:class:`~arenaforge.pipeline.backends.server_pool.ServerPool`): the request goes to a
  replica, or waits for it, for up to ``down_wait_s``; when no server comes back a
  :class:`BackendError` names the URLs, since every other request would fail the same way;
* **failed** at once: any other 4xx (the request itself is refused, asking again would not help).

A request sent again after a lost answer is the same request (greedy or seeded) and makes its
own row once, so no row is lost or doubled. Its text may differ from the lost answer's: a
batching server's output for a seeded request depends on what it is batched with
(docs/RELIABILITY.md, "What a resume guarantees").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from arenaforge.pipeline.backends.base import BackendError
from arenaforge.pipeline.backends.server_pool import Server, ServerPool

log = logging.getLogger(__name__)
RETRY_STATUS = frozenset({429, 500})
DOWN_STATUS = frozenset({502, 503, 504})  # the server (or the one behind a proxy) is not up
# why a 200 answer to a request body is asked again (None: it is what was asked for)
Check = Callable[[dict, dict], str | None]


class RequestSender:
    """Sends requests to the servers of one model as the module docstring says.

    Args:
        model_id: the registry id (for messages).
        pool: the model's servers.
        client: an :class:`~arenaforge.pipeline.backends.http_client.HttpClient` whose
            timeout is ``timeout_s``.
        timeout_s, max_retries, backoff_s, down_wait_s: see
            :class:`~arenaforge.pipeline.backends.openai_server.OpenAIServerBackend`.
    """

    def __init__(self, model_id: str, pool: ServerPool, client: Any, *, timeout_s: float,
                 max_retries: int, backoff_s: float, down_wait_s: float) -> None:
        self.model_id, self.pool, self.client = model_id, pool, client
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.down_wait_s = backoff_s, down_wait_s

    def post(self, route: str, body: dict, check: Check | None = None, *,
             api: bool = True) -> dict | str:
        """One request: the answer's JSON, or an error text.

        Args:
            route: the path after the API root (``/completions``), or after the server's
                root when ``api`` is false (``/tokenize``).
            body: the JSON body.
            check: ``check(body, answer)``, why a 200 JSON answer is asked again.

        Raises:
            BackendError: no server of the model answered for ``down_wait_s``.
        """
        retries = downs = 0
        down_since: float | None = None
        while True:
            with self.pool.lease() as server:
                url = (server.url if api else server.url.removesuffix("/v1")) + route
                outcome, value, problem, retry_after = self._attempt(server, url, body, check)
            if outcome == "down":  # wait for the server (or a replica)
                now = time.monotonic()
                down_since = down_since or now
                if now - down_since >= self.down_wait_s:
                    raise BackendError(
                        f"cannot reach the OpenAI-compatible server for model {self.model_id!r} "
                        f"at {', '.join(s.url for s in self.pool.servers)} ({problem}) for "
                        f"{self.down_wait_s:g}s; is it running? e.g. `vllm serve <model>` or "
                        "`python -m llama_cpp.server --model <gguf>`")
                log.info("%s: %s; retrying", url, problem)
                time.sleep(min(self.backoff_s * 2**downs, 1.0))
                downs += 1
                continue
            down_since, downs = None, 0
            if outcome == "retry" and retries < self.max_retries:
                log.info("%s: %s; retry %d", url, problem, retries + 1)
                self._sleep(retries, retry_after)
                retries += 1
                continue
            return value

    def _attempt(self, server: Server, url: str, body: dict,
                 check: Check | None) -> tuple[str, dict | str, str, str | None]:
        """One try: ``(outcome, value, problem, retry_after)``. ``outcome`` is ``ok`` (value:
        the JSON answer), ``retry`` (value: what to return when no retry is left), ``down``
        (the server is benched) or ``fail`` (value: the error text, final)."""
        from arenaforge.pipeline.backends.http_client import failure

        try:
            response = self.client.post(url, json=body)
        except Exception as exc:
            kind = failure(exc)
            if kind is None:
                raise
            if kind == "down":
                self.pool.bench(server)
                return "down", "", f"{type(exc).__name__}: {exc}", None
            if kind == "timeout":
                problem = f"timeout: no answer from {url} within {self.timeout_s}s"
                return "retry", problem, problem, None
            return "fail", f"{type(exc).__name__}: {exc}", "", None
        status = response.status_code
        if status in DOWN_STATUS:
            self.pool.bench(server)
            return "down", "", f"HTTP {status}", None
        if status != 200:
            error = f"HTTP {status} from {url}: {response.text[:500]}"
            outcome = "retry" if status in RETRY_STATUS else "fail"
            return outcome, error, f"answered {status}", response.headers.get("retry-after")
        try:
            data = response.json()
        except ValueError:
            return "retry", f"non-JSON answer from {url}: {response.text[:500]}", \
                "non-JSON answer", None
        problem = check(body, data) if check is not None and isinstance(data, dict) else None
        return ("retry", data, problem, None) if problem else ("ok", data, "", None)

    def _sleep(self, attempt: int, retry_after: str | None) -> None:
        delay = self.backoff_s * 2**attempt
        if retry_after:
            try:
                delay = max(delay, float(retry_after))
            except ValueError:
                pass  # an HTTP date: keep our own backoff
        time.sleep(delay)
