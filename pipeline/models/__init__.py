"""Model registry and embedded weights: ``load_registry``, ``resolve_weights``, ``describe_models``.

Example::

    registry = load_registry("configs/models.yaml")
    path = resolve_weights(registry["qwen2.5-coder-0.5b"])   # assembles once, then cached
"""

from arenaforge.pipeline.models.registry import ModelSpec, load_registry, stage_models
from arenaforge.pipeline.models.weights import (
    ModelNotInstalledError,
    WeightsCorruptError,
    cache_root,
    describe_models,
    model_cache_dir,
    package_files,
    resolve_weights,
    weights_fingerprint,
)

__all__ = [
    "ModelNotInstalledError",
    "ModelSpec",
    "WeightsCorruptError",
    "cache_root",
    "describe_models",
    "load_registry",
    "model_cache_dir",
    "package_files",
    "resolve_weights",
    "stage_models",
    "weights_fingerprint",
]
