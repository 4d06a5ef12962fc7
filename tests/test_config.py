"""Config loading: good configs resolve, bad ones fail early naming the file and field."""

import subprocess
import sys
from pathlib import Path

import pytest
from arenaforge.pipeline.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "configs" / "models.yaml"


def _write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(f"models_file: {MODELS}\nartifacts_dir: {tmp_path / 'runs'}\n" + text)
    return path


def test_minimal_config_resolves_with_defaults(tmp_path):
    cfg = load_config(_write(tmp_path, "experts: [qwen2.5-coder-0.5b, smollm2-135m]\n"))
    assert cfg.judge_ids == ["qwen2.5-coder-0.5b", "smollm2-135m"]
    assert cfg.runner.kind == "ray"
    assert cfg.models_file == MODELS


def test_overrides_apply_and_change_the_hash(tmp_path):
    path = _write(tmp_path, "experts: [smollm2-135m]\n")
    base = load_config(path)
    cfg = load_config(path, ["seed=7", "runner.shard_size=3"])
    assert cfg.seed == 7 and cfg.runner.shard_size == 3
    assert cfg.config_hash() != base.config_hash()
    # runner settings change speed, not rows: they stay out of the hash
    assert load_config(path, ["runner.shard_size=3"]).config_hash() == base.config_hash()


@pytest.mark.parametrize("text, overrides, pattern", [
    ("experts: [smollm2-135m]\nbogus: 1\n", [], r"run.yaml: bogus: unknown key"),
    ("experts: [smollm2-135m]\nrunner: {shard_size: many}\n", [], r"run.yaml: runner.shard_size: "),
    ("experts: [smollm2-135m]\nrunner: {nope: 1}\n", [], r"runner.nope: unknown key"),
    ("experts: [smollm2-135m]\n", ["runner.shard_size=0"], r"overrides\): runner.shard_size"),
    ("experts: [no-such-model]\n", [], r"experts.0: unknown model id 'no-such-model'"),
    ("experts: [smollm2-135m]\nstages: [clean, mine]\n", [], r"stages: .*pipeline order"),
    ("experts: [smollm2-135m\n", [], r"run.yaml: not valid YAML"),
])
def test_bad_configs_name_file_and_field(tmp_path, text, overrides, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config(_write(tmp_path, text), overrides)


def test_top_level_list_is_rejected(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="list.yaml: top level must be a mapping"):
        load_config(path)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_bad_override_syntax(tmp_path):
    with pytest.raises(ConfigError, match="expected dotted.key=value"):
        load_config(_write(tmp_path, "experts: [smollm2-135m]\n"), ["seed"])


@pytest.mark.parametrize("args", [
    ["run", "{cfg}", "--set", "runner.bogus=1", "--quiet"],
    ["run", "{missing}", "--quiet"],
    ["config", "validate", "{cfg}", "--set", "seed=notanint"],
])
def test_cli_exits_2_and_leaves_no_run_dir(tmp_path, args):
    cfg = _write(tmp_path, "experts: [smollm2-135m]\nname: clitest\n")
    argv = [a.format(cfg=cfg, missing=tmp_path / "missing.yaml") for a in args]
    proc = subprocess.run([sys.executable, "-m", "arenaforge.pipeline.cli", *argv], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert "error:" in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("args,named", [
    (["ablate", "{tmp}", "--config", "{bad}"], "rules.0"),
    (["ablate", "{tmp}", "--config", "{missing}"], "missing.yaml"),
    (["train", "{missing}"], "missing.yaml"),
])
def test_train_and_ablate_configs_fail_like_run_configs(tmp_path, args, named):
    bad = tmp_path / "ablate.yaml"
    bad.write_text("train_recipe: sft-tiny.yaml\nrules: [bogus]\n")
    argv = [a.format(tmp=tmp_path, bad=bad, missing=tmp_path / "missing.yaml") for a in args]
    proc = subprocess.run([sys.executable, "-m", "arenaforge.pipeline.cli", *argv], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert "error:" in proc.stderr and named in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "ablation").exists()


def test_cli_config_show_prints_resolved_defaults(tmp_path):
    cfg = _write(tmp_path, "experts: [smollm2-135m]\n")
    proc = subprocess.run([sys.executable, "-m", "arenaforge.pipeline.cli", "config", "show", str(cfg)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "shard_size: 8" in proc.stdout and "sandbox:" in proc.stdout


def test_every_stage_has_a_declared_section():
    from arenaforge.pipeline.config import RunConfig
    from arenaforge.stages import PIPELINE, get_stage

    for name in PIPELINE:
        assert RunConfig.model_fields[name].annotation is get_stage(name).config, name


def test_run_level_defaults_are_resolved_into_the_stage_sections(tmp_path):
    from arenaforge.pipeline.config import load_config

    cfg = load_config(ROOT / "configs" / "default.yaml",
                      ["judges=[smollm2-135m]", "mine.miners=null", "tests.authors=null",
                       "difficulty.judges=null", "judge.judges=null", "verify.timeout_s=7"])
    assert cfg.mine.miners == cfg.experts and cfg.tests.authors == cfg.experts
    assert cfg.judge.judges == ["smollm2-135m"] == cfg.difficulty.judges
    assert cfg.repair.timeout_s == 7 and cfg.repair.fail_fast == cfg.verify.fail_fast
    pinned = load_config(ROOT / "configs" / "default.yaml", ["answer.experts=[smollm2-135m]"])
    assert pinned.answer.experts == ["smollm2-135m"]  # what a section names is kept
    assert pinned.judge.judges == ["qwen2.5-coder-1.5b"]
