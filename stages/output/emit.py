"""Stage ``emit``: the verified SFT dataset and its card.

Input (the ``repair`` output: ``verify``'s rows with repaired answers re-verified, one row per
(instruction, model)): ``instruction_id, instruction, model, response, status, tests_passed,
selected`` and verify's ``verified, admission``; ``judge_score, gate_admitted`` are joined from
``audit``, ``final_score, elo, local_share, margin`` from ``rate``, ``kcenter_rank`` from
``compress``, ``difficulty`` from ``difficulty``, the trusted tests' authors from ``tests``.
Which selected answers become rows is ``EmitConfig.admit``: by default those execution
verified plus those without usable tests that the calibrated judge gate admits; an answer with
no usable code is never emitted.

Output: one row per instruction whose answer was admitted: ``instruction_id, messages``
(``list<struct<role, content>>``: optional system, user, assistant) and the provenance columns
``source_model, language, task_kind`` (the task's language id and kind, ``function`` or
``program``; a row from before they existed is a Python function), ``verified, status,
tests_passed``, those of
``arenaforge.stages.output.emit_provenance`` (``repaired, repair_rounds, replaced_judge_pick,
judge_pick, selection_rule, miner, template, judges, tests_{visible,hidden,augmented}[_passed],
probe_gate, program_gate, admission, gate_admitted, test_authors, judge_verdicts, local_share,
margin, kcenter_rank``), ``judge_score, final_score, elo, difficulty, run_id, config_hash``.
Side artifacts: ``dataset/{split}-NNNNN-of-NNNNN.parquet`` and the Hugging Face style card
``dataset/README.md`` (which states what the judge gate's bound covers, from
``audit/metrics.json``). Rows of answers that were not selected are dropped with reason
``not_selected``; selected answers with an empty response with ``empty_response``; answers
not admitted with where execution stopped them (``contradictory_tests``, ``no_usable_code``,
``answers_disagree``, ``example_failed``, ``below_pass_fraction``, ``false_stated_output``,
``no_tests``) or ``gate_rejected``.

The dataset files load unchanged with ``datasets.load_dataset("parquet", data_files=...)``
and TRL's ``SFTTrainer`` (the ``messages`` column is TRL's conversational format).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from arenaforge.pipeline.stage import (
    AUDIT_METRICS,
    DATASET,
    DATASET_CARD,
    DATASET_SHARDS,
    EMBEDDINGS,
    StageConfig,
    StageContext,
    StageResult,
    StageSpec,
    dataset_shard,
)
from arenaforge.pipeline.statuses import NO_ENTRY_POINT, NO_TESTS
from arenaforge.stages.common.embeddings import column_vectors, unit_rows
from arenaforge.stages.common.task_kinds import table_tasks
from arenaforge.stages.output.card import CardInfo, render_card
from arenaforge.stages.output.emit_provenance import (
    AUTHOR_COLUMNS,
    CARRIED,
    JUDGE_COLUMNS,
    ORIGIN_COLUMNS,
    PROVENANCE_SCHEMA,
    fill_from,
    provenance_columns,
    provenance_counts,
    verified_mask,
    with_evidence,
    with_judges,
    with_origin,
    with_test_authors,
)
from arenaforge.stages.output.task_dedup import DUPLICATE_TASK, duplicate_tasks_on
from arenaforge.stages.verification.grading import BELOW_PASS_FRACTION, UNUSABLE, VERIFIED
from arenaforge.stages.verification.probe_gate import NO_USABLE_CODE
from arenaforge.stages.verification.suites import SUITE_COLUMNS, suites_of_rows
from pydantic import Field

log = logging.getLogger(__name__)


MESSAGE_TYPE = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))

# The emitted schema, in column order. Provenance columns are nullable: a run without a judge
# or without tests still emits, and null says "not measured" rather than a made-up score.
SFT_SCHEMA = pa.schema([
    ("instruction_id", pa.string()),
    ("messages", MESSAGE_TYPE),
    ("source_model", pa.string()),
    ("language", pa.string()),
    ("task_kind", pa.string()),
    ("verified", pa.bool_()),
    ("status", pa.string()),
    ("tests_passed", pa.int64()),
    *PROVENANCE_SCHEMA,
    ("judge_score", pa.float64()),
    ("final_score", pa.float64()),
    ("elo", pa.float64()),
    ("difficulty", pa.float64()),
    ("run_id", pa.string()),
    ("config_hash", pa.string()),
])

REQUIRED_COLUMNS = ("instruction_id", "instruction", "model", "response", "status")
# what task dedup reads of a verified row (stages/output/task_dedup.py)
DEDUP_COLUMNS = ("instruction_id", "code", "kcenter_rank", "language", "task_kind")
OPTIONAL_NUMERIC = ("tests_passed", "judge_score", "final_score", "elo", "difficulty")


class EmitConfig(StageConfig):
    """Config of the ``emit`` stage.

    Attributes:
        system_prompt: prepended as a ``system`` message when set.
        holdout_fraction: share of instructions put in the ``test`` split (0 disables it).
        shard_rows: at most this many rows per Parquet file.
        dataset_name: the card's title.
        license: the dataset's own license tag in the card.
        extra_models: models used by the run beyond the experts and difficulty raters
            (embedder, judges) to list with their licenses in the card.
        admit: which selected answers become rows: ``verified`` (passed execution),
            ``verified_or_gated`` (also answers without usable tests that the audit's
            calibrated judge gate admits; the default), ``selected`` (every selected answer,
            as the paper did; used by the ablation's ``judge`` rule).
    """

    system_prompt: str | None = None
    holdout_fraction: float = Field(default=0.0, ge=0.0, lt=1.0)
    shard_rows: int = Field(default=100_000, gt=0)
    dataset_name: str = "arenaforge-sft"
    license: str = "other"
    extra_models: tuple[str, ...] = ()
    admit: Literal["verified", "verified_or_gated", "selected"] = "verified_or_gated"
    dedup_distance: float | None = Field(
        default=0.75, gt=0, description="verified rows whose instructions lie within this "
        "embedding distance are one task when each one's answer passes the other's trusted "
        "tests; all but the first selected by compress are dropped as duplicate_task "
        "(stages/output/task_dedup.py); null: keep them all")
    dedup_tries: int = Field(
        default=3, ge=1, description="a verified row is tried against at most this many kept "
        "rows within dedup_distance, the nearest first: its cost stays flat as the kept set "
        "grows; more finds more rewordings that lie farther off in text, at that many sandbox "
        "gradings a row")


def build_sft_rows(selected: pa.Table, *, system_prompt: str | None, run_id: str,
                   config_hash: str) -> pa.Table:
    """Turn the selected answers into SFT rows with a ``messages`` column.

    Args:
        selected: one row per instruction with at least ``instruction_id, instruction, model,
            response, status``; ``tests_passed``, the provenance columns (``PROVENANCE_SCHEMA``)
            and ``judge_score, final_score, elo, difficulty`` are copied when present and null
            otherwise. ``verified``: status passed and ``program_gate`` pass.
        system_prompt: the optional system message.
        run_id: the run's name, copied into every row.
        config_hash: the run config's fingerprint, copied into every row.

    Returns:
        A table with schema ``SFT_SCHEMA``.

    Raises:
        ValueError: a required column is missing or a row has an empty instruction/response.

    Example::

        >>> t = pa.table({"instruction_id": ["ab"], "instruction": ["Add 1"], "model": ["m"],
        ...               "response": ["x + 1"], "status": ["passed"]})
        >>> build_sft_rows(t, system_prompt=None, run_id="r", config_hash="h").column(
        ...     "messages").to_pylist()
        [[{'role': 'user', 'content': 'Add 1'}, {'role': 'assistant', 'content': 'x + 1'}]]
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in selected.column_names]
    if missing:
        raise ValueError(f"emit: input lacks required column(s) {missing}; "
                         f"has {selected.column_names}")
    instructions = selected.column("instruction").to_pylist()
    responses = selected.column("response").to_pylist()
    ids = selected.column("instruction_id").to_pylist()
    messages = []
    for row, (iid, user, answer) in enumerate(zip(ids, instructions, responses, strict=True)):
        for field, text in (("instruction", user), ("response", answer)):
            if text is None or not text.strip():
                raise ValueError(f"emit: row {row} (instruction_id={iid}) has an empty {field}")
        turns = [{"role": "system", "content": system_prompt}] if system_prompt else []
        turns += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        messages.append(turns)

    n = selected.num_rows
    tasks = table_tasks(selected)
    status = selected.column("status").cast(pa.string())
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        "instruction_id": selected.column("instruction_id").cast(pa.string()),
        "messages": pa.array(messages, type=MESSAGE_TYPE),
        "source_model": selected.column("model").cast(pa.string()),
        "language": pa.array([lang for lang, _ in tasks], pa.string()),
        "task_kind": pa.array([kind for _, kind in tasks], pa.string()),
        "verified": verified_mask(selected),
        "status": status,
        **provenance_columns(selected),
    }
    for name in OPTIONAL_NUMERIC:
        typ = SFT_SCHEMA.field(name).type
        columns[name] = (selected.column(name).cast(typ) if name in selected.column_names
                         else pa.nulls(n, typ))
    columns["run_id"] = pa.array([run_id] * n, pa.string())
    columns["config_hash"] = pa.array([config_hash] * n, pa.string())
    return pa.table(columns, schema=SFT_SCHEMA)


def holdout_mask(instruction_ids: list[str], fraction: float, seed: int) -> list[bool]:
    """Which rows go to the held-out split.

    Decided per instruction by a seeded hash, so the split is stable across reruns, row
    orders and shardings, and the same instruction never lands in both splits.
    """
    if fraction <= 0:
        return [False] * len(instruction_ids)
    out = []
    for iid in instruction_ids:
        digest = hashlib.sha256(f"{seed}:{iid}".encode()).digest()
        out.append(int.from_bytes(digest[:8], "big") / 2**64 < fraction)
    return out


def plan_files(table: pa.Table, *, shard_rows: int, holdout_fraction: float,
               seed: int) -> dict[str, pa.Table]:
    """Split and shard the SFT table into named Parquet files.

    Returns:
        ``{"train-00000-of-00002.parquet": table, ..., "test-00000-of-00001.parquet": ...}``,
        the Hugging Face Hub naming for sharded splits. ``train`` is always present (possibly
        empty, so a run that selected nothing still yields a loadable file); ``test`` only when
        ``holdout_fraction`` > 0 and it got rows.
    """
    mask = pa.array(holdout_mask(table.column("instruction_id").to_pylist(),
                                 holdout_fraction, seed), pa.bool_())
    splits = {"train": table.filter(pc.invert(mask)), "test": table.filter(mask)}
    files: dict[str, pa.Table] = {}
    for split, part in splits.items():
        if split != "train" and part.num_rows == 0:
            continue
        n_shards = max(1, -(-part.num_rows // shard_rows))
        for i in range(n_shards):
            name = dataset_shard(split, i, n_shards)
            files[name] = part.slice(i * shard_rows, shard_rows)
    return files


def parquet_bytes(table: pa.Table) -> bytes:
    """Serialise a table to Parquet bytes (zstd), as written to disk by the stage."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def write_dataset(table: pa.Table, out_dir: Path, *, shard_rows: int = 100_000,
                  holdout_fraction: float = 0.0, seed: int = 0) -> list[Path]:
    """Write the SFT table as sharded Parquet files under ``out_dir`` (outside a run).

    Each file is written to a temporary name and renamed, so a reader never sees half a file.

    Returns:
        The written paths, train shards first.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, part in plan_files(table, shard_rows=shard_rows,
                                 holdout_fraction=holdout_fraction, seed=seed).items():
        path = out_dir / name
        tmp = path.with_suffix(".parquet.tmp")
        tmp.write_bytes(parquet_bytes(part))
        os.replace(tmp, path)
        paths.append(path)
    return paths


def split_sizes(files: Mapping[str, pa.Table]) -> dict[str, int]:
    """Rows per split from ``plan_files`` output."""
    sizes: dict[str, int] = {}
    for name, part in files.items():
        split = name.split("-", 1)[0]
        sizes[split] = sizes.get(split, 0) + part.num_rows
    return sizes


def card_funnel(funnel: Any) -> list[dict[str, Any]]:
    """The card's funnel rows (``stage, rows_in, kept, dropped``) from the run's ``Funnel``."""
    return [{"stage": s.stage, "rows_in": s.rows_in, "kept": s.rows_out,
             "dropped": dict(s.dropped)} for s in funnel]


def _admitted(table: pa.Table, admit: str) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(admitted mask, drop reason per row, admitted by the judge gate) for the selected,
    non-empty answers.

    An answer with no usable code (probe verdict ``no_code``, ``no_entry_point``,
    ``signature_mismatch``, ``import_error``) is never admitted, whatever the judge said; the
    judge gate admits only answers whose instruction has no usable test (``no_tests``), never a
    ``contradictory_tests`` one. A row's drop reason is where execution stopped it
    (``admission``), ``gate_rejected`` for the gate.
    """
    n = table.num_rows
    steps = _column(table, "admission")
    probes = _column(table, "probe_gate")
    statuses = _column(table, "status")
    verified = verified_mask(table).to_pylist()
    gated = _column(table, "gate_admitted")
    keep, reasons, by_gate = [], [], []
    for i in range(n):
        step = steps[i] or _legacy_step(statuses[i], verified[i])
        unusable = probes[i] in NO_USABLE_CODE
        via_gate = (not verified[i] and step == NO_TESTS and admit == "verified_or_gated"
                    and bool(gated[i]) and not unusable)
        ok = verified[i] or via_gate or (admit == "selected" and not unusable)
        keep.append(ok)
        by_gate.append(via_gate)
        reasons.append(None if ok else "gate_rejected" if step == NO_TESTS
                       and admit == "verified_or_gated" and not unusable else
                       UNUSABLE if unusable else step)
    return (pa.array(keep, pa.bool_()), pa.array(reasons, pa.string()),
            pa.array(by_gate, pa.bool_()))


def _without_duplicate_tasks(chosen: pa.Table, cfg: EmitConfig, ctx: StageContext
                             ) -> tuple[pa.Table, pa.Table]:
    """``chosen`` without the verified rows that repeat another's task, and those rows with
    their reason and the kept instruction's id as detail (``task_dedup``)."""
    raw = ctx.read_artifact(EMBEDDINGS) if cfg.dedup_distance is not None else None
    none = chosen.slice(0, 0).append_column("reason", pa.array([], pa.string()))
    if raw is None or "code" not in chosen.column_names:
        return chosen, none
    table = pq.read_table(io.BytesIO(raw))
    vectors = dict(zip(table.column("instruction_id").to_pylist(),
                       unit_rows(column_vectors(table.column("embedding")))))
    if "verified" not in chosen.column_names:
        return chosen, none
    # the verified rows as Python objects with only what task dedup reads: every column of
    # every chosen row as dicts grew with the answers' text and provenance
    verified = fill_from(chosen.filter(pc.fill_null(chosen.column("verified"), False)), ctx,
                         "compress", "kcenter_rank")
    verified = verified.select([c for c in DEDUP_COLUMNS if c in verified.column_names]
                               ).to_pylist()
    ids = [r["instruction_id"] for r in verified]
    if len(ids) < 2:
        return chosen, none
    suites = suites_of_rows(ctx.read("tests", columns=list(SUITE_COLUMNS),
                                     instruction_ids=ids).to_pylist())
    # decided on the run's workers (ctx.map), the same rows whatever their number
    dup = duplicate_tasks_on(ctx, verified, vectors, suites, max_distance=cfg.dedup_distance,
                             max_tries=cfg.dedup_tries)
    mask = pa.array([i in dup for i in chosen.column("instruction_id").to_pylist()], pa.bool_())
    gone = chosen.filter(mask)
    gone = gone.append_column("reason", pa.array([DUPLICATE_TASK] * gone.num_rows, pa.string()))
    gone = gone.append_column("detail", pa.array(
        [dup[i] for i in gone.column("instruction_id").to_pylist()], pa.string()))
    return chosen.filter(pc.invert(mask)), gone


def _column(table: pa.Table, name: str) -> list:
    return (table.column(name).to_pylist() if name in table.column_names
            else [None] * table.num_rows)


def _legacy_step(status: str | None, verified: bool) -> str:
    """``admission`` for rows of a run made before verify wrote it."""
    if verified:
        return VERIFIED
    if status in (NO_TESTS, NO_ENTRY_POINT):
        return status
    return BELOW_PASS_FRACTION


def _with_reason(table: pa.Table, reason: str) -> pa.Table:
    return table.append_column("reason", pa.array([reason] * table.num_rows, pa.string()))


def _run_models(table: pa.Table, cfg: EmitConfig, ctx: StageContext) -> list[str]:
    """Every model that shaped the data: experts, difficulty raters and ``extra_models``."""
    models = set(ctx.read("answer", columns=["model"]).column("model").to_pylist())
    models |= set(table.column("model").to_pylist())
    votes = ctx.read("difficulty", columns=["difficulty_votes"]).column("difficulty_votes")
    for row in votes.to_pylist():
        models |= {v["judge"] for v in row or () if v.get("judge")}
    models |= set(cfg.extra_models)
    return sorted(m for m in models if m)


def run(table: pa.Table, cfg: EmitConfig, ctx: StageContext) -> StageResult:
    """Select the chosen answers, write the dataset shards and the card."""
    if "selected" not in table.column_names:
        raise ValueError(f"emit: verify output lacks column 'selected'; has {table.column_names}")
    is_selected = pc.fill_null(table.column("selected"), False)
    responses = pc.fill_null(pc.utf8_trim_whitespace(table.column("response").cast(pa.string())), "")
    empty = pc.and_(is_selected, pc.equal(responses, ""))
    keep = pc.and_(is_selected, pc.invert(empty))
    dropped = pa.concat_tables([_with_reason(table.filter(pc.invert(is_selected)), "not_selected"),
                                _with_reason(table.filter(empty), "empty_response")])
    counts = pc.value_counts(table.filter(keep).column("instruction_id")).to_pylist()
    twice = [c["values"] for c in counts if c["counts"] > 1]
    if twice:
        raise ValueError(f"emit: {len(twice)} instruction(s) have more than one selected answer, "
                         f"e.g. instruction_id={twice[0]}; the selection rule must pick one")
    chosen = fill_from(table.filter(keep), ctx, "audit", "gate_admitted")
    admitted, reasons, by_gate = _admitted(chosen, cfg.admit)
    chosen = chosen.drop_columns(["gate_admitted"]).append_column("gate_admitted", by_gate)
    rejected = chosen.filter(pc.invert(admitted))
    rejected = rejected.append_column("reason", reasons.filter(pc.invert(admitted)))
    dropped = pa.concat_tables([dropped, rejected.select(dropped.column_names)],
                               promote_options="permissive") if rejected.num_rows else dropped
    chosen = chosen.filter(admitted)
    chosen, duplicates = _without_duplicate_tasks(chosen, cfg, ctx)
    if duplicates.num_rows:
        dropped = pa.concat_tables([dropped, duplicates.select([*dropped.column_names,
                                                                "detail"])],
                                   promote_options="permissive")
    # verify may not carry every provenance column through; the stages that made them can.
    for stage, column in (("difficulty", "difficulty"), ("rate", "final_score"), ("rate", "elo"),
                          ("rate", "local_share"), ("rate", "margin"),
                          ("compress", "kcenter_rank"), ("audit", "judge_score")):
        chosen = fill_from(chosen, ctx, stage, column)
    chosen = chosen.sort_by("instruction_id")
    ids = chosen.column("instruction_id").to_pylist()
    chosen = with_origin(chosen, ctx.read("clean", columns=list(ORIGIN_COLUMNS),
                                          instruction_ids=ids))
    chosen = with_judges(chosen, ctx.read("judge", columns=list(JUDGE_COLUMNS),
                                          instruction_ids=ids))
    tests = ctx.read("tests", columns=list(AUTHOR_COLUMNS), instruction_ids=ids)
    chosen = with_evidence(with_test_authors(chosen, tests), tests)

    run_id, config_hash = ctx.run_id, ctx.config_hash()
    sft = build_sft_rows(chosen, system_prompt=cfg.system_prompt, run_id=run_id,
                         config_hash=config_hash)
    files = plan_files(sft, shard_rows=cfg.shard_rows, holdout_fraction=cfg.holdout_fraction,
                       seed=ctx.seed)
    for name, part in files.items():
        ctx.write_artifact(f"{DATASET}/{name}", part)
    # A rerun with fewer rows writes fewer shards; an old "-of-00003" file left beside the new
    # ones would be read twice by every `train-*.parquet` glob.
    ctx.remove_artifacts(DATASET, DATASET_SHARDS, keep=sorted(files))

    counts = provenance_counts(sft)
    info = CardInfo(
        name=cfg.dataset_name, license=cfg.license, run_id=run_id,
        config_hash=config_hash,
        files=sorted(files), split_sizes=split_sizes(files), system_prompt=cfg.system_prompt,
        funnel=card_funnel(ctx.funnel()) + [{"stage": "emit", "rows_in": table.num_rows,
                                            "kept": sft.num_rows,
                                            "dropped": _reason_counts(dropped)}],
        models=_run_models(table, cfg, ctx), source_counts=_value_counts(sft, "source_model"),
        schema=SFT_SCHEMA, admit=cfg.admit, gate=_gate_report(ctx), **counts,
    )
    ctx.write_artifact(DATASET_CARD, render_card(info, ctx.model_spec))
    stats = {f"rows_{split}": float(n) for split, n in info.split_sizes.items()}
    stats.update({name: float(n) for name, n in counts.items()})
    return StageResult(table=sft, dropped=dropped, stats=stats)


def _gate_report(ctx: StageContext) -> dict | None:
    """The audit's judge-gate section (``metrics.json``), None when the audit wrote none."""
    raw = ctx.read_artifact(AUDIT_METRICS)
    return json.loads(raw).get("gate") if raw is not None else None


def _value_counts(table: pa.Table, column: str) -> dict[str, int]:
    return {d["values"]: d["counts"] for d in pc.value_counts(table.column(column)).to_pylist()}


def _reason_counts(dropped: pa.Table) -> dict[str, int]:
    return _value_counts(dropped, "reason") if dropped.num_rows else {}


STAGE = StageSpec(
    name="emit", config=EmitConfig, run=run, source="repair", sharded=False,
    reads={"answer": ("model",),
           "clean": ORIGIN_COLUMNS,
           "judge": JUDGE_COLUMNS,
           "difficulty": ("instruction_id", "difficulty", "difficulty_votes"),
           "rate": ("instruction_id", "model", "final_score", "elo", "local_share", "margin"),
           "compress": ("instruction_id", "kcenter_rank"),
           "tests": tuple(dict.fromkeys((*AUTHOR_COLUMNS, *SUITE_COLUMNS))),
           "audit": ("instruction_id", "model", "gate_admitted", "judge_score")},
    artifacts=(AUDIT_METRICS, EMBEDDINGS),
    inputs=("instruction_id", "instruction", "model", "response", "status", "selected",
            "verified", *CARRIED),
    outputs=tuple(SFT_SCHEMA.names),
)
