"""Stage compress: budget rules, embedding cache, and a real MiniLM run on short texts."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from arenaforge.pipeline.layout import EMBEDDINGS
from arenaforge.pipeline.store import TableCache
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.common.embeddings import cached_embeddings, resolve_model_path
from arenaforge.stages.output.compress import (
    STAGE,
    CompressConfig,
    first_center,
    resolve_budget,
    run,
)
from arenaforge.stages.output.kcenter import kcenter_greedy
from pydantic import ValidationError


class FakeContext:
    """What compress uses from a run context: run_dir, write_artifact and table_cache."""

    def __init__(self, run_dir: Path, seed: int = 0):
        self.run_dir = run_dir
        self.seed = seed
        self.written: list[str] = []

    def write_artifact(self, relpath: str, data) -> Path:
        path = self.run_dir / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, path)
        self.written.append(relpath)
        return path

    def table_cache(self, name: str) -> TableCache:
        return TableCache(self.run_dir / "cache" / name)


TOPICS = {
    "sort": ["Write a Python function that sorts a list of integers in ascending order.",
             "Implement merge sort for a list of numbers in Python.",
             "Sort an array of integers using quicksort.",
             "Write code to sort a list of numbers from smallest to largest.",
             "Implement insertion sort on a Python list of ints."],
    "http": ["Write a Python script that downloads a web page with an HTTP GET request.",
             "Use the requests library to fetch JSON from a REST API endpoint.",
             "Send an HTTP POST request with a JSON body and print the response status.",
             "Write a function that retries a failed HTTP request three times.",
             "Fetch a URL over HTTPS and save the response body to a file."],
    "sql": ["Write a SQL query that counts orders per customer.",
            "Write a SQL statement joining the employees and departments tables.",
            "Create a SQL table for storing users with a primary key.",
            "Write a SQL query returning the top five products by revenue.",
            "Write SQL to delete duplicate rows from a table."],
    "poem": ["Write a short poem about the ocean at sunset.",
             "Compose a haiku about autumn leaves falling.",
             "Write a limerick about a cat who loves to sleep.",
             "Write a sonnet about the moon over the mountains.",
             "Write a rhyming poem about spring flowers."],
}


def _table(texts: list[str]) -> pa.Table:
    return pa.table({"instruction_id": [instruction_id(t) for t in texts],
                     "instruction": texts, "miner": ["m"] * len(texts)})


def test_stage_spec():
    assert STAGE.name == "compress" and STAGE.source == "decontaminate" and not STAGE.sharded
    assert STAGE.inputs == ("instruction_id", "instruction")
    assert STAGE.outputs == ("kcenter_rank", "kcenter_radius")


@pytest.mark.parametrize("budget,n,want", [
    (1, 10, 1), (10, 10, 10), (500, 10, 10), (1.0, 10, 10), (0.5, 10, 5), (0.3, 10, 3),
    (0.25, 10, 3), (0.01, 10, 1), (0.7, 3, 3), (1e-9, 5, 1),
])
def test_resolve_budget(budget, n, want):
    assert resolve_budget(budget, n) == want


@pytest.mark.parametrize("budget,match", [
    (0, "row count must be >= 1"), (-3, "row count must be >= 1"),
    (0.0, r"fraction must be in \(0, 1\]"), (1.5, "write an int"), (True, "budget must be"),
])
def test_bad_budget_is_a_config_error(budget, match):
    with pytest.raises(ValidationError, match=match):
        CompressConfig(budget=budget)


def test_budget_keeps_int_and_float_apart():
    assert CompressConfig(budget=1).budget == 1 and isinstance(CompressConfig(budget=1).budget, int)
    assert isinstance(CompressConfig(budget=1.0).budget, float)


def test_first_center_choices():
    emb = np.array([[0.0, 0.0], [1.0, 1.0], [0.4, 0.6], [3.0, 2.0]], dtype=np.float32)
    ids = ["a", "b", "c", "d"]
    assert first_center("centroid", emb, ids, seed=0) == 1  # mean is (1.1, 0.9)
    assert first_center("c", emb, ids, seed=0) == 2
    picks = {first_center("seed", emb, ids, seed=s) for s in range(20)}
    assert picks <= {0, 1, 2, 3} and len(picks) > 1
    assert first_center("seed", emb, ids, seed=7) == first_center("seed", emb, ids, seed=7)
    with pytest.raises(ValueError, match="compress.first='zz'"):
        first_center("zz", emb, ids, seed=0)


def test_missing_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="compress.model=.*not a local"):
        resolve_model_path(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="hub names are not fetched"):
        resolve_model_path("sentence-transformers/all-MiniLM-L6-v2")


def test_cache_embeds_only_new_texts(tmp_path):
    calls: list[list[str]] = []

    def fake_embed(texts):  # deterministic per text, so cache hits are checkable
        calls.append(list(texts))
        return np.array([[len(t), sum(map(ord, t)) % 97, 1.0] for t in texts], np.float32)

    m1, m2 = TableCache(tmp_path / "m1"), TableCache(tmp_path / "m2")
    texts = ["alpha task", "beta task", "gamma task"]
    first, hits = cached_embeddings(texts, fake_embed, m1)
    assert hits == 0 and sorted(calls[0]) == sorted(texts)
    again, hits = cached_embeddings(texts[::-1], fake_embed, m1)
    assert hits == 3 and len(calls) == 1
    np.testing.assert_array_equal(again, first[::-1])
    more, hits = cached_embeddings(texts + ["delta  task"], fake_embed, m1)
    assert hits == 3 and calls[1] == ["delta task"]  # the normalised text is embedded
    np.testing.assert_array_equal(more[:3], first)
    assert len(list(m1.path.glob("part-*.parquet"))) == 2
    _, hits = cached_embeddings(texts, fake_embed, m2)
    assert hits == 0  # another model's namespace
    _, hits = cached_embeddings(texts + texts, fake_embed, None)  # no cache: once per text
    assert hits == 0 and len(calls[-1]) == 3


def test_empty_input_needs_no_model(tmp_path):
    out = run(_table([]), CompressConfig(model=str(tmp_path / "absent")), FakeContext(tmp_path))
    assert out.table.num_rows == 0
    assert {"kcenter_rank", "kcenter_radius"} <= set(out.table.column_names)


@pytest.mark.models
def test_minilm_run_selects_one_per_topic_and_reuses_the_cache(tmp_path):
    texts = [t for group in TOPICS.values() for t in group]
    topic_of = {instruction_id(t): name for name, group in TOPICS.items() for t in group}
    shuffled = texts[:]
    random.Random(0).shuffle(shuffled)
    ctx = FakeContext(tmp_path)

    out = run(_table(shuffled), CompressConfig(budget=4, min_distance=None), ctx)
    kept, dropped = out.table, out.dropped
    assert kept.num_rows == 4 and dropped.num_rows == 16
    assert kept.column("kcenter_rank").to_pylist() == [0, 1, 2, 3]
    radii = kept.column("kcenter_radius").to_pylist()
    assert all(np.diff(radii) <= 0) and radii[-1] > 0
    assert {topic_of[i] for i in kept.column("instruction_id").to_pylist()} == set(TOPICS)
    assert set(dropped.column("reason").to_pylist()) == {"not_selected"}
    assert kept.column("miner").to_pylist() == ["m"] * 4  # other columns pass through
    assert out.stats["embeddings_computed"] == 20 and out.stats["embeddings_cached"] == 0

    side = pq.read_table(tmp_path / EMBEDDINGS)
    assert side.num_rows == 20 and side.schema.metadata[b"normalized"] == b"true"
    emb = np.stack(side.column("embedding").to_pylist()).astype(np.float32)
    assert emb.shape == (20, 384)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    ids = side.column("instruction_id").to_pylist()
    # The stage's choice is the documented one: greedy k-center from the centroid-nearest row.
    first = int(np.argmin(((emb - emb.mean(axis=0)) ** 2).sum(axis=1)))
    want = [ids[i] for i in kcenter_greedy(emb, 4, first=first)]
    assert kept.column("instruction_id").to_pylist() == want

    again = run(_table(texts), CompressConfig(budget=4, min_distance=None), ctx)  # other order, same content
    assert again.stats["embeddings_cached"] == 20 and again.stats["embeddings_computed"] == 0
    assert again.table.column("instruction_id").to_pylist() == want

    half = run(_table(texts), CompressConfig(budget=0.5, first="seed", min_distance=None),
               FakeContext(tmp_path, 3))
    assert half.table.num_rows == 10 and half.dropped.num_rows == 10


# Rewordings of one task mined in a default run (word-5-gram MinHash keeps them all apart).
FACTORIAL = [
    "Write a Python function that calculates the factorial of a given number.",
    "Writing a Python function to compute the factorial of a given number.",
    "Can you provide a Python function to calculate the factorial of a given number?",
    "Could you provide a Python function that calculates the factorial of a number?",
    "Create a Python function to calculate the factorial of a given number.",
    "Can you create a Python function that calculates the factorial of a number?",
]
DISTINCT = [
    "Create a Python function to check if a given number is prime.",
    "Could you provide a Python function that calculates the cumulative sum of a list?",
    "Can you help me write a Python function to sort a list of numbers by their last digit?",
    "Write a Python function that calculates the area of a triangle from its three sides.",
]


@pytest.mark.models
def test_minilm_rewordings_are_dropped_as_semantic_duplicates(tmp_path):
    texts = FACTORIAL + DISTINCT
    out = run(_table(texts), CompressConfig(), FakeContext(tmp_path))  # budget 1.0: all, ranked
    kept = out.table.column("instruction").to_pylist()
    assert sum("factorial" in t for t in kept) == 1
    assert set(DISTINCT) <= set(kept)
    dropped = out.dropped.to_pylist()
    assert len(dropped) == len(FACTORIAL) - 1 == out.stats["semantic_duplicates"]
    kept_factorial = next(i for i, t in zip(out.table.column("instruction_id").to_pylist(), kept)
                          if "factorial" in t)
    for row in dropped:
        assert row["reason"] == "semantic_duplicate" and "factorial" in row["instruction"]
        distance = float(row["detail"].split()[1])
        assert row["detail"].endswith(kept_factorial) and 0 <= distance < 0.5
    # kept rows are pairwise at least min_distance apart (the r-net property)
    emb = pq.read_table(tmp_path / EMBEDDINGS)
    vec = dict(zip(emb.column("instruction_id").to_pylist(),
                   np.stack(emb.column("embedding").to_pylist())))
    ids = out.table.column("instruction_id").to_pylist()
    gaps = [np.linalg.norm(vec[a] - vec[b]) for i, a in enumerate(ids) for b in ids[i + 1:]]
    assert min(gaps) >= 0.5
    # turned off, every row is kept
    assert run(_table(texts), CompressConfig(min_distance=None),
               FakeContext(tmp_path)).table.num_rows == len(texts)


def test_budget_and_min_distance_reasons_are_told_apart(tmp_path, monkeypatch):
    # pure logic on fixed vectors: two tight pairs and two far points, budget 2
    from arenaforge.stages.output import compress

    emb = np.array([[0, 0], [0.1, 0], [5, 0], [5, 0.1], [0, 9], [9, 9]], dtype=np.float32)
    monkeypatch.setattr(compress, "embed_cached", lambda texts, *a, **k: (emb, 0, tmp_path))
    monkeypatch.setattr(compress, "model_key", lambda path: "fixed")
    texts = [f"task {i}" for i in range(6)]
    out = run(_table(texts), CompressConfig(budget=4, normalize=False, min_distance=1.0),
              FakeContext(tmp_path))
    assert out.table.num_rows == 4
    reasons = {r["instruction"]: r["reason"] for r in out.dropped.to_pylist()}
    assert sorted(reasons.values()) == ["semantic_duplicate", "semantic_duplicate"]
    out = run(_table(texts), CompressConfig(budget=2, normalize=False, min_distance=1.0),
              FakeContext(tmp_path))
    reasons = sorted(r["reason"] for r in out.dropped.to_pylist())
    assert out.table.num_rows == 2 and "not_selected" in reasons
