"""Binomial interval arithmetic: exact (Clopper-Pearson) intervals and the exact McNemar test.

The one place a rate ``k / n`` gets its confidence interval (the audit, the calibrated gate,
the judge card, the ablation and the benchmark scripts all call it), through
``scipy.stats.binomtest``, imported lazily so that importing a stage module stays cheap.

>>> p = proportion(7, 20)
>>> p["rate"], round(p["ci_low"], 4), round(p["ci_high"], 4)
(0.35, 0.1539, 0.5922)
>>> proportion(0, 0)["rate"] is None
True
"""

from __future__ import annotations


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided interval of a binomial proportion ``k / n``; ``(0, 1)`` when ``n = 0``."""
    from scipy.stats import binomtest

    if n == 0:
        return 0.0, 1.0
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="exact")
    return float(ci.low), float(ci.high)


def proportion(k: int, n: int, confidence: float = 0.95) -> dict:
    """``k`` of ``n`` with its rate and exact two-sided interval (rate and bounds None if n = 0)."""
    if n == 0:
        return {"k": 0, "n": 0, "rate": None, "ci_low": None, "ci_high": None}
    low, high = clopper_pearson(k, n, confidence)
    return {"k": int(k), "n": int(n), "rate": k / n, "ci_low": low, "ci_high": high}


def upper_bound(k: int, n: int, confidence: float) -> float:
    """One-sided exact upper confidence bound on a rate ``k / n``; 1.0 when ``n = 0`` (no
    evidence bounds nothing)."""
    from scipy.stats import binomtest

    if n == 0:
        return 1.0
    ci = binomtest(int(k), int(n), alternative="less").proportion_ci(
        confidence_level=confidence, method="exact")
    return float(ci.high)


def mcnemar_p(only_first: int, only_second: int) -> float | None:
    """Exact two-sided McNemar p-value of paired outcomes from their discordant counts.

    Only the pairs where exactly one side succeeded carry information; under the null each is
    a fair coin, so the test is a binomial test on them. None when there are none.
    """
    from scipy.stats import binomtest

    discordant = int(only_first) + int(only_second)
    return float(binomtest(int(only_first), discordant, 0.5).pvalue) if discordant else None
