"""A program job inside the sandbox: compile one program, or run it on every test (stdlib only).

The job's process (made by ``spawn`` like any job's: fresh namespaces, pid 1 of its own pid
namespace, limits, seccomp) runs this trusted driver, which never runs untrusted code itself:
each compiler or program run is a child it forks, puts under the run's own limits and
``execve``s. The driver is non-dumpable (a child of the same uid cannot open its ``/proc``
files, so neither the event channel nor the job's nonce), and as pid 1 of its namespace it gets
no signal from its children it has not asked for. After each run it kills everything left in
the namespace (``kill(-1)`` from pid 1), empties ``/work`` and ``/tmp`` and writes the program's
files afresh, so a run cannot change the next one.

The job (``job["exec"]``, built by ``arenaforge.pipeline.sandbox.languages.frames``) says:

* ``files``: ``(path, bytes, executable)`` written under the work dir;
* ``step``: ``"compile"`` runs ``argv`` once and sends back the files named in ``collect``
  (zlib-compressed, in base64 chunks) when it succeeds; ``"run"`` runs an optional ``check``
  (a syntax check: its failure is the program's compile error) and then the tests;
* ``mode``: ``"stdin"`` (one process per test, its stdin a file of the test's bytes) or
  ``"calls"`` (one process runs the calls ``first..n-1`` of a harness and reports each on a
  pipe at fd ``calls_fd``: ``<nonce> s <k>`` when call ``k`` starts, ``<nonce> r <k> <json>``
  with its value, ``<nonce> x <k> <message>`` when it raised; a process that dies inside a
  call gives that call its verdict and a fresh one resumes at the next call);
* limits per run: ``timeout_s`` (plus ``startup_s`` before the first call or for a stdin run),
  ``cpu_s``, ``as_bytes`` (0: none, the memory cgroup bounds the job), ``output_limit``.

Events (on the job's channel, with the job's nonce, see ``wire.add_program_event``): ``c``
(the compile or check step: exit, reason, wall, stdout and stderr tails), ``a`` (artifact
chunks), ``o`` (a test's stdout, in chunks), ``r`` (a test's outcome), then ``done``.
"""

import _signal
import binascii
import os
import resource
import select
import time
import zlib

from job import _emit, _empty

_SIGKILL, _SIGCHLD = 9, 17
# Event lines stay well under the server's 1 MiB flood limit once base64-encoded (twice, for
# artifacts) or UTF-8 (up to 4 bytes a character).
_CHUNK = 3 * 65536  # artifact bytes, a multiple of 3: base64 chunks concatenate into base64
_TEXT_CHUNK = 65536  # characters of stdout
_KEEP_TOTAL = 16 << 20  # stdout and values kept for the host, all tests of a job together
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$.-"


class _Out:
    """What one process wrote: stdout kept whole (up to ``keep_stdout``), stderr as a tail."""

    def __init__(self, keep_stdout, tail):
        self.out, self.err = bytearray(), bytearray()
        self.total, self.stdout_total, self.keep_stdout, self.tail = 0, 0, keep_stdout, tail

    def add(self, which, chunk):
        self.total += len(chunk)
        if which == 1:
            self.stdout_total += len(chunk)
            if len(self.out) < self.keep_stdout:
                self.out += chunk[: self.keep_stdout - len(self.out)]
        elif which == 2:
            self.err += chunk
            if len(self.err) > 2 * self.tail + 65536:
                del self.err[: -self.tail]

    def stderr_tail(self):
        return bytes(self.err[-self.tail:] if self.tail else b"").decode("utf-8", "replace")

    def stdout_tail(self):
        return bytes(self.out[-self.tail:] if self.tail else b"").decode("utf-8", "replace")


class _Driver:
    def __init__(self, job, cfg):
        self.spec, self.cfg = job["exec"], cfg
        self.spec["env"] = dict(self.spec["env"], HOME=cfg["work_dir"])
        # A child's exit wakes the poll through this pipe (seccomp denies pidfd_open to jobs).
        self.wake_r, wake_w = os.pipe()
        for fd in (self.wake_r, wake_w):
            os.set_blocking(fd, False)
        _signal.set_wakeup_fd(wake_w)
        _signal.signal(_SIGCHLD, lambda *_: None)
        self.work = cfg["work_dir"]
        self.isolated = cfg["isolated"]
        self.kept = 0

    # -- files ------------------------------------------------------------------------------

    def write_files(self):
        for path in (self.work, "/tmp") if self.isolated else (self.work,):
            _empty(path)
        os.chdir(self.work)
        for name, data, executable in self.spec["files"]:
            parent = os.path.dirname(name)
            if parent:
                os.makedirs(parent, exist_ok=True)
            mode = 0o755 if executable else 0o644
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)

    # -- one process --------------------------------------------------------------------------

    def spawn(self, argv, stdin_data, calls):
        """Fork and exec ``argv`` under the run's limits; (pid, pipes by fd, calls fd or -1)."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        calls_r, calls_w = os.pipe() if calls else (-1, -1)
        stdin_fd = os.memfd_create("stdin", 0)
        _write_all(stdin_fd, stdin_data)
        os.lseek(stdin_fd, 0, 0)
        spec = self.spec
        pid = os.fork()
        if pid == 0:
            try:
                _exec_child(spec, argv, stdin_fd, out_w, err_w, calls_w)
            finally:
                os._exit(127)
        for fd in (out_w, err_w, calls_w, stdin_fd):
            if fd >= 0:
                os.close(fd)
        pipes = {out_r: 1, err_r: 2}
        if calls_r >= 0:
            pipes[calls_r] = 3
        return pid, pipes

    def run_process(self, argv, stdin_data=b"", calls=None, timeout=None, startup=None,
                    max_calls=1):
        """Run one process to its end; (wait status, reason, wall_s, _Out).

        ``calls``: a callback ``(line, now) -> new deadline or None`` for each line the
        process writes on its calls pipe (calls mode); ``"stop"`` ends the process (every call
        reported). Whatever the calls report, the process gets at most ``max_calls`` timeouts.
        """
        spec = self.spec
        timeout = spec["timeout_s"] if timeout is None else timeout
        startup = spec.get("startup_s", 0.0) if startup is None else startup
        keep = max(0, min(spec["output_limit"], _KEEP_TOTAL - self.kept))
        out = _Out(keep, self.cfg["tail_bytes"])
        start = time.monotonic()
        pid, pipes = self.spawn(argv, stdin_data, calls is not None)
        poller = select.poll()
        for fd in (*pipes, self.wake_r):
            poller.register(fd, select.POLLIN)
        deadline = start + timeout + startup
        cap = start + startup + (timeout + 0.5) * max_calls
        status, reason, line_buf = None, None, bytearray()
        while pipes or status is None:
            now = time.monotonic()
            if now >= min(deadline, cap):
                reason = "timeout"
                break
            for fd, _ in poller.poll(max(0.0, min(deadline, cap) - now) * 1000):
                if fd == self.wake_r:
                    _drain(fd)
                    if status is None:
                        got, st = os.waitpid(pid, os.WNOHANG)
                        if got == pid:
                            status = st
                            poller.unregister(fd)
                            # a leftover process may still hold the pipes
                            deadline = min(deadline, time.monotonic() + 0.2)
                    continue
                chunk = os.read(fd, 65536)
                which = pipes.get(fd)
                if not chunk:
                    poller.unregister(fd)
                    del pipes[fd]
                    os.close(fd)
                    continue
                out.add(which, chunk)
                if which == 3:
                    line_buf += chunk
                    *lines, rest = line_buf.split(b"\n")
                    line_buf[:] = rest
                    for line in lines:
                        got = calls(line, time.monotonic())
                        if got == "stop":
                            reason = reason or "stopped"
                        elif got is not None:
                            deadline = got
            if out.total > spec["output_limit"]:
                reason = "output_limit"
            if reason:
                break
        if status is None or pipes:
            self.kill_all(pid)
        if status is None:
            status = os.waitpid(pid, 0)[1]
        for fd in pipes:
            os.close(fd)
        self.reap(pid)
        if reason == "stopped":
            reason = None
        return status, reason, time.monotonic() - start, out

    def kill_all(self, pid):
        """Kill the run and everything it started (from pid 1: the whole namespace)."""
        targets = (-1,) if self.isolated else (-pid, pid)
        for target in targets:
            try:
                os.kill(target, _SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def reap(self, pid):
        """Kill what the run left behind and reap every orphan re-parented here."""
        if self.isolated:
            self.kill_all(pid)
        while True:
            try:
                got, _ = os.waitpid(-1, 0 if self.isolated else os.WNOHANG)
            except ChildProcessError:
                return
            if got == 0:
                return

    # -- steps --------------------------------------------------------------------------------

    def step(self, argv, timeout):
        """Run a compile or check step; emits ``c``; True when it succeeded."""
        status, reason, wall, out = self.run_process(argv, timeout=timeout, startup=0.0)
        code = os.waitstatus_to_exitcode(status)
        _emit(b"c", code, reason or "", f"{wall:.6f}", out.stdout_tail(), out.stderr_tail())
        return code == 0 and not reason

    def compile(self):
        spec = self.spec
        if not self.step(spec["argv"], spec["timeout_s"]):
            return
        for name in _collect(spec["collect"]):
            with open(name, "rb") as f:
                data = zlib.compress(f.read(), 6)
            executable = os.access(name, os.X_OK)
            for i in range(0, max(len(data), 1), _CHUNK):
                _emit(b"a", name, int(executable),
                      binascii.b2a_base64(data[i:i + _CHUNK], newline=False).decode())

    def run_stdin(self):
        spec = self.spec
        stdins = spec["stdins"]
        for i, data in enumerate(stdins):
            if i:
                self.write_files()
            status, reason, wall, out = self.run_process(spec["argv"], data)
            self._report(i, status, reason, wall, out, bytes(out.out))
            if spec.get("fail_fast") and i == 0 and reason == "timeout":
                for k in range(1, len(stdins)):
                    _emit(b"r", k, "", "skipped", "0", "", "", "")
                return

    def run_calls(self):
        spec = self.spec
        n, first = spec["calls"], 0
        marker = spec["calls_marker"]
        while first < n:
            if first:
                self.write_files()
            nonce = binascii.hexlify(os.urandom(8))
            state = {"current": None, "next": first, "started": False, "t0": 0.0}

            def on_line(line, now, nonce=nonce, state=state):
                parts = line.split(b" ", 3)
                if len(parts) < 3 or parts[0] != nonce or not parts[2].isdigit():
                    return None
                kind, k = parts[1], int(parts[2])
                if k != state["next"] or kind not in marker:
                    return None
                if kind == marker[0]:  # call k starts: its own deadline
                    if state["current"] == k:
                        return None
                    state["current"], state["started"], state["t0"] = k, True, now
                    return now + spec["timeout_s"]
                if state["current"] != k:
                    return None
                payload = parts[3] if len(parts) > 3 else b""
                self._call_result(k, kind == marker[1], payload, now - state["t0"])
                state["current"], state["next"] = None, k + 1
                return "stop" if k + 1 >= n else now + spec["timeout_s"]

            argv = [*spec["argv"], nonce.decode(), str(first)]
            status, reason, wall, out = self.run_process(argv, calls=on_line,
                                                         max_calls=n - first)
            if state["next"] >= n:
                return
            at = state["current"] if state["current"] is not None else state["next"]
            self._report(at, status, reason, wall, out, b"", started=state["started"])
            if not state["started"] or (spec.get("fail_fast") and at == 0 and reason == "timeout"):
                # the process never reached a call: the others would fare no better
                for k in range(at + 1, n):
                    if state["started"]:
                        _emit(b"r", k, "", "skipped", "0", "", "", "")
                    else:
                        self._report(k, status, reason, wall, out, b"", started=False)
                return
            first = at + 1

    def _call_result(self, k, ok, payload, wall):
        budget = _KEEP_TOTAL - self.kept
        if len(payload) > budget:
            _emit(b"r", k, "", "kept_limit", f"{wall:.6f}", "", "", "")
            return
        self.kept += len(payload)
        text = payload.decode("utf-8", "replace")
        _emit(b"r", k, 0, "", f"{wall:.6f}", "", "value" if ok else "raised", text)

    def _report(self, i, status, reason, wall, out, stdout, started=True):
        code = os.waitstatus_to_exitcode(status)
        if stdout:
            self.kept += len(stdout)
            text = stdout.decode("utf-8", "replace")
            for j in range(0, len(text), _TEXT_CHUNK):
                _emit(b"o", i, text[j:j + _TEXT_CHUNK])
        if reason is None and out.stdout_total > len(out.out):  # the job's budget ran out
            reason = "kept_limit"
        _emit(b"r", i, code, reason or "", f"{wall:.6f}", out.stderr_tail(),
              "" if started else "not_started", "")


def _exec_child(spec, argv, stdin_fd, out_w, err_w, calls_w):
    """In the forked child: own process group, limits, descriptors, then ``execve``."""
    os.setpgid(0, 0)
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        os.write(fd, b"1000")  # the run, never the driver, is the memory cgroup's victim
        os.close(fd)
    except OSError:
        pass
    os.dup2(stdin_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    keep = spec["calls_fd"] if calls_w >= 0 else 2
    if calls_w >= 0:
        os.dup2(calls_w, keep)
        os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)
    if spec.get("as_bytes"):
        _lower(resource.RLIMIT_AS, spec["as_bytes"])
    _lower(resource.RLIMIT_CPU, int(spec["cpu_s"]))
    try:
        os.execve(argv[0], argv, spec["env"])
    except OSError as exc:
        os.write(2, f"cannot run {argv[0]}: {exc}\n".encode())
        raise


def _lower(which, value):
    """Lower the soft and hard limit (never raise them: that would fail, and is not wanted)."""
    hard = resource.getrlimit(which)[1]
    new_hard = value + 1 if which == resource.RLIMIT_CPU else value  # SIGXCPU before SIGKILL
    if hard != resource.RLIM_INFINITY:
        value, new_hard = min(value, hard), min(new_hard, hard)
    resource.setrlimit(which, (value, new_hard))


def _collect(patterns):
    """The work dir's files named in ``patterns`` (exact names, or ``*.ext`` suffixes).

    Only plain names (letters, digits, ``_$.-``): they travel as keys of the verdict.
    """
    names = []
    for pattern in patterns:
        if pattern.startswith("*"):
            names += sorted(n for n in os.listdir(".") if n.endswith(pattern[1:]))
        else:
            names.append(pattern)
    return [n for n in names if n.strip(_NAME_CHARS) == "" and os.path.isfile(n)
            and not os.path.islink(n)]


def _drain(fd):
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def run_program_job(job, cfg):
    """Run ``job["exec"]`` in this process (the job's); never returns."""
    _signal.signal(2, _signal.SIG_DFL)  # pid 1 takes a signal only where it has a handler
    driver = _Driver(job, cfg)
    _emit(b"start")
    try:
        driver.write_files()
        spec = driver.spec
        if spec["step"] == "compile":
            driver.compile()
        elif spec.get("check") is None or driver.step(spec["check"], spec["check_timeout_s"]):
            driver.run_calls() if spec["mode"] == "calls" else driver.run_stdin()
    except OSError as exc:
        _emit(b"setup", f"{type(exc).__name__}: {exc}")
        os._exit(70)
    _emit(b"done")
    os._exit(0)
