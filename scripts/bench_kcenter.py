"""Benchmark arenaforge.stages.output.kcenter against the google/active-learning KCenterGreedy loop.

The reference mirrors ``sampling_methods/kcenter_greedy.py`` (google/active-learning): each
step takes ``np.argmax`` of the running min distances, computes sklearn ``pairwise_distances``
from the new center to every point and folds it in with ``np.minimum``. Its first center is
``np.random.choice`` when nothing is selected yet; both sides start from ``--first`` here so the
selections are comparable. Same process, same data; prints whether the selections are
identical, the speed ratio (target >= 20x) and peak traced memory.

    python scripts/bench_kcenter.py                       # n=100000 d=384 k=1000
    python scripts/bench_kcenter.py --n 20000 --k 200     # quicker
    python scripts/bench_kcenter.py --data clusters       # embedding-like clustered data
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arenaforge.stages.output.kcenter import kcenter_greedy_with_radii


def google_reference(X: np.ndarray, k: int, first: int) -> list[int]:
    """The per-step sklearn recomputation of google/active-learning's kCenterGreedy."""
    from sklearn.metrics import pairwise_distances

    min_distances = None
    new_batch: list[int] = []
    for _ in range(k):
        ind = first if min_distances is None else int(np.argmax(min_distances))
        dist = pairwise_distances(X, X[[ind]], metric="euclidean")
        if min_distances is None:
            min_distances = np.min(dist, axis=1).reshape(-1, 1)
        else:
            min_distances = np.minimum(min_distances, dist)
        new_batch.append(ind)
    return new_batch


def make_data(kind: str, n: int, d: int, seed: int) -> np.ndarray:
    """float32 points: iid Gaussian, or unit vectors around n/100 random directions."""
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        return rng.standard_normal((n, d), dtype=np.float32)
    topics = rng.standard_normal((max(1, n // 100), d), dtype=np.float32)
    X = topics[rng.integers(0, len(topics), n)] + 0.3 * rng.standard_normal((n, d), dtype=np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def peak_mib(fn) -> float:
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", choices=("gaussian", "clusters"), default="gaussian")
    ap.add_argument("--backend", choices=("numpy", "torch", "auto"), default="numpy")
    ap.add_argument("--ref-mem-steps", type=int, default=20,
                    help="reference steps traced for peak memory (its per-step peak is flat)")
    args = ap.parse_args(argv)

    X = make_data(args.data, args.n, args.d, args.seed)
    print(f"data={args.data} n={args.n} d={args.d} k={args.k} dtype={X.dtype} "
          f"X={X.nbytes / 2**20:.1f} MiB backend={args.backend}")

    t0 = time.perf_counter()
    ours = kcenter_greedy_with_radii(X, args.k, args.first, backend=args.backend)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = google_reference(X, args.k, args.first)
    t_ref = time.perf_counter() - t0

    same = ours.indices.tolist() == ref
    if not same:
        diverge = next(i for i, (a, b) in enumerate(zip(ours.indices, ref, strict=True)) if a != b)
        print(f"selection DIFFERS from step {diverge}: ours {ours.indices[diverge]} "
              f"ref {ref[diverge]}")
    print(f"selection identical: {same}")
    print(f"ours      {t_ours:8.2f} s")
    print(f"reference {t_ref:8.2f} s")
    print(f"speed ratio: {t_ref / t_ours:.1f}x (target >= 20x)")
    steps = sorted({0, args.k // 10, args.k // 2, args.k - 1})
    print("covering radius after k centers: "
          + ", ".join(f"k={s + 1}: {ours.radii[s]:.4f}" for s in steps))

    mem_ours = peak_mib(lambda: kcenter_greedy_with_radii(X, args.k, args.first,
                                                          backend=args.backend))
    ref_steps = min(args.k, args.ref_mem_steps)
    mem_ref = peak_mib(lambda: google_reference(X, ref_steps, args.first))
    print(f"peak traced memory beyond X: ours {mem_ours:.1f} MiB, "
          f"reference {mem_ref:.1f} MiB (first {ref_steps} steps); "
          f"numpy allocations only (tracemalloc)")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
