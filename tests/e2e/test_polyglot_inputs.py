"""Languages and task kinds in what a user gives ``arenaforge run``: an unknown language or task
kind in an instruction file, or an unknown language in ``mine.languages``, exits 2 naming the
value (the file, the row or line), before any model runs, and writes nothing."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.e2e.conftest import TINY, run_cli, write_config


def _output(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())  # rich wraps long lines


@pytest.mark.parametrize("column, value, named", [
    ("language", "Klingon", "column 'language': unknown language 'Klingon'"),
    ("task_kind", "script", "column 'task_kind': unknown task kind 'script'"),
])
def test_unknown_value_in_an_instruction_file_exits_2(tmp_path, artifacts, column, value, named):
    source = tmp_path / "tasks.jsonl"
    source.write_text(json.dumps({"instruction": "Sum the numbers of a list.", "language": "C++",
                                  "task_kind": "program"}) + "\n"
                      + json.dumps({"instruction": "Reverse a string.", column: value}) + "\n")
    proc = run_cli(TINY, artifacts, [f"mine.source={source}"], timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert f"{source}: row 1 (line 2): {named}" in _output(proc), _output(proc)
    assert "Traceback" not in proc.stderr
    assert not any(artifacts.iterdir())


def test_unknown_mine_language_names_file_line_and_value(tmp_path, artifacts):
    config = write_config(tmp_path / "run.yaml")
    data = yaml.safe_load(config.read_text())
    data["mine"]["languages"] = ["Python", "Klingon"]
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    line = next(i for i, text in enumerate(config.read_text().splitlines(), 1)
                if "Klingon" in text)
    proc = run_cli(config, artifacts, timeout=300)
    assert proc.returncode == 2, proc.stderr
    out = _output(proc)
    assert f"{config} (with --set overrides): mine.languages.1: unknown language 'Klingon'" \
        in out, out
    assert f"(line {line})" in out, out
    assert not any(artifacts.iterdir())
