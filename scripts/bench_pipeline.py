"""Pipeline overhead: a real inline run against the same model calls made directly, one process.

The pipeline runs ``mine -> clean`` (Qwen2.5-Coder-0.5B mines) and then ``answer`` (Qwen 0.5B
and SmolLM2-135M answer a fixed set of instructions, seeded as the ``compress`` output, as
tests/e2e does) with the inline runner and the request cache off. The reference then loads the
same models with ``create_backend`` and makes exactly the calls the stages made: prompts and
sampling parameters are read back from the run's outputs (mine's ``sample_params`` per row,
its shard files for the batching; answer's instructions and config, grouped into the same
shards), and checks that the texts agree.

Reported: per stage, rows/s and the time outside model calls (stage seconds minus
``model_seconds``, model loading included), and the pipeline's whole wall time against the
direct path's (loading + generation). Target: pipeline overhead under 10% of model time.

Usage::

    python scripts/bench_pipeline.py                        # prints a Markdown report
    python scripts/bench_pipeline.py --samples 4 --max-tokens 48 --write docs/PERFORMANCE.md
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa
import pyarrow.parquet as pq
from arenaforge.pipeline.backends import SamplingParams, create_backend
from arenaforge.pipeline.config import load_config
from arenaforge.pipeline.context import close_process_resources
from arenaforge.pipeline.runner import plan_shards, run_pipeline

QWEN, SMOL = "qwen2.5-coder-0.5b", "smollm2-135m"
INSTRUCTIONS = [
    "Write a Python function that reverses the words of a sentence.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python function that merges two sorted lists into one sorted list.",
]
MARK_START, MARK_END = "<!-- bench_pipeline:start -->", "<!-- bench_pipeline:end -->"


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    return {"nproc": os.cpu_count(), "cpu": cpu, "python": platform.python_version(),
            "load": os.getloadavg()}


def run_pipeline_part(workdir: Path, args) -> dict:
    """Run mine+clean, then answer on a seeded input; returns stage infos and the configs."""
    from arenaforge.pipeline.config import dump_config
    from arenaforge.pipeline.shards import DROPPED_SCHEMA
    from arenaforge.pipeline.store import RunStore
    from arenaforge.pipeline.textnorm import instruction_id

    common = [f"artifacts_dir={workdir}", "runner.request_cache=false", "runner.kind=inline",
              f"runner.shard_size={args.shard_size}"]
    mine_cfg = load_config(ROOT / "configs" / "tiny-llm.yaml", common + [
        "name=bench-mine", f"mine.miners=[{QWEN}]", f"mine.samples_per_language={args.samples}",
        f"mine.max_tokens={args.max_tokens}"])
    answer_cfg = load_config(ROOT / "configs" / "tiny-llm.yaml", common + [
        "name=bench-answer", "stages=[answer]", f"experts=[{QWEN}, {SMOL}]",
        f"answer.max_tokens={args.max_tokens}"])
    # answer's input, seeded as a complete compress stage (as tests/e2e/conftest.py does)
    seed = pa.table({"instruction_id": [instruction_id(t) for t in INSTRUCTIONS],
                     "instruction": INSTRUCTIONS, "language": ["Python"] * len(INSTRUCTIONS)})
    run_dir = workdir / "bench-answer"
    store = RunStore(run_dir)
    store.open(answer_cfg.config_hash(), dump_config(answer_cfg))
    stage = store.stage("compress")
    stage.write_shard(0, seed, DROPPED_SCHEMA.empty_table(),
                      {"input_hash": "seeded", "input_rows": seed.num_rows, "seconds": 0.0})
    stage.mark_success({"fingerprint": "seeded", "shards": 1, "rows_in": seed.num_rows,
                        "output_hash": stage.shard_done(0, "seeded")["sha256"][:16]})

    start = time.perf_counter()
    mine_run = run_pipeline(mine_cfg, show_progress=False)
    answer_run = run_pipeline(answer_cfg, show_progress=False)
    wall = time.perf_counter() - start
    return {"wall": wall, "funnel": mine_run.funnel.as_dicts() + answer_run.funnel.as_dicts(),
            "mine_dir": mine_run.run_dir, "answer_dir": answer_run.run_dir,
            "mine_cfg": mine_cfg, "answer_cfg": answer_cfg, "seed": seed}


def direct_part(part: dict, threads: int) -> dict:
    """The same model calls, made straight on ``create_backend``; returns times and agreement."""
    from arenaforge.pipeline.models import load_registry
    from arenaforge.stages.arena.answer import build_conversation
    from arenaforge.stages.instructions.pre_query import build_pre_query

    registry = load_registry(part["mine_cfg"].models_file)
    load_s = 0.0
    gen = {"mine": 0.0, "answer": 0.0}
    same = total = 0

    def timed_load(model_id):
        nonlocal load_s
        t = time.perf_counter()
        backend = create_backend(registry[model_id], n_threads=threads)
        load_s += time.perf_counter() - t
        return backend

    # mine: per shard file, one complete() per contiguous run of samples (as mine.run does)
    mine = part["mine_cfg"].mine
    backend = timed_load(QWEN)
    for shard in sorted((part["mine_dir"] / "stages" / "mine").glob("part-?????.parquet")):
        rows = sorted(pq.read_table(shard).to_pylist(), key=lambda r: r["sample_index"])
        for language in dict.fromkeys(r["language"] for r in rows):
            group = [r for r in rows if r["language"] == language]
            first = SamplingParams.from_json(group[0]["sample_params"])
            params = SamplingParams(n=len(group), temperature=first.temperature,
                                    top_p=first.top_p, max_tokens=first.max_tokens,
                                    stop=first.stop, seed=first.seed)
            pre = build_pre_query(backend.apply_chat_template, registry[QWEN].family,
                                  mine.template, mine.system_for(language))
            t = time.perf_counter()
            out = backend.complete([pre.prompt], params)[0]
            gen["mine"] += time.perf_counter() - t
            same += sum(c.text == r["raw"] for c, r in zip(out, group))
            total += len(group)
    backend.close()

    # answer: per planned shard and model, one chat() over the shard's conversations
    cfg = part["answer_cfg"]
    shards = plan_shards(part["seed"], "instruction_id", cfg.runner.shard_size, True)
    answers = {}
    for path in sorted((part["answer_dir"] / "stages" / "answer").glob("part-?????.parquet")):
        answers |= {(r["instruction_id"], r["model"]): r["response"]
                    for r in pq.read_table(path).to_pylist()}
    params = SamplingParams(n=1, temperature=cfg.answer.temperature, top_p=cfg.answer.top_p,
                            max_tokens=cfg.answer.max_tokens, seed=cfg.seed)
    for model in cfg.experts:
        backend = timed_load(model)
        for shard in shards:
            rows = shard.to_pylist()
            t = time.perf_counter()
            out = backend.chat([build_conversation(r["instruction"], cfg.answer.system_prompt)
                                for r in rows], params)
            gen["answer"] += time.perf_counter() - t
            same += sum(o[0].text == answers.get((r["instruction_id"], model))
                        for o, r in zip(out, rows))
            total += len(rows)
        backend.close()
    return {"load": load_s, "generate": sum(gen.values()), "stages": gen, "same": same,
            "total": total}


def _load(values: tuple[float, ...]) -> str:
    return "/".join(f"{x:.1f}" for x in values)


def report(rounds: list[tuple[dict, dict]], before: dict, after: dict, args) -> str:
    """Markdown: per-stage table (summed over rounds) and the overhead figures."""
    n = len(rounds)
    command = (f"python scripts/bench_pipeline.py --samples {args.samples} --max-tokens "
               f"{args.max_tokens} --shard-size {args.shard_size} --rounds {n}")
    head = (f"Measured {time.strftime('%Y-%m-%d %H:%M')} with `{command}` (numbers summed over "
            f"the {n} rounds).")
    host = (f"Machine: {before['nproc']} CPUs ({before['cpu']}), Python {before['python']}; "
            f"load average (1/5/15 min) {_load(before['load'])} at the start, "
            f"{_load(after['load'])} at the end.")
    lines = [head, "", host, "",
             ("| stage | rows in | rows out | stage s | model s | outside model s | rows/s "
              "| direct model s |"),
             "|---|---|---|---|---|---|---|---|"]
    names = [row["stage"] for row in rounds[0][0]["funnel"]]
    model_total = 0.0
    for i, name in enumerate(names):
        rows = [part["funnel"][i] for part, _ in rounds]
        secs = sum(r["seconds"] for r in rows)
        model = sum(r["model_seconds"] for r in rows)
        direct_s = sum(d["stages"].get(name, 0.0) for _, d in rounds)
        model_total += model
        rate = sum(r["rows_in"] for r in rows) / secs if secs else float("inf")
        lines.append(f"| {name} | {rows[0]['rows_in']} | {rows[0]['rows_out']} | {secs:.2f} | "
                     f"{model:.2f} | {secs - model:.2f} | {rate:.2f} | {direct_s:.2f} |")
    wall = sum(part["wall"] for part, _ in rounds)
    load = sum(d["load"] for _, d in rounds)
    generate = sum(d["generate"] for _, d in rounds)
    outside = wall - model_total - load
    same = sum(d["same"] for _, d in rounds)
    total = sum(d["total"] for _, d in rounds)
    lines += [
        "",
        (f"- pipeline wall time (inline runs, model loading included): {wall:.2f} s, of which "
         f"model calls {model_total:.2f} s"),
        (f"- direct `create_backend(...).complete/chat`, the same calls: {load + generate:.2f} s "
         f"({load:.2f} s loading + {generate:.2f} s generating)"),
        (f"- **pipeline overhead (wall - model calls - model loading, over model calls): "
         f"{outside:.2f} s = {outside / model_total:.1%}** (target < 10%)"),
        (f"- wall against wall: pipeline {wall:.2f} s vs direct {load + generate:.2f} s = "
         f"{wall / (load + generate) - 1:+.1%}; model calls pipeline/direct "
         f"{model_total / generate:.2f}x (the same calls: the difference is other processes' "
         f"load on the shared cores, see the load average)"),
        f"- identical texts, pipeline vs direct: {same} of {total} requests",
    ]
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    doc = path.read_text() if path.exists() else f"{MARK_START}\n{MARK_END}\n"
    head, _, rest = doc.partition(MARK_START)
    _, _, tail = rest.partition(MARK_END)
    path.write_text(f"{head}{MARK_START}\n{text}\n{MARK_END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=4, help="mined samples")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--shard-size", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2,
                        help="pipeline/direct pairs; even rounds run direct first (ABBA)")
    parser.add_argument("--write", type=Path, help="replace the marked section of this file")
    args = parser.parse_args()

    threads = os.cpu_count() or 1
    before = machine()
    # warm the page cache so neither side pays the first read of the weights
    from arenaforge.pipeline.models import load_registry
    registry = load_registry(ROOT / "configs" / "models.yaml")
    for model_id in (QWEN, SMOL):
        create_backend(registry[model_id], n_threads=threads).close()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        for i in range(args.rounds):
            workdir = Path(tmp) / f"round{i}"
            if i % 2:  # direct first: replay the previous round's calls, then run anew
                direct = direct_part(rounds[-1][0], threads)
                part = run_pipeline_part(workdir, args)
            else:
                part = run_pipeline_part(workdir, args)
                close_process_resources()
                direct = direct_part(part, threads)
            close_process_resources()
            rounds.append((part, direct))
    text = report(rounds, before, machine(), args)
    print(text)
    if args.write:
        write_section(args.write, text)


if __name__ == "__main__":
    main()
