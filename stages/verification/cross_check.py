"""Which tests of one instruction to trust, from every kind of evidence (pure; no execution).

Evidence, strongest first, for a written test:

* ``contradicts_augmentation`` (not trusted): a majority of candidates returned another value
  for the same call on a generated input;
* ``candidate_pass``: CodeT dual agreement over the candidates' pass/fail table
  (``arenaforge.stages.arena.selection.dual_agreement``);
* ``author_agreement``: another author expects the same value for the same call
  (``arenaforge.stages.verification.test_split.author_agreement``), whether or not any candidate passes it;
* ``augmentation``: it expects the value a majority of candidates returned on that call.

A generated input becomes an ``augmented`` test (``trusted_by = majority``) when a majority of
independent candidates return the same literal value (``arenaforge.stages.verification.augment.majority``); the
minority is recorded in ``contradicted``. Surviving written tests are then split visible/hidden
(``arenaforge.stages.verification.test_split.split_tests``); augmented tests are always hidden.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from arenaforge.stages.arena.selection import dual_agreement
from arenaforge.stages.verification.augment import Agreement, Outcome, majority
from arenaforge.stages.verification.test_split import (
    HIDDEN,
    assertion_source,
    author_agreement,
    compares_floats,
    reprs_agree,
    split_tests,
)

CANDIDATE_PASS, AUTHOR_AGREEMENT, AUGMENTATION, MAJORITY = (
    "candidate_pass", "author_agreement", "augmentation", "majority")
TRUSTED_BY = (CANDIDATE_PASS, AUTHOR_AGREEMENT, AUGMENTATION, MAJORITY)
CONTRADICTS_AUGMENTATION = "contradicts_augmentation"
NO_MAJORITY, AGREED_NO_VALUE, NOT_LITERAL = "no_majority", "agreed_no_value", "not_literal"


def judge_augmented(row: dict, outcomes: Mapping[str, Outcome]) -> Agreement:
    """Fill an augmented row (``call`` set) from the candidates' outcomes on its input."""
    vote = majority(outcomes)
    row["raw"] = json.dumps({m: o.as_text() for m, o in sorted(outcomes.items())})
    row["contradicted"] = list(vote.contradicted)
    row["passed_by"] = list(vote.agreed) if vote.assertable else []
    if vote.assertable:
        row.update(survived=True, reason=None, trusted_by=MAJORITY, split=HIDDEN,
                   expected=vote.outcome.detail,
                   test_code=assertion_source(row["call"], vote.outcome.detail))
    else:
        reason = (NO_MAJORITY if vote.outcome is None else
                  NOT_LITERAL if vote.outcome.kind == "value" else AGREED_NO_VALUE)
        row.update(survived=False, reason=reason, trusted_by=None, split=None, expected=None)
    return vote


def judge_written(rows: Sequence[dict], models: Sequence[str], passes: Sequence[Sequence[bool]],
                  agreed: Mapping[str, str], seed: int, instruction_id: str,
                  duplicates: Sequence[dict] = ()) -> None:
    """Mark ``survived, reason, trusted_by, split, passed_by, consensus`` on the written rows.

    Args:
        rows: the instruction's non-duplicate written test rows, in order (``call`` and
            ``expected`` set where the test has that shape, ``author`` on each).
        models: the candidates' models; ``passes[c][t]``: candidate ``c`` passed test ``t``.
        agreed: normalised call -> the value a majority returned (assertable augmented inputs).
        duplicates: rows whose text repeats an earlier test: not run, but another author
            writing the same test is that author's agreement.
    """
    trust = dual_agreement(passes, n_tests=len(rows))
    consensus = [models[c] for c in trust.consensus]
    by_authors = author_agreement([(r["author"], r["call"], r["expected"])
                                   for r in (*rows, *duplicates)])
    for t, row in enumerate(rows):
        row.update(consensus=consensus,
                   passed_by=[models[c] for c in range(len(models)) if passes[c][t]])
        value = agreed.get(row["call"]) if row["call"] is not None else None
        if value is not None and not reprs_agree(row["expected"], value):
            row.update(survived=False, reason=CONTRADICTS_AUGMENTATION, trusted_by=None)
        elif trust.survived[t]:
            row.update(survived=True, reason=None, trusted_by=CANDIDATE_PASS)
        elif by_authors[t]:
            row.update(survived=True, reason=None, trusted_by=AUTHOR_AGREEMENT)
        elif value is not None:
            row.update(survived=True, reason=None, trusted_by=AUGMENTATION)
        else:
            row.update(survived=False, reason=trust.reasons[t], trusted_by=None)
        if row["trusted_by"] in (AUTHOR_AGREEMENT, AUGMENTATION) and compares_floats(
                row["expected"]):
            # trusted on values that agree within isclose: graded with the same tolerance (an
            # exact `== 0.999` that no answer can meet was trusted, and failed everything)
            row["test_code"] = assertion_source(row["call"], row["expected"])
    kept = [r for r in rows if r["survived"]]
    for row, split in zip(kept, split_tests(seed, instruction_id, len(kept))):
        row["split"] = split
    for row in rows:
        if not row["survived"]:
            row["split"] = None
