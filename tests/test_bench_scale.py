"""``scripts/bench_scale.py`` at a tiny size: the whole pipeline on 5 served experts (the load
generator of ``scripts/load_server.py``), a local Ray and the real sandbox."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("instructions", "wall_s", "driver_peak_rss_mb", "overhead_share", "rows_emitted")


def bench(tmp_path: Path, *args: str) -> dict:
    """``bench_scale.py --instructions 60 ARGS``: its one JSON entry."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_scale.py"), "--instructions", "60",
         *args, "--json", str(out), "--workdir", str(tmp_path / "work")],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=880)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [entry] = json.loads(out.read_text())
    return entry


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_scale_tiny_run_writes_its_numbers(tmp_path):
    entry = bench(tmp_path)
    assert all(k in entry for k in KEYS), sorted(entry)
    assert entry["instructions"] == 60
    assert entry["rows_emitted"] > 0
    assert 0 <= entry["overhead_share"] <= 1
    assert entry["driver_peak_rss_mb"] > 0
    stages = entry["stages"]
    assert stages["answer"]["rows_out"] == 5 * stages["answer"]["rows_in"]  # five experts
    assert stages["judge"]["model_s"] > 0 and stages["verify"]["other_s"] > 0
    assert entry["server_requests"] > 0
    # who held the cores: the stage workers and the load generator each did at some stage
    cores = entry["cores_by_stage"]
    assert any(row.get("stage workers", 0) > 0 for row in cores.values()), cores
    assert any(row.get("load generator", 0) > 0 for row in cores.values()), cores


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_scale_runs_a_users_config_with_its_experts_mining(tmp_path):
    # configs/openai.yaml as it is: three experts mine the instructions from their templates,
    # two of them judge, the third writes the tests; every request waits 5 ms
    entry = bench(tmp_path, "--config", str(ROOT / "configs" / "openai.yaml"),
                  "--ms-per-request", "5")
    stages = entry["stages"]
    assert stages["mine"]["rows_out"] == 60  # 20 samples from each of the three experts
    assert stages["answer"]["rows_out"] == 3 * stages["answer"]["rows_in"]
    assert set(entry["servers"]) == {"qwen2.5-coder-7b", "deepseek-coder-6.7b",
                                     "starcoder2-15b-instruct"}
    # the config's roles: only its test author wrote tests, only its judges judged
    assert [e for e, s in entry["servers"].items() if "testgen" in s["requests"]] == [
        "qwen2.5-coder-7b"]
    assert "logprob_pointwise" not in entry["servers"]["qwen2.5-coder-7b"]["requests"]
    walls = sum(s["wall_s"] for s in stages.values())
    assert entry["model_stages_wall_s"] + entry["other_stages_wall_s"] == pytest.approx(walls,
                                                                                        abs=0.1)
    assert 0 < entry["embedding_stages_share"] < 1
    # 5 ms a request: the mining alone waited at least 60 of them, 20 to a server
    assert stages["mine"]["model_s"] >= 0.005 * 20
