"""The embedded default backend: llama-cpp-python over a GGUF file, on CPU.

llama-cpp-python's high-level API decodes one sequence at a time per context, so a batch is
served by a loop in :meth:`LlamaCppBackend._generate`. That loop is the single place a batched
decoder (several sequences in one ``llama_batch`` with ``n_seq_max`` set) will replace; every
other method renders prompts and translates parameters and stays as it is.

Chat goes through the same raw-completion path as Magpie mining: the conversation is rendered
with the model's own chat template (from the GGUF metadata), so ``apply_chat_template`` shows
exactly the text the model is fed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from arenaforge.pipeline.backends.base import Completion, LogprobReading, SamplingParams
from arenaforge.pipeline.backends.rendered_chat import RenderedChat, add_bos

log = logging.getLogger(__name__)


def llama_sampling_kwargs(params: SamplingParams, seed: int | None) -> dict[str, Any]:
    """Keyword arguments for ``Llama.create_completion`` with OpenAI sampling semantics.

    llama-cpp-python defaults to top-k 40 and min-p 0.05; those are switched off so that
    ``temperature`` and ``top_p`` mean the same here as on an OpenAI-compatible server or vLLM.
    ``temperature == 0`` is greedy decoding in llama.cpp.
    """
    kwargs: dict[str, Any] = {
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": 0,
        "min_p": 0.0,
        "typical_p": 1.0,
        "repeat_penalty": 1.0,
    }
    if seed is not None:
        kwargs["seed"] = seed
    return kwargs


def parse_llama_output(output: dict) -> Completion:
    """A ``create_completion`` result dict as a :class:`Completion`."""
    choice = output["choices"][0]
    usage = output.get("usage") or {}
    reason = "length" if choice.get("finish_reason") == "length" else "stop"
    return Completion(text=choice["text"], finish_reason=reason,
                      prompt_tokens=int(usage.get("prompt_tokens", 0)),
                      completion_tokens=int(usage.get("completion_tokens", 0)))


@functools.cache
def build_has_amx() -> bool:
    """Whether the installed llama.cpp was compiled with AMX kernels (``-march=native`` on a
    Sapphire Rapids class CPU)."""
    import llama_cpp

    return b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info()


_PARAMS_LOCK = threading.Lock()
# Enough for a few judge prompts of the 1.5B model (~28 KB of KV a token): a reading that
# continues a prompt read a few readings before (interleaved callers, round 2) finds it.
DEFAULT_PREFIX_CACHE_BYTES = 128 << 20


@contextlib.contextmanager
def model_params_override(use_extra_bufts: bool) -> Iterator[None]:
    """Make ``Llama.__init__`` load with ``use_extra_bufts`` set as given.

    ``Llama`` takes no argument for this field of ``llama_model_params``; it reads the defaults
    from ``llama_cpp.llama_model_default_params`` inside ``__init__``, so that function is
    wrapped for the duration of one construction.
    """
    import llama_cpp.llama as llama_module

    with _PARAMS_LOCK:
        original = llama_module.llama_cpp.llama_model_default_params

        def patched():
            params = original()
            params.use_extra_bufts = use_extra_bufts
            return params

        llama_module.llama_cpp.llama_model_default_params = patched
        try:
            yield
        finally:
            llama_module.llama_cpp.llama_model_default_params = original


class LlamaCppBackend(RenderedChat):
    """llama-cpp-python backend.

    Args:
        model_id: the registry id, reported on every row.
        model_path: the GGUF file.
        n_ctx: context length (prompt + completion).
        stop: the model's own stop strings, added to every chat request.
        chat_template: a template overriding the GGUF one (``None``: use the GGUF's; ``""``:
            the model has no chat template).
        n_threads: CPU threads for generation and prompt processing (``None``: llama.cpp's
            default). The runner passes the threads it gives each worker.
        seed: the context's seed, used by unseeded requests.
        extra_buffers: let llama.cpp repack weights into its extra CPU buffer types (AMX,
            AVX repacking). ``None``: on, unless the build has AMX kernels: their matmul
            segfaults on the first decode on some hosts (ggml-org/llama.cpp#20824, seen here),
            and turning extra buffers off is the only runtime switch. A build without AMX
            (``GGML_NATIVE=OFF`` plus explicit AVX2/AVX-512 flags) keeps repacking and is faster.
        batch_size: sequences decoded together by the batched path
            (:mod:`arenaforge.pipeline.backends.llamacpp_batch`); ``1``: one at a time. Its KV cache holds
            ``batch_size * n_ctx`` tokens. 16: Qwen 0.5B with one thread decodes 3.1x the
            sequential rate at 16, 2.45x at 8 (``scripts/bench_backends.py --batch``).
        batch_prefix_reuse: let the batched path reuse the KV of partly shared prompts (faster
            for judge pairs; rounds slightly differently from a one-pass prompt, see
            :class:`arenaforge.pipeline.backends.llamacpp_batch.BatchedDecoder`).
        prefix_cache_bytes: KV states of earlier logprob prompts kept for prompts that extend
            them later (:class:`arenaforge.pipeline.backends.llamacpp_logprobs.PrefixStates`);
            ``0``: only the prompt evaluated last is reused.
        **llama_kwargs: passed to ``llama_cpp.Llama`` (``n_batch``, ``n_gpu_layers``, ...).
    """

    def __init__(self, model_id: str, model_path: str | Path, *, n_ctx: int = 4096,
                 stop: tuple[str, ...] = (), chat_template: str | None = None,
                 n_threads: int | None = None, seed: int = 0, extra_buffers: bool | None = None,
                 batch_size: int = 16, batch_prefix_reuse: bool = False,
                 prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES,
                 **llama_kwargs: Any) -> None:
        from llama_cpp import Llama

        self.model_id = model_id
        self._stop = tuple(stop)
        self._lock = threading.Lock()  # a llama context is not thread-safe
        if batch_size < 1:
            raise ValueError(f"LlamaCppBackend.batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.batch_prefix_reuse = batch_prefix_reuse
        self.context_length = n_ctx
        self._batcher = None  # llamacpp_batch.BatchedDecoder, made on first use
        # llamacpp_logprobs: saved prompt states, and what the readings evaluated
        self.prefix_states = None
        if prefix_cache_bytes > 0:
            from arenaforge.pipeline.backends.llamacpp_logprobs import PrefixStates

            self.prefix_states = PrefixStates(prefix_cache_bytes)
        self.logprob_stats = dict.fromkeys(("readings", "prompt_tokens", "evaluated_tokens",
                                            "restored_tokens", "restores"), 0)
        llama_kwargs.setdefault("verbose", False)
        self.extra_buffers = not build_has_amx() if extra_buffers is None else extra_buffers
        with model_params_override(use_extra_bufts=self.extra_buffers):
            self.llm = Llama(model_path=str(model_path), n_ctx=n_ctx, n_threads=n_threads,
                             n_threads_batch=n_threads, seed=seed, **llama_kwargs)
        self._bos = self._token_text(self.llm.token_bos())
        self._eos = self._token_text(self.llm.token_eos())
        template = self.llm.metadata.get("tokenizer.chat_template")
        self._template = template if chat_template is None else (chat_template or None)

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self.llm._model.token_get_text(token)  # what llama-cpp-python itself renders with

    # -- prompts -------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token text (``<|im_start|>``) maps to its id."""
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def _prompt_tokens(self, prompt: str) -> list[int]:
        # add_bos=True lets the model's own add-BOS setting decide.
        return self.llm.tokenize(prompt.encode("utf-8"), add_bos=add_bos(prompt, self._bos),
                                 special=True)

    # -- generation ----------------------------------------------------------------------------
    def _generate(self, prompts: list[str], params: SamplingParams,
                  stop: list[str]) -> list[list[Completion]]:
        if self.batch_size > 1 and len(prompts) * params.n > 1:
            batched = self._generate_batched(prompts, params, stop)
            if batched is not None:  # None: this model or library cannot batch
                return batched
        # One sequence at a time (see module docstring); sample i of n uses seed + i.
        return [[self._generate_one(prompt, params, params.sample_seed(i), stop)
                 for i in range(params.n)] for prompt in prompts]

    def _generate_batched(self, prompts: list[str], params: SamplingParams,
                          stop: list[str]) -> list[list[Completion]] | None:
        """Many sequences in one ``llama_batch`` (``llamacpp_batch``); ``None``: use the
        sequential path.

        The backend keeps its ``BatchedDecoder`` (context memory is reused across calls) in
        ``_batcher``; ``False`` there means batching is not possible for this model.
        """
        from arenaforge.pipeline.backends.llamacpp_batch import (
            BatchedDecoder,
            BatchRequest,
            can_batch,
            sequential_seeds,
        )

        if self._batcher is False:
            return None
        with self._lock:
            if self._batcher is None:
                try:
                    if not can_batch(self.llm):
                        raise RuntimeError("recurrent/hybrid models keep one state per sequence")
                    self._batcher = BatchedDecoder(self.llm, self.batch_size,
                                                   prefix_reuse=self.batch_prefix_reuse)
                except RuntimeError as exc:
                    log.warning("llamacpp %s: batched decoding off (%s); decoding sequentially",
                                self.model_id, exc)
                    self._batcher = False
                    return None
            requests: list[BatchRequest | None] = []
            errors: dict[int, str] = {}
            for prompt in prompts:
                try:
                    tokens = self._prompt_tokens(prompt)
                except (ValueError, RuntimeError) as exc:
                    tokens, errors[len(requests)] = [], f"{type(exc).__name__}: {exc}"
                for _ in range(params.n):
                    requests.append(BatchRequest(tokens, params, 0, stop))
            for req, seed in zip(requests, sequential_seeds(self.llm, params, len(prompts)),
                                 strict=True):
                req.seed = seed
            # per call: a generative judge's two orders share their prompt's start
            self._batcher.prefix_reuse = self.batch_prefix_reuse or params.reuse_prefix
            flat = self._batcher.run(requests)
        for j, message in errors.items():
            for k in range(params.n):
                flat[j + k] = Completion.failed(message)
        return [flat[p * params.n:(p + 1) * params.n] for p in range(len(prompts))]

    def _generate_one(self, prompt: str, params: SamplingParams, seed: int | None,
                      stop: list[str]) -> Completion:
        kwargs = llama_sampling_kwargs(params, seed)
        with self._lock:
            try:
                tokens = self._prompt_tokens(prompt)
                output = self.llm.create_completion(tokens, stop=stop or None, **kwargs)
            except (ValueError, RuntimeError) as exc:
                # Prompt longer than the context, decode failure: this request fails, the
                # batch goes on.
                log.warning("llamacpp %s: request failed: %s", self.model_id, exc)
                return Completion.failed(f"{type(exc).__name__}: {exc}")
        return parse_llama_output(output)

    def next_token_logprobs(self, conversations: list[list[dict[str, str]]],
                            candidates: list[str], prefill: str = "") -> list[LogprobReading]:
        """See :class:`arenaforge.pipeline.backends.base.LogprobBackend`."""
        from arenaforge.pipeline.backends.llamacpp_logprobs import next_token_logprobs

        prompts = [self.apply_chat_template(c, add_generation_prompt=True) + prefill
                   for c in conversations]
        return next_token_logprobs(self, prompts, candidates)

    def forget_prompts(self) -> None:
        """Evaluate every later prompt from scratch: no KV of an earlier one is reused (a
        benchmark's repeated runs start as cold as the first)."""
        with self._lock:
            self.llm.n_tokens = 0
            if self.prefix_states is not None:
                self.prefix_states.clear()
            if self._batcher:
                self._batcher.forget()

    def close(self) -> None:
        """Free the model and context."""
        batcher, self._batcher = getattr(self, "_batcher", None), None
        if batcher:
            batcher.close()  # its context uses the model: free it first
        self.prefix_states = None
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.close()
