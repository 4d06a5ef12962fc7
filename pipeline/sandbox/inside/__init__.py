"""Code that runs inside the sandbox; bound read-only at /opt/arenaforge, entry ``run.py``.

Stdlib only, imported there as top-level modules (``server``, ``spawn``, ``job``, ``wire``); the host imports
only ``wire`` (to decode verdicts).
"""
