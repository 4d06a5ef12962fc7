"""Helpers for the end-to-end tests: run the real CLI, seed run directories, read them back.

The e2e tests drive ``arenaforge run`` (``python -m arenaforge.pipeline.cli run``) in a subprocess, as a
user would, so that SIGKILL, exit codes and messages are the real ones. A test that needs a
later stage without paying for the stages before it *seeds* the run directory: it opens the run
with the config's hash and writes the upstream stage's output as a complete stage, exactly as
the runner would have; ``arenaforge run`` with ``stages: [that stage]`` then resumes from there.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny-llm.yaml"
QWEN, SMOL = "qwen2.5-coder-0.5b", "smollm2-135m"


def cli_command(config: Path, artifacts: Path, overrides: list[str] = ()) -> list[str]:
    """The ``arenaforge run`` command line for ``config`` with runs under ``artifacts``."""
    sets = [f"artifacts_dir={artifacts}", *overrides]
    return [sys.executable, "-m", "arenaforge.pipeline.cli", "run", str(config), "--quiet",
            *[arg for s in sets for arg in ("--set", s)]]


def run_cli(config: Path, artifacts: Path, overrides: list[str] = (),
            timeout: float = 900) -> subprocess.CompletedProcess:
    """Run ``arenaforge run`` to the end; returns the finished process (text output)."""
    return subprocess.run(cli_command(config, artifacts, overrides), cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, env=_env(), check=False)


def start_cli(config: Path, artifacts: Path, overrides: list[str] = ()) -> subprocess.Popen:
    """Start ``arenaforge run`` in its own process group (so a kill takes all of it)."""
    return subprocess.Popen(cli_command(config, artifacts, overrides), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, env=_env())


def kill_group(proc: subprocess.Popen) -> bool:
    """SIGKILL the whole run (its process group); True when it was still running."""
    alive = proc.poll() is None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    if proc.stderr:
        proc.stderr.close()
    return alive


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="500")  # rich: no wrapped paths
    env.pop("RAY_ADDRESS", None)  # these runs are inline unless a test says otherwise
    return env


def load(config: Path, overrides: list[str] = ()) -> Any:
    from arenaforge.pipeline.config import load_config

    return load_config(config, list(overrides))


def write_config(path: Path, base: Path = TINY, **fields: Any) -> Path:
    """A copy of ``base`` with top-level ``fields`` replaced (``models_file`` made absolute)."""
    data = yaml.safe_load(base.read_text())
    data["models_file"] = str((base.parent / data["models_file"]).resolve())
    data.update(fields)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def write_registry(path: Path, extra: list[dict] = (),
                   changes: dict[str, dict] | None = None) -> Path:
    """A copy of configs/models.yaml plus ``extra`` entries; ``changes[id]`` edits an entry."""
    data = yaml.safe_load((ROOT / "configs" / "models.yaml").read_text())
    for entry in data["models"]:
        entry.update((changes or {}).get(entry["id"], {}))
    data["models"] += list(extra)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def open_run(cfg: Any) -> Path:
    """Create ``cfg``'s run directory as ``arenaforge run`` would (manifest, config)."""
    from arenaforge.pipeline.config import dump_config
    from arenaforge.pipeline.store import RunStore

    run_dir = Path(cfg.artifacts_dir) / cfg.name
    RunStore(run_dir).open(cfg.config_hash(), dump_config(cfg))
    return run_dir


def seed_stage(run_dir: Path, stage: str, table: pa.Table) -> None:
    """Write ``table`` as the complete output of ``stage`` (one shard, marker, _SUCCESS)."""
    from arenaforge.pipeline.shards import DROPPED_SCHEMA
    from arenaforge.pipeline.store import RunStore

    store = RunStore(run_dir).stage(stage)
    store.write_shard(0, table, DROPPED_SCHEMA.empty_table(),
                      {"input_hash": "seeded", "input_rows": table.num_rows, "seconds": 0.0})
    marker = store.shard_done(0, "seeded")
    store.mark_success({"fingerprint": "seeded", "output_hash": marker["sha256"][:16], "shards": 1,
                        "rows_in": table.num_rows, "rows_out": table.num_rows, "dropped": {}})


def instructions_table(texts: list[str | None], language: str = "Python") -> pa.Table:
    """A ``compress``-shaped input for ``answer``: instruction_id, instruction, language."""
    from arenaforge.pipeline.textnorm import instruction_id

    ids = [instruction_id(t if t is not None else f"<null {i}>") for i, t in enumerate(texts)]
    return pa.table({"instruction_id": ids, "instruction": pa.array(texts, pa.string()),
                     "language": [language] * len(texts)})


def valid_markers(run_dir: Path, stage: str) -> dict[str, float]:
    """``{marker file: written_at}`` of the shards of ``stage`` that are complete and intact."""
    from arenaforge.pipeline.store import read_json

    out = {}
    stage_dir = run_dir / "stages" / stage
    for path in sorted(stage_dir.glob("part-*.done.json")):
        marker = read_json(path)
        index = int(path.name[5:10])
        store_ok = marker and _intact(stage_dir, index, marker)
        if store_ok:
            out[path.name] = marker["written_at"]
    return out


def _intact(stage_dir: Path, index: int, marker: dict) -> bool:
    from arenaforge.pipeline.store import file_sha256

    for name, key in ((f"part-{index:05d}.parquet", "sha256"),
                      (f"part-{index:05d}.dropped.parquet", "dropped_sha256")):
        path = stage_dir / name
        if not path.is_file() or file_sha256(path) != marker.get(key):
            return False
    return True


def cached_requests(run_dir: Path) -> int:
    """Entries in the run's request cache (0 while it does not exist yet)."""
    db = run_dir / "cache" / "requests" / "cache.db"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT COUNT(*) FROM Cache").fetchone()[0]
    except sqlite3.Error:
        return 0  # created but not initialised yet, or locked for a moment


def stage_output(run_dir: Path, stage: str, which: str = "kept") -> pa.Table:
    from arenaforge.pipeline.store import RunStore

    return RunStore(run_dir).stage(stage).read(which)


@pytest.fixture()
def artifacts(tmp_path: Path) -> Path:
    """A fresh artifacts_dir for one test (never the repository's artifacts/)."""
    path = tmp_path / "runs"
    path.mkdir()
    return path
