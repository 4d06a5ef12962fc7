"""The language and kind of a task, as every stage reads them from its rows.

Every row carries ``language`` (an id of ``arenaforge.pipeline.sandbox.languages.LANGUAGE_IDS``)
and ``task_kind`` (``function``: a named function tested by calls; ``program``: a whole program,
stdin in and stdout out), from ``mine`` to the dataset. A row from before they existed (or a
table without the columns) is a Python function, which is what such runs made. A Python
function takes the Python path of the verification stages, as it always did
(``uses_python_path``); every other task takes the language-neutral one
(``arenaforge.stages.verification.harness``).

Example::

    >>> row_language("C++"), row_language(None), row_task_kind(" Program ")
    ('cpp', 'python', 'program')
    >>> uses_python_path("python", "function"), uses_python_path("python", "program")
    (True, False)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from arenaforge.pipeline.prompts import fill, load_template
from arenaforge.pipeline.sandbox.languages.catalog import LANGUAGES, resolve_language
from arenaforge.stages.verification.harness.cases import (
    FUNCTION,
    PROGRAM,
    TASK_KINDS,
    resolve_task_kind,
)

PYTHON = "python"
LANGUAGE_COLUMN, TASK_KIND_COLUMN = "language", "task_kind"

__all__ = ["FUNCTION", "LANGUAGE_COLUMN", "PROGRAM", "PYTHON", "TASK_KINDS", "TASK_KIND_COLUMN",
           "display", "fence", "row_language", "row_task_kind", "table_tasks",
           "uses_python_path", "with_task_note"]


def row_language(value: Any) -> str:
    """The language id of a row's ``language`` value (an id or a display name); None or empty:
    ``python``.

    Raises:
        UnknownLanguage: a name that is no language.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return PYTHON
    return resolve_language(value)


def row_task_kind(value: Any) -> str:
    """The task kind of a row's ``task_kind`` value; None or empty: ``function``.

    Raises:
        ValueError: a value that is no task kind (the message names it).
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return FUNCTION
    return resolve_task_kind(value)


def uses_python_path(language: str, task_kind: str) -> bool:
    """Whether a task is verified on the Python path (Python asserts; a Python function)."""
    return language == PYTHON and task_kind == FUNCTION


def table_tasks(table: pa.Table, rows: Sequence[int] | None = None) -> list[tuple[str, str]]:
    """``(language, task_kind)`` of each row of ``table`` (of ``rows`` only, when given);
    a missing column is the default for every row."""
    n = table.num_rows
    langs = (table.column(LANGUAGE_COLUMN).to_pylist() if LANGUAGE_COLUMN in table.column_names
             else [None] * n)
    kinds = (table.column(TASK_KIND_COLUMN).to_pylist() if TASK_KIND_COLUMN in table.column_names
             else [None] * n)
    pairs = [(row_language(lang), row_task_kind(kind)) for lang, kind in zip(langs, kinds)]
    return pairs if rows is None else [pairs[i] for i in rows]


def display(language: str) -> str:
    """The name people read (``C++`` for ``cpp``)."""
    return LANGUAGES[resolve_language(language)].display


def fence(language: str) -> str:
    """The Markdown fence tag of a language's code (``cpp``, ``javascript``...)."""
    return LANGUAGES[resolve_language(language)].fences[0]


def with_task_note(instruction: str, language: str, task_kind: str, stage: str) -> str:
    """The instruction as a stage shows it to a model: unchanged for a Python function (what
    such a request always was), else followed by the stage's note of the language and kind
    (template ``<stage>_task_<kind>.txt``: ``answer`` asks for the code in one fenced block,
    ``judge`` states what the answers must be).

    >>> with_task_note("Sum a list.", "python", "function", "answer")
    'Sum a list.'
    >>> with_task_note("Sum a list.", "go", "program", "judge").splitlines()[-1][:40]
    'The answers must be written in Go: each '
    """
    if uses_python_path(language, task_kind):
        return instruction
    note = fill(load_template(f"{stage}_task_{task_kind}.txt"), language=display(language),
                fence=fence(language))
    return f"{instruction}\n\n{note.strip()}"
