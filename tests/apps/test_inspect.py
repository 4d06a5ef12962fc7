"""`arenaforge inspect`: the funnel lists stages in the order they run; the summary as data."""

from __future__ import annotations

import json

import pytest
from arenaforge.pipeline.apps.inspect import _in_pipeline_order, inspect_run


def test_stages_are_listed_in_pipeline_order_not_alphabetically():
    manifest = {"stages": {"answer": {}, "clean": {}, "mine": {}, "zzz_custom": {}, "emit": {}}}
    assert [name for name, _ in _in_pipeline_order(manifest)] == [
        "mine", "clean", "answer", "emit", "zzz_custom"]


def test_inspect_prints_the_funnel_in_order(tmp_path, capsys):
    stages = {name: {"status": "complete", "rows_in": 4, "rows_out": 3, "dropped": {"x": 1},
                     "model_seconds": 1.0, "seconds": 2.0}
              for name in ("judge", "answer", "mine")}
    (tmp_path / "manifest.json").write_text(json.dumps({"config_hash": "abc", "stages": stages}))
    inspect_run(tmp_path)
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert out.index("mine") < out.index("answer") < out.index("judge")


def test_inspect_refuses_a_directory_that_is_not_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an arenaforge run directory"):
        inspect_run(tmp_path)


def test_run_summary_carries_ratings_and_report_paths(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from arenaforge.pipeline.apps.inspect import run_summary

    (tmp_path / "manifest.json").write_text(json.dumps({"config_hash": "abc", "stages": {}}))
    (tmp_path / "rate").mkdir()
    pq.write_table(pa.table({"model": ["m1"], "rating": [1012.5]}), tmp_path / "rate/ratings.parquet")
    (tmp_path / "rate/leaderboard.md").write_text("| rank | model |\n")
    info = run_summary(tmp_path)
    assert info["ratings"] == [{"model": "m1", "rating": 1012.5}]
    assert info["leaderboard"] == str(tmp_path / "rate/leaderboard.md")
    assert info["audit_report"] is None and info["stages"] == []
