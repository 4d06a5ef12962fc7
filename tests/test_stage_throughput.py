"""Scale regression check: the non-model stages keep their rows/s (scripts/profile_stages.py).

Runs the profiling harness at 400 mined requests (140 answered instructions, 420 answers) on
the real sandbox and the embedded MiniLM, and fails when a stage's rows/s (wall) drops below
its floor. Measured on 2 cores (AMD EPYC, 2026-12-01, two runs at load average 4-5 from other
jobs, MiniLM loaded before the harness); the floors sit at a third of the lower figure or
below, so that other processes on the machine do not fail it, and above what the same stages
did before they were fixed (compress 25-37 rows/s, tests 25-32, verify 30-38: one embedding
pass per stage, one sandbox job per test):

========== ================ =======
stage      measured rows/s  floor
========== ================ =======
clean      3,500-4,100      100
decontam.  15-23            5
compress   2,250-3,470      300
tests      240-360          60
verify     296-457          90
========== ================ =======
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {"clean": 100, "decontaminate": 5, "compress": 300, "tests": 60, "verify": 90}


def _harness():
    spec = importlib.util.spec_from_file_location("profile_stages",
                                                  ROOT / "scripts" / "profile_stages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.models
def test_non_model_stages_keep_their_throughput(tmp_path):
    from arenaforge.pipeline.context import RunContext
    from arenaforge.pipeline.sandbox import SandboxConfig, self_check
    from arenaforge.stages.common.embeddings import resolve_model_path

    if self_check(SandboxConfig()):
        pytest.skip(f"sandbox isolation unavailable: {self_check(SandboxConfig())}")
    # the model's loading is not the stage's work (the context keeps it for the process)
    RunContext(tmp_path, SimpleNamespace(seed=0)).embedder(resolve_model_path(None)).model()
    harness = _harness()
    results = harness.main(harness.parse_args(["--size", "400", "--run-dir",
                                               str(tmp_path / "run")]))
    rates = {r["stage"]: r["rows_per_s"] for r in results}
    assert set(rates) == set(FLOORS)
    slow = {stage: rate for stage, rate in rates.items() if rate < FLOORS[stage]}
    assert not slow, f"below the floor (rows/s): {slow}; floors {FLOORS}"
