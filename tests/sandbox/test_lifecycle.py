"""Process hygiene: a killed supervisor leaves nothing behind; long runs leak nothing."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from arenaforge.pipeline.sandbox import PASSED, Job, SandboxConfig, SandboxPool
from sandbox_support import UID_BASE, processes_of_uids, read_proc, requires_isolation

ROOT = Path(__file__).resolve().parents[2]


def _sandbox_processes(uids) -> list[int]:
    """Host processes of the uids, plus the root bubblewrap processes in their slot cgroups."""
    pids = [pid for pid, _ in processes_of_uids(uids)]
    return pids + [pid for pid, cgroups in read_proc("cgroup")
                   if any(f"/arenaforge/uid-{u}\n" in cgroups for u in uids)]


@requires_isolation
def test_killing_the_supervisor_leaves_no_sandbox_process(tmp_path):
    uid_base = UID_BASE + 50
    started = tmp_path / "started"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from arenaforge.pipeline.sandbox import Job, SandboxConfig, SandboxPool
        pool = SandboxPool.from_config(SandboxConfig(workers=2, uid_base={uid_base}))
        open({str(started)!r}, "w").write("x")
        daemon = ("import os, signal, time\\nif os.fork() == 0:\\n    os.setsid()\\n"
                  "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n    time.sleep(600)\\n"
                  "time.sleep(600)\\n")
        pool.run_many([Job(daemon, "assert True", timeout_s=600)] * 2)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    uids = {uid_base, uid_base + 1}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(processes_of_uids(uids)) < 6:
            time.sleep(0.1)  # 2 servers + 2 x (the job, its daemon)
        assert started.exists()
        assert len(processes_of_uids(uids)) >= 6
    finally:  # also when an assertion above failed: a live supervisor would spoil later runs
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while _sandbox_processes(uids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sandbox_processes(uids) == []


@requires_isolation
def test_supervisors_killed_at_random_moments_leave_no_sandbox_process():
    """SIGKILL while sandboxes start used to leave bubblewrap's pid-1 child waiting for ever on the
    outer bubblewrap that had died (see ``launcher``); ~half the rounds leaked one before."""
    seed = random.randrange(1 << 30)
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("kill_supervisors.py")),
                          str(ROOT), str(UID_BASE + 100), "12", str(seed)],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [], f"seed {seed}"


@requires_isolation
@pytest.mark.parametrize("mode", ["forkserver", "per_exec"])
def test_a_hung_sandbox_is_killed_whole_and_reaped(mode):
    """The supervisor's own deadline: a server that stops answering is killed with everything in
    its sandbox, and every process of it is reaped (no zombie, nothing left of the slot)."""
    cfg = SandboxConfig(mode=mode, workers=1, uid_base=UID_BASE + 110)
    with SandboxPool(cfg, mode) as pool:
        worker = pool._workers[0]
        worker.start()
        uids = {worker.slot.uid}
        (server,) = [pid for pid, _ in processes_of_uids(uids)]
        os.kill(server, signal.SIGSTOP)  # the harness server hangs: no verdict will come
        hung = pool.run(Job("x = 1", "assert x == 1", timeout_s=0.2))
        assert hung.error_name == "SandboxError" and "stopped answering" in hung.error_message
        assert server not in [pid for pid, _ in processes_of_uids(uids)]
        assert _zombie_children() == []
        assert pool.run(Job("x = 1", "assert x == 1")).status == PASSED  # a fresh sandbox
        # the fork server, or per_exec's next sandbox (which may not have dropped root yet)
        assert len(processes_of_uids(uids)) <= 1 and _zombie_children() == []


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _zombie_children() -> list[int]:
    me = str(os.getpid())
    return [pid for pid, stat in read_proc("stat")
            if stat.rsplit(")", 1)[1].split()[:2] == ["Z", me]]


@pytest.mark.slow  # ~15 s on 2 busy cores
@requires_isolation
def test_a_thousand_jobs_leave_no_zombies_and_no_leaked_descriptors():
    cfg = SandboxConfig(workers=2, uid_base=UID_BASE + 60, recycle_after=150)
    # (state, ppid) of every process the job can see in the sandbox's /proc
    inside = ("import os\nprocs = []\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
              "        try:\n            procs.append(open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[:2])\n"
              "        except OSError:\n            pass\n"
              "zombies = [ppid for state, ppid in procs if state == 'Z']\n")
    with SandboxPool.from_config(cfg) as pool:
        pool.run_many([Job("x = 1", "assert x == 1")] * 4)  # warm: servers started
        fds_before = _fds()
        results = pool.run_many([Job(f"x = {i}", f"assert x == {i}") for i in range(1000)])
        assert [r.status for r in results] == [PASSED] * 1000
        # Inside the sandbox: only bwrap's init, the server (pid 2), this job and, where the job
        # is forked by a helper (C1, see inside/spawn.py), perhaps C1, which exits once it forked
        # the job: a zombie until the server next runs. A zombie left by an earlier job would be
        # a second one.
        probe = pool.run_many([Job(inside, "assert zombies in ([], ['2']) and len(procs) <= 4")] * 2)
        assert [r.status for r in probe] == [PASSED, PASSED], probe
        assert len(_fds()) == len(fds_before)  # servers were recycled: same count, new numbers
        assert _zombie_children() == []
        uids = {w.slot.uid for w in pool._workers}
        assert len(processes_of_uids(uids)) == 2  # the two servers and nothing else
    assert processes_of_uids(uids) == []
