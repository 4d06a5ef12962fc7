"""arenaforge.stages.verification.cross_check on the float case the mutation bench found."""

from __future__ import annotations

from arenaforge.stages.verification.cross_check import AUTHOR_AGREEMENT, judge_written
from arenaforge.stages.verification.execution import execute


def _written(author: str, test: str, call: str, expected: str) -> dict:
    return {"author": author, "call": call, "expected": expected, "test_code": test}


def test_a_float_test_trusted_by_agreement_is_graded_with_the_tolerance_it_was_trusted_with(
        sandbox_pool):
    # HumanEval/2: both authors expect 0.999; the right answer returns 0.9989999999999997, so
    # the exact `==` they wrote was trusted by author agreement and failed every answer
    rows = [_written(a, "assert truncate_number(4.999) == 0.999", "truncate_number(4.999)", "0.999")
            for a in ("m1", "m2")]
    judge_written(rows, ["m1", "m2"], [[False, False], [False, False]], {}, 0, "HumanEval/2")
    assert all(r["survived"] and r["trusted_by"] == AUTHOR_AGREEMENT for r in rows)
    right, wrong = execute(sandbox_pool, [
        ("def truncate_number(x):\n    return x % 1.0\n", [rows[0]["test_code"]]),
        ("def truncate_number(x):\n    return 0.5\n", [rows[0]["test_code"]])], timeout_s=5)
    assert (right.status, wrong.status) == ("passed", "failed")


def test_an_exact_test_is_kept_as_written():
    rows = [_written(a, "assert add(1, 2) == 3", "add(1, 2)", "3") for a in ("m1", "m2")]
    judge_written(rows, ["m1", "m2"], [[False, False], [False, False]], {}, 0, "i")
    assert [r["test_code"] for r in rows] == ["assert add(1, 2) == 3"] * 2
