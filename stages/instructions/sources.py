"""Instructions read from a file instead of mined: JSONL, Parquet or a ``datasets`` directory.

``mine.source`` names the file; ``load_instructions`` reads it and checks every row before any
model is loaded, so a bad file fails at config load with the file, the row and the column:

>>> load_instructions("seed.jsonl")  # doctest: +SKIP
[SourceRow(row=0, text='Write a function ...', language='Python'), ...]

Formats, chosen by the path: ``*.jsonl`` / ``*.ndjson`` (one JSON object per line; blank lines
are skipped), ``*.parquet``, or a directory written by ``datasets.Dataset.save_to_disk``. Rows
are numbered from 0 in file order (``ds[row]``, ``table.slice(row, 1)``); JSONL errors also give
the 1-based line. The instruction column must hold non-empty text in every row. Two columns
are optional: ``language`` (an id or a name people write, ``C++``, ``golang``, case-insensitive;
absent, or null in a row: ``default_language``) and ``task_kind`` (``function`` or ``program``;
absent or null: ``default_task_kind``). A row's language is stored as its id; an unknown
language or task kind is an error that names it, with the file, the row and the line.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from arenaforge.pipeline.sandbox.languages.catalog import UnknownLanguage, resolve_language
from arenaforge.stages.verification.harness.cases import FUNCTION, resolve_task_kind

FILE_TEMPLATE = "file"  # the ``template`` of a row read from a file: no model wrote it
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
LANGUAGE_COLUMN, TASK_KIND_COLUMN = "language", "task_kind"
# How many bad rows one error lists (the rest are counted).
SHOWN_PROBLEMS = 3

_MISSING = object()  # a JSONL record without the key


class InstructionSourceError(ValueError):
    """The instruction file cannot be used; the message names the file, row and column."""


@dataclasses.dataclass(frozen=True)
class SourceRow:
    """One instruction of the file: its row number, its text as stored, its language id and
    its task kind."""

    row: int
    text: str
    language: str
    task_kind: str = FUNCTION


@dataclasses.dataclass(frozen=True)
class RawColumns:
    """The wanted columns of a file, row-aligned, before any check.

    Attributes:
        columns: every column the file has (for "no column" messages).
        values: the wanted columns that exist; a JSONL record without the key holds ``_MISSING``.
        num_rows: rows in the file.
        lines: JSONL only: the 1-based line of each row.
    """

    columns: tuple[str, ...]
    values: dict[str, list[Any]]
    num_rows: int
    lines: tuple[int, ...] | None = None


def load_instructions(path: str | Path, column: str = "instruction",
                      default_language: str = "Python",
                      default_task_kind: str = FUNCTION) -> list[SourceRow]:
    """Read and check the instructions of ``path`` (see the module docstring).

    Raises:
        InstructionSourceError: unknown format, unreadable file, missing column, a row whose
            instruction is missing, null, not text or empty, an unknown language or task
            kind, or no rows.
    """
    path = Path(path)
    raw = read_columns(path, (column, LANGUAGE_COLUMN, TASK_KIND_COLUMN))
    return rows_from_columns(raw, path, column, default_language, default_task_kind)


def read_columns(path: Path, wanted: tuple[str, ...]) -> RawColumns:
    """The ``wanted`` columns of a JSONL, Parquet or ``datasets`` directory (no checks of values).

    Raises:
        InstructionSourceError: the path is missing, of an unknown format or unreadable.
    """
    if path.is_dir():
        return _read_datasets_dir(path, wanted)
    if not path.exists():
        raise InstructionSourceError(f"{path}: no such file or directory")
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return _read_jsonl(path, wanted)
    if suffix in PARQUET_SUFFIXES:
        return _read_parquet(path, wanted)
    raise InstructionSourceError(
        f"{path}: unknown format {suffix or '(no suffix)'!r}; expected a "
        f"{'/'.join(JSONL_SUFFIXES + PARQUET_SUFFIXES)} file or a datasets directory "
        f"(Dataset.save_to_disk)")


def rows_from_columns(raw: RawColumns, path: Path, column: str, default_language: str,
                      default_task_kind: str = FUNCTION) -> list[SourceRow]:
    """Check every row of ``raw`` and return the instructions (pure; messages name ``path``).

    >>> raw = RawColumns(("instruction",), {"instruction": ["Sort a list."]}, 1)
    >>> rows_from_columns(raw, Path("a.parquet"), "instruction", "Python")
    [SourceRow(row=0, text='Sort a list.', language='python', task_kind='function')]
    >>> raw = RawColumns(("instruction", "language"), {"instruction": ["Sort."],
    ...                  "language": ["Klingon"]}, 1, (3,))
    >>> try:
    ...     rows_from_columns(raw, Path("a.jsonl"), "instruction", "Python")
    ... except InstructionSourceError as exc:
    ...     print(str(exc)[:70])
    a.jsonl: row 0 (line 3): column 'language': unknown language 'Klingon'
    """
    if raw.num_rows == 0:
        raise InstructionSourceError(f"{path}: no rows")
    if column not in raw.values:
        raise InstructionSourceError(
            f"{path}: no column {column!r} (columns: {', '.join(raw.columns) or 'none'}); "
            f"set mine.source_column")
    texts = raw.values[column]
    languages = raw.values.get(LANGUAGE_COLUMN, [None] * raw.num_rows)
    kinds = raw.values.get(TASK_KIND_COLUMN, [None] * raw.num_rows)
    rows, problems = [], []
    for i, (text, language, kind) in enumerate(zip(texts, languages, kinds)):
        problem = (_text_problem(text, column) or _language_problem(language)
                   or _task_kind_problem(kind))
        if problem:
            problems.append(f"{_where(raw, i)}: {problem}")
            continue
        if language is _MISSING or language is None:
            language = default_language
        if kind is _MISSING or kind is None:
            kind = default_task_kind
        rows.append(SourceRow(row=i, text=text, language=resolve_language(language),
                              task_kind=resolve_task_kind(kind)))
    if problems:
        more = len(problems) - SHOWN_PROBLEMS
        raise InstructionSourceError(
            f"{path}: " + "; ".join(problems[:SHOWN_PROBLEMS])
            + (f" (and {more} more bad row{'s' if more > 1 else ''})" if more > 0 else ""))
    return rows


def _text_problem(value: Any, column: str) -> str | None:
    if value is _MISSING:
        return f"column {column!r} is missing"
    if value is None:
        return f"column {column!r} is null"
    if not isinstance(value, str):
        return f"column {column!r} is not text ({type(value).__name__})"
    if not value.strip():
        return f"column {column!r} is empty"
    return None


def _language_problem(value: Any) -> str | None:
    if value is _MISSING or value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        kind = type(value).__name__ if not isinstance(value, str) else "empty"
        return f"column {LANGUAGE_COLUMN!r} is not a language name ({kind})"
    try:
        resolve_language(value)
    except UnknownLanguage as exc:
        return f"column {LANGUAGE_COLUMN!r}: {exc}"
    return None


def _task_kind_problem(value: Any) -> str | None:
    if value is _MISSING or value is None:
        return None
    try:
        resolve_task_kind(value)
    except ValueError as exc:
        return f"column {TASK_KIND_COLUMN!r}: {exc}"
    return None


def _where(raw: RawColumns, i: int) -> str:
    return f"row {i} (line {raw.lines[i]})" if raw.lines is not None else f"row {i}"


def _read_jsonl(path: Path, wanted: tuple[str, ...]) -> RawColumns:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InstructionSourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    records, lines, columns = [], [], {}
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise InstructionSourceError(f"{path}: line {number}: not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise InstructionSourceError(
                f"{path}: line {number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise InstructionSourceError(
                f"{path}: line {number}: expected a JSON object, got {type(record).__name__}")
        columns.update(dict.fromkeys(record))
        records.append(record)
        lines.append(number)
    values = {c: [r.get(c, _MISSING) for r in records] for c in wanted if c in columns}
    return RawColumns(tuple(columns), values, len(records), tuple(lines))


def _read_parquet(path: Path, wanted: tuple[str, ...]) -> RawColumns:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pfile = pq.ParquetFile(path)
        columns = tuple(pfile.schema_arrow.names)
        table = pfile.read(columns=[c for c in wanted if c in columns])
    except pa.ArrowException as exc:  # before OSError: Arrow's I/O errors are both
        raise InstructionSourceError(f"{path}: not a readable Parquet file ({exc})") from None
    except OSError as exc:
        raise InstructionSourceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return RawColumns(columns, {c: table.column(c).to_pylist() for c in table.column_names},
                      table.num_rows)


def _read_datasets_dir(path: Path, wanted: tuple[str, ...]) -> RawColumns:
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        raise InstructionSourceError(
            f"{path}: a DatasetDict with splits {splits}; point mine.source at one split's "
            f"directory (e.g. {path / (splits[0] if splits else 'train')})")
    if not (path / "state.json").is_file():
        raise InstructionSourceError(
            f"{path}: a directory but not a datasets directory (no state.json; write one with "
            f"Dataset.save_to_disk)")
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InstructionSourceError(f"{path}: unreadable state.json ({exc})") from None
    if isinstance(state, dict) and state.get("_data_files") == []:
        # save_to_disk of an empty dataset writes no shard, and load_from_disk then fails
        raise InstructionSourceError(f"{path}: no rows")
    from datasets import load_from_disk  # heavy: only for this format

    try:
        ds = load_from_disk(str(path))
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:  # datasets' many kinds
        raise InstructionSourceError(
            f"{path}: not a readable datasets directory ({type(exc).__name__}: {exc})") from None
    columns = tuple(ds.column_names)
    table = ds.with_format("arrow")[:]  # an Arrow table with any indices mapping applied
    return RawColumns(columns, {c: table.column(c).to_pylist() for c in wanted if c in columns},
                      ds.num_rows)
