"""Is ``verified`` right? The real pipeline against served experts whose right answers are known.

Three experts (``trust_world.BeliefExpert``: ``expert-a`` right with probability 0.85,
``expert-b`` and ``expert-c`` 0.6 each, and the two of them wrong in the *same* way, on answers
and on the tests they write, each with a program of its own unless ``--shared-wrong-program``)
and a judge that is no contestant and no test author answer over
OpenAI-compatible HTTP on 127.0.0.1 (the load generator's handler, ``load_server``). N
instructions from a file (``trust_world.instruction_rows``: ~65% state a worked example) go
through the whole pipeline (``arenaforge run``, the real sandbox, a local Ray), and every emitted
row is checked against the task's reference implementation on 40 inputs.

Printed (and written with ``--json``):

* ``wrong_verified_share``: emitted rows with ``verified: true`` whose code is wrong, over all
  verified rows; ``wrong_verified_with_a_right_answer``: those of them whose instruction had a
  right answer among the experts' (the evidence held the truth and the rules let the wrong one
  through: the figure that must be 0; when every expert holds the same wrong reading, no
  evidence can tell);
* ``dropped_correct_share``: instructions where some expert's answer was right but no verified
  row came out, over the instructions with a right answer;
* ``repaired`` / ``attempted`` (repair stage) with an exact 95% interval;
* ``contradictory_tests``: instructions the evidence could not decide;
* the funnel's drops by reason at emit.

Usage::

    python scripts/bench_verified.py --instructions 1000 --json /tmp/verified.json
    python scripts/bench_verified.py --instructions 100 --cli "python3 -m pipeline.cli"  # A/B
"""

from __future__ import annotations

import argparse
import glob
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

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from load_server import CHATML, Meter, _Server, make_handler
from trust_world import BeliefExpert, correct_code, instruction_rows, write_jsonl

EXPERTS = {"expert-a": 0.85, "expert-b": 0.6, "expert-c": 0.6}
JUDGE = "judge"
TESTER = "tester"  # with --tester-skill: writes tests, answers and judges nothing


def serve(names: dict[str, float], own_programs: bool = True) -> dict[str, _Server]:
    servers = {}
    for name, skill in names.items():
        handler = make_handler(BeliefExpert(name, skill, own_programs), Meter(), 0.0, 0.0)
        server = _Server(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[name] = server
    return servers


def write_run_files(workdir: Path, ports: dict[str, int], source: Path,
                    tester: bool = False) -> Path:
    models = [{"id": name, "backend": "openai", "family": f"world-{i}", "role": "expert",
               "base_url": f"http://127.0.0.1:{port}/v1", "model_name": name,
               "chat_template_source": "registry", "chat_template": CHATML,
               "stop": ["<|im_end|>"], "n_ctx": 8192,
               "options": {"max_concurrency": 16, "timeout_s": 120, "prompts_per_request": 32}}
              for i, (name, port) in enumerate(ports.items())]
    registry = workdir / "models.yaml"
    registry.write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    experts = list(EXPERTS)
    config = {
        "name": "verified", "seed": 0, "models_file": str(registry), "experts": experts,
        "artifacts_dir": str(workdir / "runs"),
        "runner": {"kind": "ray", "ray_address": "local", "shard_size": 64},
        "mine": {"source": str(source), "languages": ["Python"]},
        "difficulty": {"protocol": "logprob", "judges": [JUDGE]},
        # every request is its own task here: keep them all
        "compress": {"budget": 1.0, "min_distance": None},
        # the judge is no contestant and writes no test; the contestants write the tests
        "judge": {"protocol": "pointwise_logprob", "judges": [JUDGE]},
        "tests": {"authors": [*experts, *([TESTER] if tester else [])],
                  "tests_per_author": 3, "inputs_per_author": 3},
        "repair": {"max_rounds": 1},
    }
    path = workdir / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def read_stage(run_dir: Path, stage: str) -> pa.Table:
    files = sorted(f for f in glob.glob(str(run_dir / "stages" / stage / "part-*.parquet"))
                   if not f.endswith(".dropped.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")


def measure(run_dir: Path) -> dict:
    from arenaforge.stages.common.code_extract import extract_code
    from arenaforge.stages.common.intervals import clopper_pearson

    answers = read_stage(run_dir, "answer").select(["instruction_id", "instruction", "code"])
    right_somewhere: dict[str, bool] = {}
    texts = {}
    for r in answers.to_pylist():
        texts[r["instruction_id"]] = r["instruction"]
        ok = correct_code(r["instruction"], r["code"])
        if ok is not None:
            right_somewhere[r["instruction_id"]] = right_somewhere.get(r["instruction_id"],
                                                                       False) or ok
    rows = pa.concat_tables([pq.read_table(f) for f in
                             glob.glob(str(run_dir / "dataset" / "*.parquet"))]).to_pylist()
    verified = [r for r in rows if r["verified"]]
    wrong = []
    for r in verified:
        instruction = texts.get(r["instruction_id"]) or r["messages"][-2]["content"]
        code = extract_code(r["messages"][-1]["content"], "python")
        if correct_code(instruction, code) is False:
            wrong.append(r["instruction_id"])
    verified_ids = {r["instruction_id"] for r in verified}
    # wrong rows of instructions where some expert's answer was right: the evidence held the
    # truth, so the rules, not the experts, let the wrong one through
    wrong_avoidable = [i for i in wrong if right_somewhere.get(i)]
    # an instruction dropped as a rewording of another task kept under another id is no loss
    dropped_rows = pq.read_table(run_dir / "dropped.parquet").to_pylist()
    duplicates = {r["instruction_id"] for r in dropped_rows if r.get("reason") == "duplicate_task"}
    with_right = [i for i, ok in right_somewhere.items() if ok and i not in duplicates]
    dropped = [i for i in with_right if i not in verified_ids]
    stats = json.loads((run_dir / "stats.json").read_text())
    repair = stats.get("repair", {}).get("stats", stats.get("repair", {}))
    attempted, repaired = int(repair.get("repair_attempted", 0)), int(repair.get("repaired", 0))
    emit = stats.get("emit", {})
    return {
        "emitted": len(rows), "verified": len(verified), "wrong_verified": len(wrong),
        "wrong_verified_with_a_right_answer": len(wrong_avoidable),
        "wrong_verified_share": round(len(wrong) / len(verified), 4) if verified else None,
        "instructions_with_a_right_answer": len(with_right),
        "dropped_correct": len(dropped),
        "dropped_correct_share": round(len(dropped) / len(with_right), 4) if with_right else None,
        "repair_attempted": attempted, "repaired": repaired,
        "repaired_ci95": [round(x, 4) for x in clopper_pearson(repaired, attempted)]
        if attempted else None,
        "contradictory_tests": _stat(stats, "contradictory_tests"),
        "emit_dropped": emit.get("dropped", {}),
        "wrong_examples": wrong[:10],
    }


def _stat(stats: dict, key: str) -> float | None:
    for stage in ("verify", "tests"):
        section = stats.get(stage, {})
        found = section.get("stats", section).get(key)
        if found is not None:
            return found
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instructions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the run directory here")
    parser.add_argument("--cli", default=f"{sys.executable} -m arenaforge.pipeline.cli",
                        help="the command that runs arenaforge (an A/B against another checkout)")
    parser.add_argument("--set", action="append", default=[], help="config overrides")
    parser.add_argument("--tester-skill", type=float, default=None,
                        help="add an independent test author of this skill (no contestant, no "
                             "judge; when wrong, wrong the same way as the experts)")
    parser.add_argument("--shared-wrong-program", action="store_true",
                        help="wrong experts emit one program to the byte (one vote), instead of "
                             "each its own (trust_world.BeliefExpert.own_programs)")
    parser.add_argument("--example-share", type=float, default=0.65,
                        help="the share of instructions that state a worked example")
    args = parser.parse_args(argv)
    tester = {TESTER: args.tester_skill} if args.tester_skill is not None else {}
    servers = serve({**EXPERTS, JUDGE: 0.0, **tester}, own_programs=not args.shared_wrong_program)
    ports = {name: s.server_address[1] for name, s in servers.items()}
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="bench-verified-"))
    workdir.mkdir(parents=True, exist_ok=True)
    source = write_jsonl(workdir / "instructions.jsonl",
                         instruction_rows(args.instructions, seed=args.seed,
                                          example_share=args.example_share))
    config = write_run_files(workdir, ports, source, tester=bool(tester))
    cmd = [*args.cli.split(), "run", str(config), "--fresh"]
    for item in args.set:
        cmd += ["--set", item]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    start = time.perf_counter()
    with (workdir / "run.log").open("w") as log:
        rc = subprocess.run(cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, env=env,
                            check=False).returncode
    wall = time.perf_counter() - start
    if rc != 0:
        print(f"arenaforge run failed (exit {rc}); see {workdir / 'run.log'}", file=sys.stderr)
        return rc
    result = {"instructions": args.instructions, "tester_skill": args.tester_skill,
              "own_programs": not args.shared_wrong_program,
              "example_share": args.example_share,
              "wall_s": round(wall, 1),
              **measure(workdir / "runs" / "verified")}
    for key in ("verified", "wrong_verified", "wrong_verified_with_a_right_answer",
                "wrong_verified_share", "dropped_correct",
                "dropped_correct_share", "repaired", "repair_attempted", "repaired_ci95",
                "contradictory_tests", "wall_s"):
        print(f"{key:24} {result[key]}")
    print(f"{'emit drops':24} {json.dumps(result['emit_dropped'])}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
