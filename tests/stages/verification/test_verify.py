"""verify: per-test execution in the real sandbox, error classes, selection and the run's stats."""

from __future__ import annotations

import types

import pyarrow as pa
import pytest
from arenaforge.pipeline.statuses import ERROR, FAILED, MEMORY, NO_TESTS, PASSED, SKIPPED, TIMEOUT
from arenaforge.stages.verification.tests import TESTS_SCHEMA
from arenaforge.stages.verification.verify import (
    VerifyConfig,
    execute,
    run,
    summarize,
)


@pytest.fixture()
def pool(sandbox_pool):
    return sandbox_pool


ADD = "def add(a, b):\n    return a + b\n"
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4"]


@pytest.mark.parametrize("code,status,error_class,passed", [
    (ADD, PASSED, None, 3),
    ("def add(a, b):\n    return a * b\n", FAILED, "assertion", 1),  # only 2 * 2 == 2 + 2
    ("def add(a, b):\n    return a +\n", ERROR, "syntax", 0),
    ("def add(a, b):\n    return c\n", ERROR, "runtime", 0),
    ("def add(a, b):\n    while True:\n        pass\n", TIMEOUT, "timeout", 0),
    ("def add(a, b):\n    x = bytearray(1 << 34)\n    return a + b\n", MEMORY, "memory", 0),
    (None, ERROR, "no_code", 0),
    (ADD + "if __name__ == '__main__':\n    print(add(int(input()), 2))\n", PASSED, None, 3),
])
def test_execute_statuses(pool, code, status, error_class, passed):
    [v] = execute(pool, [(code, ADD_TESTS)], timeout_s=1.5, memory_mb=256)
    assert (v.status, v.error_class, v.tests_passed, v.tests_total) == \
        (status, error_class, passed, 3)
    if status != PASSED and error_class not in ("syntax", "no_code"):
        assert v.failed_test == ADD_TESTS[0]


def test_fail_fast_costs_one_timeout(pool):
    loop = "def add(a, b):\n    while True:\n        pass\n"
    [fast] = execute(pool, [(loop, ADD_TESTS)], timeout_s=0.5)
    assert fast.per_test == (TIMEOUT, SKIPPED, SKIPPED)
    [full] = execute(pool, [(loop, ADD_TESTS)], timeout_s=0.5, fail_fast=False)
    assert full.per_test == (TIMEOUT,) * 3
    # the skipped tests cost nothing: compared with three timeouts measured on the same
    # machine, not with a fixed 1.2 s that a busy machine overruns
    assert fast.duration_s < full.duration_s


def test_no_tests_and_cheating_answers(pool):
    cheat = ("class Yes:\n    def __eq__(self, other):\n        return True\n"
             "def add(a, b):\n    return Yes()\n")
    exit0 = "import os\ndef add(a, b):\n    os._exit(0)\n"
    v_none, v_cheat, v_exit = execute(pool, [(ADD, []), (cheat, ADD_TESTS), (exit0, ADD_TESTS)],
                                      timeout_s=2)
    assert (v_none.status, v_none.tests_total) == (NO_TESTS, 0)
    assert v_cheat.status == FAILED and v_cheat.tests_passed == 0
    assert v_exit.status == ERROR and v_exit.tests_passed == 0


def test_summarize_takes_the_first_failure():
    ok = types.SimpleNamespace(status="passed", passed=True, duration_s=0.1)
    bad = types.SimpleNamespace(status="failed", passed=False, duration_s=0.2,
                                error_type="assertion", error_message="boom", stdout_tail="o",
                                stderr_tail="e")
    v = summarize(["t0", "t1", "t2"], [ok, bad, ok])
    assert (v.status, v.tests_passed, v.failed_test, v.error_message) == (FAILED, 2, "t1", "boom")
    assert v.pass_rate == pytest.approx(2 / 3) and v.duration_s == pytest.approx(0.4)


# -- the stage ------------------------------------------------------------------------------------

class Ctx:
    """Upstream tables in memory and the real sandbox pool (what verify uses of a context)."""

    def __init__(self, pool, tables, experts=("m1", "m2")):
        self.pool, self.tables, self.seed = pool, tables, 0
        self.config = types.SimpleNamespace(experts=list(experts), verify=VerifyConfig())

    def read(self, stage, columns=None, instruction_ids=None):
        table = self.tables[stage]
        if instruction_ids is not None:
            keep = [i in set(instruction_ids) for i in table.column("instruction_id").to_pylist()]
            table = table.filter(pa.array(keep))
        return table.select(columns) if columns else table

    def sandbox(self):
        return self.pool

    def advance(self, rows):
        pass


def make_tests_table(rows):
    full = [{"instruction_id": iid, "author": author, "test_idx": k, "test_code": code,
             "survived": ok, "reason": None if ok else "contradicts_consensus",
             "entry_point": "add", "signature": "def add(a, b)", "passed_by": [],
             "consensus": [], "no_tests": False, "raw": "", "parse_error": None}
            for iid, author, k, code, ok in rows]
    return pa.Table.from_pylist(full, schema=TESTS_SCHEMA)


WRONG = "def add(a, b):\n    return a - b\n"


@pytest.fixture()
def upstream():
    answers = pa.table({
        "instruction_id": ["i1", "i1", "i2", "i2", "i3", "i3"],
        "instruction": ["add two numbers"] * 6,
        "model": ["m1", "m2"] * 3,
        "response": ["..."] * 6,
        "code": [WRONG, ADD, ADD, WRONG, ADD, WRONG],
    })
    tests = make_tests_table([
        ("i1", "m1", 0, ADD_TESTS[0], True), ("i1", "m2", 0, ADD_TESTS[1], True),
        ("i1", "m2", 1, "assert add(1, 1) == 0", False),  # discarded: never run
        ("i2", "m1", 0, ADD_TESTS[0], True), ("i2", "m1", 1, ADD_TESTS[2], True),
        ("i3", "m1", 0, "assert add(1, 1) == 0", False),  # i3 has no surviving test
    ])
    rate = pa.table({
        "instruction_id": ["i1", "i1", "i2", "i2", "i3", "i3"],
        "model": ["m1", "m2"] * 3,
        "final_score": [0.8, 0.2, 0.6, 0.4, 0.3, 0.7],
        "winner": ["m1", "m1", "m1", "m1", "m2", "m2"],
    })
    return answers, {"tests": tests, "rate": rate}


def _by_key(table):
    return {(r["instruction_id"], r["model"]): r for r in table.to_pylist()}


def test_stage_verified_rule_flips_failing_winner(pool, upstream):
    answers, tables = upstream
    result = run(answers, VerifyConfig(), Ctx(pool, tables))
    rows = _by_key(result.table)
    assert result.table.num_rows == 6 and result.table.column_names[:5] == answers.column_names
    # i1: the judge's winner m1 fails (1 - 2 != 3 ...), m2 passes -> flipped to m2
    w, l = rows["i1", "m1"], rows["i1", "m2"]
    assert (w["status"], w["tests_passed"], w["tests_total"], w["judge_winner"]) == \
        (FAILED, 0, 2, True)
    assert w["error_class"] == "assertion" and w["failed_test"] == ADD_TESTS[0]
    assert "assert add(1, 2) == 3" in w["error_message"]
    assert (l["status"], l["tests_passed"], l["selected"], l["flipped"]) == (PASSED, 2, True, True)
    assert not w["selected"]
    # i2: winner passes and stays selected
    assert rows["i2", "m1"]["selected"] and not rows["i2", "m1"]["flipped"]
    assert rows["i2", "m2"]["status"] == FAILED
    # i3: no surviving tests: status no_tests, judge's pick selected
    assert rows["i3", "m1"]["status"] == rows["i3", "m2"]["status"] == NO_TESTS
    assert rows["i3", "m2"]["selected"] and rows["i3", "m2"]["tests_total"] == 0
    assert {r["selection_rule"] for r in rows.values()} == {"verified"}
    assert rows["i1", "m2"]["final_score"] == 0.2
    s = result.stats
    assert s["passed.m1"] / s["tested.m1"] == 0.5 and s["passed.m2"] / s["tested.m2"] == 0.5
    assert (s["winners_failed"], s["flipped"], s["no_tests"], s["selected"]) == (1, 1, 1, 3)


def test_stage_judge_rule_keeps_failing_winner(pool, upstream):
    answers, tables = upstream
    rows = _by_key(run(answers, VerifyConfig(rule="judge"), Ctx(pool, tables)).table)
    assert rows["i1", "m1"]["selected"] and not rows["i1", "m2"]["selected"]
    assert not any(r["flipped"] for r in rows.values())
