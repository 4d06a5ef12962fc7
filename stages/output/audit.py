"""Stage ``audit``: how far the judges can be trusted, measured against execution.

Input (source ``verify``, one row per (instruction_id, model)): ``instruction_id, model,
status`` (passed, failed, error, timeout, memory, no_tests, no_entry_point) and, when verify
records them, ``probe_gate, program_gate``. Reads ``judge`` and ``rate``, optionally
``difficulty`` and ``repair`` (skipped when that stage did not run), the model registry for
families, ``rate/ratings.parquet`` for the leaderboard and the completed stages' statistics for
the funnel.

Output: the input rows plus ``judge_score`` (mean 0-3 judge score of the answer, null when
none parsed) and ``gate_admitted`` (for ``no_tests`` rows: whether the calibrated gate admits
them; null for rows that had tests). Artifact:
``audit/metrics.json``. The stage renders nothing: after the run the runner has the report
application (``arenaforge.pipeline.apps.report``) render ``audit/report.html`` from it, and
``arenaforge report RUN_DIR`` rebuilds that page.

Your own data: ``audit_table(table)`` takes one row per judge verdict and order with the
execution status of both answers (columns in ``arenaforge.stages.output.audit_stats``) and returns the same
metrics dict; ``arenaforge.pipeline.apps.report.audit_file(path, out_dir)`` (``arenaforge
audit``) writes metrics.json and report.html for a Parquet, CSV or JSON-lines file.

``metrics.json`` schema (version 1; rates are fractions, intervals exact 95%; an
"agreement" is ``{k, n, rate, ci_low, ci_high, kappa, judge_ties}``, rate null when n = 0)::

    schema_version: 1
    counts: {audit_rows, battles, judges, answers, answers_by_status: {status: n}}
    judges:
      separated_battles: battles where one answer passed and the other failed
      battle_resolution: {battles_consistent, battles_order_flip, battles_order_partial,
                          battles_single_order, battles_unparsed, battles_single_order_dropped}
      majority: agreement of the judges' majority verdict + confusion {exec_a|exec_b:
                {judge_a, judge_b, judge_tie}}
      per_judge / per_order / per_pair / by_difficulty: {name: agreement}
      position: {judge: {parsed, decisive, first_wins, ties, first_position_win_rate,
                         both_orders, flips, flip_rate, order_consistency}}  (single-order
                         readings: the judge stage's order_verdict)
    self_preference: {judge: {battles, kin_share, others_kin_share, delta,
                              kin_failed_battles, kin_failed_picked}}
    threshold_sensitivity: [{threshold, executable_answers, accepted, acceptance_rate,
                             precision: {k, n, rate, ci_low, ci_high}, recall, kappa}]
    reliability: [{lo, hi, k, n, rate, ci_low, ci_high, mean_score}]   (score bins)
    gate: {threshold, epsilon, delta, level_per_threshold, calibration_rows,
           grid: [{threshold, admitted, failures, upper_bound}],
           splits: {calibration|held_out: {instructions, rows}},
           held_out: {k, n, rate, ci_low, ci_high, rows, admitted_share},
           without_tests: {rows, admitted}, settings: {grid, calibration_fraction, seed}}
    winners: {instructions, executable, passed, pass_rate, all_answers_pass_rate}  (stage only)
    refine_at_k: [{k, passed, n, rate, ci_low, ci_high}], k = 0..R  (stage, with repair)
    repair: {k: repaired, n: attempted, rate, ci_low, ci_high}  (stage, with repair)
    circular_trusted_tests, trusted_tests, circular_by_author: {author: n},
    alpha_decisive_share, decided_by: {local|global|tie: n}
        (stage; arenaforge.stages.output.audit_evidence)
    gates: {rows, probe: {verdict: n}, program: {verdict: n}, probe_rejected,
            program_rejected, table: {probe_pass|probe_reject: {program_pass, program_fail}},
            agreement: {k, n, rate, ci_low, ci_high}, kappa}  (stage; arenaforge.stages.output.audit_verification)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
from arenaforge.pipeline.stage import (
    AUDIT_METRICS,
    StageConfig,
    StageContext,
    StageResult,
    StageSpec,
)
from arenaforge.pipeline.statuses import NO_TESTS, PASSED
from arenaforge.stages.output.audit_evidence import evidence_metrics
from arenaforge.stages.output.audit_stats import (
    answer_scores,
    audit_rows,
    executable,
    jsonable,
    judge_agreement,
    reliability,
    self_preference,
    threshold_sensitivity,
)
from arenaforge.stages.output.audit_verification import REFINE_COLUMNS, verification_metrics
from arenaforge.stages.output.gate import DEFAULT_GRID, run_gate
from pydantic import Field

log = logging.getLogger(__name__)
SCHEMA_VERSION = 1


class AuditConfig(StageConfig):
    """Config of the ``audit`` stage."""

    single_order: Literal["drop", "use"] = "drop"
    thresholds: tuple[float, ...] = Field((1.0, 2.0, 3.0), description="0-3 acceptance cuts")
    gate_grid: tuple[float, ...] = DEFAULT_GRID
    gate_epsilon: float = Field(0.1, gt=0.0, lt=1.0, description="tolerated failure rate")
    gate_delta: float = Field(0.1, gt=0.0, lt=1.0, description="error level of the bounds")
    calibration_fraction: float = Field(0.5, gt=0.0, lt=1.0)
    seed: int | None = Field(None, description="calibration split seed; None: run seed")


def _audit(table, families: Mapping[str, str] | None, cfg: AuditConfig, seed: int
           ) -> tuple[dict, pd.DataFrame]:
    rows = audit_rows(table)
    answers = answer_scores(rows)
    gate, admitted = run_gate(answers, cfg.gate_grid, cfg.gate_epsilon, cfg.gate_delta,
                              cfg.calibration_fraction, seed)
    gate["settings"] = {"grid": list(cfg.gate_grid),
                        "calibration_fraction": cfg.calibration_fraction, "seed": seed}
    answers["gate_admitted"] = admitted
    metrics = {
        "schema_version": SCHEMA_VERSION,
        "counts": {
            "audit_rows": len(rows),
            "battles": len(rows.drop_duplicates(["instruction_id", "model_a", "model_b"])),
            "judges": int(rows["judge"].nunique()), "answers": len(answers),
            "answers_by_status": answers["status"].fillna("unknown").value_counts().to_dict(),
        },
        "judges": judge_agreement(rows, cfg.single_order),
        "self_preference": self_preference(rows, families, cfg.single_order) if families else {},
        "threshold_sensitivity": threshold_sensitivity(answers, cfg.thresholds),
        "reliability": reliability(answers),
        "gate": gate,
    }
    return jsonable(metrics), answers


def audit_table(table: pd.DataFrame | pa.Table, families: Mapping[str, str] | None = None,
                seed: int = 0, **settings) -> dict:
    """Audit judges against execution on any table of judge verdicts with execution results.

    Args:
        table: one row per (instruction_id, model_a, model_b, judge, order) with ``verdict``,
            optional ``score_a, score_b`` (0-3) and ``difficulty``, and ``status_a,
            status_b`` (see ``arenaforge.stages.output.audit_stats``).
        families: model id -> family, for the self-preference check.
        seed: seed of the gate's calibration split.
        **settings: ``AuditConfig`` fields (thresholds, gate_epsilon, ...).

    Returns:
        The metrics dict (schema in this module's docstring), JSON-ready.
    """
    return _audit(table, families, AuditConfig(**settings), seed)[0]


def build_audit_rows(judge: pd.DataFrame, verify: pd.DataFrame,
                     difficulty: pd.DataFrame | None = None) -> pd.DataFrame:
    """Join judge rows with each answer's verify status (and the instruction's difficulty)."""
    for col in ("instruction_id", "model", "status"):
        if col not in verify.columns:
            raise ValueError(f"verify table: missing column {col!r}")
    status = verify[["instruction_id", "model", "status"]]
    dup = status.duplicated(["instruction_id", "model"])
    if dup.any():
        row = int(np.flatnonzero(dup.to_numpy())[0])
        raise ValueError(f"verify table row {row}: duplicate (instruction_id, model)")
    rows = judge
    for side in ("a", "b"):
        rows = rows.merge(status.rename(columns={"model": f"model_{side}",
                                                 "status": f"status_{side}"}),
                          on=["instruction_id", f"model_{side}"], how="left")
    if difficulty is not None and "difficulty" in difficulty.columns:
        per = difficulty[["instruction_id", "difficulty"]].drop_duplicates("instruction_id")
        rows = rows.drop(columns=["difficulty"], errors="ignore").merge(
            per, on="instruction_id", how="left")
    return rows


def winner_pass_rate(rate: pd.DataFrame, verify: pd.DataFrame) -> dict:
    """Does the per-instruction winner (final score) pass execution more often than average?"""
    status = verify.set_index(["instruction_id", "model"])["status"]
    winners = rate.dropna(subset=["winner"]).drop_duplicates("instruction_id")
    won = status.reindex(pd.MultiIndex.from_arrays([winners["instruction_id"],
                                                    winners["winner"]])).to_numpy(dtype=object)
    ex = executable(won)
    every = verify["status"].to_numpy(dtype=object)
    return {"instructions": len(winners), "executable": int(ex.sum()),
            "passed": int((won[ex] == PASSED).sum()),
            "pass_rate": float((won[ex] == PASSED).mean()) if ex.any() else None,
            "all_answers_pass_rate": float((every[executable(every)] == PASSED).mean())
            if executable(every).any() else None}


def metrics_json(metrics: Mapping) -> str:
    """The text of ``metrics.json`` (sorted keys, so equal metrics are equal files)."""
    return json.dumps(metrics, indent=2, sort_keys=True) + "\n"


def _families(ctx: StageContext, models: set[str]) -> dict[str, str]:
    out = {}
    for m in sorted(models):
        try:
            out[m] = ctx.model_spec(m).family
        except KeyError:  # a model outside the registry (imported judgements) has no family
            log.warning("audit: model %r is not in the registry; no family", m)
    return out


def run(table: pa.Table, cfg: AuditConfig, ctx: StageContext) -> StageResult:
    """Audit the run's judges, write metrics.json, gate untested rows."""
    verify = table.to_pandas()
    judge = ctx.read("judge").to_pandas()
    try:
        difficulty = ctx.read("difficulty", columns=["instruction_id", "difficulty"]).to_pandas()
    except (RuntimeError, KeyError) as exc:  # the difficulty stage is optional
        log.info("audit: no difficulty buckets (%s)", exc)
        difficulty = None
    rows = build_audit_rows(judge, verify, difficulty)
    families = _families(ctx, set(rows["judge"]) | set(rows["model_a"]) | set(rows["model_b"]))
    seed = ctx.seed if cfg.seed is None else cfg.seed
    metrics, answers = _audit(rows, families, cfg, seed)
    rate = ctx.read("rate", columns=["instruction_id", "model", "winner",
                                     "decided_by"]).to_pandas()
    metrics["winners"] = jsonable(winner_pass_rate(rate, verify))
    try:
        tests = ctx.read("tests", columns=["instruction_id", "author", "survived"]).to_pandas()
    except (RuntimeError, KeyError) as exc:  # a run without the tests stage
        log.info("audit: no tests rows (%s)", exc)
        tests = None
    metrics.update(jsonable(evidence_metrics(tests, judge, rate)))
    try:
        repair = ctx.read("repair", columns=list(REFINE_COLUMNS)).to_pandas()
    except (RuntimeError, KeyError) as exc:  # no repair stage: no Refine@k
        log.info("audit: no repair rows (%s)", exc)
        repair = None
    funnel = ctx.funnel()
    metrics.update(verification_metrics(
        verify, repair, funnel["repair"].stats if "repair" in funnel else {}))
    ctx.write_artifact(AUDIT_METRICS, metrics_json(metrics))

    keys = pd.MultiIndex.from_arrays([verify["instruction_id"], verify["model"]])
    per = answers.set_index(["instruction_id", "model"]).reindex(keys)
    untested = verify["status"].to_numpy(dtype=object) == NO_TESTS
    admitted = per["gate_admitted"].fillna(False).to_numpy(dtype=bool)
    out = table
    for name in ("judge_score", "gate_admitted"):
        if name in out.column_names:
            out = out.drop_columns([name])
    out = out.append_column("judge_score", pa.array(per["judge_score"].to_numpy(float),
                                                    from_pandas=True))
    out = out.append_column("gate_admitted", pa.array(
        [bool(a) if u else None for u, a in zip(untested, admitted)], pa.bool_()))
    maj = metrics["judges"]["majority"]
    stats = {"separated_battles": metrics["judges"]["separated_battles"],
             "judge_majority_correct": maj["k"],
             "gate_admitted": metrics["gate"]["without_tests"]["admitted"]}
    return StageResult(table=out, stats={k: float(v) for k, v in stats.items()})



STAGE = StageSpec(
    name="audit", config=AuditConfig, run=run, source="verify", sharded=False,
    reads={"judge": ("instruction_id", "model_a", "model_b", "judge", "order", "verdict",
                     "score_a", "score_b", "order_verdict"),
           "difficulty": ("instruction_id", "difficulty"),
           "rate": ("instruction_id", "model", "winner", "decided_by"),
           "tests": ("instruction_id", "author", "survived"),
           "repair": REFINE_COLUMNS},
    optional=("difficulty", "repair", "tests"),
    inputs=("instruction_id", "model", "status"),
    outputs=("judge_score", "gate_admitted"),
)
