"""Greedy k-center selection (KCenterGreedy, Sener & Savarese 2017) with exact lazy updates.

The greedy rule: start from a given center, then repeatedly add the point whose Euclidean
distance to its nearest chosen center is largest (ties to the lowest index). The widely copied
reference (google/active-learning ``sampling_methods/kcenter_greedy.py``) recomputes the
distance from each new center to every point with sklearn, which costs a full pass over ``X``
per step. Here each point keeps an *upper bound* on its distance to the nearest center (its
distance as of the last time it was brought up to date) and only the points whose bound is at
the top are refreshed against the centers added since; the point picked is provably the same
one a full update would pick, and most point-center distances are never computed.

Arithmetic (chosen so the selection matches the sklearn reference exactly): each point-center
squared distance is accumulated in float64 on a small block, rounded to ``X``'s dtype, and the
square root is taken in that dtype. That is what sklearn does for float32 input (it upcasts
chunks to float64) and is exact enough for float64 input; identical rows are at distance
exactly 0. ``X`` is never copied whole; working memory beyond ``X`` is O(n) (bounds, row
norms) plus a float64 copy of the chosen centers (O(k d)) and fixed 8 MiB blocks.

The torch backend (``backend="torch"``, or ``"auto"`` when CUDA is visible) does a full blocked
update per step on the device with the same per-pair arithmetic; on a GPU that pass is cheap.

Example:
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0], [0.0, 5.0]])
    >>> kcenter_greedy(X, 3).tolist()
    [0, 2, 3]
    >>> kcenter_greedy_with_radii(X, 3).radii.tolist()
    [10.0, 5.0, 1.0]
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import Literal

import numpy as np

Backend = Literal["auto", "numpy", "torch"]

# Centers per float64 GEMM block.
_CENTER_BLOCK = 1024
# Element budget of one float64 temporary block (8 MiB): bounds memory independent of n.
_BLOCK_ELEMS = 1 << 20
# Dot-form squared distances below this fraction of |a|^2 + |c|^2 have lost too many digits
# to cancellation; they are recomputed from differences so near-duplicates stay exact.
_CANCEL_FRACTION = 1e-3
_FRESH = np.iinfo(np.int64).max  # "last" value of a selected point: never stale


@dataclasses.dataclass(frozen=True)
class KCenterResult:
    """Indices in selection order and the covering radius after each step.

    Attributes:
        indices: (k,) int64 row indices of ``X`` in the order they were chosen.
        radii: (k,) in ``X``'s dtype; ``radii[j]`` is the largest distance from any row of
            ``X`` to its nearest center once ``indices[: j + 1]`` (and any
            ``already_selected``) are centers. Non-increasing; plot it to choose k.
    """

    indices: np.ndarray
    radii: np.ndarray


def kcenter_greedy(X: np.ndarray, k: int, first: int = 0,
                   already_selected: Sequence[int] = (), *, backend: Backend = "auto",
                   device: str | None = None) -> np.ndarray:
    """Pick ``k`` rows of ``X`` by greedy farthest-point (k-center) selection.

    Args:
        X: (n, d) float array of points; float32 and float64 are kept, other real dtypes are
            converted to float64.
        k: number of new centers to return, 1 <= k <= n - len(already_selected).
        first: index of the first center; used only when ``already_selected`` is empty (it is
            then ``result[0]``).
        already_selected: existing centers; when given, all ``k`` returned rows are greedy
            picks that exclude them.
        backend: ``"numpy"`` (lazy exact updates on CPU), ``"torch"`` (full updates on a torch
            device), or ``"auto"``: torch on CUDA when a GPU is visible, else numpy.
        device: torch device for the torch backend; default ``cuda`` when available.

    Returns:
        (k,) int64 indices in selection order. Rows identical to a chosen center are at
        distance 0, so duplicates are picked only after every distinct row, lowest index first.

    Raises:
        ValueError: on a non-2-D, empty or non-finite ``X`` (naming the first bad row), on
            ``k`` out of range, or on out-of-range or repeated center indices.
        TypeError: when ``k`` is not an int.
    """
    return kcenter_greedy_with_radii(X, k, first, already_selected, backend=backend,
                                     device=device).indices


def kcenter_greedy_with_radii(X: np.ndarray, k: int, first: int = 0,
                              already_selected: Sequence[int] = (), *,
                              backend: Backend = "auto", device: str | None = None,
                              stop_below: float | None = None) -> KCenterResult:
    """Same selection as :func:`kcenter_greedy`, also returning the covering-radius curve.

    ``stop_below``: stop early, once the covering radius is below it (the next pick would lie
    closer than that to a center): the result is then the prefix of the ``k`` picks whose
    ``radii[:-1]`` are all ``>= stop_below`` (a greedy r-net), with its radii, computed without
    the picks after it.
    """
    X, seeds = _validate(X, k, first, already_selected)
    stop = -np.inf if stop_below is None else float(stop_below)
    if backend == "auto":
        backend = "torch" if _cuda_available() else "numpy"
    if backend == "numpy":
        return _lazy_numpy(X, k, seeds, seeded=len(already_selected) > 0, stop_below=stop)
    if backend == "torch":
        return _full_torch(X, k, seeds, len(already_selected) > 0, device, stop_below=stop)
    raise ValueError(f"backend must be 'auto', 'numpy' or 'torch', got {backend!r}")


def _validate(X: np.ndarray, k: int, first: int,
              already_selected: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Check inputs; return X as a float array and the seed centers."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n points, d features), got shape {X.shape}")
    n, d = X.shape
    if n == 0 or d == 0:
        raise ValueError(f"X must have at least one point and one feature, got shape {X.shape}")
    if X.dtype not in (np.float32, np.float64):
        if not (np.issubdtype(X.dtype, np.integer) or np.issubdtype(X.dtype, np.floating)):
            raise ValueError(f"X must be real numbers, got dtype {X.dtype}")
        X = X.astype(np.float64)
    finite_rows = np.isfinite(X).all(axis=1)
    if not finite_rows.all():
        row = int(np.argmin(finite_rows))
        raise ValueError(f"X has NaN or infinite values in row {row}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int, got {k!r}")
    seeds = np.asarray(list(already_selected), dtype=np.int64)
    if seeds.size:
        bad = seeds[(seeds < 0) | (seeds >= n)]
        if bad.size:
            raise ValueError(f"already_selected index {int(bad[0])} out of range for n={n}")
        if np.unique(seeds).size != seeds.size:
            raise ValueError("already_selected has repeated indices")
    else:
        if not 0 <= first < n:
            raise ValueError(f"first={first} out of range for n={n}")
        seeds = np.array([first], dtype=np.int64)
    available = n - (len(already_selected))
    if not 1 <= k <= available:
        raise ValueError(f"k must be in [1, {available}] (n={n} points, "
                         f"{len(already_selected)} already selected), got k={k}")
    return X, seeds


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    # Importing torch takes seconds; skip it when no GPU driver is loaded (NVIDIA or ROCm).
    if "torch" not in sys.modules and not any(
            os.path.exists(p) for p in ("/proc/driver/nvidia/version", "/dev/kfd")):
        return False
    import torch

    return bool(torch.cuda.is_available())


class _Points:
    """X with float64 row norms and a float64 buffer of the centers chosen so far."""

    def __init__(self, X: np.ndarray, n_centers: int) -> None:
        self.X = X
        n, d = X.shape
        self.norms = np.empty(n, dtype=np.float64)
        step = max(1, _BLOCK_ELEMS // d)
        for r0 in range(0, n, step):
            block = X[r0:r0 + step].astype(np.float64)
            self.norms[r0:r0 + step] = np.einsum("sd,sd->s", block, block)
        # O(k d) float64 copy of the centers, so refreshes never re-gather and re-cast them.
        self.centers = np.empty((n_centers, d), dtype=np.float64)
        self.center_norms = np.empty(n_centers, dtype=np.float64)
        self.center_ids = np.empty(n_centers, dtype=np.int64)
        self.m = 0

    def add(self, ids: np.ndarray) -> None:
        m, q = self.m, len(ids)
        self.center_ids[m:m + q] = ids
        self.centers[m:m + q] = self.X[ids]
        self.center_norms[m:m + q] = self.norms[ids]
        self.m += q

    def min_dists(self, rows: np.ndarray | slice, since: int = 0) -> np.ndarray:
        """Distance from each of ``X[rows]`` to its nearest center among centers ``since:m``.

        Per pair: squared distance in float64, rounded to X's dtype, sqrt in that dtype
        (sklearn's float32 arithmetic). Rounding and sqrt are monotone, so the min is taken
        on the float64 squares first and only the winners are rounded.
        """
        X = self.X
        rows = np.arange(X.shape[0])[rows] if isinstance(rows, slice) else rows
        d = X.shape[1]
        best = np.full(len(rows), np.inf, dtype=np.float64)
        for c0 in range(since, self.m, _CENTER_BLOCK):
            c1 = min(c0 + _CENTER_BLOCK, self.m)
            C, cn = self.centers[c0:c1], self.center_norms[c0:c1]
            r_step = max(1, _BLOCK_ELEMS // max(c1 - c0, d))
            for r0 in range(0, len(rows), r_step):
                ids = rows[r0:r0 + r_step]
                contiguous = ids[-1] - ids[0] + 1 == len(ids)
                A = (X[ids[0]:ids[-1] + 1] if contiguous else X[ids]).astype(np.float64)
                sq = (A @ C.T).__imul__(-2.0)
                sq += self.norms[ids][:, None]
                sq += cn[None, :]
                mn = sq.min(axis=1)
                # A small dot-form result may be mostly cancellation error: recompute its row
                # from differences (then identical rows come out exactly 0).
                suspect = np.flatnonzero(mn <= _CANCEL_FRACTION * (self.norms[ids] + cn.max()))
                for r in suspect:
                    diff = C - A[r]
                    mn[r] = np.einsum("qd,qd->q", diff, diff).min()
                np.minimum(best[r0:r0 + r_step], np.maximum(mn, 0.0), out=best[r0:r0 + r_step])
        return np.sqrt(best.astype(X.dtype))


def _lazy_numpy(X: np.ndarray, k: int, seeds: np.ndarray, seeded: bool,
                stop_below: float = -np.inf) -> KCenterResult:
    """Greedy selection with lazily refreshed upper bounds (exact; see module docstring)."""
    n = X.shape[0]
    pts = _Points(X, len(seeds) + k)
    pts.add(seeds)
    # bound[i] >= true distance of i to its nearest center; equal when last[i] == pts.m.
    bound = pts.min_dists(slice(None))
    last = np.full(n, pts.m, dtype=np.int64)
    bound[seeds] = -np.inf
    last[seeds] = _FRESH

    picks: list[int] = [] if seeded else [int(seeds[0])]
    radii: list[float] = []
    while True:
        i = _top_fresh(pts, bound, last)
        radius = max(float(bound[i]), 0.0) if np.isfinite(bound[i]) else 0.0
        if picks and len(radii) < len(picks):
            radii.append(radius)
        if len(picks) == k or (picks and radius < stop_below):
            break
        picks.append(i)
        pts.add(np.array([i]))
        bound[i] = -np.inf
        last[i] = _FRESH
    return KCenterResult(np.asarray(picks, dtype=np.int64), np.asarray(radii, dtype=X.dtype))


def _top_fresh(pts: _Points, bound: np.ndarray, last: np.ndarray) -> int:
    """Lowest-index argmax of the true nearest-center distance, refreshing bounds as needed.

    If the top bound is up to date it is the true maximum: every other point's true distance
    is at most its bound, which is at most this one (strictly less for lower indices, since
    np.argmax returns the first maximum). Otherwise refresh the top 1, 4, 16... stale bounds.
    """
    n, m = len(bound), pts.m
    batch = 1
    while True:
        i = int(np.argmax(bound))
        if last[i] >= m or bound[i] == -np.inf:
            return i
        if batch == 1:
            stale = np.array([i])
        else:
            top = np.argpartition(bound, n - batch)[n - batch:]
            stale = np.sort(top[last[top] < m])
        since = int(last[stale].min())
        bound[stale] = np.minimum(bound[stale], pts.min_dists(stale, since))
        last[stale] = m
        batch = min(batch * 4, n)


def _full_torch(X: np.ndarray, k: int, seeds: np.ndarray, seeded: bool,
                device: str | None, stop_below: float = -np.inf) -> KCenterResult:
    """Greedy selection with a full distance update per step on a torch device (GPU path)."""
    import torch

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    Xt = torch.from_numpy(np.ascontiguousarray(X)).to(dev)
    n, d = Xt.shape
    step = max(1, (_BLOCK_ELEMS * (16 if dev.type == "cuda" else 1)) // d)
    bound = torch.full((n,), float("inf"), dtype=Xt.dtype, device=dev)

    def absorb(center: int) -> None:
        c = Xt[center].to(torch.float64)
        for r0 in range(0, n, step):
            diff = Xt[r0:r0 + step].to(torch.float64) - c
            dist = (diff * diff).sum(dim=1).to(Xt.dtype).sqrt()
            torch.minimum(bound[r0:r0 + step], dist, out=bound[r0:r0 + step])

    for s in seeds.tolist():
        absorb(s)
    selected = torch.zeros(n, dtype=torch.bool, device=dev)
    selected[torch.from_numpy(seeds).to(dev)] = True
    picks: list[int] = [] if seeded else [int(seeds[0])]
    radii: list[float] = []
    neg_inf = torch.tensor(float("-inf"), dtype=Xt.dtype, device=dev)
    while True:
        masked = torch.where(selected, neg_inf, bound)
        i = int(torch.argmax(masked))  # first maximum, like np.argmax
        top = float(masked[i])
        radius = max(top, 0.0) if top != float("-inf") else 0.0
        if picks and len(radii) < len(picks):
            radii.append(radius)
        if len(picks) == k or (picks and radius < stop_below):
            break
        picks.append(i)
        selected[i] = True
        absorb(i)
    return KCenterResult(np.asarray(picks, dtype=np.int64), np.asarray(radii, dtype=X.dtype))
