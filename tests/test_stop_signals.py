"""Ctrl-C and SIGTERM stop a Ray run within seconds and leave no process of it; a rerun resumes.

One run of the real CLI on Ray (mine from a file, clean, then difficulty on a stand-in vLLM
engine) is stopped three times in the difficulty stage, each time with shards committed and a
model call in flight that would take ``SLOW_S`` more (``STANDIN_VLLM_DELAYS``: two quick calls,
then slow ones): SIGINT to its process group (Ctrl-C in a terminal), SIGINT to the driver
alone, SIGTERM. Each stop must end the driver within ``STOP_S`` (so without waiting for the
call) with the one line that says where it stopped, leave none of the run's processes (those
that inherited its environment or name its Ray temp dir: the driver, Ray's GCS, raylet, agents,
workers, the engine and the shard tasks), and keep the committed shards. A last rerun (inline,
which resumes the same run: the runner is not in the config hash) completes the stage with each
row exactly once, without recomputing the kept shards.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import yaml
from arenaforge.pipeline.stopping import RunStopped, stop_on_signals, stopped_in
from arenaforge.pipeline.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
STANDINS = ROOT / "tests" / "standins"
ROWS = 10
SLOW_S = 60  # the model call in flight when the signal comes (a shard is one row, one call)
STOP_S = 15.0  # signal to exit, generous for a loaded machine (3-4 s measured)


def _setup(tmp: Path) -> Path:
    weights = tmp / "weights"
    weights.mkdir()
    (tmp / "models.yaml").write_text(yaml.safe_dump({"models": [{
        "id": "e1", "backend": "vllm", "family": "standin", "path": str(weights), "n_ctx": 2048,
        "options": {"record_file": str(tmp / "events.jsonl")},
        "resources": {"replicas": 1}}]}))
    seed = tmp / "seed.jsonl"
    seed.write_text("".join(f'{{"instruction": "Write a Python function add{i}(a, b) that '
                            f'returns a + b + {i}."}}\n' for i in range(ROWS)))
    config = tmp / "run.yaml"
    config.write_text(yaml.safe_dump({
        "name": "stopped", "models_file": "models.yaml", "experts": ["e1"],
        "artifacts_dir": str(tmp / "runs"), "stages": ["mine", "clean", "difficulty"],
        "runner": {"kind": "ray", "shard_size": 1, "num_cpus": 2},
        "mine": {"source": str(seed)},
        "difficulty": {"min_task_prob": None, "min_difficulty": 1.0, "batch_size": 1}}))
    return config


def _start(config: Path, mark: str, delays: str, *overrides: str) -> subprocess.Popen:
    """``arenaforge run`` in a process group of its own; every process of the run inherits
    ``ARENAFORGE_TEST_RUN=mark``, and its Ray keeps its files under ``RAY_TMPDIR=/tmp/mark``
    (its own: a cluster that ``ray start`` left on the machine is not joined; short: Ray's
    socket names must fit in 107 bytes)."""
    os.makedirs(_ray_tmp(mark), exist_ok=True)
    env = dict(os.environ, PYTHONPATH=f"{STANDINS}:{ROOT}", ARENAFORGE_TEST_RUN=mark,
               RAY_TMPDIR=_ray_tmp(mark), STANDIN_VLLM_DELAYS=delays)
    env.pop("RAY_ADDRESS", None)
    sets = [arg for s in overrides for arg in ("--set", s)]
    argv = [sys.executable, "-m", "arenaforge.pipeline.cli", "run", str(config), "--quiet", *sets]
    # As from a terminal: a suite started in the background of a non-interactive shell (`cmd &`,
    # nohup in CI) ignores SIGINT, every child inherits that, and the run rightly keeps it
    # ignored. Reset it, then exec the CLI in the same process (the pid the test signals).
    exec_with_sigint = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                        "os.execv(sys.executable, sys.argv[1:])")
    return subprocess.Popen([sys.executable, "-c", exec_with_sigint, *argv], env=env,
                            start_new_session=True, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)


def _ray_tmp(mark: str) -> str:
    return f"/tmp/afstop-{mark[:12]}"


def _processes_of(mark: str) -> list[psutil.Process]:
    """The live processes of the run: those that inherited its environment or name its Ray
    temp dir on their command line."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == "zombie":
                continue
            if (proc.environ().get("ARENAFORGE_TEST_RUN") == mark
                    or any(_ray_tmp(mark) in arg for arg in proc.cmdline())):
                found.append(proc)
        except (psutil.Error, OSError):
            pass
    return found


def _markers(stage_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in stage_dir.glob("*.done.json")}


def _calls(events: Path) -> int:
    """The stand-in engines' model calls so far (each recorded as it starts)."""
    return events.read_text().count('"generate"') if events.exists() else 0


def _stop_mid_stage(config: Path, stage_dir: Path, how: str,
                    mark: str) -> tuple[dict[str, bytes], float]:
    """Start the run, wait for a new committed shard of the stage and its third model call (a
    slow one), stop it ``how``; returns the shards committed before the signal and the seconds
    from the signal to the driver's exit."""
    before, calls = len(_markers(stage_dir)), _calls(config.parent / "events.jsonl")
    proc = _start(config, mark, f"0.3,0.3,{SLOW_S}")
    try:
        deadline = time.monotonic() + 180
        while (len(_markers(stage_dir)) <= before
               or _calls(config.parent / "events.jsonl") < calls + 3):
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "the stage never committed a shard"
            time.sleep(0.05)
        committed = _markers(stage_dir)
        assert len(_processes_of(mark)) > 3  # driver, GCS, raylet, workers, the engine
        sent = time.monotonic()
        if how == "SIGINT to the group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        seconds = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    name = "SIGTERM" if how == "SIGTERM" else "SIGINT"
    assert proc.returncode == 128 + getattr(signal, name), (how, out[-3000:])
    line = (f"stopped by {name} in stage difficulty; committed shards are kept: rerun the same "
            "command to resume")
    assert out.count(line) == 1, (how, out[-3000:])
    leftovers = _processes_of(mark)
    for _ in range(20):  # a process Ray killed may take a moment to be reaped
        if not leftovers:
            break
        time.sleep(0.25)
        leftovers = _processes_of(mark)
    assert not leftovers, (how, [(p.pid, p.name(), p.cmdline()[:3]) for p in leftovers])
    assert not (stage_dir / "_SUCCESS").exists(), "stopped too late: the stage completed"
    return committed, seconds


def test_each_stop_signal_ends_the_run_cleanly_and_the_rerun_resumes(tmp_path):
    config = _setup(tmp_path)
    stage_dir = tmp_path / "runs" / "stopped" / "stages" / "difficulty"
    kept: dict[str, bytes] = {}
    timings = {}
    marks = [uuid.uuid4().hex for _ in range(4)]
    try:
        for how, mark in zip(("SIGINT to the group", "SIGINT to the driver", "SIGTERM"), marks):
            committed, timings[how] = _stop_mid_stage(config, stage_dir, how, mark)
            assert timings[how] < STOP_S, timings
            now = _markers(stage_dir)
            assert {k: now.get(k) for k in committed} == committed, how  # committed: kept
            kept.update(committed)
        print("seconds from the signal to the driver's exit:", timings)
        final = _start(config, marks[-1], "0", "runner.kind=inline")
        out, _ = final.communicate(timeout=300)
    finally:
        for mark in marks:
            shutil.rmtree(_ray_tmp(mark), ignore_errors=True)
    assert final.returncode == 0, out[-3000:]
    now = _markers(stage_dir)
    assert {k: now[k] for k in kept} == kept  # the shards committed before a stop: not redone
    assert len(now) == ROWS
    store = RunStore(tmp_path / "runs" / "stopped")

    def ids(stage: str, which: str = "kept") -> list[str]:
        table = store.stage(stage).read(which, columns=["instruction_id"])
        return table.column("instruction_id").to_pylist() if table.num_rows else []

    clean = ids("clean")
    assert len(set(clean)) == ROWS
    assert sorted(ids("difficulty") + ids("difficulty", "dropped")) == sorted(clean)


def test_a_stop_signal_raises_run_stopped_once_then_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunStopped) as stop, stop_on_signals():
        with pytest.raises(RunStopped):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs at the next bytecode
        os.kill(os.getpid(), signal.SIGINT)  # a second signal: the clean-up goes on
        time.sleep(0.2)
        raise stopped_in(KeyboardInterrupt(), "judge")  # as Ray's wait reraises it
    assert (stop.value.signal_name, stop.value.stage, stop.value.exit_code) == (
        "SIGTERM", "judge", 143)
    assert signal.getsignal(signal.SIGTERM) is before
    assert stopped_in(KeyboardInterrupt(), "mine").describe().startswith(
        "stopped by SIGINT in stage mine;")


def test_a_signal_the_process_ignores_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_on_signals():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
    finally:
        signal.signal(signal.SIGINT, previous)
