"""Mutation score of the generated tests: the wrong programs each trusted suite lets through.

``python scripts/bench_verify.py --mutants`` runs this. For the first ``--problems`` HumanEval
problems:

1. the run's experts answer the HumanEval prompt (the chat prompt of ``arenaforge eval``) and
   write tests for it through the pipeline's own ``answer`` and ``tests`` stages (their ``run``
   functions with the sections of ``--config``; the candidates the tests are cross-checked on
   are the experts' answers, as in a run). Model requests go to the request cache of
   ``<workdir>/run``, so a rerun asks no model;
2. the canonical solution's mutants (``scripts/ast_mutants.py``: seeded, at most ``--cap`` per
   problem) run on HumanEval's official tests; a mutant that passes them is counted as
   equivalent and left out;
3. the canonical solution and every other mutant run on each suite of the problem's trusted
   tests, as verify runs an answer (``stages.verify.execute``):

   - ``written``: the written asserts that survive cross-checking;
   - ``augmented``: those plus the augmented assertions (``kind = augmented``);
   - ``hidden``: the hidden split plus the augmented assertions (the tests that certify an
     answer after repair).

A suite *admits* a program when the program passes all of its tests. False admission is the
share of non-equivalent mutants a suite admits, false rejection the share of canonical
solutions it rejects, each over the problems where the suite has at least one test (a problem
without one is left to the judge gate in a run; counted as ``no_suite``), with exact
Clopper-Pearson intervals (``scipy.stats.binomtest``). Mutants of one problem are not
independent, so the intervals are narrower than a per-problem resampling would give.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from scripts.ast_mutants import OPERATORS, mutants

SUITES = ("written", "augmented", "hidden")
# Stages whose ``run`` turns HumanEval prompts into trusted tests, in order.
CHAIN = ("answer", "tests")
PASSED = "passed"
# HumanEval's check() runs all its asserts in one program (tests/stages/test_humaneval_verify).
OFFICIAL_TIMEOUT_S = 10.0


def instruction(problem: dict[str, Any]) -> str:
    """What the experts are asked: ``arenaforge eval``'s chat prompt for the problem."""
    from pipeline.evaluate import CHAT_TEMPLATE_FILE
    from stages.prompt_templates import fill, load_template

    return fill(load_template(CHAT_TEMPLATE_FILE.name), prompt=problem["prompt"])


def generate_tests(problems: list[dict], cfg: Any, run_dir: Path) -> dict[str, Any]:
    """Run the ``CHAIN`` stages on the problems' prompts; their output tables and stats."""
    from pipeline.context import RunContext
    from stages import get_stage

    ctx = RunContext(run_dir, cfg)
    table = pa.Table.from_pylist([{"instruction_id": p["task_id"], "instruction": instruction(p),
                                   "language": "Python"} for p in problems])
    out: dict[str, Any] = {}
    for name in CHAIN:
        start = time.perf_counter()
        result = get_stage(name).run(table, cfg.stage_config(name), ctx)
        table = result.table
        out[name] = {"table": table, "stats": dict(result.stats),
                     "seconds": round(time.perf_counter() - start, 1)}
        pq.write_table(table, run_dir / f"{name}.parquet")
    out["model_seconds"] = round(ctx.model_seconds, 1)
    out["cache"] = dict(ctx.cache)
    return out


def suites_by_problem(tests: pa.Table) -> dict[str, dict[str, list[str]]]:
    """Per instruction, the test code of each suite (``SUITES``), in author and index order.

    Columns the ``tests`` stage does not write yet count as absent: no ``kind`` means every
    test is written, no ``split`` means there is no hidden suite.
    """
    names = set(tests.column_names)
    rows = sorted(tests.to_pylist(), key=lambda r: (r["instruction_id"], r["author"] or "",
                                                    r["test_idx"]))
    out: dict[str, dict[str, list[str]]] = defaultdict(lambda: {s: [] for s in SUITES})
    for r in rows:
        suites = out[r["instruction_id"]]
        if not (r["survived"] and r["test_code"]):
            continue
        augmented = "kind" in names and r["kind"] == "augmented"
        if not augmented:
            suites["written"].append(r["test_code"])
        suites["augmented"].append(r["test_code"])
        if augmented or ("split" in names and r["split"] == "hidden"):
            suites["hidden"].append(r["test_code"])
    return dict(out)


def _admits(per_test: tuple[str, ...], idx: list[int]) -> bool | None:
    """Whether the tests ``idx`` all passed; ``None`` when a skipped one leaves it open."""
    statuses = [per_test[i] for i in idx]
    if any(s not in (PASSED, "skipped") for s in statuses):
        return False
    return None if "skipped" in statuses else True


def grade(pool: Any, programs: list[str], suites: list[dict[str, list[str]]],
          timeout_s: float, memory_mb: int | None) -> list[dict[str, bool | None]]:
    """Per program, whether each of its suites admits it (``None``: the suite is empty).

    A program runs once against the union of its suites (verify's ``execute``, fail-fast on a
    timeout); a suite left undecided by skipped tests is rerun on its own.
    """
    from stages.verify import execute

    unions = [list(dict.fromkeys(t for s in SUITES for t in suite[s])) for suite in suites]
    verdicts = execute(pool, list(zip(programs, unions)), timeout_s=timeout_s,
                       memory_mb=memory_mb, fail_fast=True)
    out: list[dict[str, bool | None]] = []
    reruns: list[tuple[int, str]] = []
    for i, (verdict, union, suite) in enumerate(zip(verdicts, unions, suites)):
        per_test = verdict.per_test or (verdict.status,) * len(union)
        position = {t: k for k, t in enumerate(union)}
        row: dict[str, bool | None] = {}
        for name in SUITES:
            if not suite[name]:
                row[name] = None
                continue
            row[name] = _admits(per_test, [position[t] for t in suite[name]])
            if row[name] is None:
                reruns.append((i, name))
        out.append(row)
    if reruns:
        again = execute(pool, [(programs[i], suites[i][name]) for i, name in reruns],
                        timeout_s=timeout_s, memory_mb=memory_mb, fail_fast=False)
        for (i, name), verdict in zip(reruns, again):
            out[i][name] = verdict.status == PASSED
    return out


def interval(k: int, n: int) -> dict[str, Any]:
    """``k`` of ``n`` with its rate and exact (Clopper-Pearson) 95% interval."""
    from scipy.stats import binomtest

    if n == 0:
        return {"k": 0, "n": 0, "rate": None, "ci_low": None, "ci_high": None}
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return {"k": k, "n": n, "rate": k / n, "ci_low": ci.low, "ci_high": ci.high}


def score(problems: list[dict], mutant_rows: list[dict], canonical: dict[str, dict]
          ) -> dict[str, Any]:
    """False admission and false rejection per suite, overall and per mutation operator."""
    live = [m for m in mutant_rows if not m["equivalent"]]
    table: dict[str, Any] = {}
    for name in SUITES:
        judged = [m for m in live if m["admitted"][name] is not None]
        with_suite = [p for p in problems if canonical[p["task_id"]][name] is not None]
        table[name] = {
            "problems_with_suite": len(with_suite),
            "no_suite": len(problems) - len(with_suite),
            "false_admission": interval(sum(bool(m["admitted"][name]) for m in judged),
                                        len(judged)),
            "false_rejection": interval(
                sum(canonical[p["task_id"]][name] is False for p in with_suite), len(with_suite)),
            "by_operator": {op: interval(sum(bool(m["admitted"][name]) for m in judged
                                             if m["operator"] == op),
                                         sum(m["operator"] == op for m in judged))
                            for op in OPERATORS},
        }
    return table


def run_bench(cfg: Any, workdir: Path, n_problems: int, cap: int, seed: int) -> dict[str, Any]:
    """The whole bench; returns the JSON-ready result."""
    from pipeline.context import RunContext, close_process_resources
    from pipeline.evaluate import load_problems, problem_tests
    from stages.verify import execute

    start, load_start = time.perf_counter(), os.getloadavg()
    problems = load_problems("humaneval", n_problems)
    run_dir = workdir / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        generated = generate_tests(problems, cfg, run_dir)
        model_wall = time.perf_counter() - start
        suites = suites_by_problem(generated["tests"]["table"])
        empty = {s: [] for s in SUITES}
        pool = RunContext(run_dir, cfg).sandbox()
        mutant_rows: list[dict] = []
        for p in problems:
            source = p["prompt"] + p["canonical_solution"]
            for m in mutants(source, p["entry_point"], cap=cap, seed=seed):
                mutant_rows.append({"task_id": p["task_id"], "operator": m.operator,
                                    "line": m.line, "description": m.description,
                                    "source": m.source})
        by_id = {p["task_id"]: p for p in problems}
        official = execute(pool, [(m["source"], [problem_tests(by_id[m["task_id"]])])
                                  for m in mutant_rows], timeout_s=OFFICIAL_TIMEOUT_S)
        for m, verdict in zip(mutant_rows, official):
            m["equivalent"] = verdict.status == PASSED
        live = [m for m in mutant_rows if not m["equivalent"]]
        limits = {"timeout_s": cfg.verify.timeout_s, "memory_mb": cfg.verify.memory_mb}
        programs = [p["prompt"] + p["canonical_solution"] for p in problems] + \
            [m["source"] for m in live]
        program_suites = [suites.get(p["task_id"], empty) for p in problems] + \
            [suites.get(m["task_id"], empty) for m in live]
        admitted = grade(pool, programs, program_suites, **limits)
        canonical = {p["task_id"]: admitted[i] for i, p in enumerate(problems)}
        for m, verdict in zip(live, admitted[len(problems):]):
            m["admitted"] = verdict
        canonical_ok = execute(pool, [(p["prompt"] + p["canonical_solution"], [problem_tests(p)])
                                      for p in problems], timeout_s=OFFICIAL_TIMEOUT_S)
    finally:
        close_process_resources()
    tests_table = generated["tests"]["table"]
    result = {
        "problems": len(problems),
        "task_ids": [p["task_id"] for p in problems],
        "canonical_pass_official": sum(v.status == PASSED for v in canonical_ok),
        "cap_per_problem": cap, "seed": seed,
        "mutants": len(mutant_rows),
        "equivalent_excluded": len(mutant_rows) - len(live),
        "mutants_scored": len(live),
        "mutants_by_operator": dict(Counter(m["operator"] for m in mutant_rows)),
        "suites": score(problems, mutant_rows, canonical),
        "tests_per_suite": {s: sum(len(v[s]) for v in suites.values()) for s in SUITES},
        "tests_written": sum(r["test_idx"] >= 0 for r in tests_table.to_pylist()),
        "stage_stats": {name: generated[name]["stats"] for name in CHAIN},
        "stage_seconds": {name: generated[name]["seconds"] for name in CHAIN},
        "model_seconds": generated["model_seconds"], "request_cache": generated["cache"],
        "model_part_wall_s": round(model_wall, 1),
        "wall_s": round(time.perf_counter() - start, 1),
        "load_avg_start": load_start, "load_avg_end": os.getloadavg(),
        "cpus": os.cpu_count(),
        "canonical": canonical,
        "mutant_rows": [{k: v for k, v in m.items() if k != "source"} for m in mutant_rows],
    }
    (workdir / "mutants.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mutant_rows))
    return result


def _pct(cell: dict[str, Any]) -> str:
    if cell["n"] == 0:
        return "n/a (no suite)"
    return (f"{100 * cell['rate']:5.1f}% [{100 * cell['ci_low']:4.1f}, {100 * cell['ci_high']:4.1f}]"
            f"  ({cell['k']}/{cell['n']})")


def render(result: dict[str, Any]) -> str:
    """The table that ``--mutants`` prints."""
    head = (f"{result['problems']} HumanEval problems, {result['mutants']} mutants "
            f"(cap {result['cap_per_problem']}/problem, seed {result['seed']}), "
            f"{result['equivalent_excluded']} equivalent on the official tests (excluded), "
            f"{result['mutants_scored']} scored")
    columns = (f"{'suite':<10} {'problems':>8} {'tests':>6}  "
               f"{'false admission (mutants), 95% CP':<40}  false rejection (canonical), 95% CP")
    lines = [head, columns]
    for name in SUITES:
        row = result["suites"][name]
        lines.append(f"{name:<10} {row['problems_with_suite']:>8} "
                     f"{result['tests_per_suite'][name]:>6}  {_pct(row['false_admission']):<40}"
                     f"  {_pct(row['false_rejection'])}")
    lines.append(f"wall {result['wall_s']:.0f} s (models {result['model_part_wall_s']:.0f} s, "
                 f"cache {result['request_cache']}), load {result['load_avg_start'][0]:.2f} -> "
                 f"{result['load_avg_end'][0]:.2f} on {result['cpus']} CPUs")
    return "\n".join(lines)
