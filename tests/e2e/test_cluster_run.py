"""The smoke arrangement on a 3-node Ray cluster with logical GPUs, engines placed by the registry.

Three ``ray start`` nodes on this machine (one CPU and one logical GPU each: Ray only accounts
for GPUs, llama.cpp still computes on the CPU), the embedded models' registry entries given
``resources`` (GPUs and replicas), and the real CLI as the driver. Checks: every model is loaded
once per replica for the whole run, each replica holds the GPUs its entry asks for, the emitted
dataset equals an inline run of the same config row for row (greedy where it matters: shards of
one instruction, so batches are the same in both runs), and a worker node killed mid-run costs no
row and duplicates none.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import ROOT, cli_command, run_cli, stage_output
from tests.test_ray_cluster import RAY, _alive_nodes, _free_port, stop_nodes

pytestmark = [pytest.mark.slow, pytest.mark.models]

SMOKE = ROOT / "configs" / "smoke.yaml"
QWEN05, QWEN15, SMOL = "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"
# what the test registry asks Ray for (each fits on the two nodes left after one is killed)
RESOURCES = {QWEN05: {"num_gpus": 0.5, "replicas": 2}, QWEN15: {"num_gpus": 0.5, "replicas": 1},
             SMOL: {"replicas": 1}}
INSTRUCTIONS = [
    "Write a Python function `add(a, b)` that returns the sum of two integers.",
    "Write a Python function `is_even(n)` that returns True when the integer n is even.",
    "Write a Python function `reverse_string(s)` that returns s reversed.",
    "Write a Python function `count_vowels(s)` that returns how many vowels s contains.",
]


def _registry(tmp: Path) -> Path:
    registry = yaml.safe_load((ROOT / "configs" / "models.yaml").read_text())
    for entry in registry["models"]:
        if entry["id"] in RESOURCES:
            entry["resources"] = RESOURCES[entry["id"]]
    path = tmp / "models-cluster.yaml"
    path.write_text(yaml.safe_dump(registry))
    return path


def _overrides(tmp: Path) -> list[str]:
    source = tmp / "instructions.jsonl"
    source.write_text("".join(json.dumps({"instruction": t}) + "\n" for t in INSTRUCTIONS))
    return [f"models_file={_registry(tmp)}", f"mine.source={source}", "runner.shard_size=1",
            "runner.threads_per_worker=1", "compress.budget=4", "decontaminate.embedding.enabled=false"]


def _start(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    # --block keeps each node in the foreground, so killing its process group stops exactly it
    out = open(log, "w")  # noqa: SIM115 - the node writes to it for its whole life
    return subprocess.Popen(RAY + ["start", "--block", *args], env=env, start_new_session=True,
                            stdout=out, stderr=subprocess.STDOUT)


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


@pytest.fixture(scope="module")
def cluster():
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="rayg", dir="/tmp")
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN=secrets.token_hex(32))
    env.pop("RAY_ADDRESS", None)
    logs = [Path(temp_dir) / f"node{i}.log" for i in range(3)]
    nodes = [_start(["--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=1",
                     "--num-gpus=1", "--include-dashboard=false", f"--temp-dir={temp_dir}"], env,
                    logs[0])]
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while subprocess.run(RAY + ["status", f"--address={address}"], env=env,
                             capture_output=True).returncode and time.time() < deadline:
            time.sleep(2)
        worker = [f"--address={address}", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                  "--num-gpus=1"]
        for i in (1, 2):
            # one node at a time, and once more if it gives up: on 2 busy cores a raylet can
            # miss Ray's start-up timeout ("the GCS has become overloaded")
            for _attempt in range(2):
                node = _start(worker, env, logs[i])
                deadline = time.time() + 180
                while (len(_alive_nodes(address, env)) < i + 1 and node.poll() is None
                       and time.time() < deadline):
                    time.sleep(2)
                if len(_alive_nodes(address, env)) >= i + 1:
                    break
                os.killpg(node.pid, signal.SIGKILL)
            nodes.append(node)
            assert len(_alive_nodes(address, env)) >= i + 1, \
                f"ray node {i} did not join:\n{_tail(logs[i])}"
        yield {"address": address, "env": dict(env, RAY_ADDRESS=address), "nodes": nodes}
    finally:
        stop_nodes(list(reversed(nodes)))
        shutil.rmtree(temp_dir, ignore_errors=True)


def _cluster_cli(cluster, artifacts: Path, overrides: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cli_command(SMOKE, artifacts, ["runner.kind=ray", *overrides]),
                          cwd=ROOT, text=True, capture_output=True, timeout=1800,
                          env=cluster["env"])


def _dataset_rows(run_dir: Path) -> list[tuple]:
    table = stage_output(run_dir, "emit").sort_by("instruction_id")
    return list(zip(*(table.column(c).to_pylist()
                      for c in ("instruction_id", "source_model", "messages", "verified"))))


def test_cluster_run_loads_each_model_once_places_it_and_matches_inline(cluster, tmp_path):
    overrides = _overrides(tmp_path)
    ray_run = _cluster_cli(cluster, tmp_path / "ray", overrides)
    assert ray_run.returncode == 0, ray_run.stderr[-4000:]
    run_dir = tmp_path / "ray" / "smoke"
    engines = json.loads((run_dir / "engines.json").read_text())
    # MiniLM once for the run, by the embedding service (compress embeds; decontaminate's
    # embedding check is off here)
    embedding = {k: v for k, v in engines.items() if k.startswith("embeddings:")}
    assert [len(loads) for loads in embedding.values()] == [1], embedding
    engines = {k: v for k, v in engines.items() if k not in embedding}
    assert set(engines) == {QWEN05, QWEN15, SMOL}  # nothing else was ever loaded
    for model, replicas in engines.items():
        assert len(replicas) == RESOURCES[model].get("replicas", 3), model
        assert len({r["pid"] for r in replicas}) == len(replicas)  # one load per replica
        wants_gpu = RESOURCES[model].get("num_gpus", 0) > 0
        assert all(bool(r["gpu_ids"]) == wants_gpu for r in replicas), (model, replicas)
    assert len({r["node_id"] for rs in engines.values() for r in rs}) >= 2  # spread out

    inline = run_cli(SMOKE, tmp_path / "inline", ["runner.kind=inline", *overrides], timeout=1800)
    assert inline.returncode == 0, inline.stderr[-4000:]
    assert _dataset_rows(run_dir) == _dataset_rows(tmp_path / "inline" / "smoke")
    assert _dataset_rows(run_dir)  # the comparison compared something


def test_a_worker_node_killed_mid_run_costs_no_row(cluster, tmp_path):
    overrides = _overrides(tmp_path)
    artifacts = tmp_path / "killed"
    proc = subprocess.Popen(cli_command(SMOKE, artifacts, ["runner.kind=ray", *overrides]),
                            cwd=ROOT, text=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=cluster["env"], start_new_session=True)
    run_dir = artifacts / "smoke"
    try:
        deadline = time.time() + 900
        # once the answer stage has committed a shard, take a worker node away
        while not list((run_dir / "stages" / "answer").glob("part-*.done.json")):
            assert proc.poll() is None, proc.stderr.read()[-4000:]
            assert time.time() < deadline, "the answer stage never committed a shard"
            time.sleep(0.5)
        victim = cluster["nodes"][-1]
        os.killpg(victim.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-4000:]
    answers = stage_output(run_dir, "answer")
    keys = list(zip(answers.column("instruction_id").to_pylist(),
                    answers.column("model").to_pylist()))
    assert len(keys) == len(set(keys)) == len(INSTRUCTIONS) * 2
    emitted = stage_output(run_dir, "emit").column("instruction_id").to_pylist()
    assert len(emitted) == len(set(emitted))
