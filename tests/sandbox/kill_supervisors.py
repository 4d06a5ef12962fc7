"""Start supervisors, SIGKILL each at a random moment, print what they left behind (JSON list).

Run as a script by tests/sandbox/test_lifecycle.py:
``python kill_supervisors.py ROOT UID_BASE ROUNDS SEED``.

This process is a child subreaper: a descendant that loses its parent is re-parented here, not to
the host's init, so "children of this process that are not a supervisor" are exactly the
processes the killed supervisors leaked, whatever else runs on the machine. Each supervisor runs
a pool that keeps starting sandboxes (per_exec, or a fork server recycled every two jobs), so a
random kill lands in a pool's start-up, a sandbox's start-up or a running job.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
SUPERVISOR = """
import os, sys
sys.path.insert(0, {root!r})
from arenaforge.pipeline.sandbox import Job, SandboxConfig, SandboxPool, launcher
launcher.compile_harness()
jobs = [Job("import time\\ntime.sleep(0.02)", "assert True")] * 4
os.write(1, b"r")
pool = SandboxPool(SandboxConfig(workers=2, uid_base={uid_base}, recycle_after={recycle}), {mode!r})
while True:
    pool.run_many(jobs)
"""


def _children() -> list[int]:
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == me:
                found.append(int(name))
    return found


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def main(root: str, uid_base: int, rounds: int, seed: int) -> list[dict]:
    if ctypes.CDLL(None).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_CHILD_SUBREAPER) failed")
    rng = random.Random(seed)
    for i in range(rounds):
        mode, recycle = (("per_exec", 1), ("forkserver", 2))[i % 2]
        code = SUPERVISOR.format(root=root, uid_base=uid_base, recycle=recycle, mode=mode)
        sup = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        if sup.stdout.read(1) != b"r":
            raise RuntimeError("a supervisor did not start")
        time.sleep(rng.uniform(0.0, 0.3))  # the pool starts within ~0.1 s, then sandboxes keep starting
        sup.kill()
        sup.wait()
        sup.stdout.close()
    deadline = time.monotonic() + 5  # the grace a dying sandbox gets
    while _children() and time.monotonic() < deadline:
        _reap()
        time.sleep(0.05)
    left = []
    for pid in _children():
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                cmd = f.read().split("\0")[:2]
            with open(f"/proc/{pid}/wchan") as f:
                wchan = f.read()
        except OSError:
            continue
        left.append({"pid": pid, "cmd": cmd, "wchan": wchan})
        os.kill(pid, signal.SIGKILL)  # leave the machine clean even when the test fails
    deadline = time.monotonic() + 2
    while _children() and time.monotonic() < deadline:
        _reap()
        time.sleep(0.02)
    return left


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))
