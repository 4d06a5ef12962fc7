"""Language-neutral test cases: data, never assertion text in some language.

A ``function`` task is tested by calls (``CallCase``: literal arguments and the expected value,
JSON-like: int, float, bool, str, None, lists, dicts with int or str keys); a ``program`` task by
runs (``IOCase``: stdin text and the expected stdout). ``load_cases`` reads either from plain
dicts (what the authors' JSON gives) and says which case and field is wrong.

Example::

    >>> cases = load_cases("function", [{"args": [1, 2], "expected": 3}])
    >>> cases[0].args, cases[0].expected
    ((1, 2), 3)
    >>> load_cases("program", [{"stdin": "1 2\\n", "stdout": "3\\n"}])[0].stdout
    '3\\n'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

FUNCTION, PROGRAM = "function", "program"
TASK_KINDS = (FUNCTION, PROGRAM)


class CaseError(ValueError):
    """A test case that is not valid data; the message names the case and the field."""


def resolve_task_kind(name: str) -> str:
    """``function`` or ``program`` (case-insensitive); ``ValueError`` naming the value else."""
    if isinstance(name, str) and name.strip().lower() in TASK_KINDS:
        return name.strip().lower()
    raise ValueError(f"unknown task kind {name!r}: expected one of {', '.join(TASK_KINDS)}")


@dataclasses.dataclass(frozen=True)
class CallCase:
    """One call of a function task: ``args`` (literal values) and the ``expected`` value."""

    args: tuple[Any, ...]
    expected: Any


@dataclasses.dataclass(frozen=True)
class IOCase:
    """One run of a whole program: its ``stdin`` and the ``stdout`` expected."""

    stdin: str
    stdout: str


def _plain(value: Any, where: str, depth: int = 0) -> Any:
    """``value`` as plain JSON-like data (tuples become lists); ``CaseError`` otherwise."""
    if depth > 64:
        raise CaseError(f"{where}: nested more than 64 levels")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value  # NaN and the infinities too: a float function may return them
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, bool) or not isinstance(k, (int, str)):
                raise CaseError(f"{where}: dict key {k!r} is not an int or a str")
            out[k] = _plain(v, f"{where}[{k!r}]", depth + 1)
        return out
    raise CaseError(f"{where}: {type(value).__name__} is not a JSON-like value")


def call_case(args: Sequence[Any], expected: Any, where: str = "case") -> CallCase:
    """A validated ``CallCase``."""
    if not isinstance(args, (list, tuple)):
        raise CaseError(f"{where}: 'args' must be a list of argument values, got "
                        f"{type(args).__name__}")
    return CallCase(tuple(_plain(a, f"{where} argument {i + 1}") for i, a in enumerate(args)),
                    _plain(expected, f"{where} expected"))


def load_cases(kind: str, rows: Iterable[Mapping[str, Any]]) -> list[CallCase] | list[IOCase]:
    """Cases of a task kind from dicts: ``{"args": [...], "expected": v}`` (function) or
    ``{"stdin": "...", "stdout": "..."}`` (program).

    Raises:
        CaseError: A case misses a field, has an unknown one, or a value that is not data.
    """
    kind = resolve_task_kind(kind)
    wanted = {"args", "expected"} if kind == FUNCTION else {"stdin", "stdout"}
    out: list = []
    for i, row in enumerate(rows):
        where = f"case {i + 1}"
        if not isinstance(row, Mapping):
            raise CaseError(f"{where}: expected an object with {sorted(wanted)}, got "
                            f"{type(row).__name__}")
        missing, extra = wanted - set(row), set(row) - wanted
        if missing or extra:
            raise CaseError(f"{where}: " + "; ".join(
                [f"missing {sorted(missing)}"] * bool(missing)
                + [f"unknown field(s) {sorted(extra)}"] * bool(extra)))
        if kind == FUNCTION:
            out.append(call_case(row["args"], row["expected"], where))
        else:
            for field in ("stdin", "stdout"):
                if not isinstance(row[field], str):
                    raise CaseError(f"{where}: {field!r} must be text, got "
                                    f"{type(row[field]).__name__}")
            out.append(IOCase(row["stdin"], row["stdout"]))
    if not out:
        raise CaseError("no test cases")
    return out
