"""The job side of the harness: C1 (namespaces) and C2 (limits, then the untrusted code).

Per job (isolated mode) the server forks C1, which unshares a fresh user, pid, mount, ipc and uts
namespace, mounts size-limited tmpfs on /work and /tmp, forks C2 = pid 1 of the new pid
namespace, hands C2's pid to the server and exits (C2 is re-parented to the server). C2 drops every capability (it keeps the sandbox's /proc: bubblewrap's read-only
sub-mounts make a fresh proc mount impossible, and the server is non-dumpable), sets rlimits,
``no_new_privs`` and the seccomp filter, then runs the solution and the tests. When C2 ends the
kernel kills everything in its namespace (setsid daemons included) and its files vanish with its
mount namespace; the job cannot see or signal the fork server.
"""

import binascii
import builtins
import ctypes
import gc
import marshal
import operator
import os
import resource
import struct
import sys
import types

from wire import field

libc = ctypes.CDLL(None, use_errno=True)
_CLONE_FLAGS = 0x00020000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000  # NS UTS IPC USER PID
PR_SET_DUMPABLE, _PR_SET_SECCOMP = 4, 22
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 36, 38
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
_PLAIN_SCALARS = frozenset([bool, int, float, complex, str, bytes, type(None)])
_PLAIN_CONTAINERS = frozenset([list, tuple, set, frozenset, dict])
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: the type was created by a class statement
# Captured before any untrusted code runs: a solution may rebind the names, not these objects.
_AssertionError, _BaseException, _SystemExit, _MemoryError = (
    AssertionError, BaseException, SystemExit, MemoryError)
_write, _exit, _type = os.write, os._exit, type
SIGKILL = 9


def check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


class _Job:
    """State of the running job, reached by the helpers the rewritten asserts call."""

    ev_fd = -1
    nonce = ""  # events without it are ignored: a bare write to the channel cannot forge a pass
    ok_line = b""  # the event of a passed assertion, built once per job
    reason = ""


def _emit(kind, *fields):
    """One event line: nonce, kind, base64 fields (no json, see the module docstring)."""
    _write(_Job.ev_fd, b"\t".join([_Job.nonce, kind] + [field(f) for f in fields]) + b"\n")


def _is_numpy_value(value, t):
    """numpy scalars and non-object arrays: their types are static C types (no Python class can
    be one, and their ``__module__`` cannot be reassigned) and they hold raw numbers, not objects
    with their own ``__eq__``."""
    if t.__flags__ & _HEAPTYPE or t.__module__ != "numpy":
        return False
    dtype = getattr(value, "dtype", None)
    return dtype is not None and dtype.kind != "O"


def _is_plain(value):
    """True when the value is built only from exact builtin types (no subclasses, no user types;
    numpy scalars and non-object arrays count as builtin)."""
    if _type(value) in _PLAIN_SCALARS:  # the common case, without the walk below
        return True
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        t = _type(v)
        if t in _PLAIN_SCALARS or _is_numpy_value(v, t):
            continue
        if t not in _PLAIN_CONTAINERS:
            _Job.reason = f"non-builtin value of type {t.__module__}.{t.__qualname__}"
            return False
        if id(v) in seen:  # self-referencing containers
            continue
        seen.add(id(v))
        if t is dict:
            stack.extend(dict.keys(v))
            stack.extend(dict.values(v))
        else:
            stack.extend(v)
    return True


def _af_plain(value):
    if not _is_plain(value):
        raise _AssertionError(_Job.reason)
    return value


_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
            ">": operator.gt, ">=": operator.ge, "in": lambda a, b: a in b,
            "not in": lambda a, b: a not in b, "is": operator.is_, "is not": operator.is_not}


def _af_cmp(ops, *operands):
    """``a OP b [OP c]`` with the semantics of a chained comparison, on builtin operands only."""
    result = True
    for i, op in enumerate(ops):
        left, right = operands[i], operands[i + 1]
        if op not in ("is", "is not") and not (_is_plain(left) and _is_plain(right)):
            raise _AssertionError("comparison refused: " + _Job.reason)
        result = _COMPARE[op](left, right)
        if not _is_plain(result):
            raise _AssertionError("comparison returned " + _Job.reason)
        if i + 1 < len(ops) and not result:
            return result
    return result


def _af_assert(value):
    if value:
        _write(_Job.ev_fd, _Job.ok_line)  # what _emit(b"ok") writes
    return value


def _frames(tb, sources):
    """The traceback lines that point into the solution or the tests, innermost last."""
    out = []
    while tb is not None:
        code = tb.tb_frame.f_code
        lines = sources.get(code.co_filename)
        if lines is not None:
            n = tb.tb_lineno
            text = lines[n - 1].strip() if 0 < n <= len(lines) else ""
            out.append(f"{code.co_filename} line {n}, in {code.co_name}: {text}")
        tb = tb.tb_next
    return out


def _report(exc, phase, sources):
    name = _type(exc).__name__
    if phase == "compile":
        kind = "syntax"
    elif isinstance(exc, _SystemExit):
        kind = "exit"
    elif isinstance(exc, _AssertionError):
        kind = "assertion"
    elif isinstance(exc, _MemoryError):
        kind = "memory"
    else:
        kind = "runtime"
    frames = _frames(exc.__traceback__, sources)[-3:]
    try:
        text = str(exc)
    except _BaseException:
        text = "<unprintable>"
    msg = "\n".join([*frames, f"{name}: {text[:500]}"])
    _emit(b"exc", phase, kind, name, msg[:2000])


def run_job(job, cfg):
    """Run solution then tests in this process (C2). Never returns."""
    sources = {"<solution>": job["solution"].splitlines(), "<tests>": job["lines"]}
    try:
        solution = compile(job["solution"], "<solution>", "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        _report(exc, "compile", sources)
        _exit(0)
    chunks = [(kind, marshal.loads(code)) for kind, code in job["chunks"]]
    snapshots = _Pre.snapshots
    if "unittest" not in sys.modules and any("unittest" in line for line in job["lines"]):
        import unittest  # noqa: F401 - imported before the solution so its TestCase is restorable
    if "unittest" in sys.modules and len(snapshots) == 1:
        snapshots = [*snapshots, _snapshot(sys.modules["unittest"].TestCase)]
    # The solution runs as the real __main__ (pickling its classes works) and does not find
    # this harness in sys.modules.
    main_module = types.ModuleType("__main__")
    sys.modules["__main__"] = main_module
    namespace = main_module.__dict__
    namespace["__builtins__"] = builtins
    versions = _versions(snapshots)
    _emit(b"start")
    try:
        exec(solution, namespace)  # noqa: S102 - running untrusted code is the point
    except _BaseException as exc:
        _report(exc, "solution", sources)
        _flush_and_exit()
    if versions is None or _versions(snapshots) != versions:
        _restore_builtins(snapshots)
    namespace.update(__af_cmp=_af_cmp, __af_plain=_af_plain, __af_assert=_af_assert)
    for kind, code in chunks:
        try:
            exec(code, namespace)  # noqa: S102
        except _AssertionError as exc:
            _report(exc, "tests", sources)
            if kind != "assert":
                break
        except _BaseException as exc:
            _report(exc, "tests", sources)
            if kind != "assert" or isinstance(exc, (_SystemExit, _MemoryError)):
                break
    else:
        _emit(b"done")
    _flush_and_exit()


def _restore_builtins(snapshots):
    # A solution that rebinds builtins (AssertionError, isinstance...) or patches
    # unittest.TestCase must not change how the tests behave.
    for target, saved, _live in snapshots:
        current = vars(target)
        if target is builtins:
            for key in [k for k in current if k not in saved]:
                del current[key]
            for key, val in saved.items():
                if current.get(key) is not val:
                    current[key] = val
        else:
            for key, val in saved.items():
                if current.get(key) is not val:
                    setattr(target, key, val)


def _flush_and_exit():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except _BaseException:
            pass
    _exit(0)


class _Pre:
    """Everything a job's setup needs that does not depend on the job, built once in the server
    (``setup``): forked children then only make system calls. Building ctypes types, buffers and
    file objects in every job costs hundreds of page faults on copy-on-write pages."""

    prctl = capset = unshare = mount = None
    cap_header = cap_data = seccomp_prog = None
    id_maps = ()  # (path, bytes) for setgroups, uid_map, gid_map
    tmpfs = ()  # mount points
    tmpfs_opts = b""
    static_limits = ()  # (resource, soft, hard) that no job changes
    snapshots = ()  # (builtins and unittest.TestCase, their dict before any solution ran)
    child_hooks = ()  # at-fork child hooks of the preloaded modules (see server._preload)
    dict_version = None  # see _dict_version_reader
    hard = None  # {resource: hard limit} of the job-dependent resources
    page = 4096


def setup(cfg):
    """Prepare ``_Pre`` in the server, after it dropped to its uid and before any job."""
    _Pre.prctl, _Pre.capset, _Pre.unshare, _Pre.mount = (
        libc.prctl, libc.capset, libc.unshare, libc.mount)
    _Pre.cap_header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, self
    _Pre.cap_data = (ctypes.c_uint32 * 6)()  # no capability at all
    if cfg["seccomp_hex"]:
        bpf = binascii.unhexlify(cfg["seccomp_hex"])
        _Pre.seccomp_filter = ctypes.create_string_buffer(bpf, len(bpf))  # kept alive here
        _Pre.seccomp_prog = ctypes.c_char_p(
            struct.pack("HxxxxxxQ", len(bpf) // 8, ctypes.addressof(_Pre.seccomp_filter)))
    uid, gid = os.getuid(), os.getgid()
    _Pre.id_maps = (("/proc/self/setgroups", b"deny"), ("/proc/self/uid_map", b"%d %d 1" % (uid, uid)),
                    ("/proc/self/gid_map", b"%d %d 1" % (gid, gid)))
    _Pre.tmpfs = (b"/tmp", cfg["work_dir"].encode())
    _Pre.tmpfs_opts = f"size={cfg['work_bytes']},mode=1777".encode()
    static = [
        (resource.RLIMIT_NPROC, cfg["max_procs"] + 4),  # + server, C1, C2 and slack
        (resource.RLIMIT_FSIZE, cfg["work_bytes"]),
        (resource.RLIMIT_NOFILE, cfg["max_files"]),
        (resource.RLIMIT_CORE, 0),
    ]
    _Pre.static_limits = tuple((which, *_clamped(which, value)) for which, value in static)
    _Pre.hard = {which: resource.getrlimit(which)[1]
                 for which in (resource.RLIMIT_AS, resource.RLIMIT_CPU)}
    _Pre.page = os.sysconf("SC_PAGE_SIZE")
    for stream in (sys.stdout, sys.stderr):  # inherited by every job; the server never prints
        stream.reconfigure(line_buffering=True)


def take_snapshots():
    """In the server, after its preloads: what ``run_job`` restores once the solution ran."""
    snapshots = [_snapshot(builtins)]
    if "unittest" in sys.modules:
        snapshots.append(_snapshot(sys.modules["unittest"].TestCase))
    _Pre.snapshots = tuple(snapshots)
    _Pre.dict_version = _dict_version_reader()


def _snapshot(target):
    """(target, copy of its attributes, the live dict behind ``vars(target)``)."""
    live = vars(target)
    if not isinstance(live, dict):  # a class: vars() is a read-only proxy of its dict
        live = gc.get_referents(live)[0]
    return target, dict(live), live


def _dict_version_reader():
    """``read(d)``: the version tag CPython 3.11 keeps in every dict (PEP 509; every change
    bumps it), read from the dict's header without touching its keys or values. None where the
    layout is not the one checked here; then the snapshots are always restored.

    Why: restoring walks ~250 builtins and TestCase attributes, and the reference counting of
    that walk writes to ~100 copy-on-write pages (~0.25 ms per job), although a solution seldom
    changes either; the tags tell whether it did.
    """
    if ((sys.implementation.name, sys.version_info[:2]) != ("cpython", (3, 11))
            or ctypes.sizeof(ctypes.c_void_p) != 8):
        return None

    def read(d):
        return ctypes.c_uint64.from_address(id(d) + 24).value  # after refcnt, type, ma_used

    def used(d):
        return ctypes.c_ssize_t.from_address(id(d) + 16).value

    probe = {"a": 1}
    v0 = read(probe)
    if used(probe) != 1 or read(probe) != v0:
        return None
    probe["a"] = 2
    v1 = read(probe)
    probe["b"] = 3
    v2 = read(probe)
    del probe["b"]
    v3 = read(probe)
    if not (0 < v0 < v1 < v2 < v3) or used(probe) != 1:
        return None
    return read


def _versions(snapshots):
    read = _Pre.dict_version
    return None if read is None else tuple(read(live) for _, _, live in snapshots)


def _clamped(which, value, hard=None):
    """(soft, hard) for ``value``, never above the existing hard limit (raising it would fail)."""
    hard = resource.getrlimit(which)[1] if hard is None else hard
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    return value, value if which != resource.RLIMIT_CPU else value + 1


def _prepare_c2(job, cfg, fds):
    """Limits, output plumbing and privilege drop of C2, before any untrusted code."""
    ev_w, out_w, err_w = fds
    # kill(0, ...) by the job must not reach the server's process group. A group, not a session:
    # setsid would also create a scheduler autogroup per job.
    os.setpgid(0, 0)
    for hook in _Pre.child_hooks:  # what os.fork would have run (random reseeds itself)
        try:
            hook()
        except _BaseException:  # os.fork ignores a failing hook too
            pass
    if cfg["isolated"]:
        # No PR_SET_PDEATHSIG: C1 exits right after forking C2 (see _start_c1). C2 dies with the
        # server all the same: the server's exit ends bubblewrap's sandbox, pid namespace and all.
        check(_Pre.capset(_Pre.cap_header, _Pre.cap_data), "capset")
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    ev = os.dup2(ev_w, 3)
    os.closerange(4, 1 << 16)
    _Job.ev_fd, _Job.nonce = ev, job["nonce"]
    _Job.ok_line = job["nonce"] + b"\tok\n"
    os.chdir(cfg["work_dir"])
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            os.write(fd, b"1000")  # the memory cgroup kills the job, never the server
        finally:
            os.close(fd)
    except OSError:
        pass
    fd = os.open("/proc/self/statm", os.O_RDONLY)
    try:
        vsz = int(os.read(fd, 256).split()[0]) * _Pre.page
    finally:
        os.close(fd)
    timeout = float(job["timeout_s"])
    limits = [
        (resource.RLIMIT_AS, *_clamped(resource.RLIMIT_AS,
                                       vsz + int(job["memory_mb"]) * (1 << 20),
                                       _Pre.hard[resource.RLIMIT_AS])),
        (resource.RLIMIT_CPU, *_clamped(resource.RLIMIT_CPU, int(timeout) + 1,
                                        _Pre.hard[resource.RLIMIT_CPU])),
        *_Pre.static_limits,
    ]
    for which, soft, hard in limits:
        resource.setrlimit(which, (soft, hard))
    check(_Pre.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if _Pre.seccomp_prog is not None:
        check(_Pre.prctl(_PR_SET_SECCOMP, 2, _Pre.seccomp_prog, 0, 0), "seccomp")


def _start_c1(job, cfg, fds, pid_w):
    """In C1: new namespaces and private tmpfs, then fork C2, hand its pid to the server, exit.

    C2 is re-parented to the server (a child subreaper), which waits for it directly: C1 does
    not stay to wait and mirror C2's exit status, so neither C1's wake-up nor its exit lies
    between the end of the job and its verdict.
    """
    check(_Pre.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")  # needed to write uid_map
    check(_Pre.unshare(_CLONE_FLAGS), "unshare")
    for path, text in _Pre.id_maps:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text)
        finally:
            os.close(fd)
    check(_Pre.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
    for path in _Pre.tmpfs:
        check(_Pre.mount(b"tmpfs", path, b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
                         _Pre.tmpfs_opts), "mount tmpfs")
    pid = os.fork()
    if pid == 0:
        os.close(pid_w)
        _prepare_c2(job, cfg, fds)
        run_job(job, cfg)
    os.write(pid_w, b"%d" % pid)
    _exit(0)


def child(job, cfg, fds, pid_w):
    try:
        if cfg["isolated"]:
            _start_c1(job, cfg, fds, pid_w)
        else:
            _prepare_c2(job, cfg, fds)
            run_job(job, cfg)
    except _BaseException as exc:
        try:
            _Job.ev_fd, _Job.nonce = fds[0], job["nonce"]
            _emit(b"setup", f"{_type(exc).__name__}: {exc}")
        finally:
            _exit(70)


# ----------------------------------------------------------------------------- the server
