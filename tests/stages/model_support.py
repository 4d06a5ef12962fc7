"""Shared by the stage tests that load a real embedded model."""

import pytest


def open_embedded_backend(model_id: str, threads: int = 1):
    """A real backend for an embedded registry model (skips, naming why, when not installed)."""
    from pathlib import Path

    from arenaforge.pipeline.backends import create_backend
    from arenaforge.pipeline.models import ModelNotInstalledError, load_registry

    spec = load_registry(Path(__file__).resolve().parents[2] / "configs" / "models.yaml")[model_id]
    try:
        return create_backend(spec, n_threads=threads)
    except ModelNotInstalledError as exc:
        pytest.skip(str(exc))
