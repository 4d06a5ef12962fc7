"""The languages the sandbox runs: ids, the names users write for them, how each is built and run.

Pure data and small pure functions; where the toolchains are on this machine is ``installed``'s
business. Each language names its files, its compile step (compiled languages) or syntax check
(interpreted ones), the command of one run, and the limits it needs that others do not (a
runtime that reserves far more address space than it uses, a start-up allowance).

Example::

    >>> resolve_language("C++"), resolve_language(" golang "), resolve_language("TS")
    ('cpp', 'go', 'typescript')
"""

from __future__ import annotations

import dataclasses
import re

# The ids, in the order every listing uses.
LANGUAGE_IDS = ("python", "cpp", "c", "javascript", "typescript", "java", "go", "rust")


class UnknownLanguage(ValueError):
    """A language name that is neither an id nor a known display name or alias."""


@dataclasses.dataclass(frozen=True)
class Language:
    """How one language is built and run in the sandbox.

    Attributes:
        id: The language id (``LANGUAGE_IDS``).
        display: The name shown to people (``C++``).
        aliases: Other names users write (case-insensitive).
        compiled: True when a compile step produces what runs (TypeScript: JavaScript).
        source_name: File name of the main source (Java: the public class decides).
        harness_name: File name of a second unit: the harness, where it must stay apart from
            the solution (Go: its own imports; Python: the solution is imported as module
            ``main``, so its ``if __name__ == "__main__":`` block does not run). Such a harness
            is what runs.
        artifacts: What a compile step leaves that the runs need (``*.class``: every class).
        native_memory: True when ``RLIMIT_AS`` can bound a run (a runtime that reserves large
            address space it never uses, the JVM, V8, Go's, is bounded by the memory cgroup
            and its own heap flag instead).
        startup_s: Allowance added to a run's time limit for the runtime's own start.
        fences: Markdown fence tags that mark this language's code.
    """

    id: str
    display: str
    aliases: tuple[str, ...]
    compiled: bool
    source_name: str
    harness_name: str | None = None
    artifacts: tuple[str, ...] = ()
    native_memory: bool = True
    startup_s: float = 0.05
    fences: tuple[str, ...] = ()


LANGUAGES: dict[str, Language] = {lang.id: lang for lang in (
    Language("python", "Python", ("py", "python3", "cpython"), compiled=False,
             source_name="main.py", harness_name="af_harness.py", startup_s=0.3,
             fences=("python", "py", "python3")),
    Language("cpp", "C++", ("c++", "cxx", "g++"), compiled=True, source_name="main.cpp",
             artifacts=("prog",), fences=("cpp", "c++", "cxx", "cc")),
    Language("c", "C", (), compiled=True, source_name="main.c", artifacts=("prog",),
             fences=("c",)),
    Language("javascript", "JavaScript", ("js", "node", "nodejs", "node.js"), compiled=False,
             source_name="main.js", native_memory=False, startup_s=0.3,
             fences=("javascript", "js", "node")),
    Language("typescript", "TypeScript", ("ts",), compiled=True, source_name="main.ts",
             artifacts=("main.js",), native_memory=False, startup_s=0.3,
             fences=("typescript", "ts")),
    Language("java", "Java", (), compiled=True, source_name="Main.java", artifacts=("*.class",),
             native_memory=False, startup_s=1.0, fences=("java",)),
    Language("go", "Go", ("golang",), compiled=True, source_name="main.go",
             harness_name="af_harness.go", artifacts=("prog",), native_memory=False,
             fences=("go", "golang")),
    Language("rust", "Rust", ("rs",), compiled=True, source_name="main.rs", artifacts=("prog",),
             fences=("rust", "rs")),
)}

_BY_NAME = {name: lang.id for lang in LANGUAGES.values()
            for name in (lang.id, lang.display.lower(), *lang.aliases)}


def resolve_language(name: str) -> str:
    """The language id for an id, display name or alias, case-insensitively.

    Raises:
        UnknownLanguage: The name is none of them; the message lists the ids.
    """
    if isinstance(name, str):
        found = _BY_NAME.get(name.strip().lower())
        if found is not None:
            return found
    raise UnknownLanguage(
        f"unknown language {name!r}: expected one of {', '.join(LANGUAGE_IDS)} "
        "(or a name such as C++, JavaScript, TypeScript, golang)")


def language(name: str) -> Language:
    """The ``Language`` for an id, display name or alias (see ``resolve_language``)."""
    return LANGUAGES[resolve_language(name)]


_JAVA_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                         re.DOTALL)
_JAVA_CLASS = re.compile(r"\b(public\s+)?(?:(?:final|abstract|static|strictfp)\s+)*"
                         r"(?:class|interface|enum|record)\s+([A-Za-z_$][\w$]*)")
_JAVA_MAIN = re.compile(r"\bstatic\s+(?:final\s+)?void\s+main\s*\(")


def java_classes(source: str) -> tuple[str | None, str | None]:
    """(the public top-level class, the last top-level class with a ``main``) of Java source.

    The first names the file (javac requires it); the second is what runs: with a harness
    appended after a solution, the harness's class. Comments and literals are blanked first
    so braces and words inside them do not count.
    """
    text = _JAVA_NOISE.sub(lambda m: " " * len(m.group()), source)
    depth, public, main_class, current = 0, None, None, None
    i = 0
    tops: list[tuple[int, str, bool]] = []  # (start, name, public) of top-level declarations
    for m in _JAVA_CLASS.finditer(text):
        tops.append((m.start(), m.group(2), bool(m.group(1))))
    mains = [m.start() for m in _JAVA_MAIN.finditer(text)]
    events = sorted([(pos, "class", name, pub) for pos, name, pub in tops]
                    + [(pos, "main", "", False) for pos in mains])
    for pos, kind, name, pub in events:
        depth += text.count("{", i, pos) - text.count("}", i, pos)
        i = pos
        if kind == "class" and depth == 0:
            current = name
            if pub and public is None:
                public = name
        elif kind == "main" and depth == 1 and current is not None:
            main_class = current
    return public, main_class
