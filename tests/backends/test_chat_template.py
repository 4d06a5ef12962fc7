"""The shared Jinja renderer against Hugging Face's own ``apply_chat_template``."""

import json

import pytest
from arenaforge.pipeline.backends.base import Completion
from arenaforge.pipeline.backends.chat_template import (
    ChatTemplateError,
    chat_by_rendering,
    render_chat_template,
    template_from_hf_dir,
)

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# Exercises bos_token, raise_exception, loop controls and whitespace control like Gemma/Llama.
STRICT = ("{{ bos_token }}{% for m in messages %}"
          "{% if m['role'] not in ['user', 'assistant', 'system'] %}"
          "{{ raise_exception('bad role ' + m['role']) }}{% endif %}"
          "{% if m['role'] == 'system' %}{% continue %}{% endif %}\n"
          "  <start_of_turn>{{ m['role'] }}\n{{ m['content'] | trim }}<end_of_turn>\n"
          "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")
MESSAGES = [{"role": "system", "content": "You write Python."},
            {"role": "user", "content": "  Reverse a list.  "},
            {"role": "assistant", "content": "lst[::-1]"},
            {"role": "user", "content": "Ünïcode ✓ and {\"json\": 1}"}]


@pytest.fixture(scope="module")
def hf_tokenizer():
    """A real HF tokenizer (the MiniLM one shipped in a package) used as the reference."""
    transformers = pytest.importorskip("transformers")
    from arenaforge.pipeline.models import ModelNotInstalledError, load_registry, resolve_weights

    spec = load_registry("configs/models.yaml")["minilm-l6"]
    try:
        path = resolve_weights(spec)
    except ModelNotInstalledError as exc:
        pytest.skip(str(exc))
    return transformers.AutoTokenizer.from_pretrained(str(path))


@pytest.mark.parametrize("template", [CHATML, STRICT])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_matches_transformers_apply_chat_template(hf_tokenizer, template, add_generation_prompt):
    expected = hf_tokenizer.apply_chat_template(MESSAGES, chat_template=template, tokenize=False,
                                                add_generation_prompt=add_generation_prompt)
    ours = render_chat_template(template, MESSAGES, add_generation_prompt=add_generation_prompt,
                                bos_token=hf_tokenizer.bos_token or "",
                                eos_token=hf_tokenizer.eos_token or "")
    assert ours == expected


def test_raise_exception_and_bad_messages_are_chat_template_errors():
    with pytest.raises(ChatTemplateError, match="bad role tool"):
        render_chat_template(STRICT, [{"role": "tool", "content": "x"}])
    with pytest.raises(ChatTemplateError, match=r"messages\[0\]"):
        render_chat_template(CHATML, [{"content": "no role"}])
    with pytest.raises(ChatTemplateError, match="chat template failed"):
        render_chat_template("{% for %}", MESSAGES)


def test_template_from_hf_dir_reads_both_layouts(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML}))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "chat_template.jinja").write_text(STRICT)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": [{"name": "tool_use", "template": "x"},
                           {"name": "default", "template": CHATML}]}))
    (tmp_path / "d").mkdir()
    assert template_from_hf_dir(tmp_path / "a") == CHATML
    assert template_from_hf_dir(tmp_path / "b") == STRICT
    assert template_from_hf_dir(tmp_path / "c") == CHATML
    assert template_from_hf_dir(tmp_path / "d") is None


def test_chat_by_rendering_turns_a_rejected_conversation_into_failed_values():
    seen = []

    def generate(prompts):
        seen.extend(prompts)
        return [[Completion(text=p[-9:], finish_reason="stop")] * 2 for p in prompts]

    good = [{"role": "user", "content": "hi"}]
    bad = [{"role": "tool", "content": "x"}]
    out = chat_by_rendering(lambda c: render_chat_template(STRICT, c), generate,
                            [good, bad, good], n=2)
    assert len(seen) == 2  # the bad conversation never reached the engine
    assert [len(r) for r in out] == [2, 2, 2]
    assert out[0][0].text == "rn>model\n" and out[2][1].finish_reason == "stop"
    assert all(c.finish_reason == "error" and "bad role" in c.error for c in out[1])
