"""``scripts/bench_verify.py --mutants`` (``scripts/mutation_bench.py``): suites, grading, scores."""

from __future__ import annotations

import pyarrow as pa
import pytest
from arenaforge.stages.common.intervals import proportion

from scripts.mutation_bench import admissions, condition_suites, paired, render, score


def _row(iid, author, idx, code, survived=True, **extra):
    return {"instruction_id": iid, "author": author, "test_idx": idx, "test_code": code,
            "survived": survived, "entry_point": "f", "kind": "written", **extra}


def test_condition_suites_take_the_stage_rows_as_verify_does():
    plain = pa.Table.from_pylist([
        _row("p", "a", 0, "assert f(1) == 1", split="visible"),
        _row("p", "b", 0, "assert f(2) == 2", split="hidden"),
        _row("p", "a", 1, "assert f(0) == 0", survived=False)])
    augmented = pa.Table.from_pylist([
        _row("p", "a", 0, "assert f(1) == 1", split="visible"),
        _row("p", "b", 0, "assert f(2) == 2", split="hidden"),
        _row("p", "a", 2, "assert f(3) == 3", kind="augmented", split="hidden")])
    suites = condition_suites(plain, augmented)
    assert suites["asserts"]["p"].graded == ("assert f(1) == 1", "assert f(2) == 2")
    assert suites["asserts+augmented"]["p"].graded == (
        "assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3")
    assert suites["hidden+augmented"]["p"].graded == ("assert f(2) == 2", "assert f(3) == 3")


@pytest.fixture()
def pool(sandbox_pool):
    return sandbox_pool


def test_admissions_bind_and_grade_in_the_real_sandbox(pool):
    from arenaforge.stages.verification.suites import Suite

    suite = Suite("p", "f", arities=(1,), visible=("assert f(1) == 1",),
                  hidden=("assert f(0) == 0", "assert f(2) == 2"))
    right = "def f(x):\n    return x\n"
    renamed = "def identity(x):\n    return x\n"  # bound to f by its signature
    loops_on_zero = "def f(x):\n    while x == 0:\n        pass\n    return x\n"
    wrong_on_two = "def f(x):\n    return 3 if x == 2 else x\n"
    got = admissions(pool, [(right, suite), (renamed, suite), (loops_on_zero, suite),
                            (wrong_on_two, suite), (right, None),
                            (right, Suite("q", "f"))], timeout_s=1.0, memory_mb=None)
    assert [ok for ok, _ in got] == [True, True, False, False, None, None]
    assert got[1][1].binding.rule == "signature"
    assert got[2][1].verdict.status == "timeout"


def test_paired_counts_discordant_mutants():
    rows = [{"admitted": {"a": True, "b": False}}, {"admitted": {"a": True, "b": False}},
            {"admitted": {"a": True, "b": True}}, {"admitted": {"a": None, "b": True}}]
    pair = paired(rows, "a", "b")
    assert (pair["mutants"], pair["admitted_by_first_only"], pair["admitted_by_second_only"]) \
        == (3, 2, 0)
    assert pair["p_value"] == pytest.approx(0.5)  # two-sided: 2 * 0.5 ** 2


def test_score_excludes_equivalent_mutants_and_problems_without_a_suite():
    problems = [{"task_id": "p"}, {"task_id": "q"}]
    canonical = {"p": {"asserts": True, "asserts+augmented": False, "hidden+augmented": None},
                 "q": {"asserts": None, "asserts+augmented": None, "hidden+augmented": None}}
    both = {"asserts": True, "asserts+augmented": False, "hidden+augmented": None}
    rows = [{"task_id": "p", "operator": "arith", "equivalent": False, "admitted": both},
            {"task_id": "p", "operator": "arith", "equivalent": False,
             "admitted": {"asserts": False, "asserts+augmented": False,
                          "hidden+augmented": None}},
            {"task_id": "p", "operator": "constant", "equivalent": True}]
    table = score(problems, rows, canonical)
    assert table["asserts"]["false_admission"] == proportion(1, 2)
    assert table["asserts+augmented"]["false_admission"]["k"] == 0
    assert table["asserts+augmented"]["false_rejection"]["k"] == 1
    assert table["asserts"]["no_suite"] == 1
    assert table["hidden+augmented"]["problems_with_suite"] == 0
    assert table["asserts"]["by_operator"]["constant"]["n"] == 0
    result = {"problems": 2, "mutants": 3, "cap_per_problem": 20, "seed": 0,
              "equivalent_excluded": 1, "mutants_scored": 2, "suites": table,
              "tests_per_suite": {"asserts": 2, "asserts+augmented": 3, "hidden+augmented": 0},
              "paired": [paired(rows[:2], "asserts", "asserts+augmented")], "wall_s": 1.0,
              "model_part_wall_s": 0.5, "request_cache": {}, "load_avg_start": (0.1, 0, 0),
              "load_avg_end": (0.2, 0, 0), "cpus": 2}
    text = render(result)
    assert "50.0% [" in text and "n/a (no suite)" in text


@pytest.mark.slow
@pytest.mark.models
@pytest.mark.timeout(1200)
def test_mutants_mode_end_to_end_on_one_problem(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    out = tmp_path / "mutants.json"
    proc = subprocess.run(
        [sys.executable, str(root / "scripts" / "bench_verify.py"), "--mutants", "--problems", "1",
         "--cap", "4", "--workdir", str(tmp_path / "work"), "--json", str(out)],
        check=False, cwd=root, capture_output=True, text=True, timeout=1150)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["problems"] == 1 and result["canonical_pass_official"] == 1
    assert result["mutants"] == 4
    assert result["mutants_scored"] + result["equivalent_excluded"] == 4
    assert set(result["suites"]) == {"asserts", "asserts+augmented", "hidden+augmented"}
    assert "false admission" in proc.stdout
    assert (tmp_path / "work" / "run" / "tests_augmented.parquet").exists()
