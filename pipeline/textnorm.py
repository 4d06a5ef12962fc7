"""Text normalisation shared by every stage, and the instruction id derived from it."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_WS = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """NFKC-normalise, strip and collapse runs of whitespace to one space.

    >>> normalize_text("  Write\\ta  function\\n")
    'Write a function'
    """
    return _WS.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def instruction_id(text: str) -> str:
    """Hex sha256 of the normalised instruction: the join key of every stage."""
    return hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest()
