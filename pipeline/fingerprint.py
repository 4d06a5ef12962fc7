"""What a stage's rows depend on, hashed: its config, its inputs, its code and its prompts.

The runner skips a complete stage only when every part matches, and when one does not it says
which (``StageCounts.recomputed``), so an upgrade that changes a prompt or a parser recomputes
the stages that use it, and the stages downstream of those through their changed inputs, and
nothing else.

The code of a stage is the source of its module and of every module of the same packages it
imports, transitively (top-level and function-level imports both: stages import heavy things
lazily). Infrastructure modules that do not shape rows are left out (``_NOT_ROW_CODE``).

Example::

    >>> done = {"fingerprint_parts": {"config": "a", "code": {"stages/x.py": "1"}}}
    >>> explain_change(done, {"config": "a", "code": {"stages/x.py": "2"}})
    'code changed: stages/x.py'
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent

# The stage contract, the package version and the machinery that runs stages and stores their
# output: changing them changes how stages are run or described, not the rows they make.
_NOT_ROW_CODE = frozenset(f"arenaforge.pipeline{m}" for m in (
    "", ".stage", ".store", ".funnel", ".context", ".runner", ".executors", ".shards",
    ".progress"))

def digest(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _module_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def import_statements(path: Path, module: str) -> list[tuple[str, tuple[str, ...]]]:
    """Every import statement anywhere in ``path`` (the source of ``module``), top level or
    inside a function, as ``(module, names)`` in absolute form: ``import a.b`` is
    ``("a.b", ())``, ``from .c import d`` in ``a.b`` is ``("a.c", ("d",))``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.append((base, tuple(alias.name for alias in node.names)))
    return found


def _imports(path: Path, module: str) -> set[str]:
    """Modules named by the import statements anywhere in ``path`` (module ``module``)."""
    found: set[str] = set()
    for base, names in import_statements(path, module):
        found.add(base)
        # `from pkg import submodule` imports a module, not only a name
        found.update(f"{base}.{name}" for name in names)
    return found


@functools.cache
def code_digests(module: str) -> Mapping[str, str]:
    """``{relative path: sha256}`` of ``module`` and the modules it imports from its packages.

    Followed packages: ``arenaforge`` and the module's own top-level package (a test's toy
    stage lives elsewhere).
    """
    packages = {"arenaforge", module.split(".")[0]}
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or name.split(".")[0] not in packages:
            continue
        path = _module_file(name)
        if path is None:
            continue
        seen[name] = path
        if name in _NOT_ROW_CODE and name != module:
            continue  # neither hashed nor followed
        todo.extend(_imports(path, name) - set(seen))
        # a submodule runs its package's __init__ first
        parent = name.rpartition(".")[0]
        if parent:
            todo.append(parent)
    out = {}
    for name, path in seen.items():
        if name in _NOT_ROW_CODE and name != module:
            continue
        try:
            key = str(path.relative_to(_ROOT))
        except ValueError:
            key = str(path)
        out[key] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return dict(sorted(out.items()))


def prompt_digests(patterns: Iterable[str]) -> dict[str, str]:
    """``{template: sha256}`` of the prompt templates matching ``patterns``: globs of template
    names (``arenaforge.pipeline.prompts``), keyed by name, or absolute paths (a stage outside
    the project), keyed by path. A glob that matches nothing is an error."""
    from arenaforge.pipeline.prompts import template_files

    out = {}
    for pattern in patterns:
        if Path(pattern).is_absolute():
            matches = sorted(Path(pattern).parent.glob(Path(pattern).name))
            if not matches:
                raise FileNotFoundError(f"prompt template {pattern!r} matches no file")
            out.update({str(p): hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in matches})
        else:
            out.update({p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16]
                        for p in template_files([pattern])})
    return dict(sorted(out.items()))


def explain_change(done: Mapping[str, Any] | None, now: Mapping[str, Any]) -> str:
    """Why a stage with fingerprint parts ``now`` is recomputed.

    Args:
        done: the stage's last ``_SUCCESS`` record (None: it never completed here).
        now: this run's fingerprint parts.
    """
    if not done:
        return "not complete"
    before = done.get("fingerprint_parts")
    if not before:
        return "completed by an older arenaforge (no fingerprint parts)"
    reasons = []
    for part in ("code", "prompts"):
        old, new = before.get(part) or {}, now.get(part) or {}
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        if changed:
            shown = ", ".join(changed[:3]) + (f" (+{len(changed) - 3})" if len(changed) > 3 else "")
            reasons.append(f"{'code' if part == 'code' else 'prompt'} changed: {shown}")
    if before.get("config") != now.get("config"):
        reasons.append("config changed")
    old_up, new_up = before.get("upstream") or {}, now.get("upstream") or {}
    changed_up = sorted(k for k in set(old_up) | set(new_up) if old_up.get(k) != new_up.get(k))
    if changed_up:
        reasons.append(f"input changed: {', '.join(changed_up)}")
    elif before.get("input") != now.get("input"):
        reasons.append("input changed")
    return "; ".join(reasons) or "files missing or corrupt"
