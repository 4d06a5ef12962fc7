"""Prompt templates: text files beside the code that fills them, loaded by name, filled in one pass.

A stage family keeps the templates its stages fill in a ``prompts/`` folder beside its modules
(``stages/arena/prompts/judge_pairwise.txt``, ``stages/verification/prompts/repair_*.txt``);
the applications keep theirs in ``pipeline/apps/prompts/``. A template is named by its file
name, which is unique across those folders (its stage's name is its prefix), so a stage
declares the templates it fills as globs of names (``StageSpec.prompts = ("judge_*.txt",)``)
and their text becomes part of its resume fingerprint
(``arenaforge.pipeline.fingerprint.prompt_digests``): a changed template recomputes the stages
that fill it.

Example::

    >>> fill(load_template("judge_system.txt"), x="y") == load_template("judge_system.txt")
    True
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

_SLOT = re.compile(r"\{([a-z_]+)\}")
# The packages whose ``prompts/`` folders (their own and their subpackages') hold templates.
_HOLDERS = ("arenaforge.stages", "arenaforge.pipeline.apps")


@cache
def template_dirs() -> tuple[Path, ...]:
    """Every folder of templates, in a fixed order."""
    dirs: list[Path] = []
    for package in _HOLDERS:
        spec = importlib.util.find_spec(package)
        for root in map(Path, spec.submodule_search_locations or ()):
            dirs += [d for d in (root / "prompts", *sorted(root.glob("*/prompts"))) if d.is_dir()]
    return tuple(dirs)


@cache
def _index() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in template_dirs():
        for path in sorted(folder.glob("*.txt")):
            if path.name in found:
                raise RuntimeError(f"prompt template {path.name!r} is in two folders: "
                                   f"{found[path.name].parent} and {folder}")
            found[path.name] = path
    return found


def template_path(name: str) -> Path:
    """Where the template ``name`` (``judge_pairwise.txt``) lives.

    Raises:
        FileNotFoundError: no template folder holds it.
    """
    path = _index().get(name)
    if path is None:
        raise FileNotFoundError(f"prompt template {name!r} not found in "
                                f"{[str(d) for d in template_dirs()]}")
    return path


def template_files(patterns: Iterable[str]) -> list[Path]:
    """The templates whose names match the globs ``patterns``, each glob matching at least one.

    Raises:
        FileNotFoundError: a glob that matches no template.
    """
    out: list[Path] = []
    for pattern in patterns:
        matches = [p for name, p in sorted(_index().items()) if Path(name).match(pattern)]
        if not matches:
            raise FileNotFoundError(f"prompt template {pattern!r} matches no file in "
                                    f"{[str(d) for d in template_dirs()]}")
        out += [p for p in matches if p not in out]
    return out


@cache
def load_template(name: str) -> str:
    """The text of the template ``name`` (e.g. ``judge_pairwise.txt``), stripped.

    Raises:
        FileNotFoundError: no such template.
    """
    return template_path(name).read_text(encoding="utf-8").strip()


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
