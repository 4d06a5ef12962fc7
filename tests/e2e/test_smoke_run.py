"""configs/smoke.yaml end to end with the real embedded experts on a real local Ray."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.models
def test_smoke_config_runs_every_stage_and_emits_a_loadable_dataset(tmp_path):
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "pipeline.cli", "run", "configs/smoke.yaml", "--quiet",
           "--set", f"artifacts_dir={runs}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run_dir = runs / "smoke"

    stats = json.loads((run_dir / "stats.json").read_text())
    from stages import PIPELINE

    assert set(stats) == set(PIPELINE)
    assert stats["mine"]["rows_out"] > 0
    judge = pq.read_table(run_dir / "rate" / "battles.parquet")
    assert judge.num_rows > 0
    ratings = pq.read_table(run_dir / "rate" / "ratings.parquet").to_pylist()
    assert {r["model"] for r in ratings} == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    # SmolLM2, the uninvolved expert, judged the battles and its readings parsed.
    assert set(judge.column("judge").to_pylist()) == {"smollm2-135m"}
    metrics = json.loads((run_dir / "audit" / "metrics.json").read_text())
    assert metrics["schema_version"] == 1
    assert (run_dir / "audit" / "report.html").stat().st_size > 10_000

    from datasets import load_dataset
    from trl.data_utils import is_conversational

    files = sorted(str(p) for p in (run_dir / "dataset").glob("train-*.parquet"))
    assert files, "emit wrote no dataset shard"
    ds = load_dataset("parquet", data_files=files, split="train")
    assert len(ds) == stats["emit"]["rows_out"]
    assert all(is_conversational(row) for row in ds)
    assert (run_dir / "dataset" / "README.md").is_file()

    # A second run finds everything complete and recomputes nothing.
    markers = {p: p.stat().st_mtime_ns for p in run_dir.glob("stages/*/part-*.done.json")}
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-4000:]
    assert {p: p.stat().st_mtime_ns for p in markers} == markers
