"""Sentence-embedding models from the registry (``backend: sentence_transformers``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from arenaforge.pipeline.models import ModelSpec


def create_embedder(spec: ModelSpec, *, n_threads: int | None = None,
                    device: str = "cpu") -> Any:
    """A ``sentence_transformers.SentenceTransformer`` for an embedding entry (offline).

    Raises:
        ValueError: the entry is not a sentence-transformers model.
        arenaforge.pipeline.models.ModelNotInstalledError: its package is missing.
    """
    if spec.backend != "sentence_transformers":
        raise ValueError(f"model {spec.id!r} has backend {spec.backend!r}, not an embedder")
    import torch
    from arenaforge.pipeline.models import resolve_weights
    from sentence_transformers import SentenceTransformer

    if n_threads:
        torch.set_num_threads(n_threads)
    return SentenceTransformer(str(resolve_weights(spec)), device=device, local_files_only=True)
