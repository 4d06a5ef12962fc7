"""Code blocks of a chat answer, found by a CommonMark parser.

A regex over triple backticks breaks on fences inside list items (indented), on ``~~~`` fences
and on four-backtick fences that contain a ```` ``` ```` line; ``markdown-it-py`` (already a
dependency of ``rich``) parses them as CommonMark does, including a fence left open because the
answer hit its token limit (it runs to the end of the text).
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache

# Info strings that name the same language; the instruction's ``language`` column uses the
# first spelling of each group.
_ALIASES = {
    "python": ("python", "py", "python3", "py3"),
    "javascript": ("javascript", "js", "node", "jsx"),
    "typescript": ("typescript", "ts", "tsx"),
    "cpp": ("cpp", "c++", "cxx", "cc", "hpp"),
    "csharp": ("csharp", "c#", "cs"),
    "shell": ("shell", "bash", "sh", "zsh", "console"),
    "rust": ("rust", "rs"),
    "go": ("go", "golang"),
    "java": ("java",),
    "c": ("c", "h"),
    "sql": ("sql",),
}
_CANONICAL = {alias: name for name, aliases in _ALIASES.items() for alias in aliases}


@dataclasses.dataclass(frozen=True)
class CodeBlock:
    """One fenced block: its language tag (lower case, ``""`` if none), code, and whether the
    closing fence was there (``False`` when the answer was cut inside the block)."""

    language: str
    code: str
    closed: bool


def canonical_language(name: str | None) -> str:
    """``"Python3"`` -> ``"python"``; unknown names are lower-cased unchanged.

    >>> canonical_language("Py"), canonical_language("C++"), canonical_language(None)
    ('python', 'cpp', '')
    """
    key = (name or "").strip().lower()
    return _CANONICAL.get(key, key)


@cache
def _parser():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")


def code_blocks(text: str) -> list[CodeBlock]:
    """All fenced code blocks of a Markdown text, in order.

    >>> [(b.language, b.code, b.closed) for b in code_blocks("x\\n```py\\nprint(1)\\n```\\n")]
    [('python', 'print(1)\\n', True)]
    >>> code_blocks("```python\\ndef f(:")[0].closed
    False
    """
    lines = text.splitlines()
    blocks = []
    for token in _parser().parse(text):
        if token.type != "fence":
            continue
        language = canonical_language(token.info.split()[0] if token.info.strip() else "")
        last = lines[token.map[1] - 1].strip() if token.map and token.map[1] - 1 < len(lines) else ""
        closed = token.map is not None and token.map[1] - token.map[0] >= 2 and \
            last.startswith(token.markup) and set(last) <= set(token.markup[0])
        blocks.append(CodeBlock(language=language, code=token.content, closed=closed))
    return blocks


def extract_code(text: str, language: str | None = None) -> str | None:
    """The code of an answer: its fenced blocks in ``language`` joined by a blank line.

    Blocks tagged with another language are skipped when any block is in ``language`` or
    untagged (an answer that shows a shell command before its Python keeps only the Python).
    With no ``language``, or when every block is tagged otherwise, all blocks are kept.

    Returns:
        The joined code, or ``None`` when the answer has no fenced block at all (the caller
        records that; an answer of bare prose is not code).

    >>> extract_code("Run:\\n```sh\\npip x\\n```\\nthen\\n```python\\nimport x\\n```", "python")
    'import x\\n'
    >>> extract_code("No code here.") is None
    True
    """
    blocks = [b for b in code_blocks(text) if b.code.strip()]
    if not blocks:
        return None
    wanted = canonical_language(language)
    if wanted:
        matching = [b for b in blocks if b.language in (wanted, "")]
        blocks = matching or blocks
    return "\n".join(b.code if b.code.endswith("\n") else b.code + "\n" for b in blocks)


def function_code(text: str, entry_point: str) -> str:
    """The code of an answer asked to write the function ``entry_point`` (a HumanEval problem):
    its Python or untagged fenced block that defines it, else the first such block, else the
    whole text (an answer that is a bare function body). A fence left open because the answer
    hit its token limit counts.

    >>> function_code("Use:\\n```py\\nf(1)\\n```\\nCode:\\n```python\\ndef f(x):\\n    return x\\n```", "f")
    'def f(x):\\n    return x\\n'
    >>> function_code("    return x", "f")
    '    return x'
    """
    blocks = [b.code for b in code_blocks(text) if b.language in ("", "python")]
    defines = re.compile(rf"\bdef\s+{re.escape(entry_point)}\s*\(")
    return next((b for b in blocks if defines.search(b)), blocks[0] if blocks else text)
