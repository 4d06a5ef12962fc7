"""mine -> clean -> difficulty on the embedded Qwen2.5-Coder-0.5B (real weights, real backend)."""

from __future__ import annotations

import json

import pytest
from arenaforge.pipeline.backends.base import SamplingParams
from arenaforge.pipeline.config import load_config
from arenaforge.pipeline.context import RunContext, close_process_resources
from arenaforge.stages.instructions import clean, difficulty, mine
from arenaforge.stages.instructions.pre_query import build_pre_query, derive_turns

pytestmark = pytest.mark.models
MODEL = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    cfg = load_config("configs/smoke.yaml", ["runner.kind=inline", "runner.request_cache=false"])
    yield RunContext(tmp_path_factory.mktemp("run"), cfg, threads=2)
    close_process_resources()


def test_qwen_template_derivation_matches_chatml(ctx):
    backend = ctx.backend(MODEL)

    def render(messages, add_generation_prompt):
        return backend.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)

    turns = derive_turns(render)
    assert (turns.end_of_turn, turns.user_header, turns.assistant_header) == (
        "<|im_end|>\n", "<|im_start|>user\n", "<|im_start|>assistant\n")
    system = "You are a Python coding assistant."
    for variant in ("bare", "empty_assistant", "open_assistant"):
        from_template = build_pre_query(render, "qwen2", variant, system)
        from_table = build_pre_query(None, "qwen2", variant, system)
        assert from_template.template == f"chat_template/{variant}"
        assert from_template.prompt == from_table.prompt


def test_mine_clean_difficulty(ctx):
    cfg = mine.MineConfig(miners=[MODEL], samples_per_language=4, max_tokens=64)
    planned = mine.plan(cfg, ctx)
    mined = mine.run(planned, cfg, ctx)
    assert mined.num_rows == 4
    rows = mined.to_pylist()
    assert {r["template"] for r in rows} == {"chat_template/empty_assistant"}
    assert len({SamplingParams.from_json(r["sample_params"]).seed for r in rows}) == 4
    assert all(r["finish_reason"] in ("stop", "length") for r in rows)
    # With the empty assistant turn most samples end on their own (19 of 24 measured).
    assert sum(r["finish_reason"] == "stop" for r in rows) >= 1

    cleaned = clean.run(mined, clean.CleanConfig(), ctx)
    assert cleaned.table.num_rows + cleaned.dropped.num_rows == 4

    two = mined.slice(0, 2)
    rated = difficulty.run(two, difficulty.DifficultyConfig(judges=[MODEL], min_difficulty=1),
                           ctx)
    votes = [v for t in (rated.table, rated.dropped) if t is not None
             for r in t.to_pylist() for v in r["difficulty_votes"]]
    assert len(votes) == 2
    for vote in votes:
        assert vote["raw"]
        assert (vote["score"] is None) != (vote["parse_error"] is None)
        if vote["score"] is not None:
            assert 1 <= vote["score"] <= 10
    assert json.loads(rows[0]["sample_params"])["n"] == 1
