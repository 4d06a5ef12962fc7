"""Model ratings from pairwise battles: sequential Elo, Bradley-Terry, per-instruction scores.

Battles are a ``pandas.DataFrame`` or ``pyarrow.Table`` with columns ``model_a``, ``model_b``
and ``winner`` (``"a"``, ``"b"`` or ``"tie"``); a tie counts as half a win for each side.

* ``sequential_elo`` replays the battles in order with K = 40 from 0, as in WarriorCoder, but
  updates both sides from the ratings *before* the battle (the release updated B with A's
  already-updated rating; ``simultaneous=False`` reproduces that for comparison). Either way the
  result depends on the order of the battles.
* ``bradley_terry`` is order-free: the maximum-likelihood Bradley-Terry fit (a logistic
  regression without intercept on +-1 design rows) on the Elo scale, with percentile-bootstrap
  95% intervals. It converges on any table (damped Newton on the per-battle objective); a
  bootstrap refit that yields no rating is counted (``n_failed_bootstrap``), never raised.
* ``score_instructions`` turns ratings and one instruction's battles into the paper's
  ``final_score = alpha * elo_expectation + (1 - alpha) * local_share`` and picks a winner.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa

log = logging.getLogger(__name__)

WINNERS = ("a", "b", "tie")
ELO_SCALE = 400.0 / math.log(10.0)  # one unit of BT log-odds in Elo points
ANCHOR_RATING = 1000.0
DEFAULT_L2 = 1e-6  # ridge on the summed log-likelihood: finite ratings for separated tables
RATING_COLUMNS = ("model", "rating", "ci_low", "ci_high", "battles", "wins", "ties", "losses",
                  "win_rate", "n_bootstrap", "n_failed_bootstrap")


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


_POINTS_LO = np.array([0.0, 0.5, 1.0])  # points of pairs[:, 0] in a battle it lost, tied, won
_ROUNDOFF = 1e-14  # slack of the line search's decrease test, relative to the objective


class ConvergenceError(RuntimeError):
    """The Bradley-Terry Newton iteration did not reach its tolerance."""


def _pair_design(df: pd.DataFrame, models: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Unordered pairs (i < j) and, per pair, the battles pairs[:, 0] lost, tied and won.

    Returns:
        ``(pairs, counts)``: int array (P, 2) and int array (P, 3).
    """
    index = {m: n for n, m in enumerate(models)}
    ia = df["model_a"].map(index).to_numpy()
    ib = df["model_b"].map(index).to_numpy()
    s_a = _score_a(df["winner"])
    lo, hi = np.minimum(ia, ib), np.maximum(ia, ib)
    s_lo = np.where(ia < ib, s_a, 1.0 - s_a)
    pairs, pair_of_battle = np.unique(np.stack([lo, hi], axis=1), axis=0, return_inverse=True)
    cell = pair_of_battle.reshape(-1) * 3 + np.rint(2.0 * s_lo).astype(int)
    return pairs, np.bincount(cell, minlength=3 * len(pairs)).reshape(-1, 3)


def _points(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points won by pairs[:, 0] and by pairs[:, 1] from (lost, tied, won) counts."""
    return counts @ _POINTS_LO, counts @ _POINTS_LO[::-1]


def _graph_parts(pairs: np.ndarray, w_lo: np.ndarray, w_hi: np.ndarray,
                 n_models: int) -> tuple[int, int]:
    """Weakly and strongly connected parts of the "scored against" graph (i -> j: i took
    points from j). Models without battles are parts of their own.

    The unpenalised MLE is finite exactly when the two counts agree: within every part of the
    battle graph each group of models both takes and concedes points against the rest
    (Zermelo 1929, Ford 1957). A model that never loses, or one that never wins nor ties,
    breaks that.
    """
    from scipy.sparse import coo_matrix  # scipy stays out of module import (stage listing)
    from scipy.sparse.csgraph import connected_components

    src = np.concatenate([pairs[w_lo > 0, 0], pairs[w_hi > 0, 1]])
    dst = np.concatenate([pairs[w_lo > 0, 1], pairs[w_hi > 0, 0]])
    graph = coo_matrix((np.ones(len(src)), (src, dst)), shape=(n_models, n_models))
    return (connected_components(graph, connection="weak")[0],
            connected_components(graph, connection="strong")[0])


def _fit_pairs(pairs: np.ndarray, w_lo: np.ndarray, w_hi: np.ndarray, n_models: int,
               l2: float, x0: np.ndarray | None = None, max_iter: int = 500,
               xtol: float = 1e-10) -> np.ndarray:
    """BT log-strengths from aggregated pair outcomes (``w_lo``: points won by pairs[:, 0]).

    Minimises ``(-sum[w_lo log s(b_i - b_j) + w_hi log s(b_j - b_i)] + l2/2 |b|^2) / N``
    (N: the number of battles), the same minimiser as sklearn's
    ``LogisticRegression(fit_intercept=False, C=1/l2)`` on one +-1 row per battle (ties
    duplicated with weight 0.5). Hand-written on pair counts because a bootstrap refits
    hundreds of times and the pair table has K(K-1)/2 rows instead of one row per battle.

    The solver is Newton's method with a backtracking line search. The problem is convex with
    a K x K Hessian (K models, a handful), so Newton reaches machine precision in a few steps
    from any start. Dividing by N keeps every tolerance independent of the table's size: the
    summed objective of 40k lopsided battles is large enough that scipy's trust-exact with an
    absolute gtol stalled on rounding. A common shift of all strengths leaves the likelihood
    unchanged, so the iterate is held at mean zero, where the ridge optimum lies anyway, and
    the Newton system is solved on that subspace (nonsingular without a ridge too). When one
    model never loses the MLE is infinite; the ridge then holds it finite and Newton walks
    there in steps of about one logit. Stops when the Newton step is below ``xtol`` logits or
    the predicted decrease is below rounding.

    Returns:
        Strengths, mean zero over the models with battles; NaN for models without any.

    Raises:
        ConvergenceError: no convergence within ``max_iter`` steps, or a stalled line search.
    """
    total = w_lo + w_hi
    weight = np.bincount(pairs[:, 0], total, n_models) + np.bincount(pairs[:, 1], total, n_models)
    present = weight > 0
    beta_out = np.full(n_models, np.nan)
    k = int(present.sum())
    if k == 0:
        return beta_out
    n_total = total.sum()
    remap = np.cumsum(present) - 1
    used = total > 0
    i, j = remap[pairs[used, 0]], remap[pairs[used, 1]]
    w_lo, w_hi, total = w_lo[used] / n_total, w_hi[used] / n_total, total[used] / n_total
    lam = l2 / n_total
    flat = [i * k + i, j * k + j, i * k + j, j * k + i]
    gauge = np.full((k, k), 1.0 / k)  # adds the shift direction the likelihood cannot see

    def value(b):
        d = b[i] - b[j]
        # -log s(d) = logaddexp(0, -d); stable for large |d|
        nll = np.sum(w_lo * np.logaddexp(0.0, -d) + w_hi * np.logaddexp(0.0, d))
        return nll + 0.5 * lam * b @ b

    beta = np.zeros(k) if x0 is None else np.nan_to_num(np.asarray(x0, float)[present])
    beta = beta - beta.mean()
    f = value(beta)
    for _ in range(max_iter):
        p = 0.5 * (1.0 + np.tanh(0.5 * (beta[i] - beta[j])))  # P(i beats j)
        g_d = total * p - w_lo
        grad = np.bincount(i, g_d, k) - np.bincount(j, g_d, k) + lam * beta
        c = total * p * (1.0 - p)
        hess = sum(np.bincount(idx, sign * c, k * k)
                   for idx, sign in zip(flat, (1.0, 1.0, -1.0, -1.0))).reshape(k, k)
        step = np.linalg.lstsq(hess + lam * np.eye(k) + gauge, grad.mean() - grad,
                               rcond=None)[0]
        decrease = -(grad @ step)  # the Newton decrement squared
        if np.max(np.abs(step)) <= xtol or decrease <= 1e-20:
            beta_out[present] = beta + step
            return beta_out
        t = 1.0
        while True:
            trial = beta + t * step
            f_trial = value(trial)
            if f_trial <= f - 0.25 * t * decrease + _ROUNDOFF * (1.0 + abs(f)):
                break
            t *= 0.5
            if t < 1e-12:
                raise ConvergenceError("Bradley-Terry line search stalled "
                                       f"(predicted decrease {decrease:.3g})")
        beta, f = trial, f_trial
    raise ConvergenceError(f"Bradley-Terry fit: no convergence in {max_iter} Newton steps")


def _to_elo(beta: np.ndarray, anchor_index: int | None) -> np.ndarray:
    """Elo scale, anchored at 1000 on the mean of the rated models or on one model (axis -1 =
    models; NaN strengths stay NaN and are left out of the mean)."""
    if anchor_index is None:
        rated = np.isfinite(beta)
        ref = (np.where(rated, beta, 0.0).sum(axis=-1, keepdims=True)
               / np.maximum(rated.sum(axis=-1, keepdims=True), 1))
    else:
        ref = beta[..., [anchor_index]]
    return ELO_SCALE * (beta - ref) + ANCHOR_RATING


def _bootstrap(pairs: np.ndarray, counts: np.ndarray, l2: float, beta: np.ndarray,
               n_bootstrap: int, seed: int) -> tuple[np.ndarray, int]:
    """Refits on ``n_bootstrap`` resamples of the battles; rows of NaN for the failed ones.

    Resampling battles with replacement is drawing the (pair, outcome) cell counts from a
    multinomial with the observed shares, so each resample costs O(cells), not O(battles).
    A refit fails, and is counted, when its resample splits the battle graph (drops a model or
    cuts it in two), has no finite MLE (a model that stopped losing: its rating would be the
    ridge's, not the data's) or the solver does not converge.

    Returns:
        ``(strengths, n_failed)``: array (n_bootstrap, K) and the count of failed refits.
    """
    rng = np.random.default_rng(seed)
    n = int(counts.sum())
    draws = rng.multinomial(n, counts.ravel() / n, size=n_bootstrap).reshape(-1, *counts.shape)
    n_parts = _graph_parts(pairs, *_points(counts), len(beta))[0]
    boot = np.full((n_bootstrap, len(beta)), np.nan)
    failed = 0
    for r, cells in enumerate(draws):
        w_lo, w_hi = _points(cells)
        weak, strong = _graph_parts(pairs, w_lo, w_hi, len(beta))
        if weak != n_parts or strong != weak:
            failed += 1
            continue
        try:
            boot[r] = _fit_pairs(pairs, w_lo, w_hi, len(beta), l2, x0=beta)  # warm start
        except (ConvergenceError, np.linalg.LinAlgError) as err:
            log.warning("bradley_terry: bootstrap refit %d failed: %s", r, err)
            failed += 1
    return boot, failed


def _percentile_interval(elo: np.ndarray, ci: tuple[float, float]) -> tuple[np.ndarray, ...]:
    """Per model ``ci`` percentiles of the refits that gave a rating, or NaN when fewer remain
    than the interval's narrower tail can lose (more than 2.5% of refits missing for a 95%
    interval: the missing refits may be exactly that tail)."""
    n_boot = len(elo)
    tail = min(ci[0], 100.0 - ci[1]) / 100.0
    needed = max(2, math.ceil(n_boot * (1.0 - tail) - 1e-9))
    enough = np.isfinite(elo).sum(axis=0) >= needed
    low, high = np.full(elo.shape[1], np.nan), np.full(elo.shape[1], np.nan)
    if enough.any():
        low[enough], high[enough] = np.nanpercentile(elo[:, enough], ci, axis=0)
    return low, high


def bradley_terry(battles: pd.DataFrame | pa.Table, n_bootstrap: int = 200, seed: int = 0,
                  anchor: str | None = None, l2: float = DEFAULT_L2,
                  ci: tuple[float, float] = (2.5, 97.5),
                  models: Sequence[str] = ()) -> pd.DataFrame:
    """Maximum-likelihood Bradley-Terry ratings on the Elo scale with bootstrap intervals.

    P(A beats B) = 1 / (1 + 10 ** ((R_B - R_A) / 400)), with ``R = 400 * beta / ln 10`` shifted
    so that the anchor sits at 1000. Ties count as half a win for each side. A tiny L2 penalty
    (``l2``, default 1e-6, on the summed log-likelihood) keeps the fit finite when a model wins
    or loses every battle (the unpenalised MLE is then infinite; a warning says so and the
    gaps to that model then only mean "ahead"); it is negligible otherwise. With ``l2=0`` such
    a table raises ``ValueError``.

    Anchoring: ``anchor=None`` puts the *mean* rating at 1000; ``anchor="model-id"`` fixes
    that model at exactly 1000 (its interval then has zero width and the others' intervals
    are relative to it).

    Intervals: ``n_bootstrap`` resamples of the battles with replacement (seeded), a refit on
    each (warm-started from the fit), and the ``ci`` percentiles (2.5 / 97.5) of each model's
    rating over the refits that succeeded. A refit fails when its resample drops a model,
    splits the battle graph or has no finite MLE, or when the solver does not converge; the
    count is the ``n_failed_bootstrap`` column. When more refits fail than the interval's tail
    (2.5% for a 95% interval), the interval is NaN: its ends cannot be located. With
    ``n_bootstrap=0`` the interval columns are NaN.

    Models in different connected components of the battle graph have no common scale; that
    is logged as a warning and their relative ratings are meaningless. ``models`` lists models
    to report even without battles (rating and interval NaN, zero battles).

    >>> battles = pd.DataFrame({"model_a": ["x", "x", "x"], "model_b": ["y", "y", "y"],
    ...                         "winner": ["a", "a", "b"]})
    >>> bradley_terry(battles, n_bootstrap=0)["rating"].round(1).tolist()  # 400 log10(2) apart
    [1060.2, 939.8]

    Returns:
        DataFrame ``model, rating, ci_low, ci_high, battles, wins, ties, losses, win_rate,
        n_bootstrap, n_failed_bootstrap`` sorted by rating (highest first, unrated last).
    """
    df = battle_frame(battles)
    battled = set(df["model_a"]) | set(df["model_b"])
    names = sorted(battled | set(models))
    if not names:  # no battles at all: nothing to rate, whatever the anchor
        return pd.DataFrame({c: pd.Series(dtype=object if c == "model" else float)
                             for c in RATING_COLUMNS})
    if anchor is not None and anchor not in battled:
        raise ValueError(f"bradley_terry: anchor model {anchor!r} has no battles "
                         f"(models: {sorted(battled)})")
    anchor_index = None if anchor is None else names.index(anchor)
    pairs, counts = _pair_design(df, names)
    w_lo, w_hi = _points(counts)
    weak, strong = _graph_parts(pairs, w_lo, w_hi, len(names))
    unbattled = len(names) - len(battled)
    if weak - unbattled > 1:
        log.warning("bradley_terry: battle graph has %d disconnected components; ratings "
                    "across components are not comparable", weak - unbattled)
    if strong != weak:
        if l2 <= 0:
            raise ValueError("bradley_terry: no finite maximum-likelihood ratings (a model, or "
                             "a group of models, never loses or never wins); use l2 > 0")
        log.warning("bradley_terry: a model or group never loses or never wins; its rating "
                    "is held finite by the ridge (l2=%g) and its gap means only 'ahead'", l2)
    beta = _fit_pairs(pairs, w_lo, w_hi, len(names), l2)
    ci_low = ci_high = np.full(len(names), np.nan)
    n_failed = 0
    if n_bootstrap > 0 and len(df):
        boot, n_failed = _bootstrap(pairs, counts, l2, beta, n_bootstrap, seed)
        ci_low, ci_high = _percentile_interval(_to_elo(boot, anchor_index), ci)
        if n_failed:
            log.warning("bradley_terry: %d of %d bootstrap refits failed", n_failed, n_bootstrap)
    out = pd.DataFrame({"model": names, "rating": _to_elo(beta, anchor_index), "ci_low": ci_low,
                        "ci_high": ci_high}).set_index("model")
    tally = battle_counts(df).reindex(names)
    tally[["battles", "wins", "ties", "losses"]] = (
        tally[["battles", "wins", "ties", "losses"]].fillna(0).astype(int))
    out = out.join(tally).assign(n_bootstrap=int(n_bootstrap), n_failed_bootstrap=int(n_failed))
    out = out.rename_axis("model").reset_index()
    return out.sort_values(["rating", "model"], ascending=[False, True], ignore_index=True)


SCORE_RULES = ("local", "elo", "bt_blend")
ScoreRule = Literal["local", "elo", "bt_blend"]


def score_instructions(battles: pd.DataFrame | pa.Table, ratings: Mapping[str, float],
                       alpha: float = 0.7, rule: ScoreRule = "bt_blend") -> pd.DataFrame:
    """Per (instruction, contestant): local vote share, Elo expectation, final score, winner.

    For each instruction the contestants are the models in its battles (all judges pooled).

    * ``local_share``: (wins + 0.5 ties) / battles of the model on that instruction.
    * ``elo_expectation``: mean of ``elo_expectation(r_model, r_other)`` over the other
      contestants of the instruction, using ``ratings`` (the models' global strength).
    * ``final_score``, by ``rule`` (the one place the rating rules are defined):
      ``local`` = ``local_share`` (this instruction's battles alone); ``elo`` =
      ``elo_expectation`` (the models' global ratings alone); ``bt_blend`` = ``alpha *
      elo_expectation + (1 - alpha) * local_share`` (WarriorCoder's rule, alpha 0.7 there).
    * ``winner``: argmax of final_score; exact ties are broken by higher local_share, then
      higher rating, then the smaller model id, so the choice is deterministic.
    * ``margin``: best final_score minus the second best.
    * ``decided_by``: ``local`` when the local votes alone pick the same winner (a strict
      best ``local_share``), ``global`` when the global term picked it (the local votes
      prefer another model, or tie and the ratings separate them), ``tie`` when nothing
      separated the contestants and the tie-break chose.

    Args:
        battles: battles with an ``instruction_id`` column.
        ratings: model id -> rating (Elo scale); every contestant must have one.
        alpha: weight of the global Elo expectation in ``bt_blend``.
        rule: ``local``, ``elo`` or ``bt_blend``.

    Returns:
        DataFrame ``instruction_id, model, battles, local_share, elo_expectation,
        final_score, winner, margin, decided_by``.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if rule not in SCORE_RULES:
        raise ValueError(f"unknown rating rule {rule!r}; known: {SCORE_RULES}")
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
    weight = {"local": 0.0, "elo": 1.0, "bt_blend": alpha}[rule]
    per["final_score"] = weight * per["elo_expectation"] + (1.0 - weight) * per["local_share"]
    ranked = per.sort_values(["instruction_id", "final_score", "local_share", "rating", "model"],
                             ascending=[True, False, False, False, True])
    top = ranked.groupby("instruction_id", sort=False)
    best = top.nth(0).set_index("instruction_id")
    second = top.nth(1).set_index("instruction_id")["final_score"]
    per["winner"] = per["instruction_id"].map(best["model"])
    per["margin"] = per["instruction_id"].map(best["final_score"] - second)
    per["decided_by"] = per["instruction_id"].map(_decided_by(per, best["model"]))
    cols = ["instruction_id", "model", "battles", "local_share", "elo_expectation",
            "final_score", "winner", "margin", "decided_by"]
    return per[cols].reset_index(drop=True)


def _decided_by(per: pd.DataFrame, winners: pd.Series) -> dict[str, str]:
    """Per instruction: whether the local votes, the global term or the tie-break chose."""
    out = {}
    for iid, group in per.groupby("instruction_id", sort=False):
        shares = group.set_index("model")["local_share"]
        top = shares[shares == shares.max()]
        if len(top) == 1:
            out[iid] = "local" if top.index[0] == winners[iid] else "global"
        else:
            scores = group["final_score"]
            out[iid] = "global" if (scores == scores.max()).sum() == 1 else "tie"
    return out
