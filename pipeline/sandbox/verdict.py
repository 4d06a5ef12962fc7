"""Turn the harness's verdict (events seen on its own descriptor) into an ``ExecResult``.

Pure logic. Order matters: limits the supervisor observed (deadline, output cap, OOM kill) come
before anything the job's own process reported, and ``passed`` needs positive evidence: the
harness saw the tests finish, at least one assertion ran, nothing failed, and the job exited 0.
"""

from __future__ import annotations

import signal
from typing import Any

from arenaforge.pipeline.sandbox.result import (
    ERR_ASSERTION,
    ERR_EXIT,
    ERR_MEMORY,
    ERR_NO_TESTS,
    ERR_OUTPUT,
    ERR_RUNTIME,
    ERR_SANDBOX,
    ERR_SYNTAX,
    ERR_TIMEOUT,
    ERROR,
    FAILED,
    MEMORY,
    OUTPUT_LIMIT,
    PASSED,
    TIMEOUT,
    ExecResult,
)

_CPU_LIMIT_EXIT = 128 + signal.SIGXCPU


def _describe_exit(code: int) -> str:
    if code > 128:
        try:
            return f"killed by {signal.Signals(code - 128).name}"
        except ValueError:
            return f"killed by signal {code - 128}"
    return f"exit code {code}"


def classify(v: dict[str, Any], timeout_s: float, oom_killed: bool
             ) -> tuple[str, str | None, str | None, str | None]:
    """(status, error_type, error_name, error_message) of a harness verdict."""
    err, fail = v.get("first_error"), v.get("first_failure")
    code = v.get("exit_code", 0)
    if v.get("setup"):
        return ERROR, ERR_SANDBOX, "SetupError", v["setup"]
    if v.get("reason") == "timeout" or code == _CPU_LIMIT_EXIT:
        return TIMEOUT, ERR_TIMEOUT, None, f"time limit of {timeout_s:g}s exceeded"
    if v.get("reason") == "output_limit":
        return OUTPUT_LIMIT, ERR_OUTPUT, None, "stdout+stderr exceeded the output limit"
    if v.get("reason") == "event_flood":
        return ERROR, ERR_RUNTIME, "VerdictFlood", "the job flooded the verdict channel"
    if oom_killed or (err and err["kind"] == "memory"):
        msg = err["msg"] if err and err["kind"] == "memory" else "killed by the memory limit"
        return MEMORY, ERR_MEMORY, "MemoryError", msg
    if err:
        kind = {"syntax": ERR_SYNTAX, "exit": ERR_EXIT}.get(err["kind"], ERR_RUNTIME)
        return ERROR, kind, err["name"], err["msg"]
    if fail:
        return FAILED, ERR_ASSERTION, fail["name"], fail["msg"]
    if code != 0 or not v.get("done"):
        return (ERROR, ERR_EXIT, None,
                f"the job ended before the tests completed ({_describe_exit(code)})")
    if not v.get("ok"):
        return (ERROR, ERR_NO_TESTS, "NoAssertions",
                "the tests ran no assertion (a `def check(candidate)` that is never called?)")
    return PASSED, None, None, None


def to_result(v: dict[str, Any], *, timeout_s: float, oom_killed: bool, tests_total: int | None,
              isolation: str, limits: tuple[str, ...]) -> ExecResult:
    """The ``ExecResult`` for one harness verdict."""
    status, error_type, error_name, error_message = classify(v, timeout_s, oom_killed)
    return ExecResult(
        status=status, error_type=error_type, error_name=error_name, error_message=error_message,
        tests_total=tests_total, assertions_passed=int(v.get("ok", 0)),
        assertions_failed=int(v.get("failed", 0)), stdout_tail=v.get("stdout", ""),
        stderr_tail=v.get("stderr", ""), duration_s=float(v.get("duration_s", 0.0)),
        isolation=isolation, limits=limits, exit_code=v.get("exit_code"))


def sandbox_error(message: str, *, isolation: str, limits: tuple[str, ...],
                  duration_s: float = 0.0, status: str = ERROR) -> ExecResult:
    """A result for a job the sandbox could not judge (its server died or hung)."""
    kind = {TIMEOUT: ERR_TIMEOUT, MEMORY: ERR_MEMORY}.get(status, ERR_SANDBOX)
    return ExecResult(status=status, error_type=kind, error_name="SandboxError",
                      error_message=message, duration_s=duration_s, isolation=isolation,
                      limits=limits)


def _suite_test(t: dict[str, str], job: dict[str, Any]) -> dict[str, Any]:
    """A suite test's flat wire summary (``inside/suite.py``) in the shape ``classify`` reads.

    A summary without an exit code (not written by the server's suite code) takes the job's.
    """
    def event(prefix: str) -> dict[str, str] | None:
        if f"{prefix}_kind" not in t:
            return None
        return {k: t.get(f"{prefix}_{k}", "") for k in ("phase", "kind", "name", "msg")}

    finished = "exit_code" in t
    return {"ok": int(t.get("ok", 0)), "failed": int(t.get("failed", 0)),
            "done": t.get("done") == "1", "started": t.get("started") == "1",
            "setup": t.get("setup"), "first_failure": event("first_failure"),
            "first_error": event("first_error"),
            "exit_code": int(t["exit_code"]) if finished else job.get("exit_code", 0) or 137,
            "reason": (t.get("reason") or None) if finished else job.get("reason"),
            "stdout": t.get("stdout", ""), "stderr": t.get("stderr", ""),
            "duration_s": float(t.get("duration_s", 0.0))}


def suite_results(v: dict[str, Any], *, timeout_s: float, tests_total: list[int | None],
                  isolation: str, limits: tuple[str, ...]) -> list[ExecResult | None]:
    """One ``ExecResult`` per test of a suite verdict (``None`` for a skipped test).

    A test that never started (the job failed before it: setup, a killed job) gets the job's
    own verdict, as the single job it replaces would have.
    """
    out: list[ExecResult | None] = []
    for i, total in enumerate(tests_total):
        t = v.get(f"t{i}")
        if isinstance(t, dict) and t.get("skipped") == "1":
            out.append(None)
            continue
        test = _suite_test(t, v) if isinstance(t, dict) else dict(v, ok=0, failed=0, done=False)
        out.append(to_result(test, timeout_s=timeout_s, oom_killed=False, tests_total=total,
                             isolation=isolation, limits=limits))
    return out
