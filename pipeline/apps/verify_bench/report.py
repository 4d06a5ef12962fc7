"""``card.md``: the verify-bench card as Markdown (from ``card.json``'s dict)."""

from __future__ import annotations

from typing import Any

HEADLINE = ("verified_precision", "yield_of_solvable", "judge_winner_precision",
            "emitted_precision", "yield_of_solvable_right")


def rate(p: dict[str, Any] | None) -> str:
    """``k/n = rate [low, high]`` of an ``intervals.proportion`` dict.

    >>> rate({"k": 3, "n": 4, "rate": 0.75, "ci_low": 0.194, "ci_high": 0.994})
    '3/4 = 0.75 [0.19, 0.99]'
    >>> rate({"k": 0, "n": 0, "rate": None, "ci_low": None, "ci_high": None})
    '0/0'
    """
    if not p or p["rate"] is None:
        return f"{(p or {}).get('k', 0)}/{(p or {}).get('n', 0)}"
    return f"{p['k']}/{p['n']} = {p['rate']:.2f} [{p['ci_low']:.2f}, {p['ci_high']:.2f}]"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "-"


def headline_table(card: dict[str, Any]) -> str:
    """One row per language/task kind and one for all: the headline rates."""
    head = "| problems | " + " | ".join(HEADLINE) + " |"
    lines = [head.replace("| problems", "| group | problems"),
             "|" + "---|" * (len(HEADLINE) + 2)]
    for name, block in [("all", card), *card["by_language"].items()]:
        cells = [name, f"{block['reached_arena']}/{block['problems']} reached"]
        lines.append("| " + " | ".join(cells + [rate(block[k]) for k in HEADLINE]) + " |")
    return "\n".join(lines)


def _group(name: str, block: dict[str, Any]) -> list[str]:
    out = [f"### {name}", "",
           (f"- problems {block['problems']}, reached the arena {block['reached_arena']} "
           f"(dropped before: {_counts(block['dropped_before_arena'])}), solvable by some "
           f"expert {block['solvable']}"),
           (f"- verified rows {block['verified_rows']} of {block['emitted_rows']} emitted; "
           f"verified rows on problems no expert's answer solved: "
           f"{block['verified_rows_unsolvable']}"),
           f"- verified_precision {rate(block['verified_precision'])}",
           (f"- yield_of_solvable {rate(block['yield_of_solvable'])} (with a right verified "
           f"row: {rate(block['yield_of_solvable_right'])})"),
           f"- judge_winner_precision {rate(block['judge_winner_precision'])}",
           f"- lost_by_admission: {_counts(block['lost_by_admission'])}",
           "- answers that pass the hidden tests: " + "; ".join(
               f"{m} {rate(p)}" for m, p in block["experts"].items()), ""]
    if block["evidence"]:
        out += ["| evidence | at least | verified rows | precision | yield_of_solvable |",
                "|---|---|---|---|---|"]
        out += [f"| {e['evidence']} | {e['at_least']:g} | {e['rows']} | {rate(e['precision'])} "
                f"| {rate(e['yield_of_solvable'])} |" for e in block["evidence"]]
        out.append("")
    return out


def card_markdown(card: dict[str, Any]) -> str:
    """The whole card: what ran, the headline table, then each group in detail."""
    skipped = {lang: info["skipped"] for lang, info in card.get("untranslatable", {}).items()
               if info["skipped"]}
    lines = [
        f"# verify-bench: {card['config']}", "",
        f"`{card['command']}`", "",
        (f"- problems: {card['benchmark']} ({card['problems']} in "
        f"{', '.join(card['by_language'])}; seed {card['seed']})"),
        (f"- experts: {', '.join(card['experts'])}; judges: {', '.join(card['judges'])}; "
        f"test authors: {', '.join(card['test_authors'])}"),
        f"- run directory: {card['run_dir']} (overrides: {'; '.join(card['overrides'])})",
        (f"- processor: {card['processor']}; wall time {card['wall_s'] / 60:.1f} min "
        f"(run {card['run_s'] / 60:.1f} min)"),
    ]
    if skipped:
        lines.append("- untranslatable, skipped: " + "; ".join(
            f"{lang}: {_counts(c)}" for lang, c in skipped.items()))
    lines += ["", ("Every rate is k/n = rate [exact 95% interval]. Hidden tests: what the run "
              "never saw; every answer, judges' winner and emitted row was run on them."), "",
              headline_table(card), ""]
    lines += _group("all", card)
    for name, block in card["by_language"].items():
        lines += _group(name, block)
    return "\n".join(lines).rstrip() + "\n"
