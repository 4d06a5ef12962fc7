"""The stages of an arenaforge run, one module each, in pipeline order.

``get_stage(name)`` imports a stage module and returns its ``STAGE`` spec. Stage modules keep
heavy imports inside functions, so importing all of them is cheap.
"""

from __future__ import annotations

import importlib
from functools import cache

from pipeline.stage import StageSpec

PIPELINE: tuple[str, ...] = (
    "mine", "clean", "difficulty", "decontaminate", "compress",
    "answer", "judge", "rate", "tests", "verify", "repair", "audit", "emit",
)

# A stage whose name would shadow something else lives under another module name.
_MODULE = {"tests": "testgen"}


@cache
def get_stage(name: str) -> StageSpec:
    """The spec of stage ``name`` (raises KeyError for an unknown name)."""
    if name not in PIPELINE:
        raise KeyError(f"unknown stage {name!r}; known: {list(PIPELINE)}")
    module = importlib.import_module(f"stages.{_MODULE.get(name, name)}")
    spec = module.STAGE
    if spec.name != name:
        raise RuntimeError(f"stages.{module.__name__}.STAGE is named {spec.name!r}, expected {name!r}")
    return spec


def available_stages() -> tuple[str, ...]:
    """Stages whose module exists (all of them in a complete checkout)."""
    found = []
    for name in PIPELINE:
        try:
            get_stage(name)
        except ModuleNotFoundError as exc:
            if exc.name != f"stages.{_MODULE.get(name, name)}":
                raise
        else:
            found.append(name)
    return tuple(found)
