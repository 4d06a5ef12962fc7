"""A run directory moved or copied elsewhere (another folder, or another machine where the
shared filesystem is mounted under another prefix) still resumes, reports and emits: nothing
inside it names the place where it was made."""

from __future__ import annotations

import shutil
from pathlib import Path

from arenaforge.pipeline.config import load_config
from arenaforge.pipeline.runner import run_pipeline

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "tests" / "data" / "instructions-20.jsonl"


def _files(folder: Path) -> dict[Path, bytes]:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_a_copied_run_directory_resumes_from_its_own_config_where_it_lies(tmp_path):
    made = tmp_path / "made" / "runs"
    cfg = load_config(ROOT / "configs" / "tiny-llm.yaml", [
        f"mine.source={SEED}", f"artifacts_dir={made}", "name=r1"])
    first = run_pipeline(cfg, show_progress=False)
    assert [s.recomputed for s in first.funnel] == ["not complete", "not complete"]

    copy = tmp_path / "elsewhere" / "deeper" / "r1-copy"
    shutil.copytree(made / "r1", copy)
    for rel, data in _files(copy).items():  # no file of the run names where it was made
        assert str(made).encode() not in data, rel

    # its own config.yaml resumes it where it lies now, not where it was made
    again = load_config(copy / "config.yaml")
    assert (Path(again.artifacts_dir), again.name) == (copy.parent, "r1-copy")
    assert again.config_hash() == cfg.config_hash()
    original = _files(made / "r1")
    resumed = run_pipeline(again, show_progress=False)
    assert Path(resumed.run_dir) == copy
    assert [s.recomputed for s in resumed.funnel] == [None, None]  # nothing recomputed
    assert _files(made / "r1") == original  # and the original was not touched
