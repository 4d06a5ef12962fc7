"""The stage graph a config runs: what each stage reads, from whom, and what it fills.

``arenaforge graph [CONFIG]`` prints it; the same check the runner makes before any model loads
(``arenaforge.pipeline.runner.check_chain``) runs first, so a graph that prints is one that can run.

Example::

    >>> from arenaforge.stages import get_stage
    >>> edges = stage_graph([get_stage("answer"), get_stage("judge"), get_stage("rate")])
    >>> edges[-1]["stage"], edges[-1]["source"], sorted(edges[-1]["reads"])
    ('rate', 'answer', ['judge'])
"""

from __future__ import annotations

from typing import Any

from arenaforge.pipeline.stage import StageSpec


def stage_graph(specs: list[StageSpec]) -> list[dict[str, Any]]:
    """One entry per stage: its input (source or plan), declared reads and artifacts, the
    prompt templates it fills, its outputs, and how it runs (sharded, model stage)."""
    return [{
        "stage": s.name,
        "source": s.source,
        "inputs": list(s.inputs),
        "reads": {dep: list(cols) for dep, cols in s.reads.items()},
        "optional": list(s.optional),
        "artifacts": list(s.artifacts),
        "prompts": list(s.prompts),
        "outputs": list(s.outputs),
        "sharded": s.sharded,
        "uses_models": s.uses_models,
    } for s in specs]


def graph_lines(graph: list[dict[str, Any]]) -> list[str]:
    """Plain lines (one block a stage) for a terminal or a log; nothing is cut."""
    lines = []
    for node in graph:
        kind = ("model stage" if node["uses_models"] else "CPU stage") + \
            (", sharded" if node["sharded"] else ", whole table")
        lines.append(f"{node['stage']}  ({kind})")
        if node["source"]:
            lines.append(f"  <- {node['source']}: {', '.join(node['inputs']) or '(any columns)'}")
        else:
            lines.append("  <- planned from its config")
        for dep, cols in node["reads"].items():
            optional = " (optional)" if dep in node["optional"] else ""
            lines.append(f"  reads {dep}{optional}: {', '.join(cols)}")
        for artifact in node["artifacts"]:
            lines.append(f"  reads artifact {artifact}")
        if node["prompts"]:
            lines.append(f"  fills prompts: {', '.join(node['prompts'])}")
        lines.append(f"  -> {', '.join(node['outputs']) or '(passes its input through)'}")
    return lines
