"""The stages of an arenaforge run, one module each, in pipeline order, grouped by family.

``get_stage(name)`` imports a stage module and returns its ``STAGE`` spec. Each stage module is
named after its stage and lives in its family's package, with its helpers beside it:
``instructions`` (mine .. decontaminate), ``arena`` (answer, judge, rate), ``verification``
(tests, verify, repair), ``output`` (compress, audit, emit); ``common`` holds what several
families share. Stage modules keep heavy imports inside functions, so importing all of them is
cheap.
"""

from __future__ import annotations

import importlib
from functools import cache

from arenaforge.pipeline.stage import StageSpec

PIPELINE: tuple[str, ...] = (
    "mine", "clean", "difficulty", "decontaminate", "compress",
    "answer", "judge", "rate", "tests", "verify", "repair", "audit", "emit",
)

FAMILY = {
    "mine": "instructions", "clean": "instructions", "difficulty": "instructions",
    "decontaminate": "instructions", "compress": "output", "answer": "arena", "judge": "arena",
    "rate": "arena", "tests": "verification", "verify": "verification",
    "repair": "verification", "audit": "output", "emit": "output",
}


def _module_name(stage: str) -> str:
    return f"{__name__}.{FAMILY[stage]}.{stage}"


@cache
def get_stage(name: str) -> StageSpec:
    """The spec of stage ``name`` (raises KeyError for an unknown name)."""
    if name not in PIPELINE:
        raise KeyError(f"unknown stage {name!r}; known: {list(PIPELINE)}")
    module = importlib.import_module(_module_name(name))
    spec = module.STAGE
    if spec.name != name:
        raise RuntimeError(f"{module.__name__}.STAGE is named {spec.name!r}, expected {name!r}")
    return spec


def available_stages() -> tuple[str, ...]:
    """Stages whose module exists (all of them in a complete checkout)."""
    found = []
    for name in PIPELINE:
        try:
            get_stage(name)
        except ModuleNotFoundError as exc:
            if exc.name != _module_name(name):
                raise
        else:
            found.append(name)
    return tuple(found)
