"""Stage ``rate``: judge verdicts -> battles -> ratings and per-instruction winners.

Input (source ``answer``, one row per (instruction_id, model)): ``instruction_id, model`` and
whatever else the answer stage wrote (kept unchanged).
Reads ``judge`` (one row per (instruction_id, model_a, model_b, judge, order)): ``order`` in
{"ab", "ba"}, ``verdict`` in {"a", "b", "tie"} or null when the judge's output did not parse
(already expressed in terms of model_a / model_b, whatever the order shown).

Battle outcome per (instruction, pair, judge), see ``resolve_battles``:

* both orders parsed and equal -> that verdict (``consistent``);
* both parsed, different -> tie (``order_flip`` when a/b swapped, ``order_partial`` when one
  order said tie), because a preference that follows the position is not a preference;
* one order parsed -> dropped by default (``single_order="drop"``): a lone verdict cannot be
  separated from position bias, which dominates small judges. ``single_order="use"`` keeps it;
* neither parsed -> dropped (``unparsed``). Every case is counted in the stage's stats.

Output columns added: ``n_battles, local_share, elo_expectation, final_score, winner, margin,
decided_by, elo`` (``elo`` is the model's Bradley-Terry rating; ``final_score`` by ``rule``, and
``decided_by`` whether the local votes, the global term or the tie-break chose the winner: see
``arenaforge.stages.arena.ratings.score_instructions``, where the rules are defined). Rows of instructions without any battle
keep nulls. Artifacts: ``rate/ratings.parquet`` (one row per model, with the table-wide
``n_bootstrap`` and ``n_failed_bootstrap``), ``rate/battles.parquet`` (the resolved battles)
and ``rate/leaderboard.md``. A bootstrap refit that fails never fails the stage: it is counted
in the stats (``n_failed_bootstrap``) and under the leaderboard.
"""

from __future__ import annotations

import logging
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
from arenaforge.pipeline.stage import (
    BATTLES,
    LEADERBOARD,
    RATINGS,
    StageConfig,
    StageContext,
    StageResult,
    StageSpec,
)
from arenaforge.stages.arena.ratings import (
    ScoreRule,
    bradley_terry,
    first_bad,
    score_instructions,
    sequential_elo,
)
from pydantic import Field

log = logging.getLogger(__name__)

BATTLE_KEY = ["instruction_id", "model_a", "model_b", "judge"]
ORDERS = ("ab", "ba")
RESOLUTIONS = ("consistent", "order_flip", "order_partial", "single_order", "unparsed")


class RateConfig(StageConfig):
    """Config of the ``rate`` stage."""

    rule: ScoreRule = Field(
        "bt_blend", description="how an instruction's winner is scored (ratings.score_"
        "instructions): local (its own battles), elo (the global ratings) or bt_blend (alpha * "
        "global + (1 - alpha) * local, the paper's)")
    alpha: float = Field(0.7, ge=0.0, le=1.0,
                         description="bt_blend: weight of the global Elo expectation")
    n_bootstrap: int = Field(200, ge=0, description="bootstrap resamples for BT intervals")
    seed: int | None = Field(None, description="bootstrap seed; None uses the run seed")
    anchor: str | None = Field(None, description="model fixed at 1000; None: mean at 1000")
    single_order: Literal["drop", "use"] = "drop"
    elo_k: float = Field(40.0, gt=0.0, description="K of the sequential Elo")


def judge_frame(judge: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """Validate judge rows (columns, order/verdict values, unique keys) as a DataFrame."""
    df = judge.to_pandas() if isinstance(judge, pa.Table) else pd.DataFrame(judge)
    for col in (*BATTLE_KEY, "order", "verdict"):
        if col not in df.columns:
            raise ValueError(f"judge table: missing column {col!r} (have {list(df.columns)})")
    df = df.reset_index(drop=True)
    bad = ~df["order"].isin(ORDERS)
    if bad.any():
        row, value = first_bad(df, bad, "order")
        raise ValueError(f"judge table row {row}: order {value!r} not in {ORDERS}")
    bad = df["verdict"].notna() & ~df["verdict"].isin(("a", "b", "tie"))
    if bad.any():
        row, value = first_bad(df, bad, "verdict")
        raise ValueError(f"judge table row {row}: verdict {value!r} is not 'a', 'b', 'tie' "
                         "or null")
    dup = df.duplicated([*BATTLE_KEY, "order"])
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        raise ValueError(f"judge table row {row}: duplicate (instruction_id, model_a, model_b, "
                         f"judge, order) = {tuple(df.loc[row, [*BATTLE_KEY, 'order']])}")
    return df


def resolve_battles(judge: pd.DataFrame | pa.Table, single_order: str = "drop"
                    ) -> tuple[pd.DataFrame, dict[str, int]]:
    """Combine the two orders of each (instruction, pair, judge) into one battle outcome.

    Args:
        judge: judge rows (see the module docstring).
        single_order: ``"drop"`` or ``"use"`` a battle where only one order parsed.

    Returns:
        ``(battles, counts)``: battles with ``instruction_id, model_a, model_b, judge, winner,
        resolution, verdict_ab, verdict_ba`` sorted by key, and counts per resolution
        (``battles_<resolution>``, plus ``battles_single_order_dropped``).
    """
    if single_order not in ("drop", "use"):
        raise ValueError(f"single_order must be 'drop' or 'use', got {single_order!r}")
    df = judge_frame(judge)
    wide = (df.pivot(index=BATTLE_KEY, columns="order", values="verdict")
            .reindex(columns=list(ORDERS)).reset_index())
    wide.columns.name = None
    wide = wide.rename(columns={"ab": "verdict_ab", "ba": "verdict_ba"})
    ab, ba = wide["verdict_ab"], wide["verdict_ba"]
    both = ab.notna() & ba.notna()
    flip = both & (ab != ba) & (ab != "tie") & (ba != "tie")
    partial = both & (ab != ba) & ~flip
    single = ab.notna() ^ ba.notna()
    resolution = np.select([both & (ab == ba), flip, partial, single],
                           ["consistent", "order_flip", "order_partial", "single_order"],
                           "unparsed")
    winner = np.where(both & (ab == ba), ab, "tie")
    winner = np.where(single, ab.fillna(ba), winner)
    wide["winner"] = winner
    wide["resolution"] = resolution
    counts = {f"battles_{r}": int((resolution == r).sum()) for r in RESOLUTIONS}
    keep = resolution != "unparsed"
    if single_order == "drop":
        keep &= resolution != "single_order"
    counts["battles_single_order_dropped"] = counts["battles_single_order"] * (
        single_order == "drop")
    cols = [*BATTLE_KEY, "winner", "resolution", "verdict_ab", "verdict_ba"]
    battles = wide.loc[keep, cols].sort_values(BATTLE_KEY, ignore_index=True)
    return battles, counts


def single_order_readings(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with ``verdict`` replaced by each order's own reading (``order_verdict``).

    The logprob and pointwise protocols put one combined verdict on both order rows, which
    would show every judge as free of position bias; their single-order readings are what a
    judge said when shown one order.
    """
    if "order_verdict" not in rows.columns:
        return rows
    return rows.assign(verdict=rows["order_verdict"])


def first_position_rates(judge: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """Position bias per judge from single-order verdicts.

    ``first_position_win_rate`` = verdicts for the answer shown first / decisive verdicts
    (0.5 means no position preference, since every pair is shown in both orders);
    ``flip_rate`` = share of (instruction, pair) with both orders parsed where the verdict
    changed with the order.

    Returns:
        DataFrame indexed by judge: ``parsed, decisive, first_wins, ties,
        first_position_win_rate, both_orders, flips, flip_rate``.
    """
    df = judge_frame(judge)
    parsed = df[df["verdict"].notna()]
    shown_first = np.where(parsed["order"] == "ab", "a", "b")
    first_win = parsed["verdict"].to_numpy() == shown_first
    tie = parsed["verdict"].to_numpy() == "tie"
    per = pd.DataFrame({"judge": parsed["judge"].to_numpy(), "first_win": first_win, "tie": tie})
    out = per.groupby("judge").agg(parsed=("tie", "size"), first_wins=("first_win", "sum"),
                                   ties=("tie", "sum"))
    out["decisive"] = out["parsed"] - out["ties"]
    out["first_position_win_rate"] = out["first_wins"] / out["decisive"].replace(0, np.nan)
    battles, _ = resolve_battles(df, single_order="use")
    paired = battles[battles["verdict_ab"].notna() & battles["verdict_ba"].notna()]
    flips = paired.assign(flip=paired["verdict_ab"] != paired["verdict_ba"]).groupby("judge")
    out["both_orders"] = flips.size().reindex(out.index).fillna(0).astype(int)
    out["flips"] = flips["flip"].sum().reindex(out.index).fillna(0).astype(int)
    out["flip_rate"] = out["flips"] / out["both_orders"].replace(0, np.nan)
    return out[["parsed", "decisive", "first_wins", "ties", "first_position_win_rate",
                "both_orders", "flips", "flip_rate"]]


def leaderboard_markdown(ratings: pd.DataFrame) -> str:
    """The leaderboard as a GitHub markdown table (written by hand: avoids a tabulate dep)."""
    def num(x, fmt):
        return "n/a" if x is None or pd.isna(x) else format(x, fmt)

    lines = [("| rank | model | BT rating | 95% CI | sequential Elo | battles | win rate | "
             "first-position win rate (as judge) |"),
             "|---:|---|---:|---|---:|---:|---:|---:|"]
    for rank, r in enumerate(ratings.itertuples(index=False), start=1):
        lines.append(f"| {rank} | {r.model} | {num(r.rating, '.0f')} | "
                     f"[{num(r.ci_low, '.0f')}, {num(r.ci_high, '.0f')}] | "
                     f"{num(r.sequential_elo, '.1f')} | {r.battles} | {num(r.win_rate, '.3f')} | "
                     f"{num(r.first_position_win_rate, '.3f')} |")
    return "\n".join(lines) + "\n" + interval_note(ratings)


def interval_note(ratings: pd.DataFrame) -> str:
    """One line under the leaderboard: where the intervals come from and how many refits failed.

    >>> interval_note(pd.DataFrame({"n_bootstrap": [200], "n_failed_bootstrap": [0]}))
    '\\n95% CI: percentile bootstrap, 200 of 200 refits gave ratings.\\n'
    """
    if ratings.empty:
        return ""
    n, failed = int(ratings["n_bootstrap"].iloc[0]), int(ratings["n_failed_bootstrap"].iloc[0])
    if n == 0:
        return "\nNo intervals: `rate.n_bootstrap` is 0.\n"
    note = f"\n95% CI: percentile bootstrap, {n - failed} of {n} refits gave ratings"
    if failed:
        note += (f" ({failed} failed: the resample dropped a model, split the battle graph or "
                 "left a model that never loses or never wins; n/a where more than 2.5% failed)")
    return note + ".\n"


def _append_scores(table: pa.Table, scores: pd.DataFrame, elo: dict[str, float]) -> pa.Table:
    """Align per-(instruction, model) scores to the answer rows and append them as columns."""
    keys = pd.MultiIndex.from_arrays([table.column("instruction_id").to_pylist(),
                                      table.column("model").to_pylist()])
    if keys.has_duplicates:
        row = int(np.flatnonzero(keys.duplicated())[0])
        raise ValueError(f"answer table row {row}: duplicate (instruction_id, model) "
                         f"= {keys[row]}")
    aligned = scores.set_index(["instruction_id", "model"]).reindex(keys)
    winners = scores.groupby("instruction_id")["winner"].first()
    margins = scores.groupby("instruction_id")["margin"].first()
    decided = scores.groupby("instruction_id")["decided_by"].first()
    iids = pd.Series(keys.get_level_values(0))
    columns = {
        "n_battles": pa.array(aligned["battles"].fillna(0).astype("int64").to_numpy()),
        "local_share": pa.array(aligned["local_share"].to_numpy(float), from_pandas=True),
        "elo_expectation": pa.array(aligned["elo_expectation"].to_numpy(float),
                                    from_pandas=True),
        "final_score": pa.array(aligned["final_score"].to_numpy(float), from_pandas=True),
        "winner": pa.array(iids.map(winners).tolist(), pa.string(), from_pandas=True),
        "margin": pa.array(iids.map(margins).to_numpy(float), from_pandas=True),
        "decided_by": pa.array(iids.map(decided).tolist(), pa.string(), from_pandas=True),
        "elo": pa.array(pd.Series(keys.get_level_values(1)).map(elo).to_numpy(float),
                        from_pandas=True),
    }
    for name, values in columns.items():
        if name in table.column_names:
            table = table.drop_columns([name])
        table = table.append_column(name, values)
    return table


def run(table: pa.Table, cfg: RateConfig, ctx: StageContext) -> StageResult:
    """Resolve battles, fit ratings, score every (instruction, model) and write artifacts."""
    for col in ("instruction_id", "model"):
        if col not in table.column_names:
            raise ValueError(f"rate: input table lacks column {col!r}")
    judge = ctx.read("judge").to_pandas()
    battles, counts = resolve_battles(judge, cfg.single_order)
    seed = ctx.seed if cfg.seed is None else cfg.seed
    bt = bradley_terry(battles, n_bootstrap=cfg.n_bootstrap, seed=seed, anchor=cfg.anchor)
    seq = sequential_elo(battles, k=cfg.elo_k).set_index("model")["rating"]
    ratings = bt.assign(sequential_elo=bt["model"].map(seq))
    if len(judge):
        # each order's own reading: the combined verdict on both rows would read 0.5
        position = first_position_rates(single_order_readings(judge))["first_position_win_rate"]
        ratings["first_position_win_rate"] = ratings["model"].map(position)
    else:
        ratings["first_position_win_rate"] = np.nan
    elo = dict(zip(bt["model"], bt["rating"]))
    scores = score_instructions(battles, elo, alpha=cfg.alpha, rule=cfg.rule) if len(battles) \
        else pd.DataFrame(columns=["instruction_id", "model", "battles", "local_share",
                                   "elo_expectation", "final_score", "winner", "margin",
                                   "decided_by"])
    out = _append_scores(table, scores, elo)

    ctx.write_artifact(RATINGS, pa.Table.from_pandas(ratings, preserve_index=False))
    ctx.write_artifact(BATTLES, pa.Table.from_pandas(battles, preserve_index=False))
    ctx.write_artifact(LEADERBOARD, leaderboard_markdown(ratings))
    instructions = set(table.column("instruction_id").to_pylist())
    n_failed = int(bt["n_failed_bootstrap"].iloc[0]) if len(bt) else 0
    stats = {**counts, "battles_rated": len(battles), "models_rated": len(bt),
             "instructions": len(instructions),
             "instructions_without_battles": len(instructions - set(scores["instruction_id"])),
             **{f"decided_by.{k}": v for k, v in scores.drop_duplicates("instruction_id")
                ["decided_by"].value_counts().items()},
             "n_failed_bootstrap": n_failed}
    log.info("rate: %d battles, %d models, %d of %d bootstrap refits failed; %s", len(battles),
             len(bt), n_failed, cfg.n_bootstrap, counts)
    return StageResult(table=out, stats={k: float(v) for k, v in stats.items()})


STAGE = StageSpec(
    name="rate", config=RateConfig, run=run, source="answer", sharded=False,
    reads={"judge": (*BATTLE_KEY, "order", "verdict", "order_verdict")},
    inputs=("instruction_id", "model"),
    outputs=("n_battles", "local_share", "elo_expectation", "final_score", "winner", "margin",
             "decided_by", "elo"),
)
