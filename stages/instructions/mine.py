"""Stage ``mine``: Magpie-style request mining from each expert's own chat template.

Plan: one row per (miner, language, task kind, sample index) with a ``task_id``. Run: for each
miner, language and kind in the shard, render the pre-query prompt
(``arenaforge.stages.instructions.pre_query``: the chat template up to an open user turn, after
a system prompt that frames a coding assistant for the language: ``system_prompt`` for
functions, ``program_system_prompt`` for whole programs that read stdin and write stdout) and
sample raw completions; each completion is a user request.

``mine.languages`` takes the names people write (``C++``, ``JavaScript``, ``golang``; any
case) and holds their ids (``arenaforge.pipeline.sandbox.languages``); an unknown one fails
config loading, naming the file, the line and the value. ``mine.task_kinds`` (``function``,
``program``) says which kinds each language is mined for. A Python function keeps the task ids
and seeds that mining a language named ``Python`` always had, so such a run mines what it did.

Output columns: ``instruction_id, instruction, miner, language, task_kind, sample_params,
template, finish_reason, raw`` plus ``task_id`` and ``sample_index``. ``sample_params`` is the JSON of the
row's own ``SamplingParams`` (n=1 and that sample's seed), so any row can be replayed alone;
``template`` names the pre-query source and shape (``chat_template/empty_assistant``); ``raw`` is
the completion as returned, ``instruction`` the same text cut at ``request_stop`` and stripped.
Filtering is ``clean``'s job: mine keeps every sample, empty ones included.

Stop rules: the template's end-of-turn and next-turn headers always stop a request. Small models
often keep going after the request (they answer it themselves, after two blank lines), so two
blank lines also stop generation and cut the request. A single blank line or a code fence is
*not* a default stop: coding requests often have several paragraphs and code blocks (Magpie's
advice is not to stop on the first newline for code).

From a file (``mine.source``, read by ``arenaforge.stages.instructions.sources``): plan reads and checks the
file (as config loading already did, so a bad file fails before any model is loaded) and holds
one row per file row, its text included; run makes no model call. Such rows have the same
``instruction_id`` as a mined request of the same text, ``template: file``, a null ``miner``
and ``finish_reason`` (no model wrote them), ``sample_params`` holding where they came from
(``{"source": "file", "path", "column", "row"}``), ``sample_index`` the file row and ``raw``
the text as stored; ``language`` and ``task_kind`` are the file's (its optional columns) or
the first of ``languages`` and ``task_kinds``. clean then filters and dedups them like mined
rows.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path
from typing import Annotated, Literal

import pyarrow as pa
from arenaforge.pipeline.sandbox.languages.catalog import (
    LANGUAGE_IDS,
    LANGUAGES,
    resolve_language,
)
from arenaforge.pipeline.stage import StageConfig, StageResult, StageSpec
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.instructions.pre_query import build_pre_query
from arenaforge.stages.instructions.sources import (
    FILE_TEMPLATE,
    InstructionSourceError,
    load_instructions,
)
from arenaforge.stages.verification.harness.cases import FUNCTION, PROGRAM
from pydantic import AfterValidator, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

# Two blank lines: where Qwen2.5-Coder-0.5B, having written the request, starts answering it
# itself instead of ending its turn (seen in 8 of 24 samples of the empty-assistant shape). A
# request's own paragraphs and code blocks are separated by single blank lines.
REQUEST_END = "\n\n\n"

# Magpie's coding system prompt, parameterised by language.
DEFAULT_SYSTEM = (
    "You are an AI assistant designed to provide helpful, step-by-step guidance on {language} "
    "coding problems. The user will ask you a wide range of {language} coding questions. Your "
    "purpose is to assist users in understanding {language} coding concepts, working through "
    "{language} code, and debugging.")
# The same, for whole programs: competitive-programming style tasks with stdin and stdout.
DEFAULT_PROGRAM_SYSTEM = (
    "You are an AI assistant designed to help with {language} programming tasks where the "
    "answer is one complete {language} program that reads its input from standard input and "
    "writes its output to standard output. The user will describe such a task: what the "
    "input holds, what the program must print, and an example of both.")


def _language_id(name: str) -> str:
    """A ``mine.languages`` entry as its id; an unknown name fails at config load, naming the
    value (and, in a config file, its line)."""
    try:
        return resolve_language(name)
    except ValueError as exc:  # not "Value error, ..." in the message
        raise PydanticCustomError("unknown_language", str(exc)) from None


class MineConfig(StageConfig):
    """What to mine and how to sample it, or the file to read instructions from instead."""

    miners: list[str] | None = Field(default=None,
                                     description="Model ids that mine; default: the run's experts.")
    languages: list[Annotated[str, AfterValidator(_language_id)]] = Field(
        default_factory=lambda: ["python"], min_length=1,
        description="Languages to mine (names such as C++, JavaScript, golang; held as ids).")
    task_kinds: list[Literal["function", "program"]] = Field(
        default_factory=lambda: [FUNCTION], min_length=1,
        description="function: a named function tested by calls; program: a whole program, "
                    "stdin in and stdout out. Mined for each language.")
    samples_per_language: int = Field(
        default=8, ge=1, description="Samples per miner, language and task kind.")
    system_prompt: str | None = Field(
        default=DEFAULT_SYSTEM, description="System prompt; '{language}' is filled in. null: none.")
    program_system_prompt: str | None = Field(
        default=DEFAULT_PROGRAM_SYSTEM,
        description="System prompt for task kind 'program'; '{language}' is filled in.")
    template: Literal["auto", "bare", "empty_assistant", "open_assistant"] = Field(
        default="auto", description="Pre-query shape; auto: the measured best for the family.")
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_tokens: int = Field(default=192, ge=8)
    stop: list[str] = Field(
        default_factory=lambda: [REQUEST_END],
        description="Extra stop strings for generation (beyond the template's).")
    request_stop: list[str] = Field(
        default_factory=lambda: [REQUEST_END],
        description="The request is cut at the first of these (kept whole in 'raw').")
    # Declared last: the check of ``source`` reads ``source_column`` and ``languages``.
    source_column: str = Field(default="instruction", min_length=1,
                               description="The instruction column of mine.source.")
    source: Path | None = Field(
        default=None,
        description="Read instructions from this JSONL, Parquet or datasets directory instead "
                    "of mining (no model call; the sampling fields are unused); relative to "
                    "the cwd, like artifacts_dir, so --set mine.source=PATH works from any config.")

    def system_for(self, language: str, task_kind: str = FUNCTION) -> str | None:
        """The system prompt of a language (an id) and kind, its display name filled in."""
        text = self.program_system_prompt if task_kind == PROGRAM else self.system_prompt
        return text.replace("{language}", LANGUAGES[language].display) if text else None

    @field_validator("languages")
    @classmethod
    def _once_each(cls, ids: list[str]) -> list[str]:
        return list(dict.fromkeys(ids))

    @field_validator("source")
    @classmethod
    def _check_source(cls, source: Path | None, info: ValidationInfo) -> Path | None:
        # Read the whole file now: a bad row fails config loading (exit 2), not the run.
        if source is not None and {"source_column", "languages", "task_kinds"} <= set(info.data):
            try:
                load_instructions(source, info.data["source_column"], info.data["languages"][0],
                                  info.data["task_kinds"][0])
            except InstructionSourceError as exc:  # not "Value error, ..." in the message
                raise PydanticCustomError("instruction_source", str(exc)) from None
        return source

    def source_rows(self):
        """The checked rows of ``source`` (``arenaforge.stages.instructions.sources.SourceRow``);
        the language and task kind columns are optional and default to the first of
        ``languages`` and ``task_kinds``."""
        return load_instructions(self.source, self.source_column, self.languages[0],
                                 self.task_kinds[0])

    def languages_used(self) -> dict[str, str]:
        """The languages the run's rows will be in, ``{id: where it comes from}``, in
        ``LANGUAGE_IDS`` order: those of ``source`` (its ``language`` column, and the first of
        ``languages`` for rows without one), else ``languages``. The sandbox stages check their
        toolchains with it before any model runs."""
        if self.source is None:
            return {lang: "mine.languages" for lang in self.languages}
        found = {r.language for r in self.source_rows()}
        return {lang: f"the rows of mine.source {self.source}" for lang in LANGUAGE_IDS
                if lang in found}

    def models_used(self) -> list[str]:
        """The model ids mining calls: none when reading ``source``, else the miners (a run
        fills in its experts when the section names none)."""
        if self.source is not None:
            return []
        return list(self.miners or ())


def _group(language: str, task_kind: str) -> str:
    """What names a (language, kind) in task ids and seeds: the language's display name, as a
    language was always written there (``Python``), with ``|program`` for programs."""
    name = LANGUAGES[language].display
    return name if task_kind == FUNCTION else f"{name}|{task_kind}"


def _base_seed(run_seed: int, miner: str, group: str) -> int:
    """Seed of sample 0 of a (miner, language, kind): independent of sharding, so resumes
    replay."""
    digest = hashlib.sha256(f"{run_seed}|{miner}|{group}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % (2 ** 31 - 2 ** 20)


PLAN_SCHEMA = pa.schema([("task_id", pa.string()), ("miner", pa.string()),
                         ("language", pa.string()), ("task_kind", pa.string()),
                         ("sample_index", pa.int64())])


def plan(cfg: MineConfig, ctx) -> pa.Table:
    """One row per (miner, language, task kind, sample index), or per row of ``cfg.source``."""
    if cfg.source is not None:
        rows = [{"task_id": f"file|{r.row:06d}", "miner": None, "language": r.language,
                 "task_kind": r.task_kind, "sample_index": r.row, "instruction": r.text}
                for r in cfg.source_rows()]
        return pa.Table.from_pylist(rows, schema=PLAN_SCHEMA.append(
            pa.field("instruction", pa.string())))
    miners = cfg.models_used()
    if not miners:
        raise ValueError("mine.miners: no miner configured")
    rows = [{"task_id": f"{m}|{_group(lang, kind)}|{i:06d}", "miner": m, "language": lang,
             "task_kind": kind, "sample_index": i}
            for m in miners for lang in cfg.languages for kind in cfg.task_kinds
            for i in range(cfg.samples_per_language)]
    return pa.Table.from_pylist(rows, schema=PLAN_SCHEMA)


def file_rows(table: pa.Table, cfg: MineConfig) -> pa.Table:
    """Mine's output for planned file rows: no model call (see the module docstring).

    >>> cfg = MineConfig.model_construct(source=Path("seed.jsonl"), source_column="instruction")
    >>> plan_rows = pa.table({"task_id": ["file|000004"], "miner": pa.array([None], pa.string()),
    ...                       "language": ["python"], "task_kind": ["function"],
    ...                       "sample_index": [4], "instruction": [" Reverse a string. "]})
    >>> row = file_rows(plan_rows, cfg).to_pylist()[0]
    >>> row["instruction"], row["template"], row["miner"], json.loads(row["sample_params"])["row"]
    ('Reverse a string.', 'file', None, 4)
    """
    where = {"source": "file", "path": str(cfg.source), "column": cfg.source_column}
    out = []
    for r in table.to_pylist():
        text = r["instruction"].strip()
        out.append({"instruction_id": instruction_id(text, r["language"], r["task_kind"]),
                    "instruction": text, "miner": None, "language": r["language"],
                    "task_kind": r["task_kind"],
                    "sample_params": json.dumps({**where, "row": r["sample_index"]}),
                    "template": FILE_TEMPLATE, "finish_reason": None, "raw": r["instruction"],
                    "task_id": r["task_id"], "sample_index": r["sample_index"]})
    return pa.Table.from_pylist(out, schema=MINE_SCHEMA)


def extract_request(text: str, request_stop: list[str]) -> str:
    """The request part of a raw completion: cut at the first request stop, stripped.

    >>> extract_request("Write a CSV parser.\\n```python\\nimport csv", ["```"])
    'Write a CSV parser.'
    """
    cut = min((i for i in (text.find(s) for s in request_stop if s) if i >= 0), default=len(text))
    return text[:cut].strip()


def _renderer(backend):
    if backend.chat_template() is None:
        return None
    return lambda messages, add_generation_prompt: backend.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt)


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Contiguous runs of sorted indices as (start, length): one backend call with n samples each."""
    out = []
    for _, group in itertools.groupby(enumerate(indices), key=lambda p: p[1] - p[0]):
        members = [i for _, i in group]
        out.append((members[0], len(members)))
    return out


def run(table: pa.Table, cfg: MineConfig, ctx) -> pa.Table | StageResult:
    """Generate the planned samples of this shard, or pass file rows on (module docstring)."""
    if cfg.source is not None:
        out = file_rows(table, cfg)
        ctx.advance(out.num_rows)
        return StageResult(table=out, stats={"source_rows": float(out.num_rows)})
    from arenaforge.pipeline.backends.base import SamplingParams

    def key(r):
        return r["miner"], r["language"], r["task_kind"]

    rows = sorted(table.to_pylist(), key=lambda r: (*key(r), r["sample_index"]))
    out: list[dict] = []
    for (miner, language, kind), group in itertools.groupby(rows, key=key):
        group = list(group)
        backend = ctx.backend(miner)
        family = getattr(ctx.model_spec(miner), "family", None)
        pre = build_pre_query(_renderer(backend), family, cfg.template,
                              cfg.system_for(language, kind))
        stop = tuple(dict.fromkeys((*pre.stop, *cfg.stop)))
        base = _base_seed(ctx.seed, miner, _group(language, kind))
        by_index = {r["sample_index"]: r for r in group}
        for start, count in _runs(sorted(by_index)):
            params = SamplingParams(n=count, temperature=cfg.temperature, top_p=cfg.top_p,
                                    max_tokens=cfg.max_tokens, stop=stop, seed=base + start)
            completions = backend.complete([pre.prompt], params)[0]
            for k, completion in enumerate(completions):
                row = by_index[start + k]
                text = extract_request(completion.text, cfg.request_stop)
                own = SamplingParams(n=1, temperature=params.temperature, top_p=params.top_p,
                                     max_tokens=params.max_tokens, stop=stop,
                                     seed=params.sample_seed(k))
                out.append({"instruction_id": instruction_id(text, language, kind),
                            "instruction": text, "miner": miner, "language": language,
                            "task_kind": kind,
                            "sample_params": own.to_json(), "template": pre.template,
                            "finish_reason": completion.finish_reason, "raw": completion.text,
                            "task_id": row["task_id"], "sample_index": row["sample_index"]})
            ctx.advance(count)
    return pa.Table.from_pylist(out, schema=MINE_SCHEMA)


MINE_SCHEMA = pa.schema([
    ("instruction_id", pa.string()), ("instruction", pa.string()), ("miner", pa.string()),
    ("language", pa.string()), ("task_kind", pa.string()), ("sample_params", pa.string()),
    ("template", pa.string()),
    ("finish_reason", pa.string()), ("raw", pa.string()), ("task_id", pa.string()),
    ("sample_index", pa.int64())])

STAGE = StageSpec(name="mine", config=MineConfig, run=run, plan=plan, shard_key="task_id",
                  uses_models=True,
                  inputs=("task_id", "miner", "language", "task_kind", "sample_index"),
                  outputs=tuple(MINE_SCHEMA.names))
