"""Scale-out: the same pipeline against a Ray cluster started separately (head + worker node)."""

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from arenaforge.pipeline.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
RAY = [sys.executable, "-m", "ray.scripts.scripts"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive_nodes(address: str, env: dict) -> list[str]:
    probe = subprocess.run(RAY + ["status", f"--address={address}"], env=env,
                           capture_output=True, text=True)
    return [line for line in probe.stdout.splitlines() if line.strip().startswith("1 node_")]


def _start(args, env):
    # --block keeps each node in the foreground, so killing its process group stops exactly it
    # (`ray stop` would also stop the test session's own local Ray).
    return subprocess.Popen(RAY + ["start", "--block", *args], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_pipeline_runs_on_a_separately_started_cluster(tmp_path):
    port = _free_port()
    # Ray's unix sockets live under --temp-dir, and pytest's tmp_path is too long for them.
    temp_dir = tempfile.mkdtemp(prefix="rayc", dir="/tmp")
    # Ray >= 2.59 authenticates cluster clients with a shared token: every node and the driver
    # get the same one, as a user would export RAY_AUTH_TOKEN on each machine.
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN=secrets.token_hex(32))
    env.pop("RAY_ADDRESS", None)
    head = _start(["--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=1",
                   "--include-dashboard=false", f"--temp-dir={temp_dir}"], env)
    worker = None
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.time() + 90
        while time.time() < deadline:
            assert head.poll() is None, "ray head exited at start"
            probe = subprocess.run(RAY + ["status", f"--address={address}"], env=env,
                                   capture_output=True, text=True)
            if probe.returncode == 0:
                break
            time.sleep(2)
        worker = _start([f"--address={address}", "--node-ip-address=127.0.0.1", "--num-cpus=1"],
                        env)
        while len(_alive_nodes(address, env)) < 2 and time.time() < deadline:
            assert worker.poll() is None, "ray worker node exited at start"
            time.sleep(2)
        run = subprocess.run([sys.executable, str(ROOT / "tests" / "toy_pipeline.py"),
                              str(tmp_path / "run"), "0.01", "ray"],
                             env=dict(env, RAY_ADDRESS=address), capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        assert "ray nodes: 2" in run.stdout
        out = RunStore(tmp_path / "run").stage("filter").read()
        assert sorted(out.column("i").to_pylist()) == [i for i in range(60) if i % 3]
    finally:
        stop_nodes([worker, head])
        shutil.rmtree(temp_dir, ignore_errors=True)


def stop_nodes(procs) -> None:
    """SIGTERM each ``ray start --block`` node still running (SIGKILL after 30 s), in order."""
    for proc in procs:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
