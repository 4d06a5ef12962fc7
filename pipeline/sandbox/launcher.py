"""Command lines that start the harness inside bubblewrap, and the worker slots (uids) they use.

As root, bubblewrap runs privileged (no user namespace of its own; it can read the interpreter
under /root) and the harness drops to the slot's uid (setresuid) before anything else, so
``RLIMIT_NPROC`` counts a real non-root uid. As a non-root user bubblewrap makes an unprivileged
user namespace and the harness keeps that user's uid.
"""

from __future__ import annotations

import compileall
import fcntl
import marshal
import os
import shutil
import site
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HARNESS_HOST_DIR = Path(__file__).with_name("inside")
HARNESS_DIR = "/opt/arenaforge"
HARNESS_ENTRY = "run.py"
# The job's tmpfs: a path no host directory that is bound in (the interpreter, a virtual
# environment, toolchains) is likely to lie under; ``sandbox_command`` refuses one that does.
WORK_DIR = "/job"
ENV_DIR = "/opt/arenaforge-env"  # a virtual environment /tmp would hide is bound here
SLOT_LIMIT = 1024
# Modules a fork-server imports once so that jobs importing them start fast.
PRELOAD = ("re", "math", "collections", "itertools", "functools", "heapq", "bisect", "string",
           "typing", "unittest", "operator", "random", "json")
# Every sandbox starts as: setpriv (PR_SET_PDEATHSIG) -> sh (parent check, cgroups) -> unshare
# (a pid namespace of its own) -> bubblewrap. Why each step, and why bubblewrap's own
# ``--die-with-parent`` is not enough:
#
# bubblewrap's outer process clones its child into the sandbox's pid namespace and only then sets
# PR_SET_PDEATHSIG; the child blocks on an eventfd until the outer process has written the uid
# maps and released it. A supervisor killed while a sandbox starts (during a pool start, or
# per_exec's next sandbox) kills or orphans the outer process before that write (PDEATHSIG, or
# EPIPE on a descriptor of the dead supervisor), and the child, pid 1 of a namespace nobody else
# knows, sleeps on the eventfd for ever: the idle "bwrap" with ppid 1 and no children found after
# SIGKILL-heavy runs (reproduced by a test in tests/sandbox/test_lifecycle.py).
#
# * ``unshare --pid --fork --kill-child``: bubblewrap's outer process is pid 1 of a pid namespace
#   that contains the whole sandbox, nested namespaces included; when it dies, for whatever
#   reason and at whatever step, the kernel kills every process in it. ``--mount-proc`` gives it
#   a /proc of that namespace (bubblewrap reads /proc/<child>/ns with the pid clone returned).
#   ``unshare`` itself stays as its parent and takes it down with PDEATHSIG when it dies.
# * ``setpriv --pdeathsig KILL``: ``unshare`` dies with the supervisor's thread that started it.
# * ``sh`` checks ``$PPID`` after setpriv set the signal: a supervisor that died before that
#   (between fork and prctl, where PDEATHSIG cannot fire any more) leaves a process whose parent
#   is no longer the supervisor, which exits at once. It also writes its pid into the slot's
#   cgroups before it execs, so every process of the sandbox is born inside them (Popen has no
#   race-free way to do either without preexec_fn, which is unsafe in threaded processes).
_START_SH = ('[ "$PPID" = "$1" ] || exit 96; n=$2; shift 2; while [ "$n" -gt 0 ]; do '
             'echo $$ > "$1" || exit 97; shift; n=$((n-1)); done; exec "$@"')


class Slot:
    """An exclusive worker slot: one uid, held by a lock file for the life of a pool."""

    def __init__(self, uid: int, lock_fd: int):
        self.uid = uid
        self._lock_fd = lock_fd

    def release(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = -1


def _lock_dir() -> Path:
    base = Path("/run") if os.access("/run", os.W_OK) else Path(tempfile.gettempdir())
    path = base / "arenaforge-sandbox"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def acquire_slots(n: int, uid_base: int) -> list[Slot]:
    """Lock ``n`` free uids ``uid_base + i``, shared safely between processes (Ray workers).

    Not root: every slot is the current uid (one user cannot switch to another).
    """
    if os.geteuid() != 0:
        return [Slot(os.geteuid(), -1) for _ in range(n)]
    slots: list[Slot] = []
    lock_dir = _lock_dir()
    for i in range(SLOT_LIMIT):
        if len(slots) == n:
            return slots
        fd = os.open(lock_dir / f"uid-{uid_base + i}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        slots.append(Slot(uid_base + i, fd))
    for slot in slots:
        slot.release()
    raise RuntimeError(f"no free sandbox slot among {SLOT_LIMIT} uids from {uid_base}")


def _under(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or lies inside it."""
    return path == folder or path.startswith(folder + "/")


def _hidden(path: str) -> bool:
    """Whether the sandbox's own mounts (the job's tmpfs, /tmp, the harness) would hide
    ``path``: the fork server mounts a fresh /tmp and work dir for every job."""
    return any(_under(path, d) for d in (WORK_DIR, "/tmp", HARNESS_DIR))


def _python_binds() -> list[tuple[str, str]]:
    """(host, inside) directories the interpreter needs, outside /usr, deduplicated by
    containment. The interpreter's own (its base prefix, its executable's directory) keep their
    paths; a virtual environment that the sandbox's /tmp would hide (a checkout under /tmp, as
    a CI clone may be) is bound at ``ENV_DIR`` instead: jobs need only its site-packages, which
    the harness is given at that path (``harness_config``)."""
    interpreter = {os.path.realpath(p) for p in
                   (sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)))}
    env = os.path.realpath(sys.prefix)
    wanted = sorted(p for p in interpreter | {env} if not _under(p, "/usr"))
    dirs = [d for d in wanted if not any(d != o and _under(d, o) for o in wanted)]
    return [(d, ENV_DIR if d == env and d not in interpreter and _hidden(d) else d)
            for d in dirs]


def _inside(path: str) -> str:
    """Where the host ``path`` lies inside the sandbox (see ``_python_binds``)."""
    for host, inside in _python_binds():
        if _under(path, host):
            return inside + path[len(host):]
    return path


def _mkdirs(path: str) -> list[str]:
    """bwrap creates missing parents 0700 when run as root: create them 0755 first."""
    args: list[str] = []
    parts = Path(path).parts[1:-1]
    for i in range(1, len(parts) + 1):
        args += ["--perms", "0755", "--dir", "/" + "/".join(parts[:i])]
    return args


def _root_layout() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    return args


def harness_config(*, isolated: bool, verdict_fd: int, max_jobs: int, cfg, seccomp_hex: str,
                   work_dir: str, preload: Sequence[str], uid: int | None) -> str:
    """The argv the harness decodes: marshal (cheap to load, no json import), hex-encoded."""
    paths = site.getsitepackages() if cfg.site_packages else []
    if isolated:
        paths = [_inside(p) for p in paths]
    return marshal.dumps({"uid": uid,
        "isolated": isolated, "verdict_fd": verdict_fd, "max_jobs": max_jobs,
        "output_limit": cfg.output_limit_bytes, "tail_bytes": cfg.tail_bytes,
        "work_bytes": cfg.work_dir_mb << 20, "max_procs": cfg.max_procs,
        "max_files": cfg.max_open_files, "seccomp_hex": seccomp_hex, "sys_path": paths,
        "preload": list(preload), "work_dir": work_dir,
        "env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": work_dir, "LANG": "C.UTF-8",
                "TMPDIR": "/tmp"},
    }).hex()


def sandbox_command(harness_cfg: str, cfg, cgroup_procs: Sequence[str] = (),
                    binds: Sequence[str] = ()) -> list[str]:
    """argv for one sandbox: setpriv, sh, unshare, bwrap ..., python harness (drops to ``uid``).

    The process started with it must be a child of this process (its ``$PPID`` is checked
    against ``os.getpid()``), started by a thread that outlives the sandbox (PDEATHSIG follows
    the thread that forked). ``binds``: more host directories to bind read-only at the same
    path (toolchains outside ``/usr``, see ``languages.installed``).
    """
    bwrap = shutil.which("bwrap") or "bwrap"
    python = os.path.realpath(sys.executable)
    work_bytes = str(cfg.work_dir_mb << 20)
    privileged = os.geteuid() == 0
    args = [bwrap]
    if privileged:
        # The harness needs CAP_SETUID/SETGID once, to drop to the slot's uid; they vanish then.
        args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                 "--unshare-cgroup-try", "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
                 "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-all", "--unshare-user"]
    args += ["--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox",
             *_root_layout()]
    for host, inside in (*_python_binds(), *((b, b) for b in binds)):
        if _hidden(inside):
            raise RuntimeError(f"sandbox: {host} must be bound in, but the sandbox's own "
                               f"{WORK_DIR}, /tmp or {HARNESS_DIR} would hide it; install it "
                               "elsewhere")
        args += [*_mkdirs(inside), "--ro-bind", host, inside]
    args += [*_mkdirs(HARNESS_DIR), "--ro-bind", str(HARNESS_HOST_DIR), HARNESS_DIR,
             "--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", work_bytes, "--tmpfs", "/tmp",
             "--perms", "1777", "--size", work_bytes, "--tmpfs", WORK_DIR, "--chdir", WORK_DIR]
    args += [python, "-I", "-S", f"{HARNESS_DIR}/{HARNESS_ENTRY}", harness_cfg]
    # Without root, a pid namespace needs a user namespace of its own (mapped to the same uid).
    userns = [] if privileged else ["--user", "--map-current-user"]
    unshare = [shutil.which("unshare") or "unshare", *userns, "--pid", "--fork",
               "--kill-child=KILL", "--mount-proc"]
    return [shutil.which("setpriv") or "setpriv", "--pdeathsig", "KILL", "--", "/bin/sh", "-c",
            _START_SH, "sh", str(os.getpid()), str(len(cgroup_procs)), *cgroup_procs,
            *unshare, *args]


def degraded_command(harness_cfg: str) -> list[str]:
    """argv of the harness without namespaces or uid drop (mode ``degraded`` only)."""
    return [sys.executable, "-I", "-S", str(HARNESS_HOST_DIR / HARNESS_ENTRY), harness_cfg]


def compile_harness() -> None:
    """Byte-compile the harness modules on the host: the sandbox's read-only bind cannot."""
    compileall.compile_dir(HARNESS_HOST_DIR, quiet=1)
