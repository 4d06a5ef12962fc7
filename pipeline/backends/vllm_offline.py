"""vLLM's offline engine (``vllm.LLM``) for GPU runs; installed only with the ``vllm`` extra.

``vllm`` is imported inside :class:`VllmBackend` so this module imports anywhere. The
translation (:func:`vllm_sampling_kwargs`) and parsing (:func:`parse_request_output`) are pure
functions with unit tests; the engine call itself is one line.
"""

from __future__ import annotations

from typing import Any

from pipeline.backends.base import BackendError, Completion, Conversation, SamplingParams, merged_stop
from pipeline.backends.chat_template import (
    ChatTemplateError,
    chat_by_rendering,
    render_chat_template,
)


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


class VllmBackend:
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
        **engine_kwargs: passed to ``vllm.LLM`` (``gpu_memory_utilization``,
            ``tensor_parallel_size``, ``dtype``...).
    """

    def __init__(self, model_id: str, model: str, *, n_ctx: int = 4096,
                 stop: tuple[str, ...] = (), chat_template: str | None = None,
                 seed: int = 0, **engine_kwargs: Any) -> None:
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
        self.llm = vllm.LLM(model=model, max_model_len=n_ctx, seed=seed, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._template = chat_template or getattr(self.tokenizer, "chat_template", None)

    def _generate(self, prompts: list[Any], params: SamplingParams,
                  stop: list[str]) -> list[list[Completion]]:
        requests = [p for p in prompts for _ in range(params.n)]
        sampling = [self._vllm.SamplingParams(**vllm_sampling_kwargs(params, params.sample_seed(i),
                                                                     stop))
                    for _ in prompts for i in range(params.n)]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        flat = [parse_request_output(o) for o in outputs]
        return [flat[k * params.n:(k + 1) * params.n] for k in range(len(prompts))]

    def complete(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        """Raw completion."""
        return self._generate(list(prompts), params, list(params.stop))

    def chat(self, conversations: list[Conversation],
             params: SamplingParams) -> list[list[Completion]]:
        """Chat: rendered with the template, tokenised without a second BOS."""
        stop = merged_stop(params, self._stop)
        return chat_by_rendering(
            self.apply_chat_template,
            lambda texts: self._generate([{"prompt_token_ids": self.tokenize(t)} for t in texts],
                                         params, stop),
            conversations, params.n)

    def chat_template(self) -> str | None:
        return self._template

    def apply_chat_template(self, messages: Conversation,
                            add_generation_prompt: bool = True) -> str:
        """Render with the same Jinja environment as every other backend."""
        if self._template is None:
            raise ChatTemplateError(f"model {self.model_id!r} has no chat template")
        return render_chat_template(self._template, messages,
                                    add_generation_prompt=add_generation_prompt,
                                    bos_token=self.tokenizer.bos_token or "",
                                    eos_token=self.tokenizer.eos_token or "")

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def close(self) -> None:
        self.llm = None
