"""Where a run's vLLM engines go and whether they fit, stage by stage, before anything loads.

``arenaforge config plan CONFIG --gpus N --gpu-memory-gb M`` prints it; a run with
``runner.gpu_memory_gb`` set places its engines by the same plan (``RayExecutor.engines``).

Per engine (one registry model served by ``backend: vllm``): its weights (parameters x dtype,
:mod:`arenaforge.pipeline.model_shape`), its KV cache for ``options.max_num_seqs`` sequences of
``n_ctx`` tokens (vLLM's own minimum is one; unset counts one), and a fixed runtime overhead per
GPU (activations of vLLM's profiling pass, CUDA graphs, the CUDA context: vLLM measures these at
start-up, so :data:`RUNTIME_OVERHEAD_GIB` is an estimate). A replica spans
``tensor_parallel_size`` GPUs (the registry's, doubled while a rank does not fit one GPU and
the attention heads divide evenly, as vLLM requires).

Stage by stage: the engines loaded while a stage runs are those the runner keeps
(:func:`arenaforge.pipeline.engine_lifetimes.models_to_keep`): the stage's own, or over a stage without
models the next model stage's that were already loaded. A run whose every stage can give each of
its engines whole GPUs does so (``gpu_memory_utilization`` 0.9, vLLM's default, the rest of
the GPU going to more KV cache); otherwise every engine asks Ray for the share of one GPU its
memory needs (tensor parallel size 1 only), and the stage fits only if Ray can place the shares
in any order it receives them (first-fit: the sum without the smallest share is at most ``N x
(0.9 - largest share)``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from arenaforge.pipeline.engine_lifetimes import resident_engines, stage_model_sets
from arenaforge.pipeline.model_shape import (
    ModelShapeError,
    dtype_bytes,
    kv_bytes_per_sequence,
    load_model_shape,
)
from arenaforge.pipeline.models import load_registry

GIB = 2 ** 30
GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default share of a GPU for one engine (CacheConfig)
RUNTIME_OVERHEAD_GIB = 2.0  # per GPU rank: profiling activations, CUDA graphs, context
SHARE_STEP = 0.01  # GPU shares are rounded up to this


class PlacementError(ValueError):
    """The configured engines cannot fit the GPUs (names the stage and the engine)."""


@dataclasses.dataclass(frozen=True)
class EnginePlan:
    """One engine's share of the cluster.

    ``gpus``: GPUs of all its replicas together (fractions when engines share GPUs);
    ``weights_gib``: one copy of the weights; ``kv_cache_gib``: the KV cache one replica needs
    for ``concurrency`` sequences of ``context_length`` tokens (all its ranks);
    ``memory_per_gpu_gib``: what one rank needs on its GPU.
    """

    model: str
    replicas: int
    gpus: float
    tensor_parallel_size: int
    weights_gib: float
    kv_cache_gib: float
    memory_per_gpu_gib: float
    gpu_memory_utilization: float
    concurrency: int
    context_length: int
    stages: tuple[str, ...]

    @property
    def share(self) -> float:
        """The GPU share one rank asks Ray for."""
        return self.gpus / (self.replicas * self.tensor_parallel_size)

    def ray_resources(self) -> dict[str, Any]:
        """What the engine actor asks Ray for (:func:`placed_spec`)."""
        return {"num_gpus": self.share, "tensor_parallel_size": self.tensor_parallel_size,
                "gpu_memory_utilization": self.gpu_memory_utilization,
                "replicas": self.replicas}

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "stages": list(self.stages)}


@dataclasses.dataclass(frozen=True)
class StagePlan:
    """The engines loaded while one stage runs and whether they fit."""

    stage: str
    engines: tuple[str, ...]
    gpus: float
    fits: bool
    problem: str | None = None


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A config's placement on ``num_gpus`` GPUs of ``gpu_memory_gb`` GB each."""

    num_gpus: int
    gpu_memory_gb: float
    shared_gpus: bool
    engines: tuple[EnginePlan, ...]
    stages: tuple[StagePlan, ...]
    problem: str | None = None

    @property
    def fits(self) -> bool:
        return self.problem is None and all(s.fits for s in self.stages)

    def first_problem(self) -> str | None:
        return self.problem or next((s.problem for s in self.stages if not s.fits), None)

    def require_fit(self) -> RunPlan:
        """This plan, or :class:`PlacementError` naming the stage and the engine."""
        if not self.fits:
            raise PlacementError(self.first_problem())
        return self

    def ray_placements(self) -> dict[str, dict[str, Any]]:
        """Per model id, the resources its engine asks Ray for."""
        return {e.model: e.ray_resources() for e in self.engines}

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": self.num_gpus, "gpu_memory_gb": self.gpu_memory_gb,
                "shared_gpus": self.shared_gpus, "fits": self.fits,
                "problem": self.first_problem(),
                "engines": [e.to_dict() for e in self.engines],
                "stages": [dataclasses.asdict(s) for s in self.stages]}


def _round_up(value: float, step: float) -> float:
    return round(math.ceil(value / step - 1e-9) * step, 6)


def placed_spec(spec: Any, placement: dict[str, Any] | None) -> Any:
    """``spec`` with a placement plan's GPUs, tensor-parallel size and memory share applied
    (pure; ``placement`` is one engine's ``ray_resources`` of
    :class:`arenaforge.pipeline.placement.EnginePlan`, ``None``: as the registry says).

    >>> from arenaforge.pipeline.models.registry import ModelSpec
    >>> spec = ModelSpec(id="m", backend="vllm", family="qwen2", path="/m")
    >>> placed = placed_spec(spec, {"num_gpus": 0.5, "tensor_parallel_size": 1,
    ...                             "gpu_memory_utilization": 0.45})
    >>> placed.resources.num_gpus, placed.options["gpu_memory_utilization"]
    (0.5, 0.45)
    """
    if not placement:
        return spec
    resources = spec.resources.model_copy(update={
        "num_gpus": placement["num_gpus"], "replicas": placement.get("replicas"),
        "tensor_parallel_size": placement["tensor_parallel_size"]})
    options = {**spec.options, "gpu_memory_utilization": placement["gpu_memory_utilization"]}
    return spec.model_copy(update={"resources": resources, "options": options})


def size_engine(spec: Any, gpu_gib: float, num_gpus: int,
                stages: tuple[str, ...]) -> tuple[EnginePlan | None, str | None]:
    """One vLLM engine's plan on GPUs of ``gpu_gib`` GiB (pure but for reading its config).

    Returns:
        ``(plan, None)``, or ``(None, why)`` when no tensor-parallel size up to ``num_gpus``
        lets a rank fit one GPU.
    """
    try:
        shape = load_model_shape(spec)
    except ModelShapeError as exc:
        return None, str(exc)
    concurrency = int(spec.options.get("max_num_seqs") or 1)
    kv_size = dtype_bytes(spec.options.get("kv_cache_dtype"), shape.dtype_bytes)
    tp = spec.resources.tensor_parallel_size
    usable = gpu_gib * GPU_MEMORY_UTILIZATION
    while True:
        kv_rank = kv_bytes_per_sequence(shape, spec.n_ctx, tp, kv_size) * concurrency / GIB
        per_gpu = shape.weights_bytes / tp / GIB + kv_rank + RUNTIME_OVERHEAD_GIB
        if per_gpu <= usable:
            break
        bigger = next((t for t in range(tp + 1, num_gpus + 1)
                       if shape.num_attention_heads % t == 0), None)
        if bigger is None:
            return None, (f"engine {spec.id!r} needs {per_gpu:.1f} GiB per GPU at "
                          f"tensor_parallel_size {tp} (weights {shape.weights_bytes / GIB:.1f} "
                          f"GiB, KV cache for {concurrency} x {spec.n_ctx} tokens), more than "
                          f"{usable:.1f} GiB ({GPU_MEMORY_UTILIZATION:.0%} of a "
                          f"{gpu_gib:.1f} GiB GPU), and no larger tensor-parallel size dividing "
                          f"its {shape.num_attention_heads} attention heads fits {num_gpus} "
                          "GPU(s)")
        tp = bigger
    replicas = spec.resources.replicas or 1
    return EnginePlan(model=spec.id, replicas=replicas, gpus=float(replicas * tp),
                      tensor_parallel_size=tp, weights_gib=round(shape.weights_bytes / GIB, 2),
                      kv_cache_gib=round(kv_rank * tp, 2), memory_per_gpu_gib=round(per_gpu, 2),
                      gpu_memory_utilization=GPU_MEMORY_UTILIZATION, concurrency=concurrency,
                      context_length=spec.n_ctx, stages=stages), None


def run_stage_models(cfg: Any, registry: dict[str, Any]) -> list[tuple[str, set[str]]]:
    """Per configured stage of a run config, the registry models it calls."""
    from arenaforge.stages import get_stage

    return stage_model_sets([get_stage(n) for n in cfg.stages],
                            {n: cfg.stage_config(n) for n in cfg.stages}, set(registry),
                            cfg.experts)


def _shared(plans: list[EnginePlan], gpu_gib: float) -> list[EnginePlan]:
    """The plans with each rank asking Ray for the share of one GPU its memory needs."""
    out = []
    for p in plans:
        share = _round_up(p.memory_per_gpu_gib / gpu_gib, SHARE_STEP)
        out.append(dataclasses.replace(p, gpus=round(share * p.replicas, 6),
                                       gpu_memory_utilization=share))
    return out


def _stage_fit(stage: str, items: list[tuple[str, float]], num_gpus: int,
               whole: bool) -> StagePlan:
    """Whether one stage's engine ranks and GPU tasks (``(name, share)``) fit ``num_gpus``."""
    names = tuple(dict.fromkeys(n for n, _ in items))
    total = round(sum(s for _, s in items), 6)
    if not items:
        return StagePlan(stage, names, 0.0, True)
    if whole:
        need = sum(math.ceil(s - 1e-9) for _, s in items)
        if need <= num_gpus:
            return StagePlan(stage, names, float(need), True)
        return StagePlan(stage, names, float(need), False,
                         f"stage {stage!r}: its engines {list(names)} need {need} whole GPUs "
                         f"and {num_gpus} are given")
    big_name, big = max(items, key=lambda i: i[1])
    small = min(s for _, s in items)
    room = num_gpus * (GPU_MEMORY_UTILIZATION - big)
    if big <= GPU_MEMORY_UTILIZATION and total - small <= room + 1e-9:
        return StagePlan(stage, names, total, True)
    return StagePlan(stage, names, total, False,
                     f"stage {stage!r}: engine {big_name!r} needs {big:.2f} of a GPU and the "
                     f"stage's engines {list(names)} {total:.2f} GPUs together, which "
                     f"{num_gpus} GPU(s) of which each engine may use "
                     f"{GPU_MEMORY_UTILIZATION:.0%} cannot hold in every order Ray may "
                     "place them")


def plan_run(cfg: Any, num_gpus: int, gpu_memory_gb: float) -> RunPlan:
    """The placement plan of a run config on ``num_gpus`` GPUs of ``gpu_memory_gb`` GB.

    Only ``backend: vllm`` models are placed (llama.cpp and transformers engines run on CPU,
    served models elsewhere); ``runner.task_gpus`` adds each such stage's GPU tasks, and the
    embedding service's share to the stages from the first that embeds to the last.
    """
    from arenaforge.pipeline.embedding_service import service_gpus
    from arenaforge.stages import get_stage

    registry = load_registry(cfg.models_file)
    used = run_stage_models(cfg, registry)
    gpu_models = {m for _, models in used for m in models if registry[m].backend == "vllm"}
    gpu_gib = gpu_memory_gb * 1e9 / GIB
    if num_gpus < 1 and gpu_models:
        return RunPlan(num_gpus, gpu_memory_gb, False, (), (),
                       f"engines {sorted(gpu_models)} run on vLLM and no GPU is given")
    plans, problems = [], []
    for model_id in sorted(gpu_models, key=list(registry).index):
        stages = tuple(name for name, models in used if model_id in models)
        plan, why = size_engine(registry[model_id], gpu_gib, num_gpus, stages)
        if plan is None:
            problems.append(f"stage {stages[0]!r}: {why}")
        else:
            plans.append(plan)
    if problems:
        return RunPlan(num_gpus, gpu_memory_gb, False, tuple(plans), (), problems[0])
    by_id = {p.model: p for p in plans}
    resident = resident_engines(used)
    task_gpus = getattr(cfg.runner, "task_gpus", {}) or {}
    # the embedding stages' GPU goes to the run's embedding service, which holds the largest of
    # their shares from the first of them to the last (arenaforge.pipeline.embedding_service)
    service = service_gpus(task_gpus)
    names = [name for name, _ in used]
    embeds = [i for i, name in enumerate(names) if get_stage(name).uses_embeddings]
    service_span = set(names[embeds[0]:embeds[-1] + 1]) if embeds and service else set()

    def stage_plans(engines: dict[str, EnginePlan], whole: bool) -> list[StagePlan]:
        out = []
        for (name, _), loaded in zip(used, resident, strict=True):
            items = [(m, engines[m].share) for m in sorted(loaded & set(engines))
                     for _ in range(engines[m].replicas * engines[m].tensor_parallel_size)]
            if name in service_span:
                items.append(("embedding service", float(service)))
            elif task_gpus.get(name) and not get_stage(name).uses_embeddings:
                items.append((f"{name} tasks", float(task_gpus[name])))
            out.append(_stage_fit(name, items, num_gpus, whole))
        return out

    whole = stage_plans(by_id, whole=True)
    if all(s.fits for s in whole):
        return RunPlan(num_gpus, gpu_memory_gb, False, tuple(plans), tuple(whole))
    tensor_parallel = [p.model for p in plans if p.tensor_parallel_size > 1]
    if tensor_parallel:  # a tensor-parallel replica takes whole GPUs: no sharing to try
        return RunPlan(num_gpus, gpu_memory_gb, False, tuple(plans), tuple(whole))
    shared = _shared(plans, gpu_gib)
    return RunPlan(num_gpus, gpu_memory_gb, True, tuple(shared),
                   tuple(stage_plans({p.model: p for p in shared}, whole=False)))
