"""``arenaforge train CONFIG``: the entry point the CLI calls (the code is in ``pipeline.training``)."""

from pipeline.training import TrainConfig, load_train_config, train, train_main

__all__ = ["TrainConfig", "load_train_config", "train", "train_main"]
