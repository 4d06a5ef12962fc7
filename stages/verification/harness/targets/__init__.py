"""One target per language: type names, literals, declarations and the calls harness.

``target(language)`` takes an id or a display name (``C++``).
"""

from __future__ import annotations

import functools

from arenaforge.pipeline.sandbox.languages.catalog import resolve_language
from arenaforge.stages.verification.harness.targets.base import Target


@functools.cache
def target(language: str) -> Target:
    """The target of a language (id or name).

    Raises:
        UnknownLanguage: The name is not a language.
    """
    from arenaforge.stages.verification.harness.targets import (
        c,
        cpp,
        go,
        java,
        javascript,
        python,
        rust,
    )

    lang = resolve_language(language)
    return {"python": python.PythonTarget, "cpp": cpp.CppTarget, "c": c.CTarget,
            "javascript": javascript.JavaScriptTarget,
            "typescript": javascript.TypeScriptTarget, "java": java.JavaTarget,
            "go": go.GoTarget, "rust": rust.RustTarget}[lang]()


__all__ = ["Target", "target"]
