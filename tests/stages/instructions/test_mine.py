"""The mine stage: plan, seeds per row, recorded template and params, request extraction."""

from __future__ import annotations

import json
import types

import pyarrow as pa
import pytest
from arenaforge.pipeline.backends.base import Completion, SamplingParams
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.instructions.mine import (
    MINE_SCHEMA,
    MineConfig,
    _runs,
    extract_request,
    plan,
    run,
)

from tests.stages.instructions.test_mine_pre_query import renderer


class RecordingMiner:
    """Returns scripted completions and records each call (a pure-logic test double)."""

    def __init__(self, template_family: str | None):
        self.family, self.calls = template_family, []

    def chat_template(self):
        return "x" if self.family else None

    def apply_chat_template(self, messages, add_generation_prompt=True):
        return renderer(self.family)(messages, add_generation_prompt)

    def complete(self, prompts, params):
        self.calls.append((prompts, params))
        return [[Completion(text=f"Write task {params.sample_seed(i)}.\n\n\nSure! ```python\nx = 1```",
                            finish_reason="stop" if i % 2 == 0 else "length")
                 for i in range(params.n)] for _ in prompts]


def make_ctx(miners: dict[str, RecordingMiner], families: dict[str, str]):
    return types.SimpleNamespace(
        seed=7, backend=lambda m: miners[m], model_spec=lambda m: types.SimpleNamespace(family=families[m]),
        advance=lambda rows: None)


def test_plan_rows():
    ctx = make_ctx({"a": RecordingMiner("chatml"), "b": RecordingMiner(None)},
                   {"a": "qwen2", "b": "gemma3"})
    table = plan(MineConfig(miners=["a", "b"], languages=["Python", "Rust"], samples_per_language=3), ctx)
    assert table.num_rows == 2 * 2 * 3
    assert table.column("task_id").to_pylist()[:2] == ["a|Python|000000", "a|Python|000001"]
    assert len(set(table.column("task_id").to_pylist())) == 12


def test_plan_rows_per_language_and_task_kind():
    ctx = make_ctx({"a": RecordingMiner("chatml")}, {"a": "qwen2"})
    cfg = MineConfig(miners=["a"], languages=["python", "C++"],
                     task_kinds=["function", "program"], samples_per_language=2)
    assert cfg.languages == ["python", "cpp"]
    rows = plan(cfg, ctx).to_pylist()
    assert [(r["language"], r["task_kind"]) for r in rows[::2]] == [
        ("python", "function"), ("python", "program"), ("cpp", "function"), ("cpp", "program")]
    # a Python function keeps the task ids mining a language named Python always gave it
    assert [r["task_id"] for r in rows[:3]] == ["a|Python|000000", "a|Python|000001",
                                                "a|Python|program|000000"]
    out = run(plan(cfg, ctx), cfg, ctx).to_pylist()
    prompts = [c[0][0] for c in ctx.backend("a").calls]
    assert sum("standard input" in p for p in prompts) == 2  # the program system prompt
    assert any("C++ coding problems" in p for p in prompts)
    by = {(r["language"], r["task_kind"]): r for r in out}
    # the same words in another language or kind are another task
    assert by["cpp", "program"]["instruction_id"] == instruction_id(
        by["cpp", "program"]["instruction"], "cpp", "program")
    assert by["python", "function"]["instruction_id"] == instruction_id(
        by["python", "function"]["instruction"])


def test_unknown_language_names_it():
    with pytest.raises(ValueError, match="unknown language 'Klingon'"):
        MineConfig(languages=["Python", "Klingon"])


def test_runs():
    assert _runs([0, 1, 2, 5, 6, 9]) == [(0, 3), (5, 2), (9, 1)]
    assert _runs([]) == []


def test_extract_request():
    assert extract_request("  How do I X?\n```py\ncode", ["```"]) == "How do I X?"
    assert extract_request("Para one.\n\nPara two.\n\n\nAnswer", MineConfig().request_stop) == \
        "Para one.\n\nPara two."
    assert "\n\n\n" in MineConfig().stop


def test_run_records_template_params_and_replayable_seeds():
    miners = {"a": RecordingMiner("chatml"), "b": RecordingMiner(None)}
    ctx = make_ctx(miners, {"a": "qwen2", "b": "gemma3"})
    cfg = MineConfig(miners=["a", "b"], languages=["Go"], samples_per_language=5,
                     temperature=0.9, max_tokens=64)
    full = plan(cfg, ctx)
    # A shard with a gap in sample indexes: rows 0,1,3,4 of miner a and all of b.
    shard = full.filter(pa.array([r != "a|Go|000002" for r in full.column("task_id").to_pylist()]))
    out = run(shard, cfg, ctx)
    assert out.schema == MINE_SCHEMA and out.num_rows == 9
    rows = {r["task_id"]: r for r in out.to_pylist()}

    # Miner a has a chat template: the prompt comes from it; two runs -> two calls.
    prompts_a = {c[0][0] for c in miners["a"].calls}
    assert len(miners["a"].calls) == 2 and len(prompts_a) == 1
    assert "Go coding problems" in prompts_a.pop()
    assert rows["a|Go|000000"]["template"] == "chat_template/empty_assistant"
    assert rows["b|Go|000000"]["template"] == "gemma/empty_assistant"  # family fallback

    # Each row's params replay that sample alone: n=1 and the seed it was sampled with.
    a0, a3 = SamplingParams.from_json(rows["a|Go|000000"]["sample_params"]), \
        SamplingParams.from_json(rows["a|Go|000003"]["sample_params"])
    assert a0.n == 1 and a0.temperature == 0.9 and a0.max_tokens == 64
    assert a3.seed - a0.seed == 3
    assert "<|im_end|>" in a0.stop
    assert rows["a|Go|000003"]["instruction"] == f"Write task {a3.seed}."
    assert rows["a|Go|000003"]["raw"].startswith(f"Write task {a3.seed}.\n\n\nSure!")
    assert rows["a|Go|000003"]["instruction_id"] == instruction_id(f"Write task {a3.seed}.",
                                                                   "go")
    assert {r["finish_reason"] for r in rows.values()} == {"stop", "length"}
    assert json.loads(rows["b|Go|000001"]["sample_params"])["seed"] != a0.seed + 1


def test_seeds_do_not_depend_on_sharding():
    ctx = make_ctx({"a": RecordingMiner("chatml")}, {"a": "qwen2"})
    cfg = MineConfig(miners=["a"], samples_per_language=4)
    full = plan(cfg, ctx)
    whole = run(full, cfg, ctx).column("sample_params").to_pylist()
    parts = run(full.slice(0, 1), cfg, ctx).column("sample_params").to_pylist() + \
        run(full.slice(1), cfg, ctx).column("sample_params").to_pylist()
    assert whole == parts


def test_unknown_family_without_template_fails_clearly():
    ctx = make_ctx({"a": RecordingMiner(None)}, {"a": "falcon"})
    cfg = MineConfig(miners=["a"], samples_per_language=1)
    with pytest.raises(ValueError, match="unknown model family 'falcon'"):
        run(plan(cfg, ctx), cfg, ctx)


def test_config_rejects_unknown_template():
    with pytest.raises(ValueError, match="template"):
        MineConfig(template="sideways")
