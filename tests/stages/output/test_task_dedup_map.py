"""Task dedup's groups decided on several ``ctx.map`` workers: exactly one worker's choices.

The rows and the stand-in grading are ``test_task_dedup_groups``' (a verdict that is a fixed
function of answer and suite, as the sandbox's is); the map runs its items here, each through a
pickle round trip as a Ray task's would be.
"""

import io
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from arenaforge.pipeline.stage import EMBEDDINGS
from arenaforge.stages.output import emit
from arenaforge.stages.output.task_dedup import deal, duplicate_tasks, duplicate_tasks_on

from tests.stages.output.test_task_dedup_groups import RecordingGrader, synthetic


class MapCtx:
    """A stage context with ``workers`` map workers, the items run one after another, each
    item and result pickled; what emit's dedup reads: the embeddings artifact and ``tests``."""

    def __init__(self, workers, vectors=None):
        self.workers, self.vectors, self.items = workers, vectors, []

    def map_workers(self):
        return self.workers

    def map(self, fn, items):
        self.items.append(len(items))
        return [pickle.loads(pickle.dumps(fn(pickle.loads(pickle.dumps(item)), self)))
                for item in items]

    def sandbox(self):
        return None  # the stand-in grader takes no pool

    def read_artifact(self, relpath):
        assert relpath == EMBEDDINGS
        ids = list(self.vectors)
        sink = io.BytesIO()
        pq.write_table(pa.table({"instruction_id": ids, "embedding": pa.array(
            [self.vectors[i].tolist() for i in ids],
            pa.list_(pa.float32(), len(self.vectors[ids[0]])))}), sink)
        return sink.getvalue()

    def read(self, stage, columns=None, instruction_ids=None):
        assert stage == "tests"
        return pa.table({"instruction_id": list(instruction_ids or [])})


@pytest.fixture
def grader(monkeypatch):
    from arenaforge.stages.verification import grading

    monkeypatch.setattr(grading, "grade_any", RecordingGrader())


@pytest.mark.parametrize("workers", [1, 2, 5, 64])
def test_shares_choose_exactly_what_one_process_chose(grader, workers):
    rows, vectors, suites = synthetic(2000, 5)
    expected = duplicate_tasks(rows, vectors, suites, None, max_distance=0.75, max_tries=3)
    ctx = MapCtx(workers)
    got = duplicate_tasks_on(ctx, rows, vectors, suites, max_distance=0.75, max_tries=3)
    assert len(expected) > 200 and got == expected
    assert list(got) == list(expected)  # in compress's order
    assert len(ctx.items) == 1 and 1 <= ctx.items[0] <= workers  # one map, a share a worker
    if workers < 64:
        assert ctx.items == [workers]


def test_emit_drops_the_same_rows_on_several_workers_as_on_one(grader, monkeypatch):
    rows, vectors, suites = synthetic(1500, 6)
    monkeypatch.setattr(emit, "suites_of_rows", lambda found: {
        r["instruction_id"]: suites.get(r["instruction_id"]) for r in found})
    chosen = pa.table({
        "instruction_id": [r["instruction_id"] for r in rows],
        "code": [r["code"] for r in rows],
        "kcenter_rank": pa.array([r["kcenter_rank"] for r in rows], pa.int64()),
        "language": [r.get("language") for r in rows],
        "task_kind": [r.get("task_kind") for r in rows],
        "verified": [True] * len(rows)})
    cfg = emit.EmitConfig(dedup_distance=0.75, dedup_tries=3)
    outs = [emit._without_duplicate_tasks(chosen, cfg, MapCtx(w, vectors)) for w in (1, 4)]
    (kept_one, gone_one), (kept_four, gone_four) = outs
    assert gone_one.num_rows > 100
    assert kept_four.equals(kept_one) and gone_four.equals(gone_one)


def test_deal_balances_rows_largest_first_and_keeps_each_share_in_order():
    sizes = [1, 9, 3, 3, 7, 2, 2, 5, 4, 6]
    groups = [[{"instruction_id": f"{g}-{k}"} for k in range(n)] for g, n in enumerate(sizes)]
    shares = deal(groups, 3)
    assert sorted(id(g) for s in shares for g in s) == sorted(id(g) for g in groups)
    loads = [sum(map(len, s)) for s in shares]
    assert max(loads) - min(loads) <= max(sizes) and sum(loads) == sum(sizes)
    # largest first, each to the lightest share: 9+3+2, 7+4+3, 6+5+2+1
    assert [[len(g) for g in s] for s in shares] == [[9, 3, 2], [3, 7, 4], [1, 2, 5, 6]]
    assert all([groups.index(g) for g in s] == sorted(groups.index(g) for g in s) for s in shares)
    assert deal(groups, 3) == shares  # deterministic
    assert deal(groups[:2], 8) == [[groups[1]], [groups[0]]] and deal([], 4) == []
    rng = np.random.default_rng(0)
    many = [[{}] * int(n) for n in rng.integers(2, 30, size=500)]
    loads = [sum(map(len, s)) for s in deal(many, 7)]
    assert max(loads) - min(loads) <= 29
