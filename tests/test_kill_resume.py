"""SIGKILL a run at random moments; each rerun resumes, and the end result is exactly once."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from arenaforge.pipeline.store import RunStore

SCRIPT = Path(__file__).with_name("toy_pipeline.py")


def _start(run_dir: Path) -> subprocess.Popen:
    # 30 shards of 0.4 s each: ~12 s of work, more than 20 kills can consume on an idle machine
    return subprocess.Popen([sys.executable, str(SCRIPT), str(run_dir), "0.4"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _tables(run_dir: Path) -> dict:
    store = RunStore(run_dir)
    out = {s: store.stage(s).read().sort_by("i").to_pylist() for s in ("gen", "square", "filter")}
    out["dropped"] = sorted(pq.read_table(run_dir / "dropped.parquet").to_pylist(),
                            key=lambda r: r["row"])
    return out


def test_sigkill_at_random_points_then_rerun_is_exactly_once(tmp_path):
    reference = tmp_path / "reference"
    assert subprocess.run([sys.executable, str(SCRIPT), str(reference), "0"]).returncode == 0
    expected = _tables(reference)

    run_dir = tmp_path / "killed"
    rng = random.Random(1234)
    kills = 0
    for _ in range(40):
        proc = _start(run_dir)
        time.sleep(rng.uniform(0.3, 1.6))  # imports take ~0.5 s, then shards complete
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        if kills == 20:
            break
    assert kills == 20
    final = _start(run_dir)
    _, err = final.communicate(timeout=120)
    assert final.returncode == 0, err.decode()[-2000:]

    got = _tables(run_dir)
    assert got == expected
    ids = [r["instruction_id"] for r in got["square"]]
    assert len(ids) == len(set(ids)) == 60
    # no stray temp files survive the kills
    assert not list(run_dir.rglob("*.tmp"))
