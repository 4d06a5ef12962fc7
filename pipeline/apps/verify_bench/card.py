"""The verify-bench card's arithmetic: pure functions over one result per problem.

Definitions (every rate with its exact Clopper-Pearson 95% interval, ``intervals.proportion``):

* ``verified_precision``: emitted rows marked ``verified`` that pass the hidden tests / those
  rows. ``emitted_precision``: the same over every emitted row (the judge gate's too).
* ``solvable``: problems that reached the arena where at least one expert's answer passes the
  hidden tests. ``yield_of_solvable``: solvable problems with a verified emitted row / solvable
  problems (``yield_of_solvable_right``: ... with a verified row that passes).
* ``judge_winner_precision``: the judges' winners (``rate``'s ``winner``: the row WarriorCoder
  would emit) whose answer passes / problems with a winner.
* ``lost_by_admission``: the solvable problems without a verified row, by what stopped their
  right answer (``lost_reason``).
* ``experts``: per model, answers that pass / answers.
* ``evidence``: precision and yield of the verified rows whose evidence (the dataset's
  ``tests_passed``, ``pass_fraction``, ``evidence_strength``, ``other_authors``,
  ``judge_score``) is at least a threshold, as a user filtering the dataset would keep them.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from arenaforge.stages.common.intervals import proportion
from arenaforge.stages.verification.grading import ADMISSION_STEPS, VERIFIED

THRESHOLDS: dict[str, tuple[float, ...]] = {
    "tests_passed": (2, 4, 8), "pass_fraction": (1.0,), "evidence_strength": (2, 3, 4),
    "other_authors": (1,), "judge_score": (1.5, 2.0, 2.5)}
NOT_SELECTED = "not_selected"
GATE_ADMITTED = "gate_admitted_unverified"  # emitted by the judge gate, not verified
NO_ARENA = "no_answer"  # reached no stage's drops and has no answer (a failed request)


@dataclasses.dataclass(frozen=True)
class ProblemResult:
    """What the run did with one problem, graded on its hidden tests.

    Attributes:
        group: ``language/task_kind``.
        dropped: ``(stage, reason)`` when it was dropped before the arena.
        answers: model -> whether its answer passes the hidden tests.
        outcomes: model -> ``{"admission", "selected", ...}`` (the final verify/repair row).
        winner: the judges' winner model, if any.
        emitted: the emitted row: ``model, verified, passed`` (its text on the hidden tests),
            ``gate_admitted`` and the evidence columns; None when nothing was emitted.
        emit_dropped: model -> why emit dropped its answer.
    """

    task_id: str
    group: str
    dropped: tuple[str, str] | None = None
    answers: Mapping[str, bool] = dataclasses.field(default_factory=dict)
    outcomes: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    winner: str | None = None
    emitted: Mapping[str, Any] | None = None
    emit_dropped: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def solvable(self) -> bool:
        return any(self.answers.values())

    @property
    def verified(self) -> bool:
        return bool(self.emitted and self.emitted["verified"])


def lost_reason(r: ProblemResult) -> str:
    """Why a solvable problem has no verified row: what stopped its right answer.

    A right answer that was selected: emit's reason for dropping it (``gate_rejected``,
    ``below_pass_fraction``, ``duplicate_task``...), ``gate_admitted_unverified`` when the
    judge gate emitted it unverified. Else the right answer that went furthest: its admission
    step (``no_tests``, ``answers_disagree``, ...), ``not_selected`` when it was verified but
    another answer was chosen.

    >>> lost_reason(ProblemResult("t", "python/function", answers={"a": True, "b": False},
    ...     outcomes={"a": {"admission": "no_tests", "selected": False}}))
    'no_tests'
    """
    right = [m for m, ok in r.answers.items() if ok]
    picked = [m for m in right if (r.outcomes.get(m) or {}).get("selected")]
    if picked:
        model = picked[0]
        if r.emitted is not None and r.emitted["model"] == model:
            return GATE_ADMITTED
        return (r.emit_dropped.get(model) or (r.outcomes.get(model) or {}).get("admission")
                or "not_emitted")
    rank = {step: i for i, step in enumerate(ADMISSION_STEPS)}
    best = max(right, key=lambda m: rank.get((r.outcomes.get(m) or {}).get("admission"), -1))
    step = (r.outcomes.get(best) or {}).get("admission")
    return NOT_SELECTED if step == VERIFIED else step or "not_graded"


def evidence_table(results: Sequence[ProblemResult]) -> list[dict[str, Any]]:
    """Precision and yield of the verified rows at each ``THRESHOLDS`` value of a column the
    emitted rows carry (a column no row has is left out)."""
    solvable = sum(r.solvable for r in results)
    rows = []
    for column, thresholds in THRESHOLDS.items():
        have = [r for r in results if r.verified and r.emitted.get(column) is not None]
        if not have:
            continue
        for t in thresholds:
            kept = [r for r in have if r.emitted[column] >= t]
            rows.append({"evidence": column, "at_least": t, "rows": len(kept),
                         "precision": proportion(sum(bool(r.emitted["passed"]) for r in kept),
                                                 len(kept)),
                         "yield_of_solvable": proportion(sum(r.solvable for r in kept),
                                                         solvable)})
    return rows


def _counter(items: Iterable[str]) -> dict[str, int]:
    return dict(sorted(Counter(items).items(), key=lambda kv: (-kv[1], kv[0])))


def summarize(results: Sequence[ProblemResult]) -> dict[str, Any]:
    """Every metric of the card over ``results`` (see the module), with the counts behind
    them."""
    reached = [r for r in results if r.answers]
    solvable = [r for r in reached if r.solvable]
    emitted = [r for r in results if r.emitted is not None]
    verified = [r for r in emitted if r.verified]
    winners = [r for r in reached if r.winner in r.answers]
    models = sorted({m for r in reached for m in r.answers})
    lost = [r for r in solvable if not r.verified]
    return {
        "problems": len(results),
        "reached_arena": len(reached),
        "dropped_before_arena": _counter(
            f"{r.dropped[0]}:{r.dropped[1]}" if r.dropped else NO_ARENA
            for r in results if not r.answers),
        "solvable": len(solvable),
        "verified_rows": len(verified),
        "emitted_rows": len(emitted),
        "verified_precision": proportion(sum(bool(r.emitted["passed"]) for r in verified),
                                         len(verified)),
        "emitted_precision": proportion(sum(bool(r.emitted["passed"]) for r in emitted),
                                        len(emitted)),
        "yield_of_solvable": proportion(sum(r.verified for r in solvable), len(solvable)),
        "yield_of_solvable_right": proportion(
            sum(r.verified and bool(r.emitted["passed"]) for r in solvable), len(solvable)),
        "verified_rows_unsolvable": sum(r.verified and not r.solvable for r in reached),
        "judge_winner_precision": proportion(sum(r.answers[r.winner] for r in winners),
                                             len(winners)),
        "lost_by_admission": _counter(lost_reason(r) for r in lost),
        "experts": {m: proportion(sum(r.answers.get(m, False) for r in reached),
                                  sum(m in r.answers for r in reached)) for m in models},
        "evidence": evidence_table(results),
    }


def build_card(results: Sequence[ProblemResult], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The card: ``meta`` (config, command, processor, ...), the metrics over every problem
    and ``by_language`` (keyed ``language/task_kind``)."""
    groups: dict[str, list[ProblemResult]] = {}
    for r in results:
        groups.setdefault(r.group, []).append(r)
    return {"schema_version": 1, **meta, **summarize(results),
            "by_language": {g: summarize(rs) for g, rs in sorted(groups.items())}}
