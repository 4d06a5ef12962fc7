"""verify grading an answer from the tests stage's run of it (arenaforge.stages.verification.recorded_runs).

The claim under test: for every answer, verify with ``reuse_tests_runs`` gives the grade that
running the answer again gives, while sending the sandbox only the answers that did not pass
every trusted test. The arena is the load generator's (``scripts/load_replies.py``: five
experts of different skill, tests with slips, generated inputs) through the real tests stage
and the real sandbox; the targeted cases are the ones where a recorded pass must not count.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from arenaforge.pipeline.backends.base import Completion
from arenaforge.stages.common.code_extract import extract_code
from arenaforge.stages.verification.grading import grade
from arenaforge.stages.verification.recorded_runs import RecordedRun, recorded_runs, solution_digest
from arenaforge.stages.verification.suites import Suite
from arenaforge.stages.verification.tests import TESTS_SCHEMA, TestGenConfig
from arenaforge.stages.verification.tests import run as run_tests_stage
from arenaforge.stages.verification.verify import VerifyConfig
from arenaforge.stages.verification.verify import run as verify_run

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from load_replies import Expert, Prompts
from scale_instructions import task_request

SKILLS = {"e1": 0.85, "e2": 0.65, "e3": 0.45}
# columns that say how a grade was obtained, not what it is
PROVENANCE = {"duration_s", "stdout_tail", "stderr_tail", "reused_tests_run"}


class Served:
    """A chat backend that answers as a load-generator expert does."""

    def __init__(self, expert: Expert):
        self.expert = expert

    def chat(self, conversations, params):
        return [[Completion(self.expert.chat(conv, params.seed), "stop")]
                for conv in conversations]


class CountingPool:
    """The real pool, counting the suite jobs sent to it."""

    def __init__(self, pool):
        self.pool, self.jobs = pool, 0

    def run_suites(self, jobs):
        self.jobs += len(jobs)
        return self.pool.run_suites(jobs)


class Ctx:
    def __init__(self, pool, backends=None, tables=None):
        self.pool, self.backends, self.tables, self.seed = pool, backends or {}, tables or {}, 0

    def backend(self, model_id):
        return self.backends[model_id]

    def read(self, stage, columns=None, instruction_ids=None):
        table = self.tables[stage]
        if instruction_ids is not None:
            wanted = set(instruction_ids)
            table = table.filter(pa.array([i in wanted for i in
                                           table.column("instruction_id").to_pylist()]))
        return table.select(columns) if columns else table

    def sandbox(self):
        return self.pool

    def advance(self, rows):
        pass


def _rate(answers: pa.Table) -> pa.Table:
    return pa.table({"instruction_id": answers.column("instruction_id"),
                     "model": answers.column("model"),
                     "final_score": pa.array([0.5] * answers.num_rows, pa.float64()),
                     "winner": pa.array([None] * answers.num_rows, pa.string())})


@pytest.fixture(scope="module")
def arena(sandbox_pool):
    prompts, rng = Prompts(), random.Random(7)
    experts = {name: Expert(name, skill, prompts) for name, skill in SKILLS.items()}
    rows = []
    for k in range(30):
        text = task_request(rng)
        for name, expert in experts.items():
            reply = expert.answer(text, 0)
            rows.append({"instruction_id": f"i{k:02d}", "instruction": text, "model": name,
                         "response": reply, "code": extract_code(reply, "Python")})
    answers = pa.Table.from_pylist(rows)
    cfg = TestGenConfig(authors=["e1", "e2"], tests_per_author=3, inputs_per_author=3)
    served = {name: Served(expert) for name, expert in experts.items()}
    tests = run_tests_stage(answers, cfg, Ctx(sandbox_pool, served))
    tables = {"tests": tests.table, "rate": _rate(answers)}
    graded = {}
    for reuse in (False, True):
        pool = CountingPool(sandbox_pool)
        result = verify_run(answers, VerifyConfig(reuse_tests_runs=reuse), Ctx(pool, tables=tables))
        graded[reuse] = (result, pool.jobs)
    return answers, tests.table, graded


def test_reused_grades_equal_the_grades_of_running_again(arena):
    answers, _, graded = arena
    (again, jobs_again), (reused, jobs_reused) = graded[False], graded[True]
    assert again.table.num_rows == reused.table.num_rows == answers.num_rows
    n_reused = sum(reused.table.column("reused_tests_run").to_pylist())
    assert not any(again.table.column("reused_tests_run").to_pylist())
    passed = again.table.column("status").to_pylist().count("passed")
    # the arena has both kinds: answers graded from the record and answers run again
    assert 0 < n_reused <= passed < answers.num_rows
    assert jobs_reused == jobs_again - n_reused
    assert reused.stats["reused_tests_run"] == n_reused
    columns = [c for c in again.table.column_names if c not in PROVENANCE]
    assert again.table.select(columns).to_pylist() == reused.table.select(columns).to_pylist()
    stats = {k: v for k, v in again.stats.items() if k != "reused_tests_run"}
    assert stats == {k: v for k, v in reused.stats.items() if k != "reused_tests_run"}


def test_every_answer_that_fails_is_run_again(arena):
    _, _, graded = arena
    rows = graded[True][0].table.to_pylist()
    assert all(not r["reused_tests_run"] for r in rows if r["status"] != "passed")
    for r in rows:
        if r["reused_tests_run"]:
            assert r["tests_passed"] == r["tests_total"] > 0 and r["error_message"] is None
            assert r["duration_s"] > 0  # the recorded run's


def test_the_tests_stage_records_each_bound_candidate_once_per_instruction(arena):
    _, tests, _ = arena
    rows = tests.to_pylist()
    runs = recorded_runs(rows)
    for iid in {r["instruction_id"] for r in rows}:
        lists = {tuple(e["model"] for e in r["candidate_runs"])
                 for r in rows if r["instruction_id"] == iid}
        assert len(lists) == 1  # the same list on every row of the instruction
    assert {m for _, m in runs} <= set(SKILLS)
    # what is recorded as passed is only ever trusted tests, and only models that passed them
    for r in rows:
        if r["graded_passed_by"]:
            assert r["survived"] and set(r["graded_passed_by"]) <= set(r["passed_by"])


# -- where a recorded pass must not count -----------------------------------------------------

CONCAT = "Write a function `concat(a, b)` that joins two strings."
EXACT = "def concat(a, b):\n    return a + b\n"
# returns a str subclass: its repr is the exact answer's, but the sandbox's assertions refuse it
SUBCLASS = ("class S(str):\n    pass\n\n\ndef concat(a, b):\n    return S(a + b)\n")
# the same, written another way: two independent programs (one program twice is one vote)
SUBCLASS_2 = ("class T(str):\n    pass\n\n\ndef concat(x, y):\n    return T(x + y)\n")
TESTS = "```python\nassert concat('a', 'b') == 'ab'\nassert concat('', 'x') == 'x'\n```"
INPUTS = "```python\ndef generate_inputs():\n    return [('p', 'q'), ('r', '')]\n```"


class Author:
    def chat(self, conversations, params):
        return [[Completion(INPUTS if "generate_inputs" in conv[-1]["content"] else TESTS,
                            "stop")] for conv in conversations]


def test_a_value_that_only_looks_like_a_literal_is_never_asserted_nor_recorded(sandbox_pool):
    answers = pa.table({"instruction_id": ["c"] * 3, "instruction": [CONCAT] * 3,
                        "model": ["m1", "m2", "m3"], "response": ["..."] * 3,
                        "code": [EXACT, SUBCLASS, SUBCLASS_2]})
    # the author writes none of the answers, so its tests stand on their own (a contestant's
    # tests that only its own answer passes would confirm nothing: evidence rule 7)
    cfg = TestGenConfig(authors=["a0"], tests_per_author=2, inputs_per_author=2)
    rows = run_tests_stage(answers, cfg, Ctx(sandbox_pool, {"a0": Author()})).table.to_pylist()
    augmented = [r for r in rows if r["kind"] == "augmented"]
    assert len(augmented) == 2
    # two of three candidates agree on 'pq', but as a str subclass: they fail the written
    # tests (the sandbox compares exact types), so they do not vote, and no value is asserted
    assert all(not r["survived"] and r["reason"] == "no_majority" for r in augmented)
    assert [json.loads(r["raw"]) for r in augmented] == [
        {"m1": f"value: {v}", "m2": f"value: ~{v}", "m3": f"value: ~{v}"} for v in ("'pq'", "'r'")]
    written = [r for r in rows if r["kind"] == "written"]
    # the subclass fails the sandbox's exact-type comparison: only m1 passed, only m1 recorded
    assert [r["graded_passed_by"] for r in written] == [["m1"], ["m1"]]
    runs = recorded_runs(rows)
    assert set(runs) == {("c", "m1"), ("c", "m2"), ("c", "m3")}
    assert runs["c", "m1"].passed == {r["test_code"] for r in written if r["survived"]}
    assert runs["c", "m2"].passed == frozenset()


SUITE = Suite("i", "f", visible=("assert f(1) == 1",), hidden=("assert f(2) == 2",),
              example="assert f(3) == 3")
PROGRAM = "def f(x):\n    return x\n"


def _record(**changes) -> RecordedRun:
    fields = {"solution_sha256": solution_digest(PROGRAM), "passed": frozenset(SUITE.graded),
              "callable_ok": True, "example_ok": False, "timeout_s": 3.0, "memory_mb": None,
              "duration_s": 0.01}
    return RecordedRun(**{**fields, **changes})


@pytest.mark.parametrize("changes,program,covered", [
    ({}, PROGRAM, True),
    ({}, PROGRAM + "\n", False),  # another program, if only by a byte
    ({"passed": frozenset(SUITE.visible)}, PROGRAM, False),  # a trusted test not passed
    ({"timeout_s": 6.0}, PROGRAM, False),  # a looser limit than verify's 5 s
    ({"memory_mb": 512}, PROGRAM, False),  # another memory limit
    ({"callable_ok": None}, PROGRAM, False),  # a probe a limit may have decided
    ({"example_ok": None}, PROGRAM, False),
])
def test_a_record_covers_only_the_same_program_passing_everything(changes, program, covered):
    assert _record(**changes).covers(SUITE, program, timeout_s=5.0, memory_mb=None) is covered


def test_a_covered_answer_needs_no_sandbox_and_keeps_its_probe_results():
    class NoPool:
        def run_suites(self, jobs):
            raise AssertionError("a covered answer must not reach the sandbox")

    g = grade(NoPool(), [(PROGRAM, SUITE)], timeout_s=5.0, recorded=[_record()])[0]
    assert g.reused and g.verdict.status == "passed" and g.verdict.tests_passed == 2
    assert g.counts == {"visible": (1, 1), "hidden": (1, 1), "augmented": (0, 0)}
    assert g.probe_gate == "example_failed" and g.program_gate == "pass"
    assert g.verdict.duration_s == 0.01


def test_a_model_recorded_twice_for_one_instruction_is_not_trusted():
    entry = {"model": "m1", "solution_sha256": "x", "callable_ok": True, "example_ok": None,
             "timeout_s": 3.0, "memory_mb": None, "duration_s": 0.1}
    rows = [dict.fromkeys(TESTS_SCHEMA.names) | {
        "instruction_id": "i", "test_idx": 0, "survived": True, "test_code": "assert f(1) == 1",
        "graded_passed_by": ["m1"], "candidate_runs": [entry, entry | {"model": "m2"}, entry]}]
    assert set(recorded_runs(rows)) == {("i", "m2")}
