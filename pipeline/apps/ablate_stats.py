"""The comparison statistics of ``arenaforge ablate`` (pure): exact intervals, paired tests.

pass@1 over n problems is a binomial proportion: its exact (Clopper-Pearson) interval comes
from ``arenaforge.stages.common.intervals``. Two models evaluated on the same problems are compared with the
exact McNemar test, which looks only at the problems where exactly one of them is right.
"""

from __future__ import annotations

from typing import Any

from arenaforge.pipeline.apps.ablate_select import BASELINE
from arenaforge.stages.common.intervals import clopper_pearson, mcnemar_p

BASE_ROW = "base"


def mcnemar_exact(rule: list[bool], baseline: list[bool]) -> tuple[int, int, float]:
    """Exact McNemar test on paired outcomes: (rule-only wins, baseline-only wins, p-value).

    Only discordant problems carry information; under the null each is a fair coin, so the
    two-sided p-value is a binomial test on them (1.0 when there are none).
    """
    if len(rule) != len(baseline):
        raise ValueError(f"paired outcomes differ in length: {len(rule)} vs {len(baseline)}")
    wins = sum(a and not b for a, b in zip(rule, baseline))
    losses = sum(b and not a for a, b in zip(rule, baseline))
    p = 1.0 if wins + losses == 0 else mcnemar_p(wins, losses)
    return wins, losses, p


def summarize(results: dict[str, dict[str, Any]], datasets: dict[str, dict[str, Any]]
              ) -> list[dict[str, Any]]:
    """One comparison row per evaluated model (``base`` first, then the rules).

    Args:
        results: per row name, the ``evaluate`` result (``problems`` with ``task_id, correct``).
        datasets: per rule, ``rows``, ``verified`` and ``differs_from_judge`` of its dataset.
    """
    def outcomes(name: str) -> dict[str, bool]:
        return {p["task_id"]: p["correct"] > 0 for p in results[name]["problems"]}

    reference = outcomes(BASELINE) if BASELINE in results else None
    out = []
    for name in sorted(results, key=lambda n: (n != BASE_ROW, n != BASELINE)):
        solved = outcomes(name)
        k, n = sum(solved.values()), len(solved)
        low, high = clopper_pearson(k, n)
        row: dict[str, Any] = {"rule": name, "correct": k, "n": n, "pass@1": k / n if n else 0.0,
                               "ci_low": low, "ci_high": high}
        ds = datasets.get(name)
        if ds is not None:
            row.update(rows=ds["rows"], verified_share=ds["verified"] / ds["rows"] if ds["rows"]
                       else 0.0, differs_from_judge=ds.get("differs_from_judge"))
        if reference is not None and name not in (BASE_ROW, BASELINE):
            if set(solved) != set(reference):
                raise ValueError(f"ablate: {name} and {BASELINE} were evaluated on different "
                                 "problems; cannot pair them")
            tasks = sorted(reference)
            wins, losses, p = mcnemar_exact([solved[t] for t in tasks],
                                            [reference[t] for t in tasks])
            row.update(delta_vs_random=row["pass@1"] - sum(reference.values()) / len(reference),
                       wins_vs_random=wins, losses_vs_random=losses, p_value=p)
        out.append(row)
    return out


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The comparison as a GitHub Markdown table."""
    head = ("| rule | rows | verified share | picks != judge | pass@1 | 95% CI (exact) "
            "| delta vs random | +/- | p (McNemar) |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def cells(r: dict[str, Any]) -> list[str]:
    def num(key: str, fmt: str) -> str:
        return format(r[key], fmt) if r.get(key) is not None else "-"

    plusminus = (f"{r['wins_vs_random']}/{r['losses_vs_random']}" if "wins_vs_random" in r
                 else "-")
    label = "base (untrained)" if r["rule"] == BASE_ROW else r["rule"]
    return [label, num("rows", "d"), num("verified_share", ".0%"),
            num("differs_from_judge", "d"), f"{r['pass@1']:.1%} ({r['correct']}/{r['n']})",
            f"[{r['ci_low']:.1%}, {r['ci_high']:.1%}]", num("delta_vs_random", "+.1%"),
            plusminus, num("p_value", ".3f")]


