"""KCenterGreedy against a brute-force reference, plus edge cases and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from arenaforge.stages.output.kcenter import (
    KCenterResult,
    kcenter_greedy,
    kcenter_greedy_with_radii,
)


def brute_force(X: np.ndarray, k: int, first: int = 0, already=()) -> tuple[list[int], list]:
    """Greedy k-center from the full distance matrix, recomputing every min from scratch.

    Same per-pair arithmetic as the implementation (float64 squared distance, rounded to X's
    dtype, sqrt in that dtype), but none of its machinery: no bounds, no blocks, no GEMM.
    """
    X64 = X.astype(np.float64)
    D = np.stack([np.sqrt(((X64 - row) ** 2).sum(axis=1).astype(X.dtype)) for row in X64])
    chosen = list(already) or [first]
    picks = [] if already else [first]
    radii = []
    while True:
        nearest = D[:, chosen].min(axis=1)
        radii.append(max(float(nearest.max()), 0.0))
        if len(picks) == k:
            break
        nearest[chosen] = -np.inf
        i = int(np.argmax(nearest))
        chosen.append(i)
        picks.append(i)
    return picks, radii[-k:] if already else radii[:k]


def _assert_radii(got: np.ndarray, want, *, sqrt_ulps: int = 0) -> None:
    """Radii of two arithmetic paths agree to the bound their rounding allows.

    float32: each path takes a float64 squared distance (dot form through BLAS in the numpy
    path, difference form in the reference and the torch path), rounds it to float32 and takes
    the sqrt. The two float64 squares differ by about (d + 2) * eps64 * (|a|^2 + |c|^2), under
    1e-12 relative (the dot form is recomputed from differences wherever cancellation could
    cost more), far below a float32 half-ulp (6e-8): at most one float32 rounding boundary lies
    between them, so the float32 squares differ by at most one ulp and their correctly rounded
    square roots by at most one ulp. Which side of a boundary a square lands on depends on the
    BLAS kernel, hence on the processor. ``sqrt_ulps`` adds the error of a sqrt that is not
    correctly rounded (torch on CPU: one ulp). float64: the two forms differ by under 1e-12
    relative, the same bound.
    """
    want = np.asarray(want, dtype=got.dtype)
    if got.dtype == np.float32:
        np.testing.assert_array_max_ulp(got, want, maxulp=1 + sqrt_ulps)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _points(n: int, d: int, seed: int, dtype) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(dtype)


@pytest.mark.parametrize("n,d,k,first", [
    (1, 3, 1, 0), (2, 1, 2, 1), (10, 2, 10, 3), (57, 5, 20, 0), (57, 5, 20, 56),
    (200, 16, 64, 17), (300, 1, 50, 299), (500, 384, 40, 123), (1000, 8, 300, 999),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_brute_force(n, d, k, first, dtype):
    X = _points(n, d, seed=n * 31 + d, dtype=dtype)
    want, want_radii = brute_force(X, k, first)
    got = kcenter_greedy_with_radii(X, k, first, backend="numpy")
    assert got.indices.tolist() == want
    assert got.indices.dtype == np.int64
    assert got.radii.dtype == dtype
    _assert_radii(got.radii, want_radii)
    assert np.all(np.diff(got.radii) <= 0)


@pytest.mark.parametrize("already", [[5], [0, 7, 3], list(range(0, 120, 3))])
def test_already_selected_matches_brute_force(already):
    X = _points(150, 6, seed=len(already), dtype=np.float32)
    want, want_radii = brute_force(X, 25, already=already)
    got = kcenter_greedy_with_radii(X, 25, already_selected=already, backend="numpy")
    assert got.indices.tolist() == want
    assert not set(want) & set(already)
    _assert_radii(got.radii, want_radii)


def test_matches_google_sklearn_reference():
    """Same selection as the per-step sklearn recomputation of google/active-learning."""
    pairwise_distances = pytest.importorskip("sklearn.metrics").pairwise_distances
    X = _points(2000, 64, seed=1, dtype=np.float32)
    min_d = None
    picks = []
    for _ in range(60):
        ind = 0 if min_d is None else int(np.argmax(min_d))
        picks.append(ind)
        dist = pairwise_distances(X, X[[ind]], metric="euclidean")
        min_d = dist if min_d is None else np.minimum(min_d, dist)
    assert kcenter_greedy(X, 60, backend="numpy").tolist() == picks


def test_many_centers_use_the_gemm_blocks():
    """Enough seeds and steps that refreshes span more than one center block."""
    X = _points(400, 3, seed=5, dtype=np.float64)
    already = list(range(0, 400, 2))[:150]
    want, _ = brute_force(X, 200, already=already)
    assert kcenter_greedy(X, 200, already_selected=already, backend="numpy").tolist() == want


def test_clustered_data_with_near_duplicates():
    rng = np.random.default_rng(3)
    centers = rng.standard_normal((8, 32)) * 10
    X = (centers[rng.integers(0, 8, 400)] + rng.standard_normal((400, 32)) * 1e-3)
    X = X.astype(np.float32)
    want, want_radii = brute_force(X, 30, first=11)
    got = kcenter_greedy_with_radii(X, 30, first=11, backend="numpy")
    assert got.indices.tolist() == want
    _assert_radii(got.radii, want_radii)


def test_duplicates_are_picked_after_all_distinct_points_lowest_index_first():
    base = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]], dtype=np.float32)
    X = base[[0, 1, 0, 2, 1, 2, 0]]  # rows 2, 6 copy row 0; row 4 copies 1; row 5 copies 3
    got = kcenter_greedy_with_radii(X, 7, first=0, backend="numpy")
    assert got.indices.tolist() == [0, 3, 1, 2, 4, 5, 6]
    assert got.radii.tolist() == [4.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0]


def test_all_rows_identical():
    X = np.ones((5, 3))
    got = kcenter_greedy_with_radii(X, 5, first=2, backend="numpy")
    assert got.indices.tolist() == [2, 0, 1, 3, 4]
    assert got.radii.tolist() == [0.0] * 5


def test_k_equal_n_selects_every_row_once_and_ends_at_radius_zero():
    X = _points(40, 4, seed=9, dtype=np.float64)
    got = kcenter_greedy_with_radii(X, 40, first=7, backend="numpy")
    assert sorted(got.indices.tolist()) == list(range(40))
    assert got.radii[-1] == 0.0


def test_ties_go_to_the_lowest_index():
    X = np.array([[0.0], [-1.0], [1.0], [2.0], [-2.0]])
    assert kcenter_greedy(X, 3, first=0, backend="numpy").tolist() == [0, 3, 4]


def test_integer_input_is_computed_in_float64():
    X = np.array([[0, 0], [3, 4], [1, 1]])
    got = kcenter_greedy_with_radii(X, 2, backend="numpy")
    assert got.indices.tolist() == [0, 1]
    assert got.radii.dtype == np.float64
    assert got.radii.tolist() == [5.0, np.sqrt(2)]


def test_result_object():
    res = kcenter_greedy_with_radii(np.eye(3), 2, backend="numpy")
    assert isinstance(res, KCenterResult)
    assert len(res.indices) == len(res.radii) == 2


@pytest.mark.parametrize("X,k,kwargs,match", [
    (np.array([[0.0, 1.0], [np.nan, 2.0]]), 1, {}, "row 1"),
    (np.array([[0.0, 1.0], [1.0, np.inf]]), 1, {}, "row 1"),
    (np.zeros(5), 1, {}, "2-D"),
    (np.zeros((2, 2, 2)), 1, {}, "2-D"),
    (np.zeros((0, 3)), 1, {}, "at least one point"),
    (np.zeros((3, 0)), 1, {}, "at least one point"),
    (np.array([["a"], ["b"]]), 1, {}, "real numbers"),
    (np.zeros((3, 2)), 0, {}, "k must be in"),
    (np.zeros((3, 2)), -1, {}, "k must be in"),
    (np.zeros((3, 2)), 4, {}, r"k must be in \[1, 3\]"),
    (np.zeros((3, 2)), 2, {"already_selected": [0, 1]}, r"k must be in \[1, 1\]"),
    (np.zeros((3, 2)), 1, {"first": 3}, "first=3 out of range"),
    (np.zeros((3, 2)), 1, {"first": -1}, "first=-1 out of range"),
    (np.zeros((3, 2)), 1, {"already_selected": [5]}, "index 5 out of range"),
    (np.zeros((3, 2)), 1, {"already_selected": [1, 1]}, "repeated"),
    (np.zeros((3, 2)), 1, {"backend": "jax"}, "backend"),
])
def test_bad_input_raises_clear_error(X, k, kwargs, match):
    with pytest.raises(ValueError, match=match):
        kcenter_greedy(X, k, **kwargs)


def test_non_int_k_is_a_type_error():
    with pytest.raises(TypeError, match="k must be an int"):
        kcenter_greedy(np.zeros((3, 2)), 1.5)


def test_input_is_not_modified():
    X = _points(50, 4, seed=2, dtype=np.float32)
    before = X.copy()
    kcenter_greedy(X, 10, backend="numpy")
    np.testing.assert_array_equal(X, before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("already", [(), (4, 9)])
def test_torch_backend_on_cpu_matches_numpy(dtype, already):
    """Same picks; radii within the rounding bound.

    torch's CPU float32 sqrt is not correctly rounded (one ulp off for 157 of 700 values on an
    AVX-512 AMD EPYC; its kernel depends on the processor), one ulp beyond the squares' bound.
    The picks are exact: on this data the two farthest candidates are at least 346 float32 ulps
    apart at every step, so a few ulps cannot reorder them.
    """
    pytest.importorskip("torch")
    X = _points(700, 24, seed=4, dtype=dtype)
    want = kcenter_greedy_with_radii(X, 50, first=3, already_selected=already, backend="numpy")
    got = kcenter_greedy_with_radii(X, 50, first=3, already_selected=already,
                                    backend="torch", device="cpu")
    assert got.indices.tolist() == want.indices.tolist()
    assert got.radii.dtype == dtype
    _assert_radii(got.radii, want.radii, sqrt_ulps=1)


def test_torch_backend_duplicates():
    pytest.importorskip("torch")
    X = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 0.0], [0.0, 4.0]], dtype=np.float32)
    got = kcenter_greedy_with_radii(X, 4, backend="torch", device="cpu")
    assert got.indices.tolist() == [0, 3, 1, 2]
    assert got.radii.tolist() == [4.0, 3.0, 0.0, 0.0]


@pytest.mark.gpu
def test_torch_backend_on_cuda_matches_numpy():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    X = _points(5000, 384, seed=8, dtype=np.float32)
    want = kcenter_greedy_with_radii(X, 200, backend="numpy")
    got = kcenter_greedy_with_radii(X, 200, backend="auto")  # auto picks CUDA
    assert got.indices.tolist() == want.indices.tolist()
    _assert_radii(got.radii, want.radii, sqrt_ulps=1)  # the torch path's allowance, any device


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("stop", [0.0, 0.8, 1.5, 3.0, 100.0])
def test_stop_below_returns_the_r_net_prefix_of_the_full_selection(backend, stop):
    if backend == "torch":
        pytest.importorskip("torch")
    X = _points(300, 8, seed=7, dtype=np.float32)
    X[150:] = X[:150] + 0.01  # near-duplicates
    full = kcenter_greedy_with_radii(X, 300, first=3, backend=backend)
    keep = 1 + int(np.count_nonzero(full.radii[:-1] >= stop))
    early = kcenter_greedy_with_radii(X, 300, first=3, backend=backend, stop_below=stop)
    assert early.indices.tolist() == full.indices[:keep].tolist()
    np.testing.assert_array_equal(early.radii, full.radii[:keep])
