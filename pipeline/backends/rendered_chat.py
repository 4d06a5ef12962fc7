"""Shared chat and prompt methods of the engines that complete raw text (llama.cpp, vLLM,
transformers): chat renders the conversation with the model's template, then completes it."""

from __future__ import annotations

from arenaforge.pipeline.backends.base import Completion, Conversation, SamplingParams, merged_stop
from arenaforge.pipeline.backends.chat_template import (
    ChatTemplateError,
    chat_by_rendering,
    render_chat_template,
)


class RenderedChat:
    """Mixin: ``complete``, ``chat``, ``chat_template`` and ``apply_chat_template`` on top of
    one engine method, ``_generate(prompts, params, stop) -> list[list[Completion]]``.

    The engine class sets ``model_id``, ``_template`` (``None``: no chat template), ``_stop``
    (the model's own stop strings, added to chat requests) and ``_bos``/``_eos`` (token text
    the template may write).
    """

    model_id: str
    _template: str | None = None
    _stop: tuple[str, ...] = ()
    _bos: str = ""
    _eos: str = ""

    def _generate(self, prompts: list[str], params: SamplingParams,
                  stop: list[str]) -> list[list[Completion]]:
        raise NotImplementedError

    def complete(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        """Raw text completion (Magpie mining): stops only on ``params.stop`` and end-of-text."""
        return self._generate(list(prompts), params, list(params.stop))

    def chat(self, conversations: list[Conversation],
             params: SamplingParams) -> list[list[Completion]]:
        """Render each conversation, then complete it; also stops on the model's stops."""
        stop = merged_stop(params, self._stop)
        return chat_by_rendering(self.apply_chat_template,
                                 lambda prompts: self._generate(prompts, params, stop),
                                 conversations, params.n)

    def chat_template(self) -> str | None:
        """The Jinja chat template in use, ``None`` for base models."""
        return self._template

    def apply_chat_template(self, messages: Conversation,
                            add_generation_prompt: bool = True) -> str:
        """Render messages exactly as the model is fed them (BOS text included if the template
        writes it)."""
        if self._template is None:
            raise ChatTemplateError(f"model {self.model_id!r} has no chat template "
                                    "(a base model); use complete() with raw text")
        return render_chat_template(self._template, messages,
                                    add_generation_prompt=add_generation_prompt,
                                    bos_token=self._bos, eos_token=self._eos)


def add_bos(prompt: str, bos: str) -> bool:
    """Whether the tokenizer should add BOS: not when the rendered template already wrote it.

    >>> add_bos("<bos><start_of_turn>user", "<bos>"), add_bos("<|im_start|>user", "")
    (False, True)
    """
    return not (bos and prompt.startswith(bos))
