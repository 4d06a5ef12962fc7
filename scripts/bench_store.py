"""How long a worker takes to read one shard's rows from an unsharded source stage.

A stage sharded from a global one (difficulty from clean, answer from compress) reads, for
each of its shards, the rows of its 32 keys out of the source's single file. Before the store
kept a decoded file per process, every such read decoded the whole file: cost per read grew
with the run, and per stage as n^2. This prints the per-read cost with the cache (what the
store does) and with the cache emptied before every read (what it did), at each size.

    python scripts/bench_store.py --rows 5000 20000 50000
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import arenaforge.pipeline.store as store_module
import pyarrow as pa
from arenaforge.pipeline.shards import DROPPED_SCHEMA
from arenaforge.pipeline.store import RunStore


def source_table(n: int, seed: int) -> pa.Table:
    """Rows shaped like compress's output: an id and an instruction of a few hundred chars."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9)))
             for _ in range(2000)]
    return pa.table({
        "instruction_id": [f"{i:012x}" for i in range(n)],
        "instruction": [" ".join(rng.choices(words, k=60)) for _ in range(n)],
        "difficulty": [rng.random() for _ in range(n)],
    })


def time_reads(stage, keys: list[str], shard_size: int, cached: bool) -> list[float]:
    out = []
    for start in range(0, len(keys), shard_size):
        if not cached:
            store_module._DECODED.clear()
        t0 = time.perf_counter()
        got = stage.read_where("instruction_id", keys[start:start + shard_size], parts=[0])
        out.append(time.perf_counter() - t0)
        assert got.num_rows == len(keys[start:start + shard_size])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[5000, 20000])
    parser.add_argument("--shard-size", type=int, default=32)
    parser.add_argument("--reads", type=int, default=40,
                        help="shards timed per size (evenly spread over the keys)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    print(f"{'rows':>7} {'file MB':>8} {'cached ms/read':>15} {'uncached ms/read':>17} "
          f"{'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.rows:
            stage = RunStore(Path(tmp) / f"r{n}").stage("compress")
            stage.write_shard(0, source_table(n, seed=n), DROPPED_SCHEMA.empty_table(),
                              {"input_hash": str(n)})
            stage.mark_success({"shards": 1})
            keys = [f"{i:012x}" for i in range(n)]
            step = max(1, n // (args.shard_size * args.reads))
            sample = [k for j, start in enumerate(range(0, n, args.shard_size))
                      if j % step == 0 for k in keys[start:start + args.shard_size]]
            store_module._DECODED.clear()
            cached = time_reads(stage, sample, args.shard_size, cached=True)[1:]  # first decodes
            uncached = time_reads(stage, sample, args.shard_size, cached=False)
            size_mb = Path(stage.shard_path(0)).stat().st_size / 1e6
            c_ms = 1000 * sum(cached) / len(cached)
            u_ms = 1000 * sum(uncached) / len(uncached)
            results.append({"rows": n, "file_mb": round(size_mb, 2),
                            "cached_ms_per_read": round(c_ms, 3),
                            "uncached_ms_per_read": round(u_ms, 3)})
            print(f"{n:>7,} {size_mb:>8.1f} {c_ms:>15.2f} {u_ms:>17.2f} {u_ms / c_ms:>6.0f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
