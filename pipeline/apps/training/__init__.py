"""``arenaforge train``: TRL SFT (optionally LoRA) on emitted datasets.

Example::

    from arenaforge.pipeline.apps.training import train_main
    model_dir = train_main(Path("configs/sft-tiny.yaml"), ["max_steps=2"])
"""

from arenaforge.pipeline.apps.training.base_model import resolve_model_dir
from arenaforge.pipeline.apps.training.config import LoraSettings, TrainConfig, load_train_config
from arenaforge.pipeline.apps.training.sft import dataset_files, load_sft_dataset, train, train_main

__all__ = [
    "LoraSettings",
    "TrainConfig",
    "dataset_files",
    "load_sft_dataset",
    "load_train_config",
    "resolve_model_dir",
    "train",
    "train_main",
]
