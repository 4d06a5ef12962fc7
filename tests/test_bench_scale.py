"""``scripts/bench_scale.py`` at a tiny size: the whole pipeline on 5 served experts (the load
generator of ``scripts/load_server.py``), a local Ray and the real sandbox."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("instructions", "wall_s", "driver_peak_rss_mb", "overhead_share", "rows_emitted")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_scale_tiny_run_writes_its_numbers(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_scale.py"), "--instructions", "60",
         "--json", str(out), "--workdir", str(tmp_path / "work")],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=880)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [entry] = json.loads(out.read_text())
    assert all(k in entry for k in KEYS), sorted(entry)
    assert entry["instructions"] == 60
    assert entry["rows_emitted"] > 0
    assert 0 <= entry["overhead_share"] <= 1
    assert entry["driver_peak_rss_mb"] > 0
    stages = entry["stages"]
    assert stages["answer"]["rows_out"] == 5 * stages["answer"]["rows_in"]  # five experts
    assert stages["judge"]["model_s"] > 0 and stages["verify"]["other_s"] > 0
    assert entry["server_requests"] > 0
