"""The real difficulty, answer and judge stages on stand-in vLLM engines (``tests/standins``).

``python tests/standin_pipeline.py WORK_DIR inline|ray`` writes ``WORK_DIR/<kind>.json``: the
stand-in engines' events (``start``/``generate``/``stop``, in ``WORK_DIR/<kind>-events.jsonl``)
and the engine traits each stage's backend reported. Run in its own process: the stand-in
``vllm`` must be importable by the Ray workers (a fresh local Ray with ``tests/standins`` on
their path), and it must never shadow a real vLLM elsewhere.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
STANDINS = ROOT / "tests" / "standins"
sys.path[:0] = [str(STANDINS), str(ROOT)]

import pyarrow as pa
from arenaforge.pipeline.context import RunContext, close_process_resources
from arenaforge.pipeline.runner import run_stages
from arenaforge.pipeline.stage import StageConfig, StageSpec
from arenaforge.pipeline.store import RunStore
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages import get_stage

EXPERTS = ["e1", "e2", "e3"]
JUDGES = ["j1", "j2"]
GPU_GIB = {"e1": 10.0, "e2": 10.0, "e3": 10.0, "j1": 12.0, "j2": 12.0}
INSTRUCTIONS = 12
SHARD_SIZE = 4
N_CTX = 2048


class SourceConfig(StageConfig):
    n: int = INSTRUCTIONS


def _plan(cfg: SourceConfig, ctx) -> pa.Table:
    texts = [f"Write a Python function add{i}(a, b) returning a + b + {i}." for i in range(cfg.n)]
    return pa.table({"instruction_id": [instruction_id(t) for t in texts], "instruction": texts})


def _identity(table: pa.Table, cfg: StageConfig, ctx) -> pa.Table:
    return table


# "clean" feeds difficulty and "compress" feeds answer, as in the pipeline; neither uses models
CLEAN = StageSpec(name="clean", config=SourceConfig, run=_identity, plan=_plan,
                  outputs=("instruction_id", "instruction"))
COMPRESS = StageSpec(name="compress", config=StageConfig, run=_identity, source="difficulty",
                     inputs=("instruction_id", "instruction"),
                     outputs=("instruction_id", "instruction"))


def registry(work: Path, events: Path) -> Path:
    lines = ["models:"]
    for model_id in EXPERTS + JUDGES:
        weights = work / "weights" / model_id  # the stand-in records this path as the model
        weights.mkdir(parents=True, exist_ok=True)
        lines += [f"  - id: {model_id}", "    backend: vllm", "    family: standin",
                  f"    path: {weights}", f"    n_ctx: {N_CTX}",
                  f"    options: {{record_file: '{events}', gpu_gib: {GPU_GIB[model_id]}}}",
                  "    resources: {replicas: 1}"]
    path = work / "models.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(work: Path, kind: str) -> None:
    from arenaforge.pipeline.backends.capabilities import traits_of
    from arenaforge.pipeline.executors import InlineExecutor, RayExecutor
    from arenaforge.stages.arena.answer import AnswerConfig
    from arenaforge.stages.arena.judge import JudgeConfig
    from arenaforge.stages.instructions.difficulty import DifficultyConfig

    events = work / f"{kind}-events.jsonl"
    cfg = SimpleNamespace(seed=0, runner=SimpleNamespace(request_cache=False), experts=EXPERTS,
                          models_file=registry(work, events))
    if kind == "ray":
        import ray

        # a Ray of its own: its workers import the stand-in vllm
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": f"{STANDINS}:{ROOT}"}})
        executor = RayExecutor(model_workers=1)
    else:
        executor = InlineExecutor(1)
    specs = [CLEAN, get_stage("difficulty"), COMPRESS, get_stage("answer"), get_stage("judge")]
    cfgs = {"clean": SourceConfig(), "compress": StageConfig(),
            "difficulty": DifficultyConfig(judges=JUDGES, protocol="logprob", min_task_prob=None,
                                           min_difficulty=1.0),
            "answer": AnswerConfig(experts=EXPERTS, max_tokens=64),
            "judge": JudgeConfig(judges=JUDGES, protocol="pointwise_logprob")}
    store = RunStore(work / kind)
    store.open("standin", "standin: true\n")
    ctx = RunContext(store.root, cfg, threads=1)
    try:
        funnel = run_stages(specs, cfgs, ctx, store, executor, SHARD_SIZE, show_progress=False)
        recorded = [json.loads(x) for x in events.read_text().splitlines()]
        loaded = executor.loaded_models() if kind == "ray" else {}
        # what a stage's backend reports: through the engine directory on Ray, else in process
        engines = executor.engines(ctx) if kind == "ray" else None
        stage_ctx = ctx.for_stage(get_stage("judge"), 1, engines)
        traits = dataclasses.asdict(traits_of(stage_ctx.backend("j1")))
        prefers = bool(getattr(stage_ctx.backend("j1"), "prefers_batches", False))
    finally:
        close_process_resources()
        executor.close()
    rows = {row.stage: row.rows_out for row in funnel}
    (work / f"{kind}.json").write_text(json.dumps(
        {"rows": rows, "traits": traits, "prefers_batches": prefers, "loaded": loaded,
         "events": recorded}, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
