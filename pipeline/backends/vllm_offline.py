"""vLLM's offline engine (``vllm.LLM``) for GPU runs; installed only with the ``vllm`` extra.

``vllm`` is imported inside :class:`VllmBackend` so this module imports anywhere. The
translation (:func:`vllm_sampling_kwargs`) and parsing (:func:`parse_request_output`) are pure
functions with unit tests; the engine call itself is one line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from arenaforge.pipeline.backends.base import (
    BackendError,
    Completion,
    Conversation,
    LogprobReading,
    SamplingParams,
)
from arenaforge.pipeline.backends.chat_template import ChatTemplateError
from arenaforge.pipeline.backends.rendered_chat import RenderedChat, add_bos


def vllm_sampling_kwargs(params: SamplingParams, seed: int | None,
                         stop: list[str]) -> dict[str, Any]:
    """Keyword arguments of one ``vllm.SamplingParams`` (one sample; see :class:`VllmBackend`).

    >>> vllm_sampling_kwargs(SamplingParams(max_tokens=9), 7, ["\\n"])["seed"]
    7
    """
    return {"n": 1, "temperature": params.temperature, "top_p": params.top_p,
            "max_tokens": params.max_tokens, "stop": stop or None, "seed": seed,
            "top_k": -1, "min_p": 0.0}


def parse_request_output(output: Any) -> Completion:
    """First sample of a ``vllm.RequestOutput`` as a :class:`Completion`.

    vLLM reports ``finish_reason`` ``stop``, ``length`` or ``abort``; an aborted request failed.
    """
    sample = output.outputs[0]
    prompt_tokens = len(output.prompt_token_ids or ())
    if sample.finish_reason not in ("stop", "length"):
        return Completion(text=sample.text, finish_reason="error", prompt_tokens=prompt_tokens,
                          completion_tokens=len(sample.token_ids),
                          error=f"vllm finish_reason={sample.finish_reason!r}")
    return Completion(text=sample.text, finish_reason=sample.finish_reason,
                      prompt_tokens=prompt_tokens, completion_tokens=len(sample.token_ids))


def logprob_sampling_kwargs(top_k: int) -> dict[str, Any]:
    """``vllm.SamplingParams`` of a next-token reading: one greedy token with its top-k.

    vLLM computes the returned logprobs from the raw logits (``logprobs_mode`` defaults to
    ``raw_logprobs``), before temperature or any logits processor.
    """
    return {"n": 1, "max_tokens": 1, "temperature": 0.0, "logprobs": top_k}


def reading_from_request_output(output: Any, token_of: Mapping[str, int]) -> LogprobReading:
    """A next-token reading from a ``vllm.RequestOutput`` of :func:`logprob_sampling_kwargs`.

    ``output.outputs[0].logprobs[0]`` maps token id -> ``Logprob(logprob, rank,
    decoded_token)`` for the top k (and the sampled) tokens of the first generated position;
    a candidate token outside them reads ``-inf`` (its probability is below the k-th's).

    Args:
        output: one ``RequestOutput``.
        token_of: candidate text -> its token id, for the candidates that are one token.
    """
    sample = output.outputs[0]
    positions = sample.logprobs
    if not positions:
        return None, f"vllm returned no logprobs (finish_reason={sample.finish_reason!r})"
    top = positions[0]
    return {text: (top[tok].logprob if tok in top else -math.inf)
            for text, tok in token_of.items()}, None


class VllmBackend(RenderedChat):
    """Offline vLLM engine.

    Each of the ``n`` samples of a prompt is its own request with seed ``seed + i`` (vLLM's
    prefix cache makes the repeated prompt nearly free), so samples replay one by one exactly
    as in the other backends.

    Args:
        model_id: the registry id.
        model: a local HF model directory (or any name vLLM resolves offline).
        n_ctx: ``max_model_len``.
        stop: the model's own stop strings, added to chat requests.
        chat_template: overrides the tokenizer's template.
        logprobs_top_k: top tokens read by :meth:`next_token_logprobs` (at most the engine's
            ``max_logprobs``, 20 by default).
        **engine_kwargs: passed to ``vllm.LLM`` (``gpu_memory_utilization``,
            ``tensor_parallel_size``, ``dtype``...).
    """

    prefers_batches = True  # one engine step serves the batch; its prefix cache is global

    def __init__(self, model_id: str, model: str, *, n_ctx: int = 4096,
                 stop: tuple[str, ...] = (), chat_template: str | None = None,
                 seed: int = 0, logprobs_top_k: int = 20, **engine_kwargs: Any) -> None:
        try:
            import vllm
        except ImportError as exc:
            raise BackendError(
                f"model {model_id!r} uses backend 'vllm', but vLLM is not importable ({exc}); "
                "install the vllm extra in its own environment (vLLM pins its own torch)"
            ) from exc

        self._vllm = vllm
        self.model_id = model_id
        self._stop = tuple(stop)
        self.logprobs_top_k = logprobs_top_k
        self.context_length = n_ctx
        self.llm = vllm.LLM(model=model, max_model_len=n_ctx, seed=seed, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._template = chat_template or getattr(self.tokenizer, "chat_template", None)
        self._bos = self.tokenizer.bos_token or ""
        self._eos = self.tokenizer.eos_token or ""

    def _generate(self, prompts: list[str], params: SamplingParams,
                  stop: list[str]) -> list[list[Completion]]:
        # Token ids, not text: vLLM would add a BOS to a template that already wrote one.
        ids = [self.tokenizer.encode(p, add_special_tokens=add_bos(p, self._bos)) for p in prompts]
        requests = [{"prompt_token_ids": t} for t in ids for _ in range(params.n)]
        sampling = [self._vllm.SamplingParams(**vllm_sampling_kwargs(params, params.sample_seed(i),
                                                                     stop))
                    for _ in prompts for i in range(params.n)]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        flat = [parse_request_output(o) for o in outputs]
        return [flat[k * params.n:(k + 1) * params.n] for k in range(len(prompts))]

    def next_token_logprobs(self, conversations: list[Conversation], candidates: Sequence[str],
                            prefill: str = "") -> list[LogprobReading]:
        """See :class:`arenaforge.pipeline.backends.base.LogprobBackend` (top ``logprobs_top_k`` tokens;
        a single-token candidate outside them reads ``-inf``)."""
        token_of: dict[str, int] = {}
        for text in candidates:
            ids = self.tokenize(text)
            if len(ids) == 1 and ids[0] not in token_of.values():
                token_of[text] = ids[0]
        out: list[LogprobReading | None] = [None] * len(conversations)
        requests: dict[int, dict] = {}
        for i, conversation in enumerate(conversations):
            try:
                prompt = self.apply_chat_template(conversation) + prefill
            except ChatTemplateError as exc:
                out[i] = (None, str(exc))
                continue
            ids = self.tokenizer.encode(prompt, add_special_tokens=add_bos(prompt, self._bos))
            requests[i] = {"prompt_token_ids": ids}
        if requests:
            sampling = self._vllm.SamplingParams(**logprob_sampling_kwargs(self.logprobs_top_k))
            outputs = self.llm.generate(list(requests.values()), sampling, use_tqdm=False)
            for i, output in zip(requests, outputs, strict=True):
                out[i] = reading_from_request_output(output, token_of)
        return out  # type: ignore[return-value]

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def close(self) -> None:
        self.llm = None
