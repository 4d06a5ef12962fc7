"""Ratings: sequential Elo by hand, Bradley-Terry against sklearn and simulated strengths."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from arenaforge.stages.arena.ratings import (
    bradley_terry,
    elo_expectation,
    score_instructions,
    sequential_elo,
)

TRUE_ELO = {"m0": 1200.0, "m1": 1100.0, "m2": 1000.0, "m3": 900.0, "m4": 800.0}  # mean 1000


def simulate(n: int, seed: int, true=TRUE_ELO, tie_rate: float = 0.0) -> pd.DataFrame:
    """Battles between random distinct pairs, outcomes drawn from the Elo/BT model."""
    rng = np.random.default_rng(seed)
    models = list(true)
    idx = np.array([rng.choice(len(models), 2, replace=False) for _ in range(n)])
    a = [models[i] for i in idx[:, 0]]
    b = [models[i] for i in idx[:, 1]]
    p = elo_expectation([true[m] for m in a], [true[m] for m in b])
    u = rng.random(n)
    winner = np.where(u < p, "a", "b").astype(object)
    winner[rng.random(n) < tie_rate] = "tie"
    return pd.DataFrame({"model_a": a, "model_b": b, "winner": winner})


# ---- validation -------------------------------------------------------------------------

@pytest.mark.parametrize("frame, message", [
    (pd.DataFrame({"model_a": ["x"], "winner": ["a"]}), "missing column 'model_b'"),
    (pd.DataFrame({"model_a": ["x", "x"], "model_b": ["y", "y"], "winner": ["a", "A"]}),
     "row 1: winner 'A'"),
    (pd.DataFrame({"model_a": ["x"], "model_b": ["x"], "winner": ["a"]}), "row 0: model_a =="),
    (pd.DataFrame({"model_a": ["x", None], "model_b": ["y", "y"], "winner": ["a", "b"]}),
     "row 1: model_a is empty"),
])
def test_invalid_battles_name_column_and_row(frame, message):
    with pytest.raises(ValueError, match=message):
        bradley_terry(frame, n_bootstrap=0)
    with pytest.raises(ValueError, match=message):
        sequential_elo(frame)


# ---- sequential Elo ---------------------------------------------------------------------

def test_sequential_elo_matches_hand_computation():
    battles = pa.table({"model_a": ["A", "A"], "model_b": ["B", "C"], "winner": ["a", "tie"]})
    out = sequential_elo(battles, k=40, initial=0).set_index("model")
    # A beats B from 0-0: both expect 0.5, so +-20. Then A (20) ties C (0):
    e_a = 1 / (1 + 10 ** (-20 / 400))  # 0.528751
    assert out.loc["B", "rating"] == pytest.approx(-20.0)
    assert out.loc["A", "rating"] == pytest.approx(20 + 40 * (0.5 - e_a))  # 18.84998
    assert out.loc["C", "rating"] == pytest.approx(40 * (0.5 - (1 - e_a)))  # 1.15002
    assert out.loc["A", "rating"] == pytest.approx(18.84998, abs=1e-5)
    assert out["rating"].sum() == pytest.approx(0.0, abs=1e-9)  # simultaneous update: zero-sum
    assert out.loc["A", "battles"] == 2 and out.loc["A", "wins"] == 1
    assert out.loc["A", "ties"] == 1 and out.loc["A", "win_rate"] == pytest.approx(0.75)


def test_release_variant_updates_b_against_updated_a():
    battles = pd.DataFrame({"model_a": ["A"], "model_b": ["B"], "winner": ["a"]})
    out = sequential_elo(battles, simultaneous=False).set_index("model")["rating"]
    # release: A -> 20 first, then B's expectation is against A = 20, not 0
    assert out["A"] == pytest.approx(20.0)
    assert out["B"] == pytest.approx(-40 / (1 + 10 ** (20 / 400)))  # -18.84998, not -20
    assert out.sum() != pytest.approx(0.0)


def test_sequential_elo_depends_on_order_bradley_terry_does_not():
    forward = pd.DataFrame({"model_a": ["A", "B"], "model_b": ["B", "A"], "winner": ["a", "a"]})
    backward = forward.iloc[::-1]
    elo_f = sequential_elo(forward).set_index("model")["rating"]
    elo_b = sequential_elo(backward).set_index("model")["rating"]
    # A beats B (+-20), then B (-20) beats A (20): B gains 40 * (1 - 0.44269)
    assert elo_f["B"] == pytest.approx(-20 + 40 * (1 - 1 / (1 + 10 ** 0.1)))  # +2.29
    assert elo_f["B"] == pytest.approx(2.29247, abs=1e-5)
    assert elo_b["A"] == pytest.approx(2.29247, abs=1e-5)  # the last winner is ahead
    bt_f = bradley_terry(forward, n_bootstrap=0).set_index("model")["rating"]
    bt_b = bradley_terry(backward, n_bootstrap=0).set_index("model")["rating"]
    pd.testing.assert_series_equal(bt_f, bt_b)
    assert bt_f["A"] == pytest.approx(1000.0, abs=1e-6)  # one win each: equal strength


# ---- Bradley-Terry ----------------------------------------------------------------------

def _sklearn_bt(df: pd.DataFrame, models: list[str], C: float | None):
    """The reference: a +-1 row per battle, a win with weight s_a and a loss with 1 - s_a (a
    tie: both at 0.5). Identical rows are merged, adding their weights: same minimiser."""
    from sklearn.linear_model import LogisticRegression

    index = {m: i for i, m in enumerate(models)}
    ia, ib = df["model_a"].map(index).to_numpy(), df["model_b"].map(index).to_numpy()
    s_a = df["winner"].map({"a": 1.0, "b": 0.0, "tie": 0.5}).to_numpy()
    keys = pd.DataFrame({"a": np.concatenate([ia, ia]), "b": np.concatenate([ib, ib]),
                         "y": np.repeat([1, 0], len(df)), "w": np.concatenate([s_a, 1 - s_a])})
    rows = keys[keys["w"] > 0].groupby(["a", "b", "y"], as_index=False)["w"].sum()
    x = np.zeros((len(rows), len(models)))
    x[np.arange(len(rows)), rows["a"]] = 1.0
    x[np.arange(len(rows)), rows["b"]] = -1.0
    lr = LogisticRegression(fit_intercept=False, C=np.inf if C is None else C, tol=1e-12,
                            max_iter=100_000)  # C = inf: no penalty
    lr.fit(x, rows["y"].to_numpy(), sample_weight=rows["w"].to_numpy())
    beta = lr.coef_[0]
    return 400 / math.log(10) * (beta - beta.mean()) + 1000


@pytest.mark.parametrize("seed", [0, 1])
def test_bradley_terry_equals_sklearn_logistic_regression(seed):
    df = simulate(600, seed, tie_rate=0.15)
    ours = bradley_terry(df, n_bootstrap=0, l2=1e-6).set_index("model")["rating"]
    models = sorted(ours.index)
    ref = _sklearn_bt(df, models, C=1e6)
    np.testing.assert_allclose(ours.loc[models].to_numpy(), ref, atol=1e-3)
    unpenalised = bradley_terry(df, n_bootstrap=0, l2=0.0).set_index("model")["rating"]
    np.testing.assert_allclose(unpenalised.loc[models].to_numpy(), ref, atol=1e-3)


def test_bradley_terry_recovers_simulated_strengths():
    """Order exact in every seed; the true rating inside the 95% interval in most cases."""
    covered = total = 0
    for seed in range(8):
        out = bradley_terry(simulate(3000, seed), n_bootstrap=100, seed=seed)
        assert list(out["model"]) == list(TRUE_ELO)  # highest first
        assert out["rating"].mean() == pytest.approx(1000.0)
        for m, lo, hi in out[["model", "ci_low", "ci_high"]].itertuples(index=False):
            covered += lo <= TRUE_ELO[m] <= hi
            total += 1
    assert (out["ci_low"] < out["rating"]).all() and (out["rating"] < out["ci_high"]).all()
    assert covered / total >= 0.8, f"coverage {covered}/{total}"


def test_bootstrap_is_seeded_and_anchor_fixes_reference_model():
    df = simulate(500, 3)
    first = bradley_terry(df, n_bootstrap=30, seed=7)
    again = bradley_terry(df, n_bootstrap=30, seed=7)
    pd.testing.assert_frame_equal(first, again)
    anchored = bradley_terry(df, n_bootstrap=30, seed=7, anchor="m2").set_index("model")
    assert anchored.loc["m2", ["rating", "ci_low", "ci_high"]].tolist() == pytest.approx([1000] * 3)
    # anchoring only shifts the point estimates
    diffs = anchored["rating"] - first.set_index("model")["rating"]
    assert np.ptp(diffs.to_numpy()) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="anchor model 'nope'"):
        bradley_terry(df, n_bootstrap=0, anchor="nope")


def test_ties_count_half_and_separation_stays_finite():
    ties = pd.DataFrame({"model_a": ["x", "y"], "model_b": ["y", "z"], "winner": ["tie", "tie"]})
    out = bradley_terry(ties, n_bootstrap=0)
    assert out["rating"].to_numpy() == pytest.approx([1000.0] * 3, abs=1e-6)
    # a tie is worth exactly one win plus one loss at half weight: 1 tie == (1 win + 1 loss)
    one_tie = pd.DataFrame({"model_a": ["x", "x", "x"], "model_b": ["y", "y", "y"],
                            "winner": ["a", "a", "tie"]})
    win_loss = pd.DataFrame({"model_a": ["x"] * 6, "model_b": ["y"] * 6,
                             "winner": ["a"] * 5 + ["b"]})
    r1 = bradley_terry(one_tie, n_bootstrap=0).set_index("model")["rating"]
    r2 = bradley_terry(win_loss, n_bootstrap=0).set_index("model")["rating"]
    # 2.5 of 3 points and 5 of 6 points: the same MLE win probability 5/6
    assert r1["x"] == pytest.approx(r2["x"], abs=1e-3)
    assert r1["x"] - r1["y"] == pytest.approx(400 * math.log10(5), abs=1e-3)
    # a sweep has no finite MLE: the ridge holds the rating finite, but no resample can
    # bound the gap, so every refit is reported failed and the interval is NaN, not a number
    sweep = pd.DataFrame({"model_a": ["x"] * 5, "model_b": ["y"] * 5, "winner": ["a"] * 5})
    swept = bradley_terry(sweep, n_bootstrap=10).set_index("model")
    assert np.isfinite(swept["rating"]).all()
    assert swept.loc["x", "rating"] > swept.loc["y", "rating"]
    assert swept[["ci_low", "ci_high"]].isna().all().all()
    assert (swept["n_failed_bootstrap"] == 10).all() and (swept["n_bootstrap"] == 10).all()


def test_empty_battles_give_empty_ratings():
    empty = pd.DataFrame({"model_a": [], "model_b": [], "winner": []})
    out = bradley_terry(empty)
    assert out.empty and {"model", "rating", "ci_low", "ci_high"} <= set(out.columns)


# ---- per-instruction scores -------------------------------------------------------------

def test_score_instructions_by_hand():
    battles = pd.DataFrame({
        "instruction_id": ["i1"] * 4 + ["i2"] * 2,
        "model_a": ["A", "A", "A", "B", "A", "B"],
        "model_b": ["B", "B", "C", "C", "B", "A"],
        "winner": ["a", "tie", "b", "a", "b", "a"],
    })
    ratings = {"A": 1100.0, "B": 1000.0, "C": 900.0}
    out = score_instructions(battles, ratings, alpha=0.7).set_index(["instruction_id", "model"])
    # i1: A has 1 + 0.5 + 0 of 3; B has 0 + 0.5 + 1 of 3; C has 1 + 0 of 2
    assert out.loc[("i1", "A"), "local_share"] == pytest.approx(0.5)
    assert out.loc[("i1", "C"), "local_share"] == pytest.approx(0.5)
    e_a = (elo_expectation(1100, 1000) + elo_expectation(1100, 900)) / 2
    assert out.loc[("i1", "A"), "elo_expectation"] == pytest.approx(e_a)
    assert out.loc[("i1", "A"), "final_score"] == pytest.approx(0.7 * e_a + 0.3 * 0.5)
    assert (out.loc["i1", "winner"] == "A").all()
    finals = sorted(out.loc["i1", "final_score"], reverse=True)
    assert out.loc[("i1", "B"), "margin"] == pytest.approx(finals[0] - finals[1])
    # i2: B won both battles against A; with alpha = 0 only the vote share counts
    local = score_instructions(battles, ratings, alpha=0.0).set_index(["instruction_id", "model"])
    assert local.loc[("i2", "B"), "winner"] == "B"
    assert local.loc[("i2", "A"), "margin"] == pytest.approx(1.0)


def test_score_tie_break_is_deterministic():
    # identical shares and ratings: the smaller model id wins, with margin 0
    battles = pd.DataFrame({"instruction_id": ["i"], "model_a": ["zeta"], "model_b": ["alpha"],
                            "winner": ["tie"]})
    out = score_instructions(battles, {"zeta": 1000.0, "alpha": 1000.0})
    assert set(out["winner"]) == {"alpha"} and (out["margin"] == 0).all()
    with pytest.raises(ValueError, match=r"no rating for models \['zeta'\]"):
        score_instructions(battles, {"alpha": 1000.0})
    with pytest.raises(ValueError, match="missing column 'instruction_id'"):
        score_instructions(battles.drop(columns="instruction_id"), {})


def test_the_rating_rules_by_name_and_who_decided():
    import pandas as pd
    from arenaforge.stages.arena.ratings import score_instructions

    # one instruction, two contestants: the judges prefer b here, but a is stronger overall
    battles = pd.DataFrame({"instruction_id": ["i", "i"], "model_a": ["a", "a"],
                            "model_b": ["b", "b"], "winner": ["b", "b"]})
    ratings = {"a": 1200.0, "b": 900.0}
    by_rule = {rule: score_instructions(battles, ratings, alpha=0.7, rule=rule)
               for rule in ("local", "elo", "bt_blend")}
    assert by_rule["local"]["winner"].iloc[0] == "b"
    assert set(by_rule["local"]["decided_by"]) == {"local"}
    # the global term overturns the instruction's own votes
    for rule in ("elo", "bt_blend"):
        assert by_rule[rule]["winner"].iloc[0] == "a"
        assert set(by_rule[rule]["decided_by"]) == {"global"}
    # tied votes: the global term decides under bt_blend, the tie-break under local
    tied = battles.assign(winner=["a", "b"])
    assert set(score_instructions(tied, ratings, rule="bt_blend")["decided_by"]) == {"global"}
    assert set(score_instructions(tied, ratings, rule="local")["decided_by"]) == {"tie"}
    with pytest.raises(ValueError, match="unknown rating rule"):
        score_instructions(battles, ratings, rule="paper")
