"""Several tests of one solution in one job, with a verdict per test (stdlib only).

The server (``serve_suite``) starts a test process (T) exactly as it starts a job's process
(``spawn.start_child``: fresh user, pid, mount, ipc and uts namespaces with T as pid 1, fresh
tmpfs, limits, seccomp), but T runs the solution once and then the tests one after another
(``job.run_tests``). T reports on its event pipe: ``t <i>`` when test ``i`` starts (after
flushing its output, and T waits for the server's ack on fd 4 before it runs the test, so the
output read by then is the earlier tests'), then that test's events (``ok``, ``exc``, ``done``),
and ``end`` after the last. The server gives each test its own deadline and output cap and
splits stdout and stderr by test; each test's verdict has the shape of a single job's.

When T dies or is killed during test ``i`` (timeout, output cap, ``os._exit``, a crash), test
``i`` gets that verdict, everything T started dies with it (pid 1 of its namespace; in degraded
mode its process group is killed), and a fresh T runs the solution again for tests ``i + 1
...``; with ``fail_fast`` a first test that timed out ends the suite (the rest are skipped).
When the solution itself fails (does not compile, raises, loops), every test gets that verdict,
as separate jobs would each have. T also starts afresh once it has used ``cpu_budget_s`` of
CPU (``yield <i>``), so that its CPU limit, set for one job, is never spent by earlier tests.

Isolation is per solution: the tests of one solution share T (names a test binds and builtins
are reset after each; what a test mutates inside the solution's objects is not), never another
solution's. Per test this saves a job's process and namespaces and the round trip to the host,
which is most of a short test's cost.
"""

import os
import select
import time

from wire import add_event, new_summary, parse_event

_kill, _waitpid = os.kill, os.waitpid
_SIGKILL = 9
_FLOOD = 1 << 20  # one event line longer than this: the channel is being flooded


class _Test:
    """What the server knows of one test (or of the solution's phase, as ``sol``)."""

    def __init__(self, started):
        self.summary = new_summary()
        self.summary["started"] = started
        self.out, self.err, self.total = bytearray(), bytearray(), 0
        self.start = time.monotonic()

    def output(self, fd_is_out, chunk, keep):
        buf = self.out if fd_is_out else self.err
        buf += chunk
        self.total += len(chunk)
        if len(buf) > 2 * keep + 65536:
            del buf[:-keep]


def _report(report, i, test, sol, code, reason, keep):
    """``report(i, pairs)`` for test ``i``: its events (the solution phase's where it has none)."""
    src = test if test is not None else sol
    pairs = []
    for key, value in src.summary.items():
        if isinstance(value, dict):  # first_failure / first_error
            for k, v in value.items():
                pairs += [f"{key}_{k}", v]
        elif value is not None:
            pairs += [key, int(value) if isinstance(value, bool) else value]
    out = bytes(sol.out) + (bytes(test.out) if test is not None and test is not sol else b"")
    err = bytes(sol.err) + (bytes(test.err) if test is not None and test is not sol else b"")
    tail = (lambda b: b[-keep:].decode("utf-8", "replace") if keep else "")
    pairs += ["exit_code", code, "reason", reason or "", "stdout", tail(out), "stderr", tail(err),
              "duration_s", f"{time.monotonic() - src.start:.6f}"]
    report(i, pairs)


def _kill_tree(pid, nested):
    """Kill T and everything it started, reap T; its wait status (None if reaped before).

    ``nested``: T is pid 1 of its own pid namespace, whose processes the kernel kills when T
    dies; else (degraded mode) T's process group is killed.
    """
    if pid is None:
        return None
    for target in (pid,) if nested else (-pid, pid):
        try:
            _kill(target, _SIGKILL)
        except ProcessLookupError:
            pass
    try:
        return _waitpid(pid, 0)[1]
    except ChildProcessError:
        return None


def _start(job, cfg, start_test, first):
    """Start T for tests ``first..``: (pid or None, event, stdout, stderr pipes, ack pipe)."""
    ev_r, ev_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ack_r, ack_w = os.pipe()
    pid = start_test(job, cfg, first, (ev_w, out_w, err_w, ack_r), (ev_r, out_r, err_r, ack_w))
    for fd in (ev_w, out_w, err_w, ack_r):
        os.close(fd)
    for fd in (out_r, err_r, ack_w):
        os.set_blocking(fd, False)
    return pid, ev_r, out_r, err_r, ack_w


def _run_process(job, cfg, start_test, first, report):
    """Run T from test ``first``; the next test to start T at, or None when all are reported.

    ``report(i, pairs)`` receives each test's verdict (``pairs`` None: skipped).
    """
    nonce, keep = job["nonce"], cfg["tail_bytes"]
    n, timeout = len(job["suites"]), float(job["timeout_s"])
    pid, ev_r, out_r, err_r, ack_w = _start(job, cfg, start_test, first)
    sol = _Test(False)
    cur, index, resume = sol, None, None  # the phase output goes to; its test; T's yield point
    deadline = sol.start + timeout
    # what T may take in all: a T that forges ``t`` events cannot keep its deadline moving
    cap = sol.start + (n - first + 1) * (timeout + 0.5)
    open_fds, ev_buf, reason = [ev_r, out_r, err_r], bytearray(), None
    status = None if pid is not None else 0  # None: it could not be started

    def drain():
        for fd in (out_r, err_r):
            while fd in open_fds:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    open_fds.remove(fd)
                    break
                (cur or sol).output(fd == out_r, chunk, keep)

    def on_event(line):
        nonlocal cur, index, deadline, resume
        event = parse_event(line, nonce)
        if event is None:
            return  # not written by the harness code of this job
        kind, fields = event
        if kind in (b"t", b"end", b"yield"):
            drain()  # T flushed its output before this event: what is there so far is cur's
            if index is not None:
                _report(report, index, cur, sol, 0, None, keep)
            if kind == b"t" and fields and fields[0].isdigit():
                cur, index = _Test(sol.summary["started"]), int(fields[0])
                deadline = min(cap, time.monotonic() + timeout)
                try:  # T waits for this before it runs the test: its output is the test's
                    os.write(ack_w, b"k")
                except OSError:  # T does not read them (not harness code): its own loss
                    pass
            else:
                cur, index = None, None
                resume = int(fields[0]) if kind == b"yield" and fields else n
        elif cur is not None:
            add_event(cur.summary, kind, fields)

    poll_s = 0.00005
    while True:
        now = time.monotonic()
        if now >= deadline:
            reason = "timeout"
            break
        if status is None:
            got, st = _waitpid(pid, os.WNOHANG)
            if got == pid:
                status = st
                deadline = min(deadline, now + 0.2)  # pipes still held by a leftover process
        if status is not None and not open_fds:
            break
        if not open_fds:  # T closed its pipes: it is exiting (or hides); wait for it briefly
            time.sleep(max(0.0, min(deadline - now, poll_s)))
            poll_s = min(poll_s * 2, 0.001)
            continue
        ready = select.select(open_fds, [], [], max(0.0, min(deadline - now, poll_s)))[0]
        poll_s = 0.00005 if ready else min(poll_s * 2, 0.01)
        for fd in ready:
            if fd != ev_r:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.remove(fd)
                continue
            ev_buf += chunk
            *lines, rest = ev_buf.split(b"\n")
            ev_buf[:] = rest
            for line in lines:
                on_event(line)
            if len(ev_buf) > _FLOOD:
                reason = "event_flood"
        drain()
        if sol.total + (cur.total if cur is not None and cur is not sol else 0) > \
                cfg["output_limit"]:
            reason = "output_limit"
        if reason:
            break
    code = _exit_code(pid, status, cfg["isolated"])
    if ev_r in open_fds:  # events T wrote before it was stopped (every writer is dead now)
        os.set_blocking(ev_r, False)
        for _ in range(32):
            try:
                chunk = os.read(ev_r, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            ev_buf += chunk
        for line in ev_buf.split(b"\n")[:-1]:
            on_event(line)
    drain()
    for fd in (ev_r, out_r, err_r, ack_w):
        os.close(fd)
    if resume is not None:
        return resume if resume < n else None
    at = first if index is None else index  # the test this process ended in
    skip_rest = job.get("fail_fast") and reason == "timeout" and at == 0
    if index is None:  # the solution's phase: every remaining test gets its verdict
        for i in range(first, first + 1 if skip_rest else n):
            _report(report, i, None, sol, code, reason, keep)
    else:
        _report(report, index, cur, sol, code, reason, keep)
    if skip_rest:
        for k in range(1, n):
            report(k, None)
        return None
    return index + 1 if index is not None and index + 1 < n else None


def _exit_code(pid, status, nested):
    st = _kill_tree(pid, nested)
    st = status if status is not None else st
    if st is None:
        return 128 + _SIGKILL
    code = os.waitstatus_to_exitcode(st)
    return code if code >= 0 else 128 - code


def serve_suite(job, cfg, start_test):
    """In the server: run ``job["suites"]``; the verdict, each test's summary as ``t<i>``.

    ``start_test(job, cfg, first, fds, close_fds)`` starts T as a job's process: ``fds``
    (events, stdout, stderr, acks) become its fds 3, 1, 2 and 4, ``close_fds`` are closed in
    it; it returns T's pid (None when T could not be started). A skipped test's summary is
    ``{"skipped": "1"}``.
    """
    start = time.monotonic()
    tests = {}

    def report(i, pairs):
        tests[f"t{i}"] = ({"skipped": "1"} if pairs is None else
                          {str(k): str(v) for k, v in zip(pairs[::2], pairs[1::2])})

    first = 0
    while first is not None:
        first = _run_process(job, cfg, start_test, first, report)
    return dict(tests, ok=0, failed=0, first_failure=None, first_error=None, done=True,
                started=True, setup=None, reason=None, exit_code=0, stdout="", stderr="",
                duration_s=time.monotonic() - start)
