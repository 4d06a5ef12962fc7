"""Dual agreement (which tests to trust) and the answer selection rules, on hand-made cases."""

from __future__ import annotations

import itertools
import random

import pytest
from arenaforge.stages.arena.selection import (
    CONTRADICTS_CONSENSUS,
    NO_CANDIDATE_PASSES,
    NO_CONSENSUS,
    Candidate,
    Selection,
    dual_agreement,
    select_answer,
)

T, F = True, False


def test_majority_group_defines_the_trusted_tests():
    # Candidates 0-2 agree (pass t0, t1, t2); candidate 3 passes t0 and t3 only. Test t3 was
    # written to the outlier's behaviour and contradicts the consensus.
    passes = [[T, T, T, F], [T, T, T, F], [T, T, T, F], [T, F, F, T]]
    trust = dual_agreement(passes)
    assert trust.survived == (T, T, T, F)
    assert trust.reasons == (None, None, None, CONTRADICTS_CONSENSUS)
    assert trust.consensus == (0, 1, 2) and trust.score == 9


def test_test_no_candidate_passes_is_discarded():
    trust = dual_agreement([[T, F], [T, F]])
    assert trust.survived == (T, F) and trust.reasons[1] == NO_CANDIDATE_PASSES


def test_more_tests_can_outweigh_more_candidates():
    # CodeT score = |group| * |tests passed|: one answer passing 5 tests (5) beats two answers
    # passing only t0 (2); t0 stays trusted because the winning group passes it too.
    passes = [[T, T, T, T, T], [T, F, F, F, F], [T, F, F, F, F]]
    trust = dual_agreement(passes)
    assert trust.consensus == (0,) and all(trust.survived)


def test_tie_between_disagreeing_groups_trusts_only_common_tests():
    # Two answers, each passes its own author's tests and the shared t0: no way to tell which
    # behaviour is right, so only t0 survives; the rest are marked no_consensus.
    passes = [[T, T, T, F, F], [T, F, F, T, T]]
    trust = dual_agreement(passes)
    assert trust.survived == (T, F, F, F, F)
    assert trust.reasons[1:] == (NO_CONSENSUS,) * 4
    assert trust.consensus == (0, 1)


def test_tie_without_common_tests_leaves_no_tests():
    trust = dual_agreement([[T, F], [F, T]])
    assert trust.survived == (F, F) and trust.reasons == (NO_CONSENSUS, NO_CONSENSUS)


def test_nothing_passes_and_no_candidates():
    assert dual_agreement([[F, F], [F, F]]).reasons == (NO_CANDIDATE_PASSES,) * 2
    assert dual_agreement([], n_tests=2).survived == (F, F)
    with pytest.raises(ValueError, match="n_tests"):
        dual_agreement([])
    with pytest.raises(ValueError, match="3 pass flags"):
        dual_agreement([[T, T, T], [T]])


def _brute_force(passes):
    """Reference: score every candidate subset that passes an identical test set."""
    n_c, n_t = len(passes), len(passes[0])
    best, winners = 0, []
    for size in range(1, n_c + 1):
        for subset in itertools.combinations(range(n_c), size):
            sets = {frozenset(t for t in range(n_t) if passes[c][t]) for c in subset}
            if len(sets) != 1:
                continue
            common = next(iter(sets))
            # maximal groups only: every candidate with this exact set
            if any(frozenset(t for t in range(n_t) if passes[c][t]) == common
                   for c in range(n_c) if c not in subset):
                continue
            score = size * len(common)
            if score > best:
                best, winners = score, [common]
            elif score == best and score > 0:
                winners.append(common)
    trusted = frozenset.intersection(*winners) if winners else frozenset()
    return tuple(t in trusted for t in range(n_t)), best


@pytest.mark.parametrize("seed", range(40))
def test_matches_brute_force(seed):
    rng = random.Random(seed)
    n_c, n_t = rng.randint(1, 5), rng.randint(1, 6)
    passes = [[rng.random() < 0.6 for _ in range(n_t)] for _ in range(n_c)]
    survived, score = _brute_force(passes)
    trust = dual_agreement(passes)
    assert (trust.survived, trust.score) == (survived, score)


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
