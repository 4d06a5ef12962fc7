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

Of each group the row selected first by compress (lowest ``kcenter_rank``) stays; the others
are dropped as ``duplicate_task`` with the kept instruction's id as detail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

DUPLICATE_TASK = "duplicate_task"


def duplicate_tasks(rows: Sequence[Mapping[str, Any]], vectors: Mapping[str, np.ndarray],
                    suites: Mapping[str, Any], pool: Any, *, max_distance: float,
                    timeout_s: float = 5.0) -> dict[str, str]:
    """``{dropped instruction_id: kept instruction_id}``.

    Args:
        rows: the verified rows (``instruction_id, code, kcenter_rank``; ``language,
            task_kind`` when present, else a Python function).
        vectors: unit embedding per instruction_id (rows without one are never paired).
        suites: each instruction's trusted suite (``arenaforge.stages.verification.suites``).
        pool: the sandbox pool.
        max_distance: pairs farther apart in text are never tried.
    """
    from arenaforge.stages.common.task_kinds import row_language, row_task_kind
    from arenaforge.stages.verification.polyglot_grading import grade_any

    def task(row: Mapping[str, Any]) -> tuple[str, str]:
        return row_language(row.get("language")), row_task_kind(row.get("task_kind"))

    order = sorted((r for r in rows if r["instruction_id"] in vectors
                    and suites.get(r["instruction_id"]) is not None),
                   key=lambda r: (r["kcenter_rank"] if r["kcenter_rank"] is not None
                                  else float("inf"), r["instruction_id"]))
    pairs = []
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            d = float(np.linalg.norm(vectors[a["instruction_id"]] - vectors[b["instruction_id"]]))
            if d <= max_distance and task(a) == task(b):
                pairs.append((a, b))
    if not pairs:
        return {}
    items = [(x["code"], suites[y["instruction_id"]]) for a, b in pairs for x, y in ((a, b),
                                                                                     (b, a))]
    graded = grade_any(pool, items, [task(a) for a, b in pairs for _ in (a, b)],
                       timeout_s=timeout_s, fail_fast=True)
    dropped: dict[str, str] = {}
    for k, (a, b) in enumerate(pairs):
        both = all(g.verified() for g in graded[2 * k:2 * k + 2])
        keep = dropped.get(a["instruction_id"], a["instruction_id"])
        if both and b["instruction_id"] not in dropped:
            dropped[b["instruction_id"]] = keep
    return dropped
