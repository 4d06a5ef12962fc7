"""Correct solutions pass in every mode; errors are classified; results are storable."""

from __future__ import annotations

import marshal

import pyarrow as pa
import pytest
from arenaforge.pipeline.sandbox import (
    ERROR,
    FAILED,
    MEMORY,
    PASSED,
    TIMEOUT,
    Job,
    SandboxConfig,
    SandboxPool,
    SandboxUnavailable,
    run_tests,
)
from arenaforge.pipeline.sandbox import (
    pool as pool_module,
)
from sandbox_support import UID_BASE, requires_isolation

HUMANEVAL_SOLUTION = '''
from typing import List


def has_close_elements(numbers: List[float], threshold: float) -> bool:
    for i, a in enumerate(numbers):
        for j, b in enumerate(numbers):
            if i != j and abs(a - b) < threshold:
                return True
    return False
'''
HUMANEVAL_TESTS = '''
METADATA = {'author': 'jt', 'dataset': 'test'}


def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) == True

check(has_close_elements)
'''
RICH_SOLUTION = '''
import collections, heapq, json, math, re, threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

@dataclass
class Point:
    x: int
    y: int

def word_counts(text):
    print("counting", len(text))
    with ThreadPoolExecutor(2) as ex:
        words = list(ex.map(str.lower, re.findall(r"\\w+", text)))
    open("scratch.txt", "w").write(json.dumps(words))
    return dict(collections.Counter(words))

def dist(p):
    return math.hypot(p.x, p.y)
'''
RICH_TESTS = '''
assert word_counts("a b A") == {"a": 2, "b": 1}
assert abs(dist(Point(3, 4)) - 5.0) < 1e-9
assert heapq.nsmallest(2, [3, 1, 2]) == [1, 2]
assert isinstance(Point(1, 2), Point)
'''
CASES = [(HUMANEVAL_SOLUTION, HUMANEVAL_TESTS, None), (RICH_SOLUTION, RICH_TESTS, 4),
         ("def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3\nassert add(-1, 1) == 0", 2)]


@pytest.fixture(scope="module", params=["forkserver", "per_exec", "degraded"])
def any_pool(request):
    if request.param != "degraded":
        from sandbox_support import _problems
        if _problems():
            pytest.skip(f"sandbox isolation unavailable: {_problems()}")
    cfg = SandboxConfig(mode=request.param, workers=2, uid_base=UID_BASE + 70)
    with SandboxPool.from_config(cfg) as p:
        yield p


def test_correct_solutions_pass_in_every_mode(any_pool):
    results = any_pool.run_many([Job(s, t) for s, t, _ in CASES])
    for (_, _, total), r in zip(CASES, results):
        assert r.status == PASSED, r
        assert r.passed and r.isolation == any_pool.mode
        assert r.tests_total == total
        assert r.assertions_failed == 0 and r.assertions_passed >= 4 - 2 * (total == 2)
    assert "counting 5" in results[1].stdout_tail


@pytest.mark.parametrize(("solution", "tests", "status", "error_type", "error_name"), [
    ("def f(:\n", "assert f() == 1", ERROR, "syntax", "SyntaxError"),
    ("def f():\n    return 1\n", "assert f( == 1", ERROR, "syntax", "SyntaxError"),
    ("def f():\n    return 1 / 0\n", "assert f() == 1", ERROR, "runtime", "ZeroDivisionError"),
    ("x = [][1]\n", "assert True", ERROR, "runtime", "IndexError"),
    ("def f():\n    return 2\n", "assert f() == 1", FAILED, "assertion", "AssertionError"),
    ("def f():\n    return f()\n", "assert f()", ERROR, "runtime", "RecursionError"),
    ("import time\ntime.sleep(30)\n", "assert True", TIMEOUT, "timeout", None),
    ("x = bytearray(1 << 34)\n", "assert True", MEMORY, "memory", "MemoryError"),
    ("def f():\n    return 1\n", "def check(c):\n    assert c() == 1\n", ERROR, "no_tests",
     "NoAssertions"),
])
def test_errors_are_classified(any_pool, solution, tests, status, error_type, error_name):
    r = any_pool.run(Job(solution, tests, timeout_s=1.0, memory_mb=128))
    assert (r.status, r.error_type, r.error_name) == (status, error_type, error_name), r


def test_assert_list_counts_every_assertion(any_pool):
    r = any_pool.run(Job("def f(x):\n    return x if x < 3 else -1\n",
                         "\n".join(f"assert f({i}) == {i}" for i in range(5))))
    assert (r.status, r.tests_total, r.assertions_passed, r.assertions_failed) == (FAILED, 5, 3, 2)
    assert "assert f(3) == 3" in r.error_message


def test_every_job_gets_a_fresh_random_seed(any_pool):
    """A forked job must not replay the fork server's random state (the server defers the
    preloaded modules' at-fork hooks to the job process)."""
    results = any_pool.run_many([Job("import random\nx = random.random()\nprint(repr(x))",
                                     "assert 0 <= x < 1")] * 6)
    assert [r.status for r in results] == [PASSED] * 6
    assert len({r.stdout_tail for r in results}) == 6


def test_every_assertion_that_ran_is_counted_also_at_a_timeout(any_pool):
    tests = "for i in range(300):\n    assert i >= 0\nimport time\ntime.sleep(30)\n"
    r = any_pool.run(Job("x = 1", tests, timeout_s=1.0))
    assert (r.status, r.assertions_passed, r.assertions_failed) == (TIMEOUT, 300, 0), r


def test_flooding_the_verdict_channel_is_an_error(any_pool):
    r = any_pool.run(Job("import os\nos.write(3, b'x' * (3 << 20))", "assert True"))
    assert (r.status, r.error_name) == (ERROR, "VerdictFlood"), r


def test_builtins_a_solution_adds_or_rebinds_are_undone_before_the_tests(any_pool):
    solution = "import builtins\nbuiltins.sneaky = 1\nbuiltins.len = lambda x: 3\n"
    tests = ("import builtins\nassert not hasattr(builtins, 'sneaky')\n"
             "assert len([1]) == 1\n")
    r = any_pool.run(Job(solution, tests))
    assert (r.status, r.assertions_passed) == (PASSED, 2), r
    # and the next job of the same server starts from clean builtins
    assert any_pool.run(Job("x = 1", tests)).status == PASSED


def test_results_store_in_parquet_rows(any_pool):
    results = any_pool.run_many([Job(s, t) for s, t, _ in CASES])
    table = pa.Table.from_pylist([r.to_dict() for r in results])
    assert table.column("passed").to_pylist() == [True] * len(CASES)
    assert table.column("isolation").to_pylist() == [any_pool.mode] * len(CASES)


@requires_isolation
def test_run_tests_uses_an_isolated_default_pool():
    r = run_tests(HUMANEVAL_SOLUTION, HUMANEVAL_TESTS, timeout_s=5.0, memory_mb=512)
    assert r.passed and r.isolation == "forkserver" and "bwrap" in r.limits


def test_auto_refuses_to_degrade(monkeypatch):
    monkeypatch.setattr(pool_module.checks, "self_check",
                        lambda cfg: ["bubblewrap: `bwrap` not found; install with `apt-get install bubblewrap`"])
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        SandboxPool.from_config(SandboxConfig())
    with pytest.raises(SandboxUnavailable):
        SandboxPool.from_config(SandboxConfig(mode="per_exec"))


@requires_isolation
def test_without_cgroups_rlimits_still_hold_and_the_result_says_so(monkeypatch):
    monkeypatch.setattr(pool_module.cgroups, "unavailable_reason", lambda: "cgroup v2 host")
    cfg = SandboxConfig(workers=1, uid_base=UID_BASE + 80)
    with SandboxPool.from_config(cfg) as p:
        ok, bomb = p.run_many([Job(*CASES[2][:2]),
                               Job("x = bytearray(1 << 33)\n", "assert True", memory_mb=128)])
    assert ok.status == PASSED and bomb.status == MEMORY
    assert "cgroup_memory" not in ok.limits and "rlimit_as" in ok.limits


def test_a_pool_refuses_to_be_pickled(any_pool):
    import pickle

    with pytest.raises(TypeError, match="from_config"):
        pickle.dumps(any_pool)


@pytest.mark.parametrize("mode", ["forkserver", "per_exec"])
def test_a_sandbox_that_cannot_start_fails_the_pool_with_its_stderr(monkeypatch, mode):
    from arenaforge.pipeline.sandbox import launcher
    from arenaforge.pipeline.sandbox.worker import SandboxStartError

    monkeypatch.setattr(launcher, "sandbox_command",
                        lambda *a, **k: ["/bin/sh", "-c", "echo bwrap: no permission >&2; exit 3"])
    with pytest.raises(SandboxStartError, match="bwrap: no permission"):
        SandboxPool(SandboxConfig(mode=mode, workers=1, uid_base=UID_BASE + 90), mode)


@requires_isolation
def test_where_clone_cannot_be_used_a_helper_process_forks_the_job_alike(monkeypatch):
    """The fallback of ``inside/spawn.py`` (C1 unshares, forks the job and exits) gives the same
    verdicts and the same clean slate between jobs."""
    from arenaforge.pipeline.sandbox import launcher

    real = launcher.harness_config

    def without_clone(**kwargs):
        cfg = marshal.loads(bytes.fromhex(real(**kwargs)))
        cfg["clone"] = False
        return marshal.dumps(cfg).hex()

    monkeypatch.setattr(launcher, "harness_config", without_clone)
    daemon = ("import os, signal, time\nopen('/tmp/left', 'w').write('x')\n"
              "open('left', 'w').write('x')\nif os.fork() == 0:\n    os.setsid()\n"
              "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    time.sleep(60)\n")
    cfg = SandboxConfig(mode="forkserver", workers=1, uid_base=UID_BASE + 120)
    with SandboxPool(cfg, "forkserver") as p:
        results = p.run_many([Job(s, t) for s, t, _ in CASES])
        assert [r.status for r in results] == [PASSED] * len(CASES), results
        seeds = p.run_many([Job("import os, random\nx = random.random()\nprint(repr(x))",
                                "assert os.getpid() == 1")] * 3)
        assert [r.status for r in seeds] == [PASSED] * 3 and len({r.stdout_tail for r in seeds}) == 3
        assert p.run(Job(daemon, "assert True")).status == PASSED
        # the next job: no file and no process left (alive: bwrap's init, the server, itself)
        alone = ("import os\nassert os.listdir('/tmp') == [] and os.listdir('.') == []\n"
                 "states = [open(f'/proc/{q}/stat').read().rsplit(')', 1)[1].split()[0]\n"
                 "          for q in os.listdir('/proc') if q.isdigit()]\n"
                 "assert len([x for x in states if x != 'Z']) == 3, states\n")
        clean = p.run(Job("x = 1", alone))
        assert clean.status == PASSED, clean
        slow = p.run(Job("import time\ntime.sleep(30)", "assert True", timeout_s=0.5))
        assert (slow.status, slow.error_type) == (TIMEOUT, "timeout")

