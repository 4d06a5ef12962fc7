"""fold_system: a model whose template refuses a system message gets it in the first user
turn, from every backend; and the traits a stage reads pass through every wrapper."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from arenaforge.pipeline.backends import create_backend
from arenaforge.pipeline.backends.base import SamplingParams
from arenaforge.pipeline.backends.capabilities import EngineTraits, traits_of
from arenaforge.pipeline.backends.role_folding import SystemFolded, fold_system
from arenaforge.pipeline.models import ModelSpec

ROOT = Path(__file__).resolve().parents[2]
CODEGEMMA = ROOT / "configs" / "model_files" / "codegemma-7b-it"

SYS = {"role": "system", "content": "Be terse."}
USER = {"role": "user", "content": "Sort a list."}
REPLY = {"role": "assistant", "content": "sorted(xs)"}


@pytest.mark.parametrize(("messages", "folded"), [
    ([SYS, USER], [{"role": "user", "content": "Be terse.\n\nSort a list."}]),
    ([USER, REPLY], [USER, REPLY]),  # nothing to fold
    ([SYS, USER, REPLY, USER],
     [{"role": "user", "content": "Be terse.\n\nSort a list."}, REPLY, USER]),
    ([SYS, SYS, USER], [{"role": "user", "content": "Be terse.\n\nBe terse.\n\nSort a list."}]),
    ([SYS], [{"role": "user", "content": "Be terse."}]),  # a pre-query's open user turn
    ([SYS, REPLY, USER], [{"role": "user", "content": "Be terse."}, REPLY, USER]),
])
def test_fold_system(messages, folded):
    before = [dict(m) for m in messages]
    assert fold_system(messages) == folded
    assert messages == before  # the caller's conversation is left as it was


class _LLM:
    """``vllm.LLM`` stand-in holding CodeGemma's tokenizer_config template."""

    def __init__(self, model, max_model_len, seed, **kwargs):
        from arenaforge.pipeline.backends.template_source import template_from_tokenizer_dir

        info = template_from_tokenizer_dir(CODEGEMMA)
        self.prompts = []
        self.tokenizer = SimpleNamespace(chat_template=info.template, bos_token=info.bos,
                                         eos_token=info.eos,
                                         encode=lambda text, add_special_tokens=True:
                                         [ord(c) for c in text])

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, requests, sampling, use_tqdm):
        self.prompts += ["".join(chr(i) for i in r["prompt_token_ids"]) for r in requests]
        return [SimpleNamespace(prompt_token_ids=r["prompt_token_ids"], outputs=[
            SimpleNamespace(text="ok", token_ids=[1], finish_reason="stop")]) for r in requests]


@pytest.fixture()
def codegemma(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(LLM=_LLM, SamplingParams=dict))

    def make(fold: bool):
        spec = ModelSpec(id="codegemma", backend="vllm", family="gemma", path=str(tmp_path),
                         fold_system=fold)
        return create_backend(spec, cache_dir=tmp_path / f"cache-{fold}")
    return make


def test_without_folding_codegemma_refuses_every_system_message(codegemma):
    backend = codegemma(False)
    [[reply]] = backend.chat([[SYS, USER]], SamplingParams(max_tokens=4))
    assert reply.finish_reason == "error" and "System role not supported" in reply.error


def test_folded_the_model_gets_the_system_text_in_its_first_user_turn(codegemma):
    backend = codegemma(True)
    assert isinstance(backend, SystemFolded)
    [[reply]] = backend.chat([[SYS, USER]], SamplingParams(max_tokens=4))
    assert reply.text == "ok"
    [prompt] = backend.inner.inner.llm.prompts  # SystemFolded > CachedBackend > VllmBackend
    assert prompt == ("<bos><start_of_turn>user\nBe terse.\n\nSort a list.<end_of_turn>\n"
                      "<start_of_turn>model\n")
    assert backend.apply_chat_template([SYS, USER]) == prompt
    # cached under what was sent: the folded conversation
    again = backend.inner.chat([fold_system([SYS, USER])], SamplingParams(max_tokens=4))
    assert again == [[reply]] and backend.cache_stats() == {"hits": 1, "misses": 1}


def test_traits_pass_through_the_cache_and_the_folding(codegemma):
    backend = codegemma(True)
    assert traits_of(backend) == EngineTraits(prefers_batches=True, next_token_logprobs=True,
                                              context_length=4096)
    assert backend.prefers_batches is True  # what the judge stage reads


def test_a_backend_without_logprobs_says_so_through_every_wrapper(tmp_path):
    class ChatOnly:
        model_id = "c"

        def chat(self, conversations, params):
            return []

        def close(self):
            pass

    from arenaforge.pipeline.backends.request_cache import CachedBackend

    wrapped = SystemFolded(CachedBackend(ChatOnly(), tmp_path, "w"))
    assert traits_of(wrapped) == EngineTraits(False, False, None)
    from arenaforge.pipeline.backends.base import LogprobUnsupportedError

    with pytest.raises(LogprobUnsupportedError):
        wrapped.next_token_logprobs([[USER]], ["1"])
