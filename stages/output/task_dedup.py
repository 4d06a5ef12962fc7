"""Near-duplicate tasks among the verified rows, found by what their answers do.

Compress drops rewordings whose embeddings lie close (``min_distance``), but text alone cannot
separate the rest: on a default run's 30 emitted rows, three rewordings of "the sum of two
integers" lay 0.55-0.69 apart on all-MiniLM-L6-v2 unit vectors, while "is n prime?" and "count
the primes up to n", two tasks, lay 0.64 apart. Behaviour separates them: two instructions are
one task when each one's verified answer passes the other's trusted tests (its example
included), in the sandbox, bound to the other's entry point. Only pairs that are also close in
text (``max_distance``) and are tasks of one language and kind are tried, so the cost stays
small (another language's answer is graded in its own harness:
``arenaforge.stages.verification.polyglot_grading``).

Rows are taken in compress's order (lowest ``kcenter_rank`` first); each is tried only against
the nearest few rows kept so far (``max_tries``), so a group of k rewordings costs about k pair
gradings, not k*(k-1)/2, and a row's cost does not grow with the kept set
(at 1,000 mined instructions of a few dozen task families, all pairs were ~5,000 gradings and
most of emit's time). A row that repeats a kept one is dropped as ``duplicate_task`` with the
kept instruction's id as detail.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

DUPLICATE_TASK = "duplicate_task"


def duplicate_tasks(rows: Sequence[Mapping[str, Any]], vectors: Mapping[str, np.ndarray],
                    suites: Mapping[str, Any], pool: Any, *, max_distance: float,
                    timeout_s: float = 5.0, max_tries: int = 3) -> dict[str, str]:
    """``{dropped instruction_id: kept instruction_id}``.

    Args:
        rows: the verified rows (``instruction_id, code, kcenter_rank``; ``language,
            task_kind`` when present, else a Python function).
        vectors: unit embedding per instruction_id (rows without one are never paired).
        suites: each instruction's trusted suite (``arenaforge.stages.verification.suites``).
        pool: the sandbox pool.
        max_distance: pairs farther apart in text are never tried.
        max_tries: a row is tried against at most this many kept rows, the nearest first.
    """
    from arenaforge.stages.common.task_kinds import row_language, row_task_kind
    from arenaforge.stages.verification.polyglot_grading import grade_any

    def task(row: Mapping[str, Any]) -> tuple[str, str]:
        return row_language(row.get("language")), row_task_kind(row.get("task_kind"))

    order = sorted((r for r in rows if r["instruction_id"] in vectors
                    and suites.get(r["instruction_id"]) is not None),
                   key=lambda r: (r["kcenter_rank"] if r["kcenter_rank"] is not None
                                  else float("inf"), r["instruction_id"]))
    kept: list[Mapping[str, Any]] = []
    # the kept rows' vectors in one growing array: stacking a list of them again for every row
    # copied the whole kept set each time (at 20,000 generated instructions, 13,562 verified
    # rows: emit 657 -> 587 s, the same rows; the rest is the sandbox's ~40 ms a row)
    first = np.asarray(next(iter(vectors.values()))) if vectors else np.zeros(0)
    kept_vectors = np.empty((max(len(order), 1), first.size), first.dtype)
    kept_tasks: list[tuple[str, str]] = []
    dropped: dict[str, str] = {}
    for row in order:
        v, mine = vectors[row["instruction_id"]], task(row)
        near = []
        if kept:
            distances = np.linalg.norm(kept_vectors[:len(kept)] - v, axis=1)
            # the nearest few only: a rewording lies next to what it rewords, and trying every
            # kept row within max_distance grows with the kept set (at 5,000 generated
            # instructions of a few templates, emit graded for 359 of a 694 s run); only the
            # rows within max_distance are sorted and looked at, not the whole kept set
            close = np.flatnonzero(distances <= max_distance)
            close = close[np.argsort(distances[close], kind="stable")]
            near = list(itertools.islice((kept[i] for i in close if kept_tasks[i] == mine),
                                         max_tries))
        same = _first_same_task(row, near, suites, pool, task, grade_any, timeout_s)
        if same is None:
            kept_vectors[len(kept)] = v
            kept_tasks.append(mine)
            kept.append(row)
        else:
            dropped[row["instruction_id"]] = same
    return dropped


def _first_same_task(row: Mapping[str, Any], near: Sequence[Mapping[str, Any]],
                     suites: Mapping[str, Any], pool: Any, task: Any, grade_any: Any,
                     timeout_s: float) -> str | None:
    """The first kept row ``row`` repeats: each answer passes the other's trusted tests."""
    if not near:
        return None
    items = [pair for k in near for pair in ((row["code"], suites[k["instruction_id"]]),
                                             (k["code"], suites[row["instruction_id"]]))]
    graded = grade_any(pool, items, [task(row)] * len(items), timeout_s=timeout_s,
                       fail_fast=True)
    for n, k in enumerate(near):
        if graded[2 * n].verified() and graded[2 * n + 1].verified():
            return k["instruction_id"]
    return None
