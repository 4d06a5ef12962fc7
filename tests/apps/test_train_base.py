"""configs/sft-base.yaml: a base model fine-tuned on a run's dataset with the recipe's template.

On CPU with the tiny base model that ships (Gemma-3-270M, no chat template of its own).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from arenaforge.pipeline.apps.training import load_train_config
from arenaforge.pipeline.backends.chat_template import render_chat_template, template_from_hf_dir
from arenaforge.pipeline.config import ConfigError
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.output.emit import build_sft_rows, write_dataset

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "configs" / "sft-base.yaml"
TEMPLATE = ROOT / "configs" / "chat_templates" / "base-coder.jinja"


def _emit_run(run_dir: Path, n: int = 6) -> None:
    tasks = [(f"Write a Python function double{i}(x) that returns 2 * x + {i}.",
              f"```python\ndef double{i}(x):\n    return 2 * x + {i}\n```") for i in range(n)]
    table = pa.table({
        "instruction_id": [instruction_id(t) for t, _ in tasks],
        "instruction": [t for t, _ in tasks], "response": [r for _, r in tasks],
        "model": ["qwen2.5-coder-0.5b"] * n, "status": ["passed"] * n,
        "program_gate": ["pass"] * n})
    rows = build_sft_rows(table, system_prompt=None, run_id="t", config_hash="h")
    write_dataset(rows, run_dir / "dataset", shard_rows=4, holdout_fraction=0.0, seed=0)


def test_the_recipe_names_a_base_model_and_its_own_template():
    cfg = load_train_config(RECIPE)
    assert "base" in cfg.model and cfg.datasets == [] and cfg.assistant_only_loss
    assert cfg.chat_template == Path("configs/chat_templates/base-coder.jinja")
    rendered = render_chat_template(TEMPLATE.read_text(), [
        {"role": "user", "content": "Add two numbers."},
        {"role": "assistant", "content": "def add(a, b):\n    return a + b"}],
        add_generation_prompt=False, bos_token="<s>", eos_token="</s>")
    assert rendered == ("<s>### Instruction:\nAdd two numbers.\n\n### Response:\n"
                        "def add(a, b):\n    return a + b</s>\n\n")


def test_the_dataset_comes_from_the_command_line(tmp_path):
    from arenaforge.pipeline.apps.training.config import with_datasets

    cfg = load_train_config(RECIPE)
    with pytest.raises(ConfigError, match="--dataset"):
        with_datasets(cfg, None, "sft-base.yaml")
    assert with_datasets(cfg, [str(tmp_path)], "x").datasets == [str(tmp_path)]


@pytest.mark.slow
@pytest.mark.models
def test_a_base_model_learns_the_runs_answers_in_the_recipes_template(tmp_path, monkeypatch):
    from arenaforge.pipeline.apps.training import train_main

    monkeypatch.chdir(ROOT)  # the recipe's paths are relative to the repository
    _emit_run(tmp_path / "run")
    out = train_main(RECIPE, [
        "model=gemma3-270m-base", "bf16=false", "gradient_checkpointing=false",
        "max_steps=6", "max_length=48", "per_device_train_batch_size=2",
        "gradient_accumulation_steps=1", "learning_rate=1.0e-4", "warmup_steps=0",
        "logging_steps=1", "eval_on_test_split=false", 'save_strategy="no"',
        f"output_dir={tmp_path / 'out'}"], [str(tmp_path / "run")])
    metrics = json.loads((out / "train_metrics.json").read_text())
    losses = [row["loss"] for row in metrics["log_history"] if "loss" in row]
    # six rows, two a step: two epochs; single steps are noisy (a first batch the base model
    # already predicts well), an epoch's mean is not (measured: 1.83 then 0.10)
    assert len(losses) == 6
    assert sum(losses[3:]) / 3 < 0.5 * sum(losses[:3]) / 3, losses
    # the saved model carries the recipe's template: eval and the backends prompt it that way
    assert template_from_hf_dir(out) == TEMPLATE.read_text()
