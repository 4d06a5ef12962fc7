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
import sys
import types

from wire import field

_PLAIN_SCALARS = frozenset([bool, int, float, complex, str, bytes, type(None)])
_PLAIN_CONTAINERS = frozenset([list, tuple, set, frozenset, dict])
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: the type was created by a class statement
# Captured before any untrusted code runs: a solution may rebind the names, not these objects.
_AssertionError, _BaseException, _SystemExit, _MemoryError = (
    AssertionError, BaseException, SystemExit, MemoryError)
_write, _exit, _type = os.write, os._exit, type


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
    snapshots = _Snap.snapshots
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

