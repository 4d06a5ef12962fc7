"""A run directory moved or copied elsewhere still resumes, reports and emits: nothing inside
it names the place where it was made, and the files outside it that it uses (the model registry,
``mine.source``) it names absolute."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from arenaforge.pipeline.config import ConfigError, load_config
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


def test_a_run_made_in_the_default_layout_resumes_where_it_is_copied(tmp_path, monkeypatch):
    """``artifacts/runs/NAME`` beside ``configs/``, started with relative names (the registry
    beside the config, ``mine.source`` from the cwd): the copy resumes from another cwd, and
    once the registry is gone it fails naming the registry and how to point at one."""
    project = tmp_path / "project"
    (project / "configs").mkdir(parents=True)
    (project / "data").mkdir()
    for name in ("models.yaml", "tiny-llm.yaml"):
        shutil.copy(ROOT / "configs" / name, project / "configs" / name)
    shutil.copy(SEED, project / "data" / "seed.jsonl")
    monkeypatch.chdir(project)
    cfg = load_config("configs/tiny-llm.yaml", ["mine.source=data/seed.jsonl"])
    made_hash = cfg.config_hash()
    first = run_pipeline(cfg, show_progress=False)
    made = project / "artifacts" / "runs" / "tiny-llm"
    assert Path(first.run_dir).resolve() == made.resolve()
    recorded = yaml.safe_load((made / "config.yaml").read_text())
    registry = (project / "configs" / "models.yaml").resolve()
    assert recorded["models_file"] == str(registry)
    assert recorded["mine"]["source"] == str(project / "data" / "seed.jsonl")

    copy = tmp_path / "elsewhere" / "runs" / "tiny-llm"
    shutil.copytree(made, copy)
    monkeypatch.chdir(tmp_path / "elsewhere")  # no configs/ nor data/ here
    again = load_config(copy / "config.yaml")
    assert again.config_hash() == made_hash
    resumed = run_pipeline(again, show_progress=False)
    assert Path(resumed.run_dir) == copy
    assert [s.recomputed for s in resumed.funnel] == [None, None]

    moved = shutil.move(project / "configs", tmp_path / "moved-configs")
    with pytest.raises(ConfigError) as err:
        load_config(copy / "config.yaml")
    assert str(registry) in str(err.value) and "--set models_file=" in str(err.value)
    pointed = load_config(copy / "config.yaml", [f"models_file={Path(moved) / 'models.yaml'}"])
    assert pointed.config_hash() == made_hash  # the registry's bytes, not its name
    assert [s.recomputed for s in run_pipeline(pointed, show_progress=False).funnel] \
        == [None, None]
