"""`arenaforge config validate --render`: each model's own template against what its stages send.

The templates are the shipped copies of the models' tokenizer_config.json
(configs/model_files): no weights are needed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from arenaforge.pipeline.backends.chat_template import ChatTemplateError, render_chat_template
from arenaforge.pipeline.backends.role_folding import fold_system
from arenaforge.pipeline.backends.template_source import template_from_tokenizer_dir
from arenaforge.pipeline.config import load_config
from arenaforge.pipeline.stage_conversations import stage_shapes
from arenaforge.pipeline.template_check import render_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


def validate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arenaforge.pipeline.cli", "config", "validate",
                           *args, "--render"], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, check=False, env={"COLUMNS": "400", "PATH": "/usr/bin"})


@pytest.mark.parametrize("config", ["vllm.yaml", "cluster.yaml"])
def test_gpu_configs_render_every_shape_with_every_models_template(config):
    done = validate(f"configs/{config}")
    assert done.returncode == 0, done.stdout + done.stderr
    cfg = load_config(CONFIGS / config)
    models, problems = render_config(cfg)
    assert problems == []
    by_id = {m.model: m for m in models}
    assert set(cfg.experts) | set(cfg.judge_ids) == set(by_id)
    for expert in cfg.experts:  # mining, answering and repair, each rendered
        assert {"mine", "answer", "repair"} <= set(by_id[expert].shapes)
    for author in cfg.tests.authors:  # the tests and the generate_inputs requests
        assert len(by_id[author].shapes["tests"]) == 2
    for judge in cfg.judge.judges:  # the judge's both orders and its second round
        assert len(by_id[judge].shapes["judge"]) == 4


def test_a_template_that_refuses_system_without_folding_fails_naming_model_stage_and_error(
        tmp_path):
    # configs/vllm.yaml with CodeGemma's fold_system taken away
    shutil.copytree(CONFIGS / "model_files", tmp_path / "model_files")
    registry = yaml.safe_load((CONFIGS / "models-served.yaml").read_text())
    for entry in registry["models"]:
        entry.pop("fold_system", None)
    (tmp_path / "models-served.yaml").write_text(yaml.safe_dump(registry))
    shutil.copy(CONFIGS / "vllm.yaml", tmp_path / "vllm.yaml")
    done = validate(str(tmp_path / "vllm.yaml"))
    assert done.returncode == 2
    out = " ".join((done.stdout + done.stderr).split())
    cfg = load_config(tmp_path / "vllm.yaml")
    sending = {"difficulty", "judge", "repair"} | (  # each sends a system message
        {"tests"} if "codegemma-7b-vllm" in cfg.tests.authors else set())
    for stage in sending:
        assert f"model 'codegemma-7b-vllm', stage '{stage}'" in out
    assert "System role not supported" in out and "fold_system: true" in out
    assert "stage 'answer'" not in out  # answer sends no system message by default


def test_the_codegemma_template_folds_as_gemmas_model_card_says():
    info = template_from_tokenizer_dir(CONFIGS / "model_files" / "codegemma-7b-it")
    conv = [{"role": "system", "content": "You review code."},
            {"role": "user", "content": "Is this right?"}]
    with pytest.raises(ChatTemplateError, match="System role not supported"):
        render_chat_template(info.template, conv, bos_token=info.bos)
    assert render_chat_template(info.template, fold_system(conv), bos_token=info.bos) == (
        "<bos><start_of_turn>user\nYou review code.\n\nIs this right?<end_of_turn>\n"
        "<start_of_turn>model\n")


def test_shapes_come_from_the_stages_builders():
    cfg = load_config(CONFIGS / "cluster.yaml")
    judge = stage_shapes("judge", cfg.judge)
    # pointwise_logprob: each answer read alone, then the other answer after it, both orders
    names = [name for name, _ in judge]
    assert names == ["first round model-a", "first round model-b",
                     "second round, order ab", "second round, order ba"]
    second = judge[2][1]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"] == "2"  # the first reading's most likely digit
    tests = stage_shapes("tests", cfg.tests)
    assert [name for name, _ in tests] == ["tests", "generate_inputs"]
    assert stage_shapes("verify", cfg.verify) == []
