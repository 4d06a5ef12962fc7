"""When a run's engines live: from the first stage that uses a model while the model stages
that follow use it, so the engines loaded at any moment are one stage's.

The runner releases, after each stage, the engines the next model stage does not use
(:func:`models_to_keep`), among those that hold a GPU (:func:`holds_gpu`): an engine on CPU
(llama.cpp, an embedded model loading in a second from the page cache) stays loaded, as
reloading it would cost time and free no GPU. The placement plan sizes each stage by the
engines loaded while it runs (:func:`resident_engines`). Pure functions over ``(stage name,
models it calls)`` pairs.
"""

from __future__ import annotations

from typing import Any


def stage_model_sets(specs: list[Any], stage_cfgs: dict[str, Any], known: set[str],
                     experts: list[str] | tuple[str, ...] = ()) -> list[tuple[str, set[str]]]:
    """Per stage, in order, the registry models its shards call (empty for other stages).

    A model stage whose section names no registry model asks the models that wrote its input
    rows (repair asks each failing answer's author): the run's ``experts``.
    """
    from arenaforge.pipeline.models import stage_models

    out = []
    for s in specs:
        used = stage_models(stage_cfgs[s.name], known) if s.uses_models else set()
        if s.uses_models and not used:
            used = set(experts) & known
        out.append((s.name, used))
    return out


def holds_gpu(spec: Any) -> bool:
    """Whether a registry entry's engine holds GPU memory (vLLM, or a GPU share asked of Ray)."""
    res = spec.resources
    return spec.backend == "vllm" or res.num_gpus > 0 or res.tensor_parallel_size > 1


def models_to_keep(stage_models: list[tuple[str, set[str]]], done: int) -> set[str]:
    """The engines to keep loaded once stage ``done`` (an index) has finished: those of the
    next stage that uses models, so an engine lives through consecutive model stages that use
    it (tests then repair) and is released when a stage without it comes next.

    >>> stages = [("mine", {"e1", "e2"}), ("clean", set()), ("difficulty", {"j"}),
    ...           ("answer", {"e1", "e2"}), ("judge", {"j"})]
    >>> sorted(models_to_keep(stages, 0)), sorted(models_to_keep(stages, 2))
    (['j'], ['e1', 'e2'])
    >>> sorted(models_to_keep(stages, 3)), sorted(models_to_keep(stages, 4))
    (['j'], [])
    """
    for _, used in stage_models[done + 1:]:
        if used:
            return set(used)
    return set()


def resident_engines(stage_models: list[tuple[str, set[str]]]) -> list[set[str]]:
    """Per stage, the models loaded while it runs under the runner's release rule.

    >>> resident_engines([("mine", {"e"}), ("clean", set()), ("difficulty", {"j"}),
    ...                   ("tests", {"e"}), ("verify", set()), ("repair", {"e"})])
    [{'e'}, set(), {'j'}, {'e'}, {'e'}, {'e'}]
    """
    loaded: set[str] = set()
    out = []
    for i, (_, used) in enumerate(stage_models):
        loaded |= used
        out.append(set(loaded))
        loaded &= models_to_keep(stage_models, i)
    return out
