"""Answers to the benchmark's problems and their execution results.

Each contestant answers every problem ``samples`` times at ``temperature`` (sample ``i`` with
seed ``seed + i``, so any sample can be replayed alone); every answer runs against the
problem's official tests in the sandbox through ``arenaforge.stages.verification.verify.execute``, the pipeline's
execution function. Requests go through the request cache, so a rerun costs no model time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arenaforge.pipeline.backends.base import SamplingParams

log = logging.getLogger(__name__)
SAMPLE_COLUMNS = ("task_id", "sample_id", "model", "sample", "response", "finish_reason",
                  "error", "status", "error_class", "chars")


def load_benchmark(problems: str, limit: int | None) -> list[dict[str, Any]]:
    """``humaneval`` (built in) or a JSONL file in HumanEval's shape, first ``limit`` problems.

    Raises:
        ValueError: a problem lacks a field HumanEval has (names the line and field).
    """
    from arenaforge.pipeline.apps.evaluate import load_problems

    if problems == "humaneval":
        return load_problems("humaneval", limit)
    out = []
    for i, line in enumerate(Path(problems).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        for field in ("task_id", "prompt", "entry_point", "test", "canonical_solution"):
            if not isinstance(row.get(field), str):
                raise ValueError(  # noqa: TRY004 (bad data in a file, not a bad argument)
                    f"{problems} line {i}: field {field!r} missing or not a string")
        out.append(row)
    return out[:limit] if limit is not None else out


def instruction(problem: dict[str, Any]) -> str:
    """What a contestant is asked (and what the judge sees as the question)."""
    from arenaforge.pipeline.apps.evaluate import CHAT_TEMPLATE
    from arenaforge.pipeline.prompts import fill, load_template

    return fill(load_template(CHAT_TEMPLATE), prompt=problem["prompt"])


def canonical_answer(problem: dict[str, Any]) -> str:
    """The benchmark's reference solution as a whole function in a code block."""
    return f"```python\n{problem['prompt']}{problem['canonical_solution']}```"


def sample_answers(backend, model: str, problems: Sequence[dict], n: int, temperature: float,
                   max_tokens: int, seed: int) -> list[dict]:
    """``n`` answers of ``model`` per problem (rows without execution columns)."""
    params = SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens, seed=seed)
    convs = [[{"role": "user", "content": instruction(p)}] for p in problems]
    rows = []
    for problem, samples in zip(problems, backend.chat(convs, params), strict=True):
        for i, c in enumerate(samples):
            rows.append({"task_id": problem["task_id"], "sample_id": f"{model}#{i}",
                         "model": model, "sample": i, "response": c.text or "",
                         "finish_reason": c.finish_reason, "error": c.error,
                         "chars": len(c.text or "")})
    return rows


def shown_text(problem: dict[str, Any], response: str, show: str) -> str:
    """What the judge sees of an answer: the whole reply, or its code in one block."""
    from arenaforge.stages.common.code_extract import function_code

    if show == "response":
        return response
    return "```python\n" + function_code(response, problem["entry_point"]).rstrip() + "\n```"


def execute_answers(pool, problems: dict[str, dict], rows: list[dict], timeout_s: float) -> None:
    """Add ``status`` and ``error_class`` to answer rows, in place (one sandbox batch)."""
    from arenaforge.pipeline.apps.evaluate import build_program, problem_tests
    from arenaforge.stages.verification.verify import execute

    items = []
    for r in rows:
        problem = problems[r["task_id"]]
        code = None if r["error"] else build_program(problem, r["response"], "chat")
        items.append((code, [problem_tests(problem)]))
    for r, v in zip(rows, execute(pool, items, timeout_s=timeout_s), strict=True):
        r["status"], r["error_class"] = v.status, v.error_class
