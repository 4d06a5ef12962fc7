"""Pure decision rules of the execution stages: which tests to trust, which answer to keep.

Two decisions, both free of I/O so they can be tested on hand-made tables:

* ``dual_agreement``: CodeT-style test trust. Candidates are grouped by the exact set of tests
  they pass; a group's score is ``len(candidates) * len(tests passed)`` (CodeT's consensus
  score); the tests of the best group are trusted, every other test is discarded with a reason.
  When several different groups share the best score nothing tells them apart, so only the tests
  every tied group passes are trusted (often none: the instruction then has no tests and is left
  to the judge gate).
* ``select_answer``: the selection rules ``judge``, ``verified`` and ``execution_first``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal, get_args

# The selection rules: every other module (verify's config, ablate) takes them from here.
Rule = Literal["judge", "verified", "execution_first"]
RULES: tuple[str, ...] = get_args(Rule)

# Why a test was discarded (the ``reason`` column of the tests stage).
NO_CANDIDATE_PASSES = "no_candidate_passes"
CONTRADICTS_CONSENSUS = "contradicts_consensus"
NO_CONSENSUS = "no_consensus"  # tied best groups disagree on it


@dataclasses.dataclass(frozen=True)
class TestTrust:
    """Outcome of dual agreement for one instruction.

    Attributes:
        survived: per test, True when trusted.
        reasons: per test, ``None`` when trusted, else why not.
        consensus: indices of the candidates of the trusted group(s).
        score: the best group's consensus score (0 when no candidate passes anything).
    """

    survived: tuple[bool, ...]
    reasons: tuple[str | None, ...]
    consensus: tuple[int, ...]
    score: int


def dual_agreement(passes: Sequence[Sequence[bool]], n_tests: int | None = None) -> TestTrust:
    """Trust the tests agreed by the largest consistent group of candidates.

    Args:
        passes: ``passes[c][t]`` is True when candidate ``c`` passed test ``t``.
        n_tests: number of tests (needed when there are no candidates).

    Returns:
        Which tests survive and why the others do not.

    Example (candidates 0 and 1 agree, 2 is an outlier; test 2 is only passed by the outlier)::

        >>> trust = dual_agreement([[True, True, False], [True, True, False], [True, False, True]])
        >>> trust.survived, trust.reasons, trust.consensus
        ((True, True, False), (None, None, 'contradicts_consensus'), (0, 1))
    """
    if n_tests is None:
        if not passes:
            raise ValueError("dual_agreement: give n_tests when there are no candidates")
        n_tests = len(passes[0])
    if any(len(row) != n_tests for row in passes):
        raise ValueError(f"dual_agreement: every candidate needs {n_tests} pass flags")
    groups: dict[frozenset[int], list[int]] = {}
    for c, row in enumerate(passes):
        groups.setdefault(frozenset(t for t, ok in enumerate(row) if ok), []).append(c)
    scored = [(len(members) * len(tests), tests, members) for tests, members in groups.items()]
    best = max((s for s, _, _ in scored), default=0)
    if best == 0:
        reasons = (NO_CANDIDATE_PASSES,) * n_tests
        return TestTrust((False,) * n_tests, reasons, (), 0)
    top = [(tests, members) for s, tests, members in scored if s == best]
    trusted = frozenset.intersection(*(tests for tests, _ in top))
    in_any_top = frozenset.union(*(tests for tests, _ in top))
    passed_by_someone = {t for tests in groups for t in tests}
    reasons_list: list[str | None] = []
    for t in range(n_tests):
        if t in trusted:
            reasons_list.append(None)
        elif t not in passed_by_someone:
            reasons_list.append(NO_CANDIDATE_PASSES)
        elif t in in_any_top:
            reasons_list.append(NO_CONSENSUS)
        else:
            reasons_list.append(CONTRADICTS_CONSENSUS)
    consensus = tuple(sorted(c for _, members in top for c in members))
    return TestTrust(tuple(r is None for r in reasons_list), tuple(reasons_list), consensus, best)


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
