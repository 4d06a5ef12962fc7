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


def instruction_id(text: str, language: str | None = None, task_kind: str | None = None) -> str:
    """Hex sha256 of the normalised instruction: the join key of every stage.

    A task in another language or of another kind than a Python function is another task,
    even in the same words (a file may ask the same thing in C++ and in Java), so its id also
    covers its language id and kind; a Python function (or a row that names neither) keeps
    the id of its text alone.

    >>> instruction_id("Add two numbers.") == instruction_id(" Add two  numbers. ", "python")
    True
    >>> instruction_id("Add two numbers.") == instruction_id("Add two numbers.", "cpp")
    False
    """
    key = normalize_text(text)
    language, task_kind = language or "python", task_kind or "function"
    if (language, task_kind) != ("python", "function"):
        key = f"{key}\x00{language}\x00{task_kind}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()
