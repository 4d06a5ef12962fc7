"""The embeddings cache shared by decontaminate and compress (arenaforge.stages.common.embeddings)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from arenaforge.pipeline.store import TableCache
from arenaforge.pipeline.textnorm import instruction_id, normalize_text
from arenaforge.stages.common.embeddings import cached_embeddings
from arenaforge.stages.instructions import decontaminate
from arenaforge.stages.output import compress

TEXTS = ["Write a Python function that\nreverses a string.",
         "Implement  merge sort\tfor a list of numbers in Python.",
         "  Write a SQL query that counts orders per customer.\n\n",
         "Write a Python function that returns the n-th Fibonacci number."]


class Ctx:
    """What the two stages use of a run context."""

    def __init__(self, run_dir: Path):
        self.run_dir, self.seed = run_dir, 0

    def table_cache(self, name: str) -> TableCache:
        return TableCache(self.run_dir / "cache" / name)

    def write_artifact(self, relpath: str, data) -> Path:
        import pyarrow.parquet as pq

        path = self.run_dir / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, path)
        return path


def test_each_distinct_normalised_text_is_embedded_once(tmp_path):
    calls: list[list[str]] = []

    def embed(texts):
        calls.append(list(texts))
        return np.arange(2 * len(texts), dtype=np.float32).reshape(len(texts), 2)

    vecs, hits = cached_embeddings(["a  b", "a b", "c"], embed, TableCache(tmp_path))
    assert hits == 0 and sorted(calls[0]) == ["a b", "c"]
    np.testing.assert_array_equal(vecs[0], vecs[1])


@pytest.mark.models
def test_an_exact_lookup_reads_only_the_part_of_exactly_its_texts(tmp_path):
    calls: list[list[str]] = []

    def embed(texts):
        calls.append(sorted(texts))
        return np.ones((len(texts), 2), dtype=np.float32)

    cache = TableCache(tmp_path)
    cached_embeddings(["a", "b"], embed, cache, lookup="exact")   # a shard
    cached_embeddings(["c"], embed, cache, lookup="exact")        # another shard
    _, hits = cached_embeddings(["b", "a", "a"], embed, cache, lookup="exact")  # a rerun
    assert hits == 3 and calls == [["a", "b"], ["c"]]
    _, hits = cached_embeddings(["a"], embed, cache, lookup="exact")  # no part of just "a"
    assert hits == 0 and calls[-1] == ["a"]
    _, hits = cached_embeddings(["a", "b", "c"], embed, cache)  # a scan finds every part
    assert hits == 3 and len(calls) == 3


def test_normalising_does_not_change_minilm_tokens():
    from arenaforge.pipeline.embedder import LocalEmbedder
    from arenaforge.stages.common.embeddings import resolve_model_path

    tok = LocalEmbedder(resolve_model_path(None)).model().tokenizer
    for text in TEXTS:
        assert tok(text)["input_ids"] == tok(normalize_text(text))["input_ids"]


@pytest.mark.models
def test_compress_reuses_what_decontaminate_embedded(tmp_path):
    ctx = Ctx(tmp_path)
    table = pa.table({"instruction_id": [instruction_id(t) for t in TEXTS],
                      "instruction": TEXTS})
    kept = decontaminate.run(table, decontaminate.DecontaminateConfig(), ctx).table
    assert kept.num_rows == len(TEXTS) - 1  # the Fibonacci request is HumanEval/55
    out = compress.run(kept, compress.CompressConfig(min_distance=None), ctx)
    assert out.stats["embeddings_computed"] == 0
    assert out.stats["embeddings_cached"] == kept.num_rows
    # and a second decontamination embeds nothing new (HumanEval docstrings included)
    parts = len(list(tmp_path.glob("cache/embeddings/*/part-*.parquet")))
    decontaminate.run(table, decontaminate.DecontaminateConfig(), ctx)
    assert len(list(tmp_path.glob("cache/embeddings/*/part-*.parquet"))) == parts


@pytest.mark.models
def test_bfloat16_embeddings_agree_with_float32_and_keep_a_cache_of_their_own(tmp_path):
    from arenaforge.stages.common.embeddings import embed_texts, resolve_model_path

    path = resolve_model_path(None)
    full, half = embed_texts(TEXTS, path), embed_texts(TEXTS, path, precision="bfloat16")
    assert full.dtype == half.dtype == np.float32 and not np.array_equal(full, half)
    cosines = (full * half).sum(1) / np.linalg.norm(full, axis=1) / np.linalg.norm(half, axis=1)
    assert cosines.min() > 0.9999
    # the same run embeds the texts again at the other precision, in another cache directory,
    # and a run of one precision end to end (the run-level setting) reuses its own vectors
    ctx, table = Ctx(tmp_path), pa.table({"instruction_id": [instruction_id(t) for t in TEXTS],
                                          "instruction": TEXTS})
    check = decontaminate.EmbeddingCheck(precision="bfloat16")
    kept = decontaminate.run(table, decontaminate.DecontaminateConfig(embedding=check), ctx).table
    assert kept.num_rows == len(TEXTS) - 1  # the same contamination found
    mixed = compress.run(kept, compress.CompressConfig(min_distance=None), ctx)
    assert mixed.stats["embeddings_computed"] == kept.num_rows  # float32: not bf16's vectors
    same = compress.run(kept, compress.CompressConfig(min_distance=None, precision="bfloat16"),
                        ctx)
    assert same.stats["embeddings_cached"] == kept.num_rows
    assert sorted(p.name for p in (tmp_path / "cache" / "embeddings").iterdir())[1].endswith(
        "-bfloat16")


def test_the_run_level_precision_reaches_both_stages_unless_a_stage_sets_its_own():
    from arenaforge.pipeline.config import load_config

    root = Path(__file__).resolve().parents[3]
    cfg = load_config(root / "configs" / "smoke.yaml", ["embedding_precision=bfloat16",
                                                         "compress.precision=float32"])
    assert cfg.decontaminate.embedding.precision == "bfloat16"
    assert cfg.compress.precision == "float32"
    assert load_config(root / "configs" / "smoke.yaml").compress.precision == "float32"


@pytest.mark.models
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_a_texts_vector_does_not_depend_on_the_texts_it_came_with(precision):
    # batches hold only texts of one token length (nothing padded): a text's vector is the same
    # bits alone, in any request, at any batch size, on any number of lanes
    from arenaforge.pipeline.embedder import LocalEmbedder
    from arenaforge.stages.common.embeddings import resolve_model_path

    others = [f"Write a Python function number {i} that " + "adds two numbers " * (i % 5)
              for i in range(24)]
    texts = [normalize_text(t) for t in TEXTS] + others
    embedder = LocalEmbedder(resolve_model_path(None), "cpu")
    alone = np.stack([embedder.embed([t], 1, precision)[0] for t in texts])
    for batch_size in (16, 64):
        together = embedder.embed(texts, batch_size, precision)
        assert np.array_equal(together, alone), batch_size
    reversed_ = embedder.embed(texts[::-1], 8, precision)[::-1]
    assert np.array_equal(reversed_, alone)
    on_lanes = LocalEmbedder(resolve_model_path(None), "cpu", lanes=2)
    assert np.array_equal(on_lanes.embed(texts[5:] + texts[:5], 16, precision),
                          np.concatenate([alone[5:], alone[:5]]))
    on_lanes.close()
