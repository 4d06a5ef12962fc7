"""Pre-query prompts derived from chat templates agree with the hand-written family formats."""

from __future__ import annotations

import functools

import pytest
from arenaforge.pipeline.backends.chat_template import render_chat_template
from arenaforge.stages.instructions.pre_query import (
    KNOWN_FAMILIES,
    VARIANTS,
    PreQueryError,
    build_pre_query,
    derive_turns,
    from_chat_template,
    from_family,
)

# Minimal templates written in the style of each family's published template (same markers,
# same quirks: Qwen's default system turn, Llama-3's trim, Gemma folding the system prompt into
# the first user turn and enforcing alternation, Phi-3 appending EOS, Mistral's [INST]).
QWEN = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
LLAMA3 = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
GEMMA = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{% set first_user_prefix = messages[0]['content'] + '\\n\\n' %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = '' %}"
    "{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'assistant' %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '')"
    " + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}")
PHI3 = (
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ '<|system|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% elif message['role'] == 'user' %}{{ '<|user|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ '<|assistant|>\\n' + message['content'] + '<|end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}")

TEMPLATES = {
    "chatml": (QWEN, "", ""),
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|end_of_text|>"),
    "gemma": (GEMMA, "<bos>", "<eos>"),
    "phi3": (PHI3, "", "<|endoftext|>"),
    "mistral": (MISTRAL, "<s>", "</s>"),
}
SYSTEM = "You are a coding assistant. Ask Python questions."


def renderer(family: str):
    template, bos, eos = TEMPLATES[family]

    def render(messages, add_generation_prompt):
        return render_chat_template(template, messages, add_generation_prompt=add_generation_prompt,
                                    bos_token=bos, eos_token=eos)
    return render


@pytest.mark.parametrize("family", sorted(TEMPLATES))
@pytest.mark.parametrize("variant", VARIANTS)
def test_template_and_family_give_the_same_prompt(family, variant):
    # Two independent derivations (rendering the template, the hand-written table) must agree;
    # when the template refuses a shape the builder falls back to the table on purpose.
    built = build_pre_query(renderer(family), family, variant, SYSTEM)
    assert built.prompt == from_family(family, variant, SYSTEM).prompt
    assert SYSTEM in built.prompt
    assert built.prompt.endswith(KNOWN_FAMILIES[family].user_header + (
        SYSTEM + "\n\n" if KNOWN_FAMILIES[family].system is None else ""))


def test_qwen_variants_are_the_measured_shapes():
    render = renderer("chatml")
    bare = from_chat_template(render, "bare", SYSTEM).prompt
    empty = from_chat_template(render, "empty_assistant", SYSTEM).prompt
    opened = from_chat_template(render, "open_assistant", SYSTEM).prompt
    sys_turn = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    assert bare == sys_turn + "<|im_start|>user\n"
    assert empty == sys_turn + "<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\n"
    assert opened == sys_turn + "<|im_start|>assistant\n<|im_start|>user\n"  # distilabel's string


@pytest.mark.parametrize("family,end,user,assistant", [
    ("chatml", "<|im_end|>\n", "<|im_start|>user\n", "<|im_start|>assistant\n"),
    ("llama3", "<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\n",
     "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("gemma", "<end_of_turn>\n", "<start_of_turn>user\n", "<start_of_turn>model\n"),
    ("phi3", "<|end|>\n", "<|user|>\n", "<|assistant|>\n"),
    ("mistral", "</s>", "[INST] ", ""),
])
def test_derive_turns(family, end, user, assistant):
    turns = derive_turns(renderer(family))
    assert (turns.end_of_turn, turns.user_header, turns.assistant_header) == (end, user, assistant)


def test_stop_strings_come_from_the_template():
    built = from_chat_template(renderer("chatml"), "bare", SYSTEM, extra_stop=["```"])
    assert built.stop == ("<|im_end|>", "<|im_start|>user", "<|im_start|>assistant", "```")
    assert built.template == "chat_template/bare"


def test_gemma_refuses_empty_assistant_then_falls_back():
    with pytest.raises(PreQueryError, match="alternate"):
        from_chat_template(renderer("gemma"), "empty_assistant", SYSTEM)
    built = build_pre_query(renderer("gemma"), "gemma3", "empty_assistant", SYSTEM)
    assert built.template == "gemma/empty_assistant"


def test_unknown_family_without_template_is_a_clear_error():
    with pytest.raises(PreQueryError, match="unknown model family 'falcon'"):
        build_pre_query(None, "falcon", "bare", SYSTEM)


def test_unknown_template_shape_without_fallback_is_a_clear_error():
    weird = functools.partial(render_chat_template, "{% for m in messages %}{{ m.role }}"
                              "{% endfor %}")  # drops all content

    def render(messages, add_generation_prompt):
        return weird(messages, add_generation_prompt=add_generation_prompt)
    with pytest.raises(PreQueryError, match="no known-family fallback"):
        build_pre_query(render, "falcon", "bare", SYSTEM)


def test_auto_variant_and_aliases():
    assert build_pre_query(None, "qwen2", "auto", SYSTEM).template == "chatml/empty_assistant"
    assert build_pre_query(None, "smollm2", "auto", SYSTEM).template == "chatml/bare"
    assert build_pre_query(None, "llama3", "auto", SYSTEM).template == "llama3/empty_assistant"
    with pytest.raises(PreQueryError, match="unknown pre-query variant"):
        build_pre_query(None, "qwen", "sideways", SYSTEM)
