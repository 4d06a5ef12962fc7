"""Code blocks of a chat answer, found by a CommonMark parser, and the functions they define.

A regex over triple backticks breaks on fences inside list items (indented), on ``~~~`` fences
and on four-backtick fences that contain a ```` ``` ```` line; ``markdown-it-py`` (already a
dependency of ``rich``) parses them as CommonMark does, including a fence left open because the
answer hit its token limit (it runs to the end of the text).

Fence tags name languages: the sandbox's languages by their catalog's ids and fences
(``cpp`` for ``c++``/``cxx``/``cc``), plus a few others an answer shows beside its code (shell,
SQL). ``function_names`` finds the top-level functions a program in any of the sandbox's
languages defines (its entry points), by a scan of the text with comments and literals blanked.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from functools import cache

from arenaforge.pipeline.sandbox.languages.catalog import LANGUAGES

# Fence tags beyond the catalog's own that answers use for its languages.
_MORE_FENCES = {"python": ("py3",), "javascript": ("jsx",), "typescript": ("tsx",),
                "cpp": ("hpp",), "c": ("h",)}
# Info strings that name the same language; the first spelling of each group (a language id
# for the sandbox's languages) is what ``canonical_language`` returns.
_ALIASES = {
    **{lang.id: tuple(dict.fromkeys((lang.id, *lang.fences, *_MORE_FENCES.get(lang.id, ()))))
       for lang in LANGUAGES.values()},
    "csharp": ("csharp", "c#", "cs"),
    "shell": ("shell", "bash", "sh", "zsh", "console"),
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


# -- entry points in every language -----------------------------------------------------------

_NOISE_C = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                      re.DOTALL)
_NOISE_JS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''
                       r'|`(?:\\.|[^`\\])*`', re.DOTALL)
_NOISE_GO = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|`[^`]*`|\'(?:\\.|[^\'\\\n])*\'',
                       re.DOTALL)
_NOT_FUNCTIONS = frozenset({"if", "for", "while", "switch", "return", "sizeof", "catch", "main",
                            "else", "do", "new", "delete", "defined", "static_assert"})
# A C/C++/Java definition: a name, its parameter list, maybe qualifiers, then its body.
_C_DEF = re.compile(r"\b([A-Za-z_]\w*)\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*"
                    r"(?:const\s*)?(?:noexcept\s*)?(?:throws\s+[\w.,\s]+)?(?:->\s*[^{;]+)?\{")
_DEPTH = {"c": 0, "cpp": 0, "java": 1}
_GO_DEF = re.compile(r"^func\s+([A-Za-z_]\w*)\s*[\[(]", re.MULTILINE)
_RUST_DEF = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?(?:const\s+|async\s+|unsafe\s+)*fn\s+"
                       r"([A-Za-z_]\w*)")
_JS_DEFS = (re.compile(r"\b(?:export\s+)?(?:async\s+)?function\s*\*?\s*([A-Za-z_$][\w$]*)"),
            re.compile(r"\b(?:export\s+)?(?:const|let|var)\s+([A-Za-z_$][\w$]*)\s*(?::[^=]+)?="
                       r"\s*(?:async\s+)?(?:function\b|\([^()]*\)\s*(?::[^=]+)?=>|"
                       r"[A-Za-z_$][\w$]*\s*=>)"))


def _blank(pattern: re.Pattern, code: str) -> str:
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), code)


def _depth_at(text: str) -> list[int]:
    """The brace depth before each character of ``text`` (comments and literals blanked)."""
    depth, out = 0, []
    for ch in text:
        out.append(depth)
        depth += (ch == "{") - (ch == "}")
    return out


def function_names(code: str | None, language: str | None) -> list[str]:
    """The top-level functions ``code`` defines, in order (``main`` left out): for Java, the
    methods of its top-level classes; for JavaScript and TypeScript, function declarations and
    functions bound to a top-level ``const``/``let``/``var``. A scan, not a parser: enough to
    name a program's entry points, and never executed.

    >>> function_names("int helper(int x) { return x; }\\nlong long f(std::vector<int> v) {\\n"
    ...                "  if (v.size()) { return helper(1); } return 0; }\\nint main() {}", "cpp")
    ['helper', 'f']
    >>> function_names("class Solution {\\n  public static long f(List<Long> xs) { return 0; }\\n}",
    ...                "java")
    ['f']
    >>> function_names("const add = (a, b) => a + b;\\nfunction mul(a, b) { return a * b; }", "js")
    ['add', 'mul']
    >>> function_names("def f(x):\\n    return x\\nclass C:\\n    pass", "python")
    ['f']
    """
    lang = canonical_language(language) or "python"
    if not code:
        return []
    found: list[str] = []
    if lang == "python":
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return []
        found = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef,
                                                               ast.AsyncFunctionDef))]
    elif lang in _DEPTH:
        text = _blank(_NOISE_C, code)
        depth = _depth_at(text)
        for m in _C_DEF.finditer(text):
            name = m.group(1)
            if depth[m.start()] == _DEPTH[lang] and name not in _NOT_FUNCTIONS:
                head = text[max(text.rfind(c, 0, m.start()) for c in ";{}") + 1:m.start()]
                if "=" not in head and head.strip() not in ("", "new", "return"):
                    found.append(name)
    elif lang == "go":
        found = _GO_DEF.findall(_blank(_NOISE_GO, code))
    elif lang == "rust":
        text = _blank(_NOISE_C, code)
        depth = _depth_at(text)
        found = [m.group(1) for m in _RUST_DEF.finditer(text) if depth[m.start()] == 0]
    elif lang in ("javascript", "typescript"):
        text = _blank(_NOISE_JS, code)
        depth = _depth_at(text)
        hits = sorted((m.start(), m.group(1)) for form in _JS_DEFS for m in form.finditer(text)
                      if depth[m.start()] == 0)
        found = [name for _, name in hits]
    return [n for n in dict.fromkeys(found) if n != "main"]
