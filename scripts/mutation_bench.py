"""Mutation score of the generated tests: the wrong programs each trusted suite lets through.

``python scripts/bench_verify.py --mutants`` runs this. For the first ``--problems`` HumanEval
problems:

1. the run's experts answer the HumanEval prompt (the chat prompt of ``arenaforge eval``) and
   write tests for it through the pipeline's own ``answer`` and ``tests`` stages (their ``run``
   functions with the sections of ``--config``; the candidates the tests are cross-checked on
   are the experts' answers, as in a run). ``tests`` runs twice: with ``augment: false`` and
   with ``augment: true`` (input generators, outputs trusted where the candidates agree); the
   written tests are the same requests both times. Model requests go to the request cache of
   ``<workdir>/run``, so a rerun asks no model;
2. the canonical solution's mutants (``scripts/ast_mutants.py``: seeded, at most ``--cap`` per
   problem) run on HumanEval's official tests; a mutant that passes them is counted as
   equivalent and left out;
3. the canonical solution and every other mutant are graded on each suite as verify grades an
   answer (``arenaforge.stages.verification.suites.trusted_suites`` and ``arenaforge.stages.verification.grading.grade``: bound to the entry
   point, fail-fast, verify's limits):

   - ``asserts``: the written asserts that survive cross-checking without augmentation (the
     ``augment: false`` run; visible and hidden);
   - ``asserts+augmented``: every trusted test of the ``augment: true`` run (visible, hidden,
     augmented: what certifies an original answer);
   - ``hidden+augmented``: its hidden and augmented tests only (what certifies an answer after
     repair, which has seen the visible ones).

A suite *admits* a program when the program, bound to the tests' entry point, passes all of
its tests. False admission is the
share of non-equivalent mutants a suite admits, false rejection the share of canonical
solutions it rejects, each over the problems where the suite has at least one test (a problem
without one is left to the judge gate in a run; counted as ``no_suite``), with exact
Clopper-Pearson intervals (``arenaforge.stages.common.intervals``). Mutants of one problem are not
independent, so the intervals are narrower than a per-problem resampling would give.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from arenaforge.pipeline.statuses import PASSED
from arenaforge.stages.common.intervals import mcnemar_p, proportion

from scripts.ast_mutants import OPERATORS, mutants

SUITES = ("asserts", "asserts+augmented", "hidden+augmented")
# HumanEval's check() runs all its asserts in one program (tests/stages/test_humaneval_verify).
OFFICIAL_TIMEOUT_S = 10.0


def instruction(problem: dict[str, Any]) -> str:
    """What the experts are asked: ``arenaforge eval``'s chat prompt for the problem."""
    from arenaforge.pipeline.apps.evaluate import CHAT_TEMPLATE
    from arenaforge.pipeline.prompts import fill, load_template

    return fill(load_template(CHAT_TEMPLATE), prompt=problem["prompt"])


def _run_stage(name: str, table: pa.Table, stage_cfg: Any, ctx: Any, out: Path) -> dict:
    from arenaforge.stages import get_stage

    start = time.perf_counter()
    result = get_stage(name).run(table, stage_cfg, ctx)
    pq.write_table(result.table, out)
    return {"table": result.table, "stats": dict(result.stats),
            "seconds": round(time.perf_counter() - start, 1)}


def generate_tests(problems: list[dict], cfg: Any, run_dir: Path) -> dict[str, Any]:
    """The experts' answers, then the ``tests`` stage without and with augmentation."""
    from arenaforge.pipeline.context import RunContext

    ctx = RunContext(run_dir, cfg)
    table = pa.Table.from_pylist([{"instruction_id": p["task_id"], "instruction": instruction(p),
                                   "language": "Python"} for p in problems])
    out = {"answer": _run_stage("answer", table, cfg.answer, ctx, run_dir / "answer.parquet")}
    answers = out["answer"]["table"]
    for key, augment in (("tests", False), ("tests_augmented", True)):
        out[key] = _run_stage("tests", answers, cfg.tests.model_copy(update={"augment": augment}),
                              ctx, run_dir / f"{key}.parquet")
    out["model_seconds"] = round(ctx.model_seconds, 1)
    out["cache"] = dict(ctx.cache)
    return out


def condition_suites(plain: pa.Table, augmented: pa.Table) -> dict[str, dict[str, Any]]:
    """Per suite of ``SUITES``, one ``arenaforge.stages.verification.suites.Suite`` per instruction."""
    from arenaforge.stages.verification.suites import trusted_suites

    with_aug = trusted_suites(augmented)
    return {"asserts": trusted_suites(plain), "asserts+augmented": with_aug,
            "hidden+augmented": {iid: dataclasses.replace(s, visible=())
                                 for iid, s in with_aug.items()}}


def admissions(pool: Any, items: list[tuple[str, Any]], timeout_s: float,
               memory_mb: int | None) -> list[tuple[bool | None, Any]]:
    """Per ``(program, suite)``: whether the suite admits the program (``None``: no suite or
    an empty one) and verify's ``Graded`` for it."""
    from arenaforge.stages.verification.grading import grade

    grades = grade(pool, items, timeout_s=timeout_s, memory_mb=memory_mb, fail_fast=True)
    return [(None if suite is None or not suite.graded else g.verdict.status == PASSED, g)
            for (_, suite), g in zip(items, grades)]


def score(problems: list[dict], mutant_rows: list[dict], canonical: dict[str, dict]
          ) -> dict[str, Any]:
    """False admission and false rejection per suite, overall and per mutation operator."""
    live = [m for m in mutant_rows if not m.get("equivalent")]
    table: dict[str, Any] = {}
    for name in SUITES:
        judged = [m for m in live if m["admitted"][name] is not None]
        with_suite = [p for p in problems if canonical[p["task_id"]][name] is not None]
        table[name] = {
            "problems_with_suite": len(with_suite),
            "no_suite": len(problems) - len(with_suite),
            "false_admission": proportion(sum(bool(m["admitted"][name]) for m in judged),
                                        len(judged)),
            "false_rejection": proportion(
                sum(canonical[p["task_id"]][name] is False for p in with_suite), len(with_suite)),
            "by_operator": {op: proportion(sum(bool(m["admitted"][name]) for m in judged
                                             if m["operator"] == op),
                                         sum(m["operator"] == op for m in judged))
                            for op in OPERATORS},
        }
    return table


def paired(live: list[dict], first: str, second: str) -> dict[str, Any]:
    """Mutants judged by both suites: admitted by one only, each way, and the exact McNemar
    p-value (a two-sided binomial test on those discordant mutants)."""
    both = [m for m in live if m["admitted"][first] is not None
            and m["admitted"][second] is not None]
    only_first = sum(bool(m["admitted"][first]) and not m["admitted"][second] for m in both)
    only_second = sum(bool(m["admitted"][second]) and not m["admitted"][first] for m in both)
    return {"first": first, "second": second, "mutants": len(both),
            "admitted_by_first_only": only_first, "admitted_by_second_only": only_second,
            "p_value": mcnemar_p(only_first, only_second)}


def summary(problems: list[dict], live: list[dict], canonical: dict[str, dict],
            suites: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The scores of one set of problems: per suite, paired against ``asserts``, test counts."""
    ids = {p["task_id"] for p in problems}
    mine = [m for m in live if m["task_id"] in ids]
    return {"problems": len(problems), "mutants_scored": len(mine),
            "suites": score(problems, mine, canonical),
            "paired": [paired(mine, SUITES[0], other) for other in SUITES[1:]],
            "tests_per_suite": {n: sum(len(s.graded) for iid, s in suites[n].items()
                                       if iid in ids) for n in SUITES}}


def _mutant_rows(problems: list[dict], cap: int, seed: int) -> list[dict]:
    rows = []
    for p in problems:
        for m in mutants(p["prompt"] + p["canonical_solution"], p["entry_point"], cap=cap,
                         seed=seed):
            rows.append({"task_id": p["task_id"], "operator": m.operator, "line": m.line,
                         "description": m.description, "source": m.source})
    return rows


def run_bench(cfg: Any, workdir: Path, n_problems: int, cap: int, seed: int) -> dict[str, Any]:
    """The whole bench; returns the JSON-ready result."""
    from arenaforge.pipeline.apps.evaluate import load_problems, problem_tests
    from arenaforge.pipeline.context import RunContext, close_process_resources
    from arenaforge.stages.verification.execution import execute

    start, load_start = time.perf_counter(), os.getloadavg()
    problems = load_problems("humaneval", n_problems)
    by_id = {p["task_id"]: p for p in problems}
    run_dir = workdir / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    limits = {"timeout_s": cfg.verify.timeout_s, "memory_mb": cfg.verify.memory_mb}
    try:
        generated = generate_tests(problems, cfg, run_dir)
        model_wall = time.perf_counter() - start
        suites = condition_suites(generated["tests"]["table"],
                                  generated["tests_augmented"]["table"])
        pool = RunContext(run_dir, cfg).sandbox()
        canonical_code = [p["prompt"] + p["canonical_solution"] for p in problems]
        official_ok = execute(pool, [(c, [problem_tests(p)]) for c, p in
                                     zip(canonical_code, problems)], timeout_s=OFFICIAL_TIMEOUT_S)
        rows = _mutant_rows(problems, cap, seed)
        official = execute(pool, [(m["source"], [problem_tests(by_id[m["task_id"]])])
                                  for m in rows], timeout_s=OFFICIAL_TIMEOUT_S)
        for m, verdict in zip(rows, official):
            m["equivalent"] = verdict.status == PASSED
        live = [m for m in rows if not m["equivalent"]]
        programs = [(c, p["task_id"]) for c, p in zip(canonical_code, problems)] + \
            [(m["source"], m["task_id"]) for m in live]
        canonical: dict[str, dict] = {p["task_id"]: {} for p in problems}
        bindings: dict[str, dict] = {p["task_id"]: {} for p in problems}
        for m in live:
            m["admitted"] = {}
        for name in SUITES:
            got = admissions(pool, [(code, suites[name].get(iid)) for code, iid in programs],
                             **limits)
            for p, (ok, graded) in zip(problems, got):
                canonical[p["task_id"]][name] = ok
                b = graded.binding
                bindings[p["task_id"]][name] = (b.rule, b.bound_function) if b else None
            for m, (ok, _) in zip(live, got[len(problems):]):
                m["admitted"][name] = ok
    finally:
        close_process_resources()
    plain, augmented = (generated[k]["table"] for k in ("tests", "tests_augmented"))
    per_problem = []
    for p in problems:
        iid, suite = p["task_id"], suites["asserts+augmented"].get(p["task_id"])
        mine = [m for m in live if m["task_id"] == iid]
        per_problem.append({
            "task_id": iid, "entry_point": p["entry_point"],
            "tests_entry_point": suite.entry_point if suite else None,
            "tests": {n: len(suites[n][iid].graded) if iid in suites[n] else 0 for n in SUITES},
            "canonical_admitted": canonical[iid], "canonical_binding": bindings[iid],
            "mutants": len(mine),
            "admitted": {n: sum(bool(m["admitted"][n]) for m in mine) for n in SUITES}})
    mismatch = [r["task_id"] for r in per_problem
                if r["tests_entry_point"] and r["tests_entry_point"] != r["entry_point"]]
    result = {
        "canonical_pass_official": sum(v.status == PASSED for v in official_ok),
        "cap_per_problem": cap, "seed": seed,
        "mutants": len(rows),
        "equivalent_excluded": len(rows) - len(live),
        "mutants_scored": len(live),
        "mutants_by_operator": dict(Counter(m["operator"] for m in rows)),
        "entry_point_mismatch": mismatch,
        **summary(problems, live, canonical, suites),
        # a mutant of the HumanEval function cannot fail tests of another function (a helper
        # the prompt shows first): these problems measure the entry-point choice, not the tests
        "matching_entry_point": summary([p for p in problems if p["task_id"] not in mismatch],
                                        live, canonical, suites),
        "tests_rows": {"plain": plain.num_rows, "augmented": augmented.num_rows},
        "stage_stats": {k: generated[k]["stats"] for k in ("answer", "tests", "tests_augmented")},
        "stage_seconds": {k: generated[k]["seconds"]
                          for k in ("answer", "tests", "tests_augmented")},
        "model_seconds": generated["model_seconds"], "request_cache": generated["cache"],
        "model_part_wall_s": round(model_wall, 1),
        "wall_s": round(time.perf_counter() - start, 1),
        "load_avg_start": load_start, "load_avg_end": os.getloadavg(),
        "cpus": os.cpu_count(),
        "per_problem": per_problem,
        "config": {"answer": cfg.answer.model_dump(mode="json"),
                   "tests": cfg.tests.model_dump(mode="json"), "verify_limits": limits},
    }
    (workdir / "mutants.jsonl").write_text("".join(json.dumps(m) + "\n" for m in rows))
    return result


def _pct(cell: dict[str, Any]) -> str:
    if cell["n"] == 0:
        return "n/a (no suite)"
    low, high = 100 * cell["ci_low"], 100 * cell["ci_high"]
    return f"{100 * cell['rate']:5.1f}% [{low:4.1f}, {high:4.1f}]  ({cell['k']}/{cell['n']})"


def _block(part: dict[str, Any]) -> list[str]:
    header = (f"{'suite':<18} {'problems':>8} {'tests':>6}  "
              f"{'false admission (mutants), 95% CP':<40}  false rejection (canonical), 95% CP")
    lines = [header]
    for name in SUITES:
        row = part["suites"][name]
        lines.append(f"{name:<18} {row['problems_with_suite']:>8} "
                     f"{part['tests_per_suite'][name]:>6}  {_pct(row['false_admission']):<40}"
                     f"  {_pct(row['false_rejection'])}")
    for pair in part["paired"]:
        p = "n/a" if pair["p_value"] is None else f"{pair['p_value']:.3g}"
        lines.append(f"  paired over {pair['mutants']} mutants: admitted by {pair['first']} "
                     f"only {pair['admitted_by_first_only']}, by {pair['second']} only "
                     f"{pair['admitted_by_second_only']} (exact McNemar p = {p})")
    return lines


def render(result: dict[str, Any]) -> str:
    """The tables that ``--mutants`` prints."""
    head = (f"{result['problems']} HumanEval problems, {result['mutants']} mutants "
            f"(cap {result['cap_per_problem']}/problem, seed {result['seed']}), "
            f"{result['equivalent_excluded']} equivalent on the official tests (excluded), "
            f"{result['mutants_scored']} scored")
    lines = [head, *_block(result)]
    mismatch, matching = result.get("entry_point_mismatch"), result.get("matching_entry_point")
    if mismatch and matching:
        lines.append(f"tests call another function than HumanEval's entry point on "
                     f"{len(mismatch)} problems ({', '.join(mismatch)}); without them: "
                     f"{matching['problems']} problems, {matching['mutants_scored']} mutants")
        lines += _block(matching)
    lines.append(f"wall {result['wall_s']:.0f} s (models {result['model_part_wall_s']:.0f} s, "
                 f"cache {result['request_cache']}), load {result['load_avg_start'][0]:.2f} -> "
                 f"{result['load_avg_end'][0]:.2f} on {result['cpus']} CPUs")
    return "\n".join(lines)
