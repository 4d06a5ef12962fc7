"""``mine.source`` through the real ``arenaforge run``: a run from a 20-instruction JSONL file
emits a dataset without mining; a bad file stops the run before anything is written (exit 2)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.e2e.conftest import ROOT, run_cli, stage_output

SMOKE = ROOT / "configs" / "smoke.yaml"
SEED = "tests/data/instructions-20.jsonl"  # relative: resolved against the cwd (ROOT)


def _output(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())  # rich wraps long lines


@pytest.mark.parametrize("content, expected", [
    ('{"instruction": "Write a CSV parser in Python."}\n{"instruction": "  "}\n',
     "row 1 (line 2): column 'instruction' is empty"),
    ('{"prompt": "Write a CSV parser in Python."}\n', "no column 'instruction' (columns: prompt)"),
    ('{"instruction": 42}\n', "row 0 (line 1): column 'instruction' is not text (int)"),
    ("", "no rows"),
])
def test_bad_source_fails_before_any_work_with_exit_2(tmp_path, artifacts, content, expected):
    source = tmp_path / "seed.jsonl"
    source.write_text(content)
    proc = run_cli(SMOKE, artifacts, [f"mine.source={source}"], timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"{source}: {expected}" in _output(proc)
    assert "Traceback" not in proc.stderr
    assert not any(artifacts.iterdir())


@pytest.mark.slow
@pytest.mark.models
def test_smoke_run_from_a_jsonl_file_emits_a_dataset_without_mining(artifacts):
    proc = run_cli(SMOKE, artifacts, [f"mine.source={SEED}"], timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run_dir = artifacts / "smoke"
    stats = json.loads((run_dir / "stats.json").read_text())

    mine = stats["mine"]
    assert mine["rows_in"] == mine["rows_out"] == 20
    assert mine["stats"]["source_rows"] == 20
    # No model was asked anything while "mining": no model time, no request.
    assert mine["model_seconds"] == 0 and mine["cache_misses"] == mine["cache_hits"] == 0
    mined = stage_output(run_dir, "mine").to_pylist()
    assert {r["template"] for r in mined} == {"file"} and {r["miner"] for r in mined} == {None}
    assert sorted(json.loads(r["sample_params"])["row"] for r in mined) == list(range(20))
    assert stats["clean"]["rows_in"] == 20

    files = sorted(str(p) for p in (run_dir / "dataset").glob("*.parquet"))
    assert any("/train-" in f for f in files), "emit wrote no train shard"
    emitted = pq.read_table(files).column("instruction_id").to_pylist()
    assert 0 < len(emitted) == stats["emit"]["rows_out"]
    assert set(emitted) <= set(stage_output(run_dir, "clean").column("instruction_id").to_pylist())
