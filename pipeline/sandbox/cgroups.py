"""Per-slot cgroup v1 ``memory`` and ``pids`` controllers (used when writable, e.g. as root).

``RLIMIT_AS`` is per process (six 800 MB processes used 3.4 GiB); only a cgroup caps the whole
tree of a job. cgroup v2 hosts fall back to rlimits; every result records which limits were on.
"""

from __future__ import annotations

import os
from pathlib import Path

V1_ROOT = Path("/sys/fs/cgroup")
GROUP = "arenaforge"


def unavailable_reason(root: Path = V1_ROOT) -> str | None:
    """None when per-slot v1 memory and pids cgroups can be created here, else why not."""
    for ctrl in ("memory", "pids"):
        base = root / ctrl
        if not (base / "cgroup.procs").exists():
            return f"cgroup v1 {ctrl} controller not mounted at {base}"
        if not os.access(base, os.W_OK):
            return f"cgroup v1 {ctrl} controller at {base} is not writable (needs root)"
    return None


class SlotCgroup:
    """The memory and pids cgroups of one worker slot; every sandbox of the slot runs in them."""

    def __init__(self, name: str, root: Path = V1_ROOT):
        self.memory = root / "memory" / GROUP / name
        self.pids = root / "pids" / GROUP / name
        for path in (self.memory, self.pids):
            path.mkdir(parents=True, exist_ok=True)
        self._memsw = (self.memory / "memory.memsw.limit_in_bytes").exists()
        self._limit = -1
        # Read twice per job: an open descriptor re-read at offset 0 costs a quarter of an open.
        self._oom_fd = os.open(self.memory / "memory.oom_control", os.O_RDONLY | os.O_CLOEXEC)

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a new sandbox writes its pid to before it execs."""
        return [str(self.memory / "cgroup.procs"), str(self.pids / "cgroup.procs")]

    def set_pids_max(self, n: int) -> None:
        (self.pids / "pids.max").write_text(str(n))

    def set_memory_limit(self, limit: int) -> None:
        """Cap memory (and memory+swap, when accounted) of the slot at ``limit`` bytes."""
        if limit == self._limit:
            return
        mem = self.memory / "memory.limit_in_bytes"
        files = [mem]
        if self._memsw:
            # memsw must stay >= memory: raise it first, lower it last.
            memsw = self.memory / "memory.memsw.limit_in_bytes"
            current = int(mem.read_text())
            files = [memsw, mem] if limit > current else [mem, memsw]
        for path in files:
            path.write_text(str(limit))
        self._limit = limit

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer has killed in this cgroup so far."""
        for line in os.pread(self._oom_fd, 4096, 0).decode().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return int((self.memory / "memory.failcnt").read_text())  # kernels before 4.13

    def pids_in_use(self) -> list[int]:
        return [int(p) for p in (self.pids / "cgroup.procs").read_text().split()]

    def remove(self) -> None:
        """Delete the cgroups (only possible once empty; a busy one is left for the next pool)."""
        if self._oom_fd >= 0:
            os.close(self._oom_fd)
            self._oom_fd = -1
        for path in (self.memory, self.pids):
            try:
                path.rmdir()
            except OSError:
                pass
