"""Pure helpers of the tests stage: normalised calls, value agreement, the split.

* ``call_and_expected``: the normalised call and expected value of an ``assert entry(...) ==
  value`` test, so that tests written by different authors (and generated inputs) can be
  compared call by call.
* ``split_tests``: the seeded visible/hidden split of an instruction's trusted written tests
  (at least half hidden; a single trusted test is hidden). Repair only ever sees visible ones.
* ``assertion_source``: the assert for an agreed value (floats compared with ``math.isclose``).
"""

from __future__ import annotations

import ast
import math
import random
from collections.abc import Sequence
from typing import Any

VISIBLE, HIDDEN = "visible", "hidden"
_NOT_LITERAL = object()


def literal(source: str | None) -> Any:
    """``ast.literal_eval(source)``, or ``_NOT_LITERAL`` when it is not a Python literal."""
    if source is None:
        return _NOT_LITERAL
    try:
        return ast.literal_eval(source)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def is_literal(source: str | None) -> bool:
    return literal(source) is not _NOT_LITERAL


def normalised_call(entry_point: str, args: Sequence[Any]) -> str:
    """``entry(repr(a0), repr(a1), ...)``: one spelling per call, whoever wrote it.

    >>> normalised_call("f", ([1,2], 'a'))
    "f([1, 2], 'a')"
    """
    return f"{entry_point}({', '.join(repr(a) for a in args)})"


def call_and_expected(test_code: str | None, entry_point: str) -> tuple[str, str] | None:
    """``(normalised call, repr of the expected value)`` of a one-line literal equality test.

    Only ``assert entry(<literals>) == <literal>`` (either side), ``... is True/False/None``;
    ``None`` for any other shape (setup statements, predicates, non-literal arguments).

    >>> call_and_expected("assert f( [1,2] ,'x') == (3)", "f")
    ("f([1, 2], 'x')", '3')
    >>> call_and_expected("assert f(1) is None", "f"), call_and_expected("assert f(1) > 0", "f")
    (('f(1)', 'None'), None)
    """
    try:
        tree = ast.parse(test_code or "")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return None
    test = tree.body[0].test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, right, op = test.left, test.comparators[0], test.ops[0]
    if isinstance(op, ast.Is):
        if not (isinstance(right, ast.Constant) and right.value in (True, False, None)):
            return None
    elif not isinstance(op, ast.Eq):
        return None
    if not _is_entry_call(left, entry_point) and _is_entry_call(right, entry_point):
        left, right = right, left
    if not _is_entry_call(left, entry_point) or left.keywords:
        return None
    args = [literal(ast.unparse(a)) for a in left.args]
    expected = literal(ast.unparse(right))
    if expected is _NOT_LITERAL or any(a is _NOT_LITERAL for a in args):
        return None
    return normalised_call(entry_point, args), repr(expected)


def _is_entry_call(node: ast.AST, entry_point: str) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == entry_point
            and not any(isinstance(a, ast.Starred) for a in node.args))


def values_agree(a: Any, b: Any) -> bool:
    """Equal values; floats (also nested in lists, tuples, dicts) compared with ``isclose``.

    >>> values_agree([0.1 + 0.2, 'x'], [0.3, 'x']), values_agree(1, 2), values_agree({1}, {1})
    (True, False, True)
    """
    if isinstance(a, float) or isinstance(b, float):
        return (isinstance(a, (int, float)) and isinstance(b, (int, float))
                and not isinstance(a, bool) and not isinstance(b, bool)
                and math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9))
    if isinstance(a, (list, tuple)) and type(a) is type(b):
        return len(a) == len(b) and all(values_agree(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_agree(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def reprs_agree(a: str, b: str) -> bool:
    """``values_agree`` on two reprs (literal ones; others must be the same text)."""
    va, vb = literal(a), literal(b)
    if va is _NOT_LITERAL or vb is _NOT_LITERAL:
        return a == b
    return values_agree(va, vb)


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_has_float(v) for v in value)
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    return False


# Defined inside the test (the solution runs first and cannot replace it); the fallback accepts
# only builtin types, so an object whose __eq__ always says True still fails.
_CLOSE = """import math
def _close(a, b):
    if isinstance(b, float):
        return type(a) in (int, float) and math.isclose(a, b, rel_tol=1e-06, abs_tol=1e-09)
    if type(b) in (list, tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_close, a, b))
    if type(b) is dict:
        return type(a) is dict and a.keys() == b.keys() and all(_close(a[k], b[k]) for k in b)
    return type(a) is type(b) and type(b) in (int, str, bool, type(None), bytes, set, frozenset) and a == b
"""


def compares_floats(expected: str | None) -> bool:
    """Whether a literal expected value holds a float (so agreement on it used ``isclose``)."""
    return expected is not None and _has_float(literal(expected))


def assertion_source(call: str, expected: str) -> str:
    """The test asserting ``call`` returns the literal ``expected``.

    >>> assertion_source("f(1)", "[2]")
    'assert f(1) == [2]'
    >>> assertion_source("f(1)", "0.5").splitlines()[-1]
    'assert _close(f(1), 0.5)'
    """
    if _has_float(literal(expected)):
        return f"{_CLOSE}assert _close({call}, {expected})"
    return f"assert {call} == {expected}"


def split_tests(seed: int, instruction_id: str, n: int) -> list[str]:
    """``visible``/``hidden`` for ``n`` trusted written tests, seeded by run seed and id.

    At least half are hidden (``ceil(n / 2)``), so one trusted test is hidden.

    >>> split_tests(0, "i1", 1), sorted(split_tests(0, "i1", 5))
    (['hidden'], ['hidden', 'hidden', 'hidden', 'visible', 'visible'])
    """
    order = list(range(n))
    random.Random(f"{seed}:{instruction_id}").shuffle(order)
    hidden = set(order[:(n + 1) // 2])
    return [HIDDEN if i in hidden else VISIBLE for i in range(n)]
