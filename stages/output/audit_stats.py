"""How far to trust the judges: their verdicts against execution results (pure functions).

The unit of audit is an *audit row*: one judge verdict on one order of one battle, joined with
the execution status of both answers. Columns (``audit_rows`` validates them):

* ``instruction_id, model_a, model_b, judge`` (str), ``order`` ("ab" | "ba"),
* ``verdict`` ("a" | "b" | "tie" | null when unparsed, in terms of model_a / model_b),
* ``order_verdict`` (same values), optional: this order's own reading before the judge stage
  combined the two orders; position bias and order consistency are measured from it (from
  ``verdict`` when absent, i.e. when each order's verdict is its own),
* ``score_a, score_b`` (0-3 or null), optional,
* ``status_a, status_b``: the verify status of each answer (``passed``, ``failed``,
  ``error``, ``timeout``, ``memory``, ``no_tests``), null when unknown,
* ``difficulty`` (float, 1-10), optional.

Execution *separates* a battle when one answer passed and the other failed (failed, error,
timeout or memory); ``no_tests`` and unknown statuses never separate. On separated battles the
judge is right or wrong, which gives accuracy (exact Clopper-Pearson interval) and Cohen's
kappa between the judge's verdict (a / b / tie) and the execution verdict (a / b).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
from arenaforge.pipeline.statuses import ANSWER_STATUSES, FAILED_STATUSES, PASSED
from arenaforge.stages.arena.rate import (
    first_position_rates,
    judge_frame,
    resolve_battles,
    single_order_readings,
)
from arenaforge.stages.arena.ratings import first_bad
from arenaforge.stages.common.intervals import proportion

# An answer with no_entry_point defines no function the tests can bind to: never a logic
# failure, so it never separates a battle and the judge gate does not decide it either.
STATUSES = ANSWER_STATUSES
PAIR_KEY = ["instruction_id", "model_a", "model_b"]
DIFFICULTY_EDGES = (0.0, 4.0, 7.0, 10.0)  # pre-declared buckets of the 1-10 difficulty
DIFFICULTY_LABELS = ("easy (<4)", "medium (4-7)", "hard (>=7)")


def audit_rows(table: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """Validate an audit table (see the module docstring) and return it as a DataFrame."""
    df = judge_frame(table)
    for col in ("status_a", "status_b"):
        if col not in df.columns:
            raise ValueError(f"audit table: missing column {col!r} (have {list(df.columns)})")
        bad = df[col].notna() & ~df[col].isin(STATUSES)
        if bad.any():
            row, value = first_bad(df, bad, col)
            raise ValueError(f"audit table row {row}: {col} {value!r} not in {STATUSES}")
    if "order_verdict" in df.columns:
        bad = df["order_verdict"].notna() & ~df["order_verdict"].isin(("a", "b", "tie"))
        if bad.any():
            row, value = first_bad(df, bad, "order_verdict")
            raise ValueError(f"audit table row {row}: order_verdict {value!r} is not 'a', 'b', "
                             "'tie' or null")
    for col in ("score_a", "score_b"):
        if col not in df.columns:
            df[col] = np.nan
        bad = df[col].notna() & ~df[col].isin((0, 1, 2, 3))
        if bad.any():
            row, value = first_bad(df, bad, col)
            raise ValueError(f"audit table row {row}: {col} {value!r} not in 0-3")
    return df


def execution_verdict(status_a, status_b) -> np.ndarray:
    """``"a"`` when only A passed and B failed, ``"b"`` for the reverse, else None."""
    a = pd.Series(status_a, dtype=object)
    b = pd.Series(status_b, dtype=object)
    a_pass, b_pass = (a == PASSED).to_numpy(), (b == PASSED).to_numpy()
    a_fail, b_fail = a.isin(FAILED_STATUSES).to_numpy(), b.isin(FAILED_STATUSES).to_numpy()
    return np.select([a_pass & b_fail, b_pass & a_fail], ["a", "b"], None).astype(object)


def cohen_kappa(y1: Sequence, y2: Sequence) -> float | None:
    """Cohen's kappa from the confusion matrix; None when undefined (chance agreement = 1).

    Hand-written (three lines over the confusion matrix that the report shows anyway) so a
    degenerate case is None instead of sklearn's NaN plus warning; tested against
    ``sklearn.metrics.cohen_kappa_score``.
    """
    y1, y2 = np.asarray(y1, dtype=object), np.asarray(y2, dtype=object)
    if len(y1) == 0:
        return None
    labels = sorted(set(y1) | set(y2))
    index = {label: i for i, label in enumerate(labels)}
    cm = np.zeros((len(labels), len(labels)))
    np.add.at(cm, ([index[v] for v in y1], [index[v] for v in y2]), 1)
    n = cm.sum()
    observed = np.trace(cm) / n
    expected = float(cm.sum(axis=1) @ cm.sum(axis=0)) / n**2
    return None if expected == 1.0 else float((observed - expected) / (1.0 - expected))


def agreement(verdict: Sequence, truth: Sequence) -> dict:
    """Accuracy (a judge tie counts as wrong), its exact interval, kappa and tie count."""
    verdict = np.asarray(verdict, dtype=object)
    truth = np.asarray(truth, dtype=object)
    out = proportion(int((verdict == truth).sum()), len(truth))
    out["kappa"] = cohen_kappa(truth, verdict)
    out["judge_ties"] = int((verdict == "tie").sum())
    return out


def majority_verdicts(battles: pd.DataFrame) -> pd.DataFrame:
    """One verdict per (instruction, pair) from resolved per-judge battles.

    Each judge's battle gives 1 point to its winner (0.5 each for a tie); the side with more
    points wins and equal points is a tie.
    """
    pts = battles.assign(pa_=_points(battles["winner"], "a"), pb_=_points(battles["winner"], "b"))
    g = pts.groupby(PAIR_KEY, sort=True).agg(points_a=("pa_", "sum"), points_b=("pb_", "sum"),
                                             judges=("judge", "nunique")).reset_index()
    g["majority"] = np.select([g["points_a"] > g["points_b"], g["points_a"] < g["points_b"]],
                              ["a", "b"], "tie")
    return g


def position_bias(rows: pd.DataFrame) -> pd.DataFrame:
    """Per judge, from single-order readings: ``first_position_rates`` plus
    ``order_consistency`` (share of pairs, both readings parsed, whose readings agree)."""
    readings = single_order_readings(rows)
    if not readings["verdict"].notna().any():
        return pd.DataFrame()
    out = first_position_rates(readings)
    out["order_consistency"] = 1.0 - out["flip_rate"]
    return out


def _pair_facts(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (instruction, pair): execution verdict and difficulty bucket."""
    first = rows.groupby(PAIR_KEY, sort=True).first().reset_index()
    facts = first[PAIR_KEY].copy()
    facts["exec_verdict"] = execution_verdict(first["status_a"], first["status_b"])
    if "difficulty" in first.columns:
        facts["difficulty_bucket"] = pd.cut(first["difficulty"], list(DIFFICULTY_EDGES),
                                            labels=list(DIFFICULTY_LABELS), right=False,
                                            include_lowest=True).astype(object)
        facts.loc[first["difficulty"] >= DIFFICULTY_EDGES[-1], "difficulty_bucket"] = \
            DIFFICULTY_LABELS[-1]
    return facts


def _grouped(frame: pd.DataFrame, by: str, verdict: str) -> dict[str, dict]:
    return {str(key): agreement(g[verdict], g["exec_verdict"])
            for key, g in frame.groupby(by, sort=True)}


def judge_agreement(table: pd.DataFrame | pa.Table, single_order: str = "drop") -> dict:
    """Judges against execution on separated battles, overall and broken down.

    Returns a dict with ``separated_battles``, ``majority`` (agreement of the judges' majority:
    accuracy, exact 95% interval, kappa, judge ties, ``confusion``), ``per_judge`` (each
    judge's order-resolved verdict), ``per_pair`` (majority, by unordered contestant pair),
    ``per_order`` (single-order readings shown "ab" or "ba"), ``position`` (per judge, from
    single-order readings: first-position win rate, flip rate and order consistency, see
    :func:`position_bias`) and
    ``by_difficulty`` (majority by pre-declared difficulty bucket, when available).
    """
    rows = audit_rows(table)
    facts = _pair_facts(rows)
    battles, counts = resolve_battles(rows, single_order)
    battles = battles.merge(facts, on=PAIR_KEY, how="left")
    majority = majority_verdicts(battles).merge(facts, on=PAIR_KEY, how="left")
    sep = majority[majority["exec_verdict"].notna()]
    overall = agreement(sep["majority"], sep["exec_verdict"])
    overall["confusion"] = {f"exec_{t}": {f"judge_{v}": int(((sep["exec_verdict"] == t)
                                                              & (sep["majority"] == v)).sum())
                                          for v in ("a", "b", "tie")} for t in ("a", "b")}
    sep_battles = battles[battles["exec_verdict"].notna()]
    pair_name = np.where(sep["model_a"] < sep["model_b"], sep["model_a"] + " vs " + sep["model_b"],
                         sep["model_b"] + " vs " + sep["model_a"])
    single = single_order_readings(rows).merge(facts, on=PAIR_KEY, how="left")
    single = single[single["exec_verdict"].notna() & single["verdict"].notna()]
    position = position_bias(rows)
    out = {
        "separated_battles": len(sep),
        "battle_resolution": counts,
        "majority": overall,
        "per_judge": _grouped(sep_battles, "judge", "winner"),
        "per_pair": _grouped(sep.assign(pair=pair_name), "pair", "majority"),
        "per_order": _grouped(single, "order", "verdict"),
        "position": jsonable(position.to_dict(orient="index")),
    }
    if "difficulty_bucket" in sep.columns:
        out["by_difficulty"] = _grouped(sep[sep["difficulty_bucket"].notna()],
                                        "difficulty_bucket", "majority")
    return out


def self_preference(table: pd.DataFrame | pa.Table, families: Mapping[str, str],
                    single_order: str = "drop") -> dict[str, dict]:
    """Does a judge favour a contestant from its own family ("kin")?

    For each judge, on battles where exactly one contestant shares its family: the kin's
    share of this judge's points (win 1, tie 0.5), the kin's share of the points given by
    judges of neither contestant's family on the same battles, and on battles execution
    separates against the kin (kin failed), how often this judge still picked the kin.

    Args:
        table: audit rows.
        families: model id -> family; models absent from it have no family.

    Returns:
        ``{judge: {battles, kin_share, others_kin_share, delta, kin_failed_battles,
        kin_failed_picked}}`` for judges with at least one such battle.
    """
    rows = audit_rows(table)
    battles, _ = resolve_battles(rows, single_order)
    battles = battles.merge(_pair_facts(rows), on=PAIR_KEY, how="left")
    fam = {m: f for m, f in families.items() if f}
    fj = battles["judge"].map(fam)
    fa, fb = battles["model_a"].map(fam), battles["model_b"].map(fam)
    kin_a = fj.notna() & (fj == fa) & (fj != fb)
    kin_b = fj.notna() & (fj == fb) & (fj != fa)
    neutral = battles[fj.isna() | ((fj != fa) & (fj != fb))]
    out: dict[str, dict] = {}
    for judge in sorted(battles.loc[kin_a | kin_b, "judge"].unique()):
        mine = battles[(kin_a | kin_b) & (battles["judge"] == judge)]
        mine = mine.assign(kin=np.where(kin_a[mine.index], "a", "b"))
        kin_pts = _points(mine["winner"], mine["kin"])
        others = neutral.merge(mine[[*PAIR_KEY, "kin"]], on=PAIR_KEY)
        others_share = float(_points(others["winner"], others["kin"]).mean()) \
            if len(others) else None
        failed = mine[mine["exec_verdict"].notna() & (mine["exec_verdict"] != mine["kin"])]
        kin_share = float(kin_pts.mean())
        out[str(judge)] = {
            "battles": len(mine), "kin_share": kin_share,
            "others_kin_share": others_share,
            "delta": None if others_share is None else kin_share - others_share,
            "kin_failed_battles": len(failed),
            "kin_failed_picked": int((failed["winner"] == failed["kin"]).sum()),
        }
    return out


def answer_scores(table: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """Per (instruction, model): mean judge score 0-3 over every judge and order, and status.

    Returns:
        DataFrame ``instruction_id, model, judge_score, n_scores, status`` (judge_score NaN
        when no score parsed).
    """
    rows = audit_rows(table)
    sides = pd.concat([
        pd.DataFrame({"instruction_id": rows["instruction_id"], "model": rows["model_a"],
                      "score": rows["score_a"], "status": rows["status_a"]}),
        pd.DataFrame({"instruction_id": rows["instruction_id"], "model": rows["model_b"],
                      "score": rows["score_b"], "status": rows["status_b"]}),
    ], ignore_index=True)
    sides["score"] = pd.to_numeric(sides["score"], errors="coerce")
    out = sides.groupby(["instruction_id", "model"], sort=True).agg(
        judge_score=("score", "mean"), n_scores=("score", "count"), status=("status", "first"))
    return out.reset_index()


def executable(status) -> np.ndarray:
    """True where execution gave a verdict (passed or one of the failures)."""
    return pd.Series(status, dtype=object).isin((PASSED, *FAILED_STATUSES)).to_numpy()


def threshold_sensitivity(answers: pd.DataFrame, thresholds: Sequence[float] = (1, 2, 3)
                          ) -> list[dict]:
    """Acceptance ``judge_score >= t`` against execution, for each 0-3 threshold.

    Args:
        answers: ``answer_scores`` output (``judge_score``, ``status``).
        thresholds: thresholds on the mean score (StackEval: acceptable means >= 2).

    Returns:
        One dict per threshold: ``threshold, accepted, acceptance_rate, precision`` (pass
        rate among accepted, with exact interval), ``recall`` (accepted share of passing
        answers) and ``kappa`` between acceptance and passing.
    """
    scored = answers[executable(answers["status"]) & answers["judge_score"].notna()]
    passed = (scored["status"] == PASSED).to_numpy()
    out = []
    for t in thresholds:
        accepted = (scored["judge_score"] >= t).to_numpy()
        precision = proportion(int((accepted & passed).sum()), int(accepted.sum()))
        out.append({
            "threshold": float(t), "executable_answers": len(scored),
            "accepted": int(accepted.sum()),
            "acceptance_rate": float(accepted.mean()) if len(scored) else None,
            "precision": precision,
            "recall": float((accepted & passed).sum() / passed.sum()) if passed.any() else None,
            "kappa": cohen_kappa(accepted, passed),
        })
    return out


def reliability(answers: pd.DataFrame, edges: Sequence[float] = (0, 0.5, 1, 1.5, 2, 2.5, 3)
                ) -> list[dict]:
    """Pass rate of executable answers per bin of mean judge score (the last bin is closed)."""
    scored = answers[executable(answers["status"]) & answers["judge_score"].notna()]
    # bin i is [edges[i], edges[i+1]); the top score lands in the last bin
    idx = np.clip(np.searchsorted(edges, scored["judge_score"], side="right") - 1, 0,
                  len(edges) - 2)
    out = []
    for i in range(len(edges) - 1):
        sel = idx == i
        stat = proportion(int((scored["status"].to_numpy()[sel] == PASSED).sum()), int(sel.sum()))
        stat.update(lo=float(edges[i]), hi=float(edges[i + 1]),
                    mean_score=float(scored["judge_score"].to_numpy()[sel].mean())
                    if sel.any() else None)
        out.append(stat)
    return out


def _points(winner: pd.Series, side) -> np.ndarray:
    """Points of ``side`` ("a"/"b") in battles won by ``winner``: 1, 0.5 for a tie, 0."""
    winner = np.asarray(winner, dtype=object)
    return np.where(winner == "tie", 0.5, (winner == np.asarray(side, dtype=object)) * 1.0)


def jsonable(value):
    """Nested dicts/lists with numpy scalars and NaN -> plain JSON-ready Python values."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if np.isnan(value) else float(value)
    return value
