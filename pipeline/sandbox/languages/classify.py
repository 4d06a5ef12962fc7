"""Turn a program job's verdict (``inside/programs.py`` events, as the server summed them) into
results. Pure logic.

Order matters, as for Python jobs: limits the driver enforced (deadline, output cap) come
before anything the run itself reported, and a run is ``ok`` only on positive evidence (exit 0
of a whole program; a call's value line from its harness).
"""

from __future__ import annotations

import binascii
import re
import signal
import zlib
from typing import Any

from arenaforge.pipeline.sandbox.languages.jobs import (
    COMPILE_ERROR,
    KILLED,
    OK,
    RUNTIME_ERROR,
    CompileResult,
    RunResult,
)
from arenaforge.pipeline.sandbox.result import MEMORY, OUTPUT_LIMIT, TIMEOUT

# What each runtime prints when an allocation fails under RLIMIT_AS or its heap flag (the
# memory cgroup's OOM kill is a SIGKILL the host sees counted instead).
_OUT_OF_MEMORY = re.compile(
    r"std::bad_alloc|OutOfMemoryError|\bMemoryError\b|JavaScript heap out of memory|"
    r"memory allocation of \d+ bytes failed|out of memory|Cannot allocate memory")
# Signals a program raises itself when it crashes (as opposed to being killed).
_CRASHES = {signal.SIGSEGV, signal.SIGABRT, signal.SIGFPE, signal.SIGBUS, signal.SIGILL,
            signal.SIGTRAP, signal.SIGSYS}
MAX_ARTIFACT_BYTES = 256 << 20


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def process_status(code: int, reason: str, stderr: str, oom: bool, timeout_s: float,
                   calls: bool = False) -> tuple[str, str | None]:
    """(status, message) of one process that ended with exit ``code`` (negative: a signal).

    Args:
        code: ``os.waitstatus_to_exitcode`` of the process.
        reason: What the driver stopped it for: ``timeout``, ``output_limit``, ``kept_limit``
            (the job's output budget), or empty.
        stderr: The tail of its stderr.
        oom: The memory cgroup killed a process during the job (a run that then fails is
            ``memory``, whether the kill hit it or a process it started).
        timeout_s: The time limit, for the message.
        calls: The process ran a call that did not report (an exit during a call is an error).
    """
    if reason == "timeout" or code == -signal.SIGXCPU:
        return TIMEOUT, f"time limit of {timeout_s:g}s exceeded"
    if reason == "output_limit":
        return OUTPUT_LIMIT, "stdout+stderr exceeded the output limit"
    if reason == "kept_limit":
        return OUTPUT_LIMIT, "the job's output exceeded what the sandbox keeps (16 MiB)"
    if code != 0 and oom:  # the cgroup killed a process of the job: this run, or its child
        return MEMORY, "killed by the memory limit"
    if code != 0 and _OUT_OF_MEMORY.search(stderr[-2000:]):
        return MEMORY, "out of memory"
    if code == -signal.SIGKILL:
        return KILLED, "killed by SIGKILL"
    if code == 0:
        if calls:
            return RUNTIME_ERROR, "the program exited during the call"
        return OK, None
    if code < 0:
        name = _signal_name(-code)
        return (RUNTIME_ERROR if -code in _CRASHES else KILLED), f"killed by {name}"
    return RUNTIME_ERROR, f"exit code {code}"


def _float(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return 0.0


def _int(text: str) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def compile_result(step: dict[str, str] | None, oom: bool, timeout_s: float,
                   what: str = "compilation") -> CompileResult:
    """The ``CompileResult`` of a compile or check step's ``c`` event (None: none came)."""
    if step is None:
        return CompileResult(COMPILE_ERROR, message=f"{what} did not report (the sandbox "
                             "ended it: " + ("memory limit)" if oom else "time limit)"))
    code = _int(step.get("code", ""))
    status, why = process_status(code if code is not None else -9, step.get("reason", ""),
                                 step.get("stderr", ""), oom, timeout_s)
    common = {"exit_code": code, "stdout": step.get("stdout", ""),
              "stderr": step.get("stderr", ""), "wall_s": _float(step.get("wall_s", ""))}
    if status == OK:
        return CompileResult(OK, **common)
    message = f"{what} failed: {why}" if status == RUNTIME_ERROR else f"{what}: {why}"
    return CompileResult(COMPILE_ERROR, message=message, **common)


def artifacts(verdict: dict[str, Any]) -> list[tuple[str, bytes, bool]]:
    """The files a compile step sent back: ``(name, bytes, executable)``.

    Raises:
        ValueError: A file is not valid base64/zlib, or larger than ``MAX_ARTIFACT_BYTES``.
    """
    files = []
    flags = verdict.get("x") or {}
    for name, text in sorted((verdict.get("a") or {}).items()):
        try:
            data = zlib.decompressobj().decompress(binascii.a2b_base64(text),
                                                   MAX_ARTIFACT_BYTES + 1)
        except (binascii.Error, zlib.error) as exc:
            raise ValueError(f"artifact {name!r} is corrupt: {exc}") from exc
        if len(data) > MAX_ARTIFACT_BYTES:
            raise ValueError(f"artifact {name!r} is larger than {MAX_ARTIFACT_BYTES >> 20} MiB")
        files.append((name, data, flags.get(name) == "1"))
    return files


def run_results(verdict: dict[str, Any], tests: int, oom: bool, timeout_s: float,
                calls: bool) -> tuple[RunResult | None, ...]:
    """One ``RunResult`` per test (``None``: skipped) from a run step's verdict.

    A test without a result (the job ended before it: the sandbox's own deadline, the driver
    killed) gets the job's fate: ``memory`` when the cgroup killed, else ``timeout`` when the
    job ran out of time, else ``killed``.
    """
    out: list[RunResult | None] = []
    job_reason = verdict.get("reason")
    for i in range(tests):
        r = verdict.get(f"r{i}")
        if not isinstance(r, dict):
            if oom:
                out.append(RunResult(MEMORY, message="killed by the memory limit"))
            elif job_reason == "timeout":
                out.append(RunResult(TIMEOUT, message="the job's time limit was exceeded"))
            else:
                out.append(RunResult(KILLED, message="the run did not report (the job ended)"))
            continue
        if r.get("reason") == "skipped":
            out.append(None)
            continue
        note, stderr = r.get("note", ""), r.get("stderr", "")
        code, wall = _int(r.get("code", "")), _float(r.get("wall_s", ""))
        stdout = verdict.get(f"o{i}", "")
        if note == "value":
            out.append(RunResult(OK, code, stdout, stderr, wall, value=r.get("value", "")))
            continue
        if note == "raised":
            message = r.get("value", "")
            status = MEMORY if _OUT_OF_MEMORY.search(message) else RUNTIME_ERROR
            out.append(RunResult(status, code, stdout, stderr, wall, message=message))
            continue
        status, message = process_status(code if code is not None else -9, r.get("reason", ""),
                                         stderr, oom, timeout_s, calls=calls)
        if note == "not_started" and status == OK:  # exited 0 before its first call
            status, message = RUNTIME_ERROR, "the program ended before its first call"
        out.append(RunResult(status, code, stdout, stderr, wall, message=message,
                             started=note != "not_started"))
    return tuple(out)
