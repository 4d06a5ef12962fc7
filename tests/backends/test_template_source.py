"""Chat templates read on the client for served models: GGUF metadata and tokenizer dirs."""

import json

import pytest
from arenaforge.pipeline.backends import create_backend
from arenaforge.pipeline.backends.template_source import load_template, read_gguf_tokenizer_fields
from arenaforge.pipeline.models import (
    ModelNotInstalledError,
    ModelSpec,
    load_registry,
    resolve_weights,
)


@pytest.fixture(scope="module")
def smol_gguf():
    try:
        return resolve_weights(load_registry("configs/models.yaml")["smollm2-135m"])
    except ModelNotInstalledError as exc:
        pytest.skip(str(exc))


@pytest.mark.models
def test_gguf_fields_equal_the_gguf_package_reader(smol_gguf):
    from gguf import GGUFReader

    fields, tokens = read_gguf_tokenizer_fields(smol_gguf)
    reference = GGUFReader(str(smol_gguf))

    def ref_value(key):
        field = reference.fields[key]
        return field.parts[field.data[0]]

    assert fields["tokenizer.chat_template"] == bytes(ref_value("tokenizer.chat_template"))
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        assert fields[key] == int(ref_value(key)[0])
    ref_tokens = reference.fields["tokenizer.ggml.tokens"]
    assert len(tokens) == len(ref_tokens.data)
    for i in (0, 1, 2, 100, len(tokens) - 1):
        assert tokens[i] == bytes(ref_tokens.parts[ref_tokens.data[i]])
    info = load_template(smol_gguf)
    assert (info.bos, info.eos, info.add_bos) == ("<|im_start|>", "<|im_end|>", False)


def test_a_file_that_is_not_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="model.bin.*not a GGUF file"):
        load_template(bad)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_template(tmp_path / "missing.gguf")


def test_tokenizer_dir_template_and_special_tokens(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
        "bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>",
        "add_bos_token": True}))
    info = load_template(tmp_path)
    assert (info.bos, info.eos, info.add_bos) == ("<s>", "</s>", True)
    # A served model names the directory: the client renders with it and, since the server
    # adds BOS itself, sends raw prompts without the template's BOS text.
    spec = ModelSpec(id="served", backend="openai", family="llama", base_url="http://x/v1",
                     model_name="m", tokenizer=str(tmp_path))
    backend = create_backend(spec)
    assert backend.apply_chat_template([{"role": "user", "content": "hi"}]) == "<s>hi"
    assert backend._wire_prompt("<s>hi") == "hi"
    assert backend._ask_server is False  # no /props needed


def test_registry_template_sources_for_served_models(tmp_path):
    base = {"id": "s", "backend": "openai", "family": "qwen2", "base_url": "http://x/v1",
            "model_name": "m"}
    inline = create_backend(ModelSpec(**base, chat_template_source="registry",
                                      chat_template="[{{ messages[0].content }}]"))
    assert inline.apply_chat_template([{"role": "user", "content": "a"}]) == "[a]"
    assert create_backend(ModelSpec(**base, chat_template_source="none")).chat_template() is None
    assert create_backend(ModelSpec(**base))._ask_server  # nothing local: ask /props
    with pytest.raises(ValueError, match="for served models"):
        ModelSpec(id="e", backend="llamacpp", family="q", path="x.gguf", tokenizer="t.gguf")
    with pytest.raises(ValueError, match="for served models"):
        ModelSpec(id="e", backend="llamacpp", family="q", path="x.gguf",
                  replica_urls=["http://y/v1"])
