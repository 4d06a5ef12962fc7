"""Config-time check: every model a stage protocol will ask can serve what the protocol needs.

A stage whose config asks models for a capability (the judge and difficulty stages, through
their protocol) gives its config a ``capability_needs(run_cfg) -> list[CapabilityNeed]``
method (built with :func:`arenaforge.pipeline.backends.capabilities.protocol_needs`);
:func:`check_protocol_capabilities` asks every stage of the run for it and compares
each need with :func:`arenaforge.pipeline.backends.capabilities.capabilities_of` of the registry entry.
Nothing loads: ``arenaforge config validate`` and ``arenaforge run`` call it before any model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from arenaforge.pipeline.backends.capabilities import CapabilityNeed, capabilities_of
from arenaforge.pipeline.config import ConfigError


def stage_needs(cfg: Any) -> list[CapabilityNeed]:
    """The needs of every stage the run will run (stages without protocols have none)."""
    needs: list[CapabilityNeed] = []
    for name in cfg.stages:
        declare = getattr(cfg.stage_config(name), "capability_needs", None)
        if declare is not None:
            needs.extend(declare(cfg))
    return needs


def capability_problems(needs: Sequence[CapabilityNeed], registry: Mapping[str, Any]) -> list[str]:
    """One message per need that its model's backend lacks (unknown ids are left to
    ``arenaforge.pipeline.config.check_models``)."""
    problems = []
    for need in needs:
        spec = registry.get(need.model_id)
        if spec is None:
            continue
        caps = capabilities_of(spec)
        if not caps.lacking(need.needs):
            continue
        fits = [name for name, wants in need.alternatives if not caps.lacking(wants)]
        fix = (f"set {need.stage}.protocol to one it can serve ({', '.join(fits)}) or "
               if fits else "")
        problems.append(
            f"{need.stage}.protocol: stage {need.stage!r} protocol {need.protocol!r} needs "
            f"{need.needs}, but model {need.model_id!r} (backend {spec.backend!r}) does not "
            f"provide it; {fix}use models whose backend provides {need.needs}")
    return problems


def check_protocol_capabilities(cfg: Any, source: str | None = None) -> None:
    """Raise before any model loads when a configured protocol needs what a model lacks.

    Args:
        cfg: a loaded run config (``arenaforge.pipeline.config.load_config``).
        source: the config file to name at the start of each line (as config errors do).

    Raises:
        ConfigError: one line per (stage, model) that cannot serve its protocol.
    """
    from arenaforge.pipeline.models import load_registry

    try:
        registry = load_registry(cfg.models_file)
    except (OSError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    problems = capability_problems(stage_needs(cfg), registry)
    if problems:
        prefix = f"{source}: " if source else ""
        raise ConfigError("\n".join(prefix + p for p in problems))
