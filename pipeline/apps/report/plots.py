"""Matplotlib figures of the audit, returned as base64 PNG for a self-contained page.

Each function takes plain metrics (dicts / DataFrames from ``arenaforge.stages.output.audit``) and returns a
``data:image/png;base64,...`` URI, or None when there is nothing to draw.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence

import pandas as pd


def _figure(width: float = 6.4, height: float = 3.6):
    # Agg: no display on servers, and the only backend safe from worker threads
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), dpi=100)
    return plt, fig, ax


def _encode(plt, fig) -> str:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def funnel_plot(funnel: Sequence[Mapping]) -> str | None:
    """Rows out of each stage (log scale), from ``[{stage, rows_in, rows_out}, ...]``."""
    rows = [f for f in funnel if f.get("rows_out") is not None]
    if not rows:
        return None
    plt, fig, ax = _figure(height=0.45 * len(rows) + 1.2)
    names = [str(r["stage"]) for r in rows][::-1]
    ax.barh(names, [max(int(r["rows_out"]), 0) for r in rows][::-1], color="#4c72b0")
    if max(int(r["rows_out"]) for r in rows) > 0:
        ax.set_xscale("symlog")
    ax.set_xlabel("rows out")
    ax.set_title("Funnel")
    return _encode(plt, fig)


def leaderboard_plot(ratings: pd.DataFrame) -> str | None:
    """Bradley-Terry rating with 95% interval per model."""
    if ratings is None or ratings.empty:
        return None
    r = ratings.iloc[::-1]
    plt, fig, ax = _figure(height=0.45 * len(r) + 1.2)
    lo = (r["rating"] - r["ci_low"]).fillna(0).clip(lower=0)
    hi = (r["ci_high"] - r["rating"]).fillna(0).clip(lower=0)
    ax.errorbar(r["rating"], r["model"].astype(str), xerr=[lo, hi], fmt="o", capsize=4,
                color="#4c72b0")
    ax.set_xlabel("Bradley-Terry rating (Elo scale) with 95% bootstrap interval")
    ax.set_title("Leaderboard")
    return _encode(plt, fig)


def reliability_plot(bins: Sequence[Mapping]) -> str | None:
    """Pass rate per bin of mean judge score, with exact intervals and bin sizes."""
    shown = [b for b in bins if b["n"]]
    if not shown:
        return None
    plt, fig, ax = _figure()
    mids = [(b["lo"] + b["hi"]) / 2 for b in shown]
    rates = [b["rate"] for b in shown]
    err = [[b["rate"] - b["ci_low"] for b in shown], [b["ci_high"] - b["rate"] for b in shown]]
    ax.errorbar(mids, rates, yerr=err, fmt="o-", capsize=4, color="#dd8452")
    for x, y, b in zip(mids, rates, shown):
        ax.annotate(f"n={b['n']}", (x, y), textcoords="offset points", xytext=(4, 6), fontsize=8)
    ax.set_xlim(0, 3)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("mean judge score (0-3)")
    ax.set_ylabel("execution pass rate")
    ax.set_title("Reliability: judge score vs execution")
    return _encode(plt, fig)


def position_plot(position: Mapping[str, Mapping]) -> str | None:
    """First-position win rate and order-flip rate per judge; 0.5 means no position bias."""
    judges = [j for j, p in position.items() if p.get("first_position_win_rate") is not None]
    if not judges:
        return None
    plt, fig, ax = _figure(height=0.5 * len(judges) + 1.4)
    y = range(len(judges))
    first = [position[j]["first_position_win_rate"] for j in judges]
    flips = [position[j].get("flip_rate") or 0.0 for j in judges]
    ax.barh([v + 0.2 for v in y], first, height=0.4, label="first-position win rate",
            color="#c44e52")
    ax.barh([v - 0.2 for v in y], flips, height=0.4, label="flip rate (order swapped)",
            color="#8172b2")
    ax.axvline(0.5, color="black", linestyle="--", linewidth=1)
    ax.set_yticks(list(y), judges)
    ax.set_xlim(0, 1)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Position bias per judge")
    return _encode(plt, fig)


def gate_plot(gate: Mapping) -> str | None:
    """Upper bound on the failure rate per threshold, epsilon and the chosen threshold."""
    grid = gate.get("grid") or []
    if not grid:
        return None
    plt, fig, ax = _figure()
    ts = [g["threshold"] for g in grid]
    ax.plot(ts, [g["upper_bound"] for g in grid], "o-", color="#55a868",
            label="upper bound P(fail | score >= t)")
    ax.plot(ts, [g["failures"] / g["admitted"] if g["admitted"] else float("nan") for g in grid],
            "x:", color="grey", label="observed failure rate")
    ax.axhline(gate["epsilon"], color="#c44e52", linestyle="--", label="epsilon")
    if gate.get("threshold") is not None:
        ax.axvline(gate["threshold"], color="black", linewidth=1, label="chosen threshold")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("judge-score threshold t")
    ax.set_ylabel("failure rate")
    ax.legend(fontsize=7, loc="upper left", framealpha=0.9)
    ax.set_title("Calibrated gate (calibration split)")
    return _encode(plt, fig)
