"""The ``tests`` and ``verify`` stages on tasks that are not Python functions (``polyglot_world``:
a C++ function, a JavaScript function, a C++ program; scripted authors that write cases as
data; every answer run in its own language in the real sandbox): the evidence rules decide
trust as on the Python path, a right answer is verified, a wrong one is not, and an answer that
does not compile is the answer's failure, counted apart."""

from __future__ import annotations

import json
from typing import ClassVar

import pyarrow as pa
import pytest
from polyglot_world import MODELS, TASKS, Ctx, answers, rate


@pytest.fixture(scope="module")
def world(sandbox_pool):
    from arenaforge.pipeline.sandbox.languages import toolchain

    missing = [lang for lang in ("cpp", "javascript") if not toolchain(lang).available]
    if missing:
        pytest.skip(f"no toolchain for {missing} here (scripts/setup.sh installs them)")
    from arenaforge.stages.verification import tests as tests_stage
    from arenaforge.stages.verification import verify as verify_stage

    table = answers()
    ctx = Ctx(sandbox_pool, {"rate": rate(table)})
    written = tests_stage.run(table, tests_stage.TestGenConfig(authors=list(MODELS)), ctx)
    ctx.tables["tests"] = written.table
    verified = verify_stage.run(table, verify_stage.VerifyConfig(), ctx)
    return {"tests": written.table.to_pylist(), "tests_stats": written.stats,
            "verify": {(r["instruction_id"], r["model"]): r for r in verified.table.to_pylist()},
            "verify_stats": verified.stats, "ctx": ctx}


def _rows(world, iid, **match):
    return [r for r in world["tests"] if r["instruction_id"] == iid
            and all(r[k] == v for k, v in match.items())]


def test_the_authors_cases_are_data_and_the_evidence_decides_them(world):
    for iid in TASKS:
        trusted = _rows(world, iid, survived=True)
        assert trusted, iid
        for row in trusted:  # every trusted test is a case as JSON, never assertion text
            case = json.loads(row["test_code"])
            assert set(case) in ({"args", "expected"}, {"stdin", "stdout"}), row
        assert {r["suite_status"] for r in _rows(world, iid)} == {"decided"}
    # m3's slip (evens([2, 3]) == [3]; its own answer returns [2]) is overruled (rule 3)
    slip = _rows(world, "j1", author="m3", kind="written")
    assert [(r["call"], r["reason"]) for r in slip] == [("evens([2, 3])", "contradicts_majority")]
    assert slip[0]["contradicted"] == ["m1", "m2"]
    # generated inputs become hidden tests by an independent majority of the answers
    agreed = {r["call"]: r["expected"] for r in _rows(world, "j1", kind="augmented")
              if r["trusted_by"] == "majority"}
    assert agreed == {"evens([6, 7, 8])": "[6, 8]", "evens([-4, -3])": "[-4]"}
    # the instructions' own examples are trusted tests, a call and a program's input/output
    example = {r["instruction_id"]: (r["call"], r["expected"], r["split"])
               for r in world["tests"] if r["kind"] == "example"}
    assert example == {"c1": ("add(2, 3)", "5", "visible"),
                       "p1": ("stdin '3\\n1 2 3\\n'", "'6'", "visible")}
    # the program's outputs are compared after the stated normalisation (final newline)
    assert {r["expected"] for r in _rows(world, "p1", call="stdin '2\\n-5 5\\n'",
                                         survived=True)} == {"'0'"}
    assert {r["entry_point"] for r in _rows(world, "p1")} == {"main"}
    assert {r["signature"] for r in _rows(world, "c1") if r["survived"]} == {
        "def add(a: int, b: int) -> int"}


def test_a_compile_error_is_no_evidence_and_is_counted_apart(world):
    stats = world["tests_stats"]
    assert stats["compile_errors"] == 1
    assert stats["language.cpp.function.compile_errors"] == 1
    assert stats["language.javascript.function.instructions"] == 1
    assert stats["language.cpp.program.instructions"] == 1
    # the answer that did not compile passes nothing and is in no consensus
    for row in _rows(world, "c1", survived=True):
        assert "m3" not in row["graded_passed_by"] and "m3" not in row["consensus"]


@pytest.mark.parametrize("iid", list(TASKS))
def test_right_answers_are_verified_and_wrong_ones_are_not(world, iid):
    rows = {m: world["verify"][iid, m] for m in MODELS}
    for model in ("m1", "m2"):
        row = rows[model]
        assert (row["status"], row["admission"], row["verified"]) == (
            "passed", "verified", True), row
        assert row["tests_passed"] == row["tests_total"] > 0
        assert row["program_gate"] == "pass" and row["probe_gate"] == "pass"
    wrong = rows["m3"]
    assert wrong["verified"] is False and wrong["tests_passed"] < wrong["tests_total"]
    assert sum(r["selected"] for r in rows.values()) == 1 and not wrong["selected"]


def test_verify_grades_each_passing_answer_from_the_tests_stages_run(world):
    """In every language, an answer that passed every trusted case in the tests stage is not
    compiled and run again; graded afresh, every answer gets the same verdict."""
    from arenaforge.stages.verification import verify as verify_stage

    reused = {key for key, row in world["verify"].items() if row["reused_tests_run"]}
    assert reused == {(iid, m) for iid in TASKS for m in ("m1", "m2")}
    assert world["verify_stats"]["reused_tests_run"] == len(reused)
    again = verify_stage.run(answers(), verify_stage.VerifyConfig(reuse_tests_runs=False),
                             world["ctx"]).table.to_pylist()
    timing = {"duration_s", "stdout_tail", "stderr_tail", "reused_tests_run"}
    for row in again:
        before = world["verify"][row["instruction_id"], row["model"]]
        assert not row["reused_tests_run"]
        assert {k: v for k, v in row.items() if k not in timing} == {
            k: v for k, v in before.items() if k not in timing}, row["instruction_id"]


def test_a_javascript_answer_whose_demo_states_a_false_output_is_not_verified(world):
    """The stated-output check reads JavaScript demos too: m2's right function, with a demo
    whose comment states what it does not print, passes every test and is not verified."""
    from arenaforge.stages.verification import verify as verify_stage

    table = answers()
    codes = table.column("code").to_pylist()
    demo = "console.log(evens([1, 2, 4]));  // Output: [2]\n"
    rows = table.to_pylist()
    k = next(i for i, r in enumerate(rows) if (r["instruction_id"], r["model"]) == ("j1", "m2"))
    codes[k] = codes[k] + demo
    table = table.set_column(table.column_names.index("code"), "code", pa.array(codes))
    out = {(r["instruction_id"], r["model"]): r for r in verify_stage.run(
        table, verify_stage.VerifyConfig(), world["ctx"]).table.to_pylist()}
    false_demo, plain = out["j1", "m2"], out["j1", "m1"]
    assert false_demo["status"] == "passed" and not false_demo["reused_tests_run"]
    assert (false_demo["admission"], false_demo["stated_outputs"]) == (
        "false_stated_output", "contradicted")
    assert "states [2] but printed" in false_demo["stated_output_mismatch"]
    assert (plain["admission"], plain["stated_outputs"]) == ("verified", "none")


def test_a_wrong_answer_fails_on_its_values_and_a_compile_error_is_its_own_failure(world):
    js, program, broken = (world["verify"][iid, "m3"] for iid in ("j1", "p1", "c1"))
    assert (js["status"], js["error_class"], js["admission"]) == (
        "failed", "assertion", "below_pass_fraction")
    assert "expected [-2], got []" in js["error_message"]
    assert (program["status"], program["error_class"]) == ("failed", "assertion")
    assert program["program_gate"] == "fail"
    # the answer's failure, never the harness's: an error with its own class, no usable code
    assert (broken["status"], broken["error_class"], broken["admission"]) == (
        "error", "compile_error", "no_usable_code")
    assert "error" in broken["stderr_tail"] and "error" in broken["error_message"]
    stats = world["verify_stats"]
    assert stats["compile_errors"] == 1 and stats["compile_errors.m3"] == 1
    assert stats["language.cpp.function.compile_errors"] == 1
    assert stats["language.cpp.function.verified"] == 2
    assert stats["language.javascript.function.verified"] == 2
    assert stats["language.cpp.program.verified"] == 2
    assert stats["binding.program"] == 3
    assert stats["verified.m3"] == 0 and stats["verified.m1"] == 3


def test_python_rows_beside_other_languages_take_the_python_path(world, sandbox_pool):
    """A mixed table: the Python function is tested with Python asserts (author text), the
    others with cases as data, in one run of each stage."""
    from arenaforge.stages.verification import tests as tests_stage
    from arenaforge.stages.verification import verify as verify_stage

    py = {"instruction_id": "py1", "instruction": "Write a Python function double(x) that "
          "returns 2 * x. For example, double(4) returns 8.", "response": "",
          "language": "python", "task_kind": "function"}
    table = answers()
    # three different programs: models that answer with one program are one voice, and one
    # voice's tests beside an example that every answer passes verify nothing (evidence rule 7)
    bodies = ("2 * x", "x + x", "x * 2")
    rows = table.to_pylist() + [dict(py, model=m, code=f"def double(x):\n    return {b}\n")
                                for m, b in zip(MODELS, bodies)]
    table = pa.Table.from_pylist(rows)
    ctx = Ctx(sandbox_pool, {"rate": rate(table)})
    for author in ctx.authors.values():
        author.python = "```python\nassert double(3) == 6\nassert double(0) == 0\n```"
    written = tests_stage.run(table, tests_stage.TestGenConfig(authors=list(MODELS),
                                                               augment=False), ctx)
    python_tests = [r for r in written.table.to_pylist() if r["instruction_id"] == "py1"
                    and r["survived"]]
    assert {r["test_code"] for r in python_tests} >= {"assert double(3) == 6",
                                                      "assert double(4) == 8"}
    ctx.tables["tests"] = written.table
    verified = verify_stage.run(table, verify_stage.VerifyConfig(), ctx).table.to_pylist()
    assert {(r["instruction_id"], r["verified"]) for r in verified
            if r["model"] != "m3"} == {(iid, True) for iid in ("py1", *TASKS)}


class Fixer:
    """A repair author: replies to the feedback on each task with a right answer, fenced in
    the task's language; records the feedback it was shown."""

    FIXES: ClassVar[dict[str, tuple[str, str]]] = {
        "c1": ("cpp", TASKS["c1"][3][0]), "j1": ("javascript", TASKS["j1"][3][1]),
        "p1": ("cpp", TASKS["p1"][3][0])}

    def __init__(self):
        self.shown = {}

    def chat(self, conversations, params):
        from arenaforge.pipeline.backends.base import Completion

        out = []
        for conv in conversations:
            iid = next(i for i, t in TASKS.items() if t[2] == conv[1]["content"])
            self.shown[iid] = (conv[0]["content"], conv[-1]["content"])
            lang, code = self.FIXES[iid]
            out.append([Completion(text=f"Fixed:\n```{lang}\n{code}```\n", finish_reason="stop")])
        return out


def test_repair_fixes_a_wrong_answer_in_its_own_language_without_showing_hidden_tests(world):
    from arenaforge.stages.verification.repair import RepairConfig
    from arenaforge.stages.verification.repair import run as repair_run

    rows = [dict(r, selected=r["model"] == "m3") for r in world["verify"].values()]
    ctx, fixer = Ctx(world["ctx"].pool, world["ctx"].tables), Fixer()
    ctx.backend = lambda model: fixer
    out = {(r["instruction_id"], r["model"]): r for r in repair_run(
        pa.Table.from_pylist(rows), RepairConfig(max_rounds=1), ctx).table.to_pylist()}
    for iid, (lang, code) in Fixer.FIXES.items():
        row = out[iid, "m3"]
        assert (row["repaired"], row["verified"], row["admission"]) == (True, True, "verified")
        assert row["code"] == code and row["response"] == f"```{lang}\n{code.strip()}\n```"
    system, compile_feedback = fixer.shown["c1"]
    assert system.startswith("You are an expert C++ programmer")
    assert "did not compile" in compile_feedback and "expected" in compile_feedback
    _, js_feedback = fixer.shown["j1"]
    assert '{"args": [[-2, 5]], "expected": [-2]}' in js_feedback  # the visible case
    assert "fails 1 hidden checks" in js_feedback and "-4" not in js_feedback
    assert "```javascript code block" in js_feedback
    _, program_feedback = fixer.shown["p1"]  # passes what it was shown, fails hidden checks
    assert "hidden checks" in program_feedback and "1 -1 2 -2" not in program_feedback
    assert "standard input" in program_feedback


def test_duplicate_tasks_are_found_among_tasks_of_one_language_and_kind(world, sandbox_pool):
    """emit's task dedup grades another language's answer in its own harness, and only pairs
    tasks of one language and kind (every pair here is close in text)."""
    import numpy as np
    from arenaforge.stages.output.task_dedup import duplicate_tasks
    from arenaforge.stages.verification.suites import suites_of_rows

    tests = world["tests"] + [dict(r, instruction_id="c2") for r in world["tests"]
                              if r["instruction_id"] == "c1"]
    rows = [{"instruction_id": iid, "code": TASKS[src][3][k], "kcenter_rank": rank,
             "language": TASKS[src][0], "task_kind": TASKS[src][1]}
            for rank, (iid, src, k) in enumerate((("c1", "c1", 0), ("c2", "c1", 1),
                                                  ("j1", "j1", 0), ("p1", "p1", 0)))]
    vectors = {r["instruction_id"]: np.ones(4, np.float32) / 2 for r in rows}
    dup = duplicate_tasks(rows, vectors, suites_of_rows(tests), sandbox_pool, max_distance=0.1)
    assert dup == {"c2": "c1"}


def test_dataset_rows_carry_language_and_task_kind():
    from arenaforge.stages.output.emit import SFT_SCHEMA, build_sft_rows

    base = {"instruction": ["Sum.", "Add."], "model": ["m1", "m2"],
            "response": ["```cpp\nint main() {}\n```", "```python\ndef add(a, b): ...\n```"],
            "status": ["passed", "passed"], "instruction_id": ["p1", "i1"]}
    with_columns = pa.table({**base, "language": ["cpp", None], "task_kind": ["program", None]})
    out = build_sft_rows(with_columns, system_prompt=None, run_id="r", config_hash="h")
    assert out.schema == SFT_SCHEMA
    assert out.column("language").to_pylist() == ["cpp", "python"]
    assert out.column("task_kind").to_pylist() == ["program", "function"]
    older = build_sft_rows(pa.table(base), system_prompt=None, run_id="r", config_hash="h")
    assert older.column("language").to_pylist() == ["python", "python"]


def test_authors_without_cases_leave_parse_errors_and_no_tests(sandbox_pool):
    """No author gives a case: each reply's parse error is kept. The instruction's own example
    (c1 states one) still gives the signature and stays the probe every answer must pass, as
    on the Python path; it alone verifies nothing (``no_tests``). Without an example (j1) the
    parse errors are all there is."""
    from arenaforge.stages.verification import tests as tests_stage
    from arenaforge.stages.verification import verify as verify_stage

    table = answers({"c1": TASKS["c1"], "j1": TASKS["j1"]})
    ctx = Ctx(sandbox_pool, {"rate": rate(table)})
    for author in ctx.authors.values():
        author.reply = lambda conversation: "I would test it with a few numbers."
    written = tests_stage.run(table, tests_stage.TestGenConfig(authors=list(MODELS)), ctx)
    rows = written.table.to_pylist()
    for iid, entry in (("c1", "add"), ("j1", "evens")):
        assert [(r["author"], r["test_idx"], r["reason"], r["parse_error"]) for r in rows
                if r["instruction_id"] == iid and r["kind"] == "written"] == [
            (m, -1, "parse_error", f"no assert calling {entry} and no JSON object found")
            for m in MODELS]
        assert all(r["no_tests"] for r in rows if r["instruction_id"] == iid)
    [example] = [r for r in rows if r["kind"] == "example"]
    assert (example["instruction_id"], example["call"], example["survived"]) == (
        "c1", "add(2, 3)", True)
    assert example["signature"] == "def add(a: int, b: int) -> int"  # names: the instruction's
    assert sorted(example["passed_by"]) == ["m1", "m2"]  # m3's answer does not compile
    assert written.stats["instructions_no_tests"] == 2
    ctx.tables["tests"] = written.table
    verified = verify_stage.run(table, verify_stage.VerifyConfig(), ctx).table.to_pylist()
    assert not any(r["verified"] for r in verified)
    assert {(r["instruction_id"], r["model"]): r["admission"] for r in verified} == {
        ("c1", "m1"): "no_tests", ("c1", "m2"): "no_tests", ("c1", "m3"): "no_usable_code",
        ("j1", "m1"): "no_tests", ("j1", "m2"): "no_tests", ("j1", "m3"): "no_tests"}


def test_an_author_whose_reply_held_no_test_is_asked_once_more(sandbox_pool):
    """m1 first writes its function (what the 0.5B does in a quarter of its replies); asked
    again, saying so, it writes its asserts, and those are its tests. With ``retry_unparsed``
    off, its reply is a parse error as before."""
    from arenaforge.stages.verification import tests as tests_stage

    table = answers({"c1": TASKS["c1"]})
    for retry, expected in ((True, [0, 1, 2]), (False, [-1])):
        ctx = Ctx(sandbox_pool, {"rate": rate(table)})
        author = ctx.authors["m1"]
        scripted = author.reply
        author.reply = lambda conversation, scripted=scripted: (
            scripted(conversation[:-2])  # asked again: the asserts of the first request
            if "That reply has no test" in conversation[-1]["content"] else
            scripted(conversation) if "def generate_inputs" in conversation[-1]["content"]
            else "```python\ndef add(a, b):\n    return a + b\n```")
        cfg = tests_stage.TestGenConfig(authors=list(MODELS), retry_unparsed=retry)
        written = tests_stage.run(table, cfg, ctx)
        own = [r for r in written.table.to_pylist()
               if r["author"] == "m1" and r["kind"] == "written"]
        assert [r["test_idx"] for r in own] == expected
        assert written.stats.get("asked_again", 0) == retry
        assert written.stats.get("asked_again_parsed", 0) == retry
        if retry:
            assert "--- reply asked again ---" in own[0]["raw"] and "def add" in own[0]["raw"]


def test_a_reply_is_read_as_data_and_types_come_from_the_cases():
    from arenaforge.stages.verification import cases as pc

    bad = pc.parse_reply("Test it with 1 and 2.", "function", "add", max_cases=5, max_inputs=5)
    assert bad.parse_error == "no assert calling add and no JSON object found"
    asserted = pc.parse_reply("```python\nassert add(1, 2) == 3\nassert add(1, 2) > 0\n"
                              "add(5, 6)\n```", "function", "add", max_cases=5, max_inputs=5)
    assert asserted.cases == ({"args": [1, 2], "expected": 3},
                              {"unparsed": "assert add(1, 2) > 0"})
    assert asserted.inputs == ([5, 6],)
    with pytest.raises(ValueError, match="literal arguments"):
        pc.check_case("function", asserted.cases[1], None, "cpp")
    no_cases = pc.parse_reply('{"cases": []}', "function", "add", max_cases=5, max_inputs=5)
    assert no_cases.parse_error == "no list of cases in the JSON object"
    # no author gives a signature: the types are inferred from every case's values
    replies = [pc.parse_reply(json.dumps({"cases": [{"args": [[1, 2], "x"], "expected": 1.5}]}),
                              "function", "f", max_cases=5, max_inputs=5)]
    sig = pc.choose_signature("f", replies, "cpp")
    assert pc.signature_text(sig) == "def f(arg1: list[int], arg2: str) -> float"
    assert pc.example_case("Input:\n```\n1 2\n```\nOutput:\n```\n3\n```", "program",
                           "main") == {"stdin": "1 2\n", "stdout": "3\n"}


def test_the_instructions_declaration_fixes_arity_and_names_and_its_example_is_read():
    """A translated HumanEval prompt declares the function and shows its docstring's example
    in comments: the declaration's arity decides (an author's case of another arity is that
    author's fault, not a new signature), and the commented example is the instruction's."""
    from arenaforge.stages.verification import cases as pc

    instruction = ("Complete this C++ function.\n\n```cpp\n// The sum of the squares.\n"
                   "// >>> sum_squares([1, 2])\n// 5\n"
                   "long long sum_squares(std::vector<long long> lst)\n```")
    stated = pc.stated_declaration(instruction, "cpp", "sum_squares")
    assert stated == ("sum_squares", ("lst",))
    example = pc.example_case(instruction, "function", "sum_squares")
    assert example == {"args": [[1, 2]], "expected": 5}
    # a float's example (its assert is a tolerance helper, not one ``==``) is a case too
    assert pc.example_case("```js\n// >>> truncate_number(3.5)\n// 0.5\n"
                           "function truncate_number(number) {\n```", "function",
                           "truncate_number") == {"args": [3.5], "expected": 0.5}
    replies = [pc.parse_reply("```python\nassert sum_squares(1, 4, 9) == 98\n"
                              "assert sum_squares(2, 2, 2) == 12\n```", "function",
                              "sum_squares", max_cases=5, max_inputs=5),
               pc.parse_reply("```python\nassert sum_squares([3]) == 9\n```", "function",
                              "sum_squares", max_cases=5, max_inputs=5)]
    sig = pc.choose_signature("sum_squares", replies, "cpp", stated=stated[1], example=example)
    assert pc.signature_text(sig) == "def sum_squares(lst: list[int]) -> int"
    with pytest.raises(ValueError):
        pc.check_case("function", replies[0].cases[0], sig, "cpp")
    pc.check_case("function", replies[1].cases[0], sig, "cpp")


def test_the_audit_reports_each_language_and_its_compile_errors_apart(world):
    import pandas as pd
    from arenaforge.stages.output.audit_verification import verification_metrics

    verify = pd.DataFrame(list(world["verify"].values()))
    languages = verification_metrics(verify, None, {})["languages"]
    assert set(languages) == {"cpp.function", "javascript.function", "cpp.program"}
    assert languages["cpp.function"]["compile_errors"] == 1
    assert languages["javascript.function"]["compile_errors"] == 0
    for key in languages:
        assert (languages[key]["answers"], languages[key]["tested"]) == (3, 3)
        assert (languages[key]["verified"]["k"], languages[key]["verified"]["n"]) == (2, 3)
    python = verify.assign(language="python", task_kind="function")
    assert "languages" not in verification_metrics(python, None, {})
