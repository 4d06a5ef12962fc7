"""The correct/wrong corpus (tests/data/polyglot) through the real ``tests`` and ``verify``
stages, one language at a time: authors (scripted) give each task's cases as data (a Python
function's as asserts, its own path), every version runs in the sandbox, and verify accepts
the correct version of every task and neither wrong one.

Python, JavaScript and C build in a fraction of a second and run by default; the languages
whose compilers take a second or more per program are slow tests.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from arenaforge.pipeline.sandbox.languages import LANGUAGE_IDS, toolchain
from arenaforge.stages.common.task_kinds import display, uses_python_path
from arenaforge.stages.verification.test_split import normalised_call
from polyglot_world import Ctx
from scripted import ScriptedChat
from test_polyglot_corpus import QUICK, TASKS, VERSIONS, _source

MODELS = ("m1", "m2", "m3")  # m1 writes the correct version, m2 and m3 the two wrong ones


def _instruction(lang: str, task: dict) -> str:
    if task["kind"] == "function":
        return (f"Corpus task {task['id']}: write a function `{task['id']}(...)` in "
                f"{display(lang)}.")
    return f"Corpus task {task['id']}: write a whole {display(lang)} program."


class CorpusAuthor(ScriptedChat):
    """Gives the corpus's cases of the task named in the request: a function's as Python
    asserts (what the tests stage asks for in every language), a program's as data."""

    def __init__(self):
        super().__init__({})

    def reply(self, conversation) -> str:
        user = conversation[-1]["content"]
        task = next(t for t in TASKS if f"Corpus task {t['id']}:" in user)
        if "as data, not as code" not in user:
            return "```python\n" + "\n".join(
                f"assert {normalised_call(task['id'], c['args'])} == {c['expected']!r}"
                for c in task["cases"]) + "\n```"
        return "```json\n" + json.dumps({"cases": task["cases"], "inputs": []}) + "\n```"


def _params():
    for lang in LANGUAGE_IDS:
        marks = [] if lang in QUICK else [pytest.mark.slow]
        yield pytest.param(lang, marks=marks, id=lang)


@pytest.mark.parametrize("lang", list(_params()))
def test_each_language_verifies_its_correct_programs_and_rejects_its_wrong_ones(
        sandbox_pool, lang):
    from arenaforge.stages.verification import tests as tests_stage
    from arenaforge.stages.verification import verify as verify_stage

    if not toolchain(lang).available:
        pytest.skip(f"{lang} toolchain not installed: {toolchain(lang).problem}")
    tasks = [t for t in TASKS if lang not in t.get("languages_without", ())]
    rows = [{"instruction_id": f"{lang}-{t['id']}", "instruction": _instruction(lang, t),
             "model": model, "response": "", "code": _source(lang, t, version),
             "language": lang, "task_kind": t["kind"]}
            for t in tasks for model, version in zip(MODELS, VERSIONS)]
    table = pa.Table.from_pylist(rows)
    rate = pa.table({"instruction_id": table.column("instruction_id"),
                     "model": table.column("model"), "final_score": [0.5] * len(rows),
                     "winner": ["m2"] * len(rows)})
    ctx = Ctx(sandbox_pool, {"rate": rate})
    ctx.authors = {m: CorpusAuthor() for m in MODELS}
    written = tests_stage.run(table, tests_stage.TestGenConfig(authors=list(MODELS),
                                                               augment=False), ctx)
    ctx.tables["tests"] = written.table
    verified = verify_stage.run(table, verify_stage.VerifyConfig(), ctx)
    got = {(r["instruction_id"], r["model"]): r for r in verified.table.to_pylist()}
    for t in tasks:
        iid = f"{lang}-{t['id']}"
        right = got[iid, "m1"]
        assert right["verified"], (iid, right["admission"], right["error_message"])
        assert right["tests_passed"] == right["tests_total"] >= len(t["cases"])
        for model in ("m2", "m3"):
            wrong = got[iid, model]
            assert not wrong["verified"] and wrong["admission"] != "verified", (iid, model)
            assert wrong["tests_passed"] < wrong["tests_total"], (iid, model)
        assert got[iid, "m1"]["selected"], iid  # the verified answer over the judge's pick
    if not all(uses_python_path(lang, t["kind"]) for t in tasks):
        # a wrong version that does not compile is its own failure, counted apart
        assert verified.stats["compile_errors"] == sum(
            r["error_class"] == "compile_error" for r in got.values())
