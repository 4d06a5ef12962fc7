"""The runner on a real local Ray: same rows as inline, and dead workers are retried."""

import errno
from pathlib import Path

import pyarrow as pa
import pytest
from arenaforge.pipeline.backends.base import BackendError
from arenaforge.pipeline.executors import RayExecutor
from arenaforge.pipeline.shards import is_fatal
from arenaforge.pipeline.stage import StageSpec
from arenaforge.pipeline.store import RunStore

from tests.test_stage_contract import MAPPED, MappedConfig
from tests.toy_pipeline import GEN, SQUARE, GenConfig, SquareConfig, run_toy, square_run

ROOT = Path(__file__).resolve().parents[1]


def test_ray_matches_expected_rows(tmp_path, ray_local):
    funnel = run_toy(tmp_path, RayExecutor())
    out = RunStore(tmp_path).stage("filter").read().sort_by("i")
    assert out.column("i").to_pylist() == [i for i in range(60) if i % 3]
    assert all(row.executor == "ray" for row in funnel)


def test_worker_killed_mid_shard_is_retried_without_duplicates(tmp_path, ray_local):
    marker = tmp_path / "died-once"
    run_toy(tmp_path / "run", RayExecutor(max_retries=2),
            {"square": SquareConfig(die_once_file=str(marker))}, specs=[GEN, SQUARE])
    assert marker.exists()  # a worker really died
    out = RunStore(tmp_path / "run").stage("square").read()
    ids = out.column("instruction_id").to_pylist()
    assert len(ids) == len(set(ids)) == 60


def test_model_stage_actor_killed_is_restarted(tmp_path, ray_local):
    marker = tmp_path / "actor-died-once"
    model_square = StageSpec(name="square", config=SquareConfig, run=square_run, source="gen",
                             inputs=("i",), outputs=("square",), uses_models=True)
    run_toy(tmp_path / "run", RayExecutor(max_retries=2, model_workers=2),
            {"square": SquareConfig(die_once_file=str(marker))}, specs=[GEN, model_square])
    assert marker.exists()
    out = RunStore(tmp_path / "run").stage("square").read()
    assert sorted(out.column("square").to_pylist()) == sorted(i * i for i in range(60))
    assert isinstance(out, pa.Table)


def test_free_model_worker_takes_the_next_shard(tmp_path, ray_local):
    # shard 0 is slow: while one actor works on it the other should drain the rest of the queue
    # (dealing shards out round-robin up front would leave it idle with half of them queued)
    model_square = StageSpec(name="square", config=SquareConfig, run=square_run, source="gen",
                             inputs=("i",), outputs=("square",), uses_models=True)
    funnel = run_toy(tmp_path / "run", RayExecutor(model_workers=2),
                     {"square": SquareConfig(slow_row=0, slow_s=4.0, sleep_s=0.05,
                                             record_pid=True)},
                     shard_size=10, specs=[GEN, model_square])
    out = RunStore(tmp_path / "run").stage("square").read()
    pid_of_row = dict(zip(out.column("i").to_pylist(), out.column("pid").to_pylist()))
    slow_pid = pid_of_row[0]
    assert [i for i, pid in pid_of_row.items() if pid == slow_pid] == list(range(10))
    assert len(set(pid_of_row.values())) == 2
    row = funnel[-1]
    assert row.shards == 6 and row.workers == 2
    assert 0 < row.utilization_last_attempt <= 1


def test_shards_queue_ahead_only_where_no_engine_actor_is_called(tmp_path):
    # a queued Ray task starts when a running one blocks on an engine call, so only stages that
    # call no engine actor (CPU stages; served models) may keep a shard queued per worker
    from arenaforge.pipeline.config import load_config
    from arenaforge.pipeline.context import RunContext
    from arenaforge.stages import get_stage

    for config, model_stages_call_engines in (("configs/default.yaml", True),
                                              ("configs/openai.yaml", False)):
        cfg = load_config(config)
        ctx = RunContext(tmp_path, cfg, threads=1)
        for name in ("answer", "judge", "decontaminate", "verify"):
            spec = get_stage(name)
            expected = spec.uses_models and model_stages_call_engines
            assert RayExecutor.calls_engines(spec, cfg.stage_config(name), ctx) is expected, \
                (config, name)


def full_disk_run(table, cfg, ctx):
    raise OSError(errno.ENOSPC, "No space left on device", "/runs/r/stages/square/part.parquet")


def server_down_run(table, cfg, ctx):
    raise BackendError("cannot reach the OpenAI-compatible server for model 'm' at "
                       "http://127.0.0.1:9/v1")


@pytest.mark.parametrize("run", [full_disk_run, server_down_run])
def test_a_shard_error_reaches_the_runner_as_raised_not_wrapped_by_ray(tmp_path, ray_local, run):
    # A chaos run found both wrapped in RayTaskError: the full disk lost its errno (so the CLI
    # took it for a bug and printed a traceback) and the server down came with the worker's
    # traceback in its message.
    stage = StageSpec(name="square", config=SquareConfig, run=run, source="gen",
                      inputs=("i",), outputs=("square",))
    with pytest.raises((OSError, BackendError)) as caught:
        run_toy(tmp_path / "run", RayExecutor(), specs=[GEN, stage])
    exc = caught.value
    assert type(exc) in (OSError, BackendError) and is_fatal(exc)
    if run is full_disk_run:
        assert exc.errno == errno.ENOSPC and exc.filename.endswith("part.parquet")
    else:
        assert str(exc).startswith("cannot reach") and "Traceback" not in str(exc)


class ServedSquareConfig(SquareConfig):
    model: str = "qwen2.5-coder-7b"  # served (backend: openai) in configs/models-served.yaml


def served_square_run(table, cfg, ctx):
    import time

    start = time.time()
    out = square_run(table, cfg, ctx)
    return (out.append_column("start", pa.array([start] * out.num_rows))
            .append_column("end", pa.array([time.time()] * out.num_rows)))


def test_a_served_stage_runs_more_shards_at_once_than_there_are_cores(tmp_path, ray_local):
    # shards that wait on servers are not bounded by the cores: model_workers=4 on 2 CPUs runs
    # four at once (each task asks Ray for half a CPU); the shards here only sleep, as a shard
    # waiting on its HTTP replies does
    from types import SimpleNamespace

    from arenaforge.pipeline.context import RunContext
    from arenaforge.pipeline.runner import run_stages

    served = StageSpec(name="square", config=ServedSquareConfig, run=served_square_run,
                       source="gen", inputs=("i",), outputs=("square",), uses_models=True)
    cfg = SimpleNamespace(seed=0, runner=SimpleNamespace(request_cache=False),
                          models_file=ROOT / "configs" / "models-served.yaml")
    store = RunStore(tmp_path)
    store.open("toy", "toy: true\n")
    executor = RayExecutor(model_workers=4)
    assert executor.cpus == 2
    funnel = run_stages([GEN, served], {"gen": GenConfig(n=8),
                                        "square": ServedSquareConfig(sleep_s=3.0)},
                        RunContext(tmp_path, cfg, threads=1), store, executor, 1,
                        show_progress=False)
    out = store.stage("square").read()
    spans = sorted(set(zip(out.column("start").to_pylist(), out.column("end").to_pylist())))
    assert len(spans) == 8
    most_at_once = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most_at_once > executor.cpus, spans
    assert funnel[-1].workers == 4


@pytest.mark.parametrize(("config", "stage", "expected"), [
    ("configs/openai.yaml", "answer", 4),     # served: as many as model_workers asks
    ("configs/openai.yaml", "judge", 4),
    ("configs/default.yaml", "answer", 2),    # llama.cpp here: capped by the 2 cores
    ("configs/openai.yaml", "clean", 2),      # CPU stage: one a core
    ("configs/openai.yaml", "decontaminate", 2),
])
def test_parallelism_follows_what_a_stage_waits_on(tmp_path, ray_local, config, stage, expected):
    from arenaforge.pipeline.config import load_config
    from arenaforge.pipeline.context import RunContext
    from arenaforge.stages import get_stage

    cfg = load_config(config)
    ctx = RunContext(tmp_path, cfg, threads=1)
    executor = RayExecutor(model_workers=4)
    spec, stage_cfg = get_stage(stage), cfg.stage_config(stage)
    assert executor.parallelism(spec, stage_cfg, ctx) == expected
    served = expected > executor.cpus
    # a served shard holds no model: one thread, and a share of a core so that four fit on two
    assert executor.threads(spec, stage_cfg, ctx) == (1 if served or not spec.uses_models
                                                      else executor.threads_per_model_worker)
    assert executor._task_cpus(spec, stage_cfg, ctx) == (0.5 if served else 1)


def test_a_task_share_of_a_core_is_rounded_down_to_what_ray_can_fit(ray_local):
    # 2 CPUs / 3 workers: 0.6667 each would need 2.0001 CPUs for three, and one would wait
    from unittest import mock

    executor = RayExecutor(model_workers=3)
    with mock.patch.object(RayExecutor, "waits_on_servers", return_value=True):
        share = executor._task_cpus(None, None, None)
    assert share == 0.6666 and 3 * share <= executor.cpus


def test_map_runs_each_item_as_a_task_on_the_run_cpus(tmp_path, ray_local):
    # a whole-table stage's ctx.map: four items of a second each, on both CPUs (the stage's own
    # task waits on them), results in item order, each item's context usable in its task
    funnel = run_toy(tmp_path, RayExecutor(), {"gen": GenConfig(n=12),
                                               "mapped": MappedConfig(items=4, sleep_s=1.0)},
                     specs=[GEN, MAPPED])
    out = RunStore(tmp_path).stage("mapped").read()
    assert out.column("square").to_pylist() == [i * i for i in out.column("i").to_pylist()]
    assert len(set(out.column("pid").to_pylist())) == 2
    assert set(out.column("map_workers").to_pylist()) == {2}
    assert funnel[-1].executor == "ray"
