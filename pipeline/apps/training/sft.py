"""Supervised fine-tuning on emitted datasets with TRL's ``SFTTrainer`` (optionally LoRA).

The emitted Parquet files go to TRL unchanged: their ``messages`` column is TRL's
conversational format, so TRL applies the tokenizer's chat template itself.
"""

from __future__ import annotations

import glob
import json
import logging
from pathlib import Path
from typing import Any

import yaml
from arenaforge.pipeline.apps.training.base_model import ensure_chat_template, resolve_model_dir
from arenaforge.pipeline.apps.training.config import (
    TrainConfig,
    load_train_config,
    with_datasets,
)
from arenaforge.pipeline.layout import DATASET

log = logging.getLogger(__name__)


def dataset_files(refs: list[str], split: str = "train") -> list[str]:
    """The Parquet files of ``split`` named by dataset references.

    A reference is a Parquet file, a glob, an emitted dataset folder (``<run>/dataset``) or a
    run directory (its ``dataset/`` folder is used). Folders contribute their
    ``{split}-*.parquet`` files; explicit files and globs are taken as they are.

    Raises:
        FileNotFoundError: a reference matches no file (for ``train``; other splits may be
            absent).
    """
    files: list[str] = []
    for ref in refs:
        path = Path(ref).expanduser()
        if path.is_dir():
            folder = path / DATASET if (path / DATASET).is_dir() else path
            found = sorted(str(p) for p in folder.glob(f"{split}-*.parquet"))
        elif split != "train":
            found = []  # an explicit file or glob names training data only
        else:
            found = sorted(glob.glob(str(path))) if glob.has_magic(str(path)) else (
                [str(path)] if path.is_file() else [])
        if not found and split == "train":
            raise FileNotFoundError(f"dataset {ref!r}: no {split} Parquet file found")
        files += found
    return files


def load_sft_dataset(refs: list[str], split: str = "train", only_verified: bool = False) -> Any:
    """The concatenated ``datasets.Dataset`` of a split, or None when no file has it."""
    from datasets import load_dataset

    files = dataset_files(refs, split)
    if not files:
        return None
    ds = load_dataset("parquet", data_files={split: files}, split=split)
    if "messages" not in ds.column_names:
        raise ValueError(f"datasets {refs}: no 'messages' column (has {ds.column_names}); "
                         "expected files written by the emit stage")
    if only_verified:
        ds = ds.filter(lambda verified: bool(verified), input_columns="verified")
    return ds


def _sft_args(cfg: TrainConfig, has_eval: bool) -> Any:
    from trl import SFTConfig

    args = {
        "output_dir": str(cfg.output_dir), "seed": cfg.seed, "max_length": cfg.max_length,
        "max_steps": cfg.max_steps, "num_train_epochs": cfg.num_train_epochs,
        "per_device_train_batch_size": cfg.per_device_train_batch_size,
        "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
        "learning_rate": cfg.learning_rate, "lr_scheduler_type": cfg.lr_scheduler_type,
        "warmup_steps": cfg.warmup_steps, "weight_decay": cfg.weight_decay, "packing": cfg.packing,
        "assistant_only_loss": cfg.assistant_only_loss, "bf16": cfg.bf16,
        "logging_steps": cfg.logging_steps,
        "save_strategy": cfg.save_strategy, "eval_strategy": "epoch" if has_eval else "no",
        "report_to": "none",
    }
    # transformers 5.2x renamed gradient_checkpointing (still TRL's documented name, and ours)
    # to activation_checkpointing; the old name only warns, the new one is absent before.
    renamed = "activation_checkpointing" in SFTConfig.__dataclass_fields__
    args["activation_checkpointing" if renamed else "gradient_checkpointing"] = \
        cfg.gradient_checkpointing
    clash = sorted(set(args) & set(cfg.trl))
    if clash:
        raise ValueError(f"train config: trl.{clash[0]} duplicates a top-level field; set it there")
    try:
        return SFTConfig(**args, **cfg.trl)
    except TypeError as exc:  # an unknown trl.* key
        raise ValueError(f"train config: trl: {exc}") from None


def train(cfg: TrainConfig) -> Path:
    """Fine-tune ``cfg.model`` on ``cfg.datasets``; returns the directory of the final model.

    The final model (LoRA adapters merged when ``lora.merge``) and its tokenizer are saved in
    ``cfg.output_dir``, next to ``train_config.yaml`` and ``train_metrics.json``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    if not cfg.datasets:
        raise ValueError("train config: datasets is empty (arenaforge train --dataset RUN_DIR)")
    model_dir = resolve_model_dir(cfg.model, models_file=cfg.models_file)
    train_ds = load_sft_dataset(cfg.datasets, "train", cfg.only_verified)
    if len(train_ds) == 0:
        raise ValueError(f"datasets {cfg.datasets}: no training rows"
                         + (" with verified=true" if cfg.only_verified else ""))
    eval_ds = (load_sft_dataset(cfg.datasets, "test", cfg.only_verified)
               if cfg.eval_on_test_split else None)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if cfg.chat_template is not None:  # the recipe's template (a base model has none)
        tokenizer.chat_template = Path(cfg.chat_template).read_text(encoding="utf-8")
    elif ensure_chat_template(tokenizer):
        log.info("%s has no chat template; using ChatML", model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    dtype = torch.bfloat16 if cfg.bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)

    peft_config = None
    if cfg.lora is not None:
        from peft import LoraConfig

        peft_config = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha,
                                 lora_dropout=cfg.lora.dropout,
                                 target_modules=cfg.lora.target_modules, task_type="CAUSAL_LM")

    trainer = SFTTrainer(model=model, args=_sft_args(cfg, eval_ds is not None),
                         train_dataset=train_ds, eval_dataset=eval_ds,
                         processing_class=tokenizer, peft_config=peft_config)
    result = trainer.train()

    out = Path(cfg.output_dir)
    final = trainer.model
    if cfg.lora is not None and cfg.lora.merge:
        final = final.merge_and_unload()
    final.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "train_config.yaml").write_text(
        yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    metrics = {"base_model": str(model_dir), "train_rows": len(train_ds),
               "eval_rows": len(eval_ds) if eval_ds is not None else 0,
               "global_step": result.global_step, "training_loss": result.training_loss,
               "log_history": trainer.state.log_history}
    (out / "train_metrics.json").write_text(json.dumps(metrics, indent=2, default=str))
    return out


def train_main(config_path: Path, overrides: list[str],
               datasets: list[str] | None = None) -> Path:
    """``arenaforge train CONFIG [--dataset RUN ...] [--set k=v ...]``: load the config and
    train (``datasets``, when given, replace the config's).

    Returns:
        The directory holding the fine-tuned model.
    """
    cfg = load_train_config(config_path, overrides)
    return train(with_datasets(cfg, datasets, str(config_path)))
