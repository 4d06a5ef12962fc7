"""`arenaforge config plan`: weights and KV cache as vLLM counts them, engines placed per stage."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from arenaforge.pipeline.config import load_config
from arenaforge.pipeline.engine_lifetimes import resident_engines
from arenaforge.pipeline.model_shape import kv_bytes_per_sequence, model_shape
from arenaforge.pipeline.models import load_registry
from arenaforge.pipeline.placement import (
    GPU_MEMORY_UTILIZATION,
    PlacementError,
    placed_spec,
    plan_run,
)

ROOT = Path(__file__).resolve().parents[1]
FILES = ROOT / "configs" / "model_files"


def plan_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arenaforge.pipeline.cli", "config", "plan",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=180,
                          check=False, env={"COLUMNS": "400", "PATH": "/usr/bin"})


# Parameter counts the model cards give (billions).
PUBLISHED = {"Qwen2.5-Coder-7B-Instruct": 7.61, "deepseek-coder-6.7b-instruct": 6.74,
             "codegemma-7b-it": 8.54, "CodeLlama-7b-Instruct-hf": 6.74,
             "OpenCoder-8B-Instruct": 7.77, "Mistral-7B-Instruct-v0.2": 7.24,
             "granite-3.0-8b-instruct": 8.17, "starcoder2-15b-instruct-v0.1": 15.96,
             "Qwen2.5-Coder-0.5B-Instruct": 0.49, "Qwen2.5-Coder-1.5B-Instruct": 1.54,
             "SmolLM2-135M-Instruct": 0.135}


def test_every_shipped_model_file_has_its_model_cards_size_here():
    assert sorted(PUBLISHED) == sorted(p.name for p in FILES.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameters_from_the_config_match_the_model_card(name):
    shape = model_shape(json.loads((FILES / name / "config.json").read_text()))
    assert shape.parameters / 1e9 == pytest.approx(PUBLISHED[name], abs=0.01)
    assert shape.weights_bytes == shape.parameters * 2  # bfloat16


@pytest.mark.parametrize(("name", "context", "tp"), [
    ("Qwen2.5-Coder-7B-Instruct", 4096, 1), ("Qwen2.5-Coder-7B-Instruct", 4100, 2),
    ("Qwen2.5-Coder-7B-Instruct", 4096, 8),  # more ranks than KV heads: vLLM replicates them
    ("codegemma-7b-it", 8192, 1), ("deepseek-coder-6.7b-instruct", 33, 4)])
def test_kv_cache_is_vllms_pages_of_a_max_length_request(name, context, tp):
    cfg = json.loads((FILES / name / "config.json").read_text())
    shape = model_shape(cfg)
    # vLLM: per layer cdiv(max_model_len, block_size) pages of
    # block_size * num_kv_heads * (head_size + head_size_v) * dtype_size, with
    # max(1, total_kv_heads // tp) heads on a rank (ModelConfig.get_num_kv_heads)
    heads = max(1, cfg["num_key_value_heads"] // tp)
    head = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    page = 16 * heads * (head + head) * 2
    expected = cfg["num_hidden_layers"] * math.ceil(context / 16) * page
    assert kv_bytes_per_sequence(shape, context, tp) == expected


def test_cluster_fits_eight_80gb_gpus_stage_by_stage():
    done = plan_cli("configs/cluster.yaml", "--gpus", "8", "--gpu-memory-gb", "80", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["fits"] is True and len(plan["engines"]) >= 5
    for engine in plan["engines"]:
        assert {"model", "gpus", "tensor_parallel_size", "weights_gib", "kv_cache_gib"} <= set(
            engine)
        assert engine["gpus"] == 1 and engine["tensor_parallel_size"] == 1
    cfg = load_config(ROOT / "configs" / "cluster.yaml")
    stages = {s["stage"]: s for s in plan["stages"]}
    assert set(stages["answer"]["engines"]) == set(cfg.experts)
    assert set(stages["judge"]["engines"]) == set(cfg.judge_ids)
    # experts and judges are never loaded together: the peak is a stage's, not the sum
    assert max(s["gpus"] for s in plan["stages"]) == len(cfg.experts) < len(plan["engines"])
    assert not set(cfg.judge_ids) & set(cfg.tests.authors)


def test_the_embedding_stages_gpu_is_the_services_through_both_stages():
    # task_gpus {decontaminate: 0.25, compress: 1}: one service embeds for both, holding the
    # larger share from decontaminate to compress; their tasks hold no GPU
    cfg = load_config(ROOT / "configs" / "cluster.yaml")
    assert cfg.runner.task_gpus == {"decontaminate": 0.25, "compress": 1}
    stages = {s.stage: s for s in plan_run(cfg, 8, 80).require_fit().stages}
    for name in ("decontaminate", "compress"):
        assert stages[name].engines == ("embedding service",) and stages[name].gpus == 1
    assert all("embedding service" not in s.engines for n, s in stages.items()
               if n not in ("decontaminate", "compress"))


def test_cluster_on_one_24gb_gpu_exits_2_naming_the_stage_and_the_engine():
    done = plan_cli("configs/cluster.yaml", "--gpus", "1", "--gpu-memory-gb", "24")
    assert done.returncode == 2
    err = " ".join(done.stderr.split())
    assert "stage 'mine'" in err and "engine 'qwen2.5-coder-7b'" in err
    assert "fits: false" in done.stdout


def test_engines_share_a_gpu_in_shares_ray_can_place_in_any_order():
    cfg = load_config(ROOT / "configs" / "vllm.yaml")
    plan = plan_run(cfg, 1, 80).require_fit()
    assert plan.shared_gpus
    shares = [e.share for e in plan.engines]
    assert all(0 < s < GPU_MEMORY_UTILIZATION for s in shares)
    assert sum(shares) - min(shares) <= GPU_MEMORY_UTILIZATION - max(shares)
    for engine in plan.engines:  # vLLM's budget is the share of the GPU Ray gives it
        assert engine.gpu_memory_utilization == engine.share
        assert engine.memory_per_gpu_gib <= engine.share * 80e9 / 2 ** 30
    registry = load_registry(cfg.models_file)
    placed = placed_spec(registry["codegemma-7b-vllm"],
                         plan.ray_placements()["codegemma-7b-vllm"])
    assert placed.resources.num_gpus == placed.options["gpu_memory_utilization"] < 0.3
    with pytest.raises(PlacementError, match="stage 'mine'"):
        plan_run(cfg, 1, 40).require_fit()


def test_a_model_too_big_for_one_gpu_gets_the_smallest_tensor_parallel_size_that_fits(tmp_path):
    # Llama-3-70B's shape: 140 GB of bfloat16 weights
    model = tmp_path / "llama70b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": 128256, "hidden_size": 8192,
        "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
        "num_key_value_heads": 8, "torch_dtype": "bfloat16"}))
    (tmp_path / "models.yaml").write_text(
        f"models:\n  - id: big\n    backend: vllm\n    family: llama\n    path: /nowhere\n"
        f"    config_dir: {model}\n    n_ctx: 4096\n    resources: {{replicas: 1}}\n")
    (tmp_path / "run.yaml").write_text("models_file: models.yaml\nexperts: [big]\n"
                                       "stages: [mine]\n")
    cfg = load_config(tmp_path / "run.yaml")
    plan = plan_run(cfg, 4, 80).require_fit()
    (engine,) = plan.engines
    assert engine.tensor_parallel_size == 4 and engine.gpus == 4
    assert plan.ray_placements()["big"]["num_gpus"] == 1.0  # a whole GPU per rank
    with pytest.raises(PlacementError, match="engine 'big' needs .* tensor_parallel_size 2"):
        plan_run(cfg, 2, 80).require_fit()


def test_resident_engines_follow_the_runners_release_rule():
    stages = [("mine", {"e"}), ("clean", set()), ("difficulty", {"j"}),
              ("decontaminate", set()), ("answer", {"e"}), ("tests", {"e"}),
              ("verify", set()), ("repair", {"e"}), ("emit", set())]
    assert resident_engines(stages) == [{"e"}, set(), {"j"}, set(), {"e"}, {"e"}, {"e"},
                                        {"e"}, set()]


def test_a_run_that_cannot_fit_stops_before_any_engine_loads(tmp_path, ray_local):
    from arenaforge.pipeline.context import RunContext
    from arenaforge.pipeline.executors import RayExecutor

    cfg = load_config(ROOT / "configs" / "vllm.yaml")
    executor = RayExecutor(gpu_memory_gb=80)  # this Ray has no GPU
    with pytest.raises(PlacementError, match="no GPU is given"):
        executor.engines(RunContext(tmp_path, cfg))
    assert executor.loaded_models() == {}
