"""Judge every pair in both orders with one variant (judge, protocol, reference).

Pairs go to the judge stage's own code (``arenaforge.stages.arena.judge.judge_with``), so the bench measures
exactly what a run does; an answer's "model" there is its sample id, so two samples of one
model are two contestants. Work is saved in chunks of ``chunk_pairs`` pairs under
``verdicts/<variant>/``, named by a digest of the chunk's pairs, the judge settings and the
judge templates: a killed bench resumes at the next chunk, a changed prompt or setting judges
again, and the request cache answers whatever was already asked.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from arenaforge.pipeline.prompts import load_template
from arenaforge.stages.arena import judge as judge_stage
from arenaforge.stages.arena import protocols as jp

VERDICT_COLUMNS = ("pair_id", "variant", "seconds")
MAX_HIT_SHARE = 0.2  # a chunk's seconds count as its cost when the cache answered at most this


def battle(pair: dict, answers: dict[tuple[str, str], str], question: str,
           reference: str | None) -> jp.Battle:
    """The judge stage's battle of one pair (sample ids as the contestants)."""
    return jp.Battle(pair["task_id"], question, pair["sample_a"], pair["sample_b"],
                     answers[(pair["task_id"], pair["sample_a"])],
                     answers[(pair["task_id"], pair["sample_b"])], reference)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", name)


def _cache_stats(backend) -> dict[str, int]:
    stats = getattr(backend, "cache_stats", None)
    return stats() if callable(stats) else {"hits": 0, "misses": 0}


def chunk_digest(battles: Sequence[jp.Battle], judge_cfg, protocol: jp.JudgeProtocol) -> str:
    payload = json.dumps([[list(b.key), b.answer_a, b.answer_b, b.reference, b.instruction]
                          for b in battles] + [judge_cfg.model_dump(mode="json")]
                         + [load_template(t) for t in protocol.templates], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def judge_variant(variant, battles: Sequence[jp.Battle], pair_ids: Sequence[str], judge_cfg,
                  backend_for: Callable[[str], object], out_dir: Path, chunk_pairs: int,
                  seed: int, progress: Callable[[str], None] = print) -> pa.Table:
    """The judge stage's rows of ``battles`` (both orders) plus ``pair_id, variant, seconds``
    (wall seconds of the chunk's judging per pair, as first measured; null when the request
    cache answered more than ``MAX_HIT_SHARE`` of its requests).

    ``backend_for`` is called only when a chunk is not saved yet.
    """
    protocol = jp.PROTOCOLS[variant.protocol]
    folder = out_dir / "verdicts" / _slug(variant.name)
    folder.mkdir(parents=True, exist_ok=True)
    tables = []
    for start in range(0, len(battles), chunk_pairs):
        chunk = list(battles[start:start + chunk_pairs])
        ids = list(pair_ids[start:start + chunk_pairs])
        path = folder / f"{start:05d}-{chunk_digest(chunk, judge_cfg, protocol)}.parquet"
        if not path.exists():
            backend = backend_for(variant.judge)
            before = _cache_stats(backend)
            began = time.perf_counter()
            rows = judge_stage.judge_with(protocol, backend, variant.judge, chunk, judge_cfg,
                                          seed)
            per_pair = (time.perf_counter() - began) / len(chunk)
            after = _cache_stats(backend)
            hits = after["hits"] - before["hits"]
            asked = hits + after["misses"] - before["misses"]
            # Mostly answered by the request cache (a resumed or grown bench): no cost
            # measurement. A few hits are answers whose code is identical to another's.
            if asked and hits / asked > MAX_HIT_SHARE:
                per_pair = None
            by_key = {b.key: pid for b, pid in zip(chunk, ids, strict=True)}
            for r in rows:
                r.update(pair_id=by_key[(r["instruction_id"], r["model_a"], r["model_b"])],
                         variant=variant.name, seconds=per_pair)
            schema = judge_stage.OUTPUT_SCHEMA.append(pa.field("pair_id", pa.string())) \
                .append(pa.field("variant", pa.string())).append(pa.field("seconds", pa.float64()))
            tmp = path.with_suffix(".tmp")
            pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
            tmp.replace(path)
            cost = "cached" if per_pair is None else f"{per_pair:.1f} s/pair"
            progress(f"  {variant.name}: pairs {start + len(chunk)}/{len(battles)} ({cost})")
        tables.append(pq.read_table(path))
    if not tables:
        return pa.table({})
    return pa.concat_tables(tables)


def measured_seconds(variant, out_dir: Path) -> tuple[float | None, int]:
    """Mean judging seconds per pair over every chunk of ``variant`` ever judged under
    ``out_dir`` without the request cache's help (also chunks of other ``max_pairs``
    subsets: a grown subset re-judges its old pairs from the cache), and how many pairs."""
    folder = out_dir / "verdicts" / _slug(variant.name)
    per_pair: dict[str, float] = {}
    for path in sorted(folder.glob("*.parquet")):
        t = pq.read_table(path, columns=["pair_id", "seconds"]).to_pylist()
        per_pair.update({r["pair_id"]: r["seconds"] for r in t if r["seconds"] is not None})
    if not per_pair:
        return None, 0
    return sum(per_pair.values()) / len(per_pair), len(per_pair)
