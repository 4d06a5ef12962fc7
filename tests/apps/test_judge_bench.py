"""judge-bench's pure parts: pairs, the card's metrics, and stub judges run through the judge
stage's own code (``arenaforge.stages.arena.judge.judge_with``) under every protocol."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from arenaforge.pipeline.apps.judge_bench import card, judging, pairs
from arenaforge.pipeline.apps.judge_bench.config import BenchConfig, Variant
from arenaforge.pipeline.backends.base import Completion
from arenaforge.stages.arena import protocols as jp
from scipy.stats import binomtest

PROTOCOLS = list(jp.PROTOCOLS)


def sample(task, model, i, status, text=None):
    text = text if text is not None else f"ANSWER {model}#{i}"
    return {"task_id": task, "sample_id": f"{model}#{i}", "model": model, "sample": i,
            "response": text, "status": status, "chars": len(text)}


def test_same_model_and_cross_model_pairs_are_built_and_labelled():
    rows = [sample("t1", "q", 0, "passed"), sample("t1", "q", 1, "failed"),
            sample("t1", "s", 0, "error"), sample("t1", "s", 1, "passed"),
            sample("t1", "q", 2, "failed", text="ANSWER q#1"),  # q#1's text again: counted once
            sample("t2", "q", 0, "passed"), sample("t2", "s", 0, "passed"),  # nothing fails
            sample("t3", "q", 0, "no_tests"), sample("t3", "s", 0, "failed")]
    got = pairs.build_pairs(rows, pairs_per_problem=10, seed=0)
    kinds = {(p["sample_a"], p["sample_b"]): p["pair_type"] for p in got}
    assert kinds == {("q#0", "q#1"): "same_model", ("q#0", "s#0"): "cross_model",
                     ("q#1", "s#1"): "cross_model", ("s#0", "s#1"): "same_model"}
    for p in got:
        assert (p["model_a"] == p["model_b"]) == (p["pair_type"] == "same_model")
        winner = p["sample_a"] if p["passed"] == "a" else p["sample_b"]
        assert winner in ("q#0", "s#1")
    assert {p["task_id"] for p in got} == {"t1"}
    counts = card.pair_counts(pd.DataFrame(got))
    assert (counts["count"], counts["same_model"], counts["cross_model"]) == (4, 2, 2)


def test_pairs_per_problem_alternates_types_and_subset_is_fixed():
    rows = ([sample("t", "q", i, "passed") for i in range(3)]
            + [sample("t", "q", i, "failed") for i in range(3, 6)]
            + [sample("t", "s", i, "failed") for i in range(3)])
    got = pairs.build_pairs(rows, pairs_per_problem=4, seed=1)
    assert [p["pair_type"] for p in got] == ["same_model", "cross_model"] * 2
    assert pairs.build_pairs(rows, 4, seed=1) == got
    assert pairs.subset(got, 2) == [p for p in got if p in pairs.subset(got, 2)]
    assert len(pairs.subset(got, 2)) == 2 and pairs.subset(got, None) == got


# -- stub judges ------------------------------------------------------------------------

_SHOWN = re.compile(r"ANSWER (\S+)")


def shown(conv) -> list[str]:
    """Sample ids the conversation's last turn shows, in order."""
    return _SHOWN.findall(conv[-1]["content"])


class StubJudge:
    """A judge model double for every protocol.

    ``score(sample_id, position)`` -> preference score; ``position`` is 0 for the answer shown
    first (Answer A, or the answer scored first in a sequential pointwise conversation) and 1
    for the second. Pair protocols pick the higher-scored position; pointwise ones give the
    score as a 0-3 digit.
    """

    model_id = "stub"

    def __init__(self, score):
        self.score = score

    def _pair(self, conv):
        a, b = shown(conv)
        return "A" if self.score(a, 0) >= self.score(b, 1) else "B"

    def _digit(self, conv):
        (answer,) = shown(conv)
        return max(0, min(3, round(self.score(answer, 0 if len(conv) == 2 else 1))))

    def chat(self, conversations, params):
        return [[Completion(f"why\nVerdict: [[{self._pair(c)}]]" if len(shown(c)) == 2
                            else f"why\nScore: [[{self._digit(c)}]]", "stop")]
                for c in conversations]

    def next_token_logprobs(self, conversations, candidates, prefill=""):
        out = []
        for c in conversations:
            if len(shown(c)) == 2:
                top = self._pair(c)
                probs = {"A": 0.9 if top == "A" else 0.1, "B": 0.1 if top == "A" else 0.9}
            else:
                probs = {str(k): 0.01 for k in range(4)}
                probs[str(self._digit(c))] = 0.97
            out.append(({t: math.log(probs[t.strip()]) for t in candidates}, None))
        return out


def judged(protocol: str, stub: StubJudge, pair_rows: list[dict]) -> dict:
    """The card entry of ``stub`` under ``protocol`` on ``pair_rows``."""
    variant = Variant(judge="stub", protocol=protocol)
    cfg = BenchConfig(contestants=["q", "s"], variants=[variant])
    texts = {(p["task_id"], p[f"sample_{s}"]): f"ANSWER {p[f'sample_{s}']}"
             for p in pair_rows for s in ("a", "b")}
    battles = [judging.battle(p, texts, f"question {p['task_id']}", None) for p in pair_rows]
    rows = judging.judge_stage.judge_with(jp.PROTOCOLS[protocol], stub, "stub", battles,
                                          cfg.judge_config(variant), seed=0)
    ids = {(p["task_id"], p["sample_a"], p["sample_b"]): p["pair_id"] for p in pair_rows}
    for r in rows:
        r.update(pair_id=ids[(r["instruction_id"], r["model_a"], r["model_b"])], seconds=1.0)
    return card.variant_result(variant, pd.DataFrame(rows), pd.DataFrame(pair_rows),
                               {"stub": "qwen2", "q": "qwen2", "s": "smollm2"})


def bench_pairs() -> list[dict]:
    """Same-model pairs of q where the passing sample has the higher index in half of them,
    and cross-model pairs where q passes in half."""
    rows = []
    for t in range(4):  # q#1 passes and q#0 fails in t0, t1; the reverse in t2, t3
        hi_passes = t < 2
        rows += [sample(f"t{t}", "q", 0, "failed" if hi_passes else "passed"),
                 sample(f"t{t}", "q", 1, "passed" if hi_passes else "failed")]
    for t in range(4, 8):
        q_passes = t < 6
        rows += [sample(f"t{t}", "q", 0, "passed" if q_passes else "failed"),
                 sample(f"t{t}", "s", 0, "failed" if q_passes else "passed")]
    return pairs.build_pairs(rows, pairs_per_problem=4, seed=0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_judge_that_always_picks_the_first_position_gets_preference_one(protocol):
    stub = StubJudge(lambda answer, position: 3 - 3 * position)
    result = judged(protocol, stub, bench_pairs())
    assert result["first_position"] == 1.0
    assert result["first_position_detail"]["n"] == 2 * len(bench_pairs())
    assert result["order_consistency"] == 0.0  # each order names the other answer
    if not jp.PROTOCOLS[protocol].shows_pair:  # alone, every answer scores 3: all ties
        assert result["alone_accuracy"]["ties"] == len(bench_pairs())
    else:
        assert result["alone_accuracy"] is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_judge_that_prefers_one_model_scores_half_on_same_model_pairs(protocol):
    # q's answers score 2 or 3 (the later sample higher), s's 0, wherever they are shown
    stub = StubJudge(lambda answer, position: 0 if answer.startswith("s#")
                     else 2 + int(answer.split("#")[1]))
    result = judged(protocol, stub, bench_pairs())
    same, cross = result["by_pair_type"]["same_model"], result["by_pair_type"]["cross_model"]
    assert (same["k"], same["n"]) == (2, 4)  # the model shortcut is no help here: chance
    assert (cross["k"], cross["n"]) == (2, 4)  # right exactly when q is the one that passes
    assert result["first_position"] == 0.5 and result["order_consistency"] == 1.0
    if not jp.PROTOCOLS[protocol].shows_pair:  # position plays no part: alone says the same
        assert result["alone_accuracy"]["k"] == result["correct"] == 4
    sp = result["self_preference"]  # the stub shares q's family: q gets away with failing
    assert sp["kin_failed_picked"]["rate"] == 1.0 and sp["other_failed_picked"]["rate"] == 0.0


@pytest.mark.parametrize("k,n", [(0, 7), (3, 10), (10, 10), (57, 150)])
def test_card_intervals_are_scipy_exact_intervals(k, n):
    frame = pd.DataFrame({"verdict": ["a"] * k + ["b"] * (n - k), "passed": ["a"] * n})
    got = card._accuracy(frame)
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert (got["k"], got["n"]) == (k, n)
    assert got["ci_low"] == pytest.approx(ci.low, abs=1e-12)
    assert got["ci_high"] == pytest.approx(ci.high, abs=1e-12)


def test_card_entry_has_the_interface_fields_and_its_interval_is_exact():
    stub = StubJudge(lambda answer, position: 0 if answer.startswith("s#") else 3)
    result = judged("pairwise_logprob", stub, bench_pairs())
    for field in ("judge", "protocol", "reference", "n", "correct", "accuracy", "ci_low",
                  "ci_high", "first_position", "order_consistency", "kappa"):
        assert field in result
    ci = binomtest(result["correct"], result["n"]).proportion_ci(method="exact")
    assert (result["ci_low"], result["ci_high"]) == pytest.approx((ci.low, ci.high))
    assert result["reference"] is False and result["seconds_per_verdict"] == 1.0


def test_length_bias_counts_picks_of_the_failing_answer_by_length():
    frame = pd.DataFrame({"passed": ["a", "a", "b", "b"], "verdict": ["b", "a", "a", "tie"],
                          "chars_a": [10, 10, 30, 5], "chars_b": [20, 5, 10, 9]})
    got = card.length_bias(frame)
    # failing longer: pairs 0 (picked) and 2 (picked); failing shorter: pairs 1 and 3 (not)
    assert (got["failing_longer"]["k"], got["failing_longer"]["n"]) == (2, 2)
    assert (got["failing_shorter"]["k"], got["failing_shorter"]["n"]) == (0, 2)


def test_config_errors_name_the_problem():
    v = Variant(judge="j", protocol="pointwise_logprob", reference="expert")
    with pytest.raises(ValueError, match="no expert model"):
        BenchConfig(contestants=["q"], variants=[v])
    with pytest.raises(ValueError, match="is a contestant"):
        BenchConfig(contestants=["q"], expert="q", variants=[v])
    with pytest.raises(ValueError, match="duplicate"):
        BenchConfig(contestants=["q"], variants=[Variant(judge="j", protocol="pairwise")] * 2)
    with pytest.raises(ValueError, match="extra"):
        BenchConfig(contestants=["q"], variants=[], sampels=3)


def test_paired_reference_effect_counts_discordant_pairs_and_tests_them_exactly():
    with_ = pd.Series([True, True, True, False, True], index=list("abcde"))
    without = pd.Series([True, False, False, False, True, False], index=list("abcdef"))
    got = card.paired_effect(with_, without)
    assert got["pairs"] == 5 and (got["gained"], got["lost"]) == (2, 0)
    assert (got["with"]["k"], got["without"]["k"]) == (4, 2)
    assert got["p_mcnemar"] == pytest.approx(binomtest(2, 2).pvalue)
    assert card.paired_effect(with_, pd.Series([True], index=["z"])) is None
