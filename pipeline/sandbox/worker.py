"""One worker slot: starts sandboxes (harness servers), feeds them jobs, recycles them.

Not thread-safe; a pool gives each worker its own long-lived thread. That thread must also be the
one that starts the sandbox: ``--die-with-parent`` (PR_SET_PDEATHSIG) fires when the *thread*
that forked bubblewrap exits, not the process.
"""

from __future__ import annotations

import marshal
import os
import select
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from arenaforge.pipeline.sandbox import launcher
from arenaforge.pipeline.sandbox.cgroups import SlotCgroup
from arenaforge.pipeline.sandbox.config import SandboxConfig
from arenaforge.pipeline.sandbox.inside.wire import decode_verdict
from arenaforge.pipeline.sandbox.prepare import PreparedTests
from arenaforge.pipeline.sandbox.result import (
    MODE_DEGRADED,
    MODE_PER_EXEC,
    TIMEOUT,
    ExecResult,
    Job,
    SuiteJob,
)
from arenaforge.pipeline.sandbox.verdict import sandbox_error, suite_results, to_result

_GRACE_S = 3.0  # beyond the job's own deadline, before the supervisor declares the sandbox hung
_SERVER_MEMORY_MB = 96  # the harness server and its preloaded modules share the slot's cgroup


class SandboxStartError(RuntimeError):
    """The sandbox could not be started; the message carries bubblewrap's / the harness's stderr."""


def _read_frame(fd: int, deadline: float) -> dict | None:
    buf = b""
    need = 4
    header_done = False
    while len(buf) < need:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        part = os.read(fd, need - len(buf))
        if not part:
            return None
        buf += part
        if not header_done and len(buf) == 4:
            need, buf, header_done = struct.unpack(">I", buf)[0], b"", True
    return decode_verdict(buf)


@dataclass
class _Server:
    proc: subprocess.Popen
    ctl_w: int
    verdict_r: int
    stderr: Any  # a temporary file: bubblewrap's and the harness's own errors
    jobs: int = 0
    ready: bool = False


class SandboxWorker:
    """Runs jobs one at a time in sandboxes of one slot (uid, cgroups)."""

    def __init__(self, cfg: SandboxConfig, mode: str, slot: launcher.Slot,
                 cgroup: SlotCgroup | None, seccomp_hex: str):
        self.cfg, self.mode, self.slot, self.cgroup = cfg, mode, slot, cgroup
        self._seccomp_hex = seccomp_hex
        self._server: _Server | None = None
        # per_exec: the sandbox for the next job starts while the current job runs
        self._spare: _Server | None = None
        self._workdir = tempfile.mkdtemp(prefix="arenaforge-sbx-") if mode == MODE_DEGRADED else None
        self.binds: tuple[str, ...] = ()  # toolchain dirs bound in this slot's sandboxes
        layers = ["rlimit_as", "rlimit_cpu", "rlimit_nproc", "rlimit_fsize", "rlimit_nofile"]
        if seccomp_hex:
            layers.append("seccomp")
        if mode != MODE_DEGRADED:
            layers += [f"uid:{slot.uid}", "bwrap", "job_namespaces"]
        if cgroup is not None:
            layers += ["cgroup_memory", "cgroup_pids"]
            # + two sandboxes' own processes (unshare, bwrap x2, server; bwrap's setup helper)
            cgroup.set_pids_max(cfg.max_procs + 20)
        self.limits = tuple(layers)

    # -- server lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Have a ready sandbox (the pool calls this first, to fail fast)."""
        if self._server is not None and self._server.proc.poll() is not None:
            self._close(self._server)  # died while idle (recycled by the harness, OOM...)
        if self._server is None:
            self._server, self._spare = self._spare or self._launch(), None
        if not self._server.ready:
            try:
                self._await_ready(self._server)
            except SandboxStartError:
                if self.mode != MODE_PER_EXEC:
                    raise
                self._server = self._launch()  # a pre-started spare may have failed: retry once
                self._await_ready(self._server)

    def _launch(self) -> _Server:
        """Start a sandbox without waiting for it (``_await_ready`` does)."""
        ctl_r, ctl_w = os.pipe()
        verdict_r, verdict_w = os.pipe()
        max_jobs = 1 if self.mode == MODE_PER_EXEC else self.cfg.recycle_after
        isolated = self.mode != MODE_DEGRADED
        hcfg = launcher.harness_config(
            isolated=isolated, verdict_fd=verdict_w, max_jobs=max_jobs, cfg=self.cfg,
            seccomp_hex=self._seccomp_hex,
            work_dir=launcher.WORK_DIR if isolated else self._workdir,
            preload=launcher.PRELOAD if max_jobs > 1 else (),
            uid=self.slot.uid if isolated and os.geteuid() == 0 else None)
        if isolated:
            procs = self.cgroup.procs_files if self.cgroup else ()
            argv = launcher.sandbox_command(hcfg, self.cfg, procs, self.binds)
        else:
            argv = launcher.degraded_command(hcfg)
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed with the server
        try:
            proc = subprocess.Popen(argv, stdin=ctl_r, stdout=subprocess.DEVNULL,
                                    stderr=stderr, pass_fds=(verdict_w,),
                                    env={"PATH": "/usr/bin:/bin"}, start_new_session=True)
        finally:
            for fd in (ctl_r, verdict_w):
                os.close(fd)
        return _Server(proc, ctl_w, verdict_r, stderr)

    def _await_ready(self, server: _Server) -> None:
        ready = _read_frame(server.verdict_r, time.monotonic() + self.cfg.start_timeout_s)
        if not ready or not ready.get("ready"):
            server.stderr.seek(0)
            err = server.stderr.read().decode("utf-8", "replace").strip()[-2000:]
            self._kill(server)
            raise SandboxStartError(
                f"sandbox did not start (exit {server.proc.returncode}): {err}")
        server.ready = True

    def _kill(self, server: _Server) -> None:
        """Kill a sandbox whole, and reap every process of it here.

        Isolated modes: SIGKILL to bubblewrap's outer process, pid 1 of the namespace ``unshare``
        made (see ``launcher``), takes the whole sandbox down; ``unshare`` reaps it and exits,
        and we reap ``unshare``. Killing ``unshare`` first would orphan the rest to the host's
        init, which may reap late (zombies).
        """
        if server.proc.poll() is None:
            if self.mode != MODE_DEGRADED:
                _kill_children(server.proc.pid)
                try:
                    server.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(server.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        self._close(server)

    def _close(self, server: _Server) -> None:
        for fd in (server.ctl_w, server.verdict_r):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            server.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
        if not server.stderr.closed:
            server.stderr.close()
        if self._server is server:
            self._server = None

    def close(self) -> None:
        """Stop the sandboxes, if any (the harness exits when its stdin closes)."""
        for server in (self._server, self._spare):
            if server is not None:
                self._close(server)
        self._spare = None
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)

    def use_binds(self, binds: tuple[str, ...]) -> None:
        """Bind ``binds`` (read-only) in this slot's sandboxes from now on; a sandbox started
        without them is replaced (program jobs: toolchains outside ``/usr``)."""
        if binds == self.binds:
            return
        self.binds = binds
        for server in (self._server, self._spare):
            if server is not None:
                self._close(server)
        self._server = self._spare = None

    # -- jobs ---------------------------------------------------------------------------------

    def run_frame(self, frame: dict, memory_mb: int, wait_s: float, server_mb: int
                  ) -> tuple[dict | None, bool, ExecResult | None]:
        """Send a program job's frame (``languages.frames``); ``(verdict, the memory cgroup
        killed, failure)`` as for any job (``_exchange``). The slot's memory cgroup is set to
        ``memory_mb + server_mb`` (the server and the job's driver, over the job's own)."""
        return self._exchange(frame, frame["timeout_s"], memory_mb, wait_s, server_mb)

    def run(self, job: Job, tests: PreparedTests) -> ExecResult:
        """Run one job in a sandbox of this slot and return its verdict."""
        timeout_s, memory_mb = self._limits(job)
        frame = {"solution": job.solution, "lines": list(tests.lines),
                 "chunks": [(c.kind, c.code) for c in tests.chunks]}
        verdict, oom, failure = self._exchange(frame, timeout_s, memory_mb, timeout_s)
        if verdict is None:
            return failure
        return to_result(verdict, timeout_s=timeout_s, oom_killed=oom,
                         tests_total=tests.tests_total, isolation=self.mode, limits=self.limits)

    def run_suite(self, job: SuiteJob, tests: list[PreparedTests]) -> list[ExecResult | None]:
        """Run a suite job: one verdict per test (``None``: skipped by ``fail_fast``).

        A suite during which the memory cgroup killed a process is run again test by test, so
        that the ``memory`` verdict lands on the test that caused it, as separate jobs would.
        """
        timeout_s, memory_mb = self._limits(job)
        frame = {"solution": job.solution, "fail_fast": job.fail_fast,
                 "suites": [{"lines": list(t.lines), "chunks": [(c.kind, c.code) for c in t.chunks]}
                            for t in tests]}
        backstop = (len(tests) + 1) * (timeout_s + 0.5)
        verdict, oom, failure = self._exchange(frame, timeout_s, memory_mb, backstop)
        if verdict is None:
            return [failure] * len(tests)
        if oom:
            results: list[ExecResult | None] = []
            for k, (source, prepared) in enumerate(zip(job.tests, tests)):
                first_timed_out = k > 0 and results[0] is not None and \
                    results[0].status == TIMEOUT
                results.append(None if job.fail_fast and first_timed_out else self.run(
                    Job(job.solution, source, job.timeout_s, job.memory_mb), prepared))
            return results
        return suite_results(verdict, timeout_s=timeout_s, tests_total=[t.tests_total for t in tests],
                             isolation=self.mode, limits=self.limits)

    def _limits(self, job: Job | SuiteJob) -> tuple[float, int]:
        return (job.timeout_s if job.timeout_s is not None else self.cfg.timeout_s,
                job.memory_mb if job.memory_mb is not None else self.cfg.memory_mb)

    def _exchange(self, frame: dict, timeout_s: float, memory_mb: int, wait_s: float,
                  server_mb: int = _SERVER_MEMORY_MB
                  ) -> tuple[dict | None, bool, ExecResult | None]:
        """Send one job to the sandbox and read its verdict within ``wait_s`` (+ grace).

        Returns ``(verdict, the memory cgroup killed a process, failure)``: ``verdict`` is
        None when the sandbox stopped answering (it is killed then) and ``failure`` says so.
        """
        start = time.monotonic()
        if self.cgroup is not None:
            self.cgroup.set_memory_limit((memory_mb + server_mb) << 20)
        oom_before = self.cgroup.oom_kills() if self.cgroup else 0
        self.start()
        server = self._server
        data = marshal.dumps(dict(frame, timeout_s=float(timeout_s), memory_mb=int(memory_mb)))
        try:
            os.write(server.ctl_w, struct.pack(">I", len(data)))
            _write_all(server.ctl_w, data)
            if self.mode == MODE_PER_EXEC and self._spare is None:
                self._spare = self._launch()
            verdict = _read_frame(server.verdict_r, time.monotonic() + wait_s + _GRACE_S)
        except OSError:
            verdict = None
        oom = bool(self.cgroup and self.cgroup.oom_kills() > oom_before)
        if verdict is None:
            self._kill(server)
            status = TIMEOUT if time.monotonic() - start >= timeout_s else "error"
            return None, oom, sandbox_error(
                "the sandbox stopped answering (server killed and restarted)",
                isolation=self.mode, limits=self.limits, status="memory" if oom else status,
                duration_s=time.monotonic() - start)
        server.jobs += 1
        max_jobs = 1 if self.mode == MODE_PER_EXEC else self.cfg.recycle_after
        if server.jobs >= max_jobs or not verdict.get("clean", False):
            self._close(server)
        if self._workdir:
            _empty_dir(self._workdir)
        return verdict, oom, None


def _kill_children(pid: int) -> None:
    """SIGKILL the children of ``pid`` (our own child, not yet reaped), without pid reuse races.

    A pidfd opened while the pid is still listed as a child of ``pid`` names that very process:
    only ``pid`` can reap it, so its number cannot have been reused.
    """
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return
    for child in children:
        try:
            pidfd = os.pidfd_open(child)
        except OSError:
            continue
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                if str(child) in f.read().split():
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(pidfd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _empty_dir(path: str) -> None:
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)
