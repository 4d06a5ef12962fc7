"""Grading an answer that is not a Python function against its instruction's suite: the same
``Graded`` as a Python answer, so that verify, repair and emit read both alike.

The suite is the one the ``tests`` stage wrote (``arenaforge.stages.verification.suites``): its
tests are cases as data (``test_code`` JSON, ``arenaforge.stages.verification.polyglot_cases``),
its ``signature`` the function's types in Python notation (none for a program), its ``example``
the instruction's own case. An instruction without trusted tests runs nothing (``_untested``:
its probe gate reads the code, as there is no case to build a harness from). Each answer is one sandbox job in its own language
(``function_job`` / ``program_job``: compiled once, every case in one sandbox call); the example
runs first, as the probe, then every trusted test in split order. Each case's run is turned
into the ``ExecResult`` words the Python path uses (a wrong value or output is ``failed``, error
class ``assertion``; a call that raised or a program that exited non-zero is ``error``, class
``runtime``), so that the verdict, the counts per split, the probe gate and the program gate
are folded by the Python path's own code (``grading._fold``).

An answer that does not compile is the answer's failure: status ``error``, error class
``compile_error`` (counted apart by verify), probe gate ``no_code`` as a Python answer that does
not parse; it is never a harness failure. The binding rule is ``instruction`` or ``same_name``
for a function (the harness calls the entry point by its name) and ``program`` for a program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from arenaforge.pipeline.sandbox.result import ExecResult
from arenaforge.pipeline.statuses import (
    COMPILE_ERROR,
    ERROR,
    FAILED,
    MEMORY,
    OK,
    OUTPUT_LIMIT,
    PASSED,
    TIMEOUT,
    WRONG_ANSWER,
)
from arenaforge.stages.common.task_kinds import PROGRAM
from arenaforge.stages.verification.entry_points import INSTRUCTION, SAME_NAME, Binding
from arenaforge.stages.verification.execution import Verdict
from arenaforge.stages.verification.grading import Graded, _decisive, _fold, _not_run
from arenaforge.stages.verification.polyglot.harness import function_job, grade, program_job
from arenaforge.stages.verification.polyglot.types import parse_signature
from arenaforge.stages.verification.polyglot_cases import case_of_text
from arenaforge.stages.verification.suites import Suite

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


def grade_programs(pool: Any, items: Sequence[tuple[str | None, Suite | None, str, str]], *,
                   timeout_s: float, memory_mb: int | None = None, fail_fast: bool = True
                   ) -> list[Graded]:
    """Grade each ``(code, suite, language, task_kind)`` (one sandbox job per answer, all in
    one batch); what ``grading.grade`` is for a Python function."""
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
        texts = [*([suite.example] if suite.example else []), *suite.graded]
        if not texts:
            out[i] = _untested(suite, code, lang, kind)
            continue
        try:
            cases = [case_of_text(kind, t) for t in texts]
            limits = {"timeout_s": timeout_s, "memory_mb": memory_mb, "fail_fast": fail_fast}
            job = (program_job(lang, code, cases, **limits) if kind == PROGRAM else
                   function_job(lang, code, parse_signature(suite.signature or ""), cases,
                                **limits))
        except (ValueError, TypeError, KeyError) as exc:  # UnsupportedType, CaseError, JSON
            out[i] = dataclasses.replace(
                _not_run(suite, None),
                verdict=Verdict(ERROR, 0, len(suite.graded), HARNESS_ERROR, str(exc)))
            continue
        jobs.append(job)
        where.append((i, suite, kind, cases))
    results = pool.run_programs(jobs) if jobs else []
    for (i, suite, kind, cases), result in zip(where, results):
        out[i] = _graded(suite, kind, cases, result)
    return out  # type: ignore[return-value]


def _untested(suite: Suite, code: str, lang: str, kind: str) -> Graded:
    """An instruction without a trusted test runs nothing (no case to build a harness from):
    the verdict is ``no_tests`` (``contradictory_tests`` for such a suite) and the probe gate
    reads the code: a function task's answer must define the entry point."""
    from arenaforge.stages.common.code_extract import function_names
    from arenaforge.stages.verification.probe_gate import PROGRAM_NO_TESTS, probe_gate

    bound = kind == PROGRAM or suite.entry_point in function_names(code, lang)
    gate = probe_gate(has_code=True, bound=bound, signature_ok=True, loads=True,
                      example_ok=None)
    binding = binding_of(suite, kind)
    if not bound:
        binding = dataclasses.replace(binding, bound_function=None, rule=None)
    return dataclasses.replace(_not_run(suite, None), binding=binding, probe_gate=gate,
                               program_gate=PROGRAM_NO_TESTS)


def _graded(suite: Suite, kind: str, cases: list, result: Any) -> Graded:
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
    runs = [None if run is None else _exec(run, verdict)
            for run, verdict in zip(result.runs, grade(cases, result))]
    example = runs[:1] if suite.example else []
    graded = runs[len(example):]
    loads = ExecResult(PASSED)  # it compiled (or parsed): the entry point is there to call
    folded = _fold(suite, binding_of(suite, kind), [*graded, loads, *example])
    wall = result.compile.wall_s + sum(r.duration_s for r in runs if r is not None)
    return dataclasses.replace(folded, verdict=dataclasses.replace(folded.verdict,
                                                                   duration_s=wall))


def _exec(run: Any, verdict: Any) -> ExecResult:
    """One case's run in the Python path's words (``ExecResult``)."""
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
              recorded: Sequence[Any] | None = None,
              stated_outputs_at: float | None = None) -> list[Graded]:
    """``grading.grade`` for the Python functions among ``items`` (exactly as before: with
    ``recorded``), ``grade_programs`` for the others; ``tasks``: each item's ``(language,
    task_kind)``. With ``stated_outputs_at`` (a ``min_pass_fraction``), each Python answer
    verified at it also runs its own demo, whose stated outputs must hold
    (``stated_outputs.with_stated_outputs``: what verify and repair decide by)."""
    from arenaforge.stages.common.task_kinds import uses_python_path
    from arenaforge.stages.verification.grading import grade
    from arenaforge.stages.verification.stated_outputs import with_stated_outputs

    python = [i for i, task in enumerate(tasks) if uses_python_path(*task)]
    others = [i for i, task in enumerate(tasks) if not uses_python_path(*task)]
    out: list[Graded | None] = [None] * len(items)
    if python:
        done = grade(pool, [items[i] for i in python], timeout_s=timeout_s, memory_mb=memory_mb,
                     fail_fast=fail_fast,
                     recorded=None if recorded is None else [recorded[i] for i in python])
        if stated_outputs_at is not None:
            done = with_stated_outputs(pool, [items[i][0] for i in python], done,
                                       [g.verified(stated_outputs_at) for g in done],
                                       timeout_s=timeout_s, memory_mb=memory_mb)
        for i, g in zip(python, done):
            out[i] = g
    if others:
        done = grade_programs(pool, [(*items[i], *tasks[i]) for i in others],
                              timeout_s=timeout_s, memory_mb=memory_mb, fail_fast=fail_fast)
        for i, g in zip(others, done):
            out[i] = g
    return out  # type: ignore[return-value]


def language_stats(rows: Sequence[dict], grades: Sequence[Graded],
                   tasks: Sequence[tuple[str, str]], min_pass_fraction: float
                   ) -> dict[str, float]:
    """Counts of the answers that are not Python functions (none when there are none):
    ``language.<id>.<kind>.tested`` (answers whose instruction has trusted tests),
    ``.verified`` and ``.compile_errors``, and ``compile_errors`` (``compile_errors.<model>``):
    a compile error is the answer's failure, counted apart from the others."""
    from collections import defaultdict

    from arenaforge.pipeline.statuses import NO_TESTS
    from arenaforge.stages.common.task_kinds import uses_python_path
    from arenaforge.stages.verification.grading import VERIFIED

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
