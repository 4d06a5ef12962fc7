"""Grading an answer against its instruction's suite, in any language: binding, both gates,
counts per split, one ``Graded`` that verify, repair and emit read alike.

``grade_any`` is the entry point: each item's ``(language, task_kind)`` picks how its answer runs.

A Python function (``grade``): bind it to the entry point
(``arenaforge.stages.verification.entry_points``), run the trusted tests (visible, hidden,
augmented; assert text) and two probe tests (the bound name is callable after the solution
loads; the instruction's example) in one sandbox suite job per answer, and fold the results into
a ``Graded``: the overall verdict (status ``no_entry_point`` when nothing binds, never a logic
failure), passed/total per split, the first visible failure (the only one repair may show) and
a count of hidden failures, the probe gate and the program gate (the hidden + augmented tests).
The probe tests run after the graded ones, so fail-fast still costs a looping answer one
timeout; the few answers whose probes were skipped that way get them in a second batch. An
answer the ``tests`` stage already ran, and that passed every trusted test there, is graded
from that run without a sandbox job when ``recorded`` says so
(``arenaforge.stages.verification.recorded_runs``).

Every other task (``grade_programs``): its tests are cases as data (``test_code`` JSON,
``arenaforge.stages.verification.cases``), its suite's ``signature`` the function's types in
Python notation (none for a program), its ``example`` the instruction's own case. An
instruction without trusted tests runs nothing (``_untested``: its probe gate reads the code, as
there is no case to build a harness from). Each answer is one sandbox job in its own language
(``function_job`` / ``program_job``: compiled once, every case in one sandbox call); the example
runs first, as the probe, then every trusted test in split order. Each case's run is turned
into the ``ExecResult`` words of a suite job (a wrong value or output is ``failed``, error class
``assertion``; a call that raised or a program that exited non-zero is ``error``, class
``runtime``), so that the verdict, the counts per split, the probe gate and the program gate
are folded by the same code (``_fold``). An answer that does not compile is the answer's
failure: status ``error``, error class ``compile_error`` (counted apart by verify), probe gate
``no_code`` as a Python answer that does not parse; it is never a harness failure. The binding
rule is ``instruction`` or ``same_name`` for a function (the harness calls the entry point by
its name) and ``program`` for a program. The ``tests`` stage's run of an answer is reused here
exactly as for a Python function (``recorded``): an answer that compiled and passed every
trusted case there is not compiled and run again.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from arenaforge.pipeline.sandbox.result import ExecResult
from arenaforge.pipeline.statuses import (
    ANSWERS_DISAGREE,
    COMPILE_ERROR,
    CONTRADICTORY_TESTS,
    ERROR,
    FAILED,
    MEMORY,
    NO_ENTRY_POINT,
    NO_TESTS,
    OK,
    OUTPUT_LIMIT,
    PASSED,
    TIMEOUT,
    WRONG_ANSWER,
)
from arenaforge.stages.common.task_kinds import PROGRAM, PYTHON, uses_python_path
from arenaforge.stages.verification.cases import case_of_text
from arenaforge.stages.verification.entry_points import INSTRUCTION, SAME_NAME, Binding, bound_code
from arenaforge.stages.verification.execution import (
    Verdict,
    _compile_error,
    execute_results,
    summarize,
)
from arenaforge.stages.verification.harness.jobs import function_job, program_job
from arenaforge.stages.verification.harness.jobs import grade as grade_cases
from arenaforge.stages.verification.harness.types import parse_signature
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
from arenaforge.stages.verification.stated_outputs import CONTRADICTED, with_stated_outputs
from arenaforge.stages.verification.stated_outputs import LANGUAGES as STATED_OUTPUT_LANGUAGES
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
            out[i] = _reused(_fold(suite, binding, run.results(suite)), run)
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


def _reused(g: Graded, run: RecordedRun) -> Graded:
    return dataclasses.replace(
        g, reused=True, verdict=dataclasses.replace(g.verdict, duration_s=run.duration_s))


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

PROGRAM_RULE = "program"  # a whole program's binding: nothing to bind, it runs as a whole
COMPILE_ERROR_CLASS = COMPILE_ERROR  # the error class of an answer that did not compile
HARNESS_ERROR = "harness"  # the suite's cases cannot be rendered in the answer's language
_TAIL = 2000  # characters of a run's output kept in the verdict

# a case's run status as the Python path's execution status and error class
_STATUS = {OK: (PASSED, None), WRONG_ANSWER: (FAILED, None), TIMEOUT: (TIMEOUT, "timeout"),
           MEMORY: (MEMORY, "memory"), OUTPUT_LIMIT: (OUTPUT_LIMIT, "output_limit")}


def binding_of(suite: Suite, kind: str) -> Binding:
    """How the harness reaches the answer: by the entry point's own name (or as a program)."""
    entry = suite.entry_point or ""
    if kind == PROGRAM:
        return Binding(entry, entry, PROGRAM_RULE)
    return Binding(entry, entry, INSTRUCTION if suite.from_instruction else SAME_NAME)


def harness_program(code: str, suite: Suite, language: str, kind: str) -> tuple[str, Binding]:
    """What the harness runs for an answer, and how it reaches the entry point: a Python
    function is bound as ``grade`` binds it (``entry_points.bind``: an answer that names the
    function otherwise gets an alias appended; the harness calls the entry point's name); any
    other task runs as written, reached by the entry point's own name (``binding_of``)."""
    if language == PYTHON and kind != PROGRAM:
        binding = suite.bind(code)
        return (bound_code(code, binding) if binding.bound_function else code), binding
    return code, binding_of(suite, kind)


def grade_programs(pool: Any, items: Sequence[tuple[str | None, Suite | None, str, str]], *,
                   timeout_s: float, memory_mb: int | None = None, fail_fast: bool = True,
                   recorded: Sequence[RecordedRun | None] | None = None) -> list[Graded]:
    """Grade each ``(code, suite, language, task_kind)`` (one sandbox job per answer, all in
    one batch); what ``grading.grade`` is for a Python function, ``recorded`` included: an
    answer whose ``tests``-stage run covers its suite is graded from that run."""
    out: list[Graded | None] = [None] * len(items)
    jobs, where = [], []
    for i, (code, suite, lang, kind) in enumerate(items):
        suite = _decisive(suite)  # a contradictory suite's tests decide nothing
        if not code or not code.strip():
            out[i] = _not_run(suite, Verdict(ERROR, 0, 0, "no_code", "the answer has no code"))
            continue
        if suite is None or suite.entry_point is None:
            out[i] = _not_run(suite, None)
            continue
        program, binding = harness_program(code, suite, lang, kind)
        texts = [*([suite.example] if suite.example else []), *suite.graded]
        if not texts:
            out[i] = _untested(suite, code, lang, kind, binding)
            continue
        run = recorded[i] if recorded is not None else None
        if run is not None and run.covers(suite, program, timeout_s=timeout_s,
                                          memory_mb=memory_mb):
            out[i] = _reused(_fold(suite, binding, run.results(suite)), run)
            continue
        try:
            cases = [case_of_text(kind, t) for t in texts]
            limits = {"timeout_s": timeout_s, "memory_mb": memory_mb, "fail_fast": fail_fast}
            job = (program_job(lang, program, cases, **limits) if kind == PROGRAM else
                   function_job(lang, program, parse_signature(suite.signature or ""), cases,
                                **limits))
        except (ValueError, TypeError, KeyError) as exc:  # UnsupportedType, CaseError, JSON
            out[i] = dataclasses.replace(
                _not_run(suite, None),
                verdict=Verdict(ERROR, 0, len(suite.graded), HARNESS_ERROR, str(exc)))
            continue
        jobs.append(job)
        where.append((i, suite, binding, cases))
    results = pool.run_programs(jobs) if jobs else []
    for (i, suite, binding, cases), result in zip(where, results):
        out[i] = _graded(suite, binding, cases, result)
    return out  # type: ignore[return-value]


def _untested(suite: Suite, code: str, lang: str, kind: str, binding: Binding) -> Graded:
    """An instruction without a trusted test runs nothing (no case to build a harness from):
    the verdict is ``no_tests`` (``contradictory_tests`` for such a suite) and the probe gate
    reads the code: a function task's answer must define the entry point (a Python answer:
    bind to it)."""
    from arenaforge.stages.common.code_extract import function_names

    bound = kind == PROGRAM or (binding.bound_function is not None if lang == PYTHON
                                else suite.entry_point in function_names(code, lang))
    gate = probe_gate(has_code=True, bound=bound, signature_ok=True, loads=True,
                      example_ok=None)
    if not bound:
        binding = dataclasses.replace(binding, bound_function=None, rule=None)
    return dataclasses.replace(_not_run(suite, None), binding=binding, probe_gate=gate,
                               program_gate=PROGRAM_NO_TESTS)


def _graded(suite: Suite, binding: Binding, cases: list, result: Any) -> Graded:
    n = len(suite.graded)
    if result.sandbox_fault is not None:
        fault = Verdict(ERROR, 0, n, "sandbox", result.sandbox_fault)
        return dataclasses.replace(_not_run(suite, None), verdict=fault)
    if not result.compile.ok:
        first = next((line.strip() for line in result.compile.stderr.splitlines()
                      if "error" in line.lower()), "")
        message = "; ".join(x for x in (result.compile.message or "the program did not compile",
                                         first[:300]) if x)
        bad = Verdict(ERROR, 0, n, COMPILE_ERROR_CLASS, message,
                      stdout_tail=result.compile.stdout[-_TAIL:],
                      stderr_tail=result.compile.stderr[-_TAIL:],
                      duration_s=result.compile.wall_s)
        return _not_run(suite, bad)
    runs = [None if run is None else exec_result(run, verdict)
            for run, verdict in zip(result.runs, grade_cases(cases, result))]
    example = runs[:1] if suite.example else []
    graded = runs[len(example):]
    folded = _fold(suite, binding, [*graded, loaded(result), *example])
    wall = result.compile.wall_s + sum(r.duration_s for r in runs if r is not None)
    return dataclasses.replace(folded, verdict=dataclasses.replace(folded.verdict,
                                                                   duration_s=wall))


def loaded(result: Any) -> ExecResult:
    """The first probe of a compiled answer's run: it loaded, unless its process ended before
    the harness's first call (a Python module, or a JavaScript file, that raised on import:
    probe verdict ``import_error``, as on the Python path)."""
    first = result.runs[0] if result.runs else None
    if first is not None and not first.started:
        return ExecResult(ERROR, error_type="runtime", error_message=first.message,
                          duration_s=result.compile.wall_s)
    return ExecResult(PASSED, duration_s=result.compile.wall_s)


def exec_result(run: Any, verdict: Any) -> ExecResult:
    """One case's run in a suite job's words (``ExecResult``): what the probe gate, the
    verdict and ``recorded_runs`` read."""
    status, error_type = _STATUS.get(verdict.status, (ERROR, "runtime"))
    message = verdict.message if verdict.status != OK else None
    error_name = None
    if status == ERROR and run.message:
        error_name = run.message.strip().split(":", 1)[0].split()[0] or None
    return ExecResult(status, error_type=error_type, error_name=error_name,
                      error_message=message, stdout_tail=(run.stdout or "")[-_TAIL:],
                      stderr_tail=(run.stderr or "")[-_TAIL:], duration_s=run.wall_s,
                      exit_code=run.exit_code)


def grade_any(pool: Any, items: Sequence[tuple[str | None, Suite | None]],
              tasks: Sequence[tuple[str, str]], *, timeout_s: float,
              memory_mb: int | None = None, fail_fast: bool = True,
              recorded: Sequence[RecordedRun | None] | None = None,
              stated_outputs_at: float | None = None) -> list[Graded]:
    """``grade`` for the Python functions among ``items``, ``grade_programs`` for the others
    (both graded from ``recorded`` runs where those cover the suite); ``tasks``: each item's
    ``(language, task_kind)``. With ``stated_outputs_at`` (a ``min_pass_fraction``), each
    function answer verified at it, in a language whose demos are read
    (``stated_outputs.LANGUAGES``), also runs its own demo, whose stated outputs must hold
    (``stated_outputs.with_stated_outputs``: what verify and repair decide by)."""
    python = [i for i, task in enumerate(tasks) if uses_python_path(*task)]
    others = [i for i, task in enumerate(tasks) if not uses_python_path(*task)]
    out: list[Graded | None] = [None] * len(items)
    if python:
        done = grade(pool, [items[i] for i in python], timeout_s=timeout_s, memory_mb=memory_mb,
                     fail_fast=fail_fast,
                     recorded=None if recorded is None else [recorded[i] for i in python])
        for i, g in zip(python, done):
            out[i] = g
    if others:
        done = grade_programs(pool, [(*items[i], *tasks[i]) for i in others],
                              timeout_s=timeout_s, memory_mb=memory_mb, fail_fast=fail_fast,
                              recorded=None if recorded is None else [recorded[i] for i in others])
        for i, g in zip(others, done):
            out[i] = g
    demos = [i for i, (lang, kind) in enumerate(tasks)
             if lang in STATED_OUTPUT_LANGUAGES and kind != PROGRAM]
    if stated_outputs_at is not None and demos:
        done = with_stated_outputs(pool, [items[i][0] for i in demos], [out[i] for i in demos],
                                   [out[i].verified(stated_outputs_at) for i in demos],
                                   timeout_s=timeout_s, memory_mb=memory_mb,
                                   languages=[tasks[i][0] for i in demos])
        for i, g in zip(demos, done):
            out[i] = g
    return out  # type: ignore[return-value]


def language_stats(rows: Sequence[dict], grades: Sequence[Graded],
                   tasks: Sequence[tuple[str, str]], min_pass_fraction: float
                   ) -> dict[str, float]:
    """Counts of the answers that are not Python functions (none when there are none):
    ``language.<id>.<kind>.tested`` (answers whose instruction has trusted tests),
    ``.verified`` and ``.compile_errors``, and ``compile_errors`` (``compile_errors.<model>``):
    a compile error is the answer's failure, counted apart from the others."""
    stats: dict[str, float] = defaultdict(float)
    for row, g, (lang, kind) in zip(rows, grades, tasks):
        if uses_python_path(lang, kind):
            continue
        key = f"language.{lang}.{kind}"
        stats[f"{key}.answers"] += 1
        if g.verdict.status == NO_TESTS:
            continue
        stats[f"{key}.tested"] += 1
        stats[f"{key}.verified"] += g.admission(min_pass_fraction) == VERIFIED
        compiled_not = g.verdict.error_class == COMPILE_ERROR_CLASS
        stats[f"{key}.compile_errors"] += compiled_not
        stats["compile_errors"] += compiled_not
        stats[f"compile_errors.{row['model']}"] += compiled_not
    return dict(stats)
