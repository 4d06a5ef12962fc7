"""Near-duplicate tasks among the verified rows, found by what their answers do.

Compress drops rewordings whose embeddings lie close (``min_distance``), but text alone cannot
separate the rest: on a default run's 30 emitted rows, three rewordings of "the sum of two
integers" lay 0.55-0.69 apart on all-MiniLM-L6-v2 unit vectors, while "is n prime?" and "count
the primes up to n", two tasks, lay 0.64 apart. Behaviour separates them: two instructions are
one task when each one's verified answer passes the other's trusted tests (its example
included), in the sandbox, bound to the other's entry point. Only pairs that are also close in
text (``max_distance``) and are tasks of one language and kind are tried, so the cost stays
small (another language's answer is graded in its own harness:
``arenaforge.stages.verification.grading``).

Rows are taken in compress's order (lowest ``kcenter_rank`` first); each is tried only against
the nearest few rows kept so far (``max_tries``), so a group of k rewordings costs about k pair
gradings, not k*(k-1)/2, and a row's cost does not grow with the kept set
(at 1,000 mined instructions of a few dozen task families, all pairs were ~5,000 gradings and
most of emit's time). A row that repeats a kept one is dropped as ``duplicate_task`` with the
kept instruction's id as detail.

The rows split into groups that never meet (``task_groups``): a row is only ever tried against
kept rows of its task within ``max_distance``, so the rule run on each connected part of that
relation alone makes the same choices as run on all rows at once, and the whole answer is the
union of the groups' (``decide_groups`` takes any share of them). The groups are scanned side
by side, each sandbox batch holding the next grading of every group, so a pool of several
slots grades several groups at once (one row's two to six gradings left the rest idle); and
each grading is asked only when the choice needs it (a pair's second grading only when its
first passed, a farther kept row only when the nearer ones were not the row's task), which on
the 1,771 verified rows of a 3,600-instruction run was 4,554 gradings instead of 9,706, the
same rows dropped. ``duplicate_tasks_on`` deals the groups into as many shares as the run has
workers (``deal``: largest first, each to the lightest share) and decides each share as an item
of ``ctx.map`` (a Ray task of its own, with its own sandbox); the union of the shares' choices,
in compress's order, is the same whatever the number of shares.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Callable, Generator, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

DUPLICATE_TASK = "duplicate_task"

Row = Mapping[str, Any]
Ask = tuple["str | None", Any, tuple[str, str]]  # a grading: (answer, suite, (language, kind))
# a group's scan: yields the gradings it needs, is sent their verdicts, returns its choices
Scan = Generator[Ask, "bool | None", dict[str, str]]

# distances are compared with a margin when grouping: a pair that rounding puts just past
# max_distance there while the scan puts it just inside would split a group that must stay whole
_MARGIN = 1e-3


def duplicate_tasks(rows: Sequence[Row], vectors: Mapping[str, np.ndarray],
                    suites: Mapping[str, Any], pool: Any, *, max_distance: float,
                    timeout_s: float = 5.0, max_tries: int = 3) -> dict[str, str]:
    """``{dropped instruction_id: kept instruction_id}``, in compress's order.

    Args:
        rows: the verified rows (``instruction_id, code, kcenter_rank``; ``language,
            task_kind`` when present, else a Python function).
        vectors: unit embedding per instruction_id (rows without one are never paired).
        suites: each instruction's trusted suite (``arenaforge.stages.verification.suites``).
        pool: the sandbox pool.
        max_distance: pairs farther apart in text are never tried.
        max_tries: a row is tried against at most this many kept rows, the nearest first.
    """
    order = dedup_order(rows, vectors, suites)
    found = decide_groups(task_groups(order, vectors, max_distance, key=_task), vectors, suites,
                          pool, max_distance=max_distance, timeout_s=timeout_s,
                          max_tries=max_tries)
    return _in_order(order, found)


def duplicate_tasks_on(ctx: Any, rows: Sequence[Row], vectors: Mapping[str, np.ndarray],
                       suites: Mapping[str, Any], *, max_distance: float,
                       timeout_s: float = 5.0, max_tries: int = 3) -> dict[str, str]:
    """``duplicate_tasks``' answer, its groups decided on the run's workers: dealt into
    ``ctx.map_workers()`` shares, each share an item of ``ctx.map`` graded in that item's
    sandbox (``ctx`` is the stage's ``StageContext``; other arguments as ``duplicate_tasks``').
    A group of one row needs no grading and goes nowhere."""
    order = dedup_order(rows, vectors, suites)
    groups = [g for g in task_groups(order, vectors, max_distance, key=_task) if len(g) > 1]
    shares = [_Share(part, {r["instruction_id"]: vectors[r["instruction_id"]] for g in part
                            for r in g},
                     {r["instruction_id"]: suites[r["instruction_id"]] for g in part for r in g},
                     max_distance, timeout_s, max_tries)
              for part in deal(groups, ctx.map_workers())]
    found: dict[str, str] = {}
    for choices in ctx.map(decide_share, shares):
        found.update(choices)  # shares hold disjoint rows: the union is order-free
    return _in_order(order, found)


@dataclasses.dataclass(frozen=True)
class _Share:
    """What one worker needs to decide some groups: their rows' vectors and suites only."""

    groups: list[list[Row]]
    vectors: dict[str, np.ndarray]
    suites: dict[str, Any]
    max_distance: float
    timeout_s: float
    max_tries: int


def decide_share(share: _Share, ctx: Any) -> dict[str, str]:
    """One item of ``duplicate_tasks_on``'s ``ctx.map``: its groups' choices, graded in the
    item's own sandbox."""
    return decide_groups(share.groups, share.vectors, share.suites, ctx.sandbox(),
                         max_distance=share.max_distance, timeout_s=share.timeout_s,
                         max_tries=share.max_tries)


def deal(groups: Sequence[Sequence[Row]], shares: int) -> list[list[Sequence[Row]]]:
    """``groups`` dealt into at most ``shares`` non-empty shares of about equal rows: the
    largest group first (ties: the earlier), each to the share with the fewest rows so far
    (ties: the earlier share); each share keeps its groups in ``groups``' order.

    Example::

        >>> [[len(g) for g in s] for s in deal([[1] * n for n in (2, 5, 3, 4)], 2)]
        [[2, 5], [3, 4]]
    """
    heap = [(0, s) for s in range(max(1, min(shares, len(groups))))]
    dealt: list[list[int]] = [[] for _ in heap]
    for i in sorted(range(len(groups)), key=lambda i: (-len(groups[i]), i)):
        rows, s = heapq.heappop(heap)
        dealt[s].append(i)
        heapq.heappush(heap, (rows + len(groups[i]), s))
    return [[groups[i] for i in sorted(part)] for part in dealt if part]


def decide_groups(groups: Sequence[Sequence[Row]], vectors: Mapping[str, np.ndarray],
                  suites: Mapping[str, Any], pool: Any, *, max_distance: float,
                  timeout_s: float = 5.0, max_tries: int = 3) -> dict[str, str]:
    """``{dropped instruction_id: kept instruction_id}`` of any share of ``task_groups``'
    groups (arguments as ``duplicate_tasks``'). Each group is scanned in its own order; every
    sandbox batch holds the next grading of each group still scanning."""
    from arenaforge.stages.verification.grading import grade_any

    dtype, width = _vector_layout(vectors)
    scans = [_scan(g, vectors, suites, max_distance, max_tries, dtype, width) for g in groups]
    found: dict[str, str] = {}
    asked: dict[int, Ask] = {}
    for i, scan in enumerate(scans):
        _advance(scan, None, i, asked, found)
    while asked:
        graded = grade_any(pool, [(code, suite) for code, suite, _ in asked.values()],
                           [task for _, _, task in asked.values()], timeout_s=timeout_s,
                           fail_fast=True)
        waiting, asked = asked, {}
        for i, result in zip(waiting, graded, strict=True):
            _advance(scans[i], result.verified(), i, asked, found)
    return found


def dedup_order(rows: Sequence[Row], vectors: Mapping[str, np.ndarray],
                suites: Mapping[str, Any]) -> list[Row]:
    """The rows task dedup tries (with a vector and a trusted suite), in compress's order
    (lowest ``kcenter_rank`` first, unranked last; ties by instruction_id)."""
    return sorted((r for r in rows if r["instruction_id"] in vectors
                   and suites.get(r["instruction_id"]) is not None),
                  key=lambda r: (r["kcenter_rank"] if r["kcenter_rank"] is not None
                                 else float("inf"), r["instruction_id"]))


def task_groups(order: Sequence[Row], vectors: Mapping[str, np.ndarray], max_distance: float,
                key: Callable[[Row], Hashable] = lambda row: None,
                block: int = 512) -> list[list[Row]]:
    """``order`` split into groups that task dedup decides apart: rows of one ``key`` (the
    task) joined when their vectors lie within ``max_distance`` (plus a rounding margin), and
    groups the connected parts of that relation, each in ``order``'s order, ordered by their
    first row.

    Example::

        >>> rows = [{"instruction_id": i} for i in "abc"]
        >>> vectors = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0]),
        ...            "c": np.array([0.6, 0.8])}
        >>> [[r["instruction_id"] for r in g] for g in task_groups(rows, vectors, 0.7)]
        [['a'], ['b', 'c']]
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    label = np.arange(len(order))
    by_key: dict[Hashable, list[int]] = {}
    for i, row in enumerate(order):
        by_key.setdefault(key(row), []).append(i)
    for members in map(np.asarray, by_key.values()):
        # float32 (its rounding lies far inside the margin, at half the cost of float64), each
        # pair once (the block against itself and the rows after it)
        x = np.stack([np.asarray(vectors[order[i]["instruction_id"]], np.float32)
                      for i in members])
        norms = np.einsum("ij,ij->i", x, x)
        limit = max_distance ** 2 + _MARGIN * (1.0 + 2.0 * float(norms.max()))
        for start in range(0, len(members), block):
            d2 = x[start:start + block] @ x[start:].T
            d2 *= -2.0
            d2 += norms[start:start + block, None]
            d2 += norms[None, start:]
            a, b = np.nonzero(d2 <= limit)
            a, b = label[members[a + start]], label[members[b + start]]
            joined = a != b
            if not joined.any():
                continue
            graph = coo_matrix((np.ones(int(joined.sum()), np.int8), (a[joined], b[joined])),
                               shape=(len(order), len(order)))
            label = connected_components(graph, directed=False)[1][label]
    groups: dict[int, list[Row]] = {}
    for i, row in enumerate(order):
        groups.setdefault(int(label[i]), []).append(row)
    return list(groups.values())  # by first row: labels are met in order


def _scan(group: Sequence[Row], vectors: Mapping[str, np.ndarray], suites: Mapping[str, Any],
          max_distance: float, max_tries: int, dtype: np.dtype, width: int) -> Scan:
    """The rule over one group, one row after another: yields each grading it needs and is
    sent back whether it verified; returns the group's ``{dropped: kept}``.

    A row repeats the first of its near kept rows (nearest first) whose trusted tests its
    answer passes and whose answer passes its own; asked one grading at a time, that first
    one is found with no grading past it.
    """
    kept: list[Row] = []
    # the kept rows' vectors in one growing array: stacking a list of them again for every row
    # copied the whole kept set each time (at 20,000 generated instructions, 13,562 verified
    # rows: emit 657 -> 587 s, the same rows; the rest is the sandbox's ~40 ms a row)
    kept_vectors = np.empty((max(len(group), 1), width), dtype)
    kept_tasks: list[tuple[str, str]] = []
    dropped: dict[str, str] = {}
    for row in group:
        v, mine = vectors[row["instruction_id"]], _task(row)
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
        for k in near:
            passes_theirs = yield row["code"], suites[k["instruction_id"]], mine
            if passes_theirs and (yield k["code"], suites[row["instruction_id"]], mine):
                dropped[row["instruction_id"]] = k["instruction_id"]
                break
        else:
            kept_vectors[len(kept)] = v
            kept_tasks.append(mine)
            kept.append(row)
    return dropped


def _in_order(order: Sequence[Row], found: Mapping[str, str]) -> dict[str, str]:
    """``found`` in ``order``'s order (the order the one-pass rule decided the rows in)."""
    return {r["instruction_id"]: found[r["instruction_id"]] for r in order
            if r["instruction_id"] in found}


def _advance(scan: Scan, verdict: bool | None, i: int, asked: dict[int, Ask],
             found: dict[str, str]) -> None:
    """Send scan ``i`` its last grading's verdict: its next grading goes to ``asked``, or,
    when its group is done, its choices to ``found``."""
    try:
        asked[i] = scan.send(verdict)
    except StopIteration as done:
        found.update(done.value)


def _task(row: Row) -> tuple[str, str]:
    from arenaforge.stages.common.task_kinds import row_language, row_task_kind

    return row_language(row.get("language")), row_task_kind(row.get("task_kind"))


def _vector_layout(vectors: Mapping[str, np.ndarray]) -> tuple[np.dtype, int]:
    """The kept vectors' array type and width: the first vector's, as every group uses."""
    first = np.asarray(next(iter(vectors.values()))) if vectors else np.zeros(0)
    return first.dtype, first.size
