"""The docs say what the code does: docs/ARCHITECTURE.md's stage graph is the one
`arenaforge graph configs/default.yaml` prints, so that a stage's new column cannot leave the
document behind.

The graph sits in the document between ``<!-- graph: ... -->`` and ``<!-- /graph -->``, as a
fenced block; when a stage changes, paste the command's output there.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "ARCHITECTURE.md"
GRAPH_BLOCK = re.compile(r"<!-- graph:[^\n]*-->\n```\n(.*?)```\n<!-- /graph -->", re.DOTALL)


def documented_graph(text: str) -> str:
    """The fenced graph between the markers (exactly one)."""
    blocks = GRAPH_BLOCK.findall(text)
    assert len(blocks) == 1, "docs/ARCHITECTURE.md needs one graph block between the markers"
    return blocks[0]


def test_the_architecture_graph_is_what_arenaforge_graph_prints():
    done = subprocess.run([sys.executable, "-m", "arenaforge.pipeline.cli", "graph",
                           "configs/default.yaml"], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, check=False, env={"COLUMNS": "400", "PATH": "/usr/bin"})
    assert done.returncode == 0, done.stderr
    assert documented_graph(ARCHITECTURE.read_text(encoding="utf-8")) == done.stdout, (
        "docs/ARCHITECTURE.md's stage graph is stale: paste the output of "
        "`arenaforge graph configs/default.yaml` between its graph markers")


def test_the_graph_block_is_read_between_its_markers():
    text = "x\n<!-- graph: c -->\n```\nmine  (model stage)\n```\n<!-- /graph -->\n```\ny\n```\n"
    assert documented_graph(text) == "mine  (model stage)\n"
