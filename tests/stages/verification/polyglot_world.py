"""A small table of tasks that are not Python functions, for the ``tests`` and ``verify``
stages' language-neutral path (scripted authors that write cases as data, the real sandbox).

Three tasks, three models each: a C++ function (two right answers that are different programs,
one that does not compile), a JavaScript function (two right answers, one wrong) and a C++
whole program (two right answers, one wrong). Every author writes right cases except m3, whose
one slip on the JavaScript task is overruled by the independent right answers (rule 3).
"""

from __future__ import annotations

import json
import types

import pyarrow as pa
from scripted import ScriptedChat

MODELS = ("m1", "m2", "m3")

CPP_ADD = "long long add(long long a, long long b) {\n    return a + b;\n}\n"
CPP_ADD_2 = ("// the sum\nlong long add(long long x, long long y) {\n"
             "    long long total = x;\n    total += y;\n    return total;\n}\n")
CPP_ADD_BROKEN = "long long add(long long a, long long b) {\n    return a + b\n}\n"
JS_EVENS = "function evens(xs) {\n  return xs.filter((x) => x % 2 === 0);\n}\n"
JS_EVENS_2 = ("function evens(xs) {\n  const out = [];\n  for (const x of xs) {\n"
              "    if (x % 2 === 0) out.push(x);\n  }\n  return out;\n}\n")
JS_EVENS_WRONG = "function evens(xs) {\n  return xs.filter((x) => x % 2 === 0 && x > 0);\n}\n"
CPP_SUM = ("#include <iostream>\nint main() {\n  long long n, x, t = 0;\n  std::cin >> n;\n"
           "  for (long long i = 0; i < n; i++) { std::cin >> x; t += x; }\n"
           "  std::cout << t << \"\\n\";\n}\n")
CPP_SUM_2 = ("#include <cstdio>\nint main() {\n  long long n, x, t = 0;\n"
             "  if (scanf(\"%lld\", &n) != 1) return 0;\n"
             "  while (n-- > 0 && scanf(\"%lld\", &x) == 1) t += x;\n"
             "  printf(\"%lld\\n\", t);\n  return 0;\n}\n")
CPP_SUM_WRONG = ("#include <iostream>\nint main() {\n  long long n, x, t = 0;\n  std::cin >> n;\n"
                 "  for (long long i = 0; i < n; i++) { std::cin >> x; if (x > 0) t += x; }\n"
                 "  std::cout << t << \"\\n\";\n}\n")

TASKS = {
    "c1": ("cpp", "function",
           ("Write a C++ function add(a, b) that returns the sum of two integers. For example, "
            "add(2, 3) returns 5."), (CPP_ADD, CPP_ADD_2, CPP_ADD_BROKEN)),
    "j1": ("javascript", "function",
           ("Write a JavaScript function evens(xs) that keeps the even numbers of a list of "
            "integers, in order."), (JS_EVENS, JS_EVENS_2, JS_EVENS_WRONG)),
    "p1": ("cpp", "program",
           ("Write a C++ program that reads n and then n integers and prints their sum.\n"
            "Example input:\n```\n3\n1 2 3\n```\nOutput:\n```\n6\n```"),
           (CPP_SUM, CPP_SUM_2, CPP_SUM_WRONG)),
}

_ADD = {"signature": "def add(a: int, b: int) -> int",
        "cases": [{"args": [1, 2], "expected": 3}, {"args": [-4, 4], "expected": 0},
                  {"args": [10, -3], "expected": 7}],
        "inputs": [[100, 200], [-5, -6]]}
_EVENS = {"signature": "def evens(xs: List[int]) -> List[int]",
          "cases": [{"args": [[1, 2, 3, 4]], "expected": [2, 4]}, {"args": [[]], "expected": []},
                    {"args": [[-2, 5]], "expected": [-2]}],
          "inputs": [[[6, 7, 8]], [[-4, -3]]]}
# m3's slip: its own (wrong) answer returns [2] here too, as the right ones do: a slip in
# writing the test down, which the answers may overrule (rule 3)
_EVENS_SLIP = dict(_EVENS, cases=[{"args": [[2, 3]], "expected": [3]}])
_SUM = {"cases": [{"stdin": "3\n1 2 3\n", "stdout": "6\n"}, {"stdin": "0\n", "stdout": "0\n"},
                  {"stdin": "2\n-5 5\n", "stdout": "0"}],
        "inputs": ["4\n1 -1 2 -2\n", "1\n-9\n"]}
REPLIES = {("m1", "add"): _ADD, ("m2", "add"): _ADD, ("m3", "add"): _ADD,
           ("m1", "evens"): _EVENS, ("m2", "evens"): _EVENS, ("m3", "evens"): _EVENS_SLIP,
           ("m1", "main"): _SUM, ("m2", "main"): _SUM, ("m3", "main"): _SUM}


class Author(ScriptedChat):
    """Replies with its cases by the entry point named in the request: a function's as asserts
    in Python notation (what the request asks for), then its inputs as ``generate_inputs()``
    when asked for them apart; a program's as a JSON block (to a Python function's request,
    with ``python``)."""

    def __init__(self, model: str):
        super().__init__({})
        self.model = model
        self.python = "No tests."  # the reply to a Python function's request (asserts)

    def reply(self, conversation) -> str:
        user = conversation[-1]["content"]
        if "def generate_inputs" in user:  # the second request: its inputs, as a generator
            entry = next(e for e in ("add", "evens") if f"def {e}(" in user)
            inputs = ", ".join(repr(tuple(args)) for args in REPLIES[self.model, entry]["inputs"])
            return f"```python\ndef generate_inputs():\n    return [{inputs}]\n```"
        if "standard input" in user:
            return "```json\n" + json.dumps(REPLIES[self.model, "main"]) + "\n```"
        if "whatever the solution's language" not in user:
            return self.python
        entry = next(e for e in ("add", "evens") if f"`{e}`" in user)
        reply = REPLIES[self.model, entry]
        lines = [f"assert {entry}({', '.join(map(repr, c['args']))}) == {c['expected']!r}"
                 for c in reply["cases"]]
        lines += [f"{entry}({', '.join(map(repr, args))})" for args in reply["inputs"]]
        return "```python\n" + "\n".join(lines) + "\n```"


class Ctx:
    """What the stages use of a run context: backends, the sandbox, upstream tables."""

    def __init__(self, pool, tables=None):
        self.pool, self.tables, self.seed = pool, dict(tables or {}), 0
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


def answers(tasks=TASKS) -> pa.Table:
    rows = []
    for iid, (lang, kind, text, codes) in tasks.items():
        for model, code in zip(MODELS, codes):
            rows.append({"instruction_id": iid, "instruction": text, "model": model,
                         "response": f"```{lang}\n{code}```", "code": code,
                         "language": lang, "task_kind": kind})
    return pa.Table.from_pylist(rows)


def rate(table: pa.Table) -> pa.Table:
    ids = table.column("instruction_id").to_pylist()
    models = table.column("model").to_pylist()
    return pa.table({"instruction_id": ids, "model": models,
                     "final_score": [0.2 + 0.3 * MODELS.index(m) for m in models],
                     "winner": [MODELS[-1]] * len(ids)})
