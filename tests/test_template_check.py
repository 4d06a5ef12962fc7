"""`arenaforge config validate --render`: each model's own template against what its stages send.

The templates are the shipped copies of the models' tokenizer_config.json
(configs/model_files): no weights are needed. The embedded models' GGUF files, where their
packages are installed, are read instead.
"""

from __future__ import annotations

import json
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
from arenaforge.pipeline.model_shape import model_shape
from arenaforge.pipeline.models import load_registry
from arenaforge.pipeline.stage_conversations import stage_shapes
from arenaforge.pipeline.template_check import render_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
# Every YAML of configs/ is one of these; a new one must be put in one (the test below).
RUN_CONFIGS = ("cluster.yaml", "default.yaml", "openai.yaml", "polyglot.yaml", "smoke.yaml",
               "tiny-llm.yaml", "vllm.yaml")
REGISTRIES = ("models.yaml", "models-cluster.yaml", "models-served.yaml")
OTHER_CONFIGS = ("ablate-tiny.yaml", "judge-bench.yaml", "sft-base.yaml", "sft-gpu.yaml",
                 "sft-tiny.yaml")


def validate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arenaforge.pipeline.cli", "config", "validate",
                           *args, "--render"], cwd=ROOT, capture_output=True, text=True,
                          timeout=180, check=False, env={"COLUMNS": "400", "PATH": "/usr/bin"})


def edited_copy(tmp_path: Path, config: str, registry: str, edit) -> Path:
    """``configs/<config>`` beside a copy of its registry with ``edit(entry)`` applied to every
    entry (and of ``model_files``, which the entries name relative to the registry)."""
    shutil.copytree(CONFIGS / "model_files", tmp_path / "model_files")
    entries = yaml.safe_load((CONFIGS / registry).read_text())
    for entry in entries["models"]:
        edit(entry)
    (tmp_path / registry).write_text(yaml.safe_dump(entries))
    shutil.copy(CONFIGS / config, tmp_path / config)
    return tmp_path / config


def no_fold_system(entry: dict) -> None:
    entry.pop("fold_system", None)


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
    config = edited_copy(tmp_path, "vllm.yaml", "models-served.yaml", no_fold_system)
    done = validate(str(config))
    assert done.returncode == 2
    out = " ".join((done.stdout + done.stderr).split())
    cfg = load_config(config)
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


def test_every_yaml_of_configs_is_a_run_config_a_registry_or_named_as_neither():
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(
        RUN_CONFIGS + REGISTRIES + OTHER_CONFIGS)


@pytest.mark.parametrize("config", RUN_CONFIGS)
def test_every_shipped_run_config_renders(config):
    done = validate(f"configs/{config}")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("registry", REGISTRIES)
def test_every_chat_model_of_a_shipped_registry_has_its_files_without_weights(registry):
    for spec in load_registry(CONFIGS / registry).values():
        if spec.chat_template_source == "none":  # renders no chat: an embedder, a base model
            continue
        where = Path(spec.config_dir or "")
        assert spec.config_dir and where.is_dir(), f"{registry}: {spec.id} has no config_dir"
        assert template_from_tokenizer_dir(where).template, f"{registry}: {spec.id}"
        assert model_shape(json.loads((where / "config.json").read_text())).parameters > 0


def test_the_starcoder2_template_refuses_a_system_message_and_folds_it():
    info = template_from_tokenizer_dir(CONFIGS / "model_files" / "starcoder2-15b-instruct-v0.1")
    conv = [{"role": "system", "content": "You review code."},
            {"role": "user", "content": "Is this right?"}]
    with pytest.raises(ChatTemplateError, match="System messages are not allowed"):
        render_chat_template(info.template, conv, bos_token=info.bos, eos_token=info.eos)
    assert render_chat_template(info.template, fold_system(conv), bos_token=info.bos,
                                eos_token=info.eos) == (
        "<|endoftext|>You are an exceptionally intelligent coding assistant that consistently "
        "delivers accurate and reliable responses to user instructions.\n\n"
        "### Instruction\nYou review code.\n\nIs this right?\n\n### Response\n")
    served = load_registry(CONFIGS / "models-served.yaml")["starcoder2-15b-instruct"]
    assert served.fold_system and Path(served.config_dir).name == "starcoder2-15b-instruct-v0.1"


def test_openai_yaml_fails_on_starcoder2_without_fold_system(tmp_path):
    done = validate(str(edited_copy(tmp_path, "openai.yaml", "models-served.yaml",
                                    no_fold_system)))
    assert done.returncode == 2
    out = " ".join((done.stdout + done.stderr).split())
    for stage in ("difficulty", "judge", "repair"):
        assert f"model 'starcoder2-15b-instruct', stage '{stage}'" in out
    assert "System messages are not allowed in this template." in out


def test_embedded_models_render_from_their_config_dir_when_their_weights_are_not_installed(
        tmp_path):
    def not_installed(entry: dict) -> None:  # as on a machine without the weight packages
        if entry["backend"] == "llamacpp":
            entry["packages"] = [f"arenaforge-absent-{entry['id']}"]

    cfg = load_config(edited_copy(tmp_path, "default.yaml", "models.yaml", not_installed))
    models, problems = render_config(cfg)
    assert problems == []
    assert {m.model: m.source.split()[0] for m in models} == {
        m: "config_dir" for m in {*cfg.experts, *cfg.judge_ids}}
