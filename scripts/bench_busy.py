"""Does the pipeline keep a served expert busy? Its occupancy per stage against a client that
saturates the same engine alone.

A served model has a bounded capacity (vLLM runs at most ``max_num_seqs`` sequences at once), so
the question for a stage that waits on it is not how many requests it sends but how full it
keeps that engine. Here every expert is an engine of ``--slots`` sequence slots behind
OpenAI-compatible HTTP on 127.0.0.1 (``load_server.Engine``: each sequence holds a slot for its
simulated time, the rest queue), and every sequence it runs is recorded.

1. **Alone**: a client that saturates one engine (``4 * slots`` threads sending answer
   requests back to back, ``--alone-requests`` of them) measures what full means on this
   machine: the engine's occupancy over that window.
2. **The pipeline**: ``arenaforge run`` (the real CLI, a local Ray, the real sandbox) on
   ``--instructions`` requests through the same engines, with ``max_concurrency`` at the slot
   count and ``runner.model_workers`` as given. For each engine and each kind of request
   (answers, test writing, judge and difficulty readings, ...) the occupancy over the window
   from its first to its last sequence of that kind, and the ratio to the alone figure.

Prints a table and writes ``--json``. The target: each stage that waits on an expert keeps it
at least 90% as busy as the saturating client.

Usage::

    python scripts/bench_busy.py --instructions 600 --slots 16 --json /tmp/busy.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import yaml
from load_replies import Expert, Prompts
from load_server import CHATML, Engine, Meter, _Server, make_handler
from trust_world import instruction_rows, write_jsonl

EXPERTS = {"expert-1": 0.85, "expert-2": 0.7, "expert-3": 0.6}


def serve(slots: int, ms_token: float, ms_prompt: float) -> tuple[dict, dict]:
    prompts = Prompts()
    servers, engines = {}, {}
    for name, skill in EXPERTS.items():
        engines[name] = Engine(slots)
        handler = make_handler(Expert(name, skill, prompts), Meter(), ms_token, ms_prompt,
                               engines[name])
        server = _Server(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[name] = server
    return servers, engines


def saturate(port: int, engine: Engine, name: str, requests: int, threads: int,
             instructions: list[str]) -> dict:
    """``requests`` answer requests from ``threads`` threads, back to back."""
    import httpx

    todo = iter(range(requests))
    lock = threading.Lock()

    def worker() -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}/v1", timeout=120) as client:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                text = instructions[i % len(instructions)]
                client.post("/chat/completions", json={
                    "model": name, "max_tokens": 512, "seed": i,
                    "messages": [{"role": "user", "content": text}]}).raise_for_status()

    before = len(engine.records)
    start = time.perf_counter()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    end = time.perf_counter()
    mine = engine.records[before:]
    return {"requests": requests, "threads": threads, "wall_s": round(end - start, 2),
            "sequences_per_s": round(len(mine) / (end - start), 2),
            "occupancy": round(engine.occupancy(start, end), 4)}


def write_config(workdir: Path, ports: dict[str, int], source: Path, slots: int,
                 model_workers: int | None) -> Path:
    models = [{"id": name, "backend": "openai", "family": f"busy-{i}", "role": "expert",
               "base_url": f"http://127.0.0.1:{port}/v1", "model_name": name,
               "chat_template_source": "registry", "chat_template": CHATML,
               "stop": ["<|im_end|>"], "n_ctx": 8192,
               "options": {"max_concurrency": slots, "timeout_s": 120,
                           "prompts_per_request": 32}}
              for i, (name, port) in enumerate(ports.items())]
    registry = workdir / "models.yaml"
    registry.write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    runner = {"kind": "ray", "ray_address": "local", "shard_size": 64}
    if model_workers is not None:
        runner["model_workers"] = model_workers
    config = {
        "name": "busy", "seed": 0, "models_file": str(registry), "experts": list(EXPERTS),
        "artifacts_dir": str(workdir / "runs"), "runner": runner,
        "mine": {"source": str(source), "languages": ["Python"]},
        "difficulty": {"protocol": "logprob", "judges": ["expert-3"]},
        "compress": {"budget": 1.0, "min_distance": None},
        "answer": {"experts": ["expert-1", "expert-2"]},
        "judge": {"protocol": "pointwise_logprob", "judges": ["expert-3"]},
        "tests": {"authors": ["expert-1", "expert-2"], "tests_per_author": 3,
                  "inputs_per_author": 2},
        "repair": {"max_rounds": 1},
    }
    path = workdir / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def per_kind(engine: Engine) -> dict[str, dict]:
    """Occupancy per kind of request, over the window of that kind's sequences."""
    out = {}
    kinds = sorted({k for k, _, _ in engine.records})
    for kind in kinds:
        spans = [(s, e) for k, s, e in engine.records if k == kind]
        start, end = min(s for s, _ in spans), max(e for _, e in spans)
        out[kind] = {"sequences": len(spans), "window_s": round(end - start, 2),
                     "occupancy": round(engine.occupancy(start, end), 4)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instructions", type=int, default=600)
    parser.add_argument("--slots", type=int, default=16, help="sequences an engine runs at once")
    parser.add_argument("--ms-per-token", type=float, default=2.0)
    parser.add_argument("--ms-per-prompt-token", type=float, default=0.1)
    parser.add_argument("--alone-requests", type=int, default=None,
                        help="requests of the saturating client (default: 20 per slot)")
    parser.add_argument("--model-workers", type=int, default=None,
                        help="runner.model_workers (default: the config's)")
    parser.add_argument("--min-sequences", type=int, default=200,
                        help="report kinds with at least this many sequences")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the run directory here")
    args = parser.parse_args(argv)
    servers, engines = serve(args.slots, args.ms_per_token, args.ms_per_prompt_token)
    ports = {name: s.server_address[1] for name, s in servers.items()}
    rows = instruction_rows(args.instructions, seed=0)
    alone = saturate(ports["expert-1"], engines["expert-1"], "expert-1",
                     args.alone_requests or 20 * args.slots, 4 * args.slots,
                     [r["instruction"] for r in rows])
    print(f"alone: {json.dumps(alone)}")
    for engine in engines.values():
        engine.records.clear()

    workdir = args.keep or Path(tempfile.mkdtemp(prefix="bench-busy-"))
    workdir.mkdir(parents=True, exist_ok=True)
    source = write_jsonl(workdir / "instructions.jsonl", rows)
    config = write_config(workdir, ports, source, args.slots, args.model_workers)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    start = time.perf_counter()
    with (workdir / "run.log").open("w") as log:
        rc = subprocess.run([sys.executable, "-m", "arenaforge.pipeline.cli", "run", str(config),
                             "--fresh", "--quiet"], cwd=workdir, stdout=log,
                            stderr=subprocess.STDOUT, env=env, check=False).returncode
    wall = time.perf_counter() - start
    if rc != 0:
        print(f"arenaforge run failed (exit {rc}); see {workdir / 'run.log'}", file=sys.stderr)
        return rc
    result = {"instructions": args.instructions, "slots": args.slots,
              "model_workers": args.model_workers, "cpus": os.cpu_count(),
              "wall_s": round(wall, 1), "alone": alone, "pipeline": {}}
    print(f"\n{'engine':<10} {'kind':<22} {'sequences':>9} {'window s':>9} {'occupancy':>9} "
          f"{'vs alone':>8}")
    for name, engine in engines.items():
        kinds = per_kind(engine)
        result["pipeline"][name] = kinds
        for kind, k in kinds.items():
            k["vs_alone"] = round(k["occupancy"] / alone["occupancy"], 4)
            if k["sequences"] >= args.min_sequences:
                print(f"{name:<10} {kind:<22} {k['sequences']:>9} {k['window_s']:>9} "
                      f"{k['occupancy']:>9.1%} {k['vs_alone']:>8.2f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
