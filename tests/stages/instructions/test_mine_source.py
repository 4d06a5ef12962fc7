"""The mine stage reading ``mine.source``: no model call, mined-row ids, file provenance, and a
bad file failing at config load (what ``arenaforge run`` reports with exit 2)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from arenaforge.pipeline.config import ConfigError, load_config
from arenaforge.pipeline.stage import as_result
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.instructions.clean import CleanConfig
from arenaforge.stages.instructions.clean import run as clean_run
from arenaforge.stages.instructions.mine import MINE_SCHEMA, MineConfig, plan, run

ROOT = Path(__file__).resolve().parents[3]
SEED = ROOT / "tests" / "data" / "instructions-20.jsonl"


class NoModels:
    """A context whose backends must never be asked for (a pure-logic test double)."""

    seed = 0
    config = types.SimpleNamespace(experts=["a"])
    advanced = 0

    def backend(self, model_id):
        raise AssertionError(f"mine asked for model {model_id!r} while reading a file")

    def model_spec(self, model_id):
        raise AssertionError(f"mine asked for model {model_id!r} while reading a file")

    def advance(self, rows):
        self.advanced += rows


def test_file_rows_look_like_mined_rows_without_a_model(tmp_path):
    path = tmp_path / "in.jsonl"
    texts = ["  Write a function that reverses a string.\n", "Implement merge sort in Python."]
    path.write_text(json.dumps({"instruction": texts[0]}) + "\n"
                    + json.dumps({"instruction": texts[1], "language": "Rust"}) + "\n")
    cfg = MineConfig(source=path, miners=["a"], languages=["Go"])
    ctx = NoModels()
    planned = plan(cfg, ctx)
    assert planned.column("task_id").to_pylist() == ["file|000000", "file|000001"]
    result = as_result(run(planned, cfg, ctx))
    out = result.table
    assert out.schema == MINE_SCHEMA and ctx.advanced == 2
    assert result.stats == {"source_rows": 2.0}
    rows = out.to_pylist()
    assert [r["instruction"] for r in rows] == [t.strip() for t in texts]
    assert [r["instruction_id"] for r in rows] == [instruction_id(t, lang)
                                                   for t, lang in zip(texts, ("go", "rust"))]
    assert [r["language"] for r in rows] == ["go", "rust"]  # no column value: first language
    assert [r["task_kind"] for r in rows] == ["function", "function"]
    assert {r["miner"] for r in rows} == {None} and {r["template"] for r in rows} == {"file"}
    assert {r["finish_reason"] for r in rows} == {None}
    assert rows[0]["raw"] == texts[0]
    assert [json.loads(r["sample_params"]) for r in rows] == [
        {"source": "file", "path": str(path), "column": "instruction", "row": i} for i in (0, 1)]


def test_models_used_is_empty_when_reading_a_file():
    assert MineConfig(miners=["m"]).models_used() == ["m"]
    assert MineConfig().models_used() == []
    assert MineConfig(source=SEED, miners=["m"]).models_used() == []


def test_clean_drops_file_duplicates_with_reasons(tmp_path):
    path = tmp_path / "in.jsonl"
    text = ("Write a Python function fib(n) that returns the n-th Fibonacci number without "
            "recursion, raises ValueError for negative n, and runs in linear time; fib(10) "
            "should return 55 and fib(0) should return 0 iteratively.")
    records = [text, text + "  ", text.replace("iteratively", "iteratively, please")]
    path.write_text("".join(json.dumps({"instruction": t}) + "\n" for t in records))
    cfg = MineConfig(source=path)
    mined = as_result(run(plan(cfg, NoModels()), cfg, NoModels())).table
    cleaned = clean_run(mined, CleanConfig(), None)
    assert cleaned.table.num_rows == 1
    assert cleaned.dropped.column("reason").to_pylist() == ["exact_duplicate", "near_duplicate"]


def test_seed_file_is_twenty_distinct_rows():
    rows = MineConfig(source=SEED).source_rows()
    assert len(rows) == 20 and len({instruction_id(r.text) for r in rows}) == 20


def test_set_source_on_any_config_and_bad_files_fail_at_load(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # relative sources resolve against the cwd, and stay so resolved
    cfg = load_config(ROOT / "configs" / "smoke.yaml",
                      ["mine.source=tests/data/instructions-20.jsonl"])
    assert cfg.mine.source == ROOT / "tests" / "data" / "instructions-20.jsonl"
    assert cfg.mine.models_used() == []

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"instruction": "Write a CSV parser in Python."}) + "\n"
                   + json.dumps({"instruction": ""}) + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "configs" / "smoke.yaml", [f"mine.source={bad}"])
    message = str(err.value)
    assert message.endswith(f"smoke.yaml (with --set overrides): mine.source: {bad}: "
                            f"row 1 (line 2): column 'instruction' is empty"), message
    with pytest.raises(ConfigError, match="no column 'prompt'"):
        load_config(ROOT / "configs" / "smoke.yaml",
                    [f"mine.source={SEED}", "mine.source_column=prompt"])


def test_the_same_words_in_two_languages_or_kinds_are_two_tasks(tmp_path):
    path = tmp_path / "in.jsonl"
    text = "Write a program that reads n and then n integers and prints the sum of the even ones."
    records = [{"instruction": text, "language": "C++", "task_kind": "program"},
               {"instruction": text, "language": "Java", "task_kind": "program"},
               {"instruction": text + " ", "language": "cpp", "task_kind": "program"},
               {"instruction": text, "language": "C++"},
               {"instruction": text.replace("even ones", "even ones, please"), "language": "Java",
                "task_kind": "program"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = MineConfig(source=path)
    mined = as_result(run(plan(cfg, NoModels()), cfg, NoModels())).table
    cleaned = clean_run(mined, CleanConfig(), None)
    kept = [(r["language"], r["task_kind"]) for r in cleaned.table.to_pylist()]
    assert kept == [("cpp", "program"), ("java", "program"), ("cpp", "function")]
    assert cleaned.dropped.column("reason").to_pylist() == ["exact_duplicate", "near_duplicate"]
    assert len({r["instruction_id"] for r in cleaned.table.to_pylist()}) == 3
