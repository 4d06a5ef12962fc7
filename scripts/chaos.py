"""Faults at scale: does a run that is killed, starved and lied to end with the clean dataset?

One clean run and one faulted run of the whole pipeline, both the real ``arenaforge run`` on
a local Ray (runner.kind ray, the real sandbox) over N instructions, against five stand-in
experts on loopback (``scripts/fault_server.py``: the load generator's deterministic
OpenAI-compatible servers, so the clean dataset is reproducible). The N instructions are mined
from those servers (``--mine served``, the default: each expert renders the Magpie pre-query
prompt of its chat template and samples N/5 raw completions, seeded, on ``/completions``; the
stand-ins answer a request of some task family, a function of the prompt and the seed), so
``mine`` meets the kills and the faults like every later stage; ``--mine file`` reads them
from a JSONL instead (``scripts/scale_instructions.py``, no model call). The faulted run
suffers:

* ``--kills K``: K SIGKILLs of the whole run (its session: driver, Ray, workers, sandboxes),
  each at a random moment of a stage, the stages taken in pipeline order so the kills spread
  over all of them; each kill is followed by a resume (``arenaforge run`` again);
* ``--server-faults RATE``: that share of HTTP requests, throughout, answered with a fault
  drawn evenly from HTTP 500, HTTP 503, a timeout, a connection reset mid-reply, a truncated
  JSON body, a non-JSON body, an empty completion and a reply far slower than the rest; with
  RATE > 0 also one expert's server down mid-stage for longer than the client waits
  (``down_wait_s``): the run must stop naming that server, and finish when resumed after it
  is back;
* ``--disk-full``: the run directory is a tmpfs (root only; without it this is skipped and
  said so) filled up during a stage; the run must stop with an error, and finish when resumed
  after the space is freed;
* ``--node-loss``: one attempt runs on a local two-node Ray cluster whose worker node is
  killed mid-stage; the stage must finish on the node left.

Then every stage's table and the dataset of the faulted run are compared with the clean
run's, row by row by key (``scripts/chaos_compare.py``). ``duplicates`` and ``lost`` must be
0; a row that a fault changed (dropped after its retries) is listed with why, apart. Each
request is retried ``--retries`` times (the registry's ``max_retries``, 3 by default): with
0, the faults a retry absorbs change rows instead, which shows that each costs only its own
rows (``--allow-changes`` then accepts a dataset that differs). The exit code is 1 when a row
was lost or doubled, an attempt misbehaved (failed when it should have gone on, hung, stopped
without saying why) or, unless ``--allow-changes``, the dataset is not the clean run's.

Usage::

    python scripts/chaos.py --instructions 1000 --kills 50 --server-faults 0.05 --disk-full \\
        --json chaos.json
    python scripts/chaos.py --instructions 60 --server-faults 0.1 --retries 0 --node-loss \\
        --allow-changes

The JSON object has ``instructions``, ``mine`` (served or file), ``kills`` (done),
``server_faults`` (the rate), ``faults_by_kind`` (injected, per kind: the servers' and
``sigkill``, ``disk_full``, ``server_down``, ``node_loss``), ``requests`` (the faulted run's),
``faults_by_stage`` (per stage that sent them: its requests and the faults they met, by kind;
``tokenize``: the logprob protocols' token checks), ``resumes``, ``duplicates``, ``lost``,
``changed``,
``dataset_equal_to_clean``, ``wall_s`` (the whole benchmark, clean run included), the events
(stage, moment, exit code and message of each), ``problems`` and the per-stage comparison; a
short table goes to stdout. ``--workdir`` keeps the runs and each attempt's log.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml
from bench_scale import EXPERTS, write_run_files
from chaos_compare import compare_runs
from chaos_events import MODEL_STAGES, ChaosRun
from fault_server import ChaosExperts, FaultPlan
from scale_instructions import write_jsonl

# The stand-in experts answer in milliseconds: a client that waits TIMEOUT_S has given up on
# a request that will not come; SLOW_S is far slower than the rest yet inside the timeout.
TIMEOUT_S, SLOW_S, DOWN_WAIT_S = 5.0, 2.0, 10.0


def write_files(workdir: Path, experts: ChaosExperts, n: int, seed: int, retries: int,
                overrides: list[str], mine: str = "served") -> tuple[Path, list[str], list[str]]:
    """The instructions, registry and run config (``bench_scale``'s, with the client's
    timeouts of a chaos run and ``retries`` per request; with ``mine`` "served" the experts
    mine ``n`` instructions between them instead of reading the file); returns the config,
    the configured stages and those of them that call the servers."""
    source = write_jsonl(workdir / "instructions.jsonl", n, seed=seed)
    config = write_run_files(workdir, experts.ports, source, "chaos", shard_size=64)
    registry = workdir / "models.yaml"
    models = yaml.safe_load(registry.read_text())
    for entry in models["models"]:
        entry["options"].update(timeout_s=TIMEOUT_S, down_wait_s=DOWN_WAIT_S, backoff_s=0.2,
                                max_retries=retries)
    registry.write_text(yaml.safe_dump(models, sort_keys=False))
    if mine == "served":
        run = yaml.safe_load(config.read_text())
        run["mine"] = {"languages": ["Python"],
                       "samples_per_language": -(-n // len(run["experts"]))}
        config.write_text(yaml.safe_dump(run, sort_keys=False))
    from arenaforge.pipeline.config import load_config

    cfg = load_config(config, overrides)
    served = [s for s in MODEL_STAGES if s != "mine" or cfg.mine.source is None]
    return config, list(cfg.stages), [s for s in cfg.stages if s in served]


def run_clean(run: ChaosRun) -> dict[str, float]:
    """The clean run, to the end; returns each stage's wall time (seconds)."""
    attempt = run.start(fresh=True)
    rc = attempt.wait(run.timeout_s)
    if rc != 0:
        attempt.kill()
        raise RuntimeError(f"the clean run failed (exit {rc}):\n{attempt.output()}")
    stats = json.loads((run.run_dir / "stats.json").read_text())
    return {name: s.get("wall_seconds_last_attempt") or 0.0 for name, s in stats.items()}


def disk_mb(run_dir: Path) -> int:
    """A small disk for the faulted run: room for three times the clean run directory."""
    used = sum(f.stat().st_size for f in run_dir.rglob("*") if f.is_file())
    return 64 + 3 * used // 2**20


def print_table(report: dict[str, Any]) -> None:
    print(f"\n== chaos: {report['instructions']} instructions, {report['kills']} kills, "
          f"server faults {report['server_faults']:.0%}, {report['resumes']} resumes, "
          f"wall {report['wall_s']:.0f} s (clean run {report['clean_wall_s']:.0f} s)")
    print("faults: " + ", ".join(f"{k} {v}" for k, v in report["faults_by_kind"].items()))
    print("server faults by stage: " + ", ".join(
        f"{stage} {sum(v for k, v in c.items() if k != 'requests')}/{c['requests']}"
        for stage, c in report["faults_by_stage"].items()))
    print(f"{'stage':<14}{'rows clean':>11}{'faulted':>9}{'lost':>6}{'dup':>5}{'changed':>9}"
          f"{'extra':>7}{'kills':>7}")
    kills = report["kills_by_stage"]
    for name, s in report["comparison"]["stages"].items():
        print(f"{name:<14}{s['rows_clean']:>11}{s['rows_faulted']:>9}{s['lost']:>6}"
              f"{s['duplicates']:>5}{s['changed']:>9}{s['extra']:>7}{kills.get(name, 0):>7}")
    print(f"duplicates {report['duplicates']}, lost {report['lost']}, changed "
          f"{report['changed']}; dataset equal to the clean run's: "
          f"{report['dataset_equal_to_clean']} ({report['comparison']['dataset_rows_faulted']} "
          f"rows)")
    for problem in report["problems"]:
        print(f"PROBLEM: {problem}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instructions", type=int, required=True)
    parser.add_argument("--mine", choices=("served", "file"), default="served",
                        help="served: the experts mine the instructions from their (faulty) "
                             "servers; file: read them from a JSONL, no model call")
    parser.add_argument("--kills", type=int, default=0, help="SIGKILLs of the whole run")
    parser.add_argument("--server-faults", type=float, default=0.0, metavar="RATE",
                        help="share of requests answered with a fault (0 to 1)")
    parser.add_argument("--disk-full", action="store_true",
                        help="fill the run directory's filesystem during a stage")
    parser.add_argument("--node-loss", action="store_true",
                        help="lose a node of a local two-node Ray cluster mid-stage")
    parser.add_argument("--retries", type=int, default=3,
                        help="max_retries of each request (0: every fault that a retry would "
                             "absorb changes a row instead)")
    parser.add_argument("--allow-changes", action="store_true",
                        help="a dataset that differs from the clean run's (rows a fault changed "
                             "after their retries, the point of --retries 0) is not a failure")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--seed", type=int, default=0, help="instructions, kills and faults")
    parser.add_argument("--workdir", type=Path, help="keep the runs here (default: temporary)")
    parser.add_argument("--timeout-s", type=float, default=3 * 3600,
                        help="longest an attempt may run")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for both runs (repeatable)")
    args = parser.parse_args(argv)
    if (not 0 <= args.server_faults <= 1 or min(args.kills, args.retries) < 0
            or args.instructions < 1):
        parser.error("--server-faults is a share (0 to 1), --kills and --retries >= 0, "
                     "--instructions >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    begin = time.perf_counter()
    plan = FaultPlan(rate=0.0, seed=args.seed, hold_s=TIMEOUT_S + 1.5, slow_s=SLOW_S)
    experts = ChaosExperts(EXPERTS, plan)
    # Ray's sockets live under its temp dir: keep the path short, and ours alone
    ray_tmp = Path(tempfile.mkdtemp(prefix="chaos-ray-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(ray_tmp), COLUMNS="500", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN=secrets.token_hex(32))
    runs: list[ChaosRun] = []
    try:
        with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
            work = args.workdir or Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            config, stages, calls = write_files(work, experts, args.instructions, args.seed,
                                                args.retries, args.set, args.mine)
            clean = ChaosRun(config, work / "clean", work / "logs" / "clean", env, args.set,
                             args.timeout_s)
            runs.append(clean)
            clean_start = time.perf_counter()
            walls = run_clean(clean)
            clean_wall = time.perf_counter() - clean_start
            plan.restart(args.server_faults)
            faulted = ChaosRun(config, work / "faulted", work / "logs" / "faulted", env,
                               args.set, args.timeout_s, experts=experts,
                               rng=random.Random(args.seed), walls=walls, stages=stages,
                               model_stages=calls)
            runs.append(faulted)
            faulted.run(args.kills, server_down=args.server_faults > 0,
                        disk_full=args.disk_full, node_loss=args.node_loss,
                        ray_tmp=ray_tmp, disk_mb=disk_mb(clean.run_dir))
            comparison = compare_runs(clean.run_dir, faulted.run_dir, stages)
            for run in runs:
                run.close()
    finally:
        for run in runs:  # the benchmark failed: no attempt outlives it
            run.close()
        experts.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    report = {
        "instructions": args.instructions,
        "mine": args.mine,
        "kills": faulted.kills_done,
        "kills_requested": args.kills,
        "server_faults": args.server_faults,
        "retries": args.retries,
        "faults_by_kind": {**plan.counts(), **faulted.event_counts()},
        "requests": plan.requests,
        "faults_by_stage": plan.by_stage(),
        "resumes": faulted.resumes,
        "duplicates": comparison["duplicates"],
        "lost": comparison["lost"],
        "changed": comparison["changed"],
        "extra": comparison["extra"],
        "dataset_equal_to_clean": comparison["dataset_equal_to_clean"],
        "wall_s": round(time.perf_counter() - begin, 1),
        "clean_wall_s": round(clean_wall, 1),
        "faulted_wall_s": round(faulted.wall_s, 1),
        "kills_by_stage": faulted.kills_by_stage(),
        "events": faulted.events,
        "problems": faulted.problems,
        "comparison": comparison,
    }
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0 if healthy(report, args.allow_changes) else 1


def healthy(report: dict[str, Any], allow_changes: bool = False) -> bool:
    """No row lost or doubled, no attempt that misbehaved, and (unless ``allow_changes``) the
    dataset equal to the clean run's.

    >>> healthy({"duplicates": 0, "lost": 0, "problems": [], "dataset_equal_to_clean": False})
    False
    """
    return (report["duplicates"] == 0 and report["lost"] == 0 and not report["problems"]
            and (allow_changes or report["dataset_equal_to_clean"] is True))


if __name__ == "__main__":
    sys.exit(main())
