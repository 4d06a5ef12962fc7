"""Benchmark: what ``decontaminate`` costs per instruction, its fixed costs per worker apart.

The requests are ``scale_instructions``' (what ``bench_scale.py`` mines: synth_arena's tasks,
each made distinct, with pasted HumanEval prompts among them), ``--sizes`` of them, in shards
of at most ``--shard-size`` dealt to ``--workers`` workers as the runner plans them
(``plan_shards``). Each worker is a fresh Python process, run one after the other so that they
do not share the cores (worker by worker, each code in turn): it imports the stage, then runs
its shards in order through a real ``RunContext`` (the model loaded in the process, as the inline executor does; on Ray the
model lives in the run's embedding service instead) on one run directory per size and code,
whose embedding cache the workers share. Per worker it records each shard's wall and CPU
seconds (its process and threads), then runs its last shards once more, their vectors now in
the run's cache: what a shard costs besides embedding its own requests.

Reported per size and code (CPU seconds: less sensitive than wall time to other processes):

- ``fixed s/worker``: a worker's first shard less its rows at the steady per-row cost, plus
  importing the stage: importing torch and sentence-transformers, loading MiniLM, reading
  and indexing the benchmarks, embedding HumanEval's 164 docstrings (or reading them from the
  run's cache, for the second worker).
- ``ms/row``: the later shards' CPU over their rows (MiniLM's forward pass, mostly).
- ``ms/shard cached``: the least CPU of a shard rerun with its vectors cached, and the
  median (what a shard pays that is not embedding its requests: reading the cache, the
  benchmark vectors, the similarities, n-grams, building tables).
- ``total CPU s`` and ``ms/instruction``: the stage's CPU over all workers, and per request.

``--module FILE`` runs another version of the stage module (the code before a change)::

    git show HEAD~1:stages/instructions/decontaminate.py > /tmp/decontaminate_before.py
    python scripts/bench_decontaminate.py --module before=/tmp/decontaminate_before.py \\
        --module after=stages/instructions/decontaminate.py --sizes 3600 12000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
STAGE_MODULE = ROOT / "stages" / "instructions" / "decontaminate.py"
RERUN_SHARDS = 8  # shards per worker run a second time, their vectors cached


def load_stage(path: Path):
    """The stage module at ``path`` (this checkout's or another version's file)."""
    spec = importlib.util.spec_from_file_location(f"bench_decontaminate_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pydantic look their module up there
    spec.loader.exec_module(module)
    return module


def worker(job: dict) -> dict:
    """Run one worker's shards (Parquet files) in this process; per shard its rows and cost."""
    start, cpu0 = time.perf_counter(), time.process_time()
    import pyarrow.parquet as pq
    from arenaforge.pipeline.context import RunContext, close_process_resources

    stage = load_stage(Path(job["module"]))
    cfg = stage.DecontaminateConfig(embedding={"precision": job["precision"]})
    config = SimpleNamespace(seed=0, experts=[], models_file=None,
                             runner=SimpleNamespace(request_cache=False))
    ctx = RunContext(Path(job["run_dir"]), config, threads=1)
    out = {"import_wall_s": time.perf_counter() - start,
           "import_cpu_s": time.process_time() - cpu0, "shards": [], "reruns": [],
           "dropped": [], "stats": {}}
    tables = [pq.read_table(path) for path in job["shards"]]
    for name, todo in (("shards", tables), ("reruns", tables[-RERUN_SHARDS:])):
        for table in todo:
            wall, cpu = time.perf_counter(), time.process_time()
            result = stage.run(table, cfg, ctx)
            out[name].append({"rows": table.num_rows, "wall_s": time.perf_counter() - wall,
                              "cpu_s": time.process_time() - cpu})
            if name == "shards":
                out["dropped"] += [(r["instruction_id"], r["reason"], r["contamination"])
                                   for r in result.dropped.to_pylist()]
                for key, value in result.stats.items():
                    out["stats"][key] = out["stats"].get(key, 0.0) + value
    close_process_resources()
    return out


def plan(size: int, shard_size: int, workers: int, folder: Path) -> tuple[list[list[str]], int]:
    """Write the shards of ``size`` requests; per worker its shard files, and distinct texts."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from arenaforge.pipeline.runner import plan_shards
    from arenaforge.pipeline.textnorm import instruction_id
    from scale_instructions import instruction_rows

    texts = [r["instruction"] for r in instruction_rows(size, seed=0)]
    table = pa.table({"instruction_id": [instruction_id(t) for t in texts], "instruction": texts})
    shards = plan_shards(table, "instruction_id", shard_size, True, workers)
    per_worker: list[list[str]] = [[] for _ in range(workers)]
    for i, shard in enumerate(shards):
        path = folder / f"shard-{i:05d}.parquet"
        pq.write_table(shard, path)
        per_worker[i % workers].append(str(path))
    return per_worker, len(set(texts))


def summarise(workers: list[dict]) -> dict:
    """Fixed cost per worker, steady per-row cost, per-shard cost with vectors cached."""
    steady = [s for w in workers for s in w["shards"][1:]]
    per_row = sum(s["cpu_s"] for s in steady) / max(1, sum(s["rows"] for s in steady))
    per_row_wall = sum(s["wall_s"] for s in steady) / max(1, sum(s["rows"] for s in steady))
    fixed = [w["import_cpu_s"] + w["shards"][0]["cpu_s"] - w["shards"][0]["rows"] * per_row
             for w in workers]
    rows = sum(s["rows"] for w in workers for s in w["shards"])
    total = sum(w["import_cpu_s"] + sum(s["cpu_s"] for s in w["shards"]) for w in workers)
    wall = sum(w["import_wall_s"] + sum(s["wall_s"] for s in w["shards"]) for w in workers)
    return {"rows": rows, "shards": sum(len(w["shards"]) for w in workers),
            "fixed_cpu_s_per_worker": [round(f, 2) for f in fixed],
            "ms_per_row_cpu": round(1000 * per_row, 2),
            "ms_per_row_wall": round(1000 * per_row_wall, 2),
            # the least: on a loaded machine every measurement is the cost plus noise
            "ms_per_shard_cached": round(1000 * min(
                s["cpu_s"] for w in workers for s in w["reruns"]), 2),
            "ms_per_shard_cached_median": round(1000 * statistics.median(
                s["cpu_s"] for w in workers for s in w["reruns"]), 2),
            "total_cpu_s": round(total, 1), "total_wall_s": round(wall, 1),
            "ms_per_instruction_cpu": round(1000 * total / rows, 2),
            "dropped": len({d[0] for w in workers for d in w["dropped"]}),
            "stats": {k: sum(w["stats"].get(k, 0) for w in workers)
                      for k in ("benchmark_index_builds", "benchmark_embeddings")
                      if any(k in w["stats"] for w in workers)}}


def main(args: argparse.Namespace) -> list[dict]:
    modules = [m.split("=", 1) if "=" in m else (Path(m).stem, m) for m in args.module] or [
        ("current", str(STAGE_MODULE))]
    results, decisions = [], {}
    with tempfile.TemporaryDirectory(prefix="af-bench-decontam-") as tmp:
        for size in args.sizes:
            folder = Path(tmp) / f"shards-{size}"
            folder.mkdir()
            per_worker, distinct = plan(size, args.shard_size, args.workers, folder)
            done: dict[str, list[dict]] = {label: [] for label, _ in modules}
            # worker by worker, the codes in turn: a change of load on a shared machine
            # falls on every code alike
            for shards in per_worker:
                for label, module in modules:
                    run_dir = Path(tmp) / f"run-{size}-{label}"
                    run_dir.mkdir(exist_ok=True)
                    job = {"module": str(Path(module).resolve()), "run_dir": str(run_dir),
                           "shards": shards, "precision": args.precision}
                    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(job)],
                                          capture_output=True, text=True, check=False)
                    if proc.returncode:
                        raise SystemExit(f"worker failed ({label}, {size}):\n{proc.stderr}")
                    done[label].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            for label, workers in done.items():
                decisions[(size, label)] = sorted(d for w in workers for d in w["dropped"])
                results.append({"size": size, "distinct": distinct, "code": label,
                                "workers": args.workers, **summarise(workers)})
                print(_row(results[-1]), flush=True)
    same = {size: len({json.dumps(v) for (s, _), v in decisions.items() if s == size}) == 1
            for size in args.sizes}
    load = os.getloadavg()
    print(f"same dropped rows and evidence for every code: {same}; load average "
          f"{load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}; {os.cpu_count()} CPUs")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "same_decisions": same,
                                               "load": load}, indent=1))
    return results


def _row(r: dict) -> str:
    fixed = " + ".join(f"{f:.2f}" for f in r["fixed_cpu_s_per_worker"])
    return (f"{r['size']:>6} rows ({r['distinct']} distinct) {r['code']:<10} {r['shards']:>4} shards"
            f" | fixed s/worker {fixed} | {r['ms_per_row_cpu']:.2f} ms/row "
            f"({r['ms_per_row_wall']:.2f} wall) | {r['ms_per_shard_cached']:.1f} ms/shard cached "
            f"(median {r['ms_per_shard_cached_median']:.1f})"
            f" | total CPU {r['total_cpu_s']:.1f} s (wall {r['total_wall_s']:.1f}) = "
            f"{r['ms_per_instruction_cpu']:.2f} ms/instruction | dropped {r['dropped']} "
            f"{r['stats']}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[3600, 12000],
                        help="requests entering decontaminate")
    parser.add_argument("--shard-size", type=int, default=32, help="runner.shard_size")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--precision", default="float32",
                        help="embedding precision: float32 (the default), bfloat16, auto")
    parser.add_argument("--module", action="append", default=[],
                        help="LABEL=FILE: a version of the stage module (repeatable); "
                             "default: this checkout's")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    parsed = parse_args()
    if parsed.worker:
        print(json.dumps(worker(json.loads(parsed.worker))))
    else:
        main(parsed)
