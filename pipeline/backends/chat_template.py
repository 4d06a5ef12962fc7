"""Render Jinja chat templates the way Hugging Face tokenizers do.

Why not ``tokenizer.apply_chat_template`` or llama-cpp-python's ``Jinja2ChatFormatter``: the
template may come from a GGUF file, a ``tokenizer_config.json``, a server or the registry, and
the backends that need it must not import transformers or load a llama.cpp library just to
render text. This mirrors the HF environment (sandboxed, ``trim_blocks``/``lstrip_blocks``,
``loopcontrols``, ``{% generation %}`` blocks, ``raise_exception``, ``strftime_now``,
``tojson`` without ASCII escaping) so one renderer gives the same prompt for every backend.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from arenaforge.pipeline.backends.base import Completion, Conversation


class ChatTemplateError(ValueError):
    """A template failed to render (bad template or messages it refuses)."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(message)


def _tojson(value, indent=None, ensure_ascii=False, sort_keys=False) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)


def _generation_tags():
    """Jinja extension for ``{% generation %}...{% endgeneration %}``, which marks the
    assistant's tokens for TRL's ``assistant_only_loss`` (transformers' ``AssistantTracker``);
    rendering text, the block is its body."""
    from jinja2.ext import Extension

    class GenerationTags(Extension):
        tags = frozenset({"generation"})

        def parse(self, parser):
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    return GenerationTags


@functools.lru_cache(maxsize=32)
def _compile(template: str):
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols, _generation_tags()])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def render_chat_template(template: str, messages: Conversation, *,
                         add_generation_prompt: bool = True, bos_token: str = "",
                         eos_token: str = "") -> str:
    """Render ``messages`` with a Jinja chat template.

    Example::

        >>> t = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
        >>> t += "{% if add_generation_prompt %}<assistant>{% endif %}"
        >>> render_chat_template(t, [{"role": "user", "content": "hi"}])
        '<user>hi<assistant>'

    Raises:
        ChatTemplateError: the template is invalid or raised an exception for these messages.
    """
    from jinja2 import TemplateError

    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise ChatTemplateError(f"messages[{i}] needs 'role' and 'content', got {message!r}")
    try:
        return _compile(template).render(messages=messages,
                                         add_generation_prompt=add_generation_prompt,
                                         bos_token=bos_token, eos_token=eos_token)
    except TemplateError as exc:
        raise ChatTemplateError(f"chat template failed: {exc}") from exc


def template_from_hf_dir(model_dir: str | Path) -> str | None:
    """The chat template of a Hugging Face model directory, or ``None``.

    Newer checkpoints keep it in ``chat_template.jinja``, older ones in
    ``tokenizer_config.json["chat_template"]``.
    """
    model_dir = Path(model_dir)
    jinja_file = model_dir / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    config_file = model_dir / "tokenizer_config.json"
    if config_file.is_file():
        template = json.loads(config_file.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, str):
            return template
        if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}]
            named = {t.get("name"): t.get("template") for t in template}
            return named.get("default")
    return None


def chat_by_rendering(apply_template: Callable[[Conversation], str],
                      generate: Callable[[list[str]], list[list[Completion]]],
                      conversations: list[Conversation], n: int) -> list[list[Completion]]:
    """Chat for engines that complete raw text: render each conversation, then generate.

    A conversation its template rejects becomes ``n`` failed completions; the rest still run.
    """
    prompts: dict[int, str] = {}
    failed: dict[int, str] = {}
    for i, conversation in enumerate(conversations):
        try:
            prompts[i] = apply_template(conversation)
        except ChatTemplateError as exc:
            failed[i] = str(exc)
    done = dict(zip(prompts, generate(list(prompts.values())), strict=True))
    return [done[i] if i in done else [Completion.failed(failed[i])] * n
            for i in range(len(conversations))]
