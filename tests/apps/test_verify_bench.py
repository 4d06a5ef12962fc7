"""``arenaforge verify-bench``: the card's arithmetic on hand-made rows, the problems file's
errors, HumanEval's fixed sample in every language, grading on hidden tests, and that the hidden
tests never reach the run (its instruction file, its config, and, slow, every row and request
of a real run)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from arenaforge.pipeline.apps.verify_bench.bench import (
    INSTRUCTIONS,
    bench_config,
    bench_problems,
    problem_id,
)
from arenaforge.pipeline.apps.verify_bench.card import (
    GATE_ADMITTED,
    ProblemResult,
    build_card,
    evidence_table,
    lost_reason,
    summarize,
)
from arenaforge.pipeline.apps.verify_bench.problems import (
    humaneval_problems,
    selection_order,
    write_instructions,
)
from arenaforge.pipeline.apps.verify_bench.problems_file import load_problems_file
from arenaforge.pipeline.cli import app
from arenaforge.stages.common.intervals import proportion
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ROOT / "configs" / "smoke.yaml"
CANARY = "CANARY-5e1f0a"
A, B = "model-a", "model-b"


def _emitted(model, verified, passed, **evidence):
    return {"model": model, "verified": verified, "passed": passed, "gate_admitted": False,
            **evidence}


def _result(task, *, answers, outcomes=None, winner=None, emitted=None, emit_dropped=None,
            group="python/function", dropped=None):
    return ProblemResult(task, group, dropped, answers, outcomes or {}, winner, emitted,
                         emit_dropped or {})


# -- the card's arithmetic -------------------------------------------------------------------

def _results() -> list[ProblemResult]:
    verified = {"admission": "verified", "selected": True}
    return [
        # solved by A, verified and right
        _result("t1", answers={A: True, B: False}, winner=A,
                outcomes={A: verified, B: {"admission": "below_pass_fraction"}},
                emitted=_emitted(A, True, True, tests_passed=4, judge_score=2.6)),
        # verified but wrong: no expert solved it
        _result("t2", answers={A: False, B: False}, winner=B,
                outcomes={B: verified}, emitted=_emitted(B, True, False, tests_passed=1,
                                                         judge_score=1.0)),
        # solved by B, but no tests: the judge gate rejected the selected right answer
        _result("t3", answers={A: False, B: True}, winner=A,
                outcomes={A: {"admission": "no_tests", "selected": False},
                          B: {"admission": "no_tests", "selected": True}},
                emit_dropped={A: "not_selected", B: "gate_rejected"}),
        # solved by both, the answers disagree: nothing selected
        _result("t4", answers={A: True, B: True}, winner=B,
                outcomes={A: {"admission": "answers_disagree"},
                          B: {"admission": "answers_disagree"}}),
        # another language, solved by A, verified right
        _result("t5", answers={A: True, B: False}, winner=A, group="rust/function",
                outcomes={A: verified}, emitted=_emitted(A, True, True, tests_passed=2,
                                                         judge_score=2.0)),
        # dropped before the arena
        _result("t6", answers={}, dropped=("difficulty", "not_a_task")),
    ]


def test_the_card_counts_and_rates_on_hand_made_rows():
    card = summarize(_results())
    assert (card["problems"], card["reached_arena"], card["solvable"]) == (6, 5, 4)
    assert card["dropped_before_arena"] == {"difficulty:not_a_task": 1}
    # verified rows t1, t2, t5: two right
    assert card["verified_precision"] == proportion(2, 3)
    # solvable t1, t3, t4, t5: verified rows on t1 and t5
    assert card["yield_of_solvable"] == proportion(2, 4)
    assert card["yield_of_solvable_right"] == proportion(2, 4)
    assert card["verified_rows_unsolvable"] == 1
    # winners: t1 A right, t2 B wrong, t3 A wrong, t4 B right, t5 A right
    assert card["judge_winner_precision"] == proportion(3, 5)
    assert card["lost_by_admission"] == {"answers_disagree": 1, "gate_rejected": 1}
    assert card["experts"] == {A: proportion(3, 5), B: proportion(2, 5)}


def test_the_card_is_split_by_language_and_task_kind():
    card = build_card(_results(), {"config": "x.yaml"})
    assert card["config"] == "x.yaml" and card["schema_version"] == 1
    assert set(card["by_language"]) == {"python/function", "rust/function"}
    rust = card["by_language"]["rust/function"]
    assert rust["verified_precision"] == proportion(1, 1) and rust["problems"] == 1
    python = card["by_language"]["python/function"]
    assert python["verified_precision"] == proportion(1, 2)
    assert python["yield_of_solvable"] == proportion(1, 3)


@pytest.mark.parametrize("result, expected", [
    # the selected right answer: emit's reason
    (_result("x", answers={A: True}, outcomes={A: {"admission": "below_pass_fraction",
                                                   "selected": True}},
             emit_dropped={A: "below_pass_fraction"}), "below_pass_fraction"),
    # emitted by the judge gate, unverified
    (_result("x", answers={A: True}, outcomes={A: {"admission": "no_tests", "selected": True}},
             emitted=_emitted(A, False, True)), GATE_ADMITTED),
    # the right answer verified, another (wrong, unverified) one chosen
    (_result("x", answers={A: True, B: False},
             outcomes={A: {"admission": "verified", "selected": False},
                       B: {"admission": "no_tests", "selected": True}},
             emit_dropped={B: "gate_rejected", A: "not_selected"}), "not_selected"),
    # of two right answers, the one that went furthest
    (_result("x", answers={A: True, B: True},
             outcomes={A: {"admission": "no_tests"}, B: {"admission": "example_failed"}}),
     "example_failed"),
    (_result("x", answers={A: True}, outcomes={A: {"admission": "contradictory_tests"}}),
     "contradictory_tests"),
])
def test_lost_reason_names_the_step_that_stopped_the_right_answer(result, expected):
    assert lost_reason(result) == expected


def test_evidence_thresholds_trade_precision_for_yield():
    rows = {(e["evidence"], e["at_least"]): e for e in evidence_table(_results())}
    assert rows[("judge_score", 1.5)]["precision"] == proportion(2, 2)  # not t2 (1.0)
    assert rows[("tests_passed", 2)]["precision"] == proportion(2, 2)
    assert rows[("tests_passed", 2)]["yield_of_solvable"] == proportion(2, 4)
    assert rows[("tests_passed", 4)]["yield_of_solvable"] == proportion(1, 4)
    assert rows[("tests_passed", 8)]["rows"] == 0
    assert rows[("judge_score", 2.5)]["precision"] == proportion(1, 1)
    assert not any(e["evidence"] == "other_authors" for e in rows.values())  # no row has it


# -- problems ---------------------------------------------------------------------------------

GOOD = {"task_id": "add", "prompt": "def add(a: int, b: int) -> int:\n    \"\"\"Sum.\"\"\"\n",
        "entry_point": "add", "tests": "assert add(1, 2) == 3"}


@pytest.mark.parametrize("line, expected", [
    ('{"task_id": "x", "prompt": "def f(x):', "not valid JSON"),
    (json.dumps({**GOOD, "task_id": "b", "tests": ""}), "no hidden tests (field 'tests')"),
    (json.dumps({**GOOD, "task_id": "b", "tests": []}), "no hidden tests (field 'tests')"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "tests"} | {"task_id": "b"}),
     "no hidden tests"),
    (json.dumps({**GOOD, "task_id": "b", "language": "klingon"}),
     "field 'language': unknown language 'klingon'"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "entry_point"} | {"task_id": "b"}),
     "no entry point (field 'entry_point'"),
    (json.dumps({**GOOD, "task_id": "b", "language": "cpp"}),
     "a cpp function takes a list of cases"),
    (json.dumps({**GOOD, "task_id": "b", "tests": "assert add(1, 2 == 3"}), "not valid Python"),
    (json.dumps({**GOOD, "task_id": "b", "tests": [{"args": [1]}]}), "case 1: missing"),
    (json.dumps({**GOOD, "task_id": "b", "tests": [{"args": [1], "expected": 1}]}),
     "every case must pass 2 argument(s)"),
    (json.dumps({**GOOD, "task_id": "b", "hidden": 1}), "unknown field(s) ['hidden']"),
    (json.dumps(GOOD), "task_id 'add' in python repeats row 0"),
    ("[1, 2]", "expected a JSON object, got list"),
])
def test_a_bad_problems_file_names_the_file_and_row(tmp_path, line, expected):
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + line + "\n")
    with pytest.raises(ValueError) as info:
        load_problems_file(path)
    assert str(info.value).startswith(f"{path}: row 1 (line 3): ")
    assert expected in str(info.value)


def test_a_bad_problems_file_fails_the_command_with_exit_2_before_any_model(tmp_path):
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps({**GOOD, "language": "cobol"}) + "\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["verify-bench", str(SMOKE), "--problems-file", str(path),
                                      "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"{path}: row 0 (line 1): field 'language': unknown language 'cobol'" in " ".join(
        result.output.split())
    assert not out.exists()
    result = CliRunner().invoke(app, ["verify-bench", str(SMOKE), "--language", "cobol",
                                      "--out", str(out)])
    assert result.exit_code == 2 and "unknown eval language 'cobol'" in result.output
    assert not out.exists()


def test_problems_of_other_languages_and_programs_are_read_as_cases(tmp_path):
    path = tmp_path / "problems.jsonl"
    rows = [{"language": "Go", "prompt": "// Sum.\nfunc add(a int, b int) int",
             "entry_point": "add", "tests": [{"args": [1, 2], "expected": 3}]},
            {"language": "c", "task_kind": "program", "prompt": "Print the sum of two ints.",
             "tests": [{"stdin": "1 2\n", "stdout": "3\n"}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    go, c = load_problems_file(path)
    assert (go.task_id, go.language, go.hidden.kind) == ("row-0", "go", "calls")
    assert go.instruction.startswith("Complete this Go function so that it does what its "
                                     "comment says.\n\n```go\n// Sum.")
    assert (c.group, c.hidden.kind) == ("c/program", "io")
    assert "standard input" in c.instruction and "Print the sum" in c.instruction


def test_the_humaneval_sample_is_fixed_and_grows_by_adding():
    first, _ = humaneval_problems(10, ["python"], seed=0)
    again, _ = humaneval_problems(10, ["python"], seed=0)
    smaller, _ = humaneval_problems(4, ["python"], seed=0)
    other, _ = humaneval_problems(10, ["python"], seed=1)
    assert [p.task_id for p in first] == [p.task_id for p in again]
    assert {p.task_id for p in smaller} < {p.task_id for p in first}
    assert {p.task_id for p in other} != {p.task_id for p in first}
    assert first[0].instruction.startswith(
        "Complete this Python function so that it does what its docstring says.\n\n```python\n")
    assert selection_order(["b", "a"], 3) == selection_order(["a", "b"], 3)


@pytest.mark.parametrize("language", ["c", "java", "rust"])
def test_a_translated_language_gives_n_problems_and_counts_what_it_skipped(language):
    n = 25
    problems, skipped = humaneval_problems(n, [language], seed=0)
    assert len(problems) == n and {p.language for p in problems} == {language}
    info = skipped[language]
    assert sum(info["skipped"].values()) == len(info["skipped_problems"])
    assert not {p.task_id for p in problems} & set(info["skipped_problems"])
    # the skipped ones come from the same fixed order, before the n-th kept problem
    order = selection_order([f"HumanEval/{i}" for i in range(164)], 0)
    walked = order[:n + len(info["skipped_problems"])]
    assert set(walked) == {p.task_id for p in problems} | set(info["skipped_problems"])
    if language == "c":  # C has no returned list: some problems never translate
        assert info["skipped"]


def test_hidden_tests_grade_answers_in_the_sandbox(tmp_path):
    from arenaforge.pipeline.apps.eval_core import load_problems
    from arenaforge.pipeline.apps.verify_bench.grading import NO_ANSWER, grade_answers
    from arenaforge.pipeline.sandbox import SandboxPool
    from arenaforge.pipeline.sandbox.config import SandboxConfig

    (python,), _ = humaneval_problems(1, ["python"], seed=0)
    canonical = {p["task_id"]: p for p in load_problems()}[python.task_id]
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps({"language": "javascript", "prompt": "// Sum.\nfunction add(a, b)",
                                "entry_point": "add",
                                "tests": [{"args": [1, 2], "expected": 3}]}) + "\n")
    (js,) = load_problems_file(path)
    right = f"```python\n{canonical['prompt']}{canonical['canonical_solution']}```"
    items = [(python, right), (python, "```python\ndef nothing():\n    pass\n```"),
             (python, ""), (js, "```javascript\nfunction add(a, b) { return a + b; }\n```"),
             (js, "```javascript\nfunction add(a, b) { return a - b; }\n```")]
    pool = SandboxPool.from_config(SandboxConfig())
    try:
        graded = grade_answers(pool, items, timeout_s=10)
    finally:
        pool.close()
    assert [ok for ok, _ in graded] == [True, False, False, True, False]
    assert graded[2][1] == NO_ANSWER and graded[4][1] == "wrong_answer"


# -- the hidden tests never reach the run -----------------------------------------------------

def _canary_problems(path: Path) -> Path:
    rows = [{"task_id": "add", "prompt": "def add(a: int, b: int) -> int:\n    \"\"\"Return the "
             "sum of a and b.\n    >>> add(2, 3)\n    5\n    \"\"\"\n", "entry_point": "add",
             "tests": f"def check(candidate):\n    assert candidate(1, 2) == 3, '{CANARY}'\n"
                      "    assert candidate(-4, 4) == 0\n"},
            {"task_id": "rev", "prompt": "def reverse_words(s: str) -> str:\n    \"\"\"Return "
             "the words of s in reverse order, separated by one space.\n    >>> "
             "reverse_words('a b c')\n    'c b a'\n    \"\"\"\n", "entry_point": "reverse_words",
             "tests": [{"args": [f"{CANARY} big world"], "expected": f"world big {CANARY}"}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_instruction_file_and_run_config_hold_no_hidden_test(tmp_path):
    from arenaforge.pipeline.config import dump_config

    source = _canary_problems(tmp_path / "problems.jsonl")
    out = tmp_path / "out"
    problems, _, _ = bench_problems(None, None, source, 0)
    write_instructions(problems, out / INSTRUCTIONS)
    cfg, applied = bench_config(SMOKE, out, ["runner.kind=inline"])
    written = (out / INSTRUCTIONS).read_text()
    assert [json.loads(line)["instruction"] for line in written.splitlines()] == [
        p.instruction for p in problems]
    assert "reverse_words" in written and CANARY not in written
    assert CANARY not in dump_config(cfg) and CANARY not in " ".join(applied)
    assert cfg.mine.source == (out / INSTRUCTIONS).resolve()
    assert not cfg.decontaminate.humaneval and cfg.compress.min_distance is None
    # difficulty still asks smoke.yaml's judge, and keeps every problem
    assert cfg.difficulty.min_task_prob == 0.0 and cfg.difficulty.min_difficulty == 1
    # HumanEval: no line of any hidden check reaches the instructions
    from arenaforge.pipeline.apps.eval_core import load_problems

    humaneval, _, _ = bench_problems(20, ["python", "go"], None, 0)
    write_instructions(humaneval, out / INSTRUCTIONS)
    written = (out / INSTRUCTIONS).read_text()
    tests = {p["task_id"]: p["test"] for p in load_problems()}
    for p in humaneval:
        asserts = [ln.strip() for ln in tests[p.task_id].splitlines()
                   if ln.strip().startswith("assert candidate(")]
        assert asserts and not any(a in written for a in asserts), p.task_id
    assert len({problem_id(p) for p in humaneval}) == len(humaneval) == 40


def _texts_holding(root: Path, needle: str) -> list[str]:
    """Every file under ``root`` whose content (Parquet decoded, the rest as bytes) holds
    ``needle``."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if path.suffix == ".parquet":
            text = json.dumps(pq.read_table(path).to_pylist(), default=str, ensure_ascii=False)
            if needle in text:
                found.append(str(path.relative_to(root)))
        elif needle.encode() in path.read_bytes():
            found.append(str(path.relative_to(root)))
    return found


@pytest.mark.slow
@pytest.mark.models
def test_a_real_run_never_sees_the_hidden_tests(tmp_path, monkeypatch):
    """configs/smoke.yaml on two problems whose hidden tests hold a canary: no request any
    model was sent (every prompt, conversation and logprob reading passes through the request
    cache's key), no stage's rows, no cached completion and no artifact holds it; the grading
    ran every answer on them."""
    from arenaforge.pipeline.backends import request_cache

    sent: list[str] = []
    key = request_cache.request_key

    def spy(model_id, weights_id, method, request, params):
        sent.append(json.dumps([model_id, method, request], ensure_ascii=False))
        return key(model_id, weights_id, method, request, params)

    monkeypatch.setattr(request_cache, "request_key", spy)  # the inline runner: this process
    source = _canary_problems(tmp_path / "problems.jsonl")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [
        "verify-bench", str(SMOKE), "--problems-file", str(source), "--out", str(out),
        "--quiet", "--set", "runner.kind=inline", "--set", "runner.request_cache_store=files",
        "--set", "answer.max_tokens=160", "--set", "tests.max_tokens=160"])
    assert result.exit_code == 0, result.output
    run_dir = out / "run"
    # answers, judges, test authors, difficulty and repair were all asked, never with the canary
    assert len(sent) > 10 and any("reverse_words" in r for r in sent)
    assert not [r for r in sent if CANARY in r]
    assert (run_dir / "cache" / "requests").is_dir()
    assert _texts_holding(run_dir, "reverse_words")  # the search sees what the run was shown
    assert _texts_holding(run_dir, CANARY) == []
    assert _texts_holding(out, CANARY) == []
    card = json.loads((out / "card.json").read_text())
    assert card["problems"] == 2 and card["reached_arena"] == 2
    assert set(card["experts"]) == {"qwen2.5-coder-0.5b", "smollm2-135m"}
    assert sum(p["n"] for p in card["experts"].values()) == 4
    assert (out / "card.md").read_text().startswith("# verify-bench: ")
