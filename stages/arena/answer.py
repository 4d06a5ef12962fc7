"""Stage ``answer``: every expert answers every instruction.

Input columns: ``instruction_id, instruction`` (plus whatever earlier stages wrote: ``miner``,
``language``, ``task_kind``, ``difficulty``... all carried to the output). A Python function
is asked as it always was (the instruction alone); any other task gets a note of its language
and kind after the instruction (``answer_task_<kind>.txt``: the function, or a whole program
reading stdin and writing stdout, in one fenced block of the language). Output: one row per
``(instruction_id, model)``, instruction-major in input order, models in config order, with

- ``model``: the expert's registry id;
- ``response``: the full reply text;
- ``code``: its fenced code blocks in the instruction's ``language`` (see
  ``arenaforge.stages.common.code_extract.extract_code``), null when the reply has no code block;
- ``finish_reason`` (``stop``/``length``), ``prompt_tokens``, ``completion_tokens``;
- ``truncated``: the reply hit ``max_tokens`` (its code may be cut; ``verify`` will tell).

A failed request (``Completion.error`` set) is dropped with reason ``model_error`` and the
error text as detail; it never becomes an empty answer. An empty (or whitespace-only) reply is
dropped with reason ``empty_response``. All prompts of a shard go to each
model in one backend call, so a batching backend can batch them.
"""

from __future__ import annotations

import pyarrow as pa
from arenaforge.pipeline.stage import StageConfig, StageResult, StageSpec, per_model
from arenaforge.stages.common.code_extract import extract_code
from arenaforge.stages.common.task_kinds import table_tasks, with_task_note
from pydantic import Field

OUTPUTS = ("model", "response", "code", "finish_reason", "prompt_tokens", "completion_tokens",
           "truncated")
_TYPES = {"model": pa.string(), "response": pa.string(), "code": pa.string(),
          "finish_reason": pa.string(), "prompt_tokens": pa.int64(),
          "completion_tokens": pa.int64(), "truncated": pa.bool_()}


class AnswerConfig(StageConfig):
    """Who answers and how."""

    experts: list[str] | None = Field(
        default=None, description="Answering model ids; default: the run's experts.")
    system_prompt: str | None = Field(
        default=None, description="System turn before each instruction; none when null.")
    max_tokens: int = Field(default=1024, ge=16, description="Answer budget in tokens.")
    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)


def build_conversation(instruction: str, system_prompt: str | None) -> list[dict[str, str]]:
    """The chat an expert answers: optional system turn, then the instruction as the user."""
    turns = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return turns + [{"role": "user", "content": instruction}]


def run(table: pa.Table, cfg: AnswerConfig, ctx) -> StageResult:
    """Ask every expert every instruction; one output row per (instruction, expert)."""
    from arenaforge.pipeline.backends.base import SamplingParams

    if not cfg.experts:
        raise ValueError("answer.experts: no expert configured (a run fills in its experts)")
    experts = list(cfg.experts)
    if not experts:
        raise ValueError("answer.experts: no expert configured")
    if len(set(experts)) != len(experts):
        raise ValueError(f"answer.experts: duplicate model ids in {experts}")
    # Upstream stages may use the same names for their own provenance (mine's finish_reason
    # is the miner's); the answer's values replace them here, and the originals stay in the
    # upstream stage's output, joinable by instruction_id.
    clash = [c for c in OUTPUTS if c in table.column_names]
    table = table.drop_columns(clash) if clash else table

    instructions = table.column("instruction").to_pylist()
    tasks = table_tasks(table)
    languages = [language for language, _ in tasks]
    params = SamplingParams(n=1, temperature=cfg.temperature, top_p=cfg.top_p,
                            max_tokens=cfg.max_tokens, seed=ctx.seed)
    conversations = [build_conversation(with_task_note(t, *task, "answer"), cfg.system_prompt)
                     for t, task in zip(instructions, tasks)]
    replies = per_model(ctx, experts, lambda model: ctx.backend(model).chat(conversations, params)
                        if conversations else [])
    for model in experts:
        if len(replies[model]) != len(conversations):
            raise RuntimeError(f"backend {model!r} returned {len(replies[model])} replies for "
                               f"{len(conversations)} conversations")

    rows = table.to_pylist()
    kept: list[dict] = []
    dropped: list[dict] = []
    stats = {f"answers_ok.{m}": 0.0 for m in experts} | {f"truncated.{m}": 0.0 for m in experts}
    for i, row in enumerate(rows):
        for model in experts:
            reply = replies[model][i][0]
            if reply.error is not None or reply.finish_reason == "error":
                dropped.append({**row, "model": model, "reason": "model_error",
                                "detail": reply.error or "finish_reason=error without text"})
                continue
            if not reply.text.strip():
                # Nothing to judge or run: an empty answer row would only look like data.
                dropped.append({**row, "model": model, "reason": "empty_response",
                                "detail": f"finish_reason={reply.finish_reason}, "
                                          f"completion_tokens={reply.completion_tokens}"})
                continue
            truncated = reply.finish_reason == "length"
            kept.append({**row, "model": model, "response": reply.text,
                         "code": extract_code(reply.text, languages[i]),
                         "finish_reason": reply.finish_reason,
                         "prompt_tokens": reply.prompt_tokens,
                         "completion_tokens": reply.completion_tokens, "truncated": truncated})
            stats[f"answers_ok.{model}"] += 1
            stats[f"truncated.{model}"] += truncated
    ctx.advance(table.num_rows)

    schema = table.schema
    for name in OUTPUTS:
        schema = schema.append(pa.field(name, _TYPES[name]))
    out = pa.Table.from_pylist(kept, schema=schema)
    drop_table = pa.Table.from_pylist(dropped) if dropped else None
    return StageResult(table=out, dropped=drop_table, stats=stats)


STAGE = StageSpec(name="answer", config=AnswerConfig, run=run, source="compress",
                  uses_models=True, inputs=("instruction_id", "instruction"),
                  prompts=("answer_task_*.txt",), outputs=OUTPUTS)
