"""A pool of sandbox workers, one long-lived thread per slot; order-preserving batch API.

Safe to build inside a Ray worker: no ``preexec_fn``, slots are locked across processes, and each
sandbox is started by the thread that owns it (see ``worker``).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from typing import Self

from arenaforge.pipeline.sandbox import cgroups, checks, launcher, seccomp_filter
from arenaforge.pipeline.sandbox.config import SandboxConfig, pool_size
from arenaforge.pipeline.sandbox.prepare import prepare_tests
from arenaforge.pipeline.sandbox.result import (
    ERR_SANDBOX,
    ERR_SYNTAX,
    ERROR,
    MODE_DEGRADED,
    MODE_FORKSERVER,
    ExecResult,
    Job,
    SuiteJob,
)
from arenaforge.pipeline.sandbox.worker import SandboxWorker

log = logging.getLogger(__name__)
_STOP = object()
_PROGRAM = object()  # marks a program job in the queue (languages.execute runs it)
_COMPILE = object()  # ... a program job to compile only


class SandboxUnavailable(RuntimeError):
    """An isolation layer is missing; the message names it and how to install it."""


def resolve_mode(cfg: SandboxConfig) -> str:
    """The mode a pool runs in; raises ``SandboxUnavailable`` rather than silently degrading."""
    if cfg.mode == MODE_DEGRADED:
        log.warning("sandbox mode 'degraded': no namespaces, no uid drop; for trusted code only")
        return MODE_DEGRADED
    problems = checks.self_check(cfg)
    if problems:
        raise SandboxUnavailable(
            "sandbox isolation is unavailable:\n  - " + "\n  - ".join(problems)
            + "\nFix the above, or set sandbox mode 'degraded' explicitly to run without it.")
    return MODE_FORKSERVER if cfg.mode == "auto" else cfg.mode


class SandboxPool:
    """Runs jobs on ``cfg.workers`` sandbox workers.

    Example::

        with SandboxPool.from_config(SandboxConfig(workers=2)) as pool:
            results = pool.run_many([Job("def f(x): return x + 1", "assert f(1) == 2")])
            assert results[0].passed
    """

    def __init__(self, cfg: SandboxConfig, mode: str):
        self.cfg, self.mode = cfg, mode
        self._queue: queue.Queue = queue.Queue()
        launcher.compile_harness()
        self._slots = launcher.acquire_slots(pool_size(cfg.workers), cfg.uid_base)
        bpf = seccomp_filter.build_bpf_hex() if seccomp_filter.available() is None else ""
        use_cgroups = mode != MODE_DEGRADED and cgroups.unavailable_reason() is None
        self._workers = [
            SandboxWorker(cfg, mode, slot,
                          cgroups.SlotCgroup(f"uid-{slot.uid}") if use_cgroups else None, bpf)
            for slot in self._slots]
        started: queue.Queue = queue.Queue()
        self._threads = [threading.Thread(target=self._loop, args=(w, started), daemon=True,
                                          name=f"sandbox-slot-{w.slot.uid}")
                         for w in self._workers]
        for t in self._threads:
            t.start()
        errors = [e for e in (started.get() for _ in self._threads) if e is not None]
        if errors:
            self.close()
            raise errors[0]
        self._closed = False
        self._programs = None  # a languages.execute.ProgramRunner, made by run_programs
        self._programs_lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: SandboxConfig) -> SandboxPool:
        """Check the isolation layers, pick the mode and start the workers."""
        return cls(cfg, resolve_mode(cfg))

    @property
    def limits(self) -> tuple[str, ...]:
        """The isolation layers and limits every result of this pool records."""
        return self._workers[0].limits

    def _loop(self, worker: SandboxWorker, started: queue.Queue) -> None:
        try:
            worker.start()
        except Exception as exc:  # noqa: BLE001 - reported to the constructor
            worker.close()
            started.put(exc)
            return
        started.put(None)
        while True:
            item = self._queue.get()
            if item is _STOP:
                break
            index, job, prepared, out = item
            suite = isinstance(job, SuiteJob)
            if prepared is _PROGRAM or prepared is _COMPILE:  # never raise: failures on results
                run = self._programs.run if prepared is _PROGRAM else self._programs.compile
                out.put((index, run(worker, job)))
                continue
            try:
                result = worker.run_suite(job, prepared) if suite else worker.run(job, prepared)
            except Exception as exc:
                log.exception("sandbox worker failed")
                result = ExecResult(status=ERROR, error_type=ERR_SANDBOX,
                                    error_name=type(exc).__name__, error_message=str(exc)[:2000],
                                    isolation=self.mode, limits=worker.limits)
                result = [result] * len(prepared) if suite else result
            out.put((index, result))
        worker.close()

    def run(self, job: Job) -> ExecResult:
        """Run one job."""
        return self.run_many([job])[0]

    def run_many(self, jobs: Sequence[Job]) -> list[ExecResult]:
        """Run jobs in parallel on the workers; results come back in the order of ``jobs``."""
        if getattr(self, "_closed", True):
            raise RuntimeError("the sandbox pool is closed")
        results: list[ExecResult | None] = [None] * len(jobs)
        out: queue.Queue = queue.Queue()
        pending = 0
        for i, job in enumerate(jobs):
            prepared = self._prepare(job.tests)
            if isinstance(prepared, ExecResult):
                results[i] = prepared
                continue
            self._queue.put((i, job, prepared, out))
            pending += 1
        for _ in range(pending):
            index, result = out.get()
            results[index] = result
        return results  # type: ignore[return-value]

    def run_suites(self, jobs: Sequence[SuiteJob]) -> list[list[ExecResult | None]]:
        """Run suite jobs (one sandbox job per solution, a verdict per test) on the workers.

        Returns, per job, one result per test in order; ``None`` marks a test skipped by the
        job's ``fail_fast``. Tests that do not compile get the same error ``run_many`` gives
        them and are not sent.
        """
        if getattr(self, "_closed", True):
            raise RuntimeError("the sandbox pool is closed")
        results: list[list[ExecResult | None]] = [[None] * len(job.tests) for job in jobs]
        sent: dict[int, list[int]] = {}
        out: queue.Queue = queue.Queue()
        for i, job in enumerate(jobs):
            runnable, prepared = [], []
            for t, source in enumerate(job.tests):
                p = self._prepare(source)
                if isinstance(p, ExecResult):
                    results[i][t] = p
                else:
                    runnable.append(t)
                    prepared.append(p)
            if runnable:
                tests = tuple(job.tests[t] for t in runnable)
                # fail_fast looks at the first test: only when it is the job's first test
                fail_fast = job.fail_fast and runnable[0] == 0
                sub = SuiteJob(job.solution, tests, job.timeout_s, job.memory_mb, fail_fast)
                self._queue.put((i, sub, prepared, out))
                sent[i] = runnable
        for _ in range(len(sent)):
            index, suite_results = out.get()
            for t, result in zip(sent[index], suite_results):
                results[index][t] = result
        return results

    def run_programs(self, jobs: Sequence) -> list:
        """Run program jobs in any language (``languages.ProgramJob``) on the workers.

        Each job is compiled once (a compiled language; the result is cached by source and
        toolchain) and all its tests run in one sandbox call. Results come back in order.

        Raises:
            UnknownLanguage: A job names no known language.
            ToolchainUnavailable: A job's language has no toolchain here (checked before any
                job runs).
        """
        return self._programs_queue(jobs, _PROGRAM)

    def compile_programs(self, jobs: Sequence) -> list:
        """Only compile program jobs (``languages.CompileResult`` each, in order); the
        compiled programs are cached, so a ``run_programs`` of the same jobs reuses them.
        Raises as ``run_programs`` does."""
        return self._programs_queue(jobs, _COMPILE)

    def _programs_queue(self, jobs: Sequence, kind: object) -> list:
        from arenaforge.pipeline.sandbox.languages.catalog import resolve_language
        from arenaforge.pipeline.sandbox.languages.execute import ProgramRunner
        from arenaforge.pipeline.sandbox.languages.installed import require

        if getattr(self, "_closed", True):
            raise RuntimeError("the sandbox pool is closed")
        for lang in {resolve_language(job.language) for job in jobs}:
            require(lang)
        with self._programs_lock:  # one runner, one compile cache, whichever thread is first
            if self._programs is None:
                self._programs = ProgramRunner(self.cfg)
        out: queue.Queue = queue.Queue()
        for i, job in enumerate(jobs):
            self._queue.put((i, job, kind, out))
        results: list = [None] * len(jobs)
        for _ in jobs:
            index, result = out.get()
            results[index] = result
        return results

    def _prepare(self, source: str):
        """The compiled tests, or the error result of tests that cannot run."""
        try:
            prepared = prepare_tests(source)
        except SyntaxError as exc:
            return ExecResult(status=ERROR, error_type=ERR_SYNTAX, error_name="SyntaxError",
                              error_message=f"tests: {exc}", isolation=self.mode,
                              limits=self.limits)
        if not prepared.chunks:
            return ExecResult(status=ERROR, error_type=ERR_SYNTAX, error_name="EmptyTests",
                              error_message="the tests contain no statement",
                              isolation=self.mode, limits=self.limits)
        return prepared

    def close(self) -> None:
        """Stop every sandbox and release the slots. Idempotent."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(_STOP)
        for t in self._threads:
            t.join(timeout=30)
        for w in self._workers:
            if w.cgroup is not None:
                w.cgroup.remove()
        for slot in self._slots:
            slot.release()

    def __reduce__(self):
        raise TypeError("a SandboxPool holds live sandboxes and cannot be sent to another process "
                        "(e.g. a Ray task); build one there with SandboxPool.from_config(cfg)")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
