"""Any OpenAI-compatible server: ``vllm serve``, llama.cpp's server, SGLang, llama-cpp-python.

Requests go out concurrently (``max_concurrency`` at a time). 429 and 5xx answers and refused
connections are retried with exponential backoff (``Retry-After`` honoured); a request that
still fails, times out or is rejected (4xx) becomes a failed :class:`Completion`. A server that
cannot be reached at all raises :class:`BackendError` naming the URL, since every other request
would fail the same way.

With ``n > 1`` each sample is its own request with seed ``seed + i``: not every server honours
``n`` (llama.cpp's does not), and per-sample seeds keep samples replayable one by one, as in the
other backends.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pipeline.backends.base import BackendError, Completion, Conversation, SamplingParams
from pipeline.backends.chat_template import ChatTemplateError, render_chat_template

log = logging.getLogger(__name__)
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


def request_body(model: str, params: SamplingParams, seed: int | None, *,
                 prompt: str | None = None, messages: Conversation | None = None,
                 stop: list[str] | None = None) -> dict[str, Any]:
    """JSON body of one ``/completions`` (``prompt``) or ``/chat/completions`` request.

    >>> request_body("m", SamplingParams(max_tokens=5), 3, prompt="hi")["seed"]
    3
    """
    body: dict[str, Any] = {"model": model, "n": 1, "max_tokens": params.max_tokens,
                            "temperature": params.temperature, "top_p": params.top_p}
    if prompt is not None:
        body["prompt"] = prompt
    else:
        body["messages"] = messages
    stop = list(params.stop) if stop is None else stop
    if stop:
        body["stop"] = stop
    if seed is not None:
        body["seed"] = seed
    return body


def parse_response(data: dict[str, Any], *, chat: bool) -> Completion:
    """A server's JSON answer as a :class:`Completion` (malformed answers become failures)."""
    try:
        choice = data["choices"][0]
        text = choice["message"]["content"] if chat else choice["text"]
        usage = data.get("usage") or {}
        reason = choice.get("finish_reason")
        return Completion(text=text or "", finish_reason="length" if reason == "length" else "stop",
                          prompt_tokens=int(usage.get("prompt_tokens") or 0),
                          completion_tokens=int(usage.get("completion_tokens") or 0))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return Completion.failed(f"malformed response ({exc!r}): {str(data)[:500]}")


class OpenAIServerBackend:
    """Client for an OpenAI-compatible HTTP server.

    Args:
        model_id: the registry id.
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model_name: the model name the server expects in requests.
        stop: the model's own stop strings, added to chat requests.
        chat_template: the template used by :meth:`apply_chat_template` (the server applies
            its own for ``chat``); ``None`` asks the server (llama.cpp's ``/props``).
        max_concurrency: requests in flight at once.
        timeout_s: per-request read timeout (generation time); connecting has its own 10 s.
        max_retries: retries on 429/5xx/refused connections, with backoff ``backoff_s * 2**k``.
        api_key_env: environment variable holding a bearer token, if the server needs one.
    """

    def __init__(self, model_id: str, base_url: str, model_name: str, *,
                 stop: tuple[str, ...] = (), chat_template: str | None = None,
                 max_concurrency: int = 4, timeout_s: float = 120.0, max_retries: int = 3,
                 backoff_s: float = 0.5, api_key_env: str | None = None,
                 template_from_server: bool = True) -> None:
        import httpx

        self.model_id = model_id
        self.base_url = base_url.rstrip("/")
        self.model_name = model_name
        self._stop = tuple(stop)
        self._template = chat_template
        self._ask_server = chat_template is None and template_from_server
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        headers = {}
        if api_key_env:
            headers["Authorization"] = f"Bearer {os.environ.get(api_key_env, '')}"
        self._client = httpx.Client(
            headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0),
            limits=httpx.Limits(max_connections=max_concurrency))

    # -- generation ----------------------------------------------------------------------------
    def complete(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        """Raw completions via ``/completions``."""
        bodies = [[request_body(self.model_name, params, params.sample_seed(i), prompt=p)
                   for i in range(params.n)] for p in prompts]
        return self._run("/completions", bodies, chat=False)

    def chat(self, conversations: list[Conversation],
             params: SamplingParams) -> list[list[Completion]]:
        """Chat completions via ``/chat/completions`` (the server applies its template)."""
        stop = list(dict.fromkeys([*params.stop, *self._stop]))
        bodies = [[request_body(self.model_name, params, params.sample_seed(i), messages=c,
                                stop=stop) for i in range(params.n)] for c in conversations]
        return self._run("/chat/completions", bodies, chat=True)

    def _run(self, route: str, bodies: list[list[dict]], *, chat: bool) -> list[list[Completion]]:
        flat = [(i, j, body) for i, row in enumerate(bodies) for j, body in enumerate(row)]
        results: list[list[Completion | None]] = [[None] * len(row) for row in bodies]
        if not flat:
            return results  # type: ignore[return-value]
        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            futures = [(i, j, pool.submit(self._post, route, body, chat)) for i, j, body in flat]
            try:
                for i, j, future in futures:
                    results[i][j] = future.result()
            except BackendError:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
        return results  # type: ignore[return-value]

    def _post(self, route: str, body: dict, chat: bool) -> Completion:
        import httpx

        url = self.base_url + route
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                response = self._client.post(url, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if last:
                    raise BackendError(
                        f"cannot reach the OpenAI-compatible server for model {self.model_id!r} "
                        f"at {self.base_url} ({type(exc).__name__}: {exc}); is it running? e.g. "
                        f"`vllm serve <model>` or `python -m llama_cpp.server --model <gguf>`"
                    ) from exc
                self._sleep(attempt, None)
                continue
            except httpx.TimeoutException:
                return Completion.failed(f"timeout: no answer from {url} within {self.timeout_s}s")
            except httpx.HTTPError as exc:
                return Completion.failed(f"{type(exc).__name__}: {exc}")
            if response.status_code in RETRY_STATUS and not last:
                log.info("%s answered %d; retry %d", url, response.status_code, attempt + 1)
                self._sleep(attempt, response.headers.get("retry-after"))
                continue
            if response.status_code != 200:
                return Completion.failed(f"HTTP {response.status_code} from {url}: "
                                         f"{response.text[:500]}")
            try:
                return parse_response(response.json(), chat=chat)
            except ValueError:
                return Completion.failed(f"non-JSON answer from {url}: {response.text[:500]}")
        raise AssertionError("unreachable")

    def _sleep(self, attempt: int, retry_after: str | None) -> None:
        delay = self.backoff_s * 2**attempt
        if retry_after:
            try:
                delay = max(delay, float(retry_after))
            except ValueError:
                pass  # an HTTP date: keep our own backoff
        time.sleep(delay)

    # -- prompts -------------------------------------------------------------------------------
    def _root(self) -> str:
        return self.base_url.removesuffix("/v1")

    def chat_template(self) -> str | None:
        """The registry's template, else what the server reports (llama.cpp ``/props``)."""
        if self._template is None and self._ask_server:
            self._ask_server = False  # ask once
            try:
                response = self._client.get(self._root() + "/props", timeout=10.0)
                if response.status_code == 200:
                    self._template = response.json().get("chat_template") or None
            except Exception as exc:  # noqa: BLE001 - optional capability probe
                log.info("no chat template from %s/props: %s", self._root(), exc)
        return self._template

    def apply_chat_template(self, messages: Conversation,
                            add_generation_prompt: bool = True) -> str:
        """Render messages with :meth:`chat_template` (for raw-completion Magpie prompts)."""
        template = self.chat_template()
        if template is None:
            raise ChatTemplateError(
                f"model {self.model_id!r}: the server does not report a chat template; set "
                "chat_template in the registry entry (chat_template_source: registry)")
        return render_chat_template(template, messages,
                                    add_generation_prompt=add_generation_prompt)

    def tokenize(self, text: str) -> list[int]:
        """Token ids via the server's tokenize route (vLLM, llama.cpp), where it has one."""
        for path, body in (("/tokenize", {"model": self.model_name, "prompt": text,
                                          "content": text, "add_special": False}),
                           ("/extras/tokenize", {"input": text})):
            try:
                response = self._client.post(self._root() + path, json=body, timeout=10.0)
            except Exception as exc:  # noqa: BLE001 - try the next dialect
                log.debug("tokenize via %s failed: %s", path, exc)
                continue
            if response.status_code == 200:
                return list(response.json()["tokens"])
        raise NotImplementedError(f"{self.base_url}: the server has no tokenize route")

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()
