"""Magpie pre-query prompts: a chat rendered up to the header of an open user turn.

Given the model's chat template (any renderer with the ``apply_chat_template`` signature) we
render conversations that end in a sentinel user message and cut at the sentinel, so the prompt
is exactly what the template would produce, special tokens and all. Models without a template
fall back to hand-written turn formats of the known families (ChatML/Qwen, Llama-3, Gemma, Phi-3,
Mistral); anything else is a clear error rather than a guessed format.

Three prompt shapes (``VARIANTS``) are offered because the shape decides whether small models end
the request on their own (measured on Qwen2.5-Coder-0.5B-Instruct with a coding system prompt:
``bare`` ended it in 0 of 24 samples, ``empty_assistant``, the shape distilabel renders for
Qwen, in 19 of 24):

- ``bare``: [system] + open user turn.
- ``empty_assistant``: [system] + a closed, empty assistant turn + open user turn.
- ``open_assistant``: [system] + the generation prompt (assistant header) + user header, i.e. the
  string distilabel's Magpie builds (``apply_chat_template(add_generation_prompt=True) +
  pre_query_template``).

Example::

    >>> fmt = KNOWN_FAMILIES["chatml"]
    >>> print(fmt.prompt("empty_assistant", "You code in Go."))
    <|im_start|>system
    You code in Go.<|im_end|>
    <|im_start|>assistant
    <|im_end|>
    <|im_start|>user
    <BLANKLINE>
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

Render = Callable[[list[dict[str, str]], bool], str]

VARIANTS: tuple[str, ...] = ("bare", "empty_assistant", "open_assistant")

# Sentinels that no template alters (no surrounding whitespace, nothing a `trim` filter touches).
_USER = "\x00MAGPIE_USER\x00"
_FIRST = "\x00MAGPIE_FIRST\x00"
_REPLY = "\x00MAGPIE_REPLY\x00"


class PreQueryError(ValueError):
    """No pre-query prompt can be built (unknown template family, variant the template refuses)."""


@dataclasses.dataclass(frozen=True)
class TurnFormat:
    """Hand-written turn format of a known chat family (used when no chat template is available).

    Attributes:
        family: family name (``chatml``, ``llama3``, ``gemma``, ``phi3``, ``mistral``).
        bos: text the template starts with (BOS token), if the template writes it.
        system: format of a system turn with ``{content}``; ``None`` when the family folds the
            system prompt into the first user message (Gemma, Mistral).
        user_header: what opens a user turn.
        assistant_header: what opens an assistant turn (the generation prompt).
        end_of_turn: what closes an assistant turn.
        stop: strings that end a mined request (end of turn, start of a new turn).
    """

    family: str
    bos: str
    system: str | None
    user_header: str
    assistant_header: str
    end_of_turn: str
    stop: tuple[str, ...]

    def prompt(self, variant: str, system: str | None) -> str:
        """The pre-query prompt for ``variant`` with an optional system prompt."""
        _check_variant(variant)
        head = self.bos
        folded = ""
        if system:
            if self.system is not None:
                head += self.system.format(content=system)
            else:
                folded = system + "\n\n"
        if variant == "empty_assistant":
            head += self.assistant_header + self.end_of_turn
        elif variant == "open_assistant":
            head += self.assistant_header
        return head + self.user_header + folded


KNOWN_FAMILIES: dict[str, TurnFormat] = {
    "chatml": TurnFormat("chatml", "", "<|im_start|>system\n{content}<|im_end|>\n",
                         "<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_end|>\n",
                         ("<|im_end|>", "<|im_start|>", "<|endoftext|>")),
    "llama3": TurnFormat("llama3", "<|begin_of_text|>",
                         "<|start_header_id|>system<|end_header_id|>\n\n{content}<|eot_id|>",
                         "<|start_header_id|>user<|end_header_id|>\n\n",
                         "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>",
                         ("<|eot_id|>", "<|start_header_id|>", "<|end_of_text|>")),
    "gemma": TurnFormat("gemma", "<bos>", None, "<start_of_turn>user\n",
                        "<start_of_turn>model\n", "<end_of_turn>\n",
                        ("<end_of_turn>", "<start_of_turn>", "<eos>")),
    "phi3": TurnFormat("phi3", "", "<|system|>\n{content}<|end|>\n", "<|user|>\n",
                       "<|assistant|>\n", "<|end|>\n",
                       ("<|end|>", "<|user|>", "<|assistant|>", "<|endoftext|>")),
    "mistral": TurnFormat("mistral", "<s>", None, "[INST] ", "", "</s>",
                          ("[/INST]", "[INST]", "</s>")),
}
# Registry family names that share a format.
_ALIASES = {"qwen": "chatml", "qwen2": "chatml", "qwen2.5": "chatml", "smollm": "chatml",
            "smollm2": "chatml", "llama-3": "llama3", "llama": "llama3", "gemma2": "gemma",
            "gemma3": "gemma", "phi": "phi3", "phi-3": "phi3", "phi3.5": "phi3"}

# The variant that kept the most requests per model family: each variant mined (``mine.template``
# set to it) with Magpie's coding system prompt for Python, temperature 1.0, top_p 1.0,
# max_tokens 96, then counted after mine's stop rules and clean's filters:
#   qwen2 (Qwen2.5-Coder-0.5B, 24 samples each): empty_assistant 21 kept (16 ended on their own),
#     bare 18 (18), open_assistant 14 (13).
#   smollm2 (SmolLM2-135M, 12 samples each): bare 9 kept (9), open_assistant 8 (8),
#     empty_assistant 5 (5); its requests are fluent but often off-topic.
# Keys are registry families first, then the format names of KNOWN_FAMILIES; families not measured
# get DEFAULT_VARIANT.
BEST_VARIANT: dict[str, str] = {"qwen2": "empty_assistant", "smollm2": "bare"}
DEFAULT_VARIANT = "empty_assistant"


@dataclasses.dataclass(frozen=True)
class PreQuery:
    """A rendered pre-query prompt.

    Attributes:
        prompt: raw text to complete; the completion is the user's request.
        template: ``<source>/<variant>``, e.g. ``chat_template/empty_assistant`` or
            ``chatml/bare`` (recorded on every mined row).
        stop: strings that end the request (the user turn's end and the next turn's header).
    """

    prompt: str
    template: str
    stop: tuple[str, ...]


def family_format(family: str | None) -> TurnFormat:
    """The hand-written format of a known family.

    Raises:
        PreQueryError: ``family`` is not one of the known families (or their aliases).
    """
    key = (family or "").strip().lower()
    key = _ALIASES.get(key, key)
    if key not in KNOWN_FAMILIES:
        raise PreQueryError(
            f"no chat template and unknown model family {family!r}: give the model a chat "
            f"template or one of the families {sorted(KNOWN_FAMILIES)} (aliases {sorted(_ALIASES)})")
    return KNOWN_FAMILIES[key]


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise PreQueryError(f"unknown pre-query variant {variant!r}; known: {list(VARIANTS)}")


def _cut(rendered: str, sentinel: str, what: str) -> str:
    i = rendered.find(sentinel)
    if i < 0:
        raise PreQueryError(f"chat template dropped the {what} message; cannot locate the user turn")
    return rendered[:i]


def _with_system(system: str | None, *rest: dict[str, str]) -> list[dict[str, str]]:
    head = [{"role": "system", "content": system}] if system else []
    return head + list(rest)


@dataclasses.dataclass(frozen=True)
class DerivedTurns:
    """Turn markers read off a chat template (see :func:`derive_turns`)."""

    end_of_turn: str
    user_header: str
    assistant_header: str

    @property
    def stop(self) -> tuple[str, ...]:
        """Strings that end a mined request: the turn's end, or the start of any next turn."""
        marks = (self.end_of_turn.strip(), self.user_header.strip(), self.assistant_header.strip())
        return tuple(dict.fromkeys(m for m in marks if m))


def derive_turns(render: Render) -> DerivedTurns:
    """Derive the end of an assistant turn and the user/assistant headers from a chat template.

    Renders ``user, assistant`` and ``user, assistant, user`` and takes what the longer one adds
    before the last user's content; the assistant header is what ``add_generation_prompt`` adds.

    Raises:
        PreQueryError: the template renders the conversations inconsistently.
    """
    first = {"role": "user", "content": _FIRST}
    reply = {"role": "assistant", "content": _REPLY}
    two = render([first, reply], False)
    three = _cut(render([first, reply, {"role": "user", "content": _USER}], False), _USER, "user")
    at = three.find(_REPLY)
    if at < 0 or not two.startswith(three[:at + len(_REPLY)]):
        raise PreQueryError("chat template renders a conversation prefix inconsistently")
    between = three[at + len(_REPLY):]  # end of the assistant turn + header of the next user turn
    end = two[at + len(_REPLY):]
    if not between.startswith(end):
        # The template writes something after the last message (Phi-3 appends EOS): the user
        # header is then what ``between`` shares with the start of a conversation.
        opening = _cut(render([{"role": "user", "content": _USER}], False), _USER, "user")
        shared = len(os.path.commonprefix([between[::-1], opening[::-1]]))
        end = between[:len(between) - shared]
    asked, plain = render([first], True), render([first], False)
    after_user = asked[asked.find(_FIRST) + len(_FIRST):]
    if end and after_user.startswith(end):  # user turns close like assistant turns
        assistant = after_user[len(end):]
    else:
        assistant = asked[len(plain):] if asked.startswith(plain) else ""
    return DerivedTurns(end_of_turn=end, user_header=between[len(end):],
                        assistant_header=assistant)


def from_chat_template(render: Render, variant: str, system: str | None,
                       extra_stop: Sequence[str] = ()) -> PreQuery:
    """Build the pre-query prompt for ``variant`` from a chat template renderer.

    Args:
        render: ``render(messages, add_generation_prompt) -> str`` (a backend's
            ``apply_chat_template`` or ``arenaforge.pipeline.backends.chat_template.render_chat_template``).
        variant: one of ``VARIANTS``.
        system: system prompt, or ``None`` for none.
        extra_stop: stop strings added to the derived ones (e.g. the model's EOS text).

    Raises:
        PreQueryError: the template refuses the variant's conversation (e.g. a Gemma template
            that enforces user/assistant alternation) or hides the user message.
    """
    _check_variant(variant)
    from arenaforge.pipeline.backends.chat_template import ChatTemplateError

    user = {"role": "user", "content": _USER}
    try:
        turns = derive_turns(render)
        if variant == "bare":
            prompt = _cut(render(_with_system(system, user), False), _USER, "user")
        elif variant == "empty_assistant":
            empty = {"role": "assistant", "content": ""}
            prompt = _cut(render(_with_system(system, empty, user), False), _USER, "user")
        else:
            if not system:
                raise PreQueryError("variant 'open_assistant' needs a system prompt to render")
            prompt = render(_with_system(system), True) + turns.user_header
    except ChatTemplateError as exc:
        raise PreQueryError(f"chat template cannot render variant {variant!r}: {exc}") from exc
    if system and system not in prompt:
        raise PreQueryError(f"chat template puts the system prompt after the user header in "
                            f"variant {variant!r} (it folds the system into the user turn)")
    stop = tuple(dict.fromkeys((*turns.stop, *extra_stop)))
    return PreQuery(prompt=prompt, template=f"chat_template/{variant}", stop=stop)


def from_family(family: str | None, variant: str, system: str | None) -> PreQuery:
    """Build the pre-query prompt from the hand-written format of a known family.

    Raises:
        PreQueryError: unknown family or variant.
    """
    fmt = family_format(family)
    return PreQuery(prompt=fmt.prompt(variant, system), template=f"{fmt.family}/{variant}",
                    stop=fmt.stop)


def best_variant(family: str | None) -> str:
    """The measured best variant for a family (``DEFAULT_VARIANT`` when not measured)."""
    key = (family or "").strip().lower()
    return BEST_VARIANT.get(key) or BEST_VARIANT.get(_ALIASES.get(key, key), DEFAULT_VARIANT)


def build_pre_query(render: Render | None, family: str | None, variant: str, system: str | None,
                    extra_stop: Sequence[str] = ()) -> PreQuery:
    """The pre-query prompt: from the chat template when there is one, else from the family.

    Args:
        render: the model's chat template renderer, or ``None`` when the model has no template.
        family: registry family, used for the fallback and for ``variant="auto"``.
        variant: one of ``VARIANTS`` or ``"auto"`` (the measured best for the family).
        system: system prompt or ``None``.
        extra_stop: stop strings added to the template's own.

    Raises:
        PreQueryError: neither the template nor a known family gives the prompt.
    """
    if variant == "auto":
        variant = best_variant(family)
    if render is not None:
        try:
            return from_chat_template(render, variant, system, extra_stop)
        except PreQueryError as exc:
            try:
                fallback = from_family(family, variant, system)
            except PreQueryError:
                raise PreQueryError(f"{exc} (and no known-family fallback for {family!r})") from exc
            return dataclasses.replace(
                fallback, stop=tuple(dict.fromkeys((*fallback.stop, *extra_stop))))
    fallback = from_family(family, variant, system)
    return dataclasses.replace(fallback, stop=tuple(dict.fromkeys((*fallback.stop, *extra_stop))))
