"""The runner on a toy pipeline: sharding, resume, poisoned rows, contracts (inline executor)."""

import pyarrow.parquet as pq
import pytest
from arenaforge.pipeline.executors import InlineExecutor
from arenaforge.pipeline.runner import (
    ContractChainError,
    StageFailedError,
    check_chain,
    plan_shards,
)
from arenaforge.pipeline.stage import StageSpec
from arenaforge.pipeline.store import RunStore

from tests.toy_pipeline import FILTER, GEN, SQUARE, SquareConfig, run_toy


def _output(run_dir, stage="filter"):
    return RunStore(run_dir).stage(stage).read().sort_by("i")


def test_toy_pipeline_counts_and_funnel(tmp_path):
    funnel = run_toy(tmp_path, InlineExecutor(1))
    out = _output(tmp_path)
    assert out.column("i").to_pylist() == [i for i in range(60) if i % 3]
    assert out.column("square").to_pylist() == [i * i for i in range(60) if i % 3]
    last = funnel[-1]
    assert last.rows_in == 60 and last.rows_out == 40 and last.dropped == {"divisible": 20}
    assert last.stats["seen"] == 60
    dropped = pq.read_table(tmp_path / "dropped.parquet")
    assert set(dropped.column("reason").to_pylist()) == {"divisible"}
    assert dropped.num_rows == 20


def test_rerun_skips_completed_stages(tmp_path):
    run_toy(tmp_path, InlineExecutor(1))
    before = (tmp_path / "stages" / "square" / "part-00000.done.json").stat().st_mtime_ns
    run_toy(tmp_path, InlineExecutor(1))
    after = (tmp_path / "stages" / "square" / "part-00000.done.json").stat().st_mtime_ns
    assert before == after


def test_corrupt_shard_is_recomputed(tmp_path):
    run_toy(tmp_path, InlineExecutor(1))
    shard = tmp_path / "stages" / "square" / "part-00004.parquet"
    shard.write_bytes(shard.read_bytes()[:50])
    run_toy(tmp_path, InlineExecutor(1))
    assert _output(tmp_path).num_rows == 40
    assert RunStore(tmp_path).stage("square").verify() == []


def test_poisoned_row_is_dropped_and_the_rest_goes_on(tmp_path):
    funnel = run_toy(tmp_path, InlineExecutor(1), {"square": SquareConfig(poison="task number 7")},
                     shard_size=4)
    square = funnel["square"]
    assert square.rows_out == 59 and square.dropped == {"error": 1}
    dropped = pq.read_table(tmp_path / "dropped.parquet").to_pylist()
    errors = [d for d in dropped if d["reason"] == "error"]
    assert len(errors) == 1 and "poisoned row" in errors[0]["detail"]
    assert '"i": 7' in errors[0]["row"]


def test_systemic_error_is_raised_not_dropped(tmp_path):
    def always_fails(table, cfg, ctx):
        raise RuntimeError("model is gone")

    broken = StageSpec(name="square", config=SquareConfig, run=always_fails, source="gen",
                       inputs=("i",), outputs=("square",))
    with pytest.raises(RuntimeError, match="model is gone"):
        run_toy(tmp_path, InlineExecutor(1), specs=[GEN, broken])


def test_every_row_failing_in_one_row_shards_fails_the_stage(tmp_path):
    def always_fails(table, cfg, ctx):
        raise RuntimeError("model is gone")

    broken = StageSpec(name="square", config=SquareConfig, run=always_fails, source="gen",
                       inputs=("i",), outputs=("square",))
    with pytest.raises(StageFailedError, match="every one of 60 rows raised.*model is gone"):
        run_toy(tmp_path, InlineExecutor(1), specs=[GEN, broken], shard_size=1)
    assert RunStore(tmp_path).stage("square").success() is None


def test_chain_check_names_missing_columns():
    bad = StageSpec(name="filter", config=FILTER.config, run=FILTER.run, source="gen",
                    inputs=("square",), outputs=())
    with pytest.raises(ContractChainError, match=r"needs columns \['square'\]"):
        check_chain([GEN, bad])
    with pytest.raises(ContractChainError, match="needs stage 'gen'"):
        check_chain([SQUARE])


def test_plan_shards_keeps_keys_together():
    import pyarrow as pa

    t = pa.table({"instruction_id": list("aabbcdde"), "v": list(range(8))})
    shards = plan_shards(t, "instruction_id", 2, sharded=True)
    assert [s.column("instruction_id").to_pylist() for s in shards] == [
        list("aabb"), list("cdd"), list("e")]
    assert plan_shards(t, "instruction_id", 2, sharded=False)[0].num_rows == 8


def test_plan_shards_balances_across_workers():
    import pyarrow as pa

    keys = [f"k{i:02d}" for i in range(41)]
    t = pa.table({"instruction_id": keys})

    def sizes(size, workers):
        return [s.num_rows for s in plan_shards(t, "instruction_id", size, True, workers)]

    assert sizes(24, 1) == [21, 20]  # never larger than shard_size, near-equal
    assert sizes(24, 2) == [21, 20]
    assert sizes(16, 2) == [11, 10, 10, 10]  # 3 shards rounded up to 4 for 2 workers
    assert sizes(100, 3) == [14, 14, 13]  # fewer keys than shard_size: still every worker
    assert sizes(1, 2) == [1] * 41
    assert sizes(10, 64) == [1] * 41  # no empty shards when workers outnumber keys
    shards = plan_shards(t, "instruction_id", 16, True, 2)
    assert [k for s in shards for k in s.column("instruction_id").to_pylist()] == keys


def test_funnel_table_shows_wall_and_busy_share(tmp_path):
    from arenaforge.pipeline.executors import InlineExecutor
    from arenaforge.pipeline.progress import funnel_table
    from rich.console import Console

    from tests.toy_pipeline import run_toy

    funnel = run_toy(tmp_path, InlineExecutor(1))
    square = funnel["square"]
    assert square.workers == 1 and 0 < square.utilization_last_attempt <= 1
    console = Console(width=200, record=True)
    console.print(funnel_table(funnel, seconds=1.0))
    text = console.export_text()
    assert "wall s" in text and "busy" in text
    assert f"{square.utilization_last_attempt:.0%} of 1" in text
    # a rerun skips every stage and reports the attempt that computed it
    again = run_toy(tmp_path, InlineExecutor(1))
    assert [r.utilization_last_attempt for r in again] == [
        r.utilization_last_attempt for r in funnel]


def test_after_run_hooks_see_the_finished_run_in_order(tmp_path):
    """The runner's way to end a run with an application's work (the audit page) without
    importing it: each hook gets the store, the summary already written, and the funnel."""
    from arenaforge.pipeline.runner import run_stages

    from tests.toy_pipeline import SPECS, FilterConfig, GenConfig, toy_ctx

    seen = []

    def hook(name):
        return lambda store, funnel: seen.append(
            (name, store.has_artifact("stats.json"), funnel.names()))

    store = RunStore(tmp_path)
    store.open("toy", "toy: true\n")
    cfgs = {"gen": GenConfig(), "square": SquareConfig(), "filter": FilterConfig()}
    run_stages(SPECS, cfgs, toy_ctx(tmp_path), store, InlineExecutor(1), 2,
               show_progress=False, after_run=(hook("a"), hook("b")))
    assert seen == [(n, True, ["gen", "square", "filter"]) for n in ("a", "b")]


def test_the_python_api_and_the_cli_hand_the_runner_the_report_hook(monkeypatch, tmp_path):
    """``arenaforge.pipeline.run`` renders audit/report.html as ``arenaforge run`` does (the
    README: the Python API mirrors the CLI), and the CLI's run is that same function."""
    from pathlib import Path
    from types import SimpleNamespace

    import arenaforge.pipeline as api
    from arenaforge.pipeline import runner
    from arenaforge.pipeline.apps.report import report_after_run
    from arenaforge.pipeline.cli import app
    from typer.testing import CliRunner

    calls = []

    def fake_run_pipeline(cfg, **kwargs):
        calls.append(kwargs)
        return SimpleNamespace(run_dir=tmp_path, funnel=None)

    monkeypatch.setattr(runner, "run_pipeline", fake_run_pipeline)
    extra = lambda store, funnel: None
    api.run("cfg", show_progress=False, after_run=(extra,))
    assert calls == [{"show_progress": False, "after_run": (report_after_run, extra)}]

    root = Path(__file__).resolve().parents[1]
    result = CliRunner().invoke(app, ["run", str(root / "configs" / "smoke.yaml"), "--run-dir",
                                      str(tmp_path / "r"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert calls[1]["after_run"] == (report_after_run,) and calls[1]["show_progress"] is False
