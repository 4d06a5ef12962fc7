"""A run that needs a language whose toolchain is not installed stops before any model runs:
``arenaforge run`` exits 2 naming the language, where the run takes it from and what is missing,
and writes nothing. The toolchains are made missing the way a machine lacks them: a ``PATH``
without their commands (Python's is the interpreter running arenaforge, always there)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from arenaforge.pipeline.config import load_config
from arenaforge.pipeline.sandbox.languages import ToolchainUnavailable, toolchain
from arenaforge.pipeline.toolchain_check import check_toolchains, sandbox_languages

from tests.e2e.conftest import ROOT, cli_command, write_config
from tests.e2e.conftest import _env as cli_env

ALL_STAGES = None  # write_config: drop ``stages`` so the run has every stage (tests included)


def _config(path, stages=ALL_STAGES, **mine):
    config = write_config(path)
    data = yaml.safe_load(config.read_text())
    if stages is ALL_STAGES:
        data.pop("stages")
    else:
        data["stages"] = stages
    data["mine"].update(mine)
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """A PATH with no compiler or runtime on it; the toolchains are looked up afresh."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    toolchain.cache_clear()
    yield str(empty)
    monkeypatch.undo()
    toolchain.cache_clear()


def _source(tmp_path):
    path = tmp_path / "tasks.jsonl"
    rows = [{"instruction": "Reverse a string."},
            {"instruction": "Sum a list of integers.", "language": "C++"},
            {"instruction": "Print the sum of two integers read from stdin.", "language": "rust",
             "task_kind": "program"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_languages_come_from_the_instruction_file_or_mine_languages(tmp_path):
    source = _source(tmp_path)
    cfg = load_config(_config(tmp_path / "a.yaml", source=str(source)), [])
    origin = f"the rows of mine.source {source}"
    assert sandbox_languages(cfg) == {"python": origin, "cpp": origin, "rust": origin}
    cfg = load_config(_config(tmp_path / "b.yaml", languages=["JavaScript", "golang"]), [])
    assert sandbox_languages(cfg) == {"javascript": "mine.languages", "go": "mine.languages"}
    # a run without the sandbox stages compiles nothing
    cfg = load_config(_config(tmp_path / "c.yaml", stages=["mine", "clean"],
                              languages=["C++"]), [])
    assert sandbox_languages(cfg) == {}


def test_a_missing_toolchain_is_named_with_its_origin(tmp_path, bare_path):
    source = _source(tmp_path)
    cfg = load_config(_config(tmp_path / "run.yaml", source=str(source)), [])
    with pytest.raises(ToolchainUnavailable) as caught:
        check_toolchains(cfg)
    message = str(caught.value)
    assert "2 language(s)" in message, message
    assert f"C++ (from the rows of mine.source {source}): `g++` not found" in message, message
    assert "Rust (from the rows of mine.source " in message and "`rustc` not found" in message
    assert "Python" not in message  # the interpreter running arenaforge
    assert "scripts/setup.sh" in message and "arenaforge sandbox languages" in message
    # a run from Python stops the same way, before its run directory exists
    from arenaforge.pipeline.runner import run_pipeline

    with pytest.raises(ToolchainUnavailable):
        run_pipeline(cfg, show_progress=False)
    assert not (Path(cfg.artifacts_dir) / cfg.name).exists()
    # Python alone needs nothing else; a run without the tests stage needs no toolchain
    check_toolchains(load_config(_config(tmp_path / "py.yaml", languages=["Python"]), []))
    check_toolchains(load_config(_config(tmp_path / "mine.yaml", stages=["mine", "clean"],
                                         languages=["C++"]), []))


def test_arenaforge_run_exits_2_before_any_model_and_writes_nothing(tmp_path):
    artifacts = tmp_path / "runs"
    artifacts.mkdir()
    empty = tmp_path / "bin"
    empty.mkdir()
    config = _config(tmp_path / "run.yaml", languages=["Python", "C++", "JavaScript"])
    proc = subprocess.run(cli_command(config, artifacts), cwd=ROOT, text=True,
                          capture_output=True, timeout=300, check=False,
                          env=dict(cli_env(), PATH=str(empty)))
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2, out
    assert "C++ (from mine.languages): `g++` not found" in out, out
    assert "JavaScript (from mine.languages): `node` not found" in out, out
    assert "Traceback" not in out
    assert not any(artifacts.iterdir())


def test_a_run_with_installed_toolchains_passes_the_check(tmp_path):
    installed = [lang for lang in ("python", "cpp", "javascript") if toolchain(lang).available]
    check_toolchains(load_config(_config(tmp_path / "run.yaml", languages=installed), []))
