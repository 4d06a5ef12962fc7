"""The judge card as Markdown and figures (PNG files next to it, drawn like the audit report's
figures in ``arenaforge.pipeline.apps.report.plots``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _num(x, fmt=".2f") -> str:
    return "n/a" if x is None else format(x, fmt)


def _acc(block: Mapping | None) -> str:
    if not block or not block.get("n"):
        return "n/a"
    return f"{block['k']}/{block['n']} ({_pct(block['rate'])})"


def headline_table(card: Mapping) -> str:
    """One row per variant: accuracy with its exact interval, kappa, bias, cost."""
    lines = [("| judge | protocol | reference | pairs | correct | no verdict | accuracy [95% CI] "
              "| kappa | same-model | cross-model | first position | order consistency | "
              "s/verdict |"),
             "|---|---|---|---:|---:|---:|---|---:|---|---|---:|---:|---:|"]
    for r in card["results"]:
        types = r["by_pair_type"]
        lines.append(
            f"| {r['judge']} | {r['protocol']} | {r['reference_kind']} | {r['n']} | "
            f"{r['correct']} | {r['unparsed']} | {_pct(r['accuracy'])} [{_pct(r['ci_low'])}, {_pct(r['ci_high'])}]"
            f" | {_num(r['kappa'])} | {_acc(types.get('same_model'))} | "
            f"{_acc(types.get('cross_model'))} | {_num(r['first_position'])} | "
            f"{_num(r['order_consistency'])} | {_num(r['seconds_per_verdict'], '.1f')} |")
    return "\n".join(lines)


def bias_table(card: Mapping) -> str:
    """Length bias, self-preference and accuracy by difficulty per variant."""
    seen = {d for r in card["results"] for d in r["by_difficulty"]}
    levels = [d for d in ("hard", "medium", "easy") if d in seen] + sorted(
        seen - {"hard", "medium", "easy"})
    head = ("| variant | single-order readings correct | scored alone only | "
            "picks failing when longer | picks failing when shorter | "
            "kin failed, picked | other failed, picked | "
            + " | ".join(f"{d}" for d in levels) + " |")
    lines = [head, "|---" * (7 + len(levels)) + "|"]
    for r in card["results"]:
        lb, sp = r["length_bias"], r["self_preference"] or {}
        lines.append(
            f"| {r['variant']} | {_acc(r['single_order_accuracy'])} | "
            f"{_acc(r.get('alone_accuracy'))} | {_acc(lb['failing_longer'])} | {_acc(lb['failing_shorter'])} | "
            f"{_acc(sp.get('kin_failed_picked'))} | {_acc(sp.get('other_failed_picked'))} | "
            + " | ".join(_acc(r["by_difficulty"].get(d)) for d in levels) + " |")
    return "\n".join(lines)


def card_markdown(card: Mapping, plots: Mapping[str, str]) -> str:
    """The whole card (``card.md``)."""
    p = card["pairs"]
    answers = ", ".join(f"{m}: {a['passed']}/{a['answers']} pass"
                        for m, a in card["answers"].items())
    parts = [
        f"# Judge card: {card['name']}",
        "",
        (f"{card['problems']} problems of {card['benchmark']}, {card['samples']} answers per "
        f"contestant and problem at temperature {card['temperature']} ({answers}). "
        f"{p['count']} execution-separated pairs (one answer passes the official tests, the "
        f"other fails) from {p['problems']} problems: {p['same_model']} same-model, "
        f"{p['cross_model']} cross-model. Every pair judged in both orders; the judge saw "
        f"{'each answer' if card.get('shown') == 'response' else 'the code block of each answer'}."),
        "",
        ("A verdict is correct when it names the passing answer (a tie or no verdict is wrong); "
        "intervals are exact (Clopper-Pearson). First position: share of decisive "
        "single-order readings that chose the answer shown first (pointwise protocols: the "
         "answer scored first, alone, before the other; 0.5 = no preference). Order "
        "consistency: share of pairs whose two single-order readings agree."),
        "",
        headline_table(card),
        "",
        "## Biases and difficulty",
        "",
        ("Length: how often the verdict picked the failing answer when it is the longer / the "
        "shorter one. Self-preference (cross-model pairs with one contestant of the judge's "
        "family): how often the verdict picked the kin when the kin failed, and the other "
        "contestant when it failed. Difficulty: the problem's pass rate over all answers "
        "(hard < 25% <= medium < 60% <= easy)."),
        "",
        bias_table(card),
        "",
        (f"Command: `{card['command']}`; wall time {card['wall_s'] / 60:.1f} min on "
        f"{card['processor']}."),
    ]
    effects = [r for r in card["results"] if r.get("reference_effect")]
    if effects:
        parts += ["", "## Reference effect", "",
                  ("The same judge and protocol with and without the reference in its prompt, on "
                  "the pairs both judged (exact McNemar test on the pairs where they differ)."),
                  "", "| variant | pairs | with reference | without | gained | lost | p |",
                  "|---|---:|---|---|---:|---:|---:|"]
        for r in effects:
            e = r["reference_effect"]
            parts.append(f"| {r['variant']} | {e['pairs']} | {_acc(e['with'])} | "
                         f"{_acc(e['without'])} | {e['gained']} | {e['lost']} | "
                         f"{e['p_mcnemar']:.2f} |")
    for title, name in plots.items():
        parts += ["", f"![{title}]({name})"]
    return "\n".join(parts) + "\n"


def write_plots(card: Mapping, out: Path) -> dict[str, str]:
    """Accuracy and first-position figures as PNG files in ``out``; title -> file name."""
    results = [r for r in card["results"] if r["n"]]
    if not results:
        return {}
    written = {}
    _interval_plot(out / "accuracy.png", [(r["variant"], r["accuracy"], r["ci_low"], r["ci_high"])
                                          for r in results],
                   "accuracy against execution (exact 95% interval)", "o", "#4c72b0")
    written["Accuracy per variant"] = "accuracy.png"
    fp = [(r["variant"], d["rate"], d["ci_low"], d["ci_high"]) for r in results
          if r["first_position"] is not None for d in (r["first_position_detail"],)]
    if fp:
        _interval_plot(out / "first_position.png", fp,
                       "first-position preference of single-order readings (0.5 = none)", "s",
                       "#dd8452")
        written["First-position preference"] = "first_position.png"
    return written


def _interval_plot(path: Path, rows: list[tuple[str, float, float, float]], xlabel: str,
                   marker: str, color: str) -> None:
    """One horizontal interval per ``(label, rate, ci_low, ci_high)``, first row on top, on a
    0-1 axis with the no-preference / coin line at 0.5."""
    from arenaforge.pipeline.apps.report.plots import _figure

    rows = rows[::-1]
    plt, fig, ax = _figure(width=7.5, height=0.4 * len(rows) + 1.4)
    ax.errorbar([r[1] for r in rows], [r[0] for r in rows],
                xerr=[[r[1] - r[2] for r in rows], [r[3] - r[1] for r in rows]],
                fmt=marker, capsize=4, color=color)
    ax.axvline(0.5, color="#999999", linestyle="--", linewidth=1)
    ax.set_xlim(0, 1)
    ax.set_xlabel(xlabel)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
