"""Task dedup split into groups decided apart: the same choices as the one-pass rule it replaced.

``reference_duplicate_tasks`` is that rule as it was (commit d7b3cb7), every row after the
other over all rows; the grading is a stand-in whose verdict is a fixed function of (answer,
suite), as the sandbox's is, so the comparison is of the rule alone, over a few thousand rows.
"""

import hashlib
import itertools
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from arenaforge.stages.output import task_dedup
from arenaforge.stages.output.task_dedup import dedup_order, duplicate_tasks, task_groups


def reference_duplicate_tasks(rows, vectors, suites, grade_any, *, max_distance, max_tries):
    """The rule before groups (commit d7b3cb7), with the grading handed in."""
    def task(row):
        return row.get("language") or "python", row.get("task_kind") or "function"

    order = sorted((r for r in rows if r["instruction_id"] in vectors
                    and suites.get(r["instruction_id"]) is not None),
                   key=lambda r: (r["kcenter_rank"] if r["kcenter_rank"] is not None
                                  else float("inf"), r["instruction_id"]))
    kept = []
    first = np.asarray(next(iter(vectors.values())))
    kept_vectors = np.empty((max(len(order), 1), first.size), first.dtype)
    kept_tasks = []
    dropped = {}
    for row in order:
        v, mine = vectors[row["instruction_id"]], task(row)
        near = []
        if kept:
            distances = np.linalg.norm(kept_vectors[:len(kept)] - v, axis=1)
            close = np.flatnonzero(distances <= max_distance)
            close = close[np.argsort(distances[close], kind="stable")]
            near = list(itertools.islice((kept[i] for i in close if kept_tasks[i] == mine),
                                         max_tries))
        same = None
        if near:
            items = [pair for k in near for pair in ((row["code"], suites[k["instruction_id"]]),
                                                     (k["code"], suites[row["instruction_id"]]))]
            graded = grade_any(None, items, [mine] * len(items), timeout_s=5.0, fail_fast=True)
            same = next((k["instruction_id"] for n, k in enumerate(near)
                         if graded[2 * n].verified() and graded[2 * n + 1].verified()), None)
        if same is None:
            kept_vectors[len(kept)] = v
            kept_tasks.append(mine)
            kept.append(row)
        else:
            dropped[row["instruction_id"]] = same
    return dropped


@dataclass(frozen=True)
class FakeSuite:
    instruction_id: str
    family: int


@dataclass(frozen=True)
class Verdict:
    ok: bool

    def verified(self):
        return self.ok


class RecordingGrader:
    """An answer ``"family:variant"`` passes a suite of its family unless a hash of the pair
    says it fails (about one in five: the relation is neither always symmetric nor
    transitive, so rows are tried against second and third nearest kept rows)."""

    def __init__(self):
        self.calls = []

    def __call__(self, pool, items, tasks, *, timeout_s, fail_fast):
        self.calls.append([(code, suite.instruction_id) for code, suite in items])
        out = []
        for code, suite in items:
            digest = hashlib.sha256(f"{code}|{suite.instruction_id}".encode()).digest()
            out.append(Verdict(int(code.split(":")[0]) == suite.family and digest[0] % 5 != 0))
        return out


def synthetic(n, seed, dim=32, families=60):
    """n verified rows of ``families`` tasks: rewordings lie around their family's point,
    some families near one another, two languages and kinds, some rows unranked, some without
    a vector or a suite."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(families, dim))
    centers[1::2] = centers[::2][: len(centers[1::2])] + rng.normal(scale=0.3, size=(
        len(centers[1::2]), dim))  # pairs of families close in text
    rows, vectors, suites = [], {}, {}
    for i in range(n):
        fam = int(rng.integers(families))
        iid = f"{i:05d}"
        v = centers[fam] + rng.normal(scale=rng.choice([0.15, 0.3, 0.6]), size=dim)
        row = {"instruction_id": iid, "code": f"{fam}:{i}",
               "kcenter_rank": None if rng.random() < 0.05 else int(rng.integers(n * 2))}
        if fam % 7 == 3:
            row["language"], row["task_kind"] = "javascript", "program"
        rows.append(row)
        if rng.random() > 0.02:
            vectors[iid] = (v / np.linalg.norm(v)).astype(np.float32)
        if rng.random() > 0.02:
            suites[iid] = FakeSuite(iid, fam)
    return rows, vectors, suites


@pytest.mark.parametrize(("n", "seed", "max_distance", "max_tries"), [
    (3000, 0, 0.75, 3), (3000, 1, 0.75, 1), (2000, 2, 0.5, 3), (2000, 3, 1.2, 2)])
def test_groups_choose_exactly_what_the_one_pass_rule_chose(monkeypatch, n, seed, max_distance,
                                                           max_tries):
    from arenaforge.stages.verification import grading

    rows, vectors, suites = synthetic(n, seed)
    old, new = RecordingGrader(), RecordingGrader()
    expected = reference_duplicate_tasks(rows, vectors, suites, old, max_distance=max_distance,
                                         max_tries=max_tries)
    monkeypatch.setattr(grading, "grade_any", new)
    got = duplicate_tasks(rows, vectors, suites, None, max_distance=max_distance,
                          max_tries=max_tries)
    assert len(expected) > n // 10  # the rule had work to do
    assert got == expected
    assert list(got) == list(expected)  # in the order the one-pass rule decided them
    # only gradings the one-pass rule made, and fewer: none past a row's first repeat, no
    # pair's second after its first failed
    old_items = Counter(itertools.chain(*old.calls))
    new_items = Counter(itertools.chain(*new.calls))
    assert not new_items - old_items
    assert new_items.total() < old_items.total()
    if max_distance <= 0.75:  # rows far apart split into groups graded side by side
        assert new_items.total() / len(new.calls) > 4


def test_no_pair_the_rule_could_try_lies_across_two_groups():
    rows, vectors, suites = synthetic(1500, 4)
    order = dedup_order(rows, vectors, suites)
    groups = task_groups(order, vectors, 0.75, key=task_dedup._task)
    assert sorted(r["instruction_id"] for g in groups for r in g) == sorted(
        r["instruction_id"] for r in order)
    index = {r["instruction_id"]: n for n, r in enumerate(order)}
    assert all([index[r["instruction_id"]] for r in g] == sorted(
        index[r["instruction_id"]] for r in g) for g in groups)  # each in compress's order
    group_of = {r["instruction_id"]: n for n, g in enumerate(groups) for r in g}
    for a, b in itertools.combinations(order, 2):
        close = np.linalg.norm(vectors[a["instruction_id"]] - vectors[b["instruction_id"]]) <= 0.75
        if close and task_dedup._task(a) == task_dedup._task(b):
            assert group_of[a["instruction_id"]] == group_of[b["instruction_id"]]
    assert len(groups) > 20  # and the rows do split


def test_groups_keep_apart_what_lies_far_or_is_another_task():
    rows = [{"instruction_id": "a"}, {"instruction_id": "b", "language": "javascript"},
            {"instruction_id": "c"}, {"instruction_id": "d"}]
    vectors = {"a": np.array([1.0, 0.0]), "b": np.array([1.0, 0.0]),
               "c": np.array([0.0, 1.0]), "d": np.array([0.8, 0.6])}
    groups = task_groups(rows, vectors, 0.7, key=task_dedup._task)
    # d joins a (0.63 apart) but not c (0.89); b is a JavaScript task
    assert [[r["instruction_id"] for r in g] for g in groups] == [["a", "d"], ["b"], ["c"]]
    assert task_groups([], {}, 0.7) == []
