"""Program jobs and their results: the contract between the stages and the sandbox's languages.

A ``ProgramJob`` is one answer in one language: its source (with its harness, for a function
task), and either the stdin of each test (``stdins``: a whole program, run once per test) or the
number of calls its harness makes (``calls``: a function task, all calls in one process that
reports each on its own pipe). The sandbox compiles it once and runs every test of it in one
sandbox call; ``ProgramResult`` holds the compile step and one ``RunResult`` per test.
"""

from __future__ import annotations

import dataclasses

from arenaforge.pipeline.statuses import (  # noqa: F401  (the languages' public vocabulary)
    COMPILE_ERROR,
    KILLED,
    OK,
    RUN_STATUSES,
    RUNTIME_ERROR,
)

# Lines a function task's harness writes on its calls pipe (see ``inside/programs.py``):
# ``<nonce> s <k>`` when call k starts, ``<nonce> r <k> <json>`` with its value,
# ``<nonce> x <k> <message>`` when it raised. The nonce and the first call to run come as the
# program's last two arguments; the pipe is CALLS_FD.
CALLS_FD = 3
CALL_START, CALL_VALUE, CALL_RAISED = "s", "r", "x"


@dataclasses.dataclass(frozen=True)
class ProgramJob:
    """One program to compile once and run on all its tests in one sandbox call.

    Args:
        language: A language id or name (``cpp``, ``C++``...).
        source: The program: a whole program, or a solution with its harness appended.
        stdins: A whole program's tests: the stdin of each run (one process per test).
        calls: A function task's tests: how many calls the harness in ``source`` makes.
        harness: A second compilation unit, for languages that keep the harness apart (Go:
            its own imports); empty for the others.
        timeout_s: Wall-clock limit of each run (of each call in ``calls``); None: the
            pool's default.
        memory_mb: Memory of a run, for all its processes together; None: the pool's.
        compile_timeout_s: Wall-clock limit of the compile step.
        compile_memory_mb: Memory of the compile step (compilers are large).
        fail_fast: When the first test times out, skip the others (their results are None).
    """

    language: str
    source: str
    stdins: tuple[str, ...] = ()
    calls: int = 0
    harness: str = ""
    timeout_s: float | None = None
    memory_mb: int | None = None
    compile_timeout_s: float = 30.0
    compile_memory_mb: int = 2048
    fail_fast: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not isinstance(self.harness, str):
            raise TypeError("ProgramJob.source and .harness must be str")
        if not all(isinstance(s, str) for s in self.stdins):
            raise TypeError("ProgramJob.stdins must be strings")
        if bool(self.stdins) == bool(self.calls) or self.calls < 0:
            raise ValueError("ProgramJob: give either stdins (a whole program's tests) or "
                             f"calls > 0 (a function task's), got {len(self.stdins)} stdins "
                             f"and calls={self.calls}")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(f"ProgramJob.timeout_s must be > 0, got {self.timeout_s!r}")
        if self.memory_mb is not None and self.memory_mb < 32:
            raise ValueError(f"ProgramJob.memory_mb must be >= 32, got {self.memory_mb!r}")
        if not self.compile_timeout_s > 0 or self.compile_memory_mb < 64:
            raise ValueError("ProgramJob: compile_timeout_s must be > 0 and "
                             "compile_memory_mb >= 64")

    @property
    def tests(self) -> int:
        return len(self.stdins) or self.calls


@dataclasses.dataclass(frozen=True)
class CompileResult:
    """The compile step (compiled languages) or syntax check (interpreted ones).

    ``status`` is ``ok`` or ``compile_error``; ``message`` says why it failed (the compiler's
    exit code, or the limit it hit: a compiler bomb is the program's compile error).
    """

    status: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    cached: bool = False
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK


@dataclasses.dataclass(frozen=True)
class RunResult:
    """One test's run.

    Attributes:
        status: One of ``RUN_STATUSES``.
        exit_code: The process's exit code; a negative number is the signal that ended it.
        stdout: What the run wrote (whole, up to the output limit; for calls, a tail).
        stderr: The tail of its stderr.
        wall_s: Its wall-clock time (a call's: from its start to its value).
        value: For a call that returned: the JSON text the harness wrote.
        message: Why the status is not ``ok`` (or what the call raised).
        started: For a call: whether the process reached its first call (False: the program
            ended or failed while loading, before any call ran).
    """

    status: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    value: str | None = None
    message: str | None = None
    started: bool = True


@dataclasses.dataclass(frozen=True)
class ProgramResult:
    """A program job's results.

    ``runs`` has one entry per test, in order (``None``: skipped by ``fail_fast``); when the
    program did not compile every run is ``compile_error``. ``sandbox_fault`` is set when the
    sandbox itself failed (never the program's fault; its runs are then ``killed``).
    """

    language: str
    compile: CompileResult
    runs: tuple[RunResult | None, ...]
    isolation: str
    limits: tuple[str, ...] = ()
    sandbox_fault: str | None = None

    @property
    def status(self) -> str:
        """``compile_error``, else the first run's status that is not ``ok``, else ``ok``."""
        if not self.compile.ok:
            return COMPILE_ERROR
        for run in self.runs:
            if run is not None and run.status != OK:
                return run.status
        return OK
