"""Model ratings from pairwise battles: sequential Elo, Bradley-Terry, per-instruction scores.

Battles are a ``pandas.DataFrame`` or ``pyarrow.Table`` with columns ``model_a``, ``model_b``
and ``winner`` (``"a"``, ``"b"`` or ``"tie"``); a tie counts as half a win for each side.

* ``sequential_elo`` replays the battles in order with K = 40 from 0, as in WarriorCoder, but
  updates both sides from the ratings *before* the battle (the release updated B with A's
  already-updated rating; ``simultaneous=False`` reproduces that for comparison). Either way the
  result depends on the order of the battles.
* ``bradley_terry`` is order-free: the maximum-likelihood Bradley-Terry fit (a logistic
  regression without intercept on +-1 design rows) on the Elo scale, with percentile-bootstrap
  95% intervals.
* ``score_instructions`` turns ratings and one instruction's battles into the paper's
  ``final_score = alpha * elo_expectation + (1 - alpha) * local_share`` and picks a winner.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

log = logging.getLogger(__name__)

WINNERS = ("a", "b", "tie")
ELO_SCALE = 400.0 / math.log(10.0)  # one unit of BT log-odds in Elo points
ANCHOR_RATING = 1000.0
RATING_COLUMNS = ("model", "rating", "ci_low", "ci_high", "battles", "wins", "ties", "losses",
                  "win_rate")


def first_bad(df: pd.DataFrame, bad, column: str) -> tuple[int, object]:
    """Position and plain Python value of the first flagged row, for error messages."""
    row = int(np.flatnonzero(np.asarray(bad))[0])
    return row, df[column].iloc[[row]].tolist()[0]


def battle_frame(battles: pd.DataFrame | pa.Table, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """Validate battles and return them as a fresh DataFrame with a 0..n-1 index.

    Args:
        battles: DataFrame or Table with ``model_a``, ``model_b``, ``winner`` (+ ``extra``).
        extra: further columns that must be present.

    Raises:
        ValueError: naming the missing column or the first bad row.
    """
    df = battles.to_pandas() if isinstance(battles, pa.Table) else pd.DataFrame(battles)
    for col in ("model_a", "model_b", "winner", *extra):
        if col not in df.columns:
            raise ValueError(f"battles: missing column {col!r} (have {list(df.columns)})")
    df = df.reset_index(drop=True)
    for col in ("model_a", "model_b"):
        bad = df[col].isna() | (df[col].astype(str) == "")
        if bad.any():
            raise ValueError(f"battles row {first_bad(df, bad, col)[0]}: {col} is empty")
    bad = ~df["winner"].isin(WINNERS)
    if bad.any():
        row, value = first_bad(df, bad, "winner")
        raise ValueError(f"battles row {row}: winner {value!r} not in {WINNERS}")
    same = df["model_a"] == df["model_b"]
    if same.any():
        row, value = first_bad(df, same, "model_a")
        raise ValueError(f"battles row {row}: model_a == model_b == {value!r}")
    return df


def _score_a(winner: pd.Series) -> np.ndarray:
    """A's score per battle: 1 win, 0 loss, 0.5 tie."""
    return winner.map({"a": 1.0, "b": 0.0, "tie": 0.5}).to_numpy(dtype=float)


def battle_counts(df: pd.DataFrame) -> pd.DataFrame:
    """Per model: ``battles, wins, ties, losses, win_rate`` (ties count half in win_rate)."""
    sides = pd.concat([
        pd.DataFrame({"model": df["model_a"], "win": df["winner"] == "a",
                      "tie": df["winner"] == "tie", "loss": df["winner"] == "b"}),
        pd.DataFrame({"model": df["model_b"], "win": df["winner"] == "b",
                      "tie": df["winner"] == "tie", "loss": df["winner"] == "a"}),
    ])
    out = sides.groupby("model").agg(battles=("win", "size"), wins=("win", "sum"),
                                     ties=("tie", "sum"), losses=("loss", "sum"))
    out = out.astype(int)
    out["win_rate"] = (out["wins"] + 0.5 * out["ties"]) / out["battles"]
    return out


def elo_expectation(r_a, r_b):
    """Expected score of A against B under Elo: ``1 / (1 + 10 ** ((r_b - r_a) / 400))``.

    >>> round(float(elo_expectation(1400, 1000)), 4)
    0.9091

    Works elementwise on numpy arrays.
    """
    return 1.0 / (1.0 + np.power(10.0, (np.asarray(r_b, float) - np.asarray(r_a, float)) / 400.0))


def sequential_elo(battles: pd.DataFrame | pa.Table, k: float = 40.0, initial: float = 0.0,
                   simultaneous: bool = True) -> pd.DataFrame:
    """Online Elo over the battles in the given order (WarriorCoder's rating).

    Each battle moves A by ``k * (s_a - E_a)`` and B by ``k * (s_b - E_b)``. With
    ``simultaneous=True`` both expectations use the ratings before the battle, so the update
    is zero-sum. ``simultaneous=False`` reproduces the WarriorCoder release, which computed B's
    expectation against A's already-updated rating.

    The result depends on battle order: A beats B then B beats A leaves B at +2.29 and A at
    -2.29 (k = 40); the reverse order leaves A at +2.29: the last winner is ahead. Use
    ``bradley_terry`` for an order-free rating.

    Example (k = 40, from 0): A beats B gives A = 20, B = -20; then A ties C:
    E_A = 1 / (1 + 10 ** (-20 / 400)) = 0.52875, so A = 20 + 40 * (0.5 - 0.52875) = 18.850
    and C = 1.150.

    Returns:
        DataFrame ``model, rating, battles, wins, ties, losses, win_rate`` sorted by rating.
    """
    df = battle_frame(battles)
    ratings: dict[str, float] = {}
    score_a = _score_a(df["winner"])
    for a, b, s in zip(df["model_a"].to_numpy(), df["model_b"].to_numpy(), score_a):
        ra, rb = ratings.get(a, initial), ratings.get(b, initial)
        new_a = ra + k * (s - elo_expectation(ra, rb))
        rb_ref = ra if simultaneous else new_a
        ratings[b] = rb + k * ((1.0 - s) - elo_expectation(rb, rb_ref))
        ratings[a] = float(new_a)
    out = battle_counts(df)
    out.insert(0, "rating", pd.Series(ratings, dtype=float))
    return (out.rename_axis("model").reset_index()
            .sort_values(["rating", "model"], ascending=[False, True], ignore_index=True))


def _pair_design(df: pd.DataFrame, models: list[str]):
    """Map battles to unordered pairs (i < j) and the score of i in each battle."""
    index = {m: n for n, m in enumerate(models)}
    ia = df["model_a"].map(index).to_numpy()
    ib = df["model_b"].map(index).to_numpy()
    s_a = _score_a(df["winner"])
    lo, hi = np.minimum(ia, ib), np.maximum(ia, ib)
    s_lo = np.where(ia < ib, s_a, 1.0 - s_a)
    pairs, pair_of_battle = np.unique(np.stack([lo, hi], axis=1), axis=0, return_inverse=True)
    return pairs, pair_of_battle.reshape(-1), s_lo


def _fit_pairs(pairs: np.ndarray, w_lo: np.ndarray, w_hi: np.ndarray, n_models: int,
               l2: float, x0: np.ndarray | None = None) -> np.ndarray:
    """BT log-strengths from aggregated pair outcomes (``w_lo``: points won by pairs[:, 0]).

    Minimises ``-sum[w_lo log s(b_i - b_j) + w_hi log s(b_j - b_i)] + l2/2 |b|^2``, the same
    objective as sklearn's ``LogisticRegression(fit_intercept=False, C=1/l2)`` on one +-1 row
    per battle (ties duplicated with weight 0.5). Hand-written on pair counts because a
    bootstrap refits hundreds of times and the pair table has K(K-1)/2 rows instead of one
    row per battle.
    """
    from scipy import optimize  # scipy imports stay out of module import (stage listing)

    i, j = pairs[:, 0], pairs[:, 1]
    total = w_lo + w_hi
    flat = [i * n_models + i, j * n_models + j, i * n_models + j, j * n_models + i]

    def objective(beta):
        d = beta[i] - beta[j]
        # -log s(d) = logaddexp(0, -d); stable for large |d|
        nll = np.sum(w_lo * np.logaddexp(0.0, -d) + w_hi * np.logaddexp(0.0, d))
        g_d = total * (0.5 * (1.0 + np.tanh(0.5 * d))) - w_lo  # d nll / d d
        grad = np.bincount(i, g_d, n_models) - np.bincount(j, g_d, n_models)
        return nll + 0.5 * l2 * beta @ beta, grad + l2 * beta

    def hessian(beta):
        p = 0.5 * (1.0 + np.tanh(0.5 * (beta[i] - beta[j])))
        c = total * p * (1.0 - p)
        h = sum(np.bincount(f, sign * c, n_models * n_models)
                for f, sign in zip(flat, (1.0, 1.0, -1.0, -1.0)))
        return h.reshape(n_models, n_models) + l2 * np.eye(n_models)

    # trust-exact (Newton with a trust region) converges in a handful of steps here and,
    # unlike plain Newton, copes with the singular Hessian of the unpenalised problem
    start = np.zeros(n_models) if x0 is None else x0
    res = optimize.minimize(objective, start, jac=True, hess=hessian, method="trust-exact",
                            options={"gtol": 1e-8, "maxiter": 1000})
    if not res.success and np.max(np.abs(res.jac)) > 1e-5:
        raise RuntimeError(f"Bradley-Terry fit did not converge: {res.message}")
    return res.x


def _to_elo(beta: np.ndarray, anchor_index: int | None) -> np.ndarray:
    """Elo scale, anchored at 1000 either on the mean or on one model (axis -1 = models)."""
    ref = beta.mean(axis=-1, keepdims=True) if anchor_index is None else beta[..., [anchor_index]]
    return ELO_SCALE * (beta - ref) + ANCHOR_RATING


def bradley_terry(battles: pd.DataFrame | pa.Table, n_bootstrap: int = 200, seed: int = 0,
                  anchor: str | None = None, l2: float = 1e-6,
                  ci: tuple[float, float] = (2.5, 97.5)) -> pd.DataFrame:
    """Maximum-likelihood Bradley-Terry ratings on the Elo scale with bootstrap intervals.

    P(A beats B) = 1 / (1 + 10 ** ((R_B - R_A) / 400)), with ``R = 400 * beta / ln 10`` shifted
    so that the anchor sits at 1000. Ties count as half a win for each side. A tiny L2 penalty
    (``l2``, default 1e-6) keeps the fit finite when a model wins or loses every battle (the
    unpenalised MLE is then infinite); it is negligible otherwise.

    Anchoring: ``anchor=None`` puts the *mean* rating at 1000; ``anchor="model-id"`` fixes
    that model at exactly 1000 (its interval then has zero width and the others' intervals
    are relative to it).

    Intervals: ``n_bootstrap`` resamples of the battles with replacement (seeded), a refit on
    each, and the ``ci`` percentiles (2.5 / 97.5) of each model's rating. With
    ``n_bootstrap=0`` the interval columns are NaN.

    Models in different connected components of the battle graph have no common scale; that
    is logged as a warning and their relative ratings are meaningless.

    Returns:
        DataFrame ``model, rating, ci_low, ci_high, battles, wins, ties, losses, win_rate``
        sorted by rating (highest first).
    """
    df = battle_frame(battles)
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "model" else float)
                             for c in RATING_COLUMNS})
    models = sorted(set(df["model_a"]) | set(df["model_b"]))
    if anchor is not None and anchor not in models:
        raise ValueError(f"bradley_terry: anchor model {anchor!r} has no battles "
                         f"(models: {models})")
    anchor_index = None if anchor is None else models.index(anchor)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    pairs, pair_of_battle, s_lo = _pair_design(df, models)
    n_components, _ = connected_components(
        coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])),
                   shape=(len(models), len(models))), directed=False)
    if n_components > 1:
        log.warning("bradley_terry: battle graph has %d disconnected components; ratings "
                    "across components are not comparable", n_components)

    def fit(weights: np.ndarray | None, x0=None) -> np.ndarray:
        w = np.ones(len(df)) if weights is None else weights
        w_lo = np.bincount(pair_of_battle, w * s_lo, len(pairs))
        w_hi = np.bincount(pair_of_battle, w * (1.0 - s_lo), len(pairs))
        return _fit_pairs(pairs, w_lo, w_hi, len(models), l2, x0)

    beta = fit(None)
    rating = _to_elo(beta, anchor_index)
    ci_low = ci_high = np.full(len(models), np.nan)
    if n_bootstrap > 0:
        rng = np.random.default_rng(seed)
        boot = np.empty((n_bootstrap, len(models)))
        for r in range(n_bootstrap):
            counts = rng.multinomial(len(df), np.full(len(df), 1.0 / len(df)))
            boot[r] = fit(counts.astype(float), beta)
        ci_low, ci_high = np.percentile(_to_elo(boot, anchor_index), ci, axis=0)
    out = pd.DataFrame({"model": models, "rating": rating, "ci_low": ci_low,
                        "ci_high": ci_high}).set_index("model")
    out = out.join(battle_counts(df)).rename_axis("model").reset_index()
    return out.sort_values(["rating", "model"], ascending=[False, True], ignore_index=True)


def score_instructions(battles: pd.DataFrame | pa.Table, ratings: Mapping[str, float],
                       alpha: float = 0.7) -> pd.DataFrame:
    """Per (instruction, contestant): local vote share, Elo expectation, final score, winner.

    For each instruction the contestants are the models in its battles (all judges pooled).

    * ``local_share``: (wins + 0.5 ties) / battles of the model on that instruction.
    * ``elo_expectation``: mean of ``elo_expectation(r_model, r_other)`` over the other
      contestants of the instruction, using ``ratings``.
    * ``final_score = alpha * elo_expectation + (1 - alpha) * local_share``.
    * ``winner``: argmax of final_score; exact ties are broken by higher local_share, then
      higher rating, then the smaller model id, so the choice is deterministic.
    * ``margin``: best final_score minus the second best.

    Args:
        battles: battles with an ``instruction_id`` column.
        ratings: model id -> rating (Elo scale); every contestant must have one.
        alpha: weight of the global Elo expectation (paper: 0.7).

    Returns:
        DataFrame ``instruction_id, model, battles, local_share, elo_expectation,
        final_score, winner, margin``.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    df = battle_frame(battles, extra=("instruction_id",))
    s_a = _score_a(df["winner"])
    sides = pd.concat([
        pd.DataFrame({"instruction_id": df["instruction_id"], "model": df["model_a"],
                      "points": s_a}),
        pd.DataFrame({"instruction_id": df["instruction_id"], "model": df["model_b"],
                      "points": 1.0 - s_a}),
    ], ignore_index=True)
    per = (sides.groupby(["instruction_id", "model"], sort=True)
           .agg(battles=("points", "size"), points=("points", "sum")).reset_index())
    missing = sorted(set(per["model"]) - set(ratings))
    if missing:
        raise ValueError(f"score_instructions: no rating for models {missing}")
    per["local_share"] = per["points"] / per["battles"]
    per["rating"] = per["model"].map(ratings).astype(float)
    # pair every contestant with every other contestant of the same instruction
    pairs = per[["instruction_id", "model", "rating"]].merge(
        per[["instruction_id", "model", "rating"]], on="instruction_id", suffixes=("", "_o"))
    pairs = pairs[pairs["model"] != pairs["model_o"]]
    pairs = pairs.assign(e=elo_expectation(pairs["rating"].to_numpy(),
                                           pairs["rating_o"].to_numpy()))
    expect = pairs.groupby(["instruction_id", "model"])["e"].mean()
    per = per.join(expect.rename("elo_expectation"), on=["instruction_id", "model"])
    per["final_score"] = alpha * per["elo_expectation"] + (1.0 - alpha) * per["local_share"]
    ranked = per.sort_values(["instruction_id", "final_score", "local_share", "rating", "model"],
                             ascending=[True, False, False, False, True])
    top = ranked.groupby("instruction_id", sort=False)
    best = top.nth(0).set_index("instruction_id")
    second = top.nth(1).set_index("instruction_id")["final_score"]
    per["winner"] = per["instruction_id"].map(best["model"])
    per["margin"] = per["instruction_id"].map(best["final_score"] - second)
    cols = ["instruction_id", "model", "battles", "local_share", "elo_expectation",
            "final_score", "winner", "margin"]
    return per[cols].reset_index(drop=True)
