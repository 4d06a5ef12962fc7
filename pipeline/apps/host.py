"""The machine a bench ran on, as its card records it."""

from __future__ import annotations

import platform
import subprocess


def processor() -> str:
    """The CPU model (``lscpu``'s model name), for a card."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"
