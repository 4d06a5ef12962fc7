"""Refine@k and the probe-vs-program gate audit, on synthetic repair and verify tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from arenaforge.pipeline.apps.report import build_report
from arenaforge.pipeline.store import RunStore
from arenaforge.stages.output.audit import AuditConfig, run
from arenaforge.stages.output.audit_verification import (
    gate_agreement,
    refine_at_k,
    repair_rounds_limit,
    verification_metrics,
)
from scipy.stats import binomtest
from sklearn.metrics import cohen_kappa_score
from test_audit_stage import RegistryContext, split_tables
from test_audit_stats import synthetic_audit

PROBE_VERDICTS = ("pass", "no_code", "no_entry_point", "signature_mismatch", "import_error",
                  "example_failed")


def synthetic_repair(n: int, rounds: int, seed: int) -> pd.DataFrame:
    """Repair rows: selected or not, some without tests, failures repaired within 1..R."""
    rng = np.random.default_rng(seed)
    status = rng.choice(["passed", "failed", "error", "no_tests", "no_entry_point"], n,
                        p=[0.5, 0.2, 0.1, 0.1, 0.1]).astype(object)
    repairable = np.isin(status, ("failed", "error", "no_entry_point"))
    fixed = repairable & (rng.random(n) < 0.5)
    used = np.where(repairable, np.where(fixed, rng.integers(1, rounds + 1, n), rounds), 0)
    status[fixed] = "passed"
    return pd.DataFrame({"instruction_id": [f"i{i}" for i in range(n)], "model": "m",
                         "selected": rng.random(n) < 0.7, "status": status,
                         "repaired": fixed, "repair_rounds": used})


@pytest.mark.parametrize("seed, rounds", [(0, 1), (1, 2), (2, 3)])
def test_refine_at_k_counts_like_a_row_by_row_loop_with_exact_intervals(seed, rounds):
    rows = synthetic_repair(300, rounds, seed)
    out = refine_at_k(rows, rounds)
    assert [r["k"] for r in out] == list(range(rounds + 1))
    tested = [r for r in rows.to_dict("records") if r["selected"] and r["status"] != "no_tests"]
    for r in out:
        passed = sum(x["status"] == "passed" and (not x["repaired"] or x["repair_rounds"] <= r["k"])
                     for x in tested)
        assert (r["passed"], r["n"]) == (passed, len(tested))
        ci = binomtest(passed, len(tested)).proportion_ci(method="exact")
        assert (r["ci_low"], r["ci_high"]) == pytest.approx((ci.low, ci.high))
    assert [r["passed"] for r in out] == sorted(r["passed"] for r in out)  # never decreases
    assert out[-1]["passed"] > out[0]["passed"]


def test_rounds_come_from_the_repair_stats_even_when_every_repair_was_early():
    rows = pd.DataFrame({"selected": [True], "status": ["passed"], "repaired": [True],
                         "repair_rounds": [1]})
    assert repair_rounds_limit({"repaired_within.1": 1.0, "repaired_within.3": 1.0}, rows) == 3
    assert repair_rounds_limit({"refine.passed_within.0": 4.0, "refine.passed_within.2": 5.0}) == 2
    assert repair_rounds_limit({}, rows) == 1
    assert repair_rounds_limit({}) == 0
    with pytest.raises(ValueError, match="repair_rounds"):
        refine_at_k(rows.drop(columns=["repair_rounds"]), 1)


def synthetic_gates(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    probe = rng.choice(PROBE_VERDICTS, n, p=[0.7, 0.05, 0.1, 0.05, 0.05, 0.05]).astype(object)
    p_pass = np.where(probe == "pass", 0.8, 0.1)
    program = np.where(rng.random(n) < p_pass, "pass", "fail").astype(object)
    program[rng.random(n) < 0.1] = "no_tests"
    probe[rng.random(n) < 0.03] = None
    return pd.DataFrame({"probe_gate": probe, "program_gate": program})


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gate_table_agreement_and_kappa_match_pandas_and_sklearn(seed):
    rows = synthetic_gates(500, seed)
    out = gate_agreement(rows)
    assert out["rows"] == 500
    assert out["probe_rejected"] == int((rows["probe_gate"].notna()
                                         & (rows["probe_gate"] != "pass")).sum())
    assert out["program_rejected"] == int((rows["program_gate"] == "fail").sum())
    assert sum(out["probe"].values()) == sum(out["program"].values()) == 500
    both = rows[rows["probe_gate"].notna() & rows["program_gate"].isin(["pass", "fail"])]
    probe_ok, program_ok = both["probe_gate"] == "pass", both["program_gate"] == "pass"
    cross = pd.crosstab(probe_ok, program_ok)
    assert out["table"] == {
        "probe_pass": {"program_pass": int(cross.loc[True, True]),
                       "program_fail": int(cross.loc[True, False])},
        "probe_reject": {"program_pass": int(cross.loc[False, True]),
                         "program_fail": int(cross.loc[False, False])}}
    assert out["agreement"]["n"] == len(both)
    assert out["agreement"]["k"] == int((probe_ok == program_ok).sum())
    assert out["kappa"] == pytest.approx(cohen_kappa_score(probe_ok, program_ok))


def test_gates_that_always_agree_have_no_kappa_and_missing_columns_are_named():
    rows = pd.DataFrame({"probe_gate": ["pass"] * 3, "program_gate": ["pass"] * 3})
    out = gate_agreement(rows)
    assert out["agreement"]["rate"] == 1.0 and out["kappa"] is None
    with pytest.raises(ValueError, match="program_gate"):
        gate_agreement(rows.drop(columns=["program_gate"]))
    assert verification_metrics(rows.drop(columns=["program_gate"]), None, {}) == {}


def test_audit_stage_writes_refine_at_k_and_gates_and_shows_them(tmp_path):
    judge, verify = split_tables(synthetic_audit(n=200, seed=5))
    gates = synthetic_gates(len(verify), seed=7)
    verify = verify.assign(probe_gate=gates["probe_gate"].to_numpy(),
                           program_gate=np.where(verify["status"] == "no_tests", "no_tests",
                                                 gates["program_gate"].to_numpy()))
    # a candidate with no bindable function: has tests, never a logic failure, never gated
    verify.loc[verify.index[-1], "status"] = "no_entry_point"
    repair = synthetic_repair(len(verify), rounds=2, seed=3)
    repair[["instruction_id", "model"]] = verify[["instruction_id", "model"]].to_numpy()
    RunStore(tmp_path).stage("repair").mark_success(
        {"rows_in": len(repair), "rows_out": len(repair), "dropped": {},
         "stats": {"repaired_within.1": 1.0, "repaired_within.2": 2.0}})
    ctx = RegistryContext({"judge": pa.Table.from_pandas(judge),
                           "rate": pa.Table.from_pandas(verify[["instruction_id", "model"]]
                                                        .assign(winner="m1")),
                           "repair": pa.Table.from_pandas(repair, preserve_index=False)},
                          tmp_path, seed=3)
    result = run(pa.Table.from_pandas(verify, preserve_index=False), AuditConfig(), ctx)

    metrics = json.loads((tmp_path / "audit" / "metrics.json").read_text())
    assert metrics["refine_at_k"] == refine_at_k(repair, 2)
    assert metrics["gates"] == json.loads(json.dumps(gate_agreement(verify)))
    assert result.table.column("gate_admitted")[len(verify) - 1].as_py() is None
    splits = metrics["gate"]["splits"]
    assert splits["calibration"]["rows"] == metrics["gate"]["calibration_rows"]
    assert splits["held_out"]["rows"] == metrics["gate"]["held_out"]["rows"]
    html = build_report(tmp_path).read_text()  # rendered from the metrics, as after a run
    assert "Refine@k" in html and "Probe gate vs program gate" in html
    g = metrics["gates"]
    assert f"rejects <b>{g['probe_rejected']}</b>" in html
    assert f"{metrics['refine_at_k'][2]['passed']} / {metrics['refine_at_k'][2]['n']}" in html
    assert "does not carry over" in html


def test_refine_counts_verified_answers_and_repair_is_repaired_over_attempted():
    import pandas as pd
    from arenaforge.stages.output.audit_verification import refine_at_k, repair_outcome

    rows = pd.DataFrame({
        "selected": [True, True, True, True, False],
        # passed but not verified (answers disagree); repaired; failed; contradictory (0 tests)
        "status": ["passed", "passed", "failed", "contradictory_tests", "passed"],
        "verified": [False, True, False, False, True],
        "tests_total": [3, 3, 3, 0, 3],
        "repaired": [False, True, False, False, False],
        "repair_rounds": [0, 1, 1, 0, 0]})
    assert [(r["passed"], r["n"]) for r in refine_at_k(rows, 1)] == [(0, 3), (1, 3)]
    out = repair_outcome(rows)
    assert (out["k"], out["n"]) == (1, 2) and out["ci_low"] < 0.5 < out["ci_high"]
