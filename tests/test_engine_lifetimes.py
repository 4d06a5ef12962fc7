"""Engines on the real Ray path behave as in process: capabilities, batches, lifetimes.

The real difficulty, answer and judge stages run twice in their own process
(``tests/standin_pipeline.py``): inline, then on a fresh local Ray whose engine actors hold the
stand-in vLLM of ``tests/standins`` (it records every engine start, call and stop). vLLM itself
cannot run here; what is checked is everything between a stage and the engine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.standin_pipeline import EXPERTS, GPU_GIB, INSTRUCTIONS, JUDGES, N_CTX, SHARD_SIZE

ROOT = Path(__file__).resolve().parents[1]
SHARDS = INSTRUCTIONS // SHARD_SIZE


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    work = tmp_path_factory.mktemp("standin")
    out = {}
    for kind in ("inline", "ray"):
        done = subprocess.run([sys.executable, str(ROOT / "tests" / "standin_pipeline.py"),
                               str(work), kind], capture_output=True, text=True, timeout=420,
                              check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        out[kind] = json.loads((work / f"{kind}.json").read_text())
    return out


def _lifetimes(events: list[dict]) -> dict[str, list[list[dict]]]:
    """Per model, its engine lifetimes: the events from one start to its stop."""
    out: dict[str, list[list[dict]]] = {}
    for e in events:
        if e["event"] == "start":
            out.setdefault(e["model"], []).append([])
        out[e["model"]][-1].append(e)
    return out


def _calls(life: list[dict]) -> list[int]:
    return [e["prompts"] for e in life if e["event"] == "generate"]


@pytest.mark.slow
def test_a_stage_on_ray_sees_the_engine_capabilities_it_sees_in_process(runs):
    expected = {"prefers_batches": True, "next_token_logprobs": True, "context_length": N_CTX}
    assert runs["inline"]["traits"] == runs["ray"]["traits"] == expected
    assert runs["ray"]["prefers_batches"] is True  # what the judge and difficulty stages read


@pytest.mark.slow
def test_judge_and_difficulty_readings_reach_a_ray_engine_in_batches_of_a_shard(runs):
    ray = _lifetimes(runs["ray"]["events"])
    for judge in JUDGES:
        difficulty, judging = ray[judge]  # loaded for difficulty, released, loaded for judge
        # one call per shard: the shard's instructions (difficulty), then for each shard its
        # answers read alone (3 per instruction) and the pairs' second readings (3 pairs x 2
        # orders): never one reading a call
        assert _calls(difficulty) == [SHARD_SIZE] * SHARDS
        assert _calls(judging) == [SHARD_SIZE * 3, SHARD_SIZE * 6] * SHARDS
    inline = _lifetimes(runs["inline"]["events"])
    for model in EXPERTS + JUDGES:  # the same calls as in process, model by model
        assert [_calls(life) for life in ray[model]] == [_calls(life) for life in inline[model]]
    assert runs["ray"]["rows"] == runs["inline"]["rows"]
    assert runs["ray"]["rows"]["judge"] == INSTRUCTIONS * 3 * len(JUDGES) * 2


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["inline", "ray"])
def test_engines_live_only_from_the_stage_that_uses_them_and_peak_at_the_largest_stage(runs, kind):
    events = runs[kind]["events"]
    lives = _lifetimes(events)
    assert all(len(lives[m]) == 1 for m in EXPERTS)
    assert all(len(lives[j]) == 2 for j in JUDGES)  # difficulty, then judge
    assert all(life[-1]["event"] == "stop" for m in lives for life in lives[m])
    judges_released = max(lives[j][0][-1]["time"] for j in JUDGES)
    judges_back = min(lives[j][1][0]["time"] for j in JUDGES)
    for expert in EXPERTS:  # loaded by answer only: after difficulty's judges, gone before judge
        (life,) = lives[expert]
        assert judges_released <= life[0]["time"] and life[-1]["time"] <= judges_back
    held, peak = 0.0, 0.0
    for e in sorted(events, key=lambda e: e["time"]):
        if e["event"] in ("start", "stop"):
            held += GPU_GIB[e["model"]] * (1 if e["event"] == "start" else -1)
            peak = max(peak, held)
    largest_stage = max(sum(GPU_GIB[m] for m in EXPERTS), sum(GPU_GIB[j] for j in JUDGES))
    assert peak == largest_stage < sum(GPU_GIB.values())
    if kind == "ray":  # the engine directory's own record agrees: every replica released
        loaded = runs["ray"]["loaded"]
        assert {m: len(v) for m, v in loaded.items()} == {**{m: 1 for m in EXPERTS},
                                                          **{j: 2 for j in JUDGES}}
        assert all("released_at" in r for v in loaded.values() for r in v)
