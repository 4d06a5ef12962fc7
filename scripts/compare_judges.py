"""Compare judge protocols by their agreement with execution on HumanEval answer pairs.

Two embedded experts answer HumanEval prompts through the ``answer`` stage; each answer runs
against the official tests in the sandbox (``arenaforge.pipeline.sandbox.run_tests``). Pairs where exactly
one answer passes have a known winner; each protocol of the ``judge`` stage judges them with
one judge model, and the script prints, per protocol:

- single-order agreement: each order's own reading counted as one judgement (what a judge
  shown one order only would say; the judge card in docs/VALIDITY.md counts this way too);
- agreement per battle after combining the two orders as ``rate`` does (equal -> that verdict,
  different -> tie, any unparsed -> no verdict), with a Clopper-Pearson 95% interval
  (``scipy.stats.binomtest``); a tie or no verdict counts as disagreement;
- first-position rate: share of decisive single-order readings that chose the answer shown
  first (0.5 = no position bias), and order consistency: share of pairs whose two single-order
  readings name the same model. For ``pairwise_logprob`` the single-order reading is the
  letter with the higher probability in that order, before the two orders are averaged.

Generations go through the request cache and judge outputs are stored per protocol under
``--cache-dir``, so a rerun with the same settings costs seconds.

Example::

    python scripts/compare_judges.py --pairs 24 --max-problems 60 --threads 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from arenaforge.pipeline.prompts import template_files
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.arena import answer as answer_stage
from arenaforge.stages.arena import judge as judge_stage
from arenaforge.stages.arena import protocols as jp
from arenaforge.stages.common.intervals import clopper_pearson


class ScriptContext:
    """The slice of ``StageContext`` the answer and judge stages use, for a script."""

    def __init__(self, experts: list[str], judges: list[str], registry: dict, threads: int,
                 cache_dir: Path, seed: int = 0):
        self.config = SimpleNamespace(experts=experts, judge_ids=judges)
        self.seed = seed
        self._registry, self._threads, self._cache = registry, threads, cache_dir
        self._backends: dict[str, object] = {}

    def backend(self, model_id: str):
        from arenaforge.pipeline.backends import create_backend

        if model_id not in self._backends:
            self._backends[model_id] = create_backend(
                self._registry[model_id], n_threads=self._threads,
                cache_dir=self._cache / "requests")
        return self._backends[model_id]

    def advance(self, rows: int) -> None:
        pass

    def close(self) -> None:
        for b in self._backends.values():
            b.close()
        self._backends.clear()


def run_program(problem: dict, response: str) -> bool:
    """Did the answer's program pass HumanEval's official tests?"""
    from arenaforge.pipeline.apps.evaluate import build_program
    from arenaforge.pipeline.sandbox import run_tests

    tests = f"{problem['test']}\n\ncheck({problem['entry_point']})\n"
    result = run_tests(build_program(problem, response, "chat"), tests, timeout_s=10.0)
    return bool(result.passed)


def build_pairs(args, ctx: ScriptContext) -> tuple[pa.Table, dict[str, str], dict]:
    """Answer problems in chunks until ``--pairs`` exactly-one-pass pairs are found.

    Returns:
        (answer rows of the pairs, winner model per instruction_id, counts).
    """
    from arenaforge.pipeline.apps.evaluate import CHAT_TEMPLATE, load_problems
    from arenaforge.pipeline.prompts import template_path

    template = template_path(CHAT_TEMPLATE).read_text(encoding="utf-8")
    problems = load_problems("humaneval", args.max_problems)
    cfg = answer_stage.AnswerConfig(experts=args.contestants, max_tokens=args.answer_max_tokens,
                                    system_prompt=args.system_prompt or None)
    keep_rows, winners = [], {}
    counts = {"problems": 0, "both_pass": 0, "both_fail": 0, "one_pass": 0}
    for start in range(0, len(problems), args.chunk):
        chunk = problems[start:start + args.chunk]
        texts = [template.format(prompt=p["prompt"]) for p in chunk]
        table = pa.table({"instruction_id": [instruction_id(t) for t in texts],
                          "instruction": texts, "language": ["python"] * len(chunk),
                          "task_id": [p["task_id"] for p in chunk]})
        out = answer_stage.run(table, cfg, ctx).table.to_pylist()
        by_task: dict[str, dict[str, dict]] = {}
        for row in out:
            by_task.setdefault(row["task_id"], {})[row["model"]] = row
        for problem in chunk:
            counts["problems"] += 1
            rows = by_task.get(problem["task_id"], {})
            if len(rows) != len(args.contestants):
                continue  # a model_error: no pair
            passed = {m: run_program(problem, r["response"]) for m, r in rows.items()}
            n_pass = sum(passed.values())
            if n_pass == 0 or n_pass == len(passed):
                counts["both_pass" if n_pass else "both_fail"] += 1
                continue
            counts["one_pass"] += 1
            winners[rows[args.contestants[0]]["instruction_id"]] = next(
                m for m, ok in passed.items() if ok)
            keep_rows.extend(rows.values())
        print(f"  answered {counts['problems']} problems: {counts}", flush=True)
        if counts["one_pass"] >= args.pairs:
            break
    ids = list(winners)[:args.pairs]
    winners = {i: winners[i] for i in ids}
    keep_rows = [r for r in keep_rows if r["instruction_id"] in winners]
    return pa.Table.from_pylist(keep_rows), winners, counts


def judged(protocol: str, pairs: pa.Table, args, ctx: ScriptContext) -> tuple[pa.Table, float]:
    """The judge stage's rows for one protocol (cached on inputs, config and templates)."""
    cfg = judge_stage.JudgeConfig(protocol=protocol, judges=[args.judge],
                                  max_tokens=args.judge_max_tokens)
    templates = template_files(["judge_*.txt"])
    key = hashlib.sha256(json.dumps([
        cfg.model_dump(mode="json"), pairs.select(["instruction_id", "model", "response"])
        .to_pylist(), [t.read_text() for t in templates]]).encode()).hexdigest()[:16]
    path = args.cache_dir / "judged" / f"{protocol}-{key}.parquet"
    if path.exists():
        return pq.read_table(path), 0.0
    start = time.perf_counter()
    out = judge_stage.run(pairs, cfg, ctx).table
    seconds = time.perf_counter() - start
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(out, path)
    return out, seconds


def single_order_readings(rows: list[dict]) -> dict[tuple, dict[str, str | None]]:
    """(instruction_id, judge) -> {order: model verdict read from that order alone}."""
    out: dict[tuple, dict[str, str | None]] = {}
    for r in rows:
        if r["protocol"] == "pairwise_logprob":
            p = r["prob_a"]
            reading = None if p is None else ("a" if p > 0.5 else "b" if p < 0.5 else "tie")
        else:
            reading = r["verdict"]
        out.setdefault((r["instruction_id"], r["judge"]), {})[r["order"]] = reading
    return out


def metrics(rows: list[dict], winners: dict[str, str]) -> dict:
    """Agreement with execution, position bias and order consistency of one protocol."""
    def truth(r):
        return "a" if winners[r["instruction_id"]] == r["model_a"] else "b"

    readings = single_order_readings(rows)
    truth_of = {(r["instruction_id"], r["judge"]): truth(r) for r in rows}
    row_agree = sum(v == truth_of[k] for k, per in readings.items() for v in per.values())
    battles: dict[tuple, dict] = {}
    for r in rows:
        battles.setdefault((r["instruction_id"], r["judge"]), {"truth": truth(r)})[r["order"]] = \
            r["verdict"]
    battle_agree = 0
    for b in battles.values():
        v1, v2 = b.get("ab"), b.get("ba")
        combined = None if v1 is None or v2 is None else (v1 if v1 == v2 else "tie")
        battle_agree += combined == b["truth"]
    n = len(battles)
    ci = clopper_pearson(battle_agree, n) if n else None
    first = decisive = consistent = both = 0
    for per in readings.values():
        for order, v in per.items():
            if v in ("a", "b"):
                decisive += 1
                first += (v == "a") == (order == "ab")
        if per.get("ab") is not None and per.get("ba") is not None:
            both += 1
            consistent += per["ab"] == per["ba"]
    return {"rows": len(rows), "row_agree": row_agree, "battles": n, "agree": battle_agree,
            "ci": ci if ci else (float("nan"), float("nan")),
            "first_rate": first / decisive if decisive else float("nan"),
            "consistency": consistent / both if both else float("nan"),
            "unparsed": sum(r["verdict"] is None for r in rows),
            "ties": sum(r["verdict"] == "tie" for r in rows)}


def print_table(results: dict[str, dict], seconds: dict[str, float]) -> None:
    head = (f"{'protocol':<18} {'1-order agree':>13} {'battles agree':>14} {'95% CI':>13} "
            f"{'first-pos':>9} {'order-cons':>10} {'ties':>5} {'unparsed':>8} {'judge s':>8}")
    print(head)
    print("-" * len(head))
    for name, m in results.items():
        pointwise = name.startswith("pointwise")
        first = "n/a" if pointwise else f"{m['first_rate']:.0%}"
        cons = "n/a" if pointwise else f"{m['consistency']:.0%}"
        print(f"{name:<18} {m['row_agree']:>4}/{m['rows']:<3} {m['row_agree'] / m['rows']:>5.0%} "
              f"{m['agree']:>5}/{m['battles']:<3} {m['agree'] / m['battles']:>4.0%} "
              f"{m['ci'][0]:>5.0%}-{m['ci'][1]:<5.0%} {first:>9} {cons:>10} {m['ties']:>5} "
              f"{m['unparsed']:>8} {seconds[name]:>8.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=24, help="exactly-one-pass pairs to judge")
    parser.add_argument("--max-problems", type=int, default=80, help="HumanEval problems at most")
    parser.add_argument("--chunk", type=int, default=10, help="problems answered per step")
    parser.add_argument("--contestants", nargs=2, default=["qwen2.5-coder-0.5b", "smollm2-135m"])
    parser.add_argument("--judge", default="qwen2.5-coder-1.5b")
    parser.add_argument("--protocols", default=",".join(jp.PROTOCOLS),
                        help="comma-separated subset of " + ", ".join(jp.PROTOCOLS))
    parser.add_argument("--answer-max-tokens", type=int, default=384)
    parser.add_argument("--system-prompt", default="You are a Python expert. Reply with the code "
                        "only, no explanation.", help="experts' system prompt ('' for none); "
                        "short answers keep the judge prompts short")
    parser.add_argument("--judge-max-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models-file", type=Path, default=ROOT / "configs" / "models.yaml")
    parser.add_argument("--cache-dir", type=Path, default=Path("/tmp/arenaforge-compare-judges"))
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]
    unknown = [p for p in protocols if p not in jp.PROTOCOLS]
    if unknown:
        parser.error(f"unknown protocol(s) {unknown}; known: {list(jp.PROTOCOLS)}")

    from arenaforge.pipeline.models import load_registry

    registry = load_registry(args.models_file)
    ctx = ScriptContext(args.contestants, [args.judge], registry, args.threads, args.cache_dir)
    try:
        start = time.perf_counter()
        pairs, winners, counts = build_pairs(args, ctx)
        print(f"pairs: {len(winners)} ({counts}); answers took {time.perf_counter() - start:.0f}s; "
              f"winners: { {m: list(winners.values()).count(m) for m in args.contestants} }")
        for model in args.contestants:  # free their memory before the judge loads
            if model in ctx._backends:
                ctx._backends.pop(model).close()
        results, seconds = {}, {}
        for protocol in protocols:
            table, seconds[protocol] = judged(protocol, pairs, args, ctx)
            results[protocol] = metrics(table.to_pylist(), winners)
            print(f"  {protocol}: {seconds[protocol]:.0f}s", flush=True)
    finally:
        ctx.close()
    print()
    print(f"judge {args.judge} on {len(winners)} HumanEval pairs "
          f"({' vs '.join(args.contestants)}, exactly one passes)")
    print_table(results, seconds)
    if args.json:
        args.json.write_text(json.dumps({"counts": counts, "results": results,
                                         "seconds": seconds}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
