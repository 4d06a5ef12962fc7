"""The typed config of ``arenaforge train`` (``configs/sft-*.yaml``).

Unknown keys are errors at every level, as in TRL's and open-r1's recipes. Fields that map to
TRL's ``SFTConfig`` keep TRL's names; anything else TRL accepts goes under ``trl:`` and is
checked by ``SFTConfig`` itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoraSettings(_Strict):
    """LoRA adapters (peft) instead of full fine-tuning."""

    r: int = Field(default=16, ge=1)
    alpha: int = Field(default=32, ge=1)
    dropout: float = Field(default=0.05, ge=0.0, lt=1.0)
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    merge: bool = Field(default=True, description="Merge the adapters into the saved model, "
                        "so eval and inference load a plain checkpoint.")


class TrainConfig(_Strict):
    """One SFT run.

    Attributes:
        model: a transformers model directory, a ``.gguf`` file, or a registry model id
            (embedded GGUF weights are dequantised once and cached).
        models_file: the registry used to look up model ids.
        datasets: emitted datasets: dataset folders (``.../dataset`` holding
            ``train-*.parquet``), run directories, Parquet files or globs. All are concatenated;
            ``arenaforge train --dataset RUN`` gives them on the command line instead.
        chat_template: a Jinja chat template file set on the tokenizer before training (a base
            model has none; an instruct model's own is replaced); saved with the model, so
            ``arenaforge eval`` and the backends render prompts the way it was trained.
        output_dir: where checkpoints and the final model go.
        only_verified: train only on rows whose answer passed its tests.
        eval_on_test_split: evaluate on the datasets' ``test-*.parquet`` files.
        trl: extra ``trl.SFTConfig`` arguments (TRL rejects unknown ones).
    """

    model: str
    models_file: Path = Path("configs/models.yaml")
    datasets: list[str] = Field(default_factory=list)
    chat_template: Path | None = None
    output_dir: Path
    only_verified: bool = False
    eval_on_test_split: bool = False
    seed: int = 0
    max_length: int = Field(default=1024, ge=8)
    max_steps: int = -1
    num_train_epochs: float = Field(default=1.0, gt=0)
    per_device_train_batch_size: int = Field(default=1, ge=1)
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    learning_rate: float = Field(default=2e-5, gt=0)
    lr_scheduler_type: str = "cosine"
    warmup_steps: int | float = Field(default=0, ge=0,
                                      description="Steps, or a ratio of all steps when < 1.")
    weight_decay: float = 0.0
    packing: bool = False
    assistant_only_loss: bool = False
    bf16: bool = False
    gradient_checkpointing: bool = False
    logging_steps: int = Field(default=10, ge=1)
    save_strategy: Literal["no", "steps", "epoch"] = "no"
    lora: LoraSettings | None = None
    trl: dict[str, Any] = Field(default_factory=dict)


def load_train_config(path: str | Path, overrides: list[str] | None = None) -> TrainConfig:
    """Load a train config from YAML with ``dotted.key=value`` overrides.

    Raises:
        ConfigError: missing file, bad YAML, unknown key or wrong type; the message names the
            file and the dotted field.
    """
    from arenaforge.pipeline.config import load_yaml_model

    return load_yaml_model(path, TrainConfig, list(overrides or []), what="train config")


def with_datasets(cfg: TrainConfig, datasets: list[str] | None, source: str) -> TrainConfig:
    """``cfg`` training on ``datasets`` when given (the command line's ``--dataset``).

    Raises:
        ConfigError: no dataset at all, or a chat template file that does not exist.
    """
    from arenaforge.pipeline.config import ConfigError

    if datasets:
        cfg = cfg.model_copy(update={"datasets": list(datasets)})
    if not cfg.datasets:
        raise ConfigError(f"{source}: datasets: none given; name a run's emitted dataset with "
                          "--dataset RUN_DIR (or datasets: [...] in the config)")
    if cfg.chat_template is not None and not Path(cfg.chat_template).is_file():
        raise ConfigError(f"{source}: chat_template: {cfg.chat_template} is not a file")
    return cfg
