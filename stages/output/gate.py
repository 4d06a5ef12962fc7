"""Calibrated admission gate for answers without tests (CP-Agent style).

Rows that cannot be executed can only be admitted on the judge's score. To bound how many of
them are broken, calibrate on rows that *were* executed:

1. Pre-declare a finite grid of thresholds on the mean judge score (0-3).
2. Split executable rows by instruction into a calibration and a held-out part (seeded).
3. On the calibration part, for each threshold t: n_t rows with score >= t, k_t of them failed
   execution; the one-sided exact (Clopper-Pearson) upper bound U_t on
   P(fails | score >= t) at confidence 1 - delta / |grid|. Bonferroni over the grid makes all
   bounds hold together with probability >= 1 - delta, so picking among them afterwards is
   valid without assuming monotonicity.
4. Admit with the loosest (lowest) threshold whose U_t <= epsilon; none qualifies -> admit
   nothing.
5. Report the realised failure rate among held-out rows with score >= the chosen threshold.

What the bound covers: rows like the calibration rows, i.e. answers that had usable tests
(status ``passed`` or a failure). It is applied to rows without tests (``no_tests``), whose
failure rate nothing measured; the report and the dataset card say so and count them.

Example::

    >>> calibration = calibrate_gate([3, 3, 2, 1], [False, False, False, True],
    ...                              grid=(2.0, 3.0), epsilon=0.9, delta=0.1)
    >>> calibration["threshold"]
    2.0
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from arenaforge.pipeline.statuses import FAILED_STATUSES, NO_TESTS
from arenaforge.stages.common.intervals import proportion, upper_bound
from arenaforge.stages.output.audit_stats import executable

DEFAULT_GRID = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0)


def calibrate_gate(scores: Sequence[float], failed: Sequence[bool],
                   grid: Sequence[float] = DEFAULT_GRID, epsilon: float = 0.1,
                   delta: float = 0.1) -> dict:
    """Choose the loosest threshold whose Bonferroni-corrected failure bound is <= epsilon.

    Args:
        scores: judge scores of executable calibration rows (NaN: never admitted).
        failed: whether each row failed execution.
        grid: the pre-declared thresholds.
        epsilon: tolerated failure rate among admitted rows.
        delta: total error probability of the bounds (split over the grid).

    Returns:
        ``{"threshold": float | None, "epsilon", "delta", "level_per_threshold",
        "calibration_rows", "grid": [{threshold, admitted, failures, upper_bound}, ...]}``.
    """
    if not grid:
        raise ValueError("calibrate_gate: empty threshold grid")
    if not (0 < epsilon < 1 and 0 < delta < 1):
        raise ValueError(f"calibrate_gate: epsilon and delta must be in (0, 1), got "
                         f"{epsilon}, {delta}")
    scores = np.asarray(scores, dtype=float)
    failed = np.asarray(failed, dtype=bool)
    if scores.shape != failed.shape:
        raise ValueError(f"calibrate_gate: {len(scores)} scores but {len(failed)} outcomes")
    level = delta / len(grid)
    rows = []
    for t in sorted(float(t) for t in grid):
        admitted = scores >= t  # NaN compares False
        k, n = int((admitted & failed).sum()), int(admitted.sum())
        rows.append({"threshold": t, "admitted": n, "failures": k,
                     "upper_bound": upper_bound(k, n, 1.0 - level)})
    ok = [r["threshold"] for r in rows if r["upper_bound"] <= epsilon]
    return {"threshold": min(ok) if ok else None, "epsilon": epsilon, "delta": delta,
            "level_per_threshold": level, "calibration_rows": len(scores), "grid": rows}


def calibration_split(instruction_ids: Sequence[str], fraction: float, seed: int) -> np.ndarray:
    """True for rows whose instruction falls in the calibration part (grouped, seeded).

    Splitting by instruction keeps answers to the same prompt, whose outcomes correlate, on
    one side.
    """
    ids = pd.Series(instruction_ids, dtype=object)
    unique = np.array(sorted(ids.unique()), dtype=object)
    rng = np.random.default_rng(seed)
    chosen = set(rng.permutation(unique)[: round(fraction * len(unique))])
    return ids.isin(chosen).to_numpy()


def run_gate(answers: pd.DataFrame, grid: Sequence[float] = DEFAULT_GRID, epsilon: float = 0.1,
             delta: float = 0.1, calibration_fraction: float = 0.5, seed: int = 0
             ) -> tuple[dict, np.ndarray]:
    """Calibrate on executable answers, check on held-out ones, decide rows without tests.

    Args:
        answers: ``instruction_id, judge_score, status`` per answer (``answer_scores``).
        grid, epsilon, delta: see ``calibrate_gate``.
        calibration_fraction: share of executable instructions used for calibration.
        seed: split seed.

    Returns:
        ``(report, admitted)``: the ``calibrate_gate`` dict plus ``splits`` (instructions and
        rows on each side: ``calibration``, ``held_out``), ``held_out`` (realised failure rate
        among admitted held-out rows, exact interval, admitted share) and ``without_tests``
        (rows, admitted); ``admitted`` is a boolean array over ``answers``, True only for
        ``no_tests`` rows the gate admits (any other status has tests, so execution decides).
    """
    status = answers["status"].to_numpy(dtype=object)
    scores = answers["judge_score"].to_numpy(dtype=float)
    ids = answers["instruction_id"].to_numpy(dtype=object)
    is_exec = executable(status)
    failed = np.isin(status, FAILED_STATUSES)
    calib = calibration_split(answers["instruction_id"], calibration_fraction, seed) & is_exec
    held = is_exec & ~calib
    report = calibrate_gate(scores[calib], failed[calib], grid, epsilon, delta)
    report["splits"] = {name: {"instructions": len(set(ids[part])), "rows": int(part.sum())}
                        for name, part in (("calibration", calib), ("held_out", held))}
    t = report["threshold"]
    take = np.zeros(len(answers), dtype=bool) if t is None else scores >= t
    report["held_out"] = proportion(int((take & held & failed).sum()), int((take & held).sum()))
    report["held_out"]["rows"] = int(held.sum())
    report["held_out"]["admitted_share"] = float((take & held).sum() / held.sum()) \
        if held.any() else None
    untested = status == NO_TESTS
    admitted = take & untested
    report["without_tests"] = {"rows": int(untested.sum()), "admitted": int(admitted.sum())}
    return report, admitted
