"""A fixed Python table run through the real ``tests`` and ``verify`` stages (scripted authors,
the real sandbox), for the check that the Python path's rows do not change.

``tests/data/python_path/golden.json`` holds what these stages wrote for this world before
the multi-language wiring: three authors (one writes a slip, one a misreading), an instruction
with a worked example, generated inputs (second call), a float function, answers that disagree
and one instruction with no code. ``rows(pool)`` runs the stages again and returns the same
shape; fields that measure time are left out.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pyarrow as pa
from scripted import ScriptedChat

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "python_path" / "golden.json"
MODELS = ("m1", "m2", "m3")
ADD = "def add(a, b):\n    return a + b\n"
ADD_2 = "def add(x, y):\n    '''Sum.'''\n    total = x + y\n    return total\n"
SUB = "def add(a, b):\n    return a - b\n"
MEAN = "def mean(xs):\n    return sum(xs) / len(xs) if xs else 0.0\n"
MEAN_INT = "def mean(xs):\n    return sum(xs) // len(xs) if xs else 0\n"
EVENS = "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\n"
EVENS_NEG = "def evens(xs):\n    return [x for x in xs if x % 2 == 0 and x >= 0]\n"
INSTRUCTIONS = {
    "i1": "Write a Python function add(a, b) that returns the sum. For example, add(2, 3) "
          "returns 5.",
    "i2": "Write a Python function mean(xs) returning the mean of a list of numbers (0.0 for "
          "an empty list).",
    "i3": "Write a Python function evens(xs) that keeps the even numbers of a list.",
    "i4": "Write a haiku about the sea.",
}
CODES = {"i1": (ADD, ADD_2, SUB), "i2": (MEAN, MEAN, MEAN_INT), "i3": (EVENS, EVENS_NEG, EVENS),
         "i4": (None, None, None)}
TESTS = {
    ("m1", "add"): ["assert add(1, 2) == 3", "assert add(0, 0) == 0", "assert add(-1, 1) == 0"],
    ("m2", "add"): ["assert add(1, 2) == 3", "assert add(2, 2) == 5"],
    ("m3", "add"): ["assert add(5, 5) == 0", "assert add(7, 2) == 5"],
    ("m1", "mean"): ["assert mean([1, 2]) == 1.5", "assert mean([]) == 0.0"],
    ("m2", "mean"): ["assert mean([2, 2, 2]) == 2.0", "assert mean([1, 2, 4]) == 2.3333333"],
    ("m3", "mean"): ["assert mean([1, 2]) == 1"],
    ("m1", "evens"): ["assert evens([1, 2, 3, 4]) == [2, 4]", "assert evens([]) == []"],
    ("m2", "evens"): ["assert evens([2]) == [2]"],
    ("m3", "evens"): ["assert evens([1, 3]) == []"],
}
INPUTS = {"add": "[(3, 4), (10, -2)]", "mean": "[([1.0, 2.0],), ([5],)]",
          "evens": "[([-2, -4, 1],), ([6],)]"}


class Author(ScriptedChat):
    """Replies by the entry point named in the request (tests, or generate_inputs)."""

    def __init__(self, model: str):
        super().__init__({})
        self.model = model

    def reply(self, conversation) -> str:
        user = conversation[-1]["content"]
        entry = next(e for e in ("add", "mean", "evens") if f"{e}(" in user)
        if "def generate_inputs" in user and "assert" not in user.split("Rules")[0]:
            return f"```python\ndef generate_inputs():\n    return {INPUTS[entry]}\n```"
        return "```python\n" + "\n".join(TESTS[self.model, entry]) + "\n```"


class Ctx:
    """What the two stages use of a run context: backends, the sandbox, upstream tables."""

    def __init__(self, pool, tables):
        self.pool, self.tables, self.seed = pool, tables, 0
        self.authors = {m: Author(m) for m in MODELS}
        self.config = types.SimpleNamespace(experts=list(MODELS))

    def backend(self, model_id):
        return self.authors[model_id]

    def sandbox(self):
        return self.pool

    def advance(self, rows):
        pass

    def read(self, stage, columns=None, instruction_ids=None):
        table = self.tables[stage]
        if instruction_ids is not None:
            keep = set(instruction_ids)
            table = table.filter(pa.array([i in keep for i in
                                           table.column("instruction_id").to_pylist()]))
        return table.select([c for c in columns if c in table.column_names]) if columns \
            else table


def answers(with_language: bool) -> pa.Table:
    rows = []
    for iid, text in INSTRUCTIONS.items():
        for model, code in zip(MODELS, CODES[iid]):
            row = {"instruction_id": iid, "instruction": text, "model": model,
                   "response": f"```python\n{code}```" if code else "No code.", "code": code}
            if with_language:
                row.update(language="python", task_kind="function")
            rows.append(row)
    return pa.Table.from_pylist(rows)


def rate(table: pa.Table) -> pa.Table:
    ids = table.column("instruction_id").to_pylist()
    models = table.column("model").to_pylist()
    scores = [0.2 + 0.3 * MODELS.index(m) for m in models]
    return pa.table({"instruction_id": ids, "model": models, "final_score": scores,
                     "winner": [MODELS[-1]] * len(ids)})


_TIMING = ("duration_s",)


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in _TIMING}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return round(value, 9)
    return value


def rows(pool) -> dict:
    """Both stages' rows and stats, for a table without and with ``language`` columns."""
    from arenaforge.stages.verification import tests as tests_stage
    from arenaforge.stages.verification import verify as verify_stage

    out = {}
    for with_language in (False, True):
        table = answers(with_language)
        ctx = Ctx(pool, {"rate": rate(table)})
        written = tests_stage.run(table, tests_stage.TestGenConfig(authors=list(MODELS)), ctx)
        ctx.tables["tests"] = written.table
        verified = verify_stage.run(table, verify_stage.VerifyConfig(), ctx)
        key = "with_language" if with_language else "without_language"
        out[key] = {"tests": _plain(written.table.to_pylist()),
                    "tests_stats": _plain(dict(sorted(written.stats.items()))),
                    "verify": _plain(verified.table.to_pylist()),
                    "verify_stats": _plain(dict(sorted(verified.stats.items())))}
    return out


def write_golden(pool) -> None:
    GOLDEN.write_text(json.dumps(rows(pool), indent=1, sort_keys=True) + "\n")
