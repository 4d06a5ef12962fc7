"""What bfloat16 embeddings keep of float32's decisions, on a fixed set of 53 requests.

Measured here (AVX512-BF16 CPU, the embedded MiniLM, these texts against HumanEval's 164
docstrings): every cosine within 0.0023 of float32's and the same 8 requests over the 0.7
threshold (the nearest cosine is 0.007 from it); compress keeps as many rows and drops as many
as semantic duplicates, and its first 26 k-center picks are float32's, but a group of rewordings
can keep a different member (the factorial rewordings lie 0.19-0.40 apart) and the order after
it differs. The tolerance tested: decisions equal, cosines within 0.005, the first 20 picks
equal, and a row kept only at one precision is a rewording (within ``min_distance``) of one
kept only at the other. That is why ``embedding_precision`` stays ``float32`` by default:
``auto`` is for runs that accept that tolerance.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from arenaforge.pipeline.embedder import LocalEmbedder, resolve_precision
from arenaforge.stages.common.embeddings import resolve_model_path, unit_rows
from arenaforge.stages.instructions.decontaminate import (
    DecontaminateConfig,
    humaneval_docs,
)
from arenaforge.stages.instructions.decontaminate import run as decontaminate
from arenaforge.stages.output.compress import CompressConfig
from arenaforge.stages.output.compress import run as compress

from tests.stages.output.test_compress import DISTINCT, FACTORIAL, TOPICS, FakeContext, _table

DATA = Path(__file__).resolve().parents[2] / "data" / "instructions-20.jsonl"
TEXTS = [json.loads(line)["instruction"] for line in DATA.read_text().splitlines()] + [
    t for group in TOPICS.values() for t in group] + FACTORIAL + DISTINCT + [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a function that checks whether a number is prime.",
    "Return the largest element of a list of numbers."]
COSINE_TOLERANCE = 0.005
SAME_FIRST_PICKS = 20


def test_auto_is_bfloat16_only_where_it_is_native():
    assert resolve_precision("float32", "cuda") == "float32"
    assert resolve_precision("bfloat16", "cpu") == "bfloat16"
    assert resolve_precision("auto", "cuda:1") == "bfloat16"
    from arenaforge.pipeline.embedder import native_bf16_cpu

    assert resolve_precision("auto", "cpu") == ("bfloat16" if native_bf16_cpu() else "float32")
    with pytest.raises(ValueError, match="embedding precision 'int8'"):
        resolve_precision("int8", "cpu")


@pytest.mark.models
def test_bfloat16_keeps_decontamination_decisions_and_the_k_center_cover(tmp_path):
    assert len(TEXTS) == 53
    embedder = LocalEmbedder(resolve_model_path(None))
    docs = [d[3] for d in humaneval_docs() if d[2] == "docstring"]
    cos = {}
    for precision in ("float32", "bfloat16"):
        mine = unit_rows(embedder.embed(TEXTS, 64, precision))
        cos[precision] = (mine @ unit_rows(embedder.embed(docs, 64, precision)).T).max(axis=1)
    assert np.abs(cos["float32"] - cos["bfloat16"]).max() < COSINE_TOLERANCE
    threshold = DecontaminateConfig().embedding.threshold
    assert ((cos["float32"] >= threshold) == (cos["bfloat16"] >= threshold)).all()
    assert (cos["float32"] >= threshold).sum() >= 5  # decisions that could flip

    # the stage itself: the same rows dropped, for the same reasons
    out = {}
    for precision in ("float32", "bfloat16"):
        cfg = DecontaminateConfig(embedding={"precision": precision})
        res = decontaminate(_table(TEXTS), cfg, None)
        out[precision] = sorted((r["instruction_id"], r["reason"]) for r in res.dropped.to_pylist())
    assert out["float32"] == out["bfloat16"]

    picks, dropped = {}, {}
    for precision in ("float32", "bfloat16"):
        res = compress(_table(TEXTS), CompressConfig(precision=precision),
                       FakeContext(tmp_path / precision))
        picks[precision] = res.table.column("instruction_id").to_pylist()
        dropped[precision] = res.dropped.column("reason").to_pylist()
    assert len(picks["float32"]) == len(picks["bfloat16"])
    assert sorted(dropped["float32"]) == sorted(dropped["bfloat16"])
    assert picks["float32"][:SAME_FIRST_PICKS] == picks["bfloat16"][:SAME_FIRST_PICKS]
    # a row kept at one precision only is a rewording of a row kept at the other only
    vec = dict(zip([r["instruction_id"] for r in _table(TEXTS).to_pylist()],
                   unit_rows(embedder.embed(TEXTS, 64, "float32"))))
    only32 = set(picks["float32"]) - set(picks["bfloat16"])
    only16 = set(picks["bfloat16"]) - set(picks["float32"])
    assert len(only32) == len(only16)
    min_distance = CompressConfig().min_distance
    for row in only32:
        assert min(np.linalg.norm(vec[row] - vec[other]) for other in only16) < min_distance
