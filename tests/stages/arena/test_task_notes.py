"""Answering and judging per language: a Python function is asked and judged as it always was;
any other task names its language and kind, and its code is taken from that language's fences."""

from __future__ import annotations

import types

import pyarrow as pa
from arenaforge.pipeline.backends.base import Completion
from arenaforge.stages.arena.answer import AnswerConfig, build_conversation
from arenaforge.stages.arena.answer import run as answer_run
from arenaforge.stages.arena.judge import JudgeConfig, enumerate_battles

TEXT = "Return the sum of the even numbers of a list."
REPLY = ("Here:\n```python\ndef f(xs):\n    return 0\n```\nand in C++:\n```c++\n"
         "long long f(std::vector<long long> xs) { return 0; }\n```\n")


class Recorder:
    def __init__(self):
        self.seen = []

    def chat(self, conversations, params):
        self.seen += conversations
        return [[Completion(text=REPLY, finish_reason="stop")] for _ in conversations]


def test_answer_prompt_and_code_per_language_and_kind():
    backend = Recorder()
    ctx = types.SimpleNamespace(seed=0, backend=lambda m: backend, advance=lambda n: None)
    table = pa.table({"instruction_id": ["a", "b", "c", "d"], "instruction": [TEXT] * 4,
                      "language": ["python", "cpp", "python", None],
                      "task_kind": ["function", "function", "program", None]})
    out = answer_run(table, AnswerConfig(experts=["m"], system_prompt="S"), ctx).table.to_pylist()
    users = [c[-1]["content"] for c in backend.seen]
    # a Python function (or a row from before languages) is asked exactly as before
    assert backend.seen[0] == build_conversation(TEXT, "S") == backend.seen[3]
    assert users[1].startswith(TEXT + "\n\n") and "in C++" in users[1]
    assert "```cpp" in users[1] and "no main function" in users[1]
    assert "standard input" in users[2] and "```python" in users[2]
    codes = [r["code"] for r in out]
    assert codes[0] == codes[2] == codes[3] == "def f(xs):\n    return 0\n"
    assert codes[1].startswith("long long f(")
    assert [(r["language"], r["task_kind"]) for r in out][:2] == [("python", "function"),
                                                                  ("cpp", "function")]


def test_judges_read_what_the_answers_had_to_be():
    table = pa.table({"instruction_id": ["a", "a", "b", "b"], "instruction": [TEXT] * 4,
                      "model": ["m1", "m2"] * 2, "response": ["x", "y"] * 2,
                      "language": ["python", "python", "rust", "rust"],
                      "task_kind": ["function", "function", "program", "program"]})
    python, rust = enumerate_battles(table, JudgeConfig(judges=["j"]))
    assert python.instruction == TEXT
    assert rust.instruction.startswith(TEXT + "\n\n") and "Rust" in rust.instruction
    assert "standard input" in rust.instruction
