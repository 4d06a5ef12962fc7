"""A local Hugging Face model directory run with ``transformers`` (CPU or GPU, unbatched).

Slow next to llama.cpp on CPU; it is here for checkpoints that have no GGUF yet, such as a
model just fine-tuned by ``arenaforge train``. ``torch`` and ``transformers`` are imported
inside the class.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arenaforge.pipeline.backends.base import Completion, SamplingParams, truncate_at_stop
from arenaforge.pipeline.backends.chat_template import template_from_hf_dir
from arenaforge.pipeline.backends.rendered_chat import RenderedChat, add_bos


def generate_kwargs(params: SamplingParams) -> dict[str, Any]:
    """``model.generate`` keyword arguments for one sample.

    Greedy when ``temperature == 0`` (HF rejects temperature 0 with sampling on); top-k is
    switched off (HF's default is 50) to keep OpenAI semantics.

    >>> generate_kwargs(SamplingParams(max_tokens=4))
    {'max_new_tokens': 4, 'do_sample': False}
    """
    if params.temperature == 0:
        return {"max_new_tokens": params.max_tokens, "do_sample": False}
    return {"max_new_tokens": params.max_tokens, "do_sample": True,
            "temperature": params.temperature, "top_p": params.top_p, "top_k": 0}


def parse_generation(text: str, new_token_ids: Sequence[int], eos_ids: Sequence[int],
                     stop: Sequence[str], max_tokens: int, prompt_tokens: int) -> Completion:
    """Decoded new tokens as a :class:`Completion`: cut at a stop string, name why it ended.

    >>> parse_generation("x = 1\\n\\nfoo", [1, 2, 3], [0], ["\\n\\n"], 3, 5).text
    'x = 1'
    """
    text, hit = truncate_at_stop(text, stop)
    ended = hit or (len(new_token_ids) > 0 and new_token_ids[-1] in eos_ids)
    reason = "stop" if ended or len(new_token_ids) < max_tokens else "length"
    return Completion(text=text, finish_reason=reason, prompt_tokens=prompt_tokens,
                      completion_tokens=len(new_token_ids))


class TransformersBackend(RenderedChat):
    """``AutoModelForCausalLM`` over a local directory.

    Args:
        model_id: the registry id.
        model_dir: the HF model directory (config, tokenizer, safetensors).
        stop: the model's own stop strings, added to chat requests.
        chat_template: overrides the directory's template.
        n_threads: torch intra-op threads (``None``: leave torch's setting).
        device: torch device.
        torch_dtype: passed to ``from_pretrained``.
    """

    def __init__(self, model_id: str, model_dir: str | Path, *, stop: tuple[str, ...] = (),
                 chat_template: str | None = None, n_threads: int | None = None,
                 device: str = "cpu", torch_dtype: str = "auto") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if n_threads:
            torch.set_num_threads(n_threads)
        self._torch = torch
        self.model_id = model_id
        self._stop = tuple(stop)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype)
        self.model.to(device).eval()
        self._device = device
        self._template = chat_template or template_from_hf_dir(model_dir)
        self._bos = self.tokenizer.bos_token or ""
        self._eos = self.tokenizer.eos_token or ""
        eos = self.model.generation_config.eos_token_id
        self._eos_ids = [eos] if isinstance(eos, int) else list(eos or [])

    def _generate_one(self, prompt: str, params: SamplingParams, seed: int | None,
                      stop: list[str]) -> Completion:
        inputs = self.tokenizer(prompt, return_tensors="pt",
                                add_special_tokens=add_bos(prompt, self._bos))
        inputs = inputs.to(self._device)
        if seed is not None:
            self._torch.manual_seed(seed)
        pad = self.tokenizer.pad_token_id
        with self._torch.inference_mode():
            out = self.model.generate(**inputs, **generate_kwargs(params),
                                      pad_token_id=pad if pad is not None else self._eos_ids[0],
                                      stop_strings=stop or None, tokenizer=self.tokenizer)
        n_prompt = inputs["input_ids"].shape[1]
        new_ids = out[0, n_prompt:].tolist()
        text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        return parse_generation(text, new_ids, self._eos_ids, stop, params.max_tokens, n_prompt)

    def _generate(self, prompts: list[str], params: SamplingParams,
                  stop: list[str]) -> list[list[Completion]]:
        results = []
        for prompt in prompts:
            row = []
            for i in range(params.n):
                try:
                    row.append(self._generate_one(prompt, params, params.sample_seed(i), stop))
                except (RuntimeError, ValueError) as exc:  # OOM, over-long prompt: a value
                    row.append(Completion.failed(f"{type(exc).__name__}: {exc}"))
            results.append(row)
        return results

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def close(self) -> None:
        self.model = None
