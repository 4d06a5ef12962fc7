"""Which answer an instruction contributes: the selection rules ``judge``, ``verified`` and
``execution_first`` (``select_answer``; pure, tested on hand-made cases). Which tests to trust is
decided elsewhere, by the evidence (``arenaforge.stages.verification.evidence``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal, get_args

# The selection rules: every other module (verify's config, ablate) takes them from here.
Rule = Literal["judge", "verified", "execution_first"]
RULES: tuple[str, ...] = get_args(Rule)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """What selection knows about one answer of an instruction.

    ``pass_rate`` is ``None`` when the instruction has no trusted tests.
    """

    model: str
    passed: bool
    pass_rate: float | None
    final_score: float | None
    judge_winner: bool


@dataclasses.dataclass(frozen=True)
class Selection:
    """Index of the selected candidate (``None``: nothing selected) and whether it flipped the
    judge's winner."""

    index: int | None
    flipped: bool


def _judge_order(c: Candidate) -> tuple:
    # Best first: the judge's winner, then the higher final score, then the model id, so that
    # every tie is broken the same way on every machine.
    return (not c.judge_winner, -(c.final_score if c.final_score is not None else float("-inf")),
            c.model)


def select_answer(cands: Sequence[Candidate], rule: Rule, min_pass_rate: float = 0.0,
                  min_gap: float = 0.0) -> Selection:
    """Pick the answer an instruction contributes.

    Args:
        cands: the instruction's answers.
        rule: ``judge`` keeps the rate stage's winner (the paper). ``verified`` keeps the
            winner when it passes; when it fails and another answer passes, the best-judged
            passing answer is selected instead (a flip); when none passes the winner stays
            selected (so that repair can try it; its status says it failed). ``execution_first``
            takes the highest pass rate, the judge breaking ties.
        min_pass_rate: ``execution_first`` only: execution overrides the judge only when the
            best answer passes at least this fraction of tests (AceCoder used 0.8).
        min_gap: ``execution_first`` only: ... and beats the judge's pick by at least this many
            pass-rate points (AceCoder used 0.4).

    Returns:
        The selection. Without any judge winner the judge's pick is the best ``final_score``
        (ties by model id); with no trusted tests every rule falls back to the judge's pick.

    >>> a = Candidate("a", passed=False, pass_rate=0.5, final_score=0.8, judge_winner=True)
    >>> b = Candidate("b", passed=True, pass_rate=1.0, final_score=0.2, judge_winner=False)
    >>> select_answer([a, b], "judge"), select_answer([a, b], "verified")
    (Selection(index=0, flipped=False), Selection(index=1, flipped=True))
    """
    if rule not in RULES:
        raise ValueError(f"unknown selection rule {rule!r}; known: {RULES}")
    if not cands:
        return Selection(None, False)
    order = sorted(range(len(cands)), key=lambda i: _judge_order(cands[i]))
    pick = order[0]
    has_winner = any(c.judge_winner for c in cands)
    untested = all(c.pass_rate is None for c in cands)
    if rule == "judge" or untested:
        return Selection(pick, False)
    if rule == "verified":
        if cands[pick].passed:
            return Selection(pick, False)
        passing = [i for i in order if cands[i].passed]
        if not passing:
            return Selection(pick, False)
        return Selection(passing[0], has_winner)
    rate = [c.pass_rate if c.pass_rate is not None else -1.0 for c in cands]
    best = min(order, key=lambda i: (-rate[i], order.index(i)))
    if best != pick and (rate[best] < min_pass_rate or rate[best] - rate[pick] < min_gap):
        best = pick  # execution does not separate them clearly enough: the judge decides
    return Selection(best, has_winner and best != pick)
