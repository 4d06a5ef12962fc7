"""Framing between the host supervisor and the in-sandbox server (stdlib only).

Host to sandbox: length-prefixed ``marshal`` (the host is trusted, and marshal needs no import).
Sandbox to host: flat ``key tag base64`` lines, because the host must never ``marshal.loads``
bytes a compromised sandbox could craft, and ``json`` would cost every per-exec start an import
of ``re`` and ``enum``.
"""

import binascii
import marshal
import os
import struct

_b64 = binascii.b2a_base64


def _read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        part = os.read(fd, n - len(buf))
        if not part:
            return None
        buf += part
    return buf


def read_frame(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    return marshal.loads(_read_exact(fd, struct.unpack(">I", head)[0]))


def field(value):
    return _b64(str(value).encode("utf-8", "replace"), newline=False)


def encode_verdict(verdict):
    """Flat ``key tag base64`` lines; nested dicts become ``outer.inner`` keys."""
    out = []
    for key, value in verdict.items():
        if isinstance(value, dict):
            out += [b"%s.%s\ts\t%s" % (key.encode(), k.encode(), field(v)) for k, v in value.items()]
        elif value is not None:
            tag = {bool: b"b", int: b"i", float: b"f"}.get(type(value), b"s")
            out.append(b"%s\t%s\t%s" % (key.encode(), tag, field(int(value) if tag == b"b" else value)))
    return b"\n".join(out)


def decode_verdict(data):
    """The inverse of ``encode_verdict`` (used on the host: never ``marshal`` from a sandbox)."""
    verdict = {}
    for line in data.split(b"\n"):
        if not line:
            continue
        key, tag, payload = line.split(b"\t")
        text = binascii.a2b_base64(payload).decode("utf-8", "replace")
        value = {b"b": lambda t: t == "1", b"i": int, b"f": float, b"s": str}[tag](text)
        outer, _, inner = key.decode().partition(".")
        if inner:
            verdict.setdefault(outer, {})[inner] = value
        else:
            verdict[outer] = value
    return verdict


def write_frame(fd, verdict):
    data = encode_verdict(verdict)
    os.write(fd, struct.pack(">I", len(data)) + data)


def new_summary():
    """What the events of one job (or one suite test) add up to; see ``add_event``."""
    return {"ok": 0, "failed": 0, "first_failure": None, "first_error": None, "done": False,
            "started": False, "setup": None}


def parse_event(line, nonce):
    """``(kind, fields)`` of one event line of the job with ``nonce``; None for a line that is
    not (not written by the harness code of this job, or garbled)."""
    parts = line.split(b"\t")
    if parts[0] != nonce or len(parts) < 2:
        return None
    try:
        return parts[1], [binascii.a2b_base64(f).decode("utf-8", "replace") for f in parts[2:]]
    except binascii.Error:
        return None


def add_event(summary, kind, fields):
    """Count one event of the job's own harness code into ``summary`` (``new_summary``)."""
    if kind == b"ok":
        summary["ok"] += 1
    elif kind == b"exc" and len(fields) == 4:
        ev = dict(zip(("phase", "kind", "name", "msg"), fields))
        summary["failed"] += ev["phase"] == "tests"
        key = "first_failure" if ev["kind"] == "assertion" else "first_error"
        summary[key] = summary[key] or ev
    elif kind in (b"done", b"start"):
        summary["done" if kind == b"done" else "started"] = True
    elif kind == b"setup" and fields:
        summary["setup"] = fields[0]


_RUN_FIELDS = ("code", "reason", "wall_s", "stderr", "note", "value")


def add_program_event(summary, kind, fields):
    """Count one event of a program job's driver (``programs``) into ``summary``.

    ``c``: the compile or check step (``summary["c"]``); ``a``: an artifact's base64 chunks,
    joined (``summary["a"][name]``, executable flags in ``summary["x"]``); ``r``: a test's
    outcome (``summary["r<i>"]``); ``o``: its stdout, joined (``summary["o<i>"]``). The
    others as ``add_event`` counts them.
    """
    if kind == b"c" and len(fields) == 5:
        summary["c"] = dict(zip(("code", "reason", "wall_s", "stdout", "stderr"), fields))
    elif kind == b"a" and len(fields) == 3:
        name, executable, chunk = fields
        artifacts = summary.setdefault("a", {})
        artifacts[name] = artifacts.get(name, "") + chunk
        summary.setdefault("x", {})[name] = executable
    elif kind == b"r" and len(fields) == 7 and fields[0].isdigit():
        summary["r" + fields[0]] = dict(zip(_RUN_FIELDS, fields[1:]))
    elif kind == b"o" and len(fields) == 2 and fields[0].isdigit():
        key = "o" + fields[0]
        summary[key] = summary.get(key, "") + fields[1]
    else:
        add_event(summary, kind, fields)


# ----------------------------------------------------------------------------- inside the job (C2)
