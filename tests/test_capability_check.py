"""Stage protocols: one registry each, templates covered by the stage's globs, and the
config-time check of what each protocol needs against each model's backend."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest
from arenaforge.pipeline.capability_check import (
    capability_problems,
    check_protocol_capabilities,
    stage_needs,
)
from arenaforge.pipeline.config import ConfigError, load_config
from arenaforge.pipeline.prompts import template_path
from arenaforge.stages import get_stage
from arenaforge.stages.arena import protocols as jp
from arenaforge.stages.instructions import difficulty

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = """\
models:
  - {id: chatty, backend: transformers, family: qwen2, path: /models/chatty}
  - {id: reader, backend: llamacpp, family: qwen2, path: /models/reader.gguf}
  - {id: served, backend: openai, family: qwen2, base_url: "http://127.0.0.1:1/v1",
     model_name: served}
"""


def write_run(tmp_path, text: str) -> Path:
    (tmp_path / "models.yaml").write_text(REGISTRY)
    path = tmp_path / "run.yaml"
    path.write_text(f"models_file: models.yaml\nartifacts_dir: {tmp_path / 'runs'}\n" + text)
    return path


@pytest.mark.parametrize("stage,registry", [("judge", jp.PROTOCOLS),
                                            ("difficulty", difficulty.PROTOCOLS)])
def test_every_protocol_template_exists_and_is_fingerprinted(stage, registry):
    globs = get_stage(stage).prompts
    for protocol in registry.values():
        for name in protocol.templates:
            assert template_path(name).is_file(), name
            assert any(fnmatch(name, g) for g in globs), (name, globs)


@pytest.mark.parametrize("stage,registry", [("judge", jp.PROTOCOLS),
                                            ("difficulty", difficulty.PROTOCOLS)])
def test_the_config_accepts_exactly_the_registered_protocols(stage, registry):
    config = get_stage(stage).config
    for name in registry:
        assert config(protocol=name).protocol == name
    with pytest.raises(ValueError, match="protocol"):
        config(protocol="telepathy")


def test_needs_follow_the_stage_judges_and_the_runs_judges(tmp_path):
    cfg = load_config(write_run(tmp_path, "experts: [chatty, reader]\njudges: [reader]\n"
                                          "judge: {protocol: pairwise, judges: [chatty]}\n"))
    got = {(n.stage, n.model_id, n.protocol, n.needs) for n in stage_needs(cfg)}
    assert got == {("judge", "chatty", "pairwise", "chat"),
                   ("difficulty", "reader", "logprob", "next_token_logprobs")}


def test_stages_not_run_need_nothing(tmp_path):
    cfg = load_config(write_run(tmp_path, "experts: [chatty]\nstages: [mine, clean]\n"))
    assert stage_needs(cfg) == []
    check_protocol_capabilities(cfg)


def test_a_logprob_protocol_on_a_chat_only_backend_names_model_stage_and_protocol(tmp_path):
    cfg = load_config(write_run(tmp_path, "experts: [chatty, reader, served]\n"
                                          "judge: {protocol: pointwise_logprob}\n"))
    problems = capability_problems(stage_needs(cfg), _registry(tmp_path))
    assert problems == [(
        "difficulty.protocol: stage 'difficulty' protocol 'logprob' needs next_token_logprobs, "
        "but model 'chatty' (backend 'transformers') does not provide it; set "
        "difficulty.protocol to one it can serve (generative) or use models whose backend "
        "provides next_token_logprobs"), (
        "judge.protocol: stage 'judge' protocol 'pointwise_logprob' needs next_token_logprobs, "
        "but model 'chatty' (backend 'transformers') does not provide it; set judge.protocol "
        "to one it can serve (pairwise, pointwise) or use models whose backend provides "
        "next_token_logprobs")]
    with pytest.raises(ConfigError, match=r"^run.yaml: difficulty.protocol: .*\n"
                                          r"run.yaml: judge.protocol: "):
        check_protocol_capabilities(cfg, "run.yaml")


def test_generative_protocols_pass_on_chat_only_backends(tmp_path):
    cfg = load_config(write_run(tmp_path, "experts: [chatty, reader]\n"
                                          "judge: {protocol: pairwise}\n"
                                          "difficulty: {protocol: generative}\n"))
    check_protocol_capabilities(cfg)


def test_an_embedding_model_cannot_judge(tmp_path):
    (tmp_path / "models.yaml").write_text(REGISTRY + "  - {id: emb, backend: sentence_transformers,"
                                          " family: minilm, role: embedding, path: /m/emb}\n")
    path = tmp_path / "run.yaml"
    path.write_text("models_file: models.yaml\nexperts: [reader]\njudges: [emb]\n"
                    "stages: [judge]\n")
    with pytest.raises(ConfigError, match="model 'emb' \\(backend 'sentence_transformers'\\) "
                                          "does not provide it; use models"):
        check_protocol_capabilities(load_config(path))


def _registry(tmp_path):
    from arenaforge.pipeline.models import load_registry

    return load_registry(tmp_path / "models.yaml")


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")
                                        if "experts:" in p.read_text()))
def test_shipped_run_configs_pass_the_check(name):
    check_protocol_capabilities(load_config(ROOT / "configs" / name), name)


def _cli(*argv: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "arenaforge.pipeline.cli", *argv], capture_output=True,
                          text=True, cwd=ROOT, check=False)


@pytest.mark.parametrize("command", [["config", "validate"], ["run", "--quiet"]])
def test_cli_rejects_a_logprob_judge_protocol_on_a_backend_without_logprobs(tmp_path, command):
    path = write_run(tmp_path, "experts: [reader, chatty]\nname: captest\n"
                               "difficulty: {protocol: generative}\n"
                               "judge: {protocol: pointwise_logprob}\n")
    proc = _cli(*command[:2], str(path), *command[2:])
    assert proc.returncode == 2, proc.stderr
    message = " ".join(proc.stderr.split())  # rich wraps long lines
    assert (f"error: {path}: judge.protocol: stage 'judge' protocol 'pointwise_logprob' needs "
            "next_token_logprobs, but model 'chatty' (backend 'transformers') does not provide "
            "it") in message
    assert "'reader'" not in message and "Traceback" not in message
    assert not (tmp_path / "runs").exists()  # `run` stopped before any model or run directory


def test_cli_validates_the_served_configs():
    for name in ("openai.yaml", "vllm.yaml"):
        proc = _cli("config", "validate", f"configs/{name}")
        assert proc.returncode == 0, proc.stderr
        assert "ok (config hash" in proc.stdout + proc.stderr
