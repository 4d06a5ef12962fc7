"""Engine pools: one per model for the whole run, placed by the registry's resources."""

from __future__ import annotations

from pathlib import Path

import pytest
from arenaforge.pipeline.config import load_config
from arenaforge.pipeline.engines import actor_options, replica_resources
from arenaforge.pipeline.models import load_registry
from arenaforge.pipeline.models.registry import ModelSpec

ROOT = Path(__file__).resolve().parents[1]


def test_vllm_config_asks_ray_for_the_gpus_its_registry_names():
    cfg = load_config(ROOT / "configs" / "vllm.yaml", [])
    assert cfg.runner.kind == "ray"
    registry = load_registry(cfg.models_file)
    for model_id in cfg.experts:
        spec = registry[model_id]
        assert spec.resources.num_gpus > 0, model_id
        res = replica_resources(spec, default_replicas=4, default_threads=1)
        opts = actor_options(res, max_retries=3)
        assert opts["num_gpus"] == spec.resources.num_gpus
        assert res["replicas"] == spec.resources.replicas
        assert opts["scheduling_strategy"] == "SPREAD"
    # three 7B experts share the one GPU: together they ask for at most one
    assert sum(registry[m].resources.num_gpus * (registry[m].resources.replicas or 1)
               for m in cfg.experts) <= 1


def test_tensor_parallel_replica_gets_a_packed_placement_group():
    spec = ModelSpec(id="big", backend="vllm", family="qwen2", path="/m",
                     resources={"tensor_parallel_size": 4, "replicas": 2})
    res = replica_resources(spec, default_replicas=8, default_threads=2)
    assert res["replicas"] == 2 and res["threads"] == 2
    assert res["bundles"] == [{"GPU": 1.0, "CPU": 1.0}] * 4
    assert res["num_gpus"] == 0  # the GPUs are the bundles', for vLLM's own Ray workers


def test_defaults_follow_the_runner():
    spec = ModelSpec(id="m", backend="llamacpp", family="qwen2", path="/m.gguf")
    res = replica_resources(spec, default_replicas=3, default_threads=2)
    assert (res["replicas"], res["threads"], res["num_cpus"], res["num_gpus"]) == (3, 2, 0.0, 0.0)


@pytest.mark.models
def test_each_model_loads_once_per_replica_for_the_whole_run(tmp_path, ray_local):
    """mine and difficulty both use SmolLM2: its engines load once and serve both stages."""
    from arenaforge.pipeline.context import RunContext, close_process_resources
    from arenaforge.pipeline.executors import RayExecutor
    from arenaforge.pipeline.runner import run_stages
    from arenaforge.pipeline.store import RunStore
    from arenaforge.stages import get_stage

    model = "smollm2-135m"
    cfg = load_config(ROOT / "configs" / "tiny-llm.yaml", [
        f"experts=[{model}]", f"mine.miners=[{model}]", "mine.samples_per_language=4",
        "mine.max_tokens=24", f"difficulty.judges=[{model}]", "difficulty.min_task_prob=null",
        "difficulty.min_difficulty=1", "stages=[mine,clean,difficulty]",
        f"artifacts_dir={tmp_path}"])
    executor = RayExecutor(model_workers=2)
    specs = [get_stage(n) for n in cfg.stages]
    store = RunStore(tmp_path / cfg.name)
    store.open(cfg.config_hash(), "x: 1\n")
    try:
        funnel = run_stages(specs, {s.name: cfg.stage_config(s.name) for s in specs},
                            RunContext(store.root, cfg), store, executor, 2, show_progress=False)
        loaded = executor.loaded_models()
    finally:
        executor.close()
        close_process_resources()
    assert set(loaded) == {model}  # nothing else was loaded anywhere
    replicas = loaded[model]
    assert len(replicas) == 2 and len({r["pid"] for r in replicas}) == 2
    assert funnel["mine"].rows_out == 4 and funnel["difficulty"].model_seconds > 0
