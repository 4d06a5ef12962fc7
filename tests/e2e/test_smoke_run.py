"""configs/smoke.yaml end to end with the real embedded experts on a real local Ray."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
PROVENANCE = ("repaired", "repair_rounds", "replaced_judge_pick", "judge_pick", "selection_rule",
              "miner", "template", "judges", "tests_visible_passed", "tests_hidden_passed",
              "tests_augmented_passed", "tests_visible", "tests_hidden", "tests_augmented",
              "probe_gate", "program_gate")
# the provenance a user filters on, and the figures of the audit's evidence section
FILTERS = ("gate_admitted", "test_authors", "judge_verdicts", "local_share", "margin",
           "kcenter_rank", "admission")
NO_USABLE_CODE = ("no_code", "no_entry_point", "import_error", "signature_mismatch")


@pytest.mark.slow
@pytest.mark.models
def test_smoke_config_runs_every_stage_and_emits_a_loadable_dataset(tmp_path):
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "arenaforge.pipeline.cli", "run", "configs/smoke.yaml", "--quiet",
           "--set", f"artifacts_dir={runs}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run_dir = runs / "smoke"

    stats = json.loads((run_dir / "stats.json").read_text())
    from arenaforge.stages import PIPELINE

    assert set(stats) == set(PIPELINE)
    assert stats["mine"]["rows_out"] > 0
    judge = pq.read_table(run_dir / "rate" / "battles.parquet")
    assert judge.num_rows > 0
    ratings = pq.read_table(run_dir / "rate" / "ratings.parquet").to_pylist()
    assert {r["model"] for r in ratings} == {"qwen2.5-coder-0.5b", "smollm2-135m"}
    # the 1.5B, the uninvolved expert the judge card chose, judged the battles
    assert set(judge.column("judge").to_pylist()) == {"qwen2.5-coder-1.5b"}
    metrics = json.loads((run_dir / "audit" / "metrics.json").read_text())
    assert metrics["schema_version"] == 1
    assert (run_dir / "audit" / "report.html").stat().st_size > 10_000
    # Refine@k for k = 0..R (smoke: R = 1) over the same tested answers, and both gates
    assert [r["k"] for r in metrics["refine_at_k"]] == [0, 1]
    # the audit counts from the repair rows what the repair stage counted as it went
    repair = stats["repair"]["stats"]
    assert [(r["passed"], r["n"]) for r in metrics["refine_at_k"]] == [
        (repair[f"refine.passed_within.{k}"], repair["refine.tested"]) for k in (0, 1)]
    assert metrics["gates"]["rows"] == stats["verify"]["rows_out"]
    assert set(metrics["gate"]["splits"]) == {"calibration", "held_out"}
    # the judge writes no test: no trusted test is one of its own verdicts' twin
    assert metrics["circular_trusted_tests"] == 0 and metrics["trusted_tests"] > 0
    assert 0 <= metrics["alpha_decisive_share"] <= 1

    from datasets import load_dataset
    from trl.data_utils import is_conversational

    files = sorted(str(p) for p in (run_dir / "dataset").glob("train-*.parquet"))
    assert files, "emit wrote no dataset shard"
    ds = load_dataset("parquet", data_files=files, split="train")
    assert len(ds) == stats["emit"]["rows_out"]
    assert all(is_conversational(row) for row in ds)
    card = (run_dir / "dataset" / "README.md").read_text()
    assert "does not carry over" in card
    # the dataset's provenance columns (a contract), exactly these names, once loaded
    assert set(PROVENANCE) <= set(ds.column_names) and set(FILTERS) <= set(ds.column_names)
    for row in ds:
        assert row["probe_gate"] is not None and row["program_gate"] is not None
        assert row["probe_gate"] not in NO_USABLE_CODE  # never emitted, whatever the judge said
        assert row["selection_rule"] is not None
        assert not row["verified"] or (row["status"] == "passed"
                                       and row["admission"] == "verified"
                                       and row["probe_gate"] == "pass")
        assert row["gate_admitted"] == (not row["verified"])
        assert "qwen2.5-coder-1.5b" not in row["test_authors"]
        assert {v["order"] for v in row["judge_verdicts"]} == {"ab", "ba"}
        assert row["judges"] == ["qwen2.5-coder-1.5b"]
        assert row["miner"] == "qwen2.5-coder-0.5b"
        assert row["tests_hidden_passed"] <= row["tests_hidden"]

    # A second run finds everything complete and recomputes nothing.
    markers = {p: p.stat().st_mtime_ns for p in run_dir.glob("stages/*/part-*.done.json")}
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                           check=False)
    assert again.returncode == 0, again.stderr[-4000:]
    assert {p: p.stat().st_mtime_ns for p in markers} == markers
