"""The ``rate`` stage: battle resolution, output columns, artifacts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from arenaforge.stages.arena.rate import (
    STAGE,
    RateConfig,
    first_position_rates,
    resolve_battles,
    run,
)


@dataclasses.dataclass
class TableContext:
    """A StageContext over in-memory tables (pure-logic unit test double)."""

    tables: dict[str, pa.Table]
    run_dir: Path
    seed: int = 0
    config: object = None

    def read(self, stage, columns=None, instruction_ids=None):
        return self.tables[stage]

    def read_artifact(self, relpath):
        path = self.run_dir / relpath
        return path.read_bytes() if path.is_file() else None

    def funnel(self):
        from arenaforge.pipeline.store import RunStore

        return RunStore(self.run_dir).funnel()

    def write_artifact(self, relpath, data):
        path = self.run_dir / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, pa.Table):
            pq.write_table(data, path)
        else:
            path.write_text(data) if isinstance(data, str) else path.write_bytes(data)
        return path


def judge_rows(rows):
    """(instruction, a, b, judge, verdict_ab, verdict_ba) -> one row per order."""
    out = []
    for iid, a, b, judge, v_ab, v_ba in rows:
        for order, verdict in (("ab", v_ab), ("ba", v_ba)):
            if verdict != "missing":
                out.append({"instruction_id": iid, "model_a": a, "model_b": b, "judge": judge,
                            "order": order, "verdict": verdict, "score_a": None,
                            "score_b": None, "parse_error": None if verdict else "no verdict",
                            "protocol": "pairwise"})
    return pd.DataFrame(out)


CASES = [
    ("i1", "x", "y", "z", "a", "a"),  # consistent
    ("i1", "x", "y", "w", "a", "b"),  # order flip -> tie
    ("i2", "x", "y", "z", "tie", "b"),  # partial -> tie
    ("i2", "x", "y", "w", None, "b"),  # one order unparsed
    ("i3", "x", "z", "y", None, None),  # nothing parsed
    ("i3", "x", "z", "w", "b", "missing"),  # one order never judged
]


def test_resolution_rules_and_counts():
    battles, counts = resolve_battles(judge_rows(CASES))
    assert counts == {"battles_consistent": 1, "battles_order_flip": 1, "battles_order_partial": 1,
                      "battles_single_order": 2, "battles_unparsed": 1,
                      "battles_single_order_dropped": 2}
    got = {(r.instruction_id, r.judge): (r.winner, r.resolution) for r in battles.itertuples()}
    assert got == {("i1", "z"): ("a", "consistent"), ("i1", "w"): ("tie", "order_flip"),
                   ("i2", "z"): ("tie", "order_partial")}
    used, counts = resolve_battles(judge_rows(CASES), single_order="use")
    assert counts["battles_single_order_dropped"] == 0 and len(used) == 5
    got = {(r.instruction_id, r.judge): r.winner for r in used.itertuples()}
    assert got[("i2", "w")] == "b" and got[("i3", "w")] == "b"


def test_judge_table_errors_name_the_row():
    df = judge_rows(CASES)
    with pytest.raises(ValueError, match="row 2: verdict 'A'"):
        resolve_battles(df.assign(verdict=df["verdict"].where(df.index != 2, "A")))
    with pytest.raises(ValueError, match="row 1: duplicate"):
        resolve_battles(df.assign(order="ab"))
    with pytest.raises(ValueError, match="missing column 'judge'"):
        resolve_battles(df.drop(columns="judge"))


def test_first_position_rates():
    rows = [("i1", "x", "y", "z", "a", "b"), ("i2", "x", "y", "z", "a", "b"),
            ("i3", "x", "y", "z", "a", "a"), ("i4", "x", "y", "z", "tie", "missing")]
    out = first_position_rates(judge_rows(rows)).loc["z"]
    # shown first won in: i1 ab, i1 ba, i2 ab, i2 ba, i3 ab -> 5 of 6 decisive
    assert out["first_wins"] == 5 and out["decisive"] == 6 and out["ties"] == 1
    assert out["first_position_win_rate"] == pytest.approx(5 / 6)
    assert out["flips"] == 2 and out["both_orders"] == 3


def simulated_run(tmp_path, n_instructions=60, seed=0):
    """Three experts (strong > mid > weak); judges are the third expert, order-consistent."""
    rng = np.random.default_rng(seed)
    strength = {"strong": 1.5, "mid": 0.0, "weak": -1.5}
    models = list(strength)
    answers, judges = [], []
    for n in range(n_instructions):
        iid = f"{n:064x}"
        for m in models:
            answers.append({"instruction_id": iid, "instruction": "task", "model": m,
                            "response": "r", "code": "c"})
        for a, b in (("strong", "mid"), ("mid", "weak"), ("strong", "weak")):
            judge = next(m for m in models if m not in (a, b))
            p = 1 / (1 + np.exp(strength[b] - strength[a]))
            verdict = "a" if rng.random() < p else "b"
            judges.append((iid, a, b, judge, verdict, verdict))
    answers.append({"instruction_id": "f" * 64, "instruction": "lonely", "model": "mid",
                    "response": "r", "code": "c"})
    ctx = TableContext({"judge": pa.Table.from_pandas(judge_rows(judges))}, tmp_path)
    return pa.Table.from_pylist(answers), ctx


def test_rate_stage_end_to_end(tmp_path):
    table, ctx = simulated_run(tmp_path)
    cfg = RateConfig(n_bootstrap=50)
    result = run(table, cfg, ctx)
    out = result.table
    assert set(STAGE.outputs) <= set(out.column_names)
    assert out.num_rows == table.num_rows and out.column("response").to_pylist()[0] == "r"
    df = out.to_pandas()
    lonely = df[df["instruction_id"] == "f" * 64].iloc[0]
    assert pd.isna(lonely["winner"]) and lonely["n_battles"] == 0 and pd.isna(lonely["final_score"])
    scored = df[df["n_battles"] > 0]
    assert (scored.groupby("instruction_id")["winner"].nunique() == 1).all()
    assert scored.groupby("instruction_id")["winner"].first().value_counts().idxmax() == "strong"
    assert np.allclose(scored["final_score"],
                       0.7 * scored["elo_expectation"] + 0.3 * scored["local_share"])
    assert result.stats["instructions_without_battles"] == 1
    assert result.stats["battles_rated"] == 180

    ratings = pq.read_table(tmp_path / "rate/ratings.parquet").to_pandas()
    assert list(ratings["model"]) == ["strong", "mid", "weak"]
    assert (ratings["ci_low"] <= ratings["rating"]).all()
    assert ratings["sequential_elo"].notna().all()
    assert ratings["first_position_win_rate"].notna().all()
    assert pq.read_table(tmp_path / "rate/battles.parquet").num_rows == 180
    board = (tmp_path / "rate/leaderboard.md").read_text()
    assert board.splitlines()[2].startswith("| 1 | strong |")
    # deterministic for a fixed seed
    again = run(table, cfg, ctx).table
    assert again.equals(out)


def test_rate_stage_rejects_duplicate_answers(tmp_path):
    table, ctx = simulated_run(tmp_path, n_instructions=3)
    doubled = pa.concat_tables([table, table.slice(0, 1)])
    with pytest.raises(ValueError, match=r"answer table row 10: duplicate"):
        run(doubled, RateConfig(n_bootstrap=0), ctx)
    with pytest.raises(Exception, match="extra"):
        RateConfig(alhpa=0.5)


def test_rate_stage_without_any_verdict(tmp_path):
    table = pa.table({"instruction_id": ["i1", "i1"], "model": ["x", "y"]})
    unparsed = judge_rows([("i1", "x", "y", "z", None, None)])
    result = run(table, RateConfig(), TableContext({"judge": pa.Table.from_pandas(unparsed)},
                                                   tmp_path))
    out = result.table.to_pandas()
    assert out["winner"].isna().all() and (out["n_battles"] == 0).all()
    assert result.stats["battles_unparsed"] == 1 and result.stats["models_rated"] == 0
    assert pq.read_table(tmp_path / "rate/ratings.parquet").num_rows == 0


def pass_fail_run(tmp_path, n_instructions, pass_rates, seed=0):
    """Experts whose answers pass with the given rates; the judge (the third expert) prefers
    the answer that passed, in both orders, and calls a tie when both or neither pass."""
    rng = np.random.default_rng(seed)
    models = list(pass_rates)
    answers, judges = [], []
    for n in range(n_instructions):
        iid = f"{n:064x}"
        passed = {m: rng.random() < pass_rates[m] for m in models}
        answers += [{"instruction_id": iid, "model": m, "response": "r"} for m in models]
        for a, b in (("strong", "mid"), ("mid", "weak"), ("strong", "weak")):
            judge = next(m for m in models if m not in (a, b))
            verdict = "tie" if passed[a] == passed[b] else ("a" if passed[a] else "b")
            judges.append((iid, a, b, judge, verdict, verdict))
    ctx = TableContext({"judge": pa.Table.from_pandas(judge_rows(judges))}, tmp_path)
    return pa.Table.from_pylist(answers), ctx


def test_rate_stage_on_a_lopsided_arena_keeps_its_intervals(tmp_path):
    # 3,600 battles among experts right 90/70/50% of the time made a bootstrap
    # refit raise "did not converge" and the run died in rate
    table, ctx = pass_fail_run(tmp_path, 1200, {"strong": 0.9, "mid": 0.7, "weak": 0.5})
    result = run(table, RateConfig(n_bootstrap=200), ctx)
    assert result.stats["battles_rated"] == 3600 and result.stats["n_failed_bootstrap"] == 0
    ratings = pq.read_table(tmp_path / "rate/ratings.parquet").to_pandas()
    assert list(ratings["model"]) == ["strong", "mid", "weak"]
    assert np.isfinite(ratings[["rating", "ci_low", "ci_high"]].to_numpy()).all()
    assert (ratings["ci_low"] < ratings["rating"]).all()
    assert (ratings["rating"] < ratings["ci_high"]).all()
    assert (ratings["n_failed_bootstrap"] == 0).all() and (ratings["n_bootstrap"] == 200).all()
    board = (tmp_path / "rate/leaderboard.md").read_text()
    assert "n/a" not in board and "200 of 200 refits gave ratings" in board


def test_rate_stage_reports_failed_refits_instead_of_raising(tmp_path):
    # a weak expert that never wins nor ties: no resample can bound its gap
    table, ctx = pass_fail_run(tmp_path, 40, {"strong": 1.0, "mid": 1.0, "weak": 0.0})
    result = run(table, RateConfig(n_bootstrap=20), ctx)
    assert result.stats["n_failed_bootstrap"] == 20
    ratings = pq.read_table(tmp_path / "rate/ratings.parquet").to_pandas()
    assert ratings["ci_low"].isna().all() and np.isfinite(ratings["rating"]).all()
    assert list(ratings["model"])[-1] == "weak"
    board = (tmp_path / "rate/leaderboard.md").read_text()
    assert "[n/a, n/a]" in board and "0 of 20 refits gave ratings (20 failed" in board
