"""Which expectations of one instruction to trust, by evidence (pure; no execution).

A verified answer must be right for its instruction, so a test is never dropped because the
answers fail it: a test that no answer passes is evidence *against* the answers. A test is
dropped only for a reason about the test itself, and every trusted expectation records the
evidence it stands on (``trusted_by``) and how strong that is (``strength``):

========================  ========  ===============================================================
``trusted_by``            strength  the evidence
========================  ========  ===============================================================
``example``               4         the instruction's own worked example (``f(2) returns 4``)
``authors_agree``         3         two or more authors (rule 2) expect the same value for one call
``independent_author``    2         written by an author who answered none of the answers
``written+passer``        2         written by a contestant, passed by another program (rule 2)
``written``               1         written by a contestant, confirmed by no other model
``majority``              1         generated input: independent answers return the same value
========================  ========  ===============================================================

Rules, in order (``weigh``):

1. **The example is a hard test.** A written test that expects another value for the example's
   call is dropped (``contradicts_example``), and so is every other test of its author
   (``author_contradicts_example``): that author misread the task. So are the tests of an author
   whose own answer fails the example while passing every test the author wrote: its tests
   encode the misreading its answer shows. (An author whose answer fails its own tests keeps
   them: they may be right where its code is not.)
2. **A majority is evidence only among independent, consistent answers.** Answers are
   independent when they are different programs (``program_key``: the same code up to
   formatting, comments, docstrings and a ``__main__`` demo is one program, whichever models
   wrote it); two experts that emit the same wrong program are one vote. An independent
   majority is an outcome that at least two different programs, and more than half of the
   programs present, share. Authors are one voice the same way: two authors whose answers are
   one program confirm nothing for each other, neither by writing the same test
   (``authors_agree``) nor by passing each other's (``written+passer``); they share one
   reading of the task, right or wrong.
3. **Answers overrule only an author's slip, never an author's reading.** Agreement of the
   answers is evidence about the answers' readings, not about what an author wrote down. A
   test no stronger than one author's (strength 2 or less) that the answers passing every
   other trusted test and the example contradict, as an independent majority, on its call is
   dropped (``contradicts_majority``) only when its author's own answer is one of that
   majority: the author's program disagrees with the author's test, a slip in writing it down.
   When the author stands by its value (its own answer returns it, or fails another way, or
   the author wrote no answer), the test is one reading against the majority's, and a
   majority of wrong programs would otherwise drop the only right author's tests; nothing but
   stronger evidence settles that, so the instruction is ``answers_disagree``, unless a
   stronger trusted test on the same call (the example, two authors) decides it (rule 4).
   Tests two authors agree on, and the example, are never overruled by answers.
4. **Direct contradictions.** When trusted written tests expect different values for the same
   call, the value with strictly the strongest *authors* stays and the others are dropped
   (``contradicts_stronger``); when no value is strictly strongest the instruction is
   ``contradictory_tests`` and is never used to accept or reject an answer. A value's author
   strength is its strongest test's, counting what answers did not at all: a contestant's
   test that another program passes (``written+passer``) is one author's, as ``written`` is,
   and how many answers return a value adds nothing. Answers that agree with one author are
   evidence about their readings, and two wrong programs agreeing with a wrong author would
   otherwise outvote the one right author on the same call.
5. **A suite that no answer passes is examined.** When every test is passed by some answer but
   no answer passes them all, the tests are grouped by author (the example a group of its own):
   two groups that some answers satisfy in full, but never together, contradict each other
   (two authors read the task two ways). Against the example the author loses (its tests are
   dropped, ``author_contradicts_example``); between two authors the instruction is
   ``contradictory_tests``. A test that no answer passes is kept: the answers are wrong, or the
   test is, and nothing here tells which, so no answer is verified.
6. **Generated inputs.** A generated input's output becomes an expectation (``majority``, hidden)
   when the answers that pass every trusted written test and the example (the voters) return
   it as an independent majority (otherwise ``no_majority``, or ``not_independent`` when the
   agreeing answers are one program); a value that contradicts a written test or the example
   on the same call is dropped (``contradicts_stronger``). When voters that are different
   programs return different values on an input and no majority decides, one side is wrong and
   nothing tells which: the instruction is ``answers_disagree`` and none of them is verified.
7. **A model does not verify itself.** When every trusted expectation is ``written`` (one
   contestant's tests, passed by no other program, with no independent majority on a
   generated input), the tests can accept only their author's own answer: that is the model
   agreeing with itself, not a check. They are dropped (``unconfirmed``). The instruction's
   example confirms such a voice only where it has told readings apart: when some answer
   fails it, the example separated the voice's reading from another one, and the voice's
   tests stand beside it. When every answer passes it, the example separated nothing (in the
   trust-world benchmark, readings that every expert shared), and the tests are dropped all
   the same. So are the trusted tests when every one of them restates an example the
   instruction states, whoever wrote them and however many authors copied them (their
   agreement is the instruction's word, not two voices): HumanEval/74 on a real run, where the
   0.5B, and with a second author the 1.5B too, copied the docstring's five examples as their
   tests, and the 0.5B's answer passed them and was wrong on the tie rule no example shows. What
   stays is the example, which still rejects; but an example alone verifies no
   answer (``Suite.example_only``), so the instruction has nothing to verify with
   (``no_tests``: only the judge-score gate can admit it).
8. **One program's reading against another's.** A test that only its author's own answer
   backs (``written``, and that answer passes it) is that program's reading, no more. When
   another program returns another value on its call, both programs consistent with every
   stronger trusted test and the example, two readings stand one voice each (the fibonacci
   of a default run: the 0.5B's tests expect its own values, SmolLM2's different program
   returns others, and the 0.5B's tests were all that sided with it); nothing tells which is
   right, so the instruction is ``answers_disagree``, as in rule 6.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
from collections import defaultdict
from collections.abc import Collection, Sequence

from arenaforge.pipeline.statuses import ANSWERS_DISAGREE, CONTRADICTORY_TESTS
from arenaforge.stages.verification.augment import Outcome
from arenaforge.stages.verification.suites import DECIDED
from arenaforge.stages.verification.test_parsing import strip_main_guard
from arenaforge.stages.verification.test_split import (
    HIDDEN,
    assertion_source,
    is_literal,
    reprs_agree,
)

EXAMPLE, AUTHORS_AGREE, INDEPENDENT_AUTHOR = "example", "authors_agree", "independent_author"
WRITTEN_PASSER, WRITTEN, MAJORITY = "written+passer", "written", "majority"
STRENGTH = {EXAMPLE: 4, AUTHORS_AGREE: 3, INDEPENDENT_AUTHOR: 2, WRITTEN_PASSER: 2, WRITTEN: 1,
            MAJORITY: 1}
# What the authors alone say for a value (rule 4): another program passing a contestant's test
# is agreement of answers, not a second author.
AUTHOR_STRENGTH = {**STRENGTH, WRITTEN_PASSER: STRENGTH[WRITTEN]}

# why a test is not trusted (the ``reason`` column); reasons about the test, never "it fails"
CONTRADICTS_EXAMPLE = "contradicts_example"
AUTHOR_CONTRADICTS_EXAMPLE = "author_contradicts_example"
CONTRADICTS_STRONGER = "contradicts_stronger"
CONTRADICTS_MAJORITY = "contradicts_majority"
NO_MAJORITY, NOT_INDEPENDENT = "no_majority", "not_independent"
NOT_LITERAL, AGREED_NO_VALUE = "not_literal", "agreed_no_value"
UNCONFIRMED = "unconfirmed"

# the instruction's verdict on its own evidence
CONTRADICTORY, DISPUTED = CONTRADICTORY_TESTS, ANSWERS_DISAGREE


def program_key(code: str | None) -> str | None:
    """What makes two answers one program: the code's syntax tree without docstrings and
    without a ``__main__`` demo block (formatting and comments never reach the tree).

    >>> program_key("def f(x):\\n    '''Doc.'''\\n    return x  # id\\n") == program_key(
    ...     "def f(x): return x\\nif __name__ == '__main__':\\n    print(f(1))\\n")
    True
    """
    if not code:
        return None
    try:
        tree = ast.parse(strip_main_guard(code))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return hashlib.sha256(code.encode()).hexdigest()[:16]
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Candidate:
    """What one answer did on the instruction's tests.

    Attributes:
        model: the answer's model.
        program: ``program_key`` of the program that ran (None: it did not run).
        written: per written test (in the order ``weigh`` receives them), passed or not
            (None: not run).
        example: passed the instruction's example (None: no example, or not run).
        inputs: per augmented row, its outcome on that input.
        calls: per written test, what the answer returned on the test's call (None: the test
            has no call shape, or it did not run).
    """

    model: str
    program: str | None
    written: tuple[bool | None, ...]
    example: bool | None
    inputs: tuple[Outcome, ...] = ()
    calls: tuple[Outcome | None, ...] = ()


@dataclasses.dataclass(frozen=True)
class Example:
    """The instruction's own example as a call and its expected value (both normalised)."""

    call: str
    expected: str


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The instruction's verdict on its evidence: ``decided``, ``contradictory_tests`` or
    ``answers_disagree``, with what contradicts what (``detail``)."""

    status: str
    detail: str | None = None


def _drop(row: dict, reason: str) -> None:
    row.update(survived=False, reason=reason, trusted_by=None, strength=None, split=None)


def _trust(row: dict, by: str) -> None:
    row.update(survived=True, reason=None, trusted_by=by, strength=STRENGTH[by])


def weigh(written: Sequence[dict], augmented: Sequence[dict], candidates: Sequence[Candidate],
          example: Example | None, duplicates: Sequence[dict] = (),
          contestants: Collection[str] | None = None,
          stated: Collection[tuple[str, str]] = ()) -> Verdict:
    """Decide trust for one instruction; updates the rows in place.

    Args:
        written: the runnable written test rows (``author``, ``call``, ``expected`` where the
            test has that shape; duplicates and unparsed tests are not among them).
        augmented: the generated-input rows (``call`` set).
        candidates: every answer that ran, with its results in the order of the rows.
        example: the instruction's example, when it states one.
        duplicates: written rows whose text repeats an earlier test (not run): another author
            writing the same test is that author's agreement.
        contestants: every model that answered the instruction (default: the candidates').
            An author whose answer did not run (no code, no entry point, a compile error) is
            still a contestant: its tests are no independent author's.
        stated: ``(call, expected)`` of every example the instruction states (``example`` is
            the first): a test that restates one is the instruction's word (rule 7).

    Sets ``survived, reason, trusted_by, strength, passed_by, contradicted, consensus`` on
    every row (and ``expected, test_code`` on trusted augmented rows).
    """
    models = {c.model for c in candidates} | set(contestants or ())
    for t, row in enumerate(written):
        row.update(reason=None, passed_by=[c.model for c in candidates if c.written[t]],
                   contradicted=[])
    discredited = {row["author"] for row in written if example is not None
                   and row["call"] == example.call and row["expected"] is not None
                   and not reprs_agree(row["expected"], example.expected)}
    discredited |= _consistent_misreaders(written, candidates)
    for row in written:
        if row["author"] in discredited:
            _drop(row, CONTRADICTS_EXAMPLE if row["call"] == getattr(example, "call", None)
                  else AUTHOR_CONTRADICTS_EXAMPLE)
    live = [t for t, r in enumerate(written) if r["reason"] is None]
    others = [*(written[u] for u in live),
              *(d for d in duplicates if d["author"] not in discredited)]
    program = {c.model: c.program for c in candidates}
    for t in live:
        _trust(written[t], _evidence(written[t], others, models, program))
    verdict = _overruled_by_answers(written, candidates)
    if verdict.status == DECIDED:
        verdict = _direct_conflicts(written)
    if verdict.status == DECIDED:
        verdict = _examine(written, candidates, example)
    voters = [c for c in candidates if _consistent(c, written, example)]
    for j, row in enumerate(augmented):
        _vote(row, j, candidates, voters, written, example)
    if verdict.status == DECIDED:
        verdict = _disputes(augmented, voters)
    told_apart = example is not None and any(c.example is False for c in candidates)
    if verdict.status == DECIDED and (
            not told_apart and _only_unconfirmed(written, augmented)
            or _only_restated(written, augmented, stated)):
        for row in written:
            if row["survived"]:
                _drop(row, UNCONFIRMED)
        voters = [c for c in candidates if _consistent(c, written, example)]
    if verdict.status == DECIDED:
        verdict = _one_voice_each(written, candidates)
    passing = sorted(c.model for c in voters if _passes_augmented(c, augmented))
    for row in (*written, *augmented):
        row["consensus"] = passing
    return verdict


def _restates(row: dict, stated: Collection[tuple[str, str]]) -> bool:
    """The test is one of the instruction's own examples, copied by its author."""
    return row["expected"] is not None and any(
        row["call"] == call and reprs_agree(row["expected"], expected) for call, expected in stated)


def _only_restated(written: Sequence[dict], augmented: Sequence[dict],
                   stated: Collection[tuple[str, str]]) -> bool:
    """Rule 7: every trusted expectation restates an example the instruction states, whoever
    wrote it and however many authors copied it: the instruction's examples alone."""
    trusted = [r for r in (*written, *augmented) if r["survived"]]
    return bool(stated) and bool(trusted) and all(_restates(r, stated) for r in trusted)


def _only_unconfirmed(written: Sequence[dict], augmented: Sequence[dict]) -> bool:
    """Rule 7: every trusted expectation is one contestant's own, confirmed by nothing else
    (``written``); the only answers such tests can accept are their author's own program."""
    trusted = [r for r in (*written, *augmented) if r["survived"]]
    return bool(trusted) and all(r["trusted_by"] == WRITTEN for r in trusted)


def _one_voice_each(written: Sequence[dict], candidates: Sequence[Candidate]) -> Verdict:
    """Rule 8: a ``written`` test its author's own answer passes, and another program returns
    another value on its call, both programs consistent with the stronger tests and the
    example (a reading a stronger test already refuted is no voice against another)."""
    by_model = {c.model: c for c in candidates}
    stronger = [u for u, r in enumerate(written)
                if r["survived"] and r["strength"] > STRENGTH[WRITTEN]]

    def standing(c: Candidate) -> bool:
        return (c.program is not None and c.example is not False
                and all(c.written[u] for u in stronger))

    for t, row in enumerate(written):
        own = by_model.get(row["author"])
        if (not row["survived"] or row["trusted_by"] != WRITTEN or not row["call"]
                or own is None or not own.written[t] or not standing(own)):
            continue
        for c in candidates:
            o = c.calls[t] if t < len(c.calls) else None
            if c.program == own.program or not standing(c) or o is None:
                continue
            if o.kind == "value" and o.exact and not reprs_agree(row["expected"], o.detail):
                return Verdict(DISPUTED, f"{row['call']}: {row['expected']} ({row['author']}) "
                                         f"vs {o.detail} ({c.model})")
    return Verdict(DECIDED)


def _consistent_misreaders(written: Sequence[dict], candidates: Sequence[Candidate]) -> set[str]:
    """Rule 1: authors whose own answer fails the instruction's example while passing every test
    the author wrote: the tests encode the same misreading as the answer. (An author whose
    answer fails its own tests is not one: its tests may be right where its code is not.)"""
    out = set()
    for c in candidates:
        if c.example is not False:
            continue
        own = [t for t, r in enumerate(written) if r["author"] == c.model]
        if own and all(c.written[t] for t in own):
            out.add(c.model)
    return out


def _evidence(row: dict, live: Sequence[dict], models: set[str],
              program: dict[str, str | None]) -> str:
    def other(model: str) -> bool:
        """Rule 2: another voice than the row's author (not the same model, and not a model
        whose answer is the same program as the author's)."""
        mine = program.get(row["author"])
        return model != row["author"] and (mine is None or program.get(model) != mine)

    if row["call"] is not None and row["expected"] is not None and any(
            other(o["author"]) and o["call"] == row["call"]
            and o["expected"] is not None and reprs_agree(o["expected"], row["expected"])
            for o in live):
        return AUTHORS_AGREE
    if any(other(o["author"]) and o["test_code"] == row["test_code"] for o in live):
        return AUTHORS_AGREE
    if row["author"] not in models:
        return INDEPENDENT_AUTHOR
    if any(other(m) for m in row["passed_by"]):
        return WRITTEN_PASSER
    return WRITTEN


def _best_group(pairs: Sequence[tuple[Candidate, Outcome]]
                ) -> tuple[list[tuple[Candidate, Outcome]], bool]:
    """The answers sharing the outcome that the most different programs share, and whether it
    is an independent majority (rule 2): at least two different programs, and more than half of
    the programs present."""
    groups: list[list[tuple[Candidate, Outcome]]] = []
    for c, o in pairs:
        same = next((g for g in groups if g[0][1].same(o)), None)
        if same is None:
            groups.append([(c, o)])
        else:
            same.append((c, o))
    programs = len({c.program for c, _ in pairs})
    best = max(groups, key=lambda g: (len({c.program for c, _ in g}), len(g)), default=[])
    distinct = len({c.program for c, _ in best})
    return best, distinct >= 2 and 2 * distinct > programs


def _overruled_by_answers(written: Sequence[dict], candidates: Sequence[Candidate]) -> Verdict:
    """Rule 3: a test no stronger than one author's (strength <= 2) that an independent
    majority of the answers passing every other trusted test contradicts on its call: dropped
    (``contradicts_majority``) when the author's own answer is of that majority (a slip), else
    the instruction is ``answers_disagree`` (the author's reading against the majority's),
    unless a stronger trusted test on the call is there to decide it (rule 4)."""
    by_model = {c.model: c for c in candidates}
    for t, row in enumerate(written):
        if not row["survived"] or row["strength"] > STRENGTH[WRITTEN_PASSER] or not row["call"]:
            continue
        others = [u for u, r in enumerate(written) if r["survived"] and u != t]
        members = [(c, c.calls[t]) for c in candidates
                   if c.program is not None and c.example is not False
                   and t < len(c.calls) and c.calls[t] is not None
                   and all(c.written[u] for u in others)]
        best, majority = _best_group(members)
        agreed = best[0][1] if majority else None
        if (agreed is None or agreed.kind != "value" or not agreed.exact
                or reprs_agree(row["expected"], agreed.detail)):
            continue
        against = sorted(c.model for c, o in members if o.same(agreed))
        own = by_model.get(row["author"])
        mine = own.calls[t] if own is not None and t < len(own.calls) else None
        if mine is not None and mine.same(agreed):
            row["contradicted"] = against
            _drop(row, CONTRADICTS_MAJORITY)
            continue
        if any(r["survived"] and r["call"] == row["call"] and r["strength"] > row["strength"]
               for r in written):
            continue  # a stronger test on the call decides between the two values (rule 4)
        return Verdict(DISPUTED, f"{row['call']}: {row['expected']} ({row['author']}'s test) "
                                 f"vs {agreed.detail} ({', '.join(against)})")
    return Verdict(DECIDED)


def _disputes(augmented: Sequence[dict], voters: Sequence[Candidate]) -> Verdict:
    """Rule 6: the answers that pass every trusted test return different values on a
    generated input and no independent majority decides: one side is wrong, nothing tells
    which, so none of them is verified."""
    for j, row in enumerate(augmented):
        if row["survived"]:
            continue
        values = {}
        for c in voters:
            o = c.inputs[j]
            if o.kind == "value":
                values.setdefault(o.detail, set()).add(c.program)
        if len(values) >= 2 and len(set().union(*values.values())) >= 2:
            shown = " vs ".join(f"{v} ({len(p)} program{'s' * (len(p) > 1)})"
                                for v, p in list(values.items())[:3])
            return Verdict(DISPUTED, f"{row['call']}: {shown}")
    return Verdict(DECIDED)


def _direct_conflicts(written: Sequence[dict]) -> Verdict:
    """Rule 4: of the values trusted tests expect for one call, the one with strictly the
    strongest authors (``AUTHOR_STRENGTH``) stays; a tie is ``contradictory_tests``."""
    by_call: dict[str, list[dict]] = defaultdict(list)
    for row in written:
        if row["survived"] and row["call"] is not None and row["expected"] is not None:
            by_call[row["call"]].append(row)
    details = []
    for call, rows in by_call.items():
        values: list[list[dict]] = []
        for row in rows:
            same = next((v for v in values if reprs_agree(v[0]["expected"], row["expected"])),
                        None)
            if same is None:
                values.append([row])
            else:
                same.append(row)
        if len(values) < 2:
            continue
        strength = [max(AUTHOR_STRENGTH[r["trusted_by"]] for r in v) for v in values]
        top = max(strength)
        if strength.count(top) > 1:
            shown = " vs ".join(f"{v[0]['expected']} ({', '.join(sorted({r['author'] for r in v}))})"
                                for v, s in zip(values, strength) if s == top)
            details.append(f"{call}: {shown}")
            continue
        for v, s in zip(values, strength):
            if s < top:
                for row in v:
                    _drop(row, CONTRADICTS_STRONGER)
    if details:
        return Verdict(CONTRADICTORY, "; ".join(details))
    return Verdict(DECIDED)


def _examine(written: Sequence[dict], candidates: Sequence[Candidate],
             example: Example | None) -> Verdict:
    """Rule 5: groups (authors, the example) that answers satisfy apart but never together."""
    while True:
        live = [t for t, r in enumerate(written) if r["survived"]]
        groups: dict[str, list[int]] = defaultdict(list)
        for t in live:
            groups[written[t]["author"]].append(t)
        names = ([EXAMPLE] if example is not None else []) + sorted(groups)
        sat = {g: {c.model for c in candidates if c.example} if g == EXAMPLE
               else {c.model for c in candidates if all(c.written[t] for t in groups[g])}
               for g in names}
        everyone = set.intersection(*sat.values()) if names else set()
        each_passed = all(any(c.written[t] for c in candidates) for t in live) and (
            example is None or any(c.example for c in candidates))
        if everyone or not each_passed or not candidates:
            return Verdict(DECIDED)
        clash = next(((a, b) for i, a in enumerate(names) for b in names[i + 1:]
                      if sat[a] and sat[b] and not sat[a] & sat[b]),
                     None)
        if clash is None:
            return Verdict(DECIDED)
        a, b = clash
        if a == EXAMPLE:
            for t in groups[b]:
                _drop(written[t], AUTHOR_CONTRADICTS_EXAMPLE)
            continue
        return Verdict(CONTRADICTORY, f"no answer satisfies both {a}'s and {b}'s tests")


def _consistent(c: Candidate, written: Sequence[dict], example: Example | None) -> bool:
    return c.program is not None and all(
        c.written[t] for t, r in enumerate(written) if r["survived"]) and (
        example is None or bool(c.example))


def _passes_augmented(c: Candidate, augmented: Sequence[dict]) -> bool:
    return all(c.inputs[j].is_exactly(r["expected"]) for j, r in enumerate(augmented)
               if r["survived"])


def _vote(row: dict, j: int, candidates: Sequence[Candidate], voters: Sequence[Candidate],
          written: Sequence[dict], example: Example | None) -> None:
    row["raw"] = json.dumps({c.model: c.inputs[j].as_text() for c in candidates},
                            sort_keys=True)
    pairs, majority = _best_group([(c, c.inputs[j]) for c in voters])
    best = [c for c, _ in pairs]
    row["contradicted"] = []
    row["passed_by"] = []
    if not majority:
        _drop(row, NOT_INDEPENDENT if len(best) >= 2 and 2 * len(best) > len(voters)
              else NO_MAJORITY)
        return
    outcome = best[0].inputs[j]
    if outcome.kind != "value":
        _drop(row, AGREED_NO_VALUE)
        return
    if not outcome.exact or not is_literal(outcome.detail):
        _drop(row, NOT_LITERAL)  # a repr that only looks like a literal is never asserted
        return
    stronger = [r["expected"] for r in written if r["survived"] and r["call"] == row["call"]]
    if example is not None and example.call == row["call"]:
        stronger.append(example.expected)
    row["expected"] = outcome.detail
    if any(not reprs_agree(e, outcome.detail) for e in stronger if e is not None):
        _drop(row, CONTRADICTS_STRONGER)
        return
    _trust(row, MAJORITY)
    row.update(split=HIDDEN, passed_by=sorted(c.model for c in best),
               contradicted=sorted(c.model for c in candidates if not c.inputs[j].same(outcome)),
               test_code=assertion_source(row["call"], outcome.detail))


def tally(stats: dict, rows: Sequence[dict], augmented: Sequence[dict],
          candidates: Sequence[Candidate], verdict: Verdict, has_example: bool,
          consensus: Sequence[str]) -> None:
    """Add one instruction's evidence to the tests stage's counters (``rows``: every test row
    of the instruction, the example's included; ``augmented``: its generated-input rows)."""
    stats["augment.inputs"] += len(augmented)
    stats["augment.agreed"] += sum(r["survived"] for r in augmented)
    for j, row in enumerate(augmented):
        outcomes = [c.inputs[j] for c in candidates]
        stats["augment.disagreed"] += any(not o.same(outcomes[0]) for o in outcomes)
        stats[f"augment.{row['reason'] or 'trusted'}"] += 1
    stats["instructions_with_example"] += has_example
    stats["contradictory_tests"] += verdict.status == CONTRADICTORY
    trusted = [r for r in rows if r["survived"]]
    stats["instructions_all_fail"] += bool(trusted) and not consensus
    for r in trusted:
        stats[f"trusted.{r['trusted_by']}"] += 1
        stats[f"split.{r['split']}"] += 1
