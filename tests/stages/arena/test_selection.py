"""The answer selection rules, on hand-made cases."""

from __future__ import annotations

import pytest
from arenaforge.stages.arena.selection import Candidate, Selection, select_answer

T, F = True, False


def C(model, passed, rate, score, winner=False):
    return Candidate(model, passed, rate, score, winner)


def test_judge_rule_keeps_the_winner_even_when_it_fails():
    cands = [C("a", F, 0.0, 0.9, True), C("b", T, 1.0, 0.1)]
    assert select_answer(cands, "judge") == Selection(0, False)


def test_verified_flips_to_the_passing_loser():
    cands = [C("a", F, 0.5, 0.9, True), C("b", T, 1.0, 0.1), C("c", T, 1.0, 0.3)]
    # the best-judged passing answer replaces the failing winner
    assert select_answer(cands, "verified") == Selection(2, True)


def test_verified_keeps_a_passing_winner_and_a_failing_one_when_nothing_passes():
    assert select_answer([C("a", T, 1.0, 0.6, True), C("b", T, 1.0, 0.4)], "verified") == \
        Selection(0, False)
    assert select_answer([C("a", F, 0.2, 0.6, True), C("b", F, 0.8, 0.4)], "verified") == \
        Selection(0, False)


def test_execution_first_takes_the_highest_pass_rate_judge_breaks_ties():
    cands = [C("a", F, 0.5, 0.9, True), C("b", F, 0.75, 0.1), C("c", F, 0.75, 0.3)]
    assert select_answer(cands, "execution_first") == Selection(2, True)
    tied = [C("a", T, 1.0, 0.2), C("b", T, 1.0, 0.8, True)]
    assert select_answer(tied, "execution_first") == Selection(1, False)


def test_execution_first_with_acecoder_thresholds():
    # best 0.75 < 0.8: execution does not override the judge
    cands = [C("a", F, 0.5, 0.9, True), C("b", F, 0.75, 0.1)]
    assert select_answer(cands, "execution_first", min_pass_rate=0.8, min_gap=0.4).index == 0
    # 1.0 vs 0.7: gap 0.3 < 0.4: the judge decides
    cands = [C("a", F, 0.7, 0.9, True), C("b", T, 1.0, 0.1)]
    assert select_answer(cands, "execution_first", min_pass_rate=0.8, min_gap=0.4).index == 0
    cands = [C("a", F, 0.5, 0.9, True), C("b", T, 1.0, 0.1)]
    assert select_answer(cands, "execution_first", min_pass_rate=0.8, min_gap=0.4) == \
        Selection(1, True)


def test_without_winner_or_tests_the_judge_score_decides():
    no_winner = [C("a", F, 0.0, 0.3), C("b", F, 0.0, 0.7), C("c", T, 1.0, None)]
    assert select_answer(no_winner, "judge") == Selection(1, False)
    # no judge winner to flip: selecting the passing answer is not a flip
    assert select_answer(no_winner, "verified") == Selection(2, False)
    untested = [C("a", F, None, 0.3, True), C("b", F, None, 0.7)]
    for rule in ("judge", "verified", "execution_first"):
        assert select_answer(untested, rule) == Selection(0, False)
    assert select_answer([], "verified") == Selection(None, False)
    with pytest.raises(ValueError, match="unknown selection rule"):
        select_answer(untested, "majority")
