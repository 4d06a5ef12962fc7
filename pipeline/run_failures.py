"""How a front end reports a run that failed: one message line and an exit code.

``arenaforge run`` and ``arenaforge verify-bench`` both run the pipeline and must say the same
thing about the same failure: 2 when nothing could start (a store made by another config, a
broken stage chain, a model that is not there, a bad instruction file, a placement or toolchain
that cannot be had), 1 when a stage failed or a model, server or sandbox could not serve (the
completed shards are kept). A stop by signal (``RunStopped``) is not a failure: the caller
reports it.
"""

from __future__ import annotations


def run_failure(exc: BaseException) -> tuple[str, int] | None:
    """``(message, exit code)`` for a run that raised ``exc``; None when it is no run failure
    (a bug, or a ``KeyboardInterrupt``): the caller raises it on."""
    from arenaforge.pipeline.placement import PlacementError
    from arenaforge.pipeline.runner import (
        ContractChainError,
        ModelUnavailableError,
        StageFailedError,
    )
    from arenaforge.pipeline.sandbox.languages import ToolchainUnavailable
    from arenaforge.pipeline.shards import is_fatal
    from arenaforge.pipeline.store import StoreError
    from arenaforge.stages.instructions.sources import InstructionSourceError

    if isinstance(exc, (StoreError, ContractChainError, ModelUnavailableError,
                        InstructionSourceError, PlacementError, ToolchainUnavailable)):
        return str(exc), 2
    if isinstance(exc, StageFailedError):
        return str(exc), 1
    if isinstance(exc, KeyboardInterrupt) or not is_fatal(exc):
        return None
    # A model, server or sandbox that cannot serve: say which, keep what was written.
    return f"{type(exc).__name__}: {exc} (completed shards are kept; rerun to resume)", 1
