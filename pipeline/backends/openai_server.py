"""Any OpenAI-compatible server: ``vllm serve``, llama.cpp's server, SGLang, llama-cpp-python.

Requests go out concurrently: up to ``max_concurrency`` in flight on each server of the model
(``base_url`` and its ``replicas``, see :mod:`arenaforge.pipeline.backends.server_pool`), enough to keep
a continuous-batching server's slots full. Every call of every thread shares those slots.

Failures (retries, servers that are down, answers that are not what was asked for) are
handled per request by :mod:`arenaforge.pipeline.backends.openai_requests`: one
request's fault costs that request its retries and then its own row, never its batch.

With ``n > 1`` each sample is its own request with seed ``seed + i``: not every server honours
``n`` (llama.cpp's does not), and per-sample seeds keep samples replayable one by one, as in the
other backends.

Logprob readings (the judges' and the difficulty scorer's one-token completions, most of a
run's requests) may travel several to a request: ``prompts_per_request > 1`` sends a list
``prompt``, which ``vllm serve`` answers with one choice per prompt, in order (its
``serving_completion.py``; other servers: check before you set it), and schedules as one
batch. At a million readings a run, the HTTP round trip and JSON of each request (~1 ms of CPU
on each end) is what a reading costs once the engine is fast.
llama-cpp-python's server takes a one-element list only, so the default is one prompt per
request.

Raw prompts (Magpie mining, the logprob protocols) are rendered on the client with the model's
chat template, read from the files the registry names (:mod:`arenaforge.pipeline.backends.template_source`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from arenaforge.pipeline.backends.base import (
    BackendError,
    Completion,
    Conversation,
    LogprobReading,
    SamplingParams,
)
from arenaforge.pipeline.backends.chat_template import ChatTemplateError, render_chat_template
from arenaforge.pipeline.backends.openai_logprobs import (
    logprob_body,
    reading_from_top,
    single_tokens_from_counts,
    top_logprobs,
)
from arenaforge.pipeline.backends.openai_requests import Check, RequestSender
from arenaforge.pipeline.backends.server_pool import ServerPool

log = logging.getLogger(__name__)
T = TypeVar("T")


class TokenizeFailed(BackendError):
    """The tokenize route kept failing after its retries (one request's fault: the readings
    that needed it fail, and the next call asks again)."""


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


def completion_problem(data: dict[str, Any], *, chat: bool) -> str | None:
    """Why a 200 completion answer is asked again: malformed, or an empty completion (what a
    server that dropped the generation answers; a model that means it says it again).

    >>> completion_problem({"choices": [{"text": ""}]}, chat=False)
    'empty completion'
    >>> completion_problem({"choices": [{"text": "x"}]}, chat=False) is None
    True
    """
    completion = parse_response(data, chat=chat)
    if completion.error is not None:
        return completion.error
    return None if completion.text else "empty completion"


def logprob_problem(data: dict[str, Any], prompt: str | list[str]) -> str | None:
    """Why a 200 answer to a logprob request for ``prompt`` (one, or a list) is asked again:
    a choice missing, or one without log probabilities.

    >>> logprob_problem({"choices": [{"text": "A"}]}, "Score: ")[:31]
    'the server returned no logprobs'
    """
    parts = per_prompt(data, len(prompt)) if isinstance(prompt, list) else [data]
    for part in parts:
        if "error" in part:
            return part["error"]
        try:
            top_logprobs(part)
        except ValueError as exc:
            return str(exc)
    return None


def per_prompt(data: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """A list-``prompt`` completions answer split into one single-choice answer per prompt.

    Choices are matched to prompts by ``index`` (vLLM numbers them in prompt order). An answer
    with another number of choices than prompts (a server that read one prompt of the list)
    gives each prompt ``{"choices": [], "error": why}`` instead.

    >>> [a["choices"][0]["text"] for a in per_prompt(
    ...     {"choices": [{"index": 1, "text": "b"}, {"index": 0, "text": "a"}]}, 2)]
    ['a', 'b']
    >>> per_prompt({"choices": [{"index": 0, "text": "a"}]}, 2)[1]["choices"]
    []
    """
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or len(choices) != n:
        got = len(choices) if isinstance(choices, list) else "no"
        note = {"choices": [], "error": f"{got} choices for a request of {n} prompts (does the "
                "server take a list prompt? options.prompts_per_request: 1 sends one each)"}
        return [note] * n
    ordered = sorted(choices, key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
    return [{"choices": [c]} for c in ordered]


class OpenAIServerBackend:
    """Client for one model on OpenAI-compatible HTTP servers.

    Args:
        model_id: the registry id.
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model_name: the model name the servers expect in requests.
        replicas: API roots of more servers of the same model; requests go to the least busy.
        stop: the model's own stop strings, added to chat requests.
        chat_template: the template used by :meth:`apply_chat_template` (the server applies
            its own for ``chat``); ``None`` asks the server (llama.cpp's ``/props``) when
            ``template_from_server``.
        bos_token, eos_token: the token texts the template may write.
        strip_bos: the server's tokenizer adds BOS itself, so a leading BOS text is cut from
            raw prompts (else the model would see two).
        max_concurrency: requests in flight at once on each server.
        timeout_s: per-request read timeout (generation time); connecting has its own 10 s.
        max_retries: retries of a request answered 429/500, timed out, or answered with
            something else than was asked for, with backoff ``backoff_s * 2**k``.
        down_wait_s: how long requests wait for a server that is down to come back.
        logprobs_top_k: ``logprobs`` asked for by :meth:`next_token_logprobs` (vLLM's default
            ``--max-logprobs`` is 20).
        api_key_env: environment variable holding a bearer token, if the server needs one.
        prompts_per_request: logprob readings per ``/completions`` request, at most (fewer
            when a call's readings would not reach every replica); needs a server that answers
            a list ``prompt`` with one choice per prompt (``vllm serve``).
    """

    # A batch of requests goes out concurrently and the server caches shared prompt
    # prefixes itself (vLLM's automatic prefix caching, llama-server's slots): callers send
    # whole batches rather than ordering single requests for prefix reuse.
    prefers_batches = True

    def __init__(self, model_id: str, base_url: str, model_name: str, *,
                 replicas: Sequence[str] = (), stop: tuple[str, ...] = (),
                 chat_template: str | None = None, template_from_server: bool = True,
                 bos_token: str = "", eos_token: str = "", strip_bos: bool = False,
                 max_concurrency: int = 4, timeout_s: float = 120.0, max_retries: int = 3,
                 backoff_s: float = 0.5, down_wait_s: float = 60.0, logprobs_top_k: int = 20,
                 api_key_env: str | None = None, prompts_per_request: int = 1) -> None:
        from arenaforge.pipeline.backends.http_client import HttpClient

        if int(prompts_per_request) < 1:
            raise ValueError(f"model {model_id!r}: options.prompts_per_request: "
                             f"{prompts_per_request!r}, need >= 1")

        self.model_id = model_id
        self._pool = ServerPool([base_url, *replicas], max_concurrency)
        self.base_url = self._pool.servers[0].url
        self.model_name = model_name
        self._stop = tuple(stop)
        self._template = chat_template
        self._ask_server = chat_template is None and template_from_server
        self._bos, self._eos, self._strip_bos = bos_token, eos_token, strip_bos
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.down_wait_s = down_wait_s
        self.logprobs_top_k = logprobs_top_k
        self.prompts_per_request = int(prompts_per_request)
        headers = {}
        if api_key_env:
            headers["Authorization"] = f"Bearer {os.environ.get(api_key_env, '')}"
        self._client = HttpClient(headers, timeout_s=timeout_s, connect_s=10.0,
                                  per_server=max_concurrency)
        self._sender = RequestSender(model_id, self._pool, self._client, timeout_s=timeout_s,
                                     max_retries=max_retries, backoff_s=backoff_s,
                                     down_wait_s=down_wait_s)
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._singles: dict[tuple[str, ...], set[str] | None] = {}
        self._tokenize_route: tuple[str, Callable[[str], dict]] | None = None

    # -- generation ----------------------------------------------------------------------------
    def complete(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        """Raw completions via ``/completions``."""
        bodies = [[request_body(self.model_name, params, params.sample_seed(i),
                                prompt=self._wire_prompt(p))
                   for i in range(params.n)] for p in prompts]
        return self._completions("/completions", bodies, chat=False)

    def chat(self, conversations: list[Conversation],
             params: SamplingParams) -> list[list[Completion]]:
        """Chat completions via ``/chat/completions`` (the server applies its template)."""
        stop = list(dict.fromkeys([*params.stop, *self._stop]))
        bodies = [[request_body(self.model_name, params, params.sample_seed(i), messages=c,
                                stop=stop) for i in range(params.n)] for c in conversations]
        return self._completions("/chat/completions", bodies, chat=True)

    def next_token_logprobs(self, conversations: list[Conversation], candidates: Sequence[str],
                            prefill: str = "") -> list[LogprobReading]:
        """See :class:`arenaforge.pipeline.backends.base.LogprobBackend`: one greedy token per prompt
        with ``logprobs`` (:mod:`arenaforge.pipeline.backends.openai_logprobs`); single-token candidates
        outside the server's top ``logprobs_top_k`` read ``-inf``."""
        candidates = list(candidates)
        try:
            singles = self._single_tokens(candidates)
        except TokenizeFailed as exc:  # that request's fault: these readings fail, not the run
            return [(None, str(exc))] * len(conversations)
        prompts: dict[int, str] = {}
        out: list[LogprobReading | None] = [None] * len(conversations)
        for i, conversation in enumerate(conversations):
            try:
                prompts[i] = self.apply_chat_template(conversation) + prefill
            except ChatTemplateError as exc:
                out[i] = (None, str(exc))

        def parse(data: dict) -> LogprobReading:
            try:
                return reading_from_top(top_logprobs(data), candidates, singles), None
            except (ValueError, KeyError, TypeError) as exc:
                return None, str(exc)

        texts = [self._wire_prompt(p) for p in prompts.values()]
        size = self._prompts_per_body(len(texts))
        chunks = [texts[s:s + size] for s in range(0, len(texts), size)]
        bodies = [logprob_body(self.model_name, chunk[0] if size == 1 else chunk,
                               self.logprobs_top_k) for chunk in chunks]
        answers = self._run("/completions", bodies, lambda data: data, lambda error: error,
                            lambda body, data: logprob_problem(data, body["prompt"]))
        readings: list[LogprobReading] = []
        for chunk, answer in zip(chunks, answers, strict=True):
            if isinstance(answer, str):  # the request failed: every prompt of it did
                readings += [(None, answer)] * len(chunk)
            elif size == 1:
                readings.append(parse(answer))
            else:
                readings += [(None, part["error"]) if "error" in part else parse(part)
                             for part in per_prompt(answer, len(chunk))]
        for i, reading in zip(prompts, readings, strict=True):
            out[i] = reading
        return out  # type: ignore[return-value]

    def _prompts_per_body(self, n: int) -> int:
        """Prompts per logprob request for a call of ``n``: at most ``prompts_per_request``,
        and few enough that every server of the model (``base_url`` and replicas) gets some."""
        return max(1, min(self.prompts_per_request, -(-n // len(self._pool.servers))))

    def _wire_prompt(self, prompt: str) -> str:
        if self._strip_bos and self._bos and prompt.startswith(self._bos):
            return prompt[len(self._bos):]
        return prompt

    def _completions(self, route: str, bodies: list[list[dict]], *,
                     chat: bool) -> list[list[Completion]]:
        flat = self._run(route, [b for row in bodies for b in row],
                         lambda data: parse_response(data, chat=chat), Completion.failed,
                         lambda body, data: completion_problem(data, chat=chat))
        out, k = [], 0
        for row in bodies:
            out.append(flat[k:k + len(row)])
            k += len(row)
        return out

    def _run(self, route: str, bodies: list[dict], parse: Callable[[dict], T],
             fail: Callable[[str], T], check: Check | None = None) -> list[T]:
        """POST every body (in order, all servers' slots shared); parse answers or failures.
        ``check(body, answer)``: why a 200 answer is asked again (``openai_requests``)."""
        if not bodies:
            return []
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=self._pool.capacity,
                                                    thread_name_prefix=f"openai-{self.model_id}")
            executor = self._executor
        futures: list[Future] = [executor.submit(self._sender.post, route, body, check)
                                 for body in bodies]
        results: list[T] = []
        try:
            for future in futures:
                answer = future.result()
                results.append(fail(answer) if isinstance(answer, str) else parse(answer))
        except BackendError:
            for future in futures:
                future.cancel()
            raise
        return results

    def server_stats(self) -> dict[str, int]:
        """Requests sent to each server so far (this process), by URL."""
        return self._pool.stats()

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
        """Render messages with :meth:`chat_template` (Magpie prompts, logprob readings)."""
        template = self.chat_template()
        if template is None:
            raise ChatTemplateError(
                f"model {self.model_id!r}: no chat template on the client and the server does "
                "not report one; set `tokenizer` (a GGUF file or tokenizer directory) or "
                "`chat_template` in the registry entry")
        return render_chat_template(template, messages,
                                    add_generation_prompt=add_generation_prompt,
                                    bos_token=self._bos, eos_token=self._eos)

    def tokenize(self, text: str) -> list[int]:
        """Token ids via the server's tokenize route (vLLM, llama.cpp), where it has one.

        llama-cpp-python's route adds the BOS token when the model does. Requests are retried
        as generation requests are; a route that answers 4xx or no tokens is not the
        server's, but one that keeps failing (500, timeouts) raises: taking it for a missing
        route would read every logprob candidate as one token in this process.

        Raises:
            NotImplementedError: the server has no tokenize route.
            TokenizeFailed: the route kept failing after its retries.
        """
        dialects: list[tuple[str, Callable[[str], dict]]] = [
            ("/tokenize", lambda t: {"model": self.model_name, "prompt": t, "content": t,
                                     "add_special": False, "add_special_tokens": False}),
            ("/extras/tokenize", lambda t: {"input": t})]
        if self._tokenize_route is not None:
            dialects = [self._tokenize_route]
        for path, make in dialects:
            answer = self._sender.post(path, make(text), api=False)
            if isinstance(answer, str) and answer.startswith(("timeout", "HTTP 429", "HTTP 500")):
                raise TokenizeFailed(f"model {self.model_id!r}: tokenize failed after "
                                     f"{self.max_retries} retries: {answer}")
            tokens = answer.get("tokens") if isinstance(answer, dict) else None
            if isinstance(tokens, list):
                self._tokenize_route = (path, make)
                return tokens
            log.debug("tokenize via %s: %s", path, str(answer)[:200])
        raise NotImplementedError(f"{self.base_url}: the server has no tokenize route")

    def _single_tokens(self, candidates: list[str]) -> set[str] | None:
        """The candidates that are one token (``None``: the server cannot tokenize)."""
        key = tuple(sorted(candidates))
        if key not in self._singles:
            try:
                empty = self.tokenize("")
                counts = {c: self.tokenize(c) for c in key}
                self._singles[key] = single_tokens_from_counts(key, counts, empty)
            except NotImplementedError:
                log.info("%s: no tokenize route; every logprob candidate is taken as one token",
                         self.base_url)
                self._singles[key] = None
        return self._singles[key]

    def close(self) -> None:
        """Close the HTTP connections and the request threads."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self._client.close()
