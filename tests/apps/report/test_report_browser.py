"""report.html in headless Chromium: renders non-blank and logs no console errors.

Needs the ``chromium`` apt package (skipped when absent). The detector itself is checked on a
page that does log an error, so a silent Chromium cannot pass the test.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from arenaforge.pipeline.apps.report import write_report

from tests.apps.report.report_data import FUNNEL, RATINGS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed "
                                "(apt-get install -y chromium)")
CONSOLE = re.compile(r":CONSOLE[^\]]*\]\s*(.*)")


def screenshot(page: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """Load ``page`` in headless Chromium; return the screenshot and console messages."""
    shot = tmp_path / f"{page.stem}.png"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", f"--user-data-dir={tmp_path / ('profile-' + page.stem)}",
           "--enable-logging=stderr", "--v=0", "--window-size=1100,3000",
           f"--screenshot={shot}", page.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert shot.is_file(), f"no screenshot; chromium said:\n{proc.stderr[-2000:]}"
    return shot, CONSOLE.findall(proc.stderr)


def ink(png: Path) -> float:
    """Share of pixels that are not (near) white."""
    from PIL import Image

    pixels = np.asarray(Image.open(png).convert("L"), dtype=float)
    return float((pixels < 240).mean())


def test_console_detector_sees_errors(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<html><body><p>x</p><script>console.error('boom'); nope();</script>"
                    "</body></html>")
    _, messages = screenshot(page, tmp_path)
    assert any("boom" in m for m in messages) and any("nope" in m for m in messages)


def test_report_renders_in_chromium(tmp_path, audit_metrics):
    report = write_report(tmp_path / "audit", audit_metrics, RATINGS, FUNNEL)
    shot, messages = screenshot(report, tmp_path)
    assert messages == []
    assert ink(shot) > 0.03  # text, tables and five plots, not a blank page
    blank = tmp_path / "blank.html"
    blank.write_text("<html><body></body></html>")
    assert ink(screenshot(blank, tmp_path)[0]) < 0.001
