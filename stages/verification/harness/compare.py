"""Comparing what a program produced with what a test expects (on the host, never inside the
sandbox: expected values do not enter it).

Values (function tasks) are compared as data: numbers numerically (an ``int`` and a ``float``
compare as numbers; if either is a float, within ``rel_tol``/``abs_tol``, and NaN equals NaN),
booleans only with booleans, strings exactly, lists and tuples element by element, dicts by
their keys as text (JSON makes every key a string) and values.

Outputs (program tasks) are compared after ``normalize_stdout``: line endings ``\\r\\n`` as
``\\n`` (a program on any platform), trailing spaces and tabs of each line ignored, and trailing
empty lines ignored, so the final newline or an extra one does not matter (what every
judge's default checker does). Nothing else: leading spaces, blank lines between lines, case
and number formatting (``1.0`` vs ``1``) all count.

Example::

    >>> values_equal([1, 2.0000000001], [1, 2])
    True
    >>> stdout_equal("3\\n4\\n", "3  \\r\\n4")
    True
"""

from __future__ import annotations

import json
import math
from typing import Any

REL_TOL = 1e-6
ABS_TOL = 1e-9


class ValueParseError(ValueError):
    """The harness's value line is not JSON (a harness bug, or a forged line)."""


def parse_value(text: str) -> Any:
    """The value a harness wrote: JSON, plus ``NaN``/``Infinity``/``-Infinity``."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueParseError(f"not a JSON value: {text[:200]!r}") from exc


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def values_equal(expected: Any, got: Any, rel_tol: float = REL_TOL, abs_tol: float = ABS_TOL
                 ) -> bool:
    """Whether ``got`` (decoded JSON) is the value ``expected`` (test data); see the module."""
    if _number(expected) and _number(got):
        if isinstance(expected, int) and isinstance(got, int):
            return expected == got
        a, b = float(expected), float(got)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(expected) is type(got) and expected == got
    if expected is None or got is None:
        return expected is None and got is None
    if isinstance(expected, str) or isinstance(got, str):
        return isinstance(expected, str) and isinstance(got, str) and expected == got
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(expected) == len(got) and all(
            values_equal(e, g, rel_tol, abs_tol) for e, g in zip(expected, got))
    if isinstance(expected, dict) and isinstance(got, dict):
        want = {str(k): v for k, v in expected.items()}
        have = {str(k): v for k, v in got.items()}
        return want.keys() == have.keys() and all(
            values_equal(want[k], have[k], rel_tol, abs_tol) for k in want)
    return False


def normalize_stdout(text: str) -> str:
    """Output as compared: ``\\r\\n`` as ``\\n``, each line's trailing spaces and tabs and the
    trailing empty lines removed."""
    lines = [line.rstrip(" \t\r") for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def stdout_equal(expected: str, got: str) -> bool:
    """Whether ``got`` is the expected output after ``normalize_stdout``."""
    return normalize_stdout(expected) == normalize_stdout(got)
