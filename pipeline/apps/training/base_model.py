"""Turn a model reference into a Hugging Face model directory that transformers can train.

A reference is a local model directory (``config.json`` inside), a local ``.gguf`` file, or a
model id of the registry (``configs/models.yaml``; embedded models such as SmolLM2-135M and
Gemma-3-270M ship as quantised GGUF files in pip packages). GGUF weights are dequantised once
by transformers (``from_pretrained(dir, gguf_file=...)``, which needs the ``gguf`` package)
and saved as a plain safetensors checkpoint under the cache, keyed by the weights' fingerprint,
so later runs load in a second.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_MODELS_FILE = Path("configs/models.yaml")

# ChatML, the format SmolLM2 and Qwen2.5 were tuned on. Used only for tokenizers that carry no
# chat template (base checkpoints), because SFT on ``messages`` needs one. The generation tags
# let TRL's ``assistant_only_loss`` find the assistant tokens.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}{{ message['content'] + '<|im_end|>' + '\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def is_model_dir(path: Path) -> bool:
    """True for a directory holding a transformers checkpoint."""
    return path.is_dir() and (path / "config.json").is_file()


def resolve_model_dir(ref: str, *, models_file: Path = DEFAULT_MODELS_FILE,
                      cache_dir: Path | None = None) -> Path:
    """A transformers model directory for ``ref``, dequantising GGUF weights on first use.

    Args:
        ref: a model directory, a ``.gguf`` file, or a registry model id.
        models_file: the registry consulted for model ids.
        cache_dir: where dequantised checkpoints go (default: arenaforge's cache root).

    Raises:
        FileNotFoundError: ``ref`` is neither an existing path nor a registry id.
        ValueError: the registry entry has no local weights (a served model).
    """
    path = Path(ref).expanduser()
    if is_model_dir(path):
        return path
    if path.is_file() and path.suffix == ".gguf":
        return dequantize_gguf(path, _cache(cache_dir) / f"{path.stem}-{_file_key(path)}")
    spec = registry_spec(ref, models_file)
    from arenaforge.pipeline.models import resolve_weights, weights_fingerprint

    weights = resolve_weights(spec)
    if is_model_dir(weights):
        return weights
    if weights.suffix != ".gguf":
        raise ValueError(f"model {ref!r}: weights {weights} are neither a model directory nor GGUF")
    return dequantize_gguf(weights, _cache(cache_dir) / f"{spec.id}-{weights_fingerprint(spec)[:16]}")


def registry_spec(ref: str, models_file: Path) -> Any:
    """The registry entry of model id ``ref`` (used after path lookups failed).

    Raises:
        FileNotFoundError: no registry file, or no such id (the message lists the known ids).
    """
    from arenaforge.pipeline.models import load_registry

    if not models_file.is_file():
        raise FileNotFoundError(f"model {ref!r}: not a model directory or .gguf file, and the "
                                f"registry {models_file} to look it up in does not exist")
    registry = load_registry(models_file)
    if ref not in registry:
        raise FileNotFoundError(f"model {ref!r}: not a model directory or .gguf file, nor an id "
                                f"in {models_file} (known: {sorted(registry)})")
    return registry[ref]


def _cache(cache_dir: Path | None) -> Path:
    if cache_dir is not None:
        return cache_dir
    from arenaforge.pipeline.models import cache_root

    return cache_root() / "dequantized"


def _file_key(path: Path) -> str:
    stat = path.stat()
    return hashlib.sha256(f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]


def dequantize_gguf(gguf: Path, target: Path) -> Path:
    """Dequantise a GGUF checkpoint to a float32 safetensors directory (cached at ``target``).

    The directory is built under a temporary name and renamed, so an interrupted build is never
    mistaken for a finished one.
    """
    if is_model_dir(target):
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("dequantising %s into %s (once)", gguf, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                 dtype=torch.float32)
    # The weights are plain float tensors now, but the model still carries the GGUF quantizer
    # and save_pretrained raises "quantized with gguf and is not serializable" (checked with
    # transformers 5.24).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "arenaforge_source.json").write_text(json.dumps({"gguf": str(gguf)}))
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_model_dir(target):  # another process finished the same build first
            return target
        raise
    return target


def ensure_chat_template(tokenizer: Any) -> bool:
    """Give a tokenizer without a chat template the ChatML one; True when it was added."""
    if getattr(tokenizer, "chat_template", None):
        return False
    tokenizer.chat_template = CHATML_TEMPLATE
    return True
