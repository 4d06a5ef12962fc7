"""Run a program job on one worker: compile (or take it from the cache), then run every test.

The pool calls ``ProgramRunner.run`` from the worker's own thread; the compile cache is shared
by the pool's workers. A compile step's failure is the program's (``compile_error``); a sandbox
that fails is never the program's fault (``sandbox_fault``, its runs ``killed``).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import threading

from arenaforge.pipeline.sandbox.languages import frames
from arenaforge.pipeline.sandbox.languages.catalog import Language, language
from arenaforge.pipeline.sandbox.languages.classify import artifacts, compile_result, run_results
from arenaforge.pipeline.sandbox.languages.installed import Toolchain, require, sandbox_binds
from arenaforge.pipeline.sandbox.languages.jobs import (
    COMPILE_ERROR,
    KILLED,
    OK,
    CompileResult,
    ProgramJob,
    ProgramResult,
    RunResult,
)

log = logging.getLogger(__name__)
# The memory cgroup holds the sandbox's server too (~10 MiB measured idle) and, for a program
# job, its driver and the outputs the server keeps for the host: the job's limit plus this.
_SERVER_MB = 48
_GRACE_S = 5.0
_CACHE_ENTRIES = 256
_CACHE_BYTES = 256 << 20


class _CompileCache:
    """Compile results by (language, toolchain version, command, sources): LRU, bounded.

    Only outcomes that do not depend on the machine's load are kept: a success, and a compile
    error the compiler reported itself (not a limit it hit).
    """

    def __init__(self):
        self._items: collections.OrderedDict[str, tuple[CompileResult, list]] = \
            collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def key(lang: Language, tc: Toolchain, frame: dict) -> str:
        spec = frame["exec"]
        digest = hashlib.sha256(json.dumps([lang.id, tc.version, spec["argv"],
                                            [n for n, _, _ in spec["files"]]]).encode())
        for _, data, _ in spec["files"]:
            digest.update(len(data).to_bytes(8, "big"))
            digest.update(data)
        return digest.hexdigest()

    def get(self, key: str):
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: str, result: CompileResult, files: list) -> None:
        if not (result.ok or (result.exit_code or 0) > 0):
            return
        size = sum(len(d) for _, d, _ in files)
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (result, files)
            self._bytes += size
            while len(self._items) > _CACHE_ENTRIES or self._bytes > _CACHE_BYTES:
                _, (_, old) = self._items.popitem(last=False)
                self._bytes -= sum(len(d) for _, d, _ in old)


class ProgramRunner:
    """Runs ``ProgramJob``s on a pool's workers (``SandboxPool.run_programs``)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.cache = _CompileCache()

    def run(self, worker, job: ProgramJob, use_cache: bool = True) -> ProgramResult:
        """Compile (once) and run ``job`` on ``worker``; never raises (a failure of the
        sandbox or of this code becomes a ``sandbox_fault`` result)."""
        lang = language(job.language)
        try:
            return self._run(worker, lang, require(lang.id), job, use_cache)
        except Exception as exc:  # on the result, not up the worker's thread: the pool goes on
            log.exception("program job failed in the sandbox layer")
            return self._fault(worker, lang, job, f"{type(exc).__name__}: {exc}")

    def compile(self, worker, job: ProgramJob, use_cache: bool = True) -> CompileResult:
        """Only the compile step of ``job`` (an interpreted language: ``ok``, nothing to do;
        its syntax is checked with its runs); never raises."""
        lang = language(job.language)
        if not lang.compiled:
            return CompileResult(OK)
        try:
            worker.use_binds(sandbox_binds())
            return self._compile(worker, lang, require(lang.id), job, use_cache)[0]
        except Exception as exc:  # on the result, as in run()
            log.exception("compile job failed in the sandbox layer")
            return CompileResult(KILLED, message=f"{type(exc).__name__}: {exc}")

    def _limits(self, worker, lang: Language) -> tuple[str, ...]:
        limits = [x for x in worker.limits if x != "rlimit_as"]
        if frames.address_space(lang, 1, worker.cgroup is not None):
            limits.append("rlimit_as")
        return tuple(limits)

    def _fault(self, worker, lang: Language, job: ProgramJob, message: str) -> ProgramResult:
        run = RunResult(KILLED, message=f"sandbox failure: {message}")
        return ProgramResult(lang.id, CompileResult(KILLED, message=message),
                             (run,) * job.tests, worker.mode, self._limits(worker, lang),
                             sandbox_fault=message)

    def _exchange(self, worker, frame: dict, memory_mb: int):
        verdict, oom, failure = worker.run_frame(frame, memory_mb, frame["timeout_s"] + _GRACE_S,
                                                 _SERVER_MB)
        if verdict is None:
            return None, oom, failure.error_message if failure else "no verdict"
        if verdict.get("setup"):
            return None, oom, f"the job could not be set up: {verdict['setup']}"
        return verdict, oom, None

    def _compile(self, worker, lang: Language, tc: Toolchain, job: ProgramJob, use_cache: bool
                 ) -> tuple[CompileResult, list, str | None]:
        frame = frames.compile_frame(lang, tc, job, self.cfg.output_limit_bytes,
                                     cgroup=worker.cgroup is not None)
        key = self.cache.key(lang, tc, frame)
        hit = self.cache.get(key) if use_cache else None
        if hit is not None:
            return dataclasses.replace(hit[0], cached=True), hit[1], None
        verdict, oom, fault = self._exchange(worker, frame, job.compile_memory_mb)
        if verdict is None:
            return CompileResult(KILLED, message=fault), [], fault
        result = compile_result(verdict.get("c"), oom, job.compile_timeout_s)
        files: list = []
        if result.ok:
            try:
                files = artifacts(verdict)
            except ValueError as exc:
                result = dataclasses.replace(result, status=COMPILE_ERROR, message=str(exc))
            wanted = [a for a in lang.artifacts if not a.startswith("*")]
            missing = [a for a in wanted if a not in {n for n, _, _ in files}]
            if result.ok and (missing or not files):
                result = dataclasses.replace(
                    result, status=COMPILE_ERROR,
                    message=f"the compiler left no {', '.join(missing) or 'output'}")
        if use_cache:
            self.cache.put(key, result, files)
        return result, files, None

    def _run(self, worker, lang: Language, tc: Toolchain, job: ProgramJob, use_cache: bool
             ) -> ProgramResult:
        worker.use_binds(sandbox_binds())
        timeout = job.timeout_s if job.timeout_s is not None else self.cfg.timeout_s
        memory = job.memory_mb if job.memory_mb is not None else self.cfg.memory_mb
        limits = self._limits(worker, lang)
        if lang.compiled:
            compiled, files, fault = self._compile(worker, lang, tc, job, use_cache)
            if fault is not None:
                return self._fault(worker, lang, job, fault)
            if not compiled.ok:
                run = RunResult(COMPILE_ERROR, message=compiled.message)
                return ProgramResult(lang.id, compiled, (run,) * job.tests, worker.mode, limits)
        else:
            compiled = None
            files = [(n, d, False) for n, d in frames.source_files(lang, job)]
        frame = frames.run_frame(lang, tc, job, files, timeout_s=timeout, memory_mb=memory,
                                 output_limit=self.cfg.output_limit_bytes,
                                 work_mb=self.cfg.work_dir_mb, cgroup=worker.cgroup is not None)
        verdict, oom, fault = self._exchange(worker, frame, memory)
        if verdict is None:
            return self._fault(worker, lang, job, fault)
        if compiled is None:  # an interpreted language's syntax check
            compiled = compile_result(verdict.get("c"), oom, job.compile_timeout_s,
                                      what="syntax check")
            if not compiled.ok:
                run = RunResult(COMPILE_ERROR, message=compiled.message)
                return ProgramResult(lang.id, compiled, (run,) * job.tests, worker.mode, limits)
        runs = run_results(verdict, job.tests, oom, timeout, calls=bool(job.calls))
        return ProgramResult(lang.id, compiled, runs, worker.mode, limits)
