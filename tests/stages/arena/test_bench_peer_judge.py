"""scripts/bench_peer.py's plain-loop judge reads what the judge stage reads (both rounds of
pointwise_logprob), in either order, and the stage's own order keeps each round 2 right
after its round 1."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from arenaforge.stages.arena import protocols as jp
from arenaforge.stages.arena.judge import JudgeConfig, judge_with

ROOT = Path(__file__).resolve().parents[3]
CANDIDATES = sorted({t for texts in jp.DIGIT_SPELLINGS.values() for t in texts})


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_peer", ROOT / "scripts/bench_peer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reading(prompt: str) -> dict[str, float]:
    """A deterministic reading of a prompt: most of the mass on one digit."""
    best = str(sum(map(ord, prompt)) % 4)
    return {t: math.log(0.7 if t == best else 0.3 / 7) for t in CANDIDATES}


class FakeJudge:
    """Renders a conversation as its JSON and reads it with :func:`reading`."""

    def __init__(self):
        self.prompts: list[str] = []

    def next_token_logprobs(self, conversations, candidates, prefill=""):
        prompts = [json.dumps(c) + prefill for c in conversations]
        self.prompts += prompts
        return [(reading(p), None) for p in prompts]


BATTLES = [jp.Battle(f"i{i}", f"task {i}", "m0", "m1", f"answer {i} of m0", f"answer {i} of m1")
           for i in range(3)]


@pytest.mark.parametrize("interleaved", [False, True])
def test_the_plain_loop_reads_what_the_stage_reads(bench, interleaved):
    protocol = jp.PROTOCOLS["pointwise_logprob"]
    stage = FakeJudge()
    cfg = JudgeConfig(judges=["judge"], protocol=protocol.name, retry_prefill=False)
    rows = judge_with(protocol, stage, "judge", BATTLES, cfg, 0)
    want = {(r["instruction_id"], r["order"]): (r["expected_score_a"], r["expected_score_b"])
            for r in rows}
    asked: list[str] = []

    def ask(prompts):
        asked.extend(prompts)
        return [(reading(p), len(p), len(p)) for p in prompts]

    got, n_prompt, _ = bench.judge_two_rounds(
        ask, protocol, BATTLES, lambda convs: [json.dumps(c) for c in convs], CANDIDATES,
        interleaved)
    assert got == want
    assert sorted(asked) == sorted(stage.prompts) and n_prompt == sum(map(len, asked))
    # interleaved is the stage's order; "rounds" reads every round-1 prompt first
    assert (asked == stage.prompts) == interleaved
    if not interleaved:
        assert all(p.count('"assistant"') == 0 for p in asked[:6])
