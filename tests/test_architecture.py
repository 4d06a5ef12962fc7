"""The house rules, checked from the source: where stages live, what they may import, no import
cycle, no generic top-level modules, no design document the project does not contain.

Imports are read with ``ast`` from every ``.py`` file under ``pipeline/`` and ``stages/``
(module-level and function-level imports both: stages import heavy things lazily, and a lazy
import is a dependency all the same).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from arenaforge.pipeline.fingerprint import import_statements

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"pipeline": "arenaforge.pipeline", "stages": "arenaforge.stages"}
# What a stage must never import: it gets what it needs from its context (the runner's job) and
# from the contract (``arenaforge.pipeline.stage``: the artifact names, fan-out to several models).
FORBIDDEN_IN_STAGES = ("arenaforge.pipeline.runner", "arenaforge.pipeline.store",
                       "arenaforge.pipeline.executors", "arenaforge.pipeline.engines",
                       "arenaforge.pipeline.apps", "arenaforge.pipeline.layout",
                       "arenaforge.pipeline.model_fanout")
# The kit reaches the stages through their registry (``arenaforge.stages``: ``get_stage``, the
# specs, ``PIPELINE``); these kit modules name stage modules, each for the reason given.
KIT_NAMING_STAGES = {
    "arenaforge.pipeline.config": "RunConfig declares each stage's config class statically",
    "arenaforge.pipeline.stage_conversations": "the stages' own conversation builders",
    "arenaforge.pipeline.template_check": "mining's pre-query builder (per model, not config)",
    "arenaforge.pipeline.run_failures": "the mine stage's InstructionSourceError, a usage error",
}
# Design notes that live outside the project; nothing in it may cite them.
OUTSIDE_DOCUMENTS = ("DESIGN.md", "CONVENTIONS.md", "SANDBOX.md")
# Other ways of pointing outside it: a sibling folder, a report no reader of the project has.
OUTSIDE_POINTERS = re.compile(r"\.\./shared\b|/work/shared\b|\bissue #?\d+(?:'s)? report\b",
                              re.IGNORECASE)
PROJECT_FILES = ("*.py", "*.md", "*.txt", "*.yaml", "*.toml", "*.sh", "*.j2", "*.cfg")


def _modules() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the arenaforge namespace."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package, *parts))] = path
    return out


MODULES = _modules()


def _imported(module: str, path: Path) -> set[str]:
    """Every module name an import statement anywhere in ``path`` names (absolute form)."""
    found: set[str] = set()
    for base, names in import_statements(path, module):
        subs = {f"{base}.{name}" for name in names}
        found.update(subs)
        # ``from pkg import name``: the package itself, unless every name is a submodule
        if not names or not subs <= set(MODULES):
            found.add(base)
    return found


def _graph() -> dict[str, set[str]]:
    """Module -> the arenaforge modules it imports.

    A package's ``__init__`` that imports its own submodules is the package's front door (its
    API re-exports them, or its functions import them lazily), not a dependency of the
    package on them, so edges from a package down into itself are left out.
    """
    return {m: {n for n in _imported(m, p)
                if n in MODULES and n != m and not n.startswith(m + ".")}
            for m, p in MODULES.items()}


def test_no_module_directly_under_stages_but_its_init():
    flat = sorted(p.name for p in (ROOT / "stages").glob("*.py") if p.name != "__init__.py")
    assert flat == [], f"stage modules belong in a family folder: {flat}"


def test_stages_import_no_runner_store_executor_engine_or_application():
    bad = []
    for module, path in MODULES.items():
        if not module.startswith("arenaforge.stages"):
            continue
        for name in _imported(module, path):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN_IN_STAGES):
                bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert bad == []


def test_the_contract_hands_stages_the_artifact_names_and_fan_out_of_their_owners():
    """What ``arenaforge.pipeline.stage`` re-exports is the owners' own object, not a copy that
    could drift from the store's layout."""
    from arenaforge.pipeline import layout, model_fanout, stage

    for name in ("AUDIT_METRICS", "BATTLES", "DATASET", "DATASET_CARD", "DATASET_SHARDS",
                 "EMBEDDINGS", "LEADERBOARD", "RATINGS", "dataset_shard"):
        assert getattr(stage, name) is getattr(layout, name), name
    assert stage.per_model is model_fanout.per_model
    assert set(stage.__all__) <= set(dir(stage))


def test_the_runner_imports_no_application():
    """A run ends with the audit page through a post-run hook its caller hands in (``arenaforge
    run``, ``arenaforge.pipeline.run``): the engine does not reach up into an application."""
    names = _imported("arenaforge.pipeline.runner", MODULES["arenaforge.pipeline.runner"])
    assert not [n for n in names if n.startswith("arenaforge.pipeline.apps")]


def test_the_kit_reaches_stages_through_their_registry():
    """Outside ``KIT_NAMING_STAGES`` (and the applications, built on the stages' functions), a
    kit module imports only ``arenaforge.stages`` itself, the registry; the list holds no
    module that no longer needs its exception."""
    naming = {}
    for module, path in MODULES.items():
        if not module.startswith("arenaforge.pipeline") \
                or module.startswith("arenaforge.pipeline.apps"):
            continue
        named = sorted(n for n in _imported(module, path)
                       if n.startswith("arenaforge.stages.") and n in MODULES)
        if named:
            naming[module] = named
    assert sorted(naming) == sorted(KIT_NAMING_STAGES), naming


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of more than one
    module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_cycle_check_finds_cycles_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": set(), "f": {"f"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"x": {"y"}, "y": set()}) == []


def test_no_import_cycle_among_arenaforge_modules():
    assert cycles(_graph()) == []


def _python_files() -> list[Path]:
    return [p for folder in ("pipeline", "stages", "scripts", "tests")
            for p in sorted((ROOT / folder).rglob("*.py"))] + [ROOT / "setup.py"]


def test_nothing_imports_top_level_pipeline_or_stages():
    bad = []
    for path in _python_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                    if n.split(".")[0] in ("pipeline", "stages")]
    # doctests and examples in docstrings are code a reader copies
    doc = re.compile(r"^\s*(>>>|\.\.\.)?\s*(from|import) (pipeline|stages)\b", re.MULTILINE)
    for path in _python_files():
        for m in doc.finditer(path.read_text(encoding="utf-8")):
            line = path.read_text(encoding="utf-8")[:m.start()].count("\n") + 1
            bad.append(f"{path.relative_to(ROOT)}:{line} (text) {m.group(0).strip()}")
    assert sorted(set(bad)) == []


def test_no_file_names_a_design_document_the_project_does_not_contain():
    mentions = []
    for pattern in PROJECT_FILES:
        for path in ROOT.rglob(pattern):
            rel = path.relative_to(ROOT)
            # not the project's: git's store, a virtual environment (.venv), run outputs
            if rel.parts[0].startswith(".") or rel.parts[0] == "artifacts" \
                    or "egg-info" in rel.parts[0] or path == Path(__file__).resolve():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for doc in OUTSIDE_DOCUMENTS:
                if doc in text and not (ROOT / doc).exists() \
                        and not (ROOT / "docs" / doc).exists():
                    mentions.append(f"{rel}: {doc}")
            mentions += [f"{rel}: {m.group(0)}" for m in OUTSIDE_POINTERS.finditer(text)]
    assert mentions == []


@pytest.mark.parametrize("module", ["arenaforge.stages.output.audit",
                                    "arenaforge.stages.common.embeddings",
                                    "arenaforge.stages.common.prompt_templates"])
def test_the_three_old_crossings_stay_closed(module):
    """The audit stage renders no report, the embeddings write no store file, and the prompt
    API is a contract module: none of them reaches the runner's side."""
    names = _imported(module, MODULES[module])
    assert not any(n.startswith(("arenaforge.pipeline.apps", "arenaforge.pipeline.store",
                                 "arenaforge.pipeline.fingerprint")) for n in names), names
