"""The answer stage's pure logic with scripted experts (one batch per model, drops, truncation)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from arenaforge.pipeline.backends.base import Completion
from arenaforge.stages.arena.answer import AnswerConfig, build_conversation, run


class ScriptedExpert:
    """Replies ``reply(conversation) -> Completion``; records each batch it was given."""

    def __init__(self, model_id, reply):
        self.model_id, self.reply, self.batches, self.params = model_id, reply, [], []

    def chat(self, conversations, params):
        self.batches.append(conversations)
        self.params.append(params)
        return [[self.reply(c)] for c in conversations]


class Ctx:
    def __init__(self, experts):
        self.experts = experts
        self.seed = 7

    def backend(self, model_id):
        return self.experts[model_id]

    def advance(self, rows):
        pass


def instructions(n=2) -> pa.Table:
    return pa.table({"instruction_id": [f"id{i}" for i in range(n)],
                     "instruction": [f"Write f{i}" for i in range(n)],
                     "miner": ["m1"] * n, "language": ["python"] * n,
                     "difficulty": [5.0 + i for i in range(n)]})


def code_reply(conv):
    return Completion(f"Sure.\n```python\ndef {conv[-1]['content'][6:]}(): pass\n```", "stop",
                      prompt_tokens=11, completion_tokens=9)


def test_every_expert_answers_every_instruction_in_one_batch_each():
    experts = {"m1": ScriptedExpert("m1", code_reply), "m2": ScriptedExpert("m2", code_reply)}
    out = run(instructions(3), AnswerConfig(experts=list(experts), system_prompt="Be brief."), Ctx(experts))
    rows = out.table.to_pylist()
    assert [(r["instruction_id"], r["model"]) for r in rows] == [
        ("id0", "m1"), ("id0", "m2"), ("id1", "m1"), ("id1", "m2"), ("id2", "m1"), ("id2", "m2")]
    for e in experts.values():
        assert len(e.batches) == 1 and len(e.batches[0]) == 3
        assert e.batches[0][0] == [{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "Write f0"}]
        assert e.params[0].seed == 7 and e.params[0].temperature == 0.0
    r = rows[0]
    assert r["code"] == "def f0(): pass\n" and r["finish_reason"] == "stop"
    assert (r["prompt_tokens"], r["completion_tokens"], r["truncated"]) == (11, 9, False)
    assert (r["miner"], r["language"], r["difficulty"]) == ("m1", "python", 5.0)  # carried
    assert out.dropped is None and out.stats["answers_ok.m1"] == 3


def test_failed_completion_is_dropped_with_its_error_never_faked():
    def flaky(conv):
        return Completion.failed("ValueError: prompt too long") if "f1" in conv[-1]["content"] \
            else code_reply(conv)

    experts = {"m1": ScriptedExpert("m1", flaky), "m2": ScriptedExpert("m2", code_reply)}
    out = run(instructions(2), AnswerConfig(experts=list(experts)), Ctx(experts))
    assert [(r["instruction_id"], r["model"]) for r in out.table.to_pylist()] == [
        ("id0", "m1"), ("id0", "m2"), ("id1", "m2")]
    dropped = out.dropped.to_pylist()
    assert len(dropped) == 1
    assert dropped[0]["reason"] == "model_error" and dropped[0]["model"] == "m1"
    assert dropped[0]["detail"] == "ValueError: prompt too long"
    assert dropped[0]["instruction_id"] == "id1"


def test_truncated_and_codeless_answers_are_marked():
    def cut(conv):
        return Completion("```python\ndef f(:\n    retu", "length", 5, 64)

    def prose(conv):
        return Completion("I cannot help with that.", "stop", 5, 6)

    out = run(instructions(1), AnswerConfig(experts=["m1", "m2"]),
              Ctx({"m1": ScriptedExpert("m1", cut), "m2": ScriptedExpert("m2", prose)}))
    r1, r2 = out.table.to_pylist()
    assert r1["truncated"] is True and r1["finish_reason"] == "length"
    assert r1["code"] == "def f(:\n    retu\n"
    assert r2["truncated"] is False and r2["code"] is None
    assert r2["response"] == "I cannot help with that."
    assert out.stats["truncated.m1"] == 1


def test_empty_shard_keeps_the_schema():
    experts = {"m1": ScriptedExpert("m1", code_reply)}
    out = run(instructions(0), AnswerConfig(experts=list(experts)), Ctx(experts))
    assert out.table.num_rows == 0 and "truncated" in out.table.column_names
    assert experts["m1"].batches == []


def test_config_and_input_errors():
    experts = {"m1": ScriptedExpert("m1", code_reply)}
    with pytest.raises(ValueError, match="duplicate"):
        run(instructions(1), AnswerConfig(experts=["m1", "m1"]), Ctx(experts))


def test_upstream_column_with_an_output_name_is_replaced():
    experts = {"m1": ScriptedExpert("m1", code_reply)}
    clash = instructions(1).append_column("finish_reason", pa.array(["mined-length"]))
    out = run(clash, AnswerConfig(experts=list(experts)), Ctx(experts)).table
    assert out.column_names.count("finish_reason") == 1
    assert out.column("finish_reason").to_pylist() != ["mined-length"]


def test_conversation_without_system_prompt():
    assert build_conversation("Do X", None) == [{"role": "user", "content": "Do X"}]
