"""A run directory on S3 (moto in server mode on loopback): the toy pipeline runs, survives
SIGKILL mid-stage with every row exactly once, ``inspect`` reads it, Ray workers write it. The
``files`` request cache's concurrent writers on S3: tests/backends/test_request_cache.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from arenaforge.pipeline import filesystem as fsys
from arenaforge.pipeline.cli import app
from arenaforge.pipeline.executors import InlineExecutor
from arenaforge.pipeline.store import RunStore
from typer.testing import CliRunner

from tests.toy_pipeline import run_toy

SCRIPT = Path(__file__).with_name("toy_pipeline.py")


def _tables(where) -> dict:
    store = RunStore(where)
    out = {s: store.stage(s).read().sort_by("i").to_pylist() for s in ("gen", "square", "filter")}
    dropped = pq.read_table(pa.BufferReader(store.read_artifact("dropped.parquet")))
    out["dropped"] = sorted(dropped.to_pylist(), key=lambda r: r["row"])
    return out


def _all_objects(where) -> list[str]:
    fs, path = fsys.resolve(where)
    return [i.path for i in fs.get_file_info(pafs.FileSelector(path, recursive=True,
                                                                 allow_not_found=True))
            if i.type == pafs.FileType.File]


def test_toy_pipeline_on_s3_equals_a_local_run_and_inspect_reads_it(s3_server, tmp_path):
    local = tmp_path / "local"
    run_toy(local, InlineExecutor(1))
    remote = s3_server.uri("runs", "toy")
    funnel = run_toy(remote, InlineExecutor(1))
    assert [row.stage for row in funnel] == ["gen", "square", "filter"]
    assert _tables(remote) == _tables(local)
    # layout: the same files under the prefix as in the local directory, and nothing else
    _, path = fsys.resolve(remote)
    names = sorted(p[len(path) + 1:] for p in _all_objects(remote))
    local_names = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
    assert names == local_names
    assert "stats.json" in names and "stages/filter/_SUCCESS" in names

    runner = CliRunner()
    result = runner.invoke(app, ["inspect", remote, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["run_dir"] == fsys.display(remote)
    assert {s["stage"]: s["rows_out"] for s in summary["stages"]} == {
        "gen": 60, "square": 60, "filter": 40}
    result = runner.invoke(app, ["inspect", remote, "square", "--rows", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"] == 60


def test_inspect_of_a_missing_s3_run_names_it(s3_server):
    remote = s3_server.uri("nothing-here")
    result = CliRunner().invoke(app, ["inspect", remote])
    assert result.exit_code == 2
    message = " ".join(result.output.split())  # rich folds long lines
    assert f"{fsys.display(remote)}: no manifest.json, not an arenaforge run directory" in message


def _wait_for(predicate, proc, timeout=60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_sigkill_mid_stage_on_s3_then_resume_is_exactly_once(s3_server, tmp_path):
    """The subprocesses find the server through ``AWS_ENDPOINT_URL`` (no URI options), as a
    cluster job configured by its environment would."""
    reference = tmp_path / "reference"
    run_toy(reference, InlineExecutor(1))
    expected = _tables(reference)

    remote = s3_server.uri("runs", "killed").split("?")[0]
    env = s3_server.env()
    os.environ["AWS_ENDPOINT_URL"] = env["AWS_ENDPOINT_URL"]  # for this process's reads too
    try:
        square = RunStore(remote).stage("square")
        # kill once after a few square shards, once further on: each time mid-stage
        for done_at_least in (3, 10):
            proc = subprocess.Popen([sys.executable, str(SCRIPT), remote, "0.1"], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            reached = _wait_for(lambda n=done_at_least: len(square.markers()) >= n, proc)
            assert reached, proc.stderr.read().decode()[-2000:] if proc.poll() is not None else ""
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            assert square.success() is None  # killed before the stage completed
        killed_at = len(square.markers())
        final = subprocess.run([sys.executable, str(SCRIPT), remote, "0.1"], env=env,
                               capture_output=True, timeout=120, check=False)
        assert final.returncode == 0, final.stderr.decode()[-2000:]

        got = _tables(remote)
        assert got == expected
        ids = [r["instruction_id"] for r in got["square"]]
        assert len(ids) == len(set(ids)) == 60
        # the resumed run kept the killed runs' shards and wrote only the rest
        record = RunStore(remote).stage("square").success()
        assert record["shards"] == 30 and 10 <= killed_at < 30
        assert not [p for p in _all_objects(remote) if p.endswith(".tmp")]
    finally:
        os.environ.pop("AWS_ENDPOINT_URL", None)


def test_run_context_on_s3_puts_the_request_cache_in_the_bucket_and_caches_locally(
        s3_server, tmp_path):
    from types import SimpleNamespace

    from arenaforge.pipeline.context import RunContext

    remote = s3_server.uri("runs", "ctx")
    runner = SimpleNamespace(request_cache=True, request_cache_store="auto",
                             local_cache_dir=tmp_path / "local")
    ctx = RunContext(remote, SimpleNamespace(seed=0, runner=runner), threads=1)
    assert ctx.request_cache_store() == "files"
    assert fsys.display(ctx.request_cache_dir()).endswith("/runs/ctx/cache/requests")
    assert ctx.table_cache("embeddings/m").path.is_relative_to(tmp_path / "local")
    assert ctx.run_id == "ctx"
    where = ctx.write_artifact("rate/leaderboard.md", "| rank |\n")
    assert ctx.read_artifact("rate/leaderboard.md") == b"| rank |\n"
    assert fsys.display(where).endswith("/runs/ctx/rate/leaderboard.md")


def test_run_with_an_s3_run_dir_refuses_a_sqlite_cache_before_any_work(s3_server):
    """``--run-dir URI`` sets artifacts_dir and name; SQLite on a remote store is refused
    (exit 2, naming the field) before a model loads or anything is written."""
    root = Path(__file__).resolve().parents[1]
    remote = s3_server.uri("runs", "cli")
    result = CliRunner().invoke(app, ["run", str(root / "configs" / "smoke.yaml"), "--run-dir",
                                      remote, "--set", "runner.request_cache_store=sqlite",
                                      "--quiet"])
    message = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "runner.request_cache_store: sqlite needs a local run directory" in message
    assert fsys.display(remote) in message
    assert _all_objects(remote) == []
    result = CliRunner().invoke(app, ["run", "--run-dir", remote, "--name", "other"])
    assert result.exit_code == 2 and "drop --name" in result.output


def test_run_with_a_run_dir_uri_pyarrow_cannot_open_names_the_field():
    root = Path(__file__).resolve().parents[1]
    result = CliRunner().invoke(app, ["run", str(root / "configs" / "smoke.yaml"), "--run-dir",
                                      "nosuch://bucket/runs/x", "--quiet"])
    message = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "artifacts_dir: nosuch://bucket/runs/x" in message and "Traceback" not in message


def test_ray_workers_write_one_s3_run_and_a_killed_worker_is_retried(s3_server, tmp_path,
                                                                     ray_local):
    """Shards run in Ray worker processes that reach the bucket on their own: endpoint and
    credentials in the URI, since a Ray started by an earlier test has workers whose
    environment lacks the server's credentials."""
    from arenaforge.pipeline.executors import RayExecutor

    from tests.s3_server import CREDENTIALS
    from tests.toy_pipeline import GEN, SQUARE, SquareConfig

    key, secret = CREDENTIALS["AWS_ACCESS_KEY_ID"], CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    remote = s3_server.uri("runs", "ray").replace("s3://", f"s3://{key}:{secret}@", 1)
    marker = tmp_path / "died-once"
    run_toy(remote, RayExecutor(max_retries=2),
            {"square": SquareConfig(die_once_file=str(marker))}, specs=[GEN, SQUARE])
    assert marker.exists()  # a worker really died mid-shard
    out = RunStore(remote).stage("square").read()
    ids = out.column("instruction_id").to_pylist()
    assert len(ids) == len(set(ids)) == 60
    assert sorted(out.column("square").to_pylist()) == sorted(i * i for i in range(60))
    assert secret not in RunStore(remote).location
