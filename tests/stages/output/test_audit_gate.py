"""Calibrated gate: exact one-sided bounds, Bonferroni choice, held-out failure rate."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from arenaforge.stages.output.gate import calibrate_gate, calibration_split, run_gate
from scipy.stats import beta

FAIL_BY_SCORE = np.array([0.8, 0.5, 0.2, 0.03])  # P(execution fails | judge score 0..3)


def synthetic_answers(n: int, seed: int, no_tests: float = 0.2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    score = rng.integers(0, 4, n)
    failed = rng.random(n) < FAIL_BY_SCORE[score]
    status = np.where(failed, rng.choice(["failed", "error", "timeout"], n), "passed").astype(object)
    status[rng.random(n) < no_tests] = "no_tests"
    return pd.DataFrame({"instruction_id": [f"i{i // 2}" for i in range(n)],
                         "judge_score": score.astype(float), "status": status})


def test_calibration_picks_loosest_threshold_under_bonferroni():
    scores = [3.0] * 100 + [2.0] * 100 + [1.0] * 50
    failed = [False] * 99 + [True] + [False] * 90 + [True] * 10 + [True] * 25 + [False] * 25
    out = calibrate_gate(scores, failed, grid=(1.0, 2.0, 3.0), epsilon=0.1, delta=0.3)
    assert out["level_per_threshold"] == pytest.approx(0.1)
    by_t = {r["threshold"]: r for r in out["grid"]}
    assert (by_t[3.0]["admitted"], by_t[3.0]["failures"]) == (100, 1)
    assert (by_t[2.0]["admitted"], by_t[2.0]["failures"]) == (200, 11)
    assert by_t[2.0]["upper_bound"] == pytest.approx(beta.ppf(0.9, 12, 189))
    assert by_t[1.0]["upper_bound"] > 0.1  # 36 / 250 fail
    assert out["threshold"] == 2.0
    strict = calibrate_gate(scores, failed, grid=(1.0, 2.0, 3.0), epsilon=0.01, delta=0.3)
    assert strict["threshold"] is None
    with pytest.raises(ValueError, match="epsilon and delta"):
        calibrate_gate(scores, failed, epsilon=0.0)


def test_split_is_grouped_and_seeded():
    ids = [f"i{i // 3}" for i in range(300)]
    mask = calibration_split(ids, 0.5, seed=4)
    frame = pd.DataFrame({"id": ids, "calib": mask})
    assert (frame.groupby("id")["calib"].nunique() == 1).all()
    assert mask.sum() == 150
    assert (calibration_split(ids, 0.5, seed=4) == mask).all()


def test_gate_controls_held_out_failure_rate():
    """Over many synthetic runs the realised held-out failure rate stays under epsilon."""
    epsilon, violations, chosen = 0.1, 0, []
    for seed in range(30):
        report, _admitted = run_gate(synthetic_answers(1200, seed), epsilon=epsilon, delta=0.1,
                                    seed=seed)
        chosen.append(report["threshold"])
        violations += report["held_out"]["rate"] is not None and \
            report["held_out"]["rate"] > epsilon
    # only score 3 (3% failures) is safe at epsilon 0.1; score >= 2.5 admits the same rows
    assert set(chosen) <= {2.5, 3.0, None} and chosen.count(2.5) >= 20
    assert violations <= 3


def test_gate_admits_only_rows_without_tests():
    answers = synthetic_answers(800, seed=1)
    report, admitted = run_gate(answers, epsilon=0.1, delta=0.1)
    no_tests = answers["status"] == "no_tests"
    assert not admitted[~no_tests.to_numpy()].any()
    t = report["threshold"]
    assert t is not None
    assert admitted.sum() == ((answers["judge_score"] >= t) & no_tests).sum()
    assert report["without_tests"] == {"rows": int(no_tests.sum()), "admitted": int(admitted.sum())}
    held = report["held_out"]
    assert held["n"] > 0 and 0 <= held["rate"] <= 1 and held["ci_low"] <= held["rate"]


def test_gate_reports_split_sizes_and_never_admits_answers_that_had_tests():
    answers = synthetic_answers(600, seed=2)
    # an answer with no bindable function had tests: execution, not the judge, decides it
    answers.loc[answers.index[:40], "status"] = "no_entry_point"
    answers.loc[answers.index[:40], "judge_score"] = 3.0
    report, admitted = run_gate(answers, epsilon=0.1, delta=0.1, seed=5)
    assert not admitted[:40].any()
    no_tests = answers["status"] == "no_tests"
    assert report["without_tests"]["rows"] == int(no_tests.sum())
    executable = answers["status"].isin(["passed", "failed", "error", "timeout", "memory"])
    calib, held = report["splits"]["calibration"], report["splits"]["held_out"]
    assert calib["rows"] + held["rows"] == int(executable.sum())
    assert calib["rows"] == report["calibration_rows"]
    assert held["rows"] == report["held_out"]["rows"]
    mask = calibration_split(answers["instruction_id"], 0.5, 5) & executable.to_numpy()
    assert calib["instructions"] == answers.loc[mask, "instruction_id"].nunique()
    assert held["instructions"] == answers.loc[~mask & executable, "instruction_id"].nunique()
