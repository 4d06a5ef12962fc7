"""Bradley-Terry on the tables that once broke it: lopsided, separated, sparse, tiny.

Every case converges or reports: the fit returns finite ratings for every model with battles,
a bootstrap refit that yields no rating is counted in ``n_failed_bootstrap`` and never raised,
and where the maximum-likelihood estimate exists the ratings equal sklearn's within 1e-3 Elo.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from arenaforge.stages.arena import ratings
from arenaforge.stages.arena.ratings import bradley_terry

from tests.stages.arena.test_ratings import _sklearn_bt


def pass_fail_battles(n: int, pass_rates, seed: int) -> pd.DataFrame:
    """Random distinct pairs; each answer passes with its model's rate; a battle goes to the
    answer that passed, and is a tie when both or neither pass (how a verified arena looks)."""
    rng = np.random.default_rng(seed)
    rates = np.asarray(pass_rates, float)
    a = rng.integers(0, len(rates), n)
    b = (a + rng.integers(1, len(rates), n)) % len(rates)
    pass_a, pass_b = rng.random(n) < rates[a], rng.random(n) < rates[b]
    winner = np.where(pass_a == pass_b, "tie", np.where(pass_a, "a", "b"))
    return pd.DataFrame({"model_a": [f"m{i}" for i in a], "model_b": [f"m{i}" for i in b],
                         "winner": winner})


def assert_matches_sklearn(df: pd.DataFrame, out: pd.DataFrame, C: float | None = None):
    models = sorted(out["model"])
    ours = out.set_index("model")["rating"].loc[models].to_numpy()
    np.testing.assert_allclose(ours, _sklearn_bt(df, models, C=C), atol=1e-3)


def assert_reports(out: pd.DataFrame, n_bootstrap: int):
    """Finite ratings; one failure count per table; intervals either real or NaN together."""
    assert np.isfinite(out["rating"]).all()
    assert out["n_bootstrap"].nunique() == 1 and out["n_bootstrap"].iloc[0] == n_bootstrap
    assert out["n_failed_bootstrap"].nunique() == 1
    assert 0 <= out["n_failed_bootstrap"].iloc[0] <= n_bootstrap
    assert (out["ci_low"].isna() == out["ci_high"].isna()).all()
    shown = out.dropna(subset=["ci_low"])
    assert (shown["ci_low"] <= shown["ci_high"]).all()


@pytest.mark.parametrize("n, pass_rates", [
    (4_000, (0.9, 0.7, 0.5)),
    (40_000, (0.9, 0.7, 0.5)),
    (4_000, (0.9, 0.7, 0.5, 0.02)),  # once raised "did not converge"
])
def test_lopsided_arena_converges_with_intervals(n, pass_rates):
    df = pass_fail_battles(n, pass_rates, seed=0)
    out = bradley_terry(df, n_bootstrap=100, seed=0)
    assert_reports(out, 100)
    assert list(out["model"]) == [f"m{i}" for i in range(len(pass_rates))]  # by pass rate
    assert (out["n_failed_bootstrap"] == 0).all()
    assert (out["ci_low"] < out["rating"]).all() and (out["rating"] < out["ci_high"]).all()
    assert_matches_sklearn(df, out)  # the MLE exists: ties give every model points both ways
    unpenalised = bradley_terry(df, n_bootstrap=0, l2=0.0)
    assert_matches_sklearn(df, unpenalised)


def test_perfectly_separated_ratings_are_ridge_held_and_reported(caplog):
    # a total order: m0 beats everyone, m1 beats m2, in both seats; no finite MLE
    df = pd.DataFrame({"model_a": ["m0", "m0", "m1", "m1", "m2", "m2"] * 10,
                       "model_b": ["m1", "m2", "m2", "m0", "m0", "m1"] * 10,
                       "winner": ["a", "a", "a", "b", "b", "b"] * 10})
    out = bradley_terry(df, n_bootstrap=50)
    assert "never loses or never wins" in caplog.text
    assert_reports(out, 50)
    assert list(out["model"]) == ["m0", "m1", "m2"]
    assert (out["n_failed_bootstrap"] == 50).all() and out["ci_low"].isna().all()
    # the ridge objective is sklearn's C = 1 / l2 (at a ridge sklearn's solver can finish)
    assert_matches_sklearn(df, bradley_terry(df, n_bootstrap=0, l2=0.5), C=2.0)
    with pytest.raises(ValueError, match="no finite maximum-likelihood"):
        bradley_terry(df, n_bootstrap=0, l2=0.0)


def test_model_without_wins():
    df = pass_fail_battles(600, (0.9, 0.7, 0.5), seed=1)
    loser = (df["model_a"] == "m2") | (df["model_b"] == "m2")
    # m2 loses every battle it is in: no wins and no ties
    never = df.assign(winner=np.where(loser, np.where(df["model_a"] == "m2", "b", "a"),
                                      df["winner"]))
    out = bradley_terry(never, n_bootstrap=40)
    assert_reports(out, 40)
    assert out["model"].iloc[-1] == "m2" and out["ci_low"].isna().all()
    assert (out["n_failed_bootstrap"] == 40).all()
    # no wins but some ties: ties are half wins, so the MLE exists and the intervals are real
    tied = never.copy()
    tied.loc[np.flatnonzero(loser)[:5], "winner"] = "tie"
    out = bradley_terry(tied, n_bootstrap=40)
    assert_reports(out, 40)
    assert out.set_index("model").loc["m2", "wins"] == 0
    assert_matches_sklearn(tied, bradley_terry(tied, n_bootstrap=0, l2=0.0))


def test_registered_model_that_never_battled():
    df = pass_fail_battles(400, (0.9, 0.7, 0.5), seed=2)
    plain = bradley_terry(df, n_bootstrap=30, seed=1)
    out = bradley_terry(df, n_bootstrap=30, seed=1, models=["m0", "m1", "m2", "ghost"])
    ghost = out.set_index("model").loc["ghost"]
    assert out["model"].iloc[-1] == "ghost"  # unrated last
    assert ghost[["rating", "ci_low", "ci_high", "win_rate"]].isna().all()
    assert ghost["battles"] == ghost["wins"] == ghost["losses"] == 0
    # the ghost changes nothing for the others, and it is not a failed refit
    pd.testing.assert_frame_equal(out.iloc[:3], plain)
    assert (out["n_failed_bootstrap"] == 0).all()
    with pytest.raises(ValueError, match="anchor model 'ghost' has no battles"):
        bradley_terry(df, models=["ghost"], anchor="ghost")


def test_unpenalised_refits_without_an_mle_are_counted_not_raised():
    # m1 won 1 of 20: a third of the resamples lose that win and have no finite MLE
    df = pd.DataFrame({"model_a": ["m0"] * 20, "model_b": ["m1"] * 20,
                       "winner": ["a"] * 19 + ["b"]})
    out = bradley_terry(df, n_bootstrap=200, l2=0.0)
    assert_reports(out, 200)
    failed = out["n_failed_bootstrap"].iloc[0]
    assert 40 < failed < 110  # expected 200 * (19/20) ** 20 = 72
    assert out["ci_low"].isna().all()  # more than the 2.5% tail missing: no interval


def test_tiny_table_interval_is_nan_not_a_number():
    # six battles among three models: many resamples drop a pair and with it a model
    df = pd.DataFrame({"model_a": ["x", "x", "y", "y", "x", "z"],
                       "model_b": ["y", "z", "z", "x", "z", "y"],
                       "winner": ["a", "tie", "tie", "tie", "b", "tie"]})
    out = bradley_terry(df, n_bootstrap=100)
    assert_reports(out, 100)
    assert out["n_failed_bootstrap"].iloc[0] > 2 and out["ci_low"].isna().all()


def test_solver_failures_in_refits_are_counted(monkeypatch):
    real = ratings._fit_pairs
    calls = []

    def flaky(*args, **kwargs):  # the main fit succeeds, then every second refit fails
        calls.append(1)
        if len(calls) > 1 and len(calls) % 2:
            raise ratings.ConvergenceError("forced")
        return real(*args, **kwargs)

    monkeypatch.setattr(ratings, "_fit_pairs", flaky)
    df = pass_fail_battles(500, (0.9, 0.7, 0.5), seed=3)
    out = bradley_terry(df, n_bootstrap=20)
    assert (out["n_failed_bootstrap"] == 10).all() and out["ci_low"].isna().all()
    assert np.isfinite(out["rating"]).all()


def test_interval_uses_the_refits_that_succeed():
    # one failed refit of 200 is within the 2.5% tail: the interval stays, from 199 refits
    df = pass_fail_battles(500, (0.9, 0.7, 0.5), seed=4)
    boot, failed = ratings._bootstrap(*ratings._pair_design(df, ["m0", "m1", "m2"]), 1e-6,
                                      np.zeros(3), 200, 0)
    assert failed == 0
    boot[0] = np.nan
    low, high = ratings._percentile_interval(ratings._to_elo(boot, None), (2.5, 97.5))
    expect = np.percentile(ratings._to_elo(boot[1:], None), [2.5, 97.5], axis=0)
    np.testing.assert_allclose([low, high], expect)
    boot[1:6] = np.nan  # 6 of 200 missing: more than the tail
    assert np.isnan(ratings._percentile_interval(ratings._to_elo(boot, None), (2.5, 97.5))).all()


@pytest.mark.parametrize("seed", range(30))
def test_random_tables_converge_or_report(seed):
    """Small random arenas of every shape a run can produce: never an exception."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 7))
    skill = rng.normal(0, 3, k)  # often lopsided enough to separate
    n = int(rng.integers(1, 80))
    a = rng.integers(0, k, n)
    b = (a + rng.integers(1, k, n)) % k
    p = 1 / (1 + np.exp(skill[b] - skill[a]))
    u = rng.random(n)
    winner = np.where(u < 0.15, "tie", np.where(rng.random(n) < p, "a", "b"))
    df = pd.DataFrame({"model_a": [f"m{i}" for i in a], "model_b": [f"m{i}" for i in b],
                       "winner": winner})
    out = bradley_terry(df, n_bootstrap=20, seed=seed)
    assert_reports(out, 20)
    pairs, counts = ratings._pair_design(df, sorted(out["model"]))
    weak, strong = ratings._graph_parts(pairs, *ratings._points(counts), len(out))
    if weak == strong == 1:  # connected with a finite MLE: the unpenalised fit is sklearn's
        assert_matches_sklearn(df, bradley_terry(df, n_bootstrap=0, l2=0.0))
