"""The logprob difficulty protocol with the real embedded Qwen2.5-Coder-0.5B (needs the weights)."""

from __future__ import annotations

import types

import pyarrow as pa
import pytest
from arenaforge.stages.instructions.difficulty import DifficultyConfig, run
from model_support import open_embedded_backend

pytestmark = pytest.mark.models
MODEL = "qwen2.5-coder-0.5b"
HARD = ("Write a Python function `shortest_path(graph, start, goal)` that returns the list of "
        "nodes on a shortest path in a weighted directed graph given as a dict of dicts, using "
        "Dijkstra's algorithm with a heap; return None when the goal is unreachable and raise "
        "ValueError on negative edge weights.")
TRIVIAL = "Write a Python function that returns 1."


@pytest.fixture(scope="module")
def backend():
    b = open_embedded_backend(MODEL)
    yield b
    b.close()


def test_logprob_votes_rank_a_specific_hard_request_above_a_trivial_one(backend):
    # Measured: the 0.5B's digit distribution is nearly flat (expected 4.4 trivial, 5.4 hard),
    # so the filter is weak with this judge; the ordering of the extremes still holds.
    ctx = types.SimpleNamespace(seed=0, config=None,
                                backend=lambda model_id: backend, advance=lambda rows: None)
    table = pa.table({"instruction_id": ["hard", "trivial"], "instruction": [HARD, TRIVIAL]})
    res = run(table, DifficultyConfig(judges=[MODEL], min_difficulty=1.0), ctx)
    votes = {r["instruction_id"]: r["difficulty_votes"][0]
             for r in res.table.to_pylist() + res.dropped.to_pylist()}
    assert votes["hard"]["parse_error"] is None, votes["hard"]
    assert 1.0 <= votes["hard"]["score"] <= 9.0
    assert votes["hard"]["raw"].startswith("P(1)=") and "mass=" in votes["hard"]["raw"]
    assert votes["trivial"]["parse_error"] is None, votes["trivial"]
    assert votes["hard"]["score"] > votes["trivial"]["score"]


def test_task_probability_ranks_a_task_above_a_meta_request(backend):
    ctx = types.SimpleNamespace(seed=0, config=None,
                                backend=lambda model_id: backend, advance=lambda rows: None)
    meta = "What is the name of your Python function?"
    table = pa.table({"instruction_id": ["hard", "meta"], "instruction": [HARD, meta]})
    res = run(table, DifficultyConfig(judges=[MODEL], min_difficulty=1.0, min_task_prob=0.0), ctx)
    prob = dict(zip(res.table.column("instruction_id").to_pylist(),
                    res.table.column("task_prob").to_pylist()))
    assert 0.0 < prob["meta"] < prob["hard"] < 1.0


def test_too_little_digit_mass_is_a_parse_error_not_a_score(backend):
    ctx = types.SimpleNamespace(seed=0, config=None,
                                backend=lambda model_id: backend, advance=lambda rows: None)
    table = pa.table({"instruction_id": ["hard"], "instruction": [HARD]})
    res = run(table, DifficultyConfig(judges=[MODEL], min_difficulty=1.0, min_choice_mass=0.999999,
                                      min_task_prob=None), ctx)
    assert res.table.num_rows == 0
    vote = res.dropped.to_pylist()[0]["difficulty_votes"][0]
    assert vote["score"] is None and "below min_choice_mass" in vote["parse_error"]
    assert res.dropped.column("reason").to_pylist() == ["no_valid_vote"]
