"""Position bias is measured in a run: the audit reads each order's own reading.

A judge biased towards the answer shown first goes through the judge stage under every
protocol and into the audit (``build_audit_rows`` + ``audit_table``, what the audit stage runs):
its first-position preference must come out as 1.0, not the 0.5 that the combined verdicts
(identical on both order rows for the debiased protocols) would show.
"""

from __future__ import annotations

import math
import re

import pandas as pd
import pyarrow as pa
import pytest
from arenaforge.pipeline.backends.base import Completion
from arenaforge.stages.arena import protocols as jp
from arenaforge.stages.arena.judge import JudgeConfig, run
from arenaforge.stages.output.audit import build_audit_rows
from arenaforge.stages.output.audit_stats import audit_rows, judge_agreement, position_bias

_ANSWER = re.compile(r"<answer of (\S+)>")


class FirstShownJudge:
    """Prefers whatever it sees first: Answer A, or the answer it scores first."""

    model_id = "biased"

    def chat(self, conversations, params):
        return [[Completion("Verdict: [[A]]" if len(_ANSWER.findall(c[-1]["content"])) == 2
                            else f"ok\nScore: [[{3 if len(c) == 2 else 0}]]", "stop")]
                for c in conversations]

    def next_token_logprobs(self, conversations, candidates, prefill=""):
        out = []
        for c in conversations:
            pair = len(_ANSWER.findall(c[-1]["content"])) == 2
            probs = ({"A": 0.8, "B": 0.2} if pair else
                     {"0": 0.1, "1": 0.1, "2": 0.1, "3": 0.7} if len(c) == 2 else
                     {"0": 0.7, "1": 0.1, "2": 0.1, "3": 0.1})
            out.append(({t: math.log(probs[t.strip()]) for t in candidates}, None))
        return out


class Ctx:
    seed = 0

    def backend(self, model_id):
        return FirstShownJudge()

    def advance(self, rows):
        pass


def answers(n: int) -> pa.Table:
    return pa.Table.from_pylist([
        {"instruction_id": f"i{k}", "instruction": f"task {k}", "model": m,
         "response": f"<answer of {m}>"} for k in range(n) for m in ("m1", "m2")])


def verify(n: int) -> pd.DataFrame:  # m1 passes the even instructions, m2 the odd ones
    return pd.DataFrame([{"instruction_id": f"i{k}", "model": m,
                          "status": "passed" if (m == "m1") == (k % 2 == 0) else "failed"}
                         for k in range(n) for m in ("m1", "m2")])


@pytest.mark.parametrize("protocol", list(jp.PROTOCOLS))
def test_audit_measures_first_position_from_single_order_readings(protocol):
    judge = run(answers(4), JudgeConfig(protocol=protocol, judges=["biased"]), Ctx()).table
    rows = build_audit_rows(judge.to_pandas(), verify(4))
    position = judge_agreement(rows)["position"]["biased"]
    assert position["first_position_win_rate"] == 1.0
    assert position["order_consistency"] == 0.0 and position["flip_rate"] == 1.0
    # what the combined verdict alone shows: no first-position preference at all (or, for
    # pairwise, whose orders are separate verdicts, the same as the readings)
    combined = position_bias(audit_rows(rows).drop(columns=["order_verdict"]))
    expected = 1.0 if protocol == "pairwise" else None
    got = combined.loc["biased", "first_position_win_rate"]
    assert got == expected if expected is not None else pd.isna(got) or got == 0.5


def test_single_order_agreement_uses_readings():
    judge = run(answers(4), JudgeConfig(protocol="pairwise_logprob", judges=["biased"]),
                Ctx()).table
    per_order = judge_agreement(build_audit_rows(judge.to_pandas(), verify(4)))["per_order"]
    # the reading in order "ab" always names m1 (shown first): right on the two even tasks
    assert (per_order["ab"]["k"], per_order["ab"]["n"]) == (2, 4)
    assert (per_order["ba"]["k"], per_order["ba"]["n"]) == (2, 4)


def test_bad_order_verdict_is_an_error_naming_the_row():
    rows = pd.DataFrame([{"instruction_id": "i", "model_a": "a", "model_b": "b", "judge": "j",
                          "order": "ab", "verdict": "a", "order_verdict": "x",
                          "status_a": "passed", "status_b": "failed"}])
    with pytest.raises(ValueError, match="row 0: order_verdict 'x'"):
        audit_rows(rows)


@pytest.mark.parametrize("protocol", ["pointwise_logprob", "pairwise_logprob"])
def test_the_leaderboard_reads_first_position_from_single_order_readings(protocol, tmp_path):
    """rate's "first-position win rate (as judge)" column: three experts, each judging the
    battle it is not in, all biased towards the first answer."""
    from arenaforge.stages.arena.rate import RateConfig
    from arenaforge.stages.arena.rate import run as rate

    from tests.stages.arena.test_ratings_stage import TableContext

    table = pa.Table.from_pylist([
        {"instruction_id": f"i{k}", "instruction": f"task {k}", "model": m,
         "response": f"<answer of {m}>"} for k in range(3) for m in ("m1", "m2", "m3")])
    judge = run(table, JudgeConfig(protocol=protocol, judges=["m1", "m2", "m3"]), Ctx()).table
    ctx = TableContext({"judge": judge}, tmp_path)
    rate(table, RateConfig(n_bootstrap=0), ctx)
    import pyarrow.parquet as pq

    ratings = pq.read_table(tmp_path / "rate/ratings.parquet").to_pandas()
    assert list(ratings["first_position_win_rate"]) == [1.0, 1.0, 1.0]
