"""Answers run on a problem's hidden tests in the sandbox, as ``arenaforge eval`` grades them.

The program of an answer is made the way ``eval`` makes a chat answer's: in Python, the code
block that defines the entry point below the prompt's imports and helpers
(``eval_core.build_program``), run with the hidden test code; in another language, the code block
that defines the function (``humaneval_prompts.chat_program``) in the language's harness, or a
whole program's code run once per case. A status is ``passed``, ``no_answer`` (an empty text),
``harness_error`` (the cases have no harness for the answer), or the sandbox's, as in
``evaluate_languages``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arenaforge.pipeline.apps.verify_bench.problems import Problem
from arenaforge.stages.verification.harness.cases import PROGRAM

NO_ANSWER = "no_answer"


def program_of(problem: Problem, text: str) -> str:
    """The program an answer text makes for ``problem`` (see the module)."""
    from arenaforge.pipeline.apps.eval_core import build_program
    from arenaforge.pipeline.apps.humaneval_prompts import chat_program
    from arenaforge.stages.common.code_extract import extract_code

    hidden = problem.hidden
    if problem.task_kind == PROGRAM:
        return extract_code(text, problem.language) or text
    if problem.language == "python":
        return build_program({"prompt": hidden.prompt, "entry_point": hidden.entry_point},
                             text, "chat")
    return chat_program(hidden.translation, problem.language, text)


def grade_answers(pool: Any, items: Sequence[tuple[Problem, str]], *, timeout_s: float | None,
                  memory_mb: int | None = None) -> list[tuple[bool, str]]:
    """``(passed, status)`` of each ``(problem, answer text)`` on the problem's hidden tests
    (two sandbox batches: Python test code, and programs of every language)."""
    from arenaforge.pipeline.apps.evaluate_languages import HARNESS_ERROR, case_status
    from arenaforge.pipeline.apps.humaneval_translate import language_signature
    from arenaforge.pipeline.sandbox.result import Job
    from arenaforge.stages.verification.harness import function_job, program_job

    out: list[tuple[bool, str]] = [(False, NO_ANSWER)] * len(items)
    python_jobs, python_at, programs, programs_at, cases = [], [], [], [], []
    limits = {"timeout_s": timeout_s, "memory_mb": memory_mb}
    for i, (problem, text) in enumerate(items):
        if not (text or "").strip():
            continue
        hidden, program = problem.hidden, program_of(problem, text)
        if hidden.kind == "python":
            python_jobs.append(Job(solution=program, tests=hidden.code, **limits))
            python_at.append(i)
            continue
        try:
            if hidden.kind == "io":
                job, own = program_job(problem.language, program, hidden.io, **limits), hidden.io
            else:
                tr = hidden.translation
                job = function_job(problem.language, program,
                                   language_signature(tr, problem.language), tr.cases, **limits)
                own = tr.cases
        except ValueError:  # no harness for this answer's program: never counted as a pass
            out[i] = (False, HARNESS_ERROR)
            continue
        programs.append(job)
        programs_at.append(i)
        cases.append(own)
    for i, result in zip(python_at, pool.run_many(python_jobs) if python_jobs else []):
        out[i] = (bool(result.passed), result.status)
    for i, own, result in zip(programs_at, cases,
                              pool.run_programs(programs) if programs else []):
        out[i] = case_status(own, result)
    return out
