"""The interval arithmetic against its definitions (beta quantiles, the binomial pmf)."""

from __future__ import annotations

import math

import pytest
from arenaforge.stages.common.intervals import (
    clopper_pearson,
    mcnemar_p,
    proportion,
    upper_bound,
)
from scipy.stats import beta


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (1, 1), (7, 40), (20, 20)])
def test_clopper_pearson_matches_the_beta_quantiles(k, n):
    low, high = clopper_pearson(k, n)
    ref_low = 0.0 if k == 0 else beta.ppf(0.025, k, n - k + 1)
    ref_high = 1.0 if k == n else beta.ppf(0.975, k + 1, n - k)
    assert low == pytest.approx(ref_low, abs=1e-9) and high == pytest.approx(ref_high, abs=1e-9)
    assert low <= k / n <= high
    assert clopper_pearson(0, 0) == (0.0, 1.0)


def test_proportion_carries_the_interval_and_none_without_data():
    out = proportion(7, 20)
    assert (out["k"], out["n"], out["rate"]) == (7, 20, 0.35)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx(clopper_pearson(7, 20))
    assert proportion(0, 10)["ci_high"] == pytest.approx(1 - 0.025 ** (1 / 10))  # closed form
    assert proportion(0, 0) == {"k": 0, "n": 0, "rate": None, "ci_low": None, "ci_high": None}


@pytest.mark.parametrize("k, n, level", [(0, 10, 0.05), (3, 40, 0.01), (10, 10, 0.1),
                                         (1, 200, 0.0167)])
def test_upper_bound_is_the_one_sided_beta_quantile(k, n, level):
    expected = 1.0 if k == n else beta.ppf(1 - level, k + 1, n - k)
    assert upper_bound(k, n, 1 - level) == pytest.approx(expected, rel=1e-6)
    if k == 0:
        assert upper_bound(k, n, 1 - level) == pytest.approx(1 - level ** (1 / n))
    assert upper_bound(0, 0, 1 - level) == 1.0


@pytest.mark.parametrize("wins,losses", [(3, 0), (5, 1), (2, 2), (0, 7), (9, 4)])
def test_mcnemar_is_the_two_sided_binomial_on_discordant_pairs(wins, losses):
    n = wins + losses
    # two-sided exact: the probability of outcomes at most as likely as the observed one
    probs = [math.comb(n, i) / 2 ** n for i in range(n + 1)]
    ref = min(1.0, sum(q for q in probs if q <= probs[wins] * (1 + 1e-7)))
    assert mcnemar_p(wins, losses) == pytest.approx(ref)
    assert mcnemar_p(0, 0) is None
