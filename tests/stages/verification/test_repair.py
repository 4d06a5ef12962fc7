"""repair: the debugging-feedback loop with a scripted author and the real sandbox."""

from __future__ import annotations

import json
import re
import types

import pyarrow as pa
import pytest
from arenaforge.stages.verification.entry_points import Binding
from arenaforge.stages.verification.grading import Graded
from arenaforge.stages.verification.repair import RepairConfig, feedback_text, run
from arenaforge.stages.verification.tests import TESTS_SCHEMA
from arenaforge.stages.verification.verify import Verdict, VerifyConfig
from scripted import ScriptedChat

GOOD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"
STILL_WRONG = "def add(a, b):\n    return a * b\n"
TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 5) == 5"]


def fence(code):
    return f"Here is the fix:\n```python\n{code}```\n"


class ScriptedAuthor(ScriptedChat):
    """Round k's reply is ``replies[k - 1]``."""

    def reply(self, conv):
        return self.replies[sum(m["role"] == "user" for m in conv) - 2]


class Ctx:
    def __init__(self, pool, authors, tests):
        self.pool, self.authors, self.tests, self.seed = pool, authors, tests, 0
        self.config = types.SimpleNamespace(verify=VerifyConfig(timeout_s=2.0))

    def backend(self, model_id):
        return self.authors[model_id]

    def read(self, stage, columns=None, instruction_ids=None):
        assert stage == "tests"
        return self.tests

    def sandbox(self):
        return self.pool

    def advance(self, rows):
        pass


@pytest.fixture()
def pool(sandbox_pool):
    return sandbox_pool


def verify_rows():
    """Verify output for three instructions: i1's winner failed, i2's passed, i3 untested."""
    def row(iid, model, code, status, passed, total, selected, **kw):
        failed = status == "failed"
        base = {"instruction_id": iid, "instruction": "Write add(a, b) that adds two ints.",
                "model": model, "response": fence(code) if code else "no code", "code": code,
                "status": status, "tests_passed": passed, "tests_total": total,
                "error_class": "assertion" if failed else None,
                "error_message": ("<tests> line 1, in <module>: assert add(1, 2) == 3\n"
                                  "AssertionError: ") if failed else None,
                "failed_test": TESTS[0] if failed else None, "stdout_tail": "",
                "stderr_tail": "", "duration_s": 0.01, "judge_winner": selected,
                "final_score": 0.5, "selected": selected, "selection_rule": "judge",
                "flipped": False, "verified": status == "passed",
                "admission": {"passed": "verified", "no_tests": "no_tests",
                              "no_entry_point": "no_usable_code"}.get(status,
                                                                       "below_pass_fraction")}
        return {**base, **kw}
    return pa.Table.from_pylist([
        row("i1", "m1", WRONG, "failed", 0, 3, True),
        row("i1", "m2", GOOD, "passed", 3, 3, False),
        row("i2", "m1", GOOD, "passed", 3, 3, True),
        row("i2", "m2", WRONG, "failed", 0, 3, False),  # failing, not selected: left alone
        row("i3", "m2", WRONG, "no_tests", 0, 0, True),
    ])


SPLIT = ["visible", "hidden", "hidden"]  # TESTS[0] is shown to repair, the others never


def make_tests_table(splits=SPLIT):
    rows = [{"instruction_id": iid, "author": "m2", "test_idx": k, "kind": "written",
             "test_code": t, "survived": True, "reason": None, "trusted_by": "candidate_pass",
             "split": split, "entry_point": "add", "entry_source": "instruction",
             "signature": "def add(a, b)", "passed_by": [], "consensus": [], "no_tests": False,
             "raw": "", "parse_error": None}
            for iid in ("i1", "i2") for k, (t, split) in enumerate(zip(TESTS, splits))]
    return pa.Table.from_pylist(rows, schema=TESTS_SCHEMA)


def seen_text(author):
    return "\n".join(m["content"] for conv in author.seen for m in conv)


def test_failing_winner_is_repaired_in_round_two(pool):
    m1 = ScriptedAuthor([fence(STILL_WRONG), fence(GOOD)])
    ctx = Ctx(pool, {"m1": m1, "m2": ScriptedAuthor([])}, make_tests_table())
    table = verify_rows()
    result = run(table, RepairConfig(max_rounds=3), ctx)
    out = result.table
    assert out.column_names[:table.num_columns] == table.column_names
    assert out.num_rows == table.num_rows
    rows = {(r["instruction_id"], r["model"]): r for r in out.to_pylist()}
    fixed = rows["i1", "m1"]
    assert (fixed["status"], fixed["tests_passed"], fixed["repaired"], fixed["repair_rounds"]) == \
        ("passed", 3, True, 2)
    # the repair reply ("Here is the fix: ...") stays in the trajectory; the emitted response is
    # the program alone, as a first answer would give it
    assert fixed["code"] == GOOD and fixed["response"] == "```python\n" + GOOD.strip() + "\n```"
    assert "fix" not in fixed["response"].lower()
    steps = json.loads(fixed["repair_trajectory"])
    assert [s["round"] for s in steps] == [0, 1, 2]
    assert steps[0]["code"] == WRONG and steps[0]["status"] == "failed"
    assert steps[1]["code"] == STILL_WRONG and steps[1]["status"] == "failed"
    assert steps[1]["tests_passed"] == 1  # 2 * 2 == 4 only
    assert steps[2]["status"] == "passed"
    # round 1's feedback: the failing visible test, the error, what the expression returned,
    # and only a count of the hidden failures
    assert "assert add(1, 2) == 3" in steps[1]["feedback"]
    assert "AssertionError" in steps[1]["feedback"]
    assert "add(1, 2)` returned: -1" in steps[1]["feedback"]
    assert "0 of 1 of the tests shown passed" in steps[1]["feedback"]
    assert "fails 2 hidden checks (error class: assertion)" in steps[1]["feedback"]
    # round 2 continues the conversation with the re-graded verdict of round 1 (a * b passes
    # the hidden 2 * 2 == 4 and fails the rest)
    assert "add(1, 2)` returned: 2" in steps[2]["feedback"]
    assert "fails 1 hidden checks" in steps[2]["feedback"]
    # no hidden test's text, call or expected value reached the model
    for hidden in ("add(2, 2)", "add(0, 5)", "== 4", "== 5"):
        assert hidden not in seen_text(m1)
    assert len(m1.seen) == 2 and [m["role"] for m in m1.seen[1]] == \
        ["system", "user", "assistant", "user", "assistant", "user"]
    # never leaked: the passing answer of another model is not in anything the author saw
    assert not any("a + b" in m["content"] for conv in m1.seen for m in conv)
    # untouched rows
    for key in (("i1", "m2"), ("i2", "m1"), ("i2", "m2"), ("i3", "m2")):
        assert (rows[key]["repaired"], rows[key]["repair_rounds"],
                rows[key]["repair_trajectory"]) == (False, 0, None)
        assert rows[key]["status"] == table.filter(
            pa.array([(r["instruction_id"], r["model"]) == key for r in table.to_pylist()])
        ).column("status")[0].as_py()
    s = result.stats
    assert (s["repair_attempted"], s["repaired"], s["repaired.m1"]) == (1, 1, 1)
    assert (s["repaired_within.1"], s["repaired_within.2"], s["repaired_within.3"]) == (0, 1, 1)
    # Refine@k: selected answers with tests are i1/m1 (failed, repaired in round 2), i2/m1
    # (passed); i3 has none
    assert s["refine.tested"] == 2
    assert [s[f"refine.passed_within.{k}"] for k in range(4)] == [1, 1, 2, 2]
    assert (fixed["tests_visible_passed"], fixed["tests_hidden_passed"]) == (1, 2)
    assert (fixed["probe_gate"], fixed["program_gate"]) == ("pass", "pass")


class SpecialCaser(ScriptedAuthor):
    """Rewrites the answer to return exactly what the visible asserts in its feedback expect."""

    def __init__(self):
        super().__init__([])

    def reply(self, conv):
        cases = dict.fromkeys(re.findall(r"assert add\((-?\d+), (-?\d+)\) == (-?\d+)",
                              "\n".join(m["content"] for m in conv if m["role"] == "user")))
        body = "".join(f"    if (a, b) == ({x}, {y}):\n        return {r}\n" for x, y, r in cases)
        return fence(f"def add(a, b):\n{body}    return a - b\n")


def test_an_answer_special_casing_the_visible_asserts_fails_the_hidden_ones(pool):
    cheater = SpecialCaser()
    ctx = Ctx(pool, {"m1": cheater}, make_tests_table())
    result = run(verify_rows().slice(0, 1), RepairConfig(max_rounds=2), ctx)
    [row] = result.table.to_pylist()
    steps = json.loads(row["repair_trajectory"])
    # round 1 passes the shown test and fails both hidden ones: not repaired
    assert steps[1]["code"].count("if (a, b) == (1, 2)") == 1
    assert (steps[1]["status"], steps[1]["tests_visible_passed"],
            steps[1]["tests_hidden_passed"]) == ("failed", 1, 0)
    assert (row["repaired"], row["status"], row["code"]) == (False, "failed", WRONG)
    # round 2 is told it fails hidden checks, and nothing of them
    assert "passes the 1 tests shown to you, but it fails 2 hidden checks" in steps[2]["feedback"]
    for hidden in ("add(2, 2)", "add(0, 5)", "== 4", "== 5"):
        assert hidden not in seen_text(cheater)
    assert result.stats["repaired"] == 0 and result.stats["refine.passed_within.2"] == 0


def test_an_answer_without_the_entry_point_is_asked_for_it(pool):
    unbound = "def first(a):\n    return a\ndef second(b):\n    return b\n"
    table = verify_rows().slice(0, 1)
    table = table.set_column(table.column_names.index("code"), "code", pa.array([unbound]))
    table = table.set_column(table.column_names.index("status"), "status",
                             pa.array(["no_entry_point"]))
    table = table.set_column(table.column_names.index("admission"), "admission",
                             pa.array(["no_usable_code"]))
    m1 = ScriptedAuthor([fence(GOOD)])
    result = run(table, RepairConfig(max_rounds=1), Ctx(pool, {"m1": m1}, make_tests_table()))
    [row] = result.table.to_pylist()
    steps = json.loads(row["repair_trajectory"])
    assert steps[0]["status"] == "no_entry_point" and steps[0]["probe_gate"] == "no_entry_point"
    assert "The tests call `add` (def add(a, b))" in steps[1]["feedback"]
    assert (row["repaired"], row["status"], row["binding_rule"]) == (True, "passed", "instruction")


def test_a_single_trusted_test_is_hidden_and_never_shown(pool):
    m1 = ScriptedAuthor([fence(GOOD)])
    tests = make_tests_table(["hidden"])  # one trusted test per instruction: hidden
    result = run(verify_rows().slice(0, 1), RepairConfig(max_rounds=1), Ctx(pool, {"m1": m1}, tests))
    [row] = result.table.to_pylist()
    feedback = json.loads(row["repair_trajectory"])[1]["feedback"]
    assert "passes the 0 tests shown to you, but it fails 1 hidden checks" in feedback
    assert "add(1, 2)" not in seen_text(m1) and row["repaired"]


def test_unparseable_and_unfixed_replies_keep_the_original(pool):
    m1 = ScriptedAuthor(["I am not sure what is wrong.", fence(STILL_WRONG)])
    ctx = Ctx(pool, {"m1": m1}, make_tests_table())
    result = run(verify_rows().slice(0, 1), RepairConfig(max_rounds=2), ctx)
    [row] = result.table.to_pylist()
    assert (row["status"], row["code"], row["repaired"], row["repair_rounds"]) == \
        ("failed", WRONG, False, 2)
    steps = json.loads(row["repair_trajectory"])
    assert steps[1]["code"] is None and steps[1]["parse_error"].startswith("code does not parse")
    assert "did not contain Python code" in steps[2]["feedback"]
    assert result.stats["repaired"] == 0
    assert result.stats["repair_attempted"] == 1 and result.stats["repaired_within.2"] == 0


def test_zero_rounds_is_a_pass_through(pool):
    table = verify_rows()
    result = run(table, RepairConfig(max_rounds=0), Ctx(pool, {}, make_tests_table()))
    assert result.table.column("status").to_pylist() == table.column("status").to_pylist()
    assert not any(result.table.column("repaired").to_pylist())
    assert result.stats == {"repair_attempted": 0, "repaired": 0, "refine.tested": 2,
                            "refine.passed_within.0": 1}


def _graded(visible, hidden_failed=0, hidden_error=None):
    binding = Binding("add", "add", "instruction")
    counts = {"visible": (visible.tests_passed, visible.tests_total), "hidden": (0, 1),
              "augmented": (0, 0)}
    return Graded(binding, visible, counts, visible, hidden_failed, hidden_error, "pass", "fail")


def test_feedback_text_carries_error_and_output_without_a_solution():
    v = Verdict("error", 1, 3, "runtime", "<solution> line 2, in add: return a / 0\n"
                "ZeroDivisionError: division by zero", "assert add(1, 2) == 3",
                stdout_tail="debug 42\n", stderr_tail="")
    text = feedback_text(_graded(v, 2, "runtime (ZeroDivisionError)"))
    assert "1 of 3 of the tests shown passed" in text and "ZeroDivisionError" in text
    assert "assert add(1, 2) == 3" in text and "debug 42" in text and "(runtime)" in text
    assert "fails 2 hidden checks (error class: runtime (ZeroDivisionError))" in text


def test_a_failing_test_that_contains_a_slot_name_reaches_the_model_unchanged():
    test = 'assert fmt("{output}") == "{error}"'
    v = Verdict("failed", 0, 1, "AssertionError", "boom {tests_total}", test,
                stdout_tail="printed {failed_test} {hidden}")
    text = feedback_text(_graded(v))
    assert test in text and "boom {tests_total}" in text
    assert "printed {failed_test} {hidden}" in text
