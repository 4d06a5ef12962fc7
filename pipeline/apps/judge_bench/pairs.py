"""Execution-labelled answer pairs: one answer passes the official tests, the other fails.

Within a problem every passing answer can pair with every failing one. A *same-model* pair has
both answers from one contestant (a judge cannot be right by preferring a model); a
*cross-model* pair has one from each. Identical texts of one model count once. When a problem
has more candidate pairs than ``pairs_per_problem``, pairs are taken alternately from the two
types in a seeded shuffle, so no easy problem fills the bench and both types stay represented.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from itertools import product

from arenaforge.pipeline.statuses import FAILED_STATUSES, PASSED

SAME, CROSS = "same_model", "cross_model"
DIFFICULTY = (("hard", 0.0, 0.25), ("medium", 0.25, 0.6), ("easy", 0.6, 1.01))


def difficulty_bucket(pass_rate: float) -> str:
    """The problem's difficulty from the pass rate of all its answers.

    >>> difficulty_bucket(0.1), difficulty_bucket(0.5), difficulty_bucket(1.0)
    ('hard', 'medium', 'easy')
    """
    return next(name for name, lo, hi in DIFFICULTY if lo <= pass_rate < hi)


def _distinct(rows: Sequence[dict]) -> list[dict]:
    seen, out = set(), []
    for r in rows:
        key = (r["model"], r["response"].strip())
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def build_pairs(samples: Sequence[dict], pairs_per_problem: int, seed: int) -> list[dict]:
    """Pairs of ``samples`` (rows with task_id, sample_id, model, response, status, chars).

    Returns:
        One dict per pair: ``pair_id, task_id, pair_type, sample_a, sample_b`` (ids,
        ``sample_a < sample_b``), ``model_a, model_b, passed`` ("a" or "b": the side that
        passed), ``chars_a, chars_b, pass_rate, difficulty, order_key`` (a stable hash that
        fixes the order subsets are taken in), in problem order.
    """
    by_task: dict[str, list[dict]] = {}
    for r in samples:
        by_task.setdefault(r["task_id"], []).append(r)
    out = []
    for task, rows in by_task.items():
        executed = [r for r in rows if r["status"] == PASSED or r["status"] in FAILED_STATUSES]
        pass_rate = (sum(r["status"] == PASSED for r in executed) / len(executed)
                     if executed else 0.0)
        distinct = _distinct(executed)
        good = [r for r in distinct if r["status"] == PASSED]
        bad = [r for r in distinct if r["status"] in FAILED_STATUSES]
        kinds = {SAME: [], CROSS: []}
        for p, f in product(good, bad):
            kinds[SAME if p["model"] == f["model"] else CROSS].append((p, f))
        rng = random.Random(f"{seed}:{task}")
        for pool in kinds.values():
            rng.shuffle(pool)
        chosen = []
        while len(chosen) < pairs_per_problem and (kinds[SAME] or kinds[CROSS]):
            for kind in (SAME, CROSS):
                if kinds[kind] and len(chosen) < pairs_per_problem:
                    chosen.append((kind, *kinds[kind].pop()))
        for kind, p, f in chosen:
            a, b = sorted((p, f), key=lambda r: r["sample_id"])
            pair_id = f"{task}|{a['sample_id']}|{b['sample_id']}"
            out.append({
                "pair_id": pair_id, "task_id": task, "pair_type": kind,
                "sample_a": a["sample_id"], "sample_b": b["sample_id"],
                "model_a": a["model"], "model_b": b["model"],
                "passed": "a" if a is p else "b", "chars_a": a["chars"], "chars_b": b["chars"],
                "pass_rate": pass_rate, "difficulty": difficulty_bucket(pass_rate),
                "order_key": hashlib.sha256(f"{seed}:{pair_id}".encode()).hexdigest()})
    return out


def subset(pairs: Sequence[dict], max_pairs: int | None) -> list[dict]:
    """The first ``max_pairs`` pairs of the fixed shuffled order (all when None), kept in
    problem order so a judge's requests of one problem stay together."""
    if max_pairs is None or max_pairs >= len(pairs):
        return list(pairs)
    keep = {p["pair_id"] for p in sorted(pairs, key=lambda p: p["order_key"])[:max_pairs]}
    return [p for p in pairs if p["pair_id"] in keep]
