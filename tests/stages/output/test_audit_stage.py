"""The ``audit`` stage and ``audit_table`` on synthetic judges with known behaviour."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from arenaforge.pipeline.apps.report import build_report
from arenaforge.stages.output.audit import (
    STAGE,
    AuditConfig,
    audit_table,
    build_audit_rows,
    run,
)
from test_audit_stats import synthetic_audit

from tests.stages.arena.test_ratings_stage import TableContext

FAMILIES = {"kin": "fam1", "m1": "fam1", "m2": "fam2", "good": "fam3", "first": "fam4"}


class RegistryContext(TableContext):
    def model_spec(self, model_id):
        if model_id not in FAMILIES:
            raise KeyError(model_id)
        return SimpleNamespace(family=FAMILIES[model_id])


def split_tables(rows: pd.DataFrame, untested: int = 30):
    """Audit rows -> (judge table, verify table), some instructions without tests."""
    judge = rows.drop(columns=["status_a", "status_b", "difficulty"])
    # the synthetic judges' orders are separate verdicts: each order's reading is its verdict
    judge["order_verdict"] = judge["verdict"]
    sides = pd.concat([
        rows[["instruction_id", "model_a", "status_a"]].set_axis(
            ["instruction_id", "model", "status"], axis=1),
        rows[["instruction_id", "model_b", "status_b"]].set_axis(
            ["instruction_id", "model", "status"], axis=1),
    ]).drop_duplicates(["instruction_id", "model"], ignore_index=True)
    no_tests = sides["instruction_id"].isin(sorted(sides["instruction_id"].unique())[:untested])
    sides.loc[no_tests, "status"] = "no_tests"
    sides["tests_passed"] = (sides["status"] == "passed").astype(int)
    sides["tests_total"] = np.where(no_tests, 0, 1)
    return judge, sides


def test_audit_table_schema_and_values():
    rows = synthetic_audit(n=300, seed=4)
    metrics = audit_table(rows, families=FAMILIES, gate_epsilon=0.2)
    json.dumps(metrics, allow_nan=False)  # JSON-ready, no NaN
    assert metrics["schema_version"] == 1
    assert metrics["counts"]["battles"] == 300 and metrics["counts"]["judges"] == 3
    assert set(metrics) >= {"judges", "self_preference", "threshold_sensitivity",
                            "reliability", "gate"}
    assert metrics["judges"]["per_judge"]["first"]["rate"] == 0.0
    assert metrics["self_preference"]["kin"]["kin_share"] == 1.0
    assert [t["threshold"] for t in metrics["threshold_sensitivity"]] == [1.0, 2.0, 3.0]
    with pytest.raises(Exception, match="extra"):
        audit_table(rows, gate_epsilonn=0.2)


def test_audit_stage_writes_metrics_and_gate_columns_and_the_report_shows_them(tmp_path):
    judge, verify = split_tables(synthetic_audit(n=300, seed=6))
    rate = verify[["instruction_id", "model"]].assign(winner="m1")
    ratings = pd.DataFrame({"model": ["m1", "m2"], "rating": [1010.0, 990.0],
                            "ci_low": [980.0, 960.0], "ci_high": [1040.0, 1020.0],
                            "battles": [900, 900], "win_rate": [0.51, 0.49]})
    (tmp_path / "rate").mkdir()
    ratings.to_parquet(tmp_path / "rate" / "ratings.parquet")
    ctx = RegistryContext({"judge": pa.Table.from_pandas(judge),
                           "rate": pa.Table.from_pandas(rate)}, tmp_path, seed=3)
    table = pa.Table.from_pandas(verify, preserve_index=False)
    result = run(table, AuditConfig(gate_epsilon=0.25), ctx)

    out = result.table.to_pandas()
    assert set(STAGE.outputs) <= set(out.columns) and len(out) == len(verify)
    decided = out["status"] != "no_tests"
    assert out.loc[decided, "gate_admitted"].isna().all()
    assert out.loc[~decided, "gate_admitted"].notna().all()
    assert out["judge_score"].between(0, 3).all()
    metrics = json.loads((tmp_path / "audit" / "metrics.json").read_text())
    gate = metrics["gate"]
    assert int(out["gate_admitted"].fillna(False).sum()) == gate["without_tests"]["admitted"]
    if gate["threshold"] is not None:
        admitted = out.loc[~decided & (out["judge_score"] >= gate["threshold"])]
        assert len(admitted) == gate["without_tests"]["admitted"]
    assert metrics["winners"]["instructions"] == verify["instruction_id"].nunique()
    assert "self_preference" in metrics and "kin" in metrics["self_preference"]
    assert result.stats["separated_battles"] == metrics["judges"]["separated_battles"]
    assert not (tmp_path / "audit" / "report.html").exists()  # the stage renders nothing
    html = build_report(tmp_path).read_text()  # what the runner does after the run
    assert "Leaderboard" in html and "m1" in html and "data:image/png;base64," in html


def test_build_audit_rows_rejects_duplicate_status():
    judge, verify = split_tables(synthetic_audit(n=5, seed=1))
    with pytest.raises(ValueError, match="verify table row 10: duplicate"):
        build_audit_rows(judge, pd.concat([verify, verify.iloc[:1]], ignore_index=True))
    rows = build_audit_rows(judge, verify)
    assert rows["status_a"].notna().all() and len(rows) == len(judge)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_audit_file_on_user_tables(tmp_path, suffix):
    from arenaforge.pipeline.apps.report import audit_file

    rows = synthetic_audit(n=60, seed=2)
    path = tmp_path / f"mine{suffix}"
    {".parquet": lambda: rows.to_parquet(path), ".csv": lambda: rows.to_csv(path, index=False),
     ".jsonl": lambda: rows.to_json(path, orient="records", lines=True)}[suffix]()
    report = audit_file(path, tmp_path / "out")
    assert report.is_file() and (tmp_path / "out" / "metrics.json").is_file()
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["counts"]["battles"] == 60


def test_audit_without_parsed_verdicts_or_separation():
    from arenaforge.pipeline.apps.report import render_report

    rows = pd.DataFrame({"instruction_id": ["i", "i"], "model_a": ["x", "x"],
                         "model_b": ["y", "y"], "judge": ["z", "z"], "order": ["ab", "ba"],
                         "verdict": [None, None], "status_a": ["no_tests"] * 2,
                         "status_b": ["passed"] * 2})
    metrics = audit_table(rows)
    assert metrics["judges"]["separated_battles"] == 0
    assert metrics["judges"]["majority"]["rate"] is None
    assert metrics["gate"]["threshold"] is None
    assert metrics["gate"]["without_tests"] == {"rows": 1, "admitted": 0}
    assert "n/a" in render_report(metrics)
