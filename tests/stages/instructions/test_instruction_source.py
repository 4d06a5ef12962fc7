"""Instructions from a file: each format loads; each bad input fails naming file, row and column."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from arenaforge.stages.instructions.sources import (
    InstructionSourceError,
    SourceRow,
    load_instructions,
)

TEXTS = ["Write a function that reverses a string.", "Implement merge sort in Python."]


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_parquet(path: Path, columns: dict) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


def write_datasets_dir(path: Path, columns: dict) -> Path:
    from datasets import Dataset

    Dataset.from_dict(columns).save_to_disk(str(path))
    return path


WRITERS = {
    "jsonl": lambda d, cols: write_jsonl(
        d / "in.jsonl", [dict(zip(cols, vals)) for vals in zip(*cols.values())]),
    "parquet": lambda d, cols: write_parquet(d / "in.parquet", cols),
    "datasets": lambda d, cols: write_datasets_dir(d / "ds", cols),
}


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_each_format_loads_with_and_without_a_language_column(tmp_path, fmt):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    with_lang = WRITERS[fmt](tmp_path / "a", {"instruction": TEXTS, "language": ["Rust", None]})
    assert load_instructions(with_lang, default_language="Go") == [
        SourceRow(0, TEXTS[0], "rust"), SourceRow(1, TEXTS[1], "go")]
    plain = WRITERS[fmt](tmp_path / "b", {"prompt": TEXTS, "id": [1, 2]})
    assert [r.language for r in load_instructions(plain, "prompt")] == ["python", "python"]


def test_jsonl_skips_blank_lines_and_a_record_may_lack_the_language(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"instruction": TEXTS[0], "language": "C"}) + "\n\n"
                    + json.dumps({"instruction": TEXTS[1]}) + "\n")
    assert load_instructions(path) == [SourceRow(0, TEXTS[0], "c"), SourceRow(1, TEXTS[1], "python")]


def _fails(path: Path, *parts: str, column: str = "instruction") -> str:
    with pytest.raises(InstructionSourceError) as err:
        load_instructions(path, column)
    message = str(err.value)
    assert message.startswith(f"{path}: "), message
    for part in parts:
        assert part in message, message
    return message


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_missing_column_names_file_and_column(tmp_path, fmt):
    path = WRITERS[fmt](tmp_path, {"prompt": TEXTS})
    _fails(path, "no column 'instruction'", "columns: prompt", "mine.source_column")


@pytest.mark.parametrize("fmt", sorted(WRITERS))
@pytest.mark.parametrize("bad, problem", [(None, "is null"), ("   \n", "is empty"),
                                          ("", "is empty")])
def test_empty_or_null_row_names_row_and_column(tmp_path, fmt, bad, problem):
    path = WRITERS[fmt](tmp_path, {"instruction": [TEXTS[0], bad, TEXTS[1]]})
    _fails(path, f"row 1{' (line 2)' if fmt == 'jsonl' else ''}: column 'instruction' {problem}")


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_non_text_column_names_row_and_type(tmp_path, fmt):
    path = WRITERS[fmt](tmp_path, {"instruction": [3, 4]})
    _fails(path, "row 0", "column 'instruction' is not text (int)", "row 1")


def test_jsonl_non_text_and_missing_key_in_one_record(tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", [{"instruction": TEXTS[0]}, {"instruction": ["x"]},
                                               {"other": 1}])
    _fails(path, "row 1 (line 2): column 'instruction' is not text (list)",
           "row 2 (line 3): column 'instruction' is missing")


def test_many_bad_rows_are_counted_not_all_listed(tmp_path):
    path = write_parquet(tmp_path / "in.parquet", {"instruction": [""] * 10})
    message = _fails(path, "row 0", "row 2", "(and 7 more bad rows)")
    assert "row 3" not in message


def test_bad_language_names_row_and_column(tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", [{"instruction": TEXTS[0], "language": 7}])
    _fails(path, "row 0 (line 1): column 'language' is not a language name (int)")


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_languages_by_any_name_and_task_kinds(tmp_path, fmt):
    path = WRITERS[fmt](tmp_path, {"instruction": TEXTS * 2,
                                   "language": ["C++", " golang ", "TS", None],
                                   "task_kind": ["Program", None, "function", "program"]})
    assert [(r.language, r.task_kind) for r in load_instructions(path)] == [
        ("cpp", "program"), ("go", "function"), ("typescript", "function"),
        ("python", "program")]


@pytest.mark.parametrize("column, value, named", [
    ("language", "Klingon", "column 'language': unknown language 'Klingon'"),
    ("task_kind", "script", "column 'task_kind': unknown task kind 'script'"),
])
def test_unknown_language_or_task_kind_names_file_line_and_value(tmp_path, column, value, named):
    path = write_jsonl(tmp_path / "in.jsonl", [{"instruction": TEXTS[0]},
                                               {"instruction": TEXTS[1], column: value}])
    _fails(path, f"row 1 (line 2): {named}")


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_no_rows(tmp_path, fmt):
    if fmt == "jsonl":
        path = tmp_path / "in.jsonl"
        path.write_text("\n")
    else:
        path = WRITERS[fmt](tmp_path, {"instruction": pa.array([], pa.string())}
                            if fmt == "parquet" else {"instruction": []})
    _fails(path, "no rows")


@pytest.mark.parametrize("content, problem", [
    (b'{"instruction": "ok"}\n{"instruction": \n', "line 2: not valid JSON"),
    (b'["a list"]\n', "line 1: expected a JSON object, got list"),
    (b'{"instruction": "caf\xe9"}\n', "line 1: not UTF-8 text"),
])
def test_unreadable_jsonl(tmp_path, content, problem):
    path = tmp_path / "in.jsonl"
    path.write_bytes(content)
    _fails(path, problem)


def test_unreadable_parquet_missing_file_and_unknown_format(tmp_path):
    corrupt = tmp_path / "in.parquet"
    corrupt.write_bytes(b"PAR1 not really parquet")
    _fails(corrupt, "not a readable Parquet file")
    _fails(tmp_path / "nope.jsonl", "no such file or directory")
    csv = tmp_path / "in.csv"
    csv.write_text("instruction\nx\n")
    _fails(csv, "unknown format '.csv'", ".jsonl", ".parquet", "datasets directory")


def test_unreadable_file(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "in.jsonl", [{"instruction": TEXTS[0]}])

    def denied(self):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)  # chmod 0 does not stop root
    _fails(path, "cannot read: Permission denied")


def test_directories_that_are_not_one_dataset(tmp_path):
    _fails(tmp_path, "not a datasets directory", "save_to_disk")
    from datasets import Dataset, DatasetDict

    DatasetDict({"train": Dataset.from_dict({"instruction": TEXTS})}).save_to_disk(
        str(tmp_path / "dd"))
    _fails(tmp_path / "dd", "a DatasetDict with splits ['train']", str(tmp_path / "dd" / "train"))
    assert len(load_instructions(tmp_path / "dd" / "train")) == 2
