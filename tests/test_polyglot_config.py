"""``configs/polyglot.yaml``: it loads, ``arenaforge config validate`` accepts it, it mines and
verifies Python, C++ and JavaScript in both task kinds, and the README's configs table lists it.
(Not run end to end here: on the embedded models a run takes far longer than a test may.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from arenaforge.pipeline.config import load_config
from arenaforge.pipeline.toolchain_check import sandbox_languages

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "polyglot.yaml"


def test_it_loads_with_three_languages_and_both_kinds():
    cfg = load_config(CONFIG, [])
    assert cfg.mine.languages == ["python", "cpp", "javascript"]
    assert cfg.mine.task_kinds == ["function", "program"]
    assert {"tests", "verify", "emit"} <= set(cfg.stages)
    # the run-start toolchain check covers exactly these
    assert list(sandbox_languages(cfg)) == ["python", "cpp", "javascript"]
    assert not cfg.role_warnings()  # no model judges battles and writes their tests


def test_config_validate_accepts_it():
    proc = subprocess.run([sys.executable, "-m", "arenaforge.pipeline.cli", "config", "validate",
                           str(CONFIG)], cwd=ROOT, text=True, capture_output=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "configs/polyglot.yaml: ok" in " ".join((proc.stdout + proc.stderr).split())


def test_the_readme_configs_table_lists_it():
    rows = [line for line in (ROOT / "README.md").read_text().splitlines()
            if line.startswith("| `configs/polyglot.yaml` |")]
    assert len(rows) == 1
