"""tests -> verify -> repair pieces on the embedded Qwen2.5-Coder-0.5B and the real sandbox."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from arenaforge.pipeline.config import load_config
from arenaforge.pipeline.context import RunContext, close_process_resources
from arenaforge.stages.verification.repair import RepairConfig, repair_loop
from arenaforge.stages.verification.suites import Suite
from arenaforge.stages.verification.tests import TestGenConfig, run
from arenaforge.stages.verification.verify import execute

pytestmark = pytest.mark.models
MODEL = "qwen2.5-coder-0.5b"

TASKS = {
    "e1": (("Write a Python function `is_even(n)` that returns True when the integer n is even "
           "and False otherwise."),
           ["def is_even(n):\n    return n % 2 == 0\n",
            "def is_even(n):\n    return not (n & 1)\n",
            "def is_even(n):\n    return n % 2 == 1\n"]),  # the buggy third answer
    "e2": (("Write a Python function `reverse_words(s)` that returns the words of the string s "
           "in reverse order, separated by single spaces."),
           ["def reverse_words(s):\n    return ' '.join(reversed(s.split()))\n",
            "def reverse_words(s):\n    return ' '.join(s.split()[::-1])\n",
            "def reverse_words(s):\n    return s[::-1]\n"]),
}


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    cfg = load_config("configs/smoke.yaml", ["runner.kind=inline", "runner.request_cache=false"])
    yield RunContext(tmp_path_factory.mktemp("run"), cfg, threads=2)
    close_process_resources()


def test_real_author_writes_tests_that_separate_right_from_wrong(ctx):
    rows = [{"instruction_id": iid, "instruction": text, "model": f"m{k}", "code": code}
            for iid, (text, codes) in TASKS.items() for k, code in enumerate(codes)]
    answers = pa.Table.from_pylist(rows)
    # augmentation (a second request per task) is exercised by the smoke run, not here
    result = run(answers, TestGenConfig(authors=[MODEL], max_tokens=200, augment=False), ctx)
    tests = result.table.to_pylist()
    assert {r["author"] for r in tests} == {MODEL}
    assert all(r["raw"] for r in tests)  # the reply is kept on every row
    survivors = {iid: [r["test_code"] for r in tests
                       if r["instruction_id"] == iid and r["survived"]] for iid in TASKS}
    for r in tests:
        print(r["instruction_id"], r["test_idx"], r["survived"], r["reason"], r["passed_by"],
              repr(r["test_code"]))
    # The model writes several asserts per task. The buggy third answer is never in the
    # consensus; the two right answers are, unless the author wrote a test they both fail,
    # which is kept as evidence against them (a test is never dropped because answers fail it)
    # and then blocks every answer.
    assert sum(map(len, survivors.values())) >= 2, tests
    for iid, kept in survivors.items():
        consensus = {m for r in tests if r["instruction_id"] == iid for m in r["consensus"]}
        assert "m2" not in consensus, (iid, tests)
        blocking = [r for r in tests if r["instruction_id"] == iid and r["survived"]
                    and "m0" not in r["passed_by"] and "m1" not in r["passed_by"]]
        assert consensus == (set() if blocking else {"m0", "m1"}), (iid, tests)
        if consensus:
            verdicts = execute(ctx.sandbox(), [(c, kept) for c in TASKS[iid][1]], timeout_s=5)
            assert [v.status for v in verdicts] == ["passed", "passed", "failed"]
    # is_even is easy enough that the 0.5B's tests are right and tell the buggy answer apart
    assert {m for r in tests if r["instruction_id"] == "e1" for m in r["consensus"]} == {
        "m0", "m1"}
    print({k: len(v) for k, v in survivors.items()}, result.stats)


def test_real_author_gets_one_repair_round(ctx):
    text, codes = TASKS["e1"]
    tests = ["assert is_even(2) == True", "assert is_even(3) == False", "assert is_even(0) == True"]
    [v] = execute(ctx.sandbox(), [(codes[2], tests)], timeout_s=5)
    target = {"instruction_id": "e1", "instruction": text, "model": MODEL,
              "response": f"```python\n{codes[2]}```", "code": codes[2], "status": v.status,
              "tests_passed": v.tests_passed, "tests_total": v.tests_total,
              "error_class": v.error_class, "error_message": v.error_message,
              "failed_test": v.failed_test, "stdout_tail": v.stdout_tail,
              "stderr_tail": v.stderr_tail, "duration_s": v.duration_s}
    suite = Suite("e1", "is_even", from_instruction=True, signature="def is_even(n)",
                  arities=(1,), visible=tuple(tests[:1]), hidden=tuple(tests[1:]))
    [out] = repair_loop([target], {"e1": suite}, ctx.backend, ctx.sandbox(),
                        RepairConfig(max_rounds=1, max_tokens=200),
                        {"timeout_s": 5, "memory_mb": None, "fail_fast": True}, seed=0)
    assert out["rounds"] == 1 and len(out["trajectory"]) == 2
    step = out["trajectory"][1]
    assert "assert is_even(2) == True" in step["feedback"] and step["response"]
    assert step["status"] in ("passed", "failed", "error", "timeout", "memory") \
        or step["parse_error"]
    json.dumps(out["trajectory"])  # the trajectory is serialisable as stored
    print("repaired:", out["repaired"], step["status"], step["code"])
