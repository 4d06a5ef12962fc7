"""Suite jobs (one job per solution, a verdict per test): the same verdicts as one job per test.

The adversarial programs of ``test_adversarial.py`` also run as suites (the ``suite`` param of
its ``sandbox`` fixture); here: per-test verdicts against single jobs, output split by test,
what one test leaves for the next, restarts after a test that kills its process, fail-fast,
and the CPU budget that keeps a long suite from spending one job's CPU limit.
"""

from __future__ import annotations

import time

import pytest
from arenaforge.pipeline.sandbox import (
    ERROR,
    FAILED,
    PASSED,
    TIMEOUT,
    Job,
    SandboxConfig,
    SandboxPool,
    SuiteJob,
)
from sandbox_support import UID_BASE, _problems

ADD = "def add(a, b):\n    return a + b\n"
CASES = [  # (test, status): each judged on its own, whatever the others did
    ("assert add(1, 2) == 3", PASSED),
    ("assert add(1, 1) == 3", FAILED),
    ("assert nope(1)", ERROR),
    ("x = [1, 2]\nassert add(*x) == 3", PASSED),
    ("assert x == [1, 2]", ERROR),  # x was bound by the test before: not visible here
    ("import builtins\nbuiltins.len = lambda s: 0\nassert len('ab') == 0", PASSED),
    ("assert len('ab') == 2", PASSED),  # the rebound builtin was restored
    ("import sys\nsys.exit(0)", ERROR),
    ("import os\nos._exit(0)", ERROR),  # ends the test process: the next starts afresh
    ("print('out of test 9')\nassert add(2, 2) == 4", PASSED),
    ("while True:\n    pass", TIMEOUT),
    ("import os\nassert not os.path.exists('left')\nopen('left', 'w').write('x')",
     PASSED),
    ("import os\nassert not os.path.exists('left')", PASSED),  # removed after the test
    ("assert add(5, 5) == 10", PASSED),
]


@pytest.fixture(scope="module", params=["forkserver", "per_exec", "degraded"])
def pool(request):
    if request.param != "degraded" and _problems():
        pytest.skip(f"sandbox isolation unavailable: {_problems()}")
    cfg = SandboxConfig(mode=request.param, workers=2, uid_base=UID_BASE + 80)
    with SandboxPool.from_config(cfg) as p:
        yield p


def test_each_test_gets_its_own_verdict_as_a_single_job_would(pool):
    tests = tuple(t for t, _ in CASES)
    [suite] = pool.run_suites([SuiteJob(ADD, tests, timeout_s=1.0)])
    singles = pool.run_many([Job(ADD, t, timeout_s=1.0) for t in tests])
    for (test, want), got, single in zip(CASES, suite, singles):
        assert got.status == want, (test, got)
        if test != "assert x == [1, 2]" and "left" not in test:  # state across tests
            assert (got.status, got.error_type, got.assertions_passed) == \
                (single.status, single.error_type, single.assertions_passed), test
    assert "out of test 9" in suite[9].stdout_tail
    assert all("out of test 9" not in r.stdout_tail for i, r in enumerate(suite) if i != 9)
    assert suite[10].duration_s < 2.5


def test_a_failing_solution_fails_every_test_once(pool):
    tests = ("assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert True")
    many = tests + tuple(f"assert add({k}, 0) == {k}" for k in range(7))
    raising, looping = "raise ValueError('no')\n", "while True:\n    pass\n"
    start = time.monotonic()
    bad, slow, broken = pool.run_suites([SuiteJob(raising, tests, 1.0), SuiteJob(looping, many, 1.0),
                                         SuiteJob("def add(a, b)\n", tests, 1.0)])
    assert [r.error_name for r in bad] == ["ValueError"] * 3
    assert [r.status for r in slow] == [TIMEOUT] * 10
    # one timeout for the looping solution (1 s), not one per test (10 s); the rest is slack
    # for a busy machine's sandbox starts
    assert time.monotonic() - start < 6
    assert [r.error_type for r in broken] == ["syntax"] * 3


def test_fail_fast_skips_after_a_first_timeout_only(pool):
    loop = "def add(a, b):\n    while True:\n        pass\n"
    tests = ("assert add(1, 2) == 3", "assert True", "assert 1 == 1")
    [skipped, run_all] = pool.run_suites([SuiteJob(loop, tests, 0.5, fail_fast=True),
                                          SuiteJob(ADD, ("assert True",) + tests, 0.5,
                                                   fail_fast=True)])
    assert skipped[0].status == TIMEOUT and skipped[1:] == [None, None]
    assert [r.status for r in run_all] == [PASSED, PASSED, PASSED, PASSED]
    # a solution that loops as it loads: its first test timed out, as a single job would
    [looping] = pool.run_suites([SuiteJob("while True:\n    pass\n", tests, 0.5,
                                          fail_fast=True)])
    assert looping[0].status == TIMEOUT and looping[1:] == [None, None]


def test_many_cpu_heavy_tests_each_get_a_full_cpu_limit(pool):
    # 8 x ~0.35 s of CPU is more than one job's CPU limit (timeout 1 s: 2 s); T starts afresh.
    burn = "def burn():\n    x = 0\n    for i in range(2_500_000):\n        x += i\n    return x\n"
    tests = tuple("assert burn() > 0" for _ in range(8))
    [results] = pool.run_suites([SuiteJob(burn, tests, timeout_s=1.0)])
    assert [r.status for r in results] == [PASSED] * 8


def test_unparsable_tests_are_judged_alone(pool):
    [results] = pool.run_suites([SuiteJob(ADD, ("x = (", "assert add(1, 2) == 3", ""))])
    assert [(r.status, r.error_name) for r in results] == \
        [(ERROR, "SyntaxError"), (PASSED, None), (ERROR, "EmptyTests")]
