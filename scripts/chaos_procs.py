"""The processes of a chaos run (``scripts/chaos.py``): ``arenaforge run`` attempts, killing
all of one, a filesystem that fills up, and a local multi-node Ray cluster that loses a node.

An attempt runs in a session of its own. SIGKILL goes to every process of that session: the
driver, the local Ray it started (GCS, raylet, agents) and Ray's workers, which put
themselves in process groups of their own but stay in the session; sandboxes die with the
worker that started them (``pipeline/sandbox/launcher.py``).
"""

from __future__ import annotations

import collections
import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# progress lines of `arenaforge run` with stdout not a terminal (pipeline/progress.py)
PROGRESS = re.compile(r"^\d\d:\d\d:\d\d (\w+): (start|complete|shard)\b(.*)$")
SHARDS = re.compile(r"in (\d+) shards(?:, (\d+) done before)?")


def session_pids(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def kill_session(sid: int, timeout_s: float = 60.0) -> None:
    """SIGKILL every process of session ``sid`` until none is left (a raylet killed in the
    same sweep as a worker it was starting cannot leave one behind for long)."""
    deadline = time.monotonic() + timeout_s
    while pids := session_pids(sid):
        if time.monotonic() > deadline:
            raise RuntimeError(f"session {sid}: processes {pids} survive SIGKILL")
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


class Attempt:
    """One ``arenaforge run`` in a session of its own; its progress lines say which stage runs.

    Args:
        cmd: the command line.
        env: its environment.
        log: where its output goes.
    """

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.started: list[str] = []  # stages in the order they started
        self.completed: set[str] = set()
        self.shards: dict[str, tuple[int, int]] = {}  # stage: (shards, done before)
        self.tail: collections.deque[str] = collections.deque(maxlen=60)
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                     text=True, errors="replace")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with self.log.open("w") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                line = line.rstrip("\n")
                with self._cond:
                    self.tail.append(line)
                    if m := PROGRESS.match(line):
                        stage, what, rest = m.groups()
                        if what == "start":
                            self.started.append(stage)
                            if s := SHARDS.search(rest):
                                self.shards[stage] = (int(s.group(1)), int(s.group(2) or 0))
                        elif what == "complete":
                            self.completed.add(stage)
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def running(self) -> str | None:
        """The stage started last, unless it completed already."""
        with self._cond:
            last = self.started[-1] if self.started else None
            return last if last not in self.completed else None

    def wait_for_start(self, stages: list[str], timeout_s: float) -> str | None:
        """Block until one of ``stages`` starts (it is returned), the run ends or time is up
        (None)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                hit = next((s for s in self.started if s in stages), None)
                if hit or self.proc.poll() is not None or time.monotonic() > deadline:
                    return hit
                self._cond.wait(0.2)

    def wait_for_complete(self, stage: str, timeout_s: float) -> bool:
        """Block until ``stage`` completes (True) or the run ends or time is up (False)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while stage not in self.completed:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    return False
                self._cond.wait(0.2)
            return True

    def wait(self, timeout_s: float | None = None) -> int | None:
        """The exit code, or None while it still runs after ``timeout_s``."""
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(timeout=30)
        return rc

    def kill(self) -> bool:
        """SIGKILL the whole run (its session); True when it was still running."""
        alive = self.proc.poll() is None
        kill_session(self.proc.pid)
        self.wait()
        return alive

    def output(self, lines: int = 25) -> str:
        """The last lines of its output."""
        with self._cond:
            return "\n".join(list(self.tail)[-lines:])


class SmallDisk:
    """A tmpfs of ``size_mb`` mounted at ``path`` (root only), which :meth:`fill` fills up.

    Raises:
        OSError: the filesystem cannot be mounted here (not root, no mount namespace).
    """

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "chaos-tmpfs",
                               str(path)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise OSError(f"cannot mount a tmpfs at {path}: {done.stderr.strip()}")
        self.filler = path / "filler.bin"

    def fill(self) -> int:
        """Write zeros until the filesystem is full; returns the bytes written."""
        written = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for size in (1 << 20, 1 << 12, 1):  # then the last partial blocks
                block = b"\0" * size
                try:
                    while True:
                        written += os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
        finally:
            os.close(fd)
        return written

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", str(self.path)], capture_output=True, check=True)


class LocalCluster:
    """A Ray cluster of a head and one worker node on this machine (``ray start --block``,
    each in a session of its own), for losing a node mid-stage.

    Args:
        temp_dir: Ray's temp dir (short: it holds unix sockets).
        env: the environment of the nodes.
        cpus: CPUs of each node.
    """

    RAY = (sys.executable, "-m", "ray.scripts.scripts")

    def __init__(self, temp_dir: Path, env: dict[str, str], cpus: int = 1) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.address, self.env, self.cpus = f"127.0.0.1:{port}", env, cpus
        self.temp_dir = temp_dir
        self.head = self._start(["--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                                 f"--num-cpus={cpus}", "--include-dashboard=false",
                                 f"--temp-dir={temp_dir}"])
        self._wait_nodes(1)
        self.worker = self.start_worker()

    def _start(self, args: list[str]) -> subprocess.Popen:
        return subprocess.Popen([*self.RAY, "start", "--block", *args], env=self.env,
                                start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

    def _alive(self) -> int:
        probe = subprocess.run([*self.RAY, "status", f"--address={self.address}"],
                               env=self.env, capture_output=True, text=True, check=False)
        return sum(1 for line in probe.stdout.splitlines()
                   if line.strip().startswith("1 node_"))

    def _wait_nodes(self, n: int, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self._alive() < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"ray cluster at {self.address}: {n} nodes not up")
            time.sleep(2)

    def start_worker(self) -> subprocess.Popen:
        """A worker node joins (and is waited for)."""
        worker = self._start([f"--address={self.address}", "--node-ip-address=127.0.0.1",
                              f"--num-cpus={self.cpus}"])
        self._wait_nodes(2)
        return worker

    def kill_worker(self) -> None:
        """The worker node dies: its raylet and every worker process on it, at once."""
        kill_session(self.worker.pid)
        self.worker.wait()

    def stop(self) -> None:
        for node in (self.worker, self.head):
            if node is not None and node.poll() is None:
                kill_session(node.pid)
                node.wait()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
