"""Prompt templates of the stages: read by file name from ``pipeline/prompts``, filled in one pass.

The directory is the one the stage fingerprint hashes (``arenaforge.pipeline.fingerprint.PROMPTS_DIR``), so
a template a protocol fills is a template its stage's ``prompts`` globs cover.
"""

from __future__ import annotations

import re
from functools import cache

from arenaforge.pipeline.fingerprint import PROMPTS_DIR as PROMPTS

_SLOT = re.compile(r"\{([a-z_]+)\}")


@cache
def load_template(name: str) -> str:
    """The template ``pipeline/prompts/<name>`` (e.g. ``judge_pairwise.txt``), stripped.

    Raises:
        FileNotFoundError: no such template.
    """
    path = PROMPTS / name
    if not path.is_file():
        raise FileNotFoundError(f"prompt template {path} not found")
    return path.read_text(encoding="utf-8").strip()


def fill(template: str, **slots: str) -> str:
    """Fill ``{slot}`` placeholders in one pass; braces that name no given slot stay as they are.

    One pass, not ``str.format`` or repeated ``str.replace``: requests and answers contain
    braces, and an answer that contains the text ``{answer_b}`` must not receive the other
    answer.

    >>> fill("Q: {instruction} A: {answer} {x}", instruction="{answer}", answer="x")
    'Q: {answer} A: x {x}'
    """
    return _SLOT.sub(lambda m: slots[m.group(1)] if m.group(1) in slots else m.group(0),
                     template)
