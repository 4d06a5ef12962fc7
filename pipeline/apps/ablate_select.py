"""Which answer each selection rule takes, per instruction, for ``arenaforge ablate`` (pure).

``random`` draws a seeded expert per instruction; ``judge``, ``verified`` and
``execution_first`` are ``arenaforge.stages.arena.selection.select_answer``, exactly as the verify stage applies
them. Only instructions every rule can use are kept, so the datasets share instructions and size.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Literal, get_args

import pyarrow as pa
from arenaforge.pipeline.statuses import NO_TESTS, PASSED
from arenaforge.stages.arena.selection import Candidate, Rule, select_answer

BASELINE = "random"
# A seeded random pick of the instruction's answers, then the pipeline's selection rules.
AblationRule = Literal["random", Rule]
ABLATION_RULES: tuple[str, ...] = get_args(AblationRule)
REQUIRED = ("instruction_id", "instruction", "model", "response", "status", "tests_passed",
            "tests_total", "judge_winner", "final_score")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Which answer (row index of the source table) each rule takes, per kept instruction.

    ``instruction_ids`` is sorted; ``excluded`` maps every other instruction to the reason.
    """

    instruction_ids: list[str]
    picks: dict[str, dict[str, int]]
    excluded: dict[str, str]


def _seeded_unit(seed: int, *parts: str) -> int:
    # Hash-based, like emit's holdout split: the draw for an instruction depends only on the
    # seed and its id, never on row order or on which other instructions are present.
    return int.from_bytes(hashlib.sha256(":".join([str(seed), *parts]).encode()).digest()[:8],
                          "big")


def pick_random(instruction_id: str, models: list[str], seed: int) -> int:
    """Index into ``models`` of the seeded random expert for one instruction."""
    order = sorted(range(len(models)), key=lambda i: models[i])
    return order[_seeded_unit(seed, "random", instruction_id) % len(models)]


def plan_selection(table: pa.Table, rules: list[str], *, seed: int, require_passing: bool,
                   max_instructions: int | None = None, min_pass_rate: float = 0.0,
                   min_gap: float = 0.0) -> Plan:
    """Apply every rule to every instruction and keep the instructions all rules can use.

    Args:
        table: one row per (instruction_id, model) with the columns of ``REQUIRED``.
        rules: names from ``ABLATION_RULES``.
        seed: seeds ``random`` and the ``max_instructions`` sample.
        require_passing: exclude instructions where no answer passed (``no_tests`` when none
            had tests, else ``no_passing_answer``).
        max_instructions: keep a seeded sample of at most this many (the rest:
            ``over_max_instructions``).
        min_pass_rate, min_gap: ``execution_first``'s thresholds.

    Returns:
        The plan. An instruction is also excluded when some rule picks an empty response
        (``empty_response``): emit would drop that row and the sizes would differ.

    Raises:
        ValueError: a required column is missing or an (instruction_id, model) pair repeats.
    """
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        raise ValueError(f"ablate: answers table lacks column(s) {missing}; "
                         f"has {table.column_names}")
    by_iid: dict[str, list[int]] = {}
    rows = table.select(list(REQUIRED)).to_pylist()
    for i, row in enumerate(rows):
        by_iid.setdefault(row["instruction_id"], []).append(i)
    picks: dict[str, dict[str, int]] = {rule: {} for rule in rules}
    excluded: dict[str, str] = {}
    for iid in sorted(by_iid):
        idx = by_iid[iid]
        models = [rows[i]["model"] for i in idx]
        if len(set(models)) != len(models):
            raise ValueError(f"ablate: instruction_id={iid} has two rows for one model "
                             f"({sorted(models)})")
        if require_passing and not any(rows[i]["status"] == PASSED for i in idx):
            all_untested = all(not rows[i]["tests_total"] for i in idx)
            excluded[iid] = NO_TESTS if all_untested else "no_passing_answer"
            continue
        cands = [Candidate(model=rows[i]["model"], passed=rows[i]["status"] == PASSED,
                           pass_rate=(rows[i]["tests_passed"] or 0) / rows[i]["tests_total"]
                           if rows[i]["tests_total"] else None,
                           final_score=rows[i]["final_score"],
                           judge_winner=bool(rows[i]["judge_winner"])) for i in idx]
        chosen = {}
        for rule in rules:
            if rule == BASELINE:
                chosen[rule] = pick_random(iid, models, seed)
            else:
                chosen[rule] = select_answer(cands, rule, min_pass_rate, min_gap).index
        empty = [r for r, c in chosen.items() if not (rows[idx[c]]["response"] or "").strip()]
        if empty:
            excluded[iid] = "empty_response"
            continue
        for rule, c in chosen.items():
            picks[rule][iid] = idx[c]
    kept = sorted(picks[rules[0]])
    if max_instructions is not None and len(kept) > max_instructions:
        sample = set(sorted(kept, key=lambda iid: _seeded_unit(seed, "cap", iid))[:max_instructions])
        for iid in kept:
            if iid not in sample:
                excluded[iid] = "over_max_instructions"
                for rule in rules:
                    del picks[rule][iid]
        kept = sorted(sample)
    return Plan(kept, picks, excluded)


def rule_table(table: pa.Table, plan: Plan, rule: str) -> pa.Table:
    """The source rows a rule selected, in instruction order."""
    return table.take(pa.array([plan.picks[rule][iid] for iid in plan.instruction_ids],
                               pa.int64()))


