"""grade: both gates and the counts per split for hand-made suites, in the real sandbox."""

from __future__ import annotations

import ast

import pytest
from arenaforge.stages.verification.grading import grade
from arenaforge.stages.verification.suites import Suite

SUITE = Suite("i", "add", from_instruction=True, signature="def add(a, b)", arities=(2,),
              example="assert add(2, 3) == 5",
              visible=("assert add(1, 2) == 3",),
              hidden=("assert add(0, 0) == 0", "assert add(-1, 1) == 0"),
              augmented=("assert add(10, 5) == 15",))


GATE_CASES = [
    ("def add(a, b):\n    return a + b\n", "passed", "pass", "pass", (1, 2, 1)),
    ("def plus(x, y):\n    return x + y\n", "passed", "pass", "pass", (1, 2, 1)),
    # passes the visible test only (special-cased): the program gate rejects it
    ("def add(a, b):\n    return 3 if (a, b) == (1, 2) else 7\n", "failed", "example_failed",
     "fail", (1, 0, 0)),
    ("def add(a):\n    return a\n", "error", "signature_mismatch", "fail", (0, 0, 0)),
    ("def add(a, b):\n    return a + b\nraise SystemError('boom')\n", "error", "import_error",
     "fail", (0, 0, 0)),
    ("def one(a):\n    return a\ndef two(b):\n    return b\n", "no_entry_point",
     "no_entry_point", "fail", (0, 0, 0)),
    ("def add(a, b):\n    return a +\n", "error", "no_code", "fail", (0, 0, 0)),
    (None, "error", "no_code", "fail", (0, 0, 0)),
]


@pytest.mark.parametrize("code,status,probe,program,counts", GATE_CASES)
def test_gates_and_split_counts(sandbox_pool, code, status, probe, program, counts):
    [g] = grade(sandbox_pool, [(code, SUITE)], timeout_s=3)
    assert (g.verdict.status, g.probe_gate, g.program_gate) == (status, probe, program)
    assert tuple(g.counts[s][0] for s in ("visible", "hidden", "augmented")) == counts
    assert tuple(g.counts[s][1] for s in ("visible", "hidden", "augmented")) == (1, 2, 1)
    assert g.verdict.tests_total == 4


def test_no_tests_still_gets_a_probe_verdict(sandbox_pool):
    suite = Suite("i", "add", example="assert add(2, 3) == 5")
    good, bad = grade(sandbox_pool, [("def add(a, b):\n    return a + b\n", suite),
                                     ("def add(a, b):\n    return a - b\n", suite)], timeout_s=3)
    assert (good.verdict.status, good.probe_gate, good.program_gate) == \
        ("no_tests", "pass", "no_tests")
    assert bad.probe_gate == "example_failed"
    [none] = grade(sandbox_pool, [("x = 1\n", None)], timeout_s=3)
    assert (none.verdict.status, none.probe_gate, none.program_gate) == \
        ("no_tests", "no_entry_point", "no_tests")


def test_a_looping_answer_costs_one_timeout_and_still_gets_its_probe(sandbox_pool):
    loop = "def add(a, b):\n    while True:\n        pass\n"
    [g] = grade(sandbox_pool, [(loop, SUITE)], timeout_s=0.5)
    assert g.verdict.status == "timeout" and g.verdict.per_test[1:] == ("skipped",) * 3
    # the probes ran on their own after fail-fast: the answer loads, its example times out
    assert g.probe_gate == "example_failed" and g.program_gate == "fail"


def test_the_example_alone_verifies_nothing_and_still_rejects(sandbox_pool):
    # the tests stage's example row is a visible test: a suite of it alone is one call
    example = "assert add(2, 3) == 5"
    suite = Suite("i", "add", example=example, visible=(example,))
    assert suite.example_only and not SUITE.example_only
    good, bad = grade(sandbox_pool, [("def add(a, b):\n    return a + b\n", suite),
                                     ("def add(a, b):\n    return a - b\n", suite)], timeout_s=3)
    assert good.verdict.status == "passed" and good.admission() == "no_tests"
    assert bad.admission() == "example_failed"
    [full] = grade(sandbox_pool, [("def add(a, b):\n    return a + b\n", SUITE)], timeout_s=3)
    assert full.admission() == "verified"


def _as_cases(suite: Suite) -> Suite:
    """``suite`` with each assert as the case the tests stage writes for it (``cases``)."""
    import json

    from arenaforge.stages.verification.test_split import call_and_expected

    def case(test: str) -> str:
        call, expected = call_and_expected(test, "add")
        args = list(ast.literal_eval(call[len("add"):].replace("(", "[", 1)[:-1] + "]"))
        return json.dumps({"args": args, "expected": ast.literal_eval(expected)})

    return Suite(suite.instruction_id, suite.entry_point, from_instruction=True,
                 signature="def add(a: int, b: int) -> int", arities=suite.arities,
                 example=case(suite.example), visible=tuple(map(case, suite.visible)),
                 hidden=tuple(map(case, suite.hidden)),
                 augmented=tuple(map(case, suite.augmented)))


@pytest.mark.parametrize("code,status,probe,program,counts", GATE_CASES)
def test_python_as_a_harness_target_grades_as_the_assert_path(sandbox_pool, code, status,
                                                               probe, program, counts):
    """The same suite as cases, run by the Python target's harness (``grade_programs``): the
    same verdict, gates and counts as the assert path, an aliased answer included."""
    from arenaforge.stages.verification.grading import grade_programs

    [g] = grade_programs(sandbox_pool, [(code, _as_cases(SUITE), "python", "function")],
                         timeout_s=3)
    assert (g.verdict.status, g.probe_gate, g.program_gate) == (status, probe, program)
    assert tuple(g.counts[s][0] for s in ("visible", "hidden", "augmented")) == counts


def test_the_python_target_runs_values_of_mixed_types(sandbox_pool):
    """A signature of ``Any`` (values that share no one type): the Python harness passes each
    value as it is, and a right answer passes every case."""
    import json

    from arenaforge.stages.verification.grading import grade_programs

    cases = [([1, 2.5], 2.5), ([1, "2,3"], "2,3"), (["5,1", "6"], "6"), (["1", 1], None)]
    texts = tuple(json.dumps({"args": a, "expected": e}) for a, e in cases)
    suite = Suite("i", "compare_one", from_instruction=True,
                  signature="def compare_one(a: Any, b: Any) -> Any", arities=(2,),
                  hidden=texts)
    code = ("def compare_one(a, b):\n"
            "    x, y = (float(str(v).replace(',', '.')) for v in (a, b))\n"
            "    return None if x == y else (a if x > y else b)\n")
    [g] = grade_programs(sandbox_pool, [(code, suite, "python", "function")], timeout_s=3)
    assert (g.verdict.status, g.counts["hidden"]) == ("passed", (4, 4)), g.verdict
