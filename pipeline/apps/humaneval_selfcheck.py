"""Checks of the HumanEval translation (``humaneval_translate``) through the sandbox.

HumanEval has reference solutions in Python only, so the translation is checked in two ways
that need none in other languages:

* ``python_roundtrip``: the translated cases rendered back into the *Python* harness, run on
  HumanEval's canonical solutions. Every translated problem must pass, and each value a
  solution returns must be a value of the translated return type (an ``int`` where the type
  says ``float`` is fine, a ``2.0`` where it says ``int`` is not): this proves the cases, the
  literals and the types, which every other language is rendered from.
* ``stub_compiles``: every translated problem's harness, around a stub that returns a default
  value, must compile in each compiled language (and parse in JavaScript): the declarations,
  literals and harness are valid there. A stub's values are wrong, so only the compile step
  counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from arenaforge.pipeline.apps.humaneval_prompts import stub_solution
from arenaforge.pipeline.apps.humaneval_translate import (
    Translation,
    Untranslatable,
    language_signature,
    translate,
    translate_suite,
)
from arenaforge.pipeline.sandbox.languages.catalog import language as language_of
from arenaforge.stages.verification.harness import UnsupportedType, function_job, grade
from arenaforge.stages.verification.harness.types import check_value


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """How many problems were checked, how many passed, and why each other one failed."""

    checked: int
    passed: int
    failures: tuple[tuple[str, str], ...] = ()


def python_roundtrip(problems: Sequence[dict[str, Any]], pool: Any, *,
                     timeout_s: float = 10.0) -> CheckResult:
    """HumanEval's canonical solutions against their translated cases, in the Python harness
    (see the module)."""
    items: list[tuple[Translation, Any]] = []
    for problem in problems:
        try:
            tr = translate(problem)
        except Untranslatable:
            continue
        program = problem["prompt"] + problem["canonical_solution"]
        items.append((tr, function_job("python", program, tr.signature, tr.cases,
                                       timeout_s=timeout_s)))
    results = pool.run_programs([job for _, job in items]) if items else []
    failures = []
    for (tr, _), result in zip(items, results):
        why = _why_failed(tr, result)
        if why:
            failures.append((tr.task_id, why))
    return CheckResult(len(items), len(items) - len(failures), tuple(failures))


def _why_failed(tr: Translation, result: Any) -> str | None:
    if not result.compile.ok:
        return f"compile: {result.compile.message or ''} {result.compile.stderr[-300:]}"
    for i, verdict in enumerate(grade(tr.cases, result)):
        if not verdict.passed:
            return f"case {i + 1}: {verdict.status}: {verdict.message}"
        try:
            check_value(verdict.got, tr.signature.returns, f"case {i + 1} returned value")
        except UnsupportedType as exc:
            return f"type: {exc}"
    return None


def stub_compiles(problems: Sequence[dict[str, Any]], language: str, pool: Any
                  ) -> tuple[CheckResult, dict[str, Untranslatable]]:
    """Every problem translated for ``language`` compiled around its stub; and the skipped
    problems with their reasons."""
    kept, skipped = translate_suite(problems, language)
    jobs = [function_job(language, stub_solution(tr, language), language_signature(tr, language),
                         tr.cases) for tr in kept]
    if not jobs:
        compiled = []
    elif language_of(language).compiled:
        compiled = pool.compile_programs(jobs)
    else:  # an interpreted language's syntax is checked with its runs
        compiled = [r.compile for r in pool.run_programs(jobs)]
    failures = [(tr.task_id, f"{c.message or ''} {_first_error(c.stderr or c.stdout)}")
                for tr, c in zip(kept, compiled) if not c.ok]
    return CheckResult(len(kept), len(kept) - len(failures), tuple(failures)), skipped


def _first_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if "error" in line.lower()]
    return (lines[0] if lines else text.strip()[-300:])[:300]
