"""Synthetic audit inputs shared by the report tests."""

from __future__ import annotations

import numpy as np
import pandas as pd


def synthetic_rows(n: int = 120, seed: int = 0) -> pd.DataFrame:
    """Two judges (one accurate, one always picking the first answer) on n battles."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        a_ok, b_ok = rng.random(2) < (0.7, 0.4)
        status = [("passed" if ok else "failed") for ok in (a_ok, b_ok)]
        if i % 10 == 0:
            status = ["no_tests", "no_tests"]
        truth = "a" if a_ok >= b_ok else "b"
        for judge in ("careful", "lazy"):
            for order in ("ab", "ba"):
                verdict = truth if judge == "careful" else ("a" if order == "ab" else "b")
                rows.append({"instruction_id": f"i{i}", "model_a": "alpha", "model_b": "beta",
                             "judge": judge, "order": order, "verdict": verdict,
                             "score_a": int(2 * a_ok + rng.integers(0, 2)),
                             "score_b": int(2 * b_ok + rng.integers(0, 2)),
                             "status_a": status[0], "status_b": status[1],
                             "difficulty": float(rng.integers(1, 11))})
    return pd.DataFrame(rows)


RATINGS = pd.DataFrame({"model": ["alpha", "beta"], "rating": [1060.0, 940.0],
                        "ci_low": [1020.0, 900.0], "ci_high": [1100.0, 980.0],
                        "battles": [240, 240], "win_rate": [0.65, 0.35],
                        "sequential_elo": [30.5, -30.5], "first_position_win_rate": [None, None]})
FUNNEL = {"mine": {"rows_in": 0, "rows_out": 400, "dropped": {}},
          "clean": {"rows_in": 400, "rows_out": 120, "dropped": {"near_duplicate": 280}},
          "audit": 120}
