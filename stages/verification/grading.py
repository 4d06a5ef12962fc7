"""Grading one answer against its instruction's suite: binding, both gates, counts per split.

``grade`` is what verify and repair run for an answer: bind it to the entry point
(``arenaforge.stages.verification.entry_points``), run the trusted tests (visible, hidden, augmented) and two probe
tests (the bound name is callable after the solution loads; the instruction's example) in one
sandbox suite job per answer, and fold the results into a ``Graded``: the overall verdict (status
``no_entry_point`` when nothing binds, never a logic failure), passed/total per split, the
first visible failure (the only one repair may show) and a count of hidden failures, the probe
gate and the program gate (the hidden + augmented tests).

The probe tests run after the graded ones, so fail-fast still costs a looping answer one
timeout; the few answers whose probes were skipped that way get them in a second batch.

An answer the ``tests`` stage already ran, and that passed every trusted test there, is graded
from that run without a sandbox job when ``recorded`` says so (``arenaforge.stages.verification.recorded_runs``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from arenaforge.pipeline.statuses import (
    ANSWERS_DISAGREE,
    CONTRADICTORY_TESTS,
    NO_ENTRY_POINT,
    NO_TESTS,
    PASSED,
)
from arenaforge.stages.verification.entry_points import Binding, bound_code
from arenaforge.stages.verification.execution import (
    Verdict,
    _compile_error,
    execute_results,
    summarize,
)
from arenaforge.stages.verification.probe_gate import (
    EXAMPLE_FAILED,
    NO_USABLE_CODE,
    PASS,
    PROGRAM_FAIL,
    PROGRAM_NO_TESTS,
    PROGRAM_PASS,
    probe_gate,
)
from arenaforge.stages.verification.recorded_runs import RecordedRun
from arenaforge.stages.verification.stated_outputs import CONTRADICTED
from arenaforge.stages.verification.stated_outputs import NONE as NO_STATED_OUTPUT
from arenaforge.stages.verification.suites import AUGMENTED, DECIDED, Suite
from arenaforge.stages.verification.test_split import HIDDEN, VISIBLE

SPLITS = (VISIBLE, HIDDEN, AUGMENTED)


@dataclasses.dataclass(frozen=True)
class Graded:
    """An answer's grade on its suite.

    Attributes:
        binding: how it was bound (``None``: the instruction has no entry point).
        verdict: over every trusted test (``suite.graded``).
        counts: ``{split: (passed, total)}`` for visible, hidden, augmented.
        visible: the verdict over the visible tests alone (``None`` when there are none).
        hidden_failed: certifying (hidden + augmented) tests not passed.
        hidden_error: the error class of the first of them.
        probe_gate, program_gate: the two gate verdicts.
        reused: graded from the ``tests`` stage's recorded run, not run again.
    """

    binding: Binding | None
    verdict: Verdict
    counts: dict[str, tuple[int, int]]
    visible: Verdict | None
    hidden_failed: int
    hidden_error: str | None
    probe_gate: str
    program_gate: str
    reused: bool = False
    suite_status: str = DECIDED
    stated_outputs: str = NO_STATED_OUTPUT  # the demo's stated outputs (``stated_outputs``)
    stated_output_mismatch: str | None = None
    example_only: bool = False  # the suite is the instruction's example alone (``Suite``)

    def admission(self, min_pass_fraction: float = 1.0) -> str:
        """Where execution stops the answer, first that applies (``ADMISSION_STEPS``):
        ``contradictory_tests``, ``no_tests``, ``no_usable_code`` (probe verdict ``no_code``,
        ``no_entry_point``, ``signature_mismatch`` or ``import_error``), ``answers_disagree``
        (two programs' readings stand against each other and nothing decides: no answer of the
        instruction can be verified, so none is repaired), ``example_failed`` (the
        instruction's own example: a hard test), ``no_tests`` again for an answer that passes a
        suite of the example alone (one call verifies nothing), ``below_pass_fraction`` (fewer
        than ``min_pass_fraction`` of the trusted tests passed; at 1.0: any test failed),
        ``false_stated_output`` (it passes, but its own demo states
        an output the program does not print: ``stated_outputs``), else ``verified``."""
        v = self.verdict
        if v.status == CONTRADICTORY_TESTS:
            return CONTRADICTORY_TESTS
        if self.probe_gate in NO_USABLE_CODE:
            return UNUSABLE
        if v.status == NO_TESTS or not v.tests_total:
            return NO_TESTS
        if self.suite_status == ANSWERS_DISAGREE:  # first: no repair can get past it
            return ANSWERS_DISAGREE
        if self.probe_gate == EXAMPLE_FAILED:
            return EXAMPLE_FAILED
        if self.example_only:
            return NO_TESTS
        enough = (v.status == PASSED if min_pass_fraction >= 1.0
                  else v.tests_passed >= min_pass_fraction * v.tests_total)
        if not enough or self.probe_gate != PASS:
            return BELOW_PASS_FRACTION
        return FALSE_STATED_OUTPUT if self.stated_outputs == CONTRADICTED else VERIFIED

    def verified(self, min_pass_fraction: float = 1.0) -> bool:
        """Accepted by execution (``admission`` is ``verified``)."""
        return self.admission(min_pass_fraction) == VERIFIED


VERIFIED, BELOW_PASS_FRACTION, UNUSABLE = "verified", "below_pass_fraction", "no_usable_code"
FALSE_STATED_OUTPUT = "false_stated_output"
ADMISSION_STEPS = (CONTRADICTORY_TESTS, UNUSABLE, NO_TESTS, ANSWERS_DISAGREE, EXAMPLE_FAILED,
                   BELOW_PASS_FRACTION, FALSE_STATED_OUTPUT, VERIFIED)
# the steps where a selected answer goes back to its author with execution feedback
REPAIRABLE = (UNUSABLE, EXAMPLE_FAILED, BELOW_PASS_FRACTION)


def probes(suite: Suite) -> list[str]:
    """The probe tests: the bound name is callable once the solution loads; the instruction's
    own example, when it has one."""
    return [f"assert callable({suite.entry_point})", *([suite.example] if suite.example else [])]


def grade(pool: Any, items: Sequence[tuple[str | None, Suite | None]], *, timeout_s: float,
          memory_mb: int | None = None, fail_fast: bool = True,
          recorded: Sequence[RecordedRun | None] | None = None) -> list[Graded]:
    """Grade each ``(code, suite)`` (one sandbox suite job per answer, all in one batch).

    ``recorded``: per item, the ``tests`` stage's run of that answer (or None); an answer whose
    run covers its suite under these limits (``RecordedRun.covers``) is graded from it.
    """
    # a contradictory suite's tests decide nothing: only its probes run (both gates)
    items = [(code, _decisive(suite)) for code, suite in items]
    out: list[Graded | None] = [None] * len(items)
    jobs, where = [], []
    for i, (code, suite) in enumerate(items):
        bad = _compile_error(code)
        if suite is None or suite.entry_point is None or bad is not None:
            out[i] = _not_run(suite, bad)
            continue
        binding = suite.bind(code)
        run_code = bound_code(code, binding) if binding.bound_function else code
        run = recorded[i] if recorded is not None else None
        if run is not None and binding.bound_function is not None and run.covers(
                suite, run_code, timeout_s=timeout_s, memory_mb=memory_mb):
            g = _fold(suite, binding, run.results(suite))
            out[i] = dataclasses.replace(
                g, reused=True, verdict=dataclasses.replace(g.verdict, duration_s=run.duration_s))
            continue
        jobs.append((run_code, [*suite.graded, *probes(suite)]))
        where.append((i, binding))
    results = execute_results(pool, jobs, timeout_s=timeout_s, memory_mb=memory_mb,
                              fail_fast=fail_fast) if jobs else []
    # probes skipped by fail-fast (the first graded test timed out): run them on their own
    skipped = [k for k, r in enumerate(results) if isinstance(r, list) and r and r[-1] is None]
    if skipped:
        n = {k: len(items[where[k][0]][1].graded) for k in skipped}
        again = execute_results(pool, [(jobs[k][0], jobs[k][1][n[k]:]) for k in skipped],
                                timeout_s=timeout_s, memory_mb=memory_mb, fail_fast=False)
        for k, r in zip(skipped, again):
            if isinstance(r, list):
                results[k] = [*results[k][:n[k]], *r]
    for (i, binding), r in zip(where, results):
        out[i] = _fold(items[i][1], binding, r)
    return out  # type: ignore[return-value]


def _not_run(suite: Suite | None, bad: Verdict | None) -> Graded:
    n = len(suite.graded) if suite is not None else 0
    counts = {s: (0, len(getattr(suite, s) if suite else ())) for s in SPLITS}
    if suite is not None and suite.contradictory:
        verdict = Verdict(CONTRADICTORY_TESTS, 0, 0, CONTRADICTORY_TESTS, suite.detail)
    elif bad is not None and n:
        verdict = dataclasses.replace(bad, tests_total=n)
    else:
        verdict = Verdict(NO_TESTS, 0, 0)
    certifying = len(suite.certifying) if suite is not None else 0
    return Graded(None, verdict, counts, None, certifying, bad.error_class if bad else None,
                  probe_gate(has_code=bad is None, bound=False, signature_ok=False, loads=False,
                             example_ok=None),
                  PROGRAM_FAIL if certifying and bad is not None else PROGRAM_NO_TESTS,
                  suite_status=suite.status if suite is not None else DECIDED)


def _decisive(suite: Suite | None) -> Suite | None:
    if suite is None or not suite.contradictory:
        return suite
    return dataclasses.replace(suite, visible=(), hidden=(), augmented=())


def _fold(suite: Suite, binding: Binding, results: Verdict | list[Any]) -> Graded:
    if isinstance(results, Verdict):  # cannot happen: there is always a probe test
        return _not_run(suite, results)
    n = len(suite.graded)
    graded, probes = results[:n], results[n:]
    verdict = summarize(suite.graded, graded) if n else Verdict(NO_TESTS, 0, 0)
    if suite.contradictory:
        verdict = Verdict(CONTRADICTORY_TESTS, 0, 0, CONTRADICTORY_TESTS, suite.detail)
    if n and binding.bound_function is None:
        verdict = dataclasses.replace(verdict, status=NO_ENTRY_POINT, error_class=NO_ENTRY_POINT)
    counts, start = {}, 0
    for split in SPLITS:
        part = graded[start:start + len(getattr(suite, split))]
        counts[split] = (sum(r is not None and r.passed for r in part), len(part))
        start += len(part)
    n_visible = len(suite.visible)
    visible = summarize(suite.visible, graded[:n_visible]) if n_visible else None
    certifying = graded[n_visible:]
    failing = [r for r in certifying if r is None or not r.passed]
    hidden_error = None
    if failing:
        first = failing[0]
        hidden_error = "timeout" if first is None else (
            "assertion" if first.status == "failed" else (first.error_type or first.status))
        if first is not None and first.error_name and hidden_error == "runtime":
            hidden_error = f"runtime ({first.error_name})"
    loads = bool(probes) and probes[0] is not None and probes[0].passed
    example_ok = None
    if suite.example:
        example_ok = len(probes) > 1 and probes[1] is not None and probes[1].passed
    gate = probe_gate(has_code=True, bound=binding.bound_function is not None,
                      signature_ok=binding.fits, loads=loads, example_ok=example_ok)
    if not certifying:
        program = PROGRAM_NO_TESTS
    else:
        program = PROGRAM_FAIL if failing or binding.bound_function is None else PROGRAM_PASS
    return Graded(binding, verdict, counts, visible, len(failing), hidden_error, gate, program,
                  suite_status=suite.status, example_only=suite.example_only)



