"""answer + judge with the real embedded SmolLM2-135M on two instructions (needs the weights)."""

from __future__ import annotations

import math
import types

import pyarrow as pa
import pytest
from arenaforge.stages.arena import protocols as jp
from arenaforge.stages.arena.answer import AnswerConfig
from arenaforge.stages.arena.answer import run as answer_run
from arenaforge.stages.arena.judge import OUTPUT_SCHEMA, JudgeConfig
from arenaforge.stages.arena.judge import run as judge_run
from model_support import open_embedded_backend

pytestmark = pytest.mark.models
MODEL = "smollm2-135m"
CANONICAL = {
    "Write a Python function `add(a, b)` that returns the sum of two numbers.":
        "```python\ndef add(a, b):\n    return a + b\n```",
    "Write a Python function `is_even(n)` that returns True when n is even.":
        "```python\ndef is_even(n):\n    return n % 2 == 0\n```",
}


@pytest.fixture(scope="module")
def backend():
    b = open_embedded_backend(MODEL)
    yield b
    b.close()


def ctx_for(backend):
    return types.SimpleNamespace(config=types.SimpleNamespace(experts=[MODEL], judge_ids=[MODEL]),
                                 seed=0, backend=lambda model_id: backend,
                                 advance=lambda rows: None)


@pytest.fixture(scope="module")
def answers(backend):
    table = pa.table({"instruction_id": ["i-add", "i-even"], "instruction": list(CANONICAL),
                      "language": ["python", "python"]})
    out = answer_run(table, AnswerConfig(experts=[MODEL], max_tokens=96), ctx_for(backend))
    return out


def test_answer_stage_with_the_real_model(answers):
    rows = answers.table.to_pylist()
    assert [(r["instruction_id"], r["model"]) for r in rows] == [("i-add", MODEL),
                                                                  ("i-even", MODEL)]
    for r in rows:
        assert r["response"].strip() and r["finish_reason"] in ("stop", "length")
        assert r["prompt_tokens"] > 10 and 0 < r["completion_tokens"] <= 96
        assert r["truncated"] == (r["finish_reason"] == "length")
        assert r["code"] is None or r["code"] in r["response"]


@pytest.mark.parametrize("protocol", jp.PROTOCOLS)
def test_judge_stage_with_the_real_model(backend, answers, protocol):
    # The second contestant is a fixed correct answer; the model judges its own answer
    # against it (self-judging allowed: there is only one embedded model this small).
    rows = answers.table.to_pylist()
    table = pa.Table.from_pylist(rows + [
        {**r, "model": "canonical", "response": CANONICAL[r["instruction"]]} for r in rows])
    cfg = JudgeConfig(protocol=protocol, judges=[MODEL], allow_self_judge=True, max_tokens=96)
    out = judge_run(table, cfg, ctx_for(backend)).table
    assert out.schema == OUTPUT_SCHEMA
    got = out.to_pylist()
    assert [(r["instruction_id"], r["model_a"], r["model_b"], r["order"]) for r in got] == [
        (i, "canonical", MODEL, o) for i in ("i-add", "i-even") for o in ("ab", "ba")]
    for r in got:
        assert r["protocol"] == protocol and r["raw"] is not None
        if r["verdict"] is None:
            assert r["parse_error"]  # a failure is explained, never a silent default
        else:
            assert r["verdict"] in ("a", "b", "tie") and r["parse_error"] is None
        if r["parse_error"] is not None:
            continue  # too little probability on the choice tokens: kept as a parse error
        if protocol == "pairwise_logprob":
            assert 0.0 <= r["prob_a"] <= 1.0 and "mass=" in r["raw"]
        if protocol == "pointwise_logprob":
            assert 0.0 <= r["expected_score_a"] <= 3.0 and 0.0 <= r["expected_score_b"] <= 3.0


def test_next_token_logprobs_match_greedy_decoding_and_survive_prefix_reuse(backend):
    from arenaforge.pipeline.backends.base import SamplingParams
    from arenaforge.stages.arena.judge_logits import next_token_logprobs

    convs = [jp.pair_conversation("pairwise_logprob", q, a, "```python\npass\n```")
             for q, a in CANONICAL.items()]
    [[greedy]] = backend.chat(convs[:1], SamplingParams(max_tokens=1))
    spellings = {"A": ("A",), "B": ("B",), "greedy": (greedy.text,)}
    first = next_token_logprobs(backend, convs, spellings)
    again = next_token_logprobs(backend, [convs[1], convs[0], convs[0]], spellings)
    (lp0, err0), (lp1, err1) = first
    assert err0 is None and err1 is None
    # The greedy token is the most probable one, so no other token can beat it.
    assert lp0[greedy.text] >= max(lp0["A"], lp0["B"]) and lp0[greedy.text] <= 0
    assert math.exp(lp0["A"]) + math.exp(lp0["B"]) <= 1.0 + 1e-9
    # Reusing the evaluated prefix (same prompt twice, or after another one) changes nothing.
    for got, want in ((again[0][0], lp1), (again[1][0], lp0), (again[2][0], lp0)):
        assert got == pytest.approx(want, abs=1e-3)
