"""``scripts/bench_verify.py --mutants`` (``scripts/mutation_bench.py``): suites, grading, scores."""

from __future__ import annotations

import pyarrow as pa
import pytest

from scripts.mutation_bench import SUITES, grade, interval, render, score, suites_by_problem


def _row(iid, author, idx, code, survived=True, **extra):
    return {"instruction_id": iid, "author": author, "test_idx": idx, "test_code": code,
            "survived": survived, **extra}


def test_suites_without_augmentation_columns_are_the_survivors():
    tests = pa.Table.from_pylist([
        _row("p", "b", 0, "assert f(2) == 2"), _row("p", "a", 1, "assert f(1) == 1"),
        _row("p", "a", 0, "assert f(0) == 0", survived=False),
        _row("q", "a", -1, None, survived=False)])
    suites = suites_by_problem(tests)
    assert suites["p"] == {"written": ["assert f(1) == 1", "assert f(2) == 2"],
                           "augmented": ["assert f(1) == 1", "assert f(2) == 2"], "hidden": []}
    assert suites["q"] == {s: [] for s in SUITES}


def test_suites_with_kind_and_split():
    tests = pa.Table.from_pylist([
        _row("p", "a", 0, "w_visible", kind="written", split="visible"),
        _row("p", "a", 1, "w_hidden", kind="written", split="hidden"),
        _row("p", "a", 2, "w_dropped", survived=False, kind="written", split=None),
        _row("p", "aug", 0, "augmented_0", kind="augmented", split="hidden")])
    assert suites_by_problem(tests)["p"] == {
        "written": ["w_visible", "w_hidden"],
        "augmented": ["w_visible", "w_hidden", "augmented_0"],
        "hidden": ["w_hidden", "augmented_0"]}


@pytest.fixture(scope="module")
def pool():
    from pipeline.sandbox import SandboxConfig, SandboxPool, SandboxUnavailable

    try:
        pool = SandboxPool.from_config(SandboxConfig(workers=2))
    except SandboxUnavailable as exc:
        pytest.skip(f"sandbox isolation unavailable here: {exc}")
    yield pool
    pool.close()


def test_grade_decides_every_suite_in_the_real_sandbox(pool):
    right = "def f(x):\n    return x\n"
    loops_on_zero = "def f(x):\n    while x == 0:\n        pass\n    return x\n"
    wrong_on_two = "def f(x):\n    return 3 if x == 2 else x\n"
    suite = {"written": ["assert f(0) == 0", "assert f(1) == 1"],
             "augmented": ["assert f(0) == 0", "assert f(1) == 1", "assert f(2) == 2"],
             "hidden": ["assert f(1) == 1"]}
    empty = {s: [] for s in SUITES}
    got = grade(pool, [right, loops_on_zero, wrong_on_two, right], [suite, suite, suite, empty],
                timeout_s=1.0, memory_mb=None)
    assert got[0] == {"written": True, "augmented": True, "hidden": True}
    # The loop times out on f(0), fail-fast skips the rest, and the hidden suite (without f(0))
    # is run again on its own: it admits the program.
    assert got[1] == {"written": False, "augmented": False, "hidden": True}
    assert got[2] == {"written": True, "augmented": False, "hidden": True}
    assert got[3] == {"written": None, "augmented": None, "hidden": None}


def test_interval_is_exact_clopper_pearson():
    cell = interval(0, 10)
    assert cell["rate"] == 0 and cell["ci_low"] == 0
    assert cell["ci_high"] == pytest.approx(1 - 0.025 ** (1 / 10))  # closed form at k = 0
    assert interval(0, 0)["rate"] is None


def test_score_excludes_equivalent_mutants_and_problems_without_a_suite():
    problems = [{"task_id": "p"}, {"task_id": "q"}]
    canonical = {"p": {"written": True, "augmented": False, "hidden": None},
                 "q": {"written": None, "augmented": None, "hidden": None}}
    both = {"written": True, "augmented": False, "hidden": None}
    rows = [{"task_id": "p", "operator": "arith", "equivalent": False, "admitted": both},
            {"task_id": "p", "operator": "arith", "equivalent": False,
             "admitted": {"written": False, "augmented": False, "hidden": None}},
            {"task_id": "p", "operator": "constant", "equivalent": True}]
    table = score(problems, rows, canonical)
    assert table["written"]["false_admission"] == interval(1, 2)
    assert table["augmented"]["false_admission"]["k"] == 0
    assert table["augmented"]["false_rejection"]["k"] == 1
    assert table["written"]["no_suite"] == 1 and table["hidden"]["problems_with_suite"] == 0
    assert table["written"]["by_operator"]["constant"]["n"] == 0
    result = {"problems": 2, "mutants": 3, "cap_per_problem": 20, "seed": 0,
              "equivalent_excluded": 1, "mutants_scored": 2, "suites": table,
              "tests_per_suite": {"written": 2, "augmented": 3, "hidden": 0}, "wall_s": 1.0,
              "model_part_wall_s": 0.5, "request_cache": {}, "load_avg_start": (0.1, 0, 0),
              "load_avg_end": (0.2, 0, 0), "cpus": 2}
    text = render(result)
    assert "50.0% [" in text and "n/a (no suite)" in text
