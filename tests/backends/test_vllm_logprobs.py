"""vLLM's next-token readings against stand-ins of vLLM's own request and output shapes.

vLLM cannot be installed here (it needs a GPU and pins its own torch), so these tests check
the translation against the shapes in vLLM's code: ``SamplingParams(logprobs=k)`` asks for the
top k tokens per generated position, and ``RequestOutput.outputs[0].logprobs`` is a list (one
entry per generated token) of ``{token id: Logprob(logprob, rank, decoded_token)}`` with the
top k, plus the sampled token when it is not among them (``vllm/logprobs.py``: ``Logprob``,
``SampleLogprobs = list[dict[int, Logprob]]``). It has not run against a real engine.
"""

import math
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from arenaforge.pipeline.backends import create_backend
from arenaforge.pipeline.backends.vllm_offline import (
    logprob_sampling_kwargs,
    reading_from_request_output,
)
from arenaforge.pipeline.models import ModelSpec


def Logprob(logprob, rank=None, decoded_token=None):  # mirrors vllm.logprobs.Logprob
    return SimpleNamespace(logprob=logprob, rank=rank, decoded_token=decoded_token)


VOCAB = {"<s>": 1, "Yes": 10, " Yes": 11, "No": 12, " No": 13, "yes": 14, "x": 15}
LOGITS = np.zeros(32)
LOGITS[[10, 11, 12, 13, 14, 15]] = [4.0, 1.0, 2.5, 0.5, -1.0, 3.0]
LOG_SOFTMAX = LOGITS - np.log(np.exp(LOGITS).sum())


class _Tokenizer:
    bos_token, eos_token = "<s>", "</s>"
    chat_template = "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}"

    def encode(self, text, add_special_tokens=True):
        if text in VOCAB:
            return [VOCAB[text]]
        if text == "Yes please":
            return [10, 15]
        return ([1] if add_special_tokens else []) + [100 + ord(ch) % 50 for ch in text]


class _LLM:
    """``vllm.LLM`` stand-in: answers like vLLM's sampler with the top ``logprobs`` tokens."""

    def __init__(self, model, max_model_len, seed, **kwargs):
        self.calls = []

    def get_tokenizer(self):
        return _Tokenizer()

    def generate(self, requests, sampling, use_tqdm):
        self.calls.append((requests, sampling))
        k = sampling["logprobs"]
        order = np.argsort(-LOG_SOFTMAX)
        top = {int(t): Logprob(float(LOG_SOFTMAX[t]), rank + 1, f"tok{t}")
               for rank, t in enumerate(order[:k])}
        sample = SimpleNamespace(text="Yes", token_ids=[10], finish_reason="length",
                                 logprobs=[top])
        return [SimpleNamespace(prompt_token_ids=r["prompt_token_ids"], outputs=[sample])
                for r in requests]


@pytest.fixture()
def backend(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(LLM=_LLM, SamplingParams=dict))
    spec = ModelSpec(id="big", backend="vllm", family="x", path=str(tmp_path),
                     options={"logprobs_top_k": 3})
    return create_backend(spec, cache_dir=tmp_path / "cache")


def test_sampling_kwargs_read_one_greedy_token():
    assert logprob_sampling_kwargs(20) == {"n": 1, "max_tokens": 1, "temperature": 0.0,
                                           "logprobs": 20}


def test_readings_by_token_id_with_minus_inf_below_top_k(backend):
    conv = [{"role": "user", "content": "Is this a task?"}]
    candidates = ["Yes", " Yes", "No", " No", "yes", "Yes please"]
    [(reading, error)] = backend.next_token_logprobs([conv], candidates, prefill="Answer: ")
    assert error is None
    # top 3 of the stand-in's logits: Yes (4.0), x (3.0), No (2.5)
    assert reading["Yes"] == pytest.approx(LOG_SOFTMAX[10])
    assert reading["No"] == pytest.approx(LOG_SOFTMAX[12])
    assert reading[" Yes"] == reading[" No"] == reading["yes"] == -math.inf
    assert "Yes please" not in reading  # two tokens: never a reading
    [(requests, sampling)] = backend.inner.llm.calls
    assert sampling == logprob_sampling_kwargs(3)
    assert 1 not in requests[0]["prompt_token_ids"]  # the template wrote <s>: no second BOS
    # through the request cache like every other call
    again = backend.next_token_logprobs([conv], candidates, prefill="Answer: ")
    assert again == [(reading, None)] and len(backend.inner.llm.calls) == 1
    assert backend.cache_stats() == {"hits": 1, "misses": 1}


def test_a_conversation_the_template_rejects_is_an_error_reading(backend):
    readings = backend.next_token_logprobs([[{"role": "user"}], [{"role": "user",
                                                                  "content": "ok"}]], ["Yes"])
    assert readings[0][0] is None and "messages[0]" in readings[0][1]
    assert readings[1][1] is None and "Yes" in readings[1][0]


def test_no_logprobs_in_the_output_is_an_error_reading():
    output = SimpleNamespace(outputs=[SimpleNamespace(logprobs=None, finish_reason="abort")])
    reading, error = reading_from_request_output(output, {"Yes": 10})
    assert reading is None and "abort" in error


def test_the_cache_key_holds_top_k(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(LLM=_LLM, SamplingParams=dict))
    conv = [{"role": "user", "content": "q"}]
    readings = {}
    for k in (3, 5):
        spec = ModelSpec(id="big", backend="vllm", family="x", path=str(tmp_path),
                         options={"logprobs_top_k": k})
        backend = create_backend(spec, cache_dir=tmp_path / "cache")
        [(readings[k], _)] = backend.next_token_logprobs([conv], ["Yes", " Yes"])
        assert backend.cache_stats() == {"hits": 0, "misses": 1}  # k=5 is not k=3's entry
    assert readings[3][" Yes"] == -math.inf and math.isfinite(readings[5][" Yes"])
