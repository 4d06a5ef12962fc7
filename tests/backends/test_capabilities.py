"""Backend capabilities known from the registry entry agree with what the backend classes do."""

from __future__ import annotations

import inspect

import pytest
from arenaforge.pipeline.backends import capabilities as caps_mod
from arenaforge.pipeline.backends.capabilities import CAPABILITIES, Capabilities, capabilities_of
from arenaforge.pipeline.models.registry import ModelSpec


def spec(backend: str, **fields) -> ModelSpec:
    source = ({"base_url": "http://127.0.0.1:1/v1", "model_name": "m"} if backend == "openai"
              else {"path": "/models/m"})
    return ModelSpec(id="m", backend=backend, family="qwen2", **{**source, **fields})


def _backend_class(backend: str):
    if backend == "llamacpp":
        from arenaforge.pipeline.backends.llamacpp import LlamaCppBackend
        return LlamaCppBackend
    if backend == "openai":
        from arenaforge.pipeline.backends.openai_server import OpenAIServerBackend
        return OpenAIServerBackend
    if backend == "vllm":
        from arenaforge.pipeline.backends.vllm_offline import VllmBackend
        return VllmBackend
    from arenaforge.pipeline.backends.transformers_local import TransformersBackend
    return TransformersBackend


@pytest.mark.parametrize("backend", ["llamacpp", "openai", "vllm", "transformers"])
def test_declared_capabilities_match_the_backend_class(backend):
    """A capability is declared exactly when the class implements its method."""
    caps = capabilities_of(spec(backend))
    cls = _backend_class(backend)
    methods = {"raw_completion": "complete", "chat": "chat",
               "next_token_logprobs": "next_token_logprobs"}
    for capability in CAPABILITIES:
        assert getattr(caps, capability) == hasattr(cls, methods[capability]), capability


def test_batch_defaults_are_the_backend_constructors_defaults():
    from arenaforge.pipeline.backends.llamacpp import LlamaCppBackend
    from arenaforge.pipeline.backends.openai_server import OpenAIServerBackend

    def default(cls, name):
        return inspect.signature(cls.__init__).parameters[name].default

    assert default(LlamaCppBackend, "batch_size") == caps_mod.LLAMACPP_BATCH_SIZE
    assert default(OpenAIServerBackend, "max_concurrency") == caps_mod.OPENAI_MAX_CONCURRENCY


@pytest.mark.parametrize("entry,expected", [
    (spec("llamacpp"), Capabilities(True, True, True, 16)),
    (spec("llamacpp", options={"batch_size": 4}), Capabilities(True, True, True, 4)),
    (spec("llamacpp", chat_template_source="none"), Capabilities(True, False, False, 16)),
    (spec("openai", options={"max_concurrency": 8}, replica_urls=("http://127.0.0.1:2/v1",)),
     Capabilities(True, True, True, 16)),
    (spec("openai", chat_template_source="server"), Capabilities(True, True, True, 4)),
    # the server chats with its own template; logprobs need one rendered on the client
    (spec("openai", chat_template_source="none"), Capabilities(True, True, False, 4)),
    (spec("vllm"), Capabilities(True, True, True, None)),
    (spec("transformers"), Capabilities(True, True, False, 1)),
    (spec("sentence_transformers"), Capabilities(False, False, False, None)),
])
def test_capabilities_of_registry_entries(entry, expected):
    assert capabilities_of(entry) == expected


def test_unknown_capability_is_an_error():
    with pytest.raises(ValueError, match="unknown capability 'logits'"):
        capabilities_of(spec("vllm")).lacking("logits")
