"""Creating a job's process, and all it sets up before untrusted code runs (stdlib only).

Isolated mode: the job's process is born in a fresh user, pid, mount, ipc and uts namespace, as
pid 1 of its pid namespace; it writes its uid/gid maps, mounts size-limited tmpfs on /work and
/tmp, drops every capability (it keeps the sandbox's /proc: bubblewrap's read-only sub-mounts make
a fresh proc mount impossible, and the server is non-dumpable), sets rlimits, ``no_new_privs``
and the seccomp filter, then ``job.run_job`` runs the untrusted code. When it ends the kernel
kills everything in its namespace (setsid daemons included) and its files vanish with its mount
namespace; the job cannot see or signal the fork server.

The process is made with a raw ``clone`` system call (through ctypes) that creates the
namespaces and the child at once. Why not ``os.fork``: it cannot create namespaces, and the
portable way, forking a helper (C1) that unshares them and forks the job (C2), costs a second
fork of the whole server and ~190 copy-on-write page faults per job (a quarter of a short job's
cost). Python 3.11 has no ``os.clone``. The call holds the GIL and is bracketed by
``PyOS_BeforeFork``/``PyOS_AfterFork_*`` as ``os.fork`` brackets ``fork``; the server is
single-threaded, so no other thread can hold a lock the child would inherit. What glibc's
``fork`` adds (resetting such locks, recording the child's thread id in its thread descriptor)
is moot then, and glibc (>= 2.34) asks the kernel for the thread id where it matters (raise,
abort). Where the system call's number is unknown here, or the kernel refuses the call, C1/C2 is
used; both ways set up the same namespaces and limits. A suite's test process (``suite``) is
made the same way; it runs ``job.run_tests`` instead of ``job.run_job``.
"""

import binascii
import ctypes
import os
import resource
import struct
import sys

from job import bind_channel, report_setup_error, run_job, run_tests

libc = ctypes.CDLL(None, use_errno=True)
_CLONE_FLAGS = 0x00020000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000  # NS UTS IPC USER PID
_SIGCHLD = 17
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}  # flags first; the other arguments are all 0 here
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, _PR_SET_SECCOMP = 1, 4, 22
PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 36, 38
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
SIGKILL = 9
# Captured before any untrusted code runs: a job may rebind the names, not these objects.
_BaseException, _exit = BaseException, os._exit


def check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


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
    child_hooks = ()  # at-fork child hooks of the preloaded modules (see server._preload)
    clone = None  # the raw clone system call, where it can be used (see the module docstring)
    fork_hooks = ()  # PyOS_BeforeFork, PyOS_AfterFork_Parent, PyOS_AfterFork_Child
    hard = None  # {resource: hard limit} of the job-dependent resources
    page = 4096


def setup(cfg):
    """Prepare ``_Pre`` in the server, after it dropped to its uid and before any job."""
    _Pre.prctl, _Pre.capset, _Pre.unshare, _Pre.mount = (
        libc.prctl, libc.capset, libc.unshare, libc.mount)
    number = _SYS_CLONE.get(os.uname().machine)
    if cfg["isolated"] and number is not None and cfg.get("clone", True):
        syscall = ctypes.PyDLL(None, use_errno=True).syscall  # PyDLL: the GIL stays held
        syscall.argtypes, syscall.restype = [ctypes.c_long] * 6, ctypes.c_long
        _Pre.clone = lambda: syscall(number, _CLONE_FLAGS | _SIGCHLD, 0, 0, 0, 0)
        api = ctypes.pythonapi
        _Pre.fork_hooks = (api.PyOS_BeforeFork, api.PyOS_AfterFork_Parent,
                           api.PyOS_AfterFork_Child)
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


def _clamped(which, value, hard=None):
    """(soft, hard) for ``value``, never above the existing hard limit (raising it would fail)."""
    hard = resource.getrlimit(which)[1] if hard is None else hard
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    return value, value if which != resource.RLIMIT_CPU else value + 1


def set_child_hooks(hooks):
    """The at-fork child hooks the server's preloads registered; the job's process runs them."""
    _Pre.child_hooks = tuple(hooks)


def start_child(job, cfg, fds, close_fds):
    """Start the job's process; in the server, return ``(pid, pid_r)``, in the child never.

    ``pid`` is the job's process, or C1, which writes the job's pid on ``pid_r`` (-1 when there
    is no C1) and exits; ``fds`` (events, stdout, stderr) go to the job, ``close_fds`` are closed
    in the child first.
    """
    if _Pre.clone is not None:
        before, after_parent, after_child = _Pre.fork_hooks
        before()
        pid = _Pre.clone()
        if pid == 0:
            after_child()
            _in_child(job, fds, close_fds, _clone_child, job, cfg, fds)
        after_parent()
        if pid > 0:
            return pid, -1
        _Pre.clone = None  # refused (seccomp, an old kernel...): C1/C2 from now on
    pid_r, pid_w = os.pipe() if cfg["isolated"] else (-1, -1)
    pid = os.fork()
    if pid == 0 and cfg["isolated"]:
        _in_child(job, fds, (*close_fds, pid_r), _start_c1, job, cfg, fds, pid_w)
    elif pid == 0:
        _in_child(job, fds, close_fds, _degraded_child, job, cfg, fds)
    if pid_w >= 0:
        os.close(pid_w)
    return pid, pid_r


def _in_child(job, fds, close_fds, fn, *args):
    """Run ``fn`` in a new child; a failure of the setup is reported as such. Never returns."""
    try:
        for fd in close_fds:
            os.close(fd)
        fn(*args)
    except _BaseException as exc:
        try:
            report_setup_error(fds[0], job["nonce"], exc)
        finally:
            _exit(70)
    _exit(70)  # not reached: fn ends the process


def _clone_child(job, cfg, fds):
    _enter_namespaces(job)
    _run(job, cfg, fds, parent_is_server=True)


def _degraded_child(job, cfg, fds):
    _run(job, cfg, fds, parent_is_server=True)


def _run(job, cfg, fds, parent_is_server):
    """Set up the job's process, then run its job, or its part of a suite (``suite``): tests
    ``job["first"]..`` with the server's acks on ``fds[3]`` (fd 4 then)."""
    if "first" in job:
        _prepare_job(job, cfg, fds[:3], parent_is_server, ack_fd=fds[3])
        run_tests(job, cfg, job["first"], 4)
    _prepare_job(job, cfg, fds, parent_is_server)
    if "exec" in job:
        from programs import run_program_job  # only program jobs pay for the import

        run_program_job(job, cfg)
    run_job(job, cfg)


def _enter_namespaces(job):
    """In the new user and mount namespaces: map our own uid and gid, private tmpfs mounts.

    A program job (``programs``) gets tmpfs of its own size, and a work dir it may execute
    files from (the compiled program).
    """
    check(_Pre.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")  # needed to write uid_map
    for path, text in _Pre.id_maps:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, text)
        finally:
            os.close(fd)
    check(_Pre.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
    program = job.get("exec")
    opts = _Pre.tmpfs_opts if program is None else b"size=%d,mode=1777" % program["work_bytes"]
    for path in _Pre.tmpfs:
        noexec = _MS_NOEXEC if program is None or path == b"/tmp" else 0
        check(_Pre.mount(b"tmpfs", path, b"tmpfs", _MS_NOSUID | _MS_NODEV | noexec, opts),
              "mount tmpfs")


def _prepare_job(job, cfg, fds, parent_is_server, ack_fd=None):
    """Limits, output plumbing and privilege drop of the job's process, before untrusted code.

    ``ack_fd`` (a suite's test process) becomes fd 4, for the server's acks (see ``suite``).
    """
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
        # A child of C1 goes without: C1 exits at once (see _start_c1). It dies with the server
        # all the same: the server's exit ends bubblewrap's sandbox, pid namespace and all.
        if parent_is_server:
            check(_Pre.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "pdeathsig")
        check(_Pre.capset(_Pre.cap_header, _Pre.cap_data), "capset")
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    ev = os.dup2(ev_w, 3)
    if ack_fd is not None:
        os.dup2(ack_fd, 4)
    os.closerange(4 if ack_fd is None else 5, 1 << 16)
    bind_channel(ev, job["nonce"])
    os.chdir(cfg["work_dir"])
    program = job.get("exec")
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        try:
            # the memory cgroup kills the job, never the server; a program job's runs (1000)
            # before its driver
            os.write(fd, b"1000" if program is None else b"500")
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
    if program is not None:
        # The driver sets each run's address space itself (runtimes such as the JVM reserve
        # far more than they use: the memory cgroup bounds those), and files as large as the
        # job's own tmpfs (a compiler's output).
        limits = [(which, *_clamped(which, program["work_bytes"]))
                  if which == resource.RLIMIT_FSIZE else (which, soft, hard)
                  for which, soft, hard in limits[1:]]
        check(_Pre.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "dumpable")  # runs cannot open its /proc
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
    check(_Pre.unshare(_CLONE_FLAGS), "unshare")
    _enter_namespaces(job)
    pid = os.fork()
    if pid == 0:
        _in_child(job, fds, (pid_w,), _c2_of_c1, job, cfg, fds)
    os.write(pid_w, b"%d" % pid)
    _exit(0)


def _c2_of_c1(job, cfg, fds):
    _run(job, cfg, fds, parent_is_server=False)
