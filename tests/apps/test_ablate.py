"""arenaforge ablate: per-rule selection on a hand-made verify table, exact statistics against
their definitions, config errors, dataset resume, and (slow) a tiny real train + eval."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from arenaforge.pipeline.apps.ablate import (
    AblateConfig,
    emit_rule,
    load_ablate_config,
    run_ablation,
)
from arenaforge.pipeline.apps.ablate_select import (
    ABLATION_RULES,
    pick_random,
    plan_selection,
    rule_table,
)
from arenaforge.pipeline.apps.ablate_stats import (
    markdown_table,
    mcnemar_exact,
    summarize,
)
from arenaforge.pipeline.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
RULES = list(ABLATION_RULES)


def _row(iid, model, status, passed, total, winner, score, response=None):
    return {"instruction_id": iid, "instruction": f"Task {iid}", "model": model,
            "response": f"answer of {model} to {iid}" if response is None else response,
            "status": status, "tests_passed": passed, "tests_total": total,
            "judge_winner": winner, "final_score": score}


def _verify_table(rows=None) -> pa.Table:
    rows = rows if rows is not None else [
        # flip: the judge's winner a fails, b passes everything
        _row("i1", "a", "failed", 1, 3, True, 0.9), _row("i1", "b", "passed", 3, 3, False, 0.5),
        _row("i1", "c", "failed", 2, 3, False, 0.3),
        # the winner passes: every execution rule agrees with the judge
        _row("i2", "a", "failed", 0, 2, False, 0.2), _row("i2", "b", "passed", 2, 2, True, 0.8),
        _row("i2", "c", "passed", 2, 2, False, 0.6),
        # nothing passes: b has the higher pass rate, a is the winner
        _row("i3", "a", "failed", 1, 4, True, 0.7), _row("i3", "b", "failed", 3, 4, False, 0.4),
        # no tests at all
        _row("i4", "a", "no_tests", 0, 0, True, 0.6), _row("i4", "b", "no_tests", 0, 0, False, 0.4),
        # the winner's response is empty
        _row("i5", "a", "failed", 0, 1, True, 0.9, response="  "),
        _row("i5", "b", "passed", 1, 1, False, 0.1),
    ]
    return pa.Table.from_pylist(rows)


def _picked(table, plan, rule):
    return {iid: table["model"][i].as_py() for iid, i in plan.picks[rule].items()}


def test_every_rule_gets_the_same_instructions_and_the_exclusions_say_why():
    table = _verify_table()
    plan = plan_selection(table, RULES, seed=0, require_passing=True)
    assert plan.instruction_ids == ["i1", "i2"]
    assert plan.excluded == {"i3": "no_passing_answer", "i4": "no_tests",
                             "i5": "empty_response"}
    sizes = {rule: rule_table(table, plan, rule).num_rows for rule in RULES}
    assert set(sizes.values()) == {2}
    for rule in RULES:
        assert sorted(plan.picks[rule]) == plan.instruction_ids
        chosen = rule_table(table, plan, rule)
        assert chosen["instruction_id"].to_pylist() == plan.instruction_ids


def test_judge_takes_the_rate_winner_verified_flips_a_failing_one_execution_first_by_pass_rate():
    table = _verify_table()
    plan = plan_selection(table, RULES, seed=0, require_passing=False)
    assert plan.excluded == {"i5": "empty_response"}
    assert _picked(table, plan, "judge") == {"i1": "a", "i2": "b", "i3": "a", "i4": "a"}
    # verified: a failing winner is replaced by the best-judged passing answer; with nothing
    # passing the winner stays
    assert _picked(table, plan, "verified") == {"i1": "b", "i2": "b", "i3": "a", "i4": "a"}
    # execution_first: the highest pass rate even when nothing passes (i3: 3/4 beats 1/4)
    assert _picked(table, plan, "execution_first") == {"i1": "b", "i2": "b", "i3": "b", "i4": "a"}
    strict = plan_selection(table, RULES, seed=0, require_passing=False, min_pass_rate=0.8)
    assert _picked(table, strict, "execution_first")["i3"] == "a"  # 0.75 < 0.8: judge decides


def test_random_is_seeded_reproducible_and_independent_of_row_order():
    rows = [_row(f"q{i:03d}", m, "passed", 1, 1, m == "a", 0.5) for i in range(300)
            for m in ("a", "b", "c")]
    table = pa.Table.from_pylist(rows)
    plan = plan_selection(table, RULES, seed=7, require_passing=True)
    again = plan_selection(table, RULES, seed=7, require_passing=True)
    shuffled_rows = list(rows)
    random.Random(1).shuffle(shuffled_rows)
    shuffled = pa.Table.from_pylist(shuffled_rows)
    reordered = plan_selection(shuffled, RULES, seed=7, require_passing=True)
    picks = _picked(table, plan, "random")
    assert picks == _picked(table, again, "random") == _picked(shuffled, reordered, "random")
    counts = {m: list(picks.values()).count(m) for m in "abc"}
    assert all(70 <= c <= 130 for c in counts.values()), counts  # ~uniform, 100 expected
    other = _picked(table, plan_selection(table, RULES, seed=8, require_passing=True), "random")
    assert sum(picks[i] != other[i] for i in picks) > 100  # another seed, other draws
    assert pick_random("q000", ["c", "a", "b"], 7) == ["c", "a", "b"].index(picks["q000"])


def test_max_instructions_is_a_seeded_sample_recorded_as_excluded():
    rows = [_row(f"q{i}", m, "passed", 1, 1, m == "a", 0.5) for i in range(20) for m in "ab"]
    table = pa.Table.from_pylist(rows)
    plan = plan_selection(table, RULES, seed=0, require_passing=True, max_instructions=5)
    assert len(plan.instruction_ids) == 5 and all(len(p) == 5 for p in plan.picks.values())
    assert list(plan.excluded.values()).count("over_max_instructions") == 15
    assert plan == plan_selection(table, RULES, seed=0, require_passing=True, max_instructions=5)


def test_bad_tables_are_errors_naming_the_problem():
    table = _verify_table()
    with pytest.raises(ValueError, match="judge_winner"):
        plan_selection(table.drop_columns(["judge_winner"]), RULES, seed=0,
                       require_passing=True)
    twice = _verify_table([_row("i1", "a", "passed", 1, 1, True, 0.5),
                           _row("i1", "a", "failed", 0, 1, False, 0.1)])
    with pytest.raises(ValueError, match="instruction_id=i1 has two rows for one model"):
        plan_selection(twice, RULES, seed=0, require_passing=True)


# -- statistics against their definitions -------------------------------------------------

@pytest.mark.parametrize("wins,losses", [(0, 0), (3, 0), (5, 1), (2, 2), (0, 7), (9, 4)])
def test_mcnemar_is_the_two_sided_binomial_on_discordant_pairs(wins, losses):
    rule = [True] * wins + [False] * losses + [True, False, False]
    base = [False] * wins + [True] * losses + [True, False, False]
    w, l_, p = mcnemar_exact(rule, base)
    assert (w, l_) == (wins, losses)
    n = wins + losses
    # two-sided exact: the probability of outcomes at most as likely as the observed one
    probs = [math.comb(n, i) / 2 ** n for i in range(n + 1)]
    ref = 1.0 if n == 0 else min(1.0, sum(q for q in probs if q <= probs[wins] * (1 + 1e-7)))
    assert p == pytest.approx(ref)


def test_summary_pairs_every_rule_with_random_on_the_same_problems():
    def result(solved):
        return {"problems": [{"task_id": f"HumanEval/{i}", "correct": int(s)}
                             for i, s in enumerate(solved)]}

    results = {"base": result([0, 0, 0, 0]), "random": result([1, 0, 0, 0]),
               "judge": result([1, 1, 1, 0])}
    datasets = {r: {"rows": 10, "verified": 4, "differs_from_judge": 0} for r in results
                if r != "base"}
    rows = summarize(results, datasets)
    assert [r["rule"] for r in rows] == ["base", "random", "judge"]
    judge = rows[2]
    assert judge["pass@1"] == 0.75 and judge["delta_vs_random"] == pytest.approx(0.5)
    assert (judge["wins_vs_random"], judge["losses_vs_random"]) == (2, 0)
    assert judge["p_value"] == pytest.approx(0.5)  # 2 of 2 discordant: 2 * 0.25
    assert judge["verified_share"] == 0.4 and "p_value" not in rows[0]
    md = markdown_table(rows)
    assert md.count("\n") == 5 and "| judge | 10 | 40% | 0 | 75.0% (3/4) |" in md
    results["judge"] = result([1, 1, 1])
    with pytest.raises(ValueError, match="different problems"):
        summarize(results, datasets)


# -- config and datasets ------------------------------------------------------------------

def test_shipped_config_loads_and_unknown_keys_are_errors(tmp_path):
    cfg = load_ablate_config(ROOT / "configs" / "ablate-tiny.yaml", ["eval.limit=3"])
    assert cfg.eval.limit == 3 and cfg.rules == RULES and cfg.train_recipe.is_file()
    with pytest.raises(ConfigError, match=r"eval\.limt: unknown key"):
        load_ablate_config(ROOT / "configs" / "ablate-tiny.yaml", ["eval.limt=3"])
    with pytest.raises(ConfigError, match="must include 'random'"):
        load_ablate_config(ROOT / "configs" / "ablate-tiny.yaml", ["rules=[judge, verified]"])
    bad = tmp_path / "a.yaml"
    bad.write_text("train_recipe: nowhere.yaml\n")
    with pytest.raises(ConfigError, match="train_recipe: nowhere.yaml not found"):
        load_ablate_config(bad)


def test_rule_datasets_have_the_emit_schema_equal_sizes_and_resume(tmp_path):
    from arenaforge.stages.output.emit import SFT_SCHEMA

    table = _verify_table()
    plan = plan_selection(table, RULES, seed=0, require_passing=True)
    records = {rule: emit_rule(table, plan, rule, tmp_path / rule, run_id="r",
                               system_prompt=None, selection_fp="fp") for rule in RULES}
    assert {r["rows"] for r in records.values()} == {2}
    assert records["verified"]["verified"] == 2 and records["judge"]["verified"] == 1
    assert records["verified"]["differs_from_judge"] == 1  # i1 flipped
    (path,) = (tmp_path / "verified" / "dataset").glob("train-*.parquet")
    written = pq.read_table(path)
    assert written.schema.equals(SFT_SCHEMA)
    assert written["source_model"].to_pylist() == ["b", "b"]
    assert written["messages"][0].as_py()[-1] == {"role": "assistant",
                                                  "content": "answer of b to i1"}
    mtime = path.stat().st_mtime_ns
    again = emit_rule(table, plan, "verified", tmp_path / "verified", run_id="r",
                      system_prompt=None, selection_fp="fp")
    assert again == records["verified"] and path.stat().st_mtime_ns == mtime
    path.write_bytes(b"corrupt")  # a damaged file is rewritten, not trusted
    emit_rule(table, plan, "verified", tmp_path / "verified", run_id="r", system_prompt=None,
              selection_fp="fp")
    assert pq.read_table(path).num_rows == 2


def test_a_run_without_a_complete_verify_stage_is_a_clear_error(tmp_path):
    cfg = AblateConfig(train_recipe=ROOT / "configs" / "sft-tiny.yaml")
    with pytest.raises(FileNotFoundError, match="stage 'verify' is not complete"):
        run_ablation(tmp_path, cfg)


# -- end to end ---------------------------------------------------------------------------

ANSWERS = {
    "Write a Python function add(a, b) that returns the sum.":
        ("def add(a, b):\n    return a + b", "def add(a, b):\n    return a - b"),
    "Write a Python function is_even(n) that says whether n is even.":
        ("def is_even(n):\n    return n % 2 == 0", "def is_even(n):\n    return n % 2"),
    "Write a Python function reverse(s) that reverses a string.":
        ("def reverse(s):\n    return s[::-1]", "def reverse(s):\n    return s"),
}


def _complete_run(run_dir: Path) -> None:
    """A run directory whose verify stage is complete, written through the store."""
    from arenaforge.pipeline.store import RunStore

    rows = []
    for k, (text, (good, bad)) in enumerate(ANSWERS.items()):
        iid = f"{k:064x}"
        # the judge prefers the wrong answer on the first instruction: verified flips it
        for model, code, ok in (("expert-a", good, True), ("expert-b", bad, False)):
            rows.append(_row(iid, model, "passed" if ok else "failed", 2 if ok else 0, 2,
                             (model == "expert-b") == (k == 0), 0.6 if ok else 0.4,
                             response=f"```python\n{code}\n```"))
            rows[-1]["instruction"] = text
    stage = RunStore(run_dir).stage("verify")
    stage.write_shard(0, pa.Table.from_pylist(rows), pa.table({"reason": pa.array([], pa.string())}),
                      {"input_hash": "test"})
    stage.mark_success({"shards": 1, "fingerprint": "hand-made"})


@pytest.mark.slow
@pytest.mark.models
def test_tiny_real_ablation_trains_evaluates_and_resumes(tmp_path):
    from arenaforge.pipeline.sandbox import self_check

    if self_check():
        pytest.skip(f"sandbox isolation unavailable here: {self_check()}")
    run_dir = tmp_path / "run"
    _complete_run(run_dir)
    recipe = tmp_path / "sft.yaml"
    recipe.write_text(f"model: smollm2-135m\nmodels_file: {ROOT / 'configs' / 'models.yaml'}\n"
                      f"datasets: [unused]\noutput_dir: unused\nmax_steps: 1\nmax_length: 96\n"
                      "per_device_train_batch_size: 1\nlearning_rate: 1.0e-4\nlogging_steps: 1\n")
    cfg = AblateConfig(train_recipe=recipe, eval={"limit": 2, "max_new_tokens": 24})
    report = run_ablation(run_dir, cfg)

    rows = {r["rule"]: r for r in report["rows"]}
    assert list(rows) == ["base", *RULES]
    assert {rows[r]["rows"] for r in RULES} == {3} and rows["verified"]["verified_share"] == 1.0
    assert rows["judge"]["verified_share"] == pytest.approx(2 / 3)
    assert all(rows[r]["n"] == 2 and 0 <= rows[r]["ci_low"] <= rows[r]["ci_high"] <= 1
               for r in rows)
    assert all(report["steps"][r]["global_step"] == 1 for r in RULES)
    out = run_dir / "ablation"
    assert json.loads((out / "results.json").read_text())["rows"] == report["rows"]
    assert "| verified | 3 | 100% |" in (out / "table.md").read_text()
    weights = out / "judge" / "model" / "model.safetensors"
    mtime = weights.stat().st_mtime_ns

    again = run_ablation(run_dir, cfg)  # everything done: nothing retrained or re-evaluated
    assert again["rows"] == report["rows"] and weights.stat().st_mtime_ns == mtime
    assert all(s.get("train_skipped", True) and s["eval_skipped"] for s in again["steps"].values())


def test_eval_language_is_one_language_and_its_result_has_pythons_shape(monkeypatch, tmp_path):
    """``eval.language`` picks the language the ablation's models are evaluated in; the
    per-language result is unwrapped into the shape the summary reads (problems, pass@1)."""
    from arenaforge.pipeline.apps import ablate, evaluate
    from pydantic import ValidationError

    assert ablate.EvalSettings(language="C++").language == "cpp"
    assert ablate.EvalSettings().language == "python"
    with pytest.raises(ValidationError, match="one language"):
        ablate.EvalSettings(language="all")
    with pytest.raises(ValidationError, match="unknown eval language 'cobol'"):
        ablate.EvalSettings(language="cobol")

    asked = {}
    problems = [{"task_id": "HumanEval/0", "n": 1, "correct": 1, "statuses": ["passed"]}]

    def fake_evaluate(model, **kwargs):
        asked.update(kwargs)
        return {"model": model, "suite": "humaneval", "languages": {"cpp": {
            "n_problems": 1, "skipped": {}, "pass@1": 1.0, "statuses": {"passed": 1},
            "problems": problems}}}

    monkeypatch.setattr(evaluate, "evaluate", fake_evaluate)
    result, skipped = ablate.eval_model(tmp_path / "model", "fp", tmp_path / "out",
                                        ablate.EvalSettings(language="cpp"), tmp_path / "m.yaml")
    assert asked["languages"] == ["cpp"] and not skipped
    assert result["problems"] == problems and result["pass@1"] == 1.0
    assert result["language"] == "cpp" and "languages" not in result
    # done once: the same model and settings are not evaluated again
    assert ablate.eval_model(tmp_path / "model", "fp", tmp_path / "out",
                             ablate.EvalSettings(language="cpp"), tmp_path / "m.yaml")[1]
