"""Jobs, results and the status vocabulary of the sandbox (named constants, evalplus style)."""

from __future__ import annotations

import dataclasses
from typing import Any

from arenaforge.pipeline.statuses import (  # noqa: F401  (the sandbox's public vocabulary)
    ERROR,
    FAILED,
    MEMORY,
    OUTPUT_LIMIT,
    PASSED,
    TIMEOUT,
)
from arenaforge.pipeline.statuses import EXECUTION_STATUSES as STATUSES  # noqa: F401

# Verdicts: ``arenaforge.pipeline.statuses``; ``passed`` is True only for PASSED.

# Error classes (``ExecResult.error_type``).
ERR_SYNTAX = "syntax"
ERR_RUNTIME = "runtime"  # ``error_name`` holds the exception class name
ERR_ASSERTION = "assertion"
ERR_TIMEOUT = "timeout"
ERR_MEMORY = "memory"
ERR_OUTPUT = "output_limit"
ERR_EXIT = "exit"  # sys.exit / os._exit / a signal before the tests finished
ERR_SANDBOX = "sandbox"  # the sandbox itself failed; the job's code is not to blame
ERR_NO_TESTS = "no_tests"  # the tests finished without running a single assertion

# Isolation modes recorded on every result.
MODE_FORKSERVER = "forkserver"
MODE_PER_EXEC = "per_exec"
MODE_DEGRADED = "degraded"


@dataclasses.dataclass(frozen=True)
class Job:
    """One execution request.

    Args:
        solution: Python source run first.
        tests: Python source run after the solution in the same namespace: plain ``assert``
            statements, or a HumanEval-style ``def check(candidate): ...`` followed by its call.
        timeout_s: Wall-clock limit; ``None`` takes the pool's default.
        memory_mb: Memory limit for the whole process tree; ``None`` takes the pool's default.
    """

    solution: str
    tests: str
    timeout_s: float | None = None
    memory_mb: int | None = None

    def __post_init__(self) -> None:
        for name in ("solution", "tests"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Job.{name} must be str, got {type(getattr(self, name)).__name__}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"Job.timeout_s must be > 0, got {self.timeout_s!r}")
        if self.memory_mb is not None and self.memory_mb < 32:
            raise ValueError(f"Job.memory_mb must be >= 32 (the interpreter needs it), "
                             f"got {self.memory_mb!r}")


@dataclasses.dataclass(frozen=True)
class SuiteJob:
    """One solution and several tests, run as one sandbox job with a verdict per test.

    Each test runs in a process of its own, forked for it inside the job's namespaces, with the
    solution run first as in a ``Job`` (see ``inside/suite.py``); what one test leaves behind is
    killed and its files removed before the next starts. Use it where isolation per solution
    suffices: the tests of one answer share its namespaces, never another answer's.

    Args:
        solution: Python source run first in every test's process.
        tests: the test programs (as ``Job.tests``), each judged on its own.
        timeout_s: wall-clock limit of each test (solution included); ``None``: the pool's.
        memory_mb: memory limit; ``None``: the pool's.
        fail_fast: when the first test times out, skip the others (their result is ``None``).
    """

    solution: str
    tests: tuple[str, ...]
    timeout_s: float | None = None
    memory_mb: int | None = None
    fail_fast: bool = False

    def __post_init__(self) -> None:
        Job(self.solution, "", self.timeout_s, self.memory_mb)  # the same field checks
        object.__setattr__(self, "tests", tuple(self.tests))
        if not all(isinstance(t, str) for t in self.tests):
            raise TypeError("SuiteJob.tests must be strings")


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """The verdict of one job. Built from the sandbox's verdict channel, never from stdout.

    ``tests_total`` is the number of top-level ``assert`` statements when the tests are an
    assert list, else ``None``; ``assertions_passed`` / ``assertions_failed`` count the
    assertions that executed (a ``check(candidate)`` stops at its first failure).
    ``limits`` names the resource limits that were active (``cgroup_memory``, ``rlimit_as``...).
    """

    status: str
    error_type: str | None = None
    error_name: str | None = None
    error_message: str | None = None
    tests_total: int | None = None
    assertions_passed: int = 0
    assertions_failed: int = 0
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0
    isolation: str = ""
    limits: tuple[str, ...] = ()
    exit_code: int | None = None

    @property
    def passed(self) -> bool:
        """True only when every test ran and passed."""
        return self.status == PASSED

    def to_dict(self) -> dict[str, Any]:
        """A flat dict of builtin values, ready for a Parquet row (``limits`` as a list)."""
        row = dataclasses.asdict(self)
        row["limits"] = list(self.limits)
        row["passed"] = self.passed
        return row
