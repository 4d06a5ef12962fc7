"""Helpers the sandbox tests import (a module of its own: several test folders have a
conftest.py, so `from conftest import ...` would be ambiguous in one pytest session)."""

from __future__ import annotations

from pathlib import Path

import pytest
from arenaforge.pipeline.sandbox import Job, SandboxConfig, SandboxPool, SuiteJob, self_check

ISOLATED_MODES = ("forkserver", "per_exec")
# The adversarial programs also run as suite jobs (arenaforge.stages.verification.verify.execute's way): see PoolUnderTest.
SUITE = "suite"
UID_BASE = 64100  # away from the default pool's uids, so other sandbox users do not disturb counts


def _problems() -> list[str]:
    return self_check(SandboxConfig(uid_base=UID_BASE))


requires_isolation = pytest.mark.skipif(
    bool(_problems()), reason=f"sandbox isolation unavailable: {_problems()}")


def read_proc(name: str):
    """(pid, text of /proc/<pid>/<name>) for every process still there when read."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                yield int(entry.name), (entry / name).read_text()
            except OSError:
                continue


def processes_of_uids(uids) -> list[tuple[int, str]]:
    """(pid, state) of every host process whose real uid is in ``uids``."""
    found = []
    for pid, status in read_proc("status"):
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) in uids:
            found.append((pid, fields["State"].split()[0]))
    return found


class PoolUnderTest:
    """A pool plus what a clean state looks like for it (servers alive, nothing else)."""

    def __init__(self, mode: str, **overrides):
        self.suite = mode == SUITE
        mode = "forkserver" if self.suite else mode
        offset = 20 if self.suite else 10 * ISOLATED_MODES.index(mode)
        cfg = SandboxConfig(mode=mode, workers=1, uid_base=UID_BASE + offset, **overrides)
        self.pool = SandboxPool.from_config(cfg)
        self.mode = mode
        self.uids = {w.slot.uid for w in self.pool._workers}

    def server_pids(self) -> set[int]:
        return {w._server.proc.pid for w in self.pool._workers if w._server is not None}

    def stray_processes(self) -> list[tuple[int, str]]:
        """Processes of the slot uids beyond the fork servers themselves."""
        procs = processes_of_uids(self.uids)
        # one harness server per slot: the fork server, or per_exec's sandbox for the next job
        return procs if len(procs) > len(self.uids) else []

    def run(self, solution: str, tests: str, **kw):
        """One job; as a suite, the tests twice: both must get the verdict a job gets (the
        first one's leftovers must not change the second), the second is returned."""
        if not self.suite:
            return self.pool.run(Job(solution, tests, **kw))
        first, second = self.pool.run_suites([SuiteJob(solution, (tests, tests), **kw)])[0]
        assert (first.status, first.error_type, first.assertions_passed) == \
            (second.status, second.error_type, second.assertions_passed)
        return second
