"""Running solutions against tests in the sandbox: one suite job per solution, a verdict per test.

``execute`` is the execution function of the pipeline (the tests stage's cross-check, verify,
repair and the HumanEval check all go through it); ``execute_results`` returns the raw per-test
``ExecResult``s for callers that grade parts of a suite on their own (``arenaforge.stages.verification.grading``).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from typing import Any

from arenaforge.pipeline.statuses import ANSWER_STATUS_OF as _STATUS_OF
from arenaforge.pipeline.statuses import ERROR, FAILED, NO_TESTS, PASSED, SKIPPED, TIMEOUT
from arenaforge.stages.verification.test_parsing import strip_main_guard


@dataclasses.dataclass(frozen=True)
class Verdict:
    """An answer's result over a list of tests.

    ``status`` is that of the first test that did not pass (``passed`` when all did);
    ``per_test`` holds each test's status (``skipped`` after a fail-fast timeout).
    """

    status: str
    tests_passed: int
    tests_total: int
    error_class: str | None = None
    error_message: str | None = None
    failed_test: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0
    per_test: tuple[str, ...] = ()

    @property
    def pass_rate(self) -> float | None:
        return self.tests_passed / self.tests_total if self.tests_total else None


def _compile_error(code: str | None) -> Verdict | None:
    """Answers without code or that do not parse fail on the host without a sandbox job."""
    if code is None or not code.strip():
        return Verdict(ERROR, 0, 0, "no_code", "the answer has no code")
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return Verdict(ERROR, 0, 0, "syntax", f"SyntaxError: {exc}")
    return None


def summarize(tests: Sequence[str], results: Sequence[Any]) -> Verdict:
    """Fold per-test ``ExecResult``s (``None`` for a skipped test) into one ``Verdict``."""
    per_test = tuple(SKIPPED if r is None else _STATUS_OF[r.status] for r in results)
    passed = sum(s == PASSED for s in per_test)
    duration = sum(r.duration_s for r in results if r is not None)
    first = next((i for i, r in enumerate(results) if r is None or not r.passed), None)
    if first is None:  # output of the last test: a probe prints there
        last = results[-1]
        return Verdict(PASSED, passed, len(tests), stdout_tail=last.stdout_tail,
                       stderr_tail=last.stderr_tail, duration_s=duration, per_test=per_test)
    r = results[first]
    if r is None:  # skipped by fail-fast: the suite's first test (outside these) timed out
        return Verdict(TIMEOUT, passed, len(tests), "timeout", "skipped after a timeout",
                       tests[first], duration_s=duration, per_test=per_test)
    error_class = "assertion" if r.status == FAILED else (r.error_type or r.status)
    return Verdict(_STATUS_OF[r.status], passed, len(tests), error_class, r.error_message,
                   tests[first], r.stdout_tail, r.stderr_tail, duration, per_test)


def execute_results(pool: Any, items: Sequence[tuple[str | None, Sequence[str]]], *,
                    timeout_s: float, memory_mb: int | None = None,
                    fail_fast: bool = True) -> list[Verdict | list[Any]]:
    """``execute`` without the summary: per item the per-test ``ExecResult``s (``None`` for a
    test skipped by fail-fast), or the ``Verdict`` of an item that ran nothing (no tests, no
    code, a syntax error)."""
    from arenaforge.pipeline.sandbox import SuiteJob

    out: list[Verdict | list[Any] | None] = [None] * len(items)
    solutions: dict[int, str] = {}
    for i, (code, tests) in enumerate(items):
        if not tests:
            out[i] = Verdict(NO_TESTS, 0, 0)
        elif (bad := _compile_error(code)) is not None:
            out[i] = dataclasses.replace(bad, tests_total=len(tests))
        else:
            solutions[i] = strip_main_guard(code)
    jobs = [SuiteJob(solutions[i], tuple(items[i][1]), timeout_s, memory_mb, fail_fast)
            for i in solutions]
    for i, results in zip(solutions, pool.run_suites(jobs) if jobs else []):
        out[i] = list(results)
    return out  # type: ignore[return-value]


def execute(pool: Any, items: Sequence[tuple[str | None, Sequence[str]]], *, timeout_s: float,
            memory_mb: int | None = None, fail_fast: bool = True) -> list[Verdict]:
    """Run each solution against its tests in the sandbox pool, each test judged on its own.

    This is the execution function of the pipeline (verify, repair and the HumanEval check all
    go through it). A test is one assert (or a small block ending in one) or a whole test
    program such as HumanEval's ``check`` + ``check(entry_point)``. Solutions are run as
    modules: a top-level ``if __name__ == "__main__":`` demo block is removed first.

    One sandbox job per solution (``SuiteJob``): inside it the tests run one after another,
    each with its own deadline, output and verdict; a test that times out, crashes or exits
    ends only itself (the next runs in a fresh process), and different solutions never share a
    job. All jobs go to the pool in one batch.

    Args:
        pool: a ``arenaforge.pipeline.sandbox.SandboxPool`` (anything with ``run_suites(jobs)``).
        items: ``(solution code or None, tests)`` pairs.
        timeout_s: wall-clock limit per test.
        memory_mb: memory limit per job (``None``: the pool's default).
        fail_fast: skip a solution's other tests when its first test timed out, so an endless
            loop costs one timeout, not one per test. Only for trusted tests: a test that times
            out on every solution would otherwise hide the others.

    Returns:
        One ``Verdict`` per item (``tests_total == 0`` and status ``no_tests`` when it had none).
    """
    return [r if isinstance(r, Verdict) else summarize(items[i][1], r)
            for i, r in enumerate(execute_results(pool, items, timeout_s=timeout_s,
                                                  memory_mb=memory_mb, fail_fast=fail_fast))]
