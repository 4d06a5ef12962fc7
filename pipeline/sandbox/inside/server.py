"""Trusted job server that runs inside the sandbox (stdlib only; never imports ``pipeline``).

Started as ``python -I -S run.py CONFIG_HEX`` inside bubblewrap; as root it first drops to the
slot's uid. It reads jobs on stdin and writes one verdict per job on its own descriptor
(``verdict_fd``), see ``wire``; stdout of the untrusted code never reaches the supervisor as a
verdict. Each job runs in a child (see ``job``); after it the server sends SIGKILL to every other
process of the sandbox (``kill(-1)``) and reaps them, so the next job starts clean.
No ``json`` and no ``signal`` imports: they pull ``re``/``enum`` and would add milliseconds to
every per-exec sandbox start.
"""

import binascii
import gc
import marshal
import os
import select
import sys
import time

from job import take_snapshots
from spawn import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    SIGKILL,
    check,
    libc,
    set_child_hooks,
    setup,
    start_child,
)
from suite import serve_suite
from wire import (
    add_event,
    add_program_event,
    new_summary,
    parse_event,
    read_frame,
    write_frame,
)

# While a job runs, its event pipe is read at most once per this many seconds: a test with a
# hundred assertions otherwise wakes the server a hundred times (~10 us each on these cores).
# Nothing is lost: the job's writes wait in the pipe (64 KiB), and the pipe is read to its end
# once the job has exited, been killed, or timed out.
_EVENT_BATCH_S = 0.001


class _Tail:
    def __init__(self, keep):
        self.keep, self.data, self.total = keep, bytearray(), 0

    def add(self, chunk):
        self.total += len(chunk)
        self.data += chunk
        if len(self.data) > 2 * self.keep + 65536:
            del self.data[:-self.keep]

    def text(self):
        return bytes(self.data[-self.keep:] if self.keep else b"").decode("utf-8", "replace")


def _kill_all(cfg, pid):
    if cfg["isolated"]:
        try:
            os.kill(-1, SIGKILL)  # every process of the sandbox but pid 1 and this server
        except ProcessLookupError:
            pass
    else:
        for target in (-pid, pid):
            try:
                os.kill(target, SIGKILL)
            except ProcessLookupError:
                pass


def _handed_over(pid_r):
    """C2's pid, written by C1 before it exited; None when C1 failed before forking it."""
    if not select.select([pid_r], [], [], 0)[0]:
        return None
    data = os.read(pid_r, 32)
    return int(data) if data.isdigit() else None


def _reap(cfg, pid, job_pid, status):
    """Reap the job, C1 and every orphan re-parented here; True when the sandbox is clean again.

    ``job_pid`` is C2 once C1 handed it over (C1 is reaped then), else C1.
    """
    if status is None:
        status = os.waitpid(job_pid, 0)[1]
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            # No child left, so no descendant either (an orphan is re-parented here before its
            # parent can be reaped), and nothing else runs in the sandbox but bubblewrap's
            # init: clean, without listing /proc. (The job's own pid namespace is emptied by
            # the kernel before the job's exit is reported.)
            return status, True
    if not cfg["isolated"]:
        return status, True
    me = os.getpid()
    for _ in range(400):
        others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        if not others:
            return status, True
        _kill_all(cfg, pid)
        try:
            os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.0005)
    return status, False


def _add_events(events, ev_buf, chunk):
    """Split complete event lines into ``events``; "event_flood" when one line exceeds 1 MiB."""
    ev_buf += chunk
    *lines, rest = ev_buf.split(b"\n")
    flood = len(ev_buf) > (1 << 20)
    ev_buf[:] = rest
    events.extend(lines)
    return "event_flood" if flood else None


def serve_job(job, cfg):
    """Run one job in a child and supervise it; returns the verdict dict."""
    start = time.monotonic()
    nonce = job["nonce"] = binascii.hexlify(os.urandom(12))
    ev_r, ev_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid, pid_r = start_child(job, cfg, (ev_w, out_w, err_w),
                             (ev_r, out_r, err_r, 0, cfg["verdict_fd"]))
    for fd in (ev_w, out_w, err_w):
        os.close(fd)
    # Whose exit status is the job's: the job's process, or C1 until it hands C2 over (C2 is
    # then re-parented here: the server is a child subreaper).
    job_pid = pid
    pidfd = os.pidfd_open(pid)
    tails = {out_r: _Tail(cfg["tail_bytes"]), err_r: _Tail(cfg["tail_bytes"])}
    events, ev_buf = [], bytearray()
    poller = select.poll()
    for fd in (ev_r, out_r, err_r, pidfd):
        poller.register(fd, select.POLLIN)
    open_fds, status, reason = {ev_r, out_r, err_r}, None, None
    deadline = start + float(job["timeout_s"])
    ev_resume = None  # while set, the event pipe is left to fill until then (see _EVENT_BATCH_S)
    while open_fds or status is None:
        now = time.monotonic()
        if now >= deadline:
            reason = "timeout"
            break
        if status is not None:
            deadline = min(deadline, now + 0.2)  # pipes still held by a leftover process
        if ev_resume is not None and (now >= ev_resume or status is not None):
            poller.register(ev_r, select.POLLIN)
            ev_resume = None
        until = deadline if ev_resume is None else min(deadline, ev_resume)
        for fd, _ in poller.poll(max(0.0, until - now) * 1000):
            if fd == pidfd:
                exited = os.waitpid(job_pid, 0)[1]
                poller.unregister(pidfd)
                os.close(pidfd)
                pidfd = -1
                c2 = _handed_over(pid_r) if job_pid == pid and pid_r >= 0 else None
                if c2 is None:
                    status = exited
                else:  # C1 is done; now C2, the job, is our child
                    job_pid, pidfd = c2, os.pidfd_open(c2)
                    poller.register(pidfd, select.POLLIN)
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                poller.unregister(fd)
                open_fds.discard(fd)
            elif fd == ev_r:
                reason = _add_events(events, ev_buf, chunk) or reason
                if status is None:
                    poller.unregister(ev_r)
                    ev_resume = time.monotonic() + _EVENT_BATCH_S
            else:
                tails[fd].add(chunk)
        if sum(t.total for t in tails.values()) > cfg["output_limit"]:
            reason = "output_limit"
        if reason:
            break
    if reason or open_fds or status is None:
        _kill_all(cfg, pid)
    status, clean = _reap(cfg, pid, job_pid, status)
    # Events written before the end but not read yet (the pipe was left to fill, or a limit cut
    # the loop short). Every writer is dead by now; the bound (a pipe holds at most 1 MiB) is for
    # a sandbox that could not be cleaned.
    for _ in range(32):
        if ev_r not in open_fds or not select.select([ev_r], [], [], 0)[0]:
            break
        chunk = os.read(ev_r, 65536)
        if not chunk:
            break
        flood = _add_events(events, ev_buf, chunk)
        reason = reason or flood
        if flood:
            break
    for fd in (ev_r, out_r, err_r, pidfd, pid_r):
        if fd >= 0:
            os.close(fd)
    summary = new_summary()
    add = add_program_event if "exec" in job else add_event
    for line in events:
        event = parse_event(line, nonce)
        if event is not None:
            add(summary, *event)
    code = os.waitstatus_to_exitcode(status)
    summary.update(reason=reason, exit_code=code if code >= 0 else 128 - code,
                   stdout=tails[out_r].text(), stderr=tails[err_r].text(),
                   duration_s=time.monotonic() - start, clean=clean)
    return summary


def _serve_suite(job, cfg):
    """A suite job (``suite``): each of its test processes is started as a job's process."""
    job["nonce"] = binascii.hexlify(os.urandom(12))

    def start_test(job, cfg, first, fds, close_fds):
        pid, pid_r = start_child(dict(job, first=first), cfg, fds,
                                 (*close_fds, 0, cfg["verdict_fd"]))
        if pid_r >= 0:  # C1 forked the process and exits; the process is ours (subreaper)
            os.waitpid(pid, 0)
            c2 = _handed_over(pid_r)
            os.close(pid_r)
            return c2  # None: C1 failed before forking it (its setup error is on the pipe)
        return pid

    verdict = serve_suite(job, cfg, start_test)
    verdict["clean"] = _reap(cfg, None, None, 0)[1]
    return verdict


def _drop_to(uid):
    """Started as root by a privileged bubblewrap: become the slot's uid, for good."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # clears every capability: the ids are all non-zero now
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _preload(names):
    """Import modules jobs are likely to import, deferring their at-fork child hooks to C2.

    ``random`` reseeds itself in every forked child; run by ``os.fork`` that would happen in C1
    too, which never uses it (~40 page faults per job). ``job`` runs the hooks in C2 instead,
    before any untrusted code, as a fork would.
    """
    hooks = []
    register = os.register_at_fork

    def record(*, before=None, after_in_child=None, after_in_parent=None):
        if before is not None or after_in_parent is not None:
            register(**{k: v for k, v in (("before", before), ("after_in_parent", after_in_parent))
                        if v is not None})
        if after_in_child is not None:
            hooks.append(after_in_child)

    os.register_at_fork = record
    try:
        for name in names:
            __import__(name)
    finally:
        os.register_at_fork = register
    set_child_hooks(hooks)


def main(argv):
    cfg = marshal.loads(binascii.unhexlify(argv[1]))
    if cfg["uid"] is not None:
        _drop_to(cfg["uid"])
    if cfg["isolated"]:
        # Non-dumpable: a job cannot open /proc/<server>/mem even with the same uid.
        check(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "dumpable")
        check(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")
    setup(cfg)
    sys.path.extend(cfg["sys_path"])
    _preload(cfg["preload"])
    take_snapshots()
    gc.freeze()  # jobs are forked from here: keep the collector off these pages (copy-on-write)
    os.environ.clear()
    os.environ.update(cfg["env"])
    write_frame(cfg["verdict_fd"], {"ready": True, "pid": os.getpid()})
    for _ in range(cfg["max_jobs"]):
        job = read_frame(0)
        if job is None:
            return
        verdict = serve_job(job, cfg) if "suites" not in job else _serve_suite(job, cfg)
        write_frame(cfg["verdict_fd"], verdict)
        if not verdict["clean"]:
            return

