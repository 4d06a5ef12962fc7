"""``arenaforge config validate --render``: every model's chat template against every
conversation its stages send, before the run.

A chat template is code that can refuse a conversation (Gemma's raises "System role not
supported" on a system message; several templates insist that roles alternate); at run time
that refusal becomes a failed request per row, hours into a run. Here each model a stage uses
renders each shape that stage sends (:mod:`arenaforge.pipeline.stage_conversations`, and Magpie
mining's pre-query prompt built by the mining stage's own builder) with the model's own
template, read from its files without loading weights: a GGUF file's metadata, the model
directory's ``tokenizer_config.json``, or the registry entry's ``config_dir`` when the weights
live elsewhere or are not installed (the shipped ``configs/model_files/``, copies of each
model's published files). A model whose entry says
``fold_system: true`` renders with its system text folded into the first user turn, as every
backend sends it at run time (:mod:`arenaforge.pipeline.backends.role_folding`).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from arenaforge.pipeline.backends.chat_template import ChatTemplateError, render_chat_template
from arenaforge.pipeline.backends.role_folding import fold_system
from arenaforge.pipeline.backends.template_source import (
    TemplateInfo,
    load_template,
    template_from_tokenizer_dir,
)


@dataclasses.dataclass(frozen=True)
class RenderProblem:
    """One shape a model's template cannot render."""

    model: str
    stage: str
    shape: str
    error: str

    def __str__(self) -> str:
        return f"model {self.model!r}, stage {self.stage!r} ({self.shape}): {self.error}"


@dataclasses.dataclass
class ModelRender:
    """What was rendered for one model: where its template came from and the shapes per stage."""

    model: str
    source: str
    fold_system: bool
    shapes: dict[str, list[str]] = dataclasses.field(default_factory=dict)


def _local(path: str | None) -> Path | None:
    if not path:
        return None
    p = Path(os.path.expandvars(path)).expanduser()
    return p if p.exists() else None


def _display(path: Path) -> str:
    """``path`` relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def model_template(spec: Any) -> tuple[TemplateInfo | None, str]:
    """A registry entry's chat template read from its files, and where it came from.

    Returns ``(None, why)`` when nothing local holds it.
    """
    if spec.chat_template_source == "none":
        return TemplateInfo(None), "none (a base model)"
    if spec.chat_template_source == "server":
        return None, "the server's (llama.cpp /props), asked at run time"
    files: TemplateInfo | None = None
    source = missing = ""
    fields: tuple[str, ...] = ("path", "tokenizer", "config_dir")
    if spec.backend == "llamacpp":  # the GGUF's own template when its weights are here
        from arenaforge.pipeline.models import resolve_weights

        try:
            weights = resolve_weights(spec)
        except (LookupError, OSError, ValueError) as exc:
            missing, fields = f"; weights not available here ({exc})", ("config_dir",)
        else:
            files, source = load_template(weights), f"GGUF {weights.name}"
    if files is None:
        for field in fields:
            where = _local(getattr(spec, field))
            if where is not None and (where.is_file() or (where / "tokenizer_config.json")
                                      .is_file() or (where / "chat_template.jinja").is_file()):
                files = load_template(where) if where.is_file() else \
                    template_from_tokenizer_dir(where)
                source = f"{field} {_display(where)}"
                break
        if files is None:
            return None, (f"no local tokenizer files (path {spec.path!r}, tokenizer "
                          f"{spec.tokenizer!r}, config_dir {spec.config_dir!r}): give the "
                          f"entry a config_dir holding its tokenizer_config.json{missing}")
    if spec.chat_template_source == "registry":
        return TemplateInfo(spec.chat_template, files.bos, files.eos, files.add_bos), "registry"
    return files, source


def _renderer(spec: Any, info: TemplateInfo):
    """``render(messages, add_generation_prompt)`` as the model's backends render."""
    def render(messages, add_generation_prompt=True):
        messages = fold_system(messages) if spec.fold_system else messages
        return render_chat_template(info.template, messages,
                                    add_generation_prompt=add_generation_prompt,
                                    bos_token=info.bos, eos_token=info.eos)
    return render


def _hint(spec: Any, info: TemplateInfo, shape: list[dict[str, str]]) -> str:
    """Why a render failed beyond the template's words: a refused system role that folding
    would fix."""
    if spec.fold_system or not any(m["role"] == "system" for m in shape):
        return ""
    try:
        render_chat_template(info.template, fold_system(shape), bos_token=info.bos,
                             eos_token=info.eos)
    except ChatTemplateError:
        return ""
    return ("; the template refuses a system message: if the model's documentation says to "
            "put system text in the first user turn, set `fold_system: true` on its registry "
            "entry")


def check_mining(spec: Any, info: TemplateInfo | None, section: Any) -> tuple[list[str], str]:
    """Mining's pre-query prompt per language; returns the shapes and an error ('' if none)."""
    # named, not through the stage registry: the pre-query is built from each model's own
    # template and family, not from the config alone, by the mine stage's helper module
    from arenaforge.stages.instructions.pre_query import PreQueryError, build_pre_query

    render = _renderer(spec, info) if info is not None and info.template else None
    shapes = []
    for language in section.languages:
        try:
            pre = build_pre_query(render, spec.family, section.template,
                                  section.system_for(language))
        except PreQueryError as exc:
            return shapes, f"pre-query for {language}: {exc}"
        shapes.append(f"pre-query {language}: {pre.template}")
    return shapes, ""


def render_config(cfg: Any) -> tuple[list[ModelRender], list[RenderProblem]]:
    """Render every shape of every model stage of ``cfg`` with its models' templates."""
    from arenaforge.pipeline.models import load_registry
    from arenaforge.pipeline.placement import run_stage_models
    from arenaforge.pipeline.stage_conversations import reads_logprobs, stage_shapes

    registry = load_registry(cfg.models_file)
    models: dict[str, ModelRender] = {}
    templates: dict[str, TemplateInfo | None] = {}
    problems: list[RenderProblem] = []
    for stage, used in run_stage_models(cfg, registry):
        section = cfg.stage_config(stage)
        shapes = stage_shapes(stage, section)
        for model_id in sorted(used, key=list(registry).index):
            spec = registry[model_id]
            if model_id not in models:
                templates[model_id], source = model_template(spec)
                models[model_id] = ModelRender(model_id, source, spec.fold_system)
            info, done = templates[model_id], models[model_id]
            if info is None:  # nothing local holds the template
                # a server renders chat itself; mining and logprob readings render here
                served_chat = (spec.backend == "openai" and stage != "mine"
                               and not reads_logprobs(section))
                if spec.chat_template_source != "server" and not served_chat:
                    problems.append(RenderProblem(model_id, stage, "template", done.source))
                continue
            if stage == "mine":
                names, error = check_mining(spec, info, section)
                done.shapes[stage] = names
                if error:
                    problems.append(RenderProblem(model_id, stage, "pre-query", error))
                continue
            if info.template is None and shapes:
                problems.append(RenderProblem(model_id, stage, shapes[0][0],
                                              "the model has no chat template (a base model) "
                                              "and this stage sends chat"))
                continue
            render = _renderer(spec, info)
            for name, shape in shapes:
                try:
                    render(shape)
                except ChatTemplateError as exc:
                    problems.append(RenderProblem(model_id, stage, name,
                                                  f"{exc}{_hint(spec, info, shape)}"))
                else:
                    done.shapes.setdefault(stage, []).append(name)
    return list(models.values()), problems
