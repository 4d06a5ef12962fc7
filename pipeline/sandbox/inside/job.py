"""The job side of the harness: runs the solution and the tests in the job's process.

``spawn`` creates that process (fresh namespaces, limits, seccomp); this module then runs the
untrusted code and reports on the job's event channel: a start event, one ``ok`` per passed
assertion, exceptions, and ``done`` once the tests finished.
"""

import builtins
import ctypes
import gc
import marshal
import operator
import os
import resource
import sys
import types

from wire import field

_PLAIN_SCALARS = frozenset([bool, int, float, complex, str, bytes, type(None)])
_PLAIN_CONTAINERS = frozenset([list, tuple, set, frozenset, dict])
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: the type was created by a class statement
# Captured before any untrusted code runs: a solution may rebind the names, not these objects.
_AssertionError, _BaseException, _SystemExit, _MemoryError = (
    AssertionError, BaseException, SystemExit, MemoryError)
_write, _exit, _type, _loads = os.write, os._exit, type, marshal.loads
_getrusage, _RUSAGE_SELF, _read = resource.getrusage, resource.RUSAGE_SELF, os.read


class _Job:
    """State of the running job, reached by the helpers the rewritten asserts call."""

    ev_fd = -1
    nonce = ""  # events without it are ignored: a bare write to the channel cannot forge a pass
    ok_line = b""  # the event of a passed assertion, built once per job
    reason = ""


def _emit(kind, *fields):
    """One event line: nonce, kind, base64 fields (no json, see the module docstring)."""
    _write(_Job.ev_fd, b"\t".join([_Job.nonce, kind] + [field(f) for f in fields]) + b"\n")


def bind_channel(ev_fd, nonce):
    """Send this process's events to ``ev_fd``, marked with the job's ``nonce``."""
    _Job.ev_fd, _Job.nonce, _Job.ok_line = ev_fd, nonce, nonce + b"\tok\n"


def report_setup_error(ev_fd, nonce, exc):
    """The job's process could not be set up (the sandbox's fault, not the job's)."""
    bind_channel(ev_fd, nonce)
    _emit(b"setup", f"{_type(exc).__name__}: {exc}")


class _Snap:
    """What ``run_job`` restores once the solution ran; taken in the server (``take_snapshots``)."""

    snapshots = ()  # (target, its attributes before any solution ran, its live dict)
    dict_version = None  # see _dict_version_reader


def _is_numpy_value(value, t):
    """numpy scalars and non-object arrays: their types are static C types (no Python class can
    be one, and their ``__module__`` cannot be reassigned) and they hold raw numbers, not objects
    with their own ``__eq__``."""
    if t.__flags__ & _HEAPTYPE or t.__module__ != "numpy":
        return False
    dtype = getattr(value, "dtype", None)
    return dtype is not None and dtype.kind != "O"


def _is_plain(value, numpy=True):
    """True when the value is built only from exact builtin types (no subclasses, no user types;
    numpy scalars and non-object arrays count as builtin unless ``numpy`` is False)."""
    if _type(value) in _PLAIN_SCALARS:  # the common case, without the walk below
        return True
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        t = _type(v)
        if t in _PLAIN_SCALARS or (numpy and _is_numpy_value(v, t)):
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


def _af_exact(value):
    """For test programs that print a value for the host (``arenaforge.stages.verification.augment``): whether it is
    built only from exact builtin types, numpy excluded (what any assertion of a literal
    accepts)."""
    return _is_plain(value, numpy=False)


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
    chunks = _loaded(job["chunks"])  # before any untrusted code runs
    namespace, sources, _ = _load_solution(job, job["lines"])
    if _run_chunks(chunks, namespace, sources):
        _emit(b"done")
    _flush_and_exit()


def run_tests(job, cfg, first, ack_fd):
    """A suite's tests ``first..`` one after another in this process (see ``suite``).

    The solution runs once; each test then runs as a single job's would, in the solution's
    namespace as the solution left it (names a test binds are undone after it, builtins too,
    and the files it left in the work dir (and ``/tmp`` in isolated modes) are removed), after a
    ``t <i>`` event and the supervisor's ack of it on ``ack_fd`` (output is flushed before each
    event, so the supervisor can split stdout and stderr by test). Once this process has used
    ``cpu_budget_s`` of CPU it ends with ``yield <i>`` before test ``i``, to be started afresh
    there. Never returns.
    """
    suites = job["suites"]
    chunks = [_loaded(s["chunks"]) if i >= first else () for i, s in enumerate(suites)]
    namespace, sources, snapshots = _load_solution(job, suites[first]["lines"])
    saved = dict(namespace)
    versions = _versions(snapshots)
    budget = float(job.get("cpu_budget_s", 0.25))
    # degraded: the work dir is the worker's own, /tmp the host's (left alone)
    tmp_dirs = (cfg["work_dir"], "/tmp") if cfg["isolated"] else (cfg["work_dir"],)
    for i in range(first, len(suites)):
        _flush()
        if i > first and _cpu_seconds() > budget:
            _emit(b"yield", i)
            _exit(0)
        _emit(b"t", i)
        if not _read(ack_fd, 1):
            _exit(0)  # the supervisor is gone
        sources["<tests>"] = suites[i]["lines"]
        if _run_chunks(chunks[i], namespace, sources):
            _emit(b"done")
        if namespace != saved:
            namespace.clear()
            namespace.update(saved)
        if versions is None or _versions(snapshots) != versions:
            _restore_builtins(snapshots)
        for path in tmp_dirs:  # what a test wrote is not the next test's
            _empty(path)
        try:
            os.chdir(tmp_dirs[0])
        except OSError:
            pass
    _flush()
    _emit(b"end")
    _exit(0)


def _empty(path):
    """Remove what is in ``path`` (a tmpfs of this job's own), as far as it can."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, 0o700)
                _empty(entry.path)
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass


def _cpu_seconds():
    usage = _getrusage(_RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _loaded(chunks):
    return [(kind, _loads(code)) for kind, code in chunks]


def _load_solution(job, lines):
    """Compile and run the solution as ``__main__``; (namespace, sources, snapshots).

    Reports and exits when it does not compile or raises.
    """
    sources = {"<solution>": job["solution"].splitlines(), "<tests>": lines}
    try:
        solution = compile(job["solution"], "<solution>", "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        _report(exc, "compile", sources)
        _exit(0)
    snapshots = _Snap.snapshots
    uses_unittest = any("unittest" in line for s in job.get("suites", [{"lines": lines}])
                        for line in s["lines"])
    if "unittest" not in sys.modules and uses_unittest:
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
    namespace.update(__af_cmp=_af_cmp, __af_plain=_af_plain, __af_assert=_af_assert,
                     __af_exact=_af_exact)
    return namespace, sources, snapshots


def _run_chunks(chunks, namespace, sources):
    """Run one test's statements; True when all ran (an assert's failure does not stop it)."""
    for kind, code in chunks:
        try:
            exec(code, namespace)  # noqa: S102
        except _AssertionError as exc:
            _report(exc, "tests", sources)
            if kind != "assert":
                return False
        except _BaseException as exc:
            _report(exc, "tests", sources)
            if kind != "assert" or isinstance(exc, (_SystemExit, _MemoryError)):
                return False
    return True


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


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except _BaseException:
            pass


def _flush_and_exit():
    _flush()
    _exit(0)


def take_snapshots():
    """In the server, after its preloads: what ``run_job`` restores once the solution ran."""
    snapshots = [_snapshot(builtins)]
    if "unittest" in sys.modules:
        snapshots.append(_snapshot(sys.modules["unittest"].TestCase))
    _Snap.snapshots = tuple(snapshots)
    _Snap.dict_version = _dict_version_reader()


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
    read = _Snap.dict_version
    return None if read is None else tuple(read(live) for _, _, live in snapshots)

