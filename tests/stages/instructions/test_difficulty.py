"""Difficulty votes: strict score parsing, votes kept with raw text, mean and filters."""

from __future__ import annotations

import types

import pyarrow as pa
import pytest
from arenaforge.pipeline.backends.base import Completion
from arenaforge.stages.instructions.difficulty import (
    DifficultyConfig,
    build_conversation,
    parse_score,
    run,
    summarize_votes,
)


@pytest.mark.parametrize("text,score", [
    ("Clear, specific, moderately hard.\nRating: [[6]]", 6),
    ("Rating: [[ 10 ]]", 10),
    ("[[1]]", 1),
])
def test_parse_valid(text, score):
    assert parse_score(text) == (score, None)


@pytest.mark.parametrize("text,error", [
    ("", "empty output"),
    ("   \n", "empty output"),
    (None, "empty output"),
    ("This is a hard task. Rating: 7", "no score in the [[N]] format"),
    ("Rating: [7]", "no score in the [[N]] format"),
    ("Rating: [[11]]", "score out of range 1-10: 11"),
    ("Rating: [[0]]", "score out of range 1-10: 0"),
    ("Rating: [[-3]]", "score out of range 1-10: -3"),
    ("Rating: [[7]] or maybe Rating: [[8]]", "more than one score: [[7]], [[8]]"),
    ("Rating: [[7]]\nRating: [[7]]", "more than one score: [[7]], [[7]]"),
    ("Rating: [[7.5]]", "score is not an integer: [[7.5]]"),
    ("Rating: [[N]]", "score is not an integer: [[N]]"),
    ("Rating: [[seven]]", "score is not an integer: [[seven]]"),
])
def test_parse_malformed_is_an_error_not_a_number(text, error):
    assert parse_score(text) == (None, error)


def test_prompt_keeps_braces_and_asks_for_the_format():
    conv = build_conversation("Fix `d = {'a': 1}` in {my_module}")
    assert conv[0]["role"] == "system" and conv[1]["role"] == "user"
    assert "Fix `d = {'a': 1}` in {my_module}" in conv[1]["content"]
    assert "[[N]]" in conv[1]["content"] and "clarity" in conv[1]["content"]


def test_logprob_prompt_puts_the_rubric_before_the_request():
    # llama.cpp reuses an evaluated prefix only up to the first differing token.
    a, b = (build_conversation(t, "logprob")[1]["content"] for t in ("first {x}", "second"))
    rubric = a[:a.index("first {x}")]
    assert rubric == b[:b.index("second")] and "1 to 9" in rubric
    assert "single digit" in a[a.index("first {x}"):] and "[[N]]" not in a


def test_summarize_ignores_errors():
    votes = [{"score": 4}, {"score": None}, {"score": 7}]
    assert summarize_votes(votes) == (5.5, 2)
    assert summarize_votes([{"score": None}]) == (None, 0)


class ScriptedJudge:
    """Replies from a fixed table keyed by request text (a pure-logic test double)."""

    def __init__(self, replies: dict[str, Completion]):
        self.replies, self.calls = replies, 0

    def chat(self, conversations, params):
        self.calls += 1
        out = []
        for conv in conversations:
            text = conv[1]["content"].split("<<<\n", 1)[1].split("\n>>>", 1)[0]
            out.append([self.replies[text]])
        return out


def make_ctx(judges: dict[str, ScriptedJudge]):
    return types.SimpleNamespace(seed=0, backend=lambda model_id: judges[model_id],
                                 advance=lambda rows: None)


def ok(text):
    return Completion(text=text, finish_reason="stop")


def test_stage_keeps_every_vote_and_filters():
    a = ScriptedJudge({"hard": ok("Rating: [[8]]"), "easy": ok("Rating: [[2]]"),
                       "broken": ok("Rating: 9"), "half": ok("Rating: [[12]]")})
    b = ScriptedJudge({"hard": ok("Rating: [[6]]"), "easy": ok("Rating: [[1]]"),
                       "broken": Completion.failed("server down"), "half": ok("[[5]]")})
    table = pa.table({"instruction_id": ["1", "2", "3", "4"],
                      "instruction": ["hard", "easy", "broken", "half"]})
    res = run(table, DifficultyConfig(judges=["a", "b"], protocol="generative", min_difficulty=3.0,
                                      batch_size=2), make_ctx({"a": a, "b": b}))
    assert a.calls == 2 and b.calls == 2
    kept = res.table.to_pylist()
    assert [r["instruction"] for r in kept] == ["hard", "half"]
    assert kept[0]["difficulty"] == 7.0 and kept[0]["difficulty_n_valid"] == 2
    assert kept[1]["difficulty"] == 5.0 and kept[1]["difficulty_n_valid"] == 1
    half_votes = kept[1]["difficulty_votes"]
    assert half_votes[0] == {"judge": "a", "score": None, "raw": "Rating: [[12]]",
                             "parse_error": "score out of range 1-10: 12"}
    dropped = {r["instruction"]: r for r in res.dropped.to_pylist()}
    assert dropped["easy"]["reason"] == "below_min_difficulty"
    assert dropped["broken"]["reason"] == "no_valid_vote"
    assert dropped["broken"]["difficulty"] is None
    assert dropped["broken"]["difficulty_votes"][1]["parse_error"] == "backend error: server down"
    assert res.stats == {"votes_valid.a": 2.0, "votes_valid.b": 3.0}


def test_min_valid_votes():
    a = ScriptedJudge({"x": ok("[[5]]")})
    b = ScriptedJudge({"x": ok("no idea")})
    table = pa.table({"instruction_id": ["1"], "instruction": ["x"]})
    res = run(table, DifficultyConfig(judges=["a", "b"], protocol="generative", min_valid_votes=2,
                                      min_difficulty=1),
              make_ctx({"a": a, "b": b}))
    assert res.table.num_rows == 0
    assert res.dropped.column("reason").to_pylist() == ["too_few_valid_votes"]


def test_empty_input_keeps_schema():
    res = run(pa.table({"instruction_id": pa.array([], pa.string()),
                        "instruction": pa.array([], pa.string())}),
              DifficultyConfig(judges=["a"]), make_ctx({"a": ScriptedJudge({})}))
    assert res.table.num_rows == 0
    assert res.table.schema.field("difficulty_votes").type.value_type.names == [
        "judge", "score", "raw", "parse_error"]


def test_logprob_protocol_drops_requests_that_are_not_tasks(monkeypatch):
    import math

    # Pure logic: readings keyed by request text stand in for a judge's next-token logprobs.
    task_yes = {"sort it": 0.9, "what is your name?": 0.3, "broken": None}
    digit = {"sort it": "7", "what is your name?": "5", "broken": "5"}

    def fake_logprobs(backend, conversations, spellings):
        out = []
        for conv in conversations:
            text = conv[-1]["content"].split("<<<\n", 1)[1].split("\n>>>", 1)[0]
            if "yes" in spellings:
                p = task_yes[text]
                out.append((None, "decode failed") if p is None else
                           ({"Yes": math.log(p), "No": math.log(1 - p)}, None))
            else:
                out.append(({digit[text]: 0.0}, None))
        return out

    monkeypatch.setattr("arenaforge.stages.arena.judge_logits.next_token_logprobs", fake_logprobs)
    table = pa.table({"instruction_id": ["1", "2", "3"],
                      "instruction": ["sort it", "what is your name?", "broken"]})
    ctx = make_ctx({"a": object()})
    res = run(table, DifficultyConfig(judges=["a"], min_difficulty=3.0, min_task_prob=0.55), ctx)
    kept = res.table.to_pylist()
    assert [(r["instruction"], r["difficulty"]) for r in kept] == [("sort it", 7.0)]
    assert abs(kept[0]["task_prob"] - 0.9) < 1e-9
    reasons = dict(zip(res.dropped.column("instruction").to_pylist(),
                       res.dropped.column("reason").to_pylist()))
    assert reasons == {"what is your name?": "not_a_task", "broken": "no_task_reading"}
    off = run(table, DifficultyConfig(judges=["a"], min_difficulty=3.0, min_task_prob=None), ctx)
    assert off.table.num_rows == 3 and off.table.column("task_prob").null_count == 3
