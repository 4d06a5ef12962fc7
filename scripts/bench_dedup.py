"""Benchmark: rows/s of the ``clean`` stage (filters + exact + MinHash LSH near-dup).

Builds synthetic mined requests (template sentences with random fill-ins, plus exact and
near-duplicate copies), times ``arenaforge.stages.instructions.clean.run`` on them and, as the reference in the same
process, the straightforward datasketch loop (a fresh ``MinHash`` per row, ``update`` per shingle,
LSH query + insert) on a subsample. Prints both rates and their ratio.

    python scripts/bench_dedup.py                 # 100k rows, reference on 10k
    python scripts/bench_dedup.py --rows 20000 --reference-rows 5000
"""

from __future__ import annotations

import argparse
import random
import time

import pyarrow as pa
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.instructions.clean import CleanConfig, run
from arenaforge.stages.instructions.dedup import shingles
from arenaforge.stages.instructions.mine import MINE_SCHEMA

VERBS = ["Write", "Implement", "Create", "Build", "Design", "Explain how to write", "Show me"]
THINGS = ["a function", "a class", "a command-line tool", "a REST endpoint", "a generator",
          "a decorator", "an async worker", "a unit test suite", "a parser", "a cache"]
TASKS = ["that merges {a} sorted {b} into one", "that finds the {a} most frequent {b}",
         "that validates {b} against a schema with {a} rules", "that streams {b} in chunks of {a}",
         "that retries failed {b} up to {a} times with exponential backoff",
         "that groups {b} by key and returns the top {a} groups",
         "that converts {b} to JSON while keeping {a} decimal places"]
NOUNS = ["lists", "log lines", "CSV rows", "user records", "HTTP requests", "matrices",
         "timestamps", "file paths", "graph edges", "transactions", "sensor readings", "tokens"]
EXTRAS = ["It should handle empty input.", "Use only the standard library.",
          "Add type hints and docstrings.", "Explain the time complexity.",
          "Make it thread-safe.", "Include example usage.", "Avoid recursion.", ""]


def synthetic(n: int, seed: int = 0) -> list[str]:
    """``n`` request texts: ~85% fresh, ~10% near copies (one word changed), ~5% exact copies."""
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(n):
        r = rng.random()
        if out and r < 0.05:
            out.append(rng.choice(out))
        elif out and r < 0.15:
            words = rng.choice(out).split()
            words[rng.randrange(len(words))] = rng.choice(NOUNS).split()[0]
            out.append(" ".join(words))
        else:
            task = rng.choice(TASKS).format(a=rng.randint(2, 500), b=rng.choice(NOUNS))
            extras = " ".join(rng.sample(EXTRAS, 2))
            out.append(f"{rng.choice(VERBS)} {rng.choice(THINGS)} in Python {task}. {extras}")
    return out


def mined_table(texts: list[str]) -> pa.Table:
    return pa.Table.from_pylist([
        {"instruction_id": instruction_id(t), "instruction": t, "miner": "bench",
         "language": "Python", "sample_params": "{}", "template": "synthetic",
         "finish_reason": "stop", "raw": t, "task_id": f"bench|Python|{i:06d}", "sample_index": i}
        for i, t in enumerate(texts)], schema=MINE_SCHEMA)


def reference_rate(texts: list[str], cfg: CleanConfig) -> float:
    """Rows/s of the plain datasketch loop (MinHash per row, update per shingle)."""
    from datasketch import MinHash, MinHashLSH

    nd = cfg.near_dup
    start = time.perf_counter()
    lsh = MinHashLSH(threshold=nd.threshold, num_perm=nd.num_perm)
    for i, text in enumerate(texts):
        mh = MinHash(num_perm=nd.num_perm)
        for s in shingles(text, nd.ngram):
            mh.update(s)
        if not lsh.query(mh):
            lsh.insert(i, mh)
    return len(texts) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--reference-rows", type=int, default=10_000)
    args = parser.parse_args(argv)

    cfg = CleanConfig()
    texts = synthetic(args.rows)
    table = mined_table(texts)
    start = time.perf_counter()
    result = run(table, cfg, None)
    seconds = time.perf_counter() - start
    rate = args.rows / seconds
    reasons: dict[str, int] = {}
    for reason in result.dropped.column("reason").to_pylist():
        reasons[reason] = reasons.get(reason, 0) + 1
    ref = reference_rate(texts[:args.reference_rows], cfg)
    nd = cfg.near_dup
    print(f"clean + MinHash LSH ({nd.ngram}-gram, {nd.num_perm} perms, threshold {nd.threshold})")
    print(f"  rows: {args.rows}  kept: {result.table.num_rows}  dropped: {reasons}")
    print(f"  clean.run:            {seconds:8.1f} s  {rate:10.0f} rows/s")
    print(f"  reference (plain datasketch loop, {args.reference_rows} rows): {ref:10.0f} rows/s")
    print(f"  ratio clean.run / reference: {rate / ref:.2f}x")


if __name__ == "__main__":
    main()
