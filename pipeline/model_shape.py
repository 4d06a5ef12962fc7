"""A model's size in GPU memory from its Hugging Face ``config.json``, as vLLM counts it.

Weights: parameters x bytes per parameter (the config's ``torch_dtype``, or the engine's
``dtype`` option), counted from the architecture's shapes, or the exact byte count of
``model.safetensors.index.json`` when the weights are here. KV cache: vLLM's
``FullAttentionSpec`` keeps, per layer and per block of ``block_size`` tokens, a page of
``block_size * num_kv_heads * (head_size + head_size_v) * dtype_size`` bytes, and a request of
``max_model_len`` tokens takes ``cdiv(max_model_len, block_size)`` pages
(``vllm/v1/kv_cache_interface.py``, ``max_memory_usage_bytes``); a tensor-parallel worker holds
``max(1, num_kv_heads // tensor_parallel_size)`` heads (``ModelConfig.get_num_kv_heads``).

Example (Qwen2.5-Coder-7B-Instruct's config, bfloat16)::

    >>> cfg = {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 3584,
    ...        "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    ...        "num_key_value_heads": 4, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    >>> shape = model_shape(cfg)
    >>> round(shape.parameters / 1e9, 2), round(shape.weights_bytes / 2**30, 2)
    (7.62, 14.19)
    >>> kv_bytes_per_sequence(shape, 4096, tensor_parallel_size=1) // 2**20  # MiB
    224
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

BLOCK_SIZE = 16  # vLLM's default KV-cache block (CacheConfig.block_size)
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2,
               "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# Architectures whose MLP is gate/up/down (SwiGLU/GeGLU): llama (CodeLlama, DeepSeek-Coder,
# OpenCoder), mistral, qwen2, gemma, granite. StarCoder2's is c_fc/c_proj with biases.
GATED_MLP = frozenset({"llama", "mistral", "qwen2", "gemma", "gemma2", "granite", "qwen3"})
PLAIN_MLP = frozenset({"starcoder2"})
QKV_BIAS = frozenset({"qwen2"})  # Qwen2's q, k and v projections carry biases


class ModelShapeError(ValueError):
    """A model's config is missing, unreadable or of an architecture not counted here."""


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """What memory sizing needs of one model.

    Attributes:
        parameters: parameter count.
        weights_bytes: bytes of the weights as loaded (one copy, all tensor-parallel ranks).
        dtype_bytes: bytes per weight and per KV-cache element (before ``kv_cache_dtype``).
        num_layers, num_attention_heads, num_kv_heads, head_dim: the attention's shape.
        max_position_embeddings: the longest context the model was trained for.
    """

    parameters: int
    weights_bytes: int
    dtype_bytes: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int | None = None


def parameter_count(cfg: dict[str, Any]) -> int:
    """Parameters of a decoder-only transformer from its ``config.json``.

    Raises:
        ModelShapeError: an architecture (``model_type``) whose layers are not counted here.
    """
    kind = cfg.get("model_type")
    if kind not in GATED_MLP | PLAIN_MLP:
        raise ModelShapeError(f"model_type {kind!r}: parameters are counted for "
                              f"{sorted(GATED_MLP | PLAIN_MLP)} only")
    vocab, hidden = int(cfg["vocab_size"]), int(cfg["hidden_size"])
    layers, inter = int(cfg["num_hidden_layers"]), int(cfg["intermediate_size"])
    heads = int(cfg["num_attention_heads"])
    kv = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    bias = bool(cfg.get("use_bias") or cfg.get("attention_bias"))
    attention = hidden * heads * head_dim * 2 + hidden * kv * head_dim * 2
    if kind in QKV_BIAS or bias:
        attention += heads * head_dim + 2 * kv * head_dim + (hidden if bias else 0)
    if kind in PLAIN_MLP:
        mlp = 2 * hidden * inter + ((inter + hidden) if bias else 0)
        norms = 2 * 2 * hidden  # LayerNorm: weight and bias
    else:
        mlp = 3 * hidden * inter
        norms = 2 * hidden
    embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings", False) else 2)
    final_norm = hidden * (2 if kind in PLAIN_MLP else 1)
    return embeddings + layers * (attention + mlp + norms) + final_norm


def dtype_bytes(name: str | None, default: int = 2) -> int:
    """Bytes per element of a torch dtype name (``auto``/unset: ``default``)."""
    if name in (None, "auto"):
        return default
    key = str(name).removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ModelShapeError(f"dtype {name!r}: known {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


def model_shape(cfg: dict[str, Any], weights_bytes: int | None = None,
                dtype: str | None = None) -> ModelShape:
    """The :class:`ModelShape` of a ``config.json`` (``dtype``: the engine's ``dtype`` option;
    ``weights_bytes``: the exact size when known)."""
    heads = int(cfg["num_attention_heads"])
    size = dtype_bytes(dtype, dtype_bytes(cfg.get("torch_dtype") or cfg.get("dtype")))
    params = parameter_count(cfg)
    return ModelShape(parameters=params,
                      weights_bytes=weights_bytes if weights_bytes else params * size,
                      dtype_bytes=size, num_layers=int(cfg["num_hidden_layers"]),
                      num_attention_heads=heads,
                      num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
                      head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads),
                      max_position_embeddings=cfg.get("max_position_embeddings"))


def kv_bytes_per_sequence(shape: ModelShape, context: int, tensor_parallel_size: int = 1,
                          kv_dtype_bytes: int | None = None) -> int:
    """KV-cache bytes one sequence of ``context`` tokens takes on one tensor-parallel rank."""
    heads = max(1, shape.num_kv_heads // tensor_parallel_size)
    size = kv_dtype_bytes or shape.dtype_bytes
    page = BLOCK_SIZE * heads * 2 * shape.head_dim * size
    return shape.num_layers * math.ceil(context / BLOCK_SIZE) * page


def config_dir_of(spec: Any) -> Path | None:
    """Where a registry entry's ``config.json`` is: its weights' directory when it is here,
    else its ``config_dir`` (``None``: neither)."""
    for candidate in (spec.path, spec.tokenizer, spec.config_dir):
        if candidate:
            path = Path(os.path.expandvars(str(candidate))).expanduser()
            if (path / "config.json").is_file():
                return path
    return None


def load_model_shape(spec: Any) -> ModelShape:
    """The :class:`ModelShape` of a registry entry, read without loading weights.

    Raises:
        ModelShapeError: no ``config.json`` found (name the ``config_dir`` to add), or an
            architecture not counted here.
    """
    where = config_dir_of(spec)
    if where is None:
        raise ModelShapeError(f"model {spec.id!r}: no config.json at path {spec.path!r} or "
                              f"config_dir {spec.config_dir!r}; give the registry entry a "
                              "config_dir holding the model's config.json")
    try:
        cfg = json.loads((where / "config.json").read_text(encoding="utf-8"))
        exact = None
        index = where / "model.safetensors.index.json"
        if index.is_file():  # the weights' own byte count
            exact = int(json.loads(index.read_text(encoding="utf-8"))["metadata"]["total_size"])
        return model_shape(cfg, exact, spec.options.get("dtype"))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelShapeError(f"model {spec.id!r}: {where / 'config.json'}: {exc}") from None
