"""Audit statistics on synthetic judges with known behaviour, checked against scipy/sklearn."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from arenaforge.stages.arena.rate import resolve_battles
from arenaforge.stages.output.audit_stats import (
    agreement,
    answer_scores,
    cohen_kappa,
    execution_verdict,
    judge_agreement,
    majority_verdicts,
    reliability,
    self_preference,
    threshold_sensitivity,
)
from scipy.stats import binomtest
from sklearn.metrics import cohen_kappa_score


def synthetic_audit(n: int = 400, seed: int = 0, accuracy: float = 0.8) -> pd.DataFrame:
    """Battles of m1 vs m2 (pair order random) judged by three judges in both orders.

    * ``good``: order-consistent, picks the execution winner with prob. ``accuracy`` (on
      unseparated battles: a coin flip);
    * ``first``: always picks the answer shown first (pure position bias);
    * ``kin``: family of ``m1``, always picks m1.
    Statuses: 80% separated, the rest both passed; difficulty uniform 1-10.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        a, b = ("m1", "m2") if rng.random() < 0.5 else ("m2", "m1")
        if rng.random() < 0.8:
            ok_a = rng.random() < 0.5
            status_a, status_b = ("passed", "failed") if ok_a else ("timeout", "passed")
            truth = "a" if ok_a else "b"
        else:
            status_a = status_b = "passed"
            truth = "a" if rng.random() < 0.5 else "b"
        good = truth if rng.random() < accuracy else ("b" if truth == "a" else "a")
        difficulty = float(rng.integers(1, 11))
        for judge in ("good", "first", "kin"):
            for order in ("ab", "ba"):
                if judge == "good":
                    verdict = good
                elif judge == "first":
                    verdict = "a" if order == "ab" else "b"
                else:
                    verdict = "a" if a == "m1" else "b"
                score_win, score_lose = (3, 1)
                rows.append({
                    "instruction_id": f"i{i:04d}", "model_a": a, "model_b": b, "judge": judge,
                    "order": order, "verdict": verdict,
                    "score_a": score_win if verdict == "a" else score_lose,
                    "score_b": score_win if verdict == "b" else score_lose,
                    "status_a": status_a, "status_b": status_b, "difficulty": difficulty,
                })
    return pd.DataFrame(rows)


def test_kappa_matches_sklearn():
    rng = np.random.default_rng(1)
    for _ in range(20):
        y1 = rng.choice(["a", "b", "tie"], 50)
        y2 = np.where(rng.random(50) < 0.6, y1, rng.choice(["a", "b"], 50))
        assert cohen_kappa(y1, y2) == pytest.approx(cohen_kappa_score(y1, y2))
    assert cohen_kappa(["a", "a"], ["a", "a"]) is None  # undefined, not NaN
    assert agreement(["a", "tie", "b"], ["a", "a", "a"])["judge_ties"] == 1


def test_execution_verdict():
    got = execution_verdict(["passed", "failed", "passed", "no_tests", "error", None],
                            ["memory", "passed", "passed", "failed", "timeout", "passed"])
    assert list(got) == ["a", "b", None, None, None, None]


def test_judge_agreement_recovers_known_judges():
    df = synthetic_audit()
    out = judge_agreement(df)
    sep = df.groupby(["instruction_id"]).first()
    separated = sep[execution_verdict(sep["status_a"], sep["status_b"]) != None]
    assert out["separated_battles"] == len(separated)
    # the good judge: accuracy near 0.8, inside its exact interval, kappa vs sklearn
    good = out["per_judge"]["good"]
    assert good["n"] == len(separated) and good["ci_low"] <= 0.8 <= good["ci_high"]
    battles, _ = resolve_battles(df)
    g = battles[battles["judge"] == "good"].merge(
        df[["instruction_id", "status_a", "status_b"]].drop_duplicates(), on="instruction_id")
    truth = execution_verdict(g["status_a"], g["status_b"])
    keep = truth != None
    assert good["kappa"] == pytest.approx(cohen_kappa_score(truth[keep], g["winner"][keep]))
    assert good["rate"] == pytest.approx(float(np.mean(g["winner"][keep] == truth[keep])))
    # the position-biased judge flips every time: all ties, accuracy 0, first-position rate 1
    first = out["per_judge"]["first"]
    assert first["rate"] == 0.0 and first["judge_ties"] == first["n"]
    assert out["position"]["first"]["first_position_win_rate"] == 1.0
    assert out["position"]["first"]["flip_rate"] == 1.0
    assert out["position"]["good"]["flip_rate"] == 0.0
    assert out["battle_resolution"]["battles_order_flip"] == 400
    # per order: a first-picking judge is right when the shown-first answer passed
    ab = df[(df["order"] == "ab")].drop_duplicates("instruction_id")
    ab_truth = execution_verdict(ab["status_a"], ab["status_b"])
    ab_truth = ab_truth[ab_truth != None]
    n_ab = out["per_order"]["ab"]["n"]
    assert n_ab == 3 * len(ab_truth)  # three judges' single-order verdicts
    assert set(out["by_difficulty"]) == {"easy (<4)", "medium (4-7)", "hard (>=7)"}
    assert sum(v["n"] for v in out["by_difficulty"].values()) == len(separated)
    # majority: good + kin + (first = tie) -> exact interval from scipy on its own counts
    maj = out["majority"]
    ci = binomtest(maj["k"], maj["n"]).proportion_ci(method="exact")
    assert (maj["ci_low"], maj["ci_high"]) == pytest.approx((ci.low, ci.high))
    conf = maj["confusion"]
    assert sum(sum(v.values()) for v in conf.values()) == maj["n"]
    assert conf["exec_a"]["judge_a"] + conf["exec_b"]["judge_b"] == maj["k"]
    assert set(out["per_pair"]) == {"m1 vs m2"}


def test_majority_points_and_ties():
    battles = pd.DataFrame({
        "instruction_id": ["i"] * 3 + ["j"] * 2, "model_a": ["x"] * 5, "model_b": ["y"] * 5,
        "judge": ["p", "q", "r", "p", "q"], "winner": ["a", "tie", "b", "a", "tie"]})
    out = majority_verdicts(battles).set_index("instruction_id")
    assert out.loc["i", "majority"] == "tie" and out.loc["j", "majority"] == "a"
    assert out.loc["j", "points_a"] == 1.5 and out.loc["j", "judges"] == 2


def test_self_preference_detects_kin_bias():
    df = synthetic_audit(n=200, seed=3)
    families = {"kin": "fam1", "m1": "fam1", "m2": "fam2", "good": "fam3", "first": "fam4"}
    out = self_preference(df, families)
    assert set(out) == {"kin"}
    kin = out["kin"]
    assert kin["battles"] == 200 and kin["kin_share"] == 1.0
    assert 0.3 < kin["others_kin_share"] < 0.7  # good (~0.5 for m1) and first (ties: 0.5)
    assert kin["delta"] == pytest.approx(1.0 - kin["others_kin_share"])
    assert kin["kin_failed_picked"] == kin["kin_failed_battles"] > 0


def test_threshold_sensitivity_and_reliability_by_brute_force():
    rng = np.random.default_rng(5)
    n = 300
    score = rng.integers(0, 4, n).astype(float)
    passed = rng.random(n) < np.array([0.1, 0.3, 0.6, 0.9])[score.astype(int)]
    status = np.where(passed, "passed", "failed").astype(object)
    status[:20] = "no_tests"
    answers = pd.DataFrame({"instruction_id": [f"i{i}" for i in range(n)], "model": "m",
                            "judge_score": score, "n_scores": 1, "status": status})
    ex = answers[answers["status"] != "no_tests"]
    for row in threshold_sensitivity(answers, (1, 2, 3)):
        acc = ex["judge_score"] >= row["threshold"]
        ok = ex["status"] == "passed"
        assert row["accepted"] == acc.sum()
        assert row["precision"]["k"] == (acc & ok).sum()
        assert row["recall"] == pytest.approx((acc & ok).sum() / ok.sum())
        assert row["kappa"] == pytest.approx(cohen_kappa_score(acc, ok))
    bins = reliability(answers, edges=(0, 1, 2, 3))
    assert [b["n"] for b in bins] == [(ex["judge_score"] == 0).sum(),
                                      (ex["judge_score"] == 1).sum(),
                                      (ex["judge_score"] >= 2).sum()]  # 3 joins the last bin
    assert bins[0]["rate"] < bins[2]["rate"]


def test_answer_scores_average_both_sides():
    df = synthetic_audit(n=5, seed=2)
    out = answer_scores(df)
    assert len(out) == 10 and (out["n_scores"] == 6).all()
    assert out["judge_score"].between(1, 3).all()


@pytest.mark.parametrize("column, value, message", [
    ("status_a", "ok", "status_a 'ok' not in"),
    ("score_b", 7, "score_b 7 not in 0-3"),
    ("order", "xy", "order 'xy' not in"),
])
def test_bad_audit_rows_name_row_and_column(column, value, message):
    df = synthetic_audit(n=3)
    df.loc[4, column] = value
    with pytest.raises(ValueError, match=f"row 4: {message}"):
        judge_agreement(df)
