"""SIGKILL of a real ``arenaforge run`` during LLM stages and verification, then a rerun.

After any number of kills the rerun ends with every row exactly once, shards completed before
a kill are not recomputed (their markers, ``written_at`` included, are untouched), and
requests answered before a kill come back from the request cache (``cache_hits`` in the shard
markers, ``_SUCCESS`` and ``stats.json``). Also: a poisoned row in a real model stage is
dropped with its error and the rest goes on. (The toy versions of these, and the Ray
worker-death retry, are in tests/test_kill_resume.py, tests/test_runner.py and
tests/test_ray_executor.py.)
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.e2e.conftest import (
    QWEN,
    SMOL,
    TINY,
    cached_requests,
    instructions_table,
    kill_group,
    load,
    open_run,
    run_cli,
    seed_stage,
    stage_output,
    start_cli,
    valid_markers,
)


def _kill_when(proc, ready, timeout: float = 600, delay: float = 0.0) -> bool:
    """SIGKILL the run ``delay`` s after ``ready()`` holds; False if the run ended first."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if ready():
            time.sleep(delay)
            return kill_group(proc)
        time.sleep(0.05)
    kill_group(proc)
    return False


def _kill_at_random(config, artifacts, overrides, run_dir, stage, rng, kills, window):
    """Start and SIGKILL the run ``kills`` times; returns every intact marker seen meanwhile."""
    seen: dict[str, float] = {}
    for _ in range(kills):
        proc = start_cli(config, artifacts, overrides)
        time.sleep(rng.uniform(*window))
        kill_group(proc)
        for name, written_at in valid_markers(run_dir, stage).items():
            assert seen.setdefault(name, written_at) == written_at  # never rewritten
            seen[name] = written_at
    return seen


def _check_untouched(run_dir, stage, seen):
    after = valid_markers(run_dir, stage)
    assert {name: after.get(name) for name in seen} == seen


@pytest.mark.models
@pytest.mark.slow
def test_sigkill_while_mining_then_rerun_loses_and_repeats_nothing(artifacts):
    # 4 single-sample (language) groups, 2 per shard: each shard makes two model calls, so a
    # kill between them leaves one answered request in the cache and no shard marker.
    overrides = [f"mine.miners=[{SMOL}]", "mine.languages=[Python, JavaScript, Rust, Go]",
                 "mine.samples_per_language=1", "mine.max_tokens=32", "runner.shard_size=2"]
    run_dir = artifacts / "tiny-llm"
    marker0 = run_dir / "stages" / "mine" / "part-00000.done.json"

    proc = start_cli(TINY, artifacts, overrides)
    assert _kill_when(proc, lambda: cached_requests(run_dir) >= 1 and not marker0.exists())
    assert cached_requests(run_dir) == 1 and not marker0.exists()
    seen = _kill_at_random(TINY, artifacts, overrides, run_dir, "mine", random.Random(7),
                           kills=3, window=(2.0, 14.0))

    final = run_cli(TINY, artifacts, overrides)
    assert final.returncode == 0, final.stderr[-3000:]
    _check_untouched(run_dir, "mine", seen)
    mined = stage_output(run_dir, "mine")
    tasks = mined.column("task_id").to_pylist()
    assert sorted(tasks) == sorted(f"{SMOL}|{lang}|000000"
                                   for lang in ("Python", "JavaScript", "Rust", "Go"))
    success = json.loads((run_dir / "stages" / "mine" / "_SUCCESS").read_text())
    stats = json.loads((run_dir / "stats.json").read_text())["mine"]
    # the request answered before the first kill was not asked again
    assert success["cache_hits"] >= 1 and stats["cache_hits"] == success["cache_hits"]
    assert success["cache_hits"] + success["cache_misses"] == 4
    assert cached_requests(run_dir) == 4
    # clean saw every mined row once: kept + dropped == mined
    clean_ids = (stage_output(run_dir, "clean").column("task_id").to_pylist()
                 + [json.loads(r)["task_id"] for r in
                    stage_output(run_dir, "clean", "dropped").column("row").to_pylist()])
    assert sorted(clean_ids) == sorted(tasks)
    assert not list(run_dir.rglob("*.tmp"))


@pytest.mark.models
@pytest.mark.slow
def test_sigkill_while_answering_reuses_cached_replies(artifacts):
    # SmolLM2 answers each shard first (fast), Qwen second (slow): the kill lands while Qwen
    # generates, after SmolLM2's replies for shard 0 are cached.
    overrides = ["stages=[answer]", f"experts=[{SMOL}, {QWEN}]", "answer.max_tokens=24",
                 "runner.shard_size=2"]
    texts = ["Write a Python function that reverses a string.",
             "Write a Python function that checks whether a number is prime.",
             "Write a Python function that merges two sorted lists.",
             "Write a Python function that counts the vowels in a string."]
    run_dir = open_run(load(TINY, [f"artifacts_dir={artifacts}", *overrides]))
    seed_stage(run_dir, "compress", instructions_table(texts))
    marker0 = run_dir / "stages" / "answer" / "part-00000.done.json"

    proc = start_cli(TINY, artifacts, overrides)
    assert _kill_when(proc, lambda: cached_requests(run_dir) >= 2 and not marker0.exists())
    assert not marker0.exists()
    seen = _kill_at_random(TINY, artifacts, overrides, run_dir, "answer", random.Random(3),
                           kills=1, window=(3.0, 20.0))

    final = run_cli(TINY, artifacts, overrides)
    assert final.returncode == 0, final.stderr[-3000:]
    _check_untouched(run_dir, "answer", seen)
    answers = stage_output(run_dir, "answer")
    keys = list(zip(answers.column("instruction_id").to_pylist(),
                    answers.column("model").to_pylist()))
    assert len(keys) == len(set(keys)) == 2 * len(texts)
    success = json.loads((run_dir / "stages" / "answer" / "_SUCCESS").read_text())
    assert success["cache_hits"] >= 2  # SmolLM2's two replies of shard 0, from before the kill
    assert success["cache_hits"] + success["cache_misses"] == 2 * len(texts)
    assert json.loads((run_dir / "stats.json").read_text())["answer"]["cache_hits"] == \
        success["cache_hits"]


@pytest.mark.models
def test_poisoned_rows_in_a_real_model_stage_are_dropped_and_the_rest_goes_on(artifacts):
    overrides = ["stages=[answer]", f"experts=[{SMOL}]", "answer.max_tokens=16",
                 "runner.shard_size=2"]
    texts = ["Write a Python function that reverses a string.",
             None,  # the chat template cannot render it: the stage raises on this row
             "word " * 3000,  # longer than SmolLM2's 2048-token context: the request fails
             "Explain list comprehensions in Python."]
    run_dir = open_run(load(TINY, [f"artifacts_dir={artifacts}", *overrides]))
    seed = instructions_table(texts)
    seed_stage(run_dir, "compress", seed)

    proc = run_cli(TINY, artifacts, overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kept = stage_output(run_dir, "answer").to_pylist()
    assert [r["instruction"] for r in kept] == [texts[0], texts[3]]
    assert all(r["response"].strip() for r in kept)
    dropped = pq.read_table(run_dir / "dropped.parquet").to_pylist()
    dropped = {r["instruction_id"]: r for r in dropped}
    ids = seed.column("instruction_id").to_pylist()
    assert set(dropped) == {ids[1], ids[2]}
    assert dropped[ids[1]]["reason"] == "error" and "TypeError" in dropped[ids[1]]["detail"]
    assert dropped[ids[2]]["reason"] == "model_error"
    assert "exceed context window" in dropped[ids[2]]["detail"]
    stats = json.loads((run_dir / "stats.json").read_text())["answer"]
    assert stats["dropped"] == {"error": 1, "model_error": 1} and stats["rows_out"] == 2


ADD = "def add(a, b):\n    return a + b\n"
SUB = "def add(a, b):\n    return a - b\n"
LOOP = "def add(a, b):\n    while True:\n        pass\n"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"]


def _seed_verify_inputs(run_dir, n: int = 6) -> None:
    from arenaforge.stages.verification.tests import TESTS_SCHEMA

    ids = [f"task-{i}" for i in range(n)]
    codes = [(ADD, SUB), (SUB, ADD), (ADD, LOOP), (LOOP, ADD), (ADD, ADD), (SUB, SUB)]
    models = ["m1", "m2"]
    seed_stage(run_dir, "answer", pa.table({
        "instruction_id": [i for i in ids for _ in models],
        "instruction": ["Write add(a, b)."] * (2 * n),
        "model": models * n,
        "response": ["..."] * (2 * n),
        "code": [c for pair in codes[:n] for c in pair]}))
    seed_stage(run_dir, "tests", pa.Table.from_pylist(
        [{"instruction_id": iid, "author": "m1", "test_idx": k, "test_code": t, "survived": True,
          "reason": None, "entry_point": "add", "signature": "def add(a, b)", "passed_by": [],
          "consensus": [], "no_tests": False, "raw": "", "parse_error": None}
         for iid in ids for k, t in enumerate(TESTS)], schema=TESTS_SCHEMA))
    seed_stage(run_dir, "rate", pa.table({
        "instruction_id": [i for i in ids for _ in models], "model": models * n,
        "final_score": [0.6, 0.4] * n, "winner": ["m1"] * (2 * n)}))


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _sandbox_started(pid: int) -> bool:
    """A sandbox (bubblewrap) process runs under the run: verification has begun."""
    for child in _descendants(pid):
        try:
            if b"bwrap" in Path(f"/proc/{child}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _verdicts(run_dir) -> list[tuple]:
    cols = ["instruction_id", "model", "status", "tests_passed", "tests_total", "error_class",
            "selected"]
    rows = stage_output(run_dir, "verify").select(cols).to_pylist()
    return sorted(tuple(r[c] for c in cols) for r in rows)


def test_sigkill_during_verification_then_rerun_gives_the_same_verdicts(tmp_path):
    overrides = ["stages=[verify]", "verify.timeout_s=1.0"]
    runs = {}
    for name in ("reference", "killed"):
        artifacts = tmp_path / name
        runs[name] = open_run(load(TINY, [f"artifacts_dir={artifacts}", *overrides]))
        _seed_verify_inputs(runs[name])
    reference = run_cli(TINY, tmp_path / "reference", overrides)
    if reference.returncode and "Sandbox" in reference.stdout + reference.stderr:
        pytest.skip("sandbox isolation unavailable here")
    assert reference.returncode == 0, reference.stderr[-3000:]
    expected = _verdicts(runs["reference"])
    assert {v[2] for v in expected} == {"passed", "failed", "timeout"}

    run_dir = runs["killed"]
    rng = random.Random(11)
    killed = 0
    for _ in range(3):
        proc = start_cli(TINY, tmp_path / "killed", overrides)
        # once the sandbox runs the answers, at a random moment of the verification
        killed += _kill_when(proc, lambda p=proc: _sandbox_started(p.pid), timeout=300,
                             delay=rng.uniform(0.0, 2.0))
    assert killed >= 2  # most attempts were really cut short, mid-verification
    upstream = {s: valid_markers(run_dir, s) for s in ("answer", "tests", "rate")}

    final = run_cli(TINY, tmp_path / "killed", overrides)
    assert final.returncode == 0, final.stderr[-3000:]
    assert _verdicts(run_dir) == expected
    assert {s: valid_markers(run_dir, s) for s in upstream} == upstream  # inputs untouched
    assert not list(run_dir.rglob("*.tmp"))


def _actor_pids(pid: int) -> list[int]:
    """Ray worker processes under the run whose model engine is answering a call."""
    out = []
    for child in _descendants(pid):
        try:
            if b"EngineActor.call" in Path(f"/proc/{child}/cmdline").read_bytes():
                out.append(child)
        except OSError:
            continue
    return out


@pytest.mark.models
@pytest.mark.slow
def test_ray_model_worker_killed_mid_shard_is_restarted_and_retried(artifacts):
    import os
    import signal

    overrides = ["runner.kind=ray", "runner.num_cpus=2", "runner.model_workers=1",
                 "runner.max_retries=2", f"mine.miners=[{SMOL}]", "mine.max_tokens=32",
                 "runner.shard_size=2"]
    run_dir = artifacts / "tiny-llm"
    proc = start_cli(TINY, artifacts, overrides)
    try:
        deadline = time.monotonic() + 600
        while not _actor_pids(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        victims = _actor_pids(proc.pid)
        assert victims, "no model engine ever answered a call"
        for pid in victims:
            os.kill(pid, signal.SIGKILL)  # the engine dies mid-call; the driver lives on
        assert not valid_markers(run_dir, "mine")  # no shard had been committed yet
        _, err = proc.communicate(timeout=600)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, err.decode()[-3000:]
    mined = stage_output(run_dir, "mine")
    tasks = mined.column("task_id").to_pylist()
    assert sorted(tasks) == [f"{SMOL}|Python|{i:06d}" for i in range(4)]
    success = json.loads((run_dir / "stages" / "mine" / "_SUCCESS").read_text())
    assert success["executor"] == "ray" and success["shards"] == 2
