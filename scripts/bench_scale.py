"""The whole pipeline at scale: 5 served experts, N instructions from a file, a local Ray.

Per size N: write N instructions (``scripts/scale_instructions.py``, from ``synth_arena``'s
task families) to a JSONL file; start the load generator (``scripts/load_server.py``: one
OpenAI-compatible server per expert on 127.0.0.1, fixed per-token latency, deterministic
answers that are right with the expert's skill probability); write a registry of 5 ``openai``
experts and a run config (``mine.source`` = the file, ``runner.kind: ray`` on a fresh local
Ray, the real sandbox, the logprob difficulty and judge protocols of ``configs/openai.yaml``);
run ``arenaforge run`` as a subprocess and read the run's ``stats.json``.

What is measured (all from the run's own funnel unless said):

* ``wall_s``: the ``arenaforge run`` process, start to exit (imports and Ray start-up included).
* ``driver_peak_rss_mb``: that process's own peak RSS (``VmHWM`` in ``/proc/PID/status``, read
  every 0.2 s; Ray's workers, raylet and the sandboxes are other processes and not counted);
  ``driver_peak_stage``: the stage running when its RSS was highest;
  ``driver_rss_mb_by_stage``: its highest RSS (sampled once a second) during each stage (the
  last stage's value includes the end of the run: funnel, ``dropped.parquet``).
* per stage: rows in, stage wall (``wall_seconds_last_attempt``), rows/s = rows in / wall, and
  its shards' time split into model calls and the rest; ``io_s``: the workers' reading of
  shard inputs and writing of outputs (outside the shards' time); ``gap_s``: the workers' idle
  time between one shard's end and their next shard's start, summed over workers.
* ``model_s``: simulated model time as the pipeline waits for it: per stage, the shards'
  seconds inside backend calls divided by the stage's concurrent workers, summed. The servers'
  own count (``server_simulated_s``: the sum of every request's latency; ``server_busy_s``:
  the busiest server's wall with at least one request in flight) is reported beside it, and
  ``servers``: per expert, its requests by kind and the most it had in flight at once.
* ``sandbox_s``: the same per-worker time of ``tests``, ``verify`` and ``repair`` outside model
  calls: running answers against tests in the sandbox (plus parsing, which is small).
* ``runner_overhead_s``: wall minus the stages' work, where a stage's work is its shards'
  seconds divided by its concurrent workers, and at most the stage's wall (shards that wait
  together on one service, as ``decontaminate``'s on the embedding service, would count their
  waits side by side): the runner's own time (process and Ray start-up,
  planning shards, fingerprints, shipping and reading shards, writing markers and outputs,
  scheduling gaps and the idle tail of a stage's last shards). ``overhead_share`` =
  ``runner_overhead_s / wall_s`` (0-1). With engines this fast the model time is small, so the
  overhead as a multiple of it, ``overhead_vs_model`` = ``runner_overhead_s / model_s``, is
  reported as well and is not bounded by 1.
* ``model_stages_wall_s`` / ``other_stages_wall_s``: the walls of the stages that call models
  and of the others; ``embedding_stages_share``: ``decontaminate`` plus ``compress`` over the
  run's wall.
* ``cores_by_stage``: per stage, the machine's cores in use (``busy``) and by kind of process
  (the driver, the stage workers, the embedding service, sandboxes, the load generator, Ray's
  own processes), sampled once a second (``scripts/cpu_meter.py``): everything shares the
  machine here, so this says whether a stage waited on its servers or on the CPU.
* ``wall_growth``: per size after the first, wall time and instruction count relative to the
  first size, and their ratio (1.0: linear).

Usage::

    python scripts/bench_scale.py --instructions 5000 20000 50000 --json bench.json
    python scripts/bench_scale.py --instructions 200 --set rate.n_bootstrap=0
    # a user's config as it is (its experts mine the N instructions), 50 ms a request
    python scripts/bench_scale.py --instructions 12000 --config configs/openai.yaml \
        --ms-per-request 50 --ms-per-token 0 --ms-per-prompt-token 0

The tests each answer runs are kept small (two authors, two tests and two generated inputs
each, one repair round) and
each battle has one judge (``judge.max_judges: 1``), sized for 50k instructions in about an
hour on 2 cores (measured: 71 min at commit c42c6a2, readings 32 to a request, bfloat16 MiniLM,
shard size 64; 53.0 min before the evidence rules and emit's task dedup;
docs/PERFORMANCE.md); ``--set`` overrides any config field.
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import yaml
from cpu_meter import KINDS, CpuMeter, cores_by_stage
from load_server import CHATML
from scale_instructions import write_jsonl

EXPERTS = {"expert-1": 0.85, "expert-2": 0.75, "expert-3": 0.65, "expert-4": 0.55,
           "expert-5": 0.45}
SANDBOX_STAGES = ("tests", "verify", "repair")
# logprob readings per HTTP request, as configs/vllm.yaml sends them: a million one-reading
# requests cost ~1 ms of CPU on each end, on the 2 cores the pipeline runs on
PROMPTS_PER_REQUEST = 32


def start_load_server(ms_per_token: float, ms_per_prompt_token: float, log: Path,
                      experts: dict[str, float] | None = None,
                      ms_per_request: float = 0.0) -> tuple[subprocess.Popen, dict[str, int]]:
    """The load generator as a child process (it exits when its stdin closes)."""
    cmd = [sys.executable, str(ROOT / "scripts" / "load_server.py"),
           "--ms-per-token", str(ms_per_token), "--ms-per-prompt-token", str(ms_per_prompt_token),
           "--ms-per-request", str(ms_per_request)]
    for name, skill in (experts or EXPERTS).items():
        cmd += ["--expert", f"{name}={skill}"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=log.open("w"), text=True)
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"load server did not start; see {log}")
    return proc, json.loads(line)


def server_stats(ports: dict[str, int]) -> dict[str, Any]:
    import httpx

    return {name: httpx.get(f"http://127.0.0.1:{port}/stats", timeout=10).json()
            for name, port in ports.items()}


def write_run_files(workdir: Path, ports: dict[str, int], source: Path, name: str,
                    shard_size: int) -> Path:
    """A registry of the served experts and a run config reading ``source``; returns the
    config's path."""
    models = [{"id": e, "backend": "openai", "family": f"bench-{i}", "role": "expert",
               "base_url": f"http://127.0.0.1:{ports[e]}/v1", "model_name": e,
               "chat_template_source": "registry", "chat_template": CHATML,
               "stop": ["<|im_end|>"], "n_ctx": 8192,
               # the load generator answers a list prompt as vLLM does (configs/vllm.yaml)
               "options": {"max_concurrency": 16, "timeout_s": 120,
                           "prompts_per_request": PROMPTS_PER_REQUEST}}
              for i, e in enumerate(EXPERTS)]
    registry = workdir / "models.yaml"
    registry.write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    experts = list(EXPERTS)
    config = {
        "name": name, "seed": 0, "models_file": str(registry), "experts": experts,
        "artifacts_dir": str(workdir / "runs"),
        # "local": a Ray of its own, never a cluster someone else started on this machine
        "runner": {"kind": "ray", "ray_address": "local", "shard_size": shard_size},
        "mine": {"source": str(source), "languages": ["Python"]},
        "difficulty": {"protocol": "logprob"},
        # synthetic tasks are rewordings of ~160 tasks: semantic dedup would cut every size
        # to about the same rows; keep them all so the later stages grow with N
        "compress": {"budget": 1.0, "min_distance": None},
        # what a user of this CPU would set: bfloat16 MiniLM is ~3x faster with AVX512-BF16 or
        # AMX (emulated, slower, without); decontaminate was 15% of the 50k wall in float32
        "embedding_precision": "bfloat16" if bf16_cpu() else "float32",
        # One uninvolved judge per battle (both orders, pointwise: 4 readings per battle, 10
        # battles per instruction): with all three uninvolved experts judging, the load
        # generator's HTTP round trips (~1 ms of CPU per request on each end, on the same 2
        # cores as the pipeline) made judging 36% of the wall at 1,000 (49 of 135 s), and 50k,
        # projected from it, ~1 h 50 min instead of the hour the benchmark is sized for;
        # `--set judge.max_judges=null` restores them.
        "judge": {"protocol": "pointwise_logprob", "max_judges": 1},
        # Two authors, two written tests and two generated inputs each: 8 programs per
        # candidate. The default six inputs made 15 (10.3 augmented rows per instruction at
        # 5k) and the sandbox 41% of the 50k run's wall.
        "tests": {"authors": experts[:2], "tests_per_author": 2, "inputs_per_author": 2},
        "repair": {"max_rounds": 1},
    }
    path = workdir / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def config_models(config: dict[str, Any]) -> list[str]:
    """Every model id a run config names (experts, judges, test authors), in order."""
    ids = [*(config.get("experts") or []), *(config.get("judges") or [])]
    for stage, key in (("judge", "judges"), ("difficulty", "judges"), ("tests", "authors")):
        ids += (config.get(stage) or {}).get(key) or []
    return list(dict.fromkeys(ids))


def write_config_run_files(workdir: Path, ports: dict[str, int], config_file: Path, n: int,
                           name: str) -> Path:
    """A user's run config (``--config``) as it is, its models served by the load generator:
    the registry keeps each model's ``options`` from the config's own registry (batching,
    concurrency), and the experts mine ``n`` instructions between them from their templates
    (``mine.samples_per_language``)."""
    config = yaml.safe_load(config_file.read_text())
    registry_file = (config_file.parent / config.get("models_file", "models.yaml")).resolve()
    served = {m["id"]: m for m in yaml.safe_load(registry_file.read_text())["models"]}
    models = [{"id": e, "backend": "openai", "family": f"bench-{i}", "role": "expert",
               "base_url": f"http://127.0.0.1:{port}/v1", "model_name": e,
               "chat_template_source": "registry", "chat_template": CHATML,
               "stop": ["<|im_end|>"], "n_ctx": 8192,
               "options": {"max_concurrency": 16, "timeout_s": 120,
                           **(served.get(e, {}).get("options") or {})}}
              for i, (e, port) in enumerate(ports.items())]
    registry = workdir / "models.yaml"
    registry.write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    mine = dict(config.get("mine") or {})
    languages = mine.get("languages") or ["Python"]
    mine["samples_per_language"] = -(-n // (len(config["experts"]) * len(languages)))
    runner = dict(config.get("runner") or {}, ray_address="local")
    config.update(name=name, models_file=str(registry), artifacts_dir=str(workdir / "runs"),
                  mine=mine, runner=runner)
    path = workdir / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_precision(run_dir: Path) -> str | None:
    """The precision the run's embeddings were computed at, as compress recorded it (what a
    config's ``auto`` resolved to); None when compress did not run."""
    import pyarrow.parquet as pq

    path = run_dir / "compress" / "embeddings.parquet"
    if not path.is_file():
        return None
    return (pq.read_schema(path).metadata or {}).get(b"precision", b"").decode() or None


def bf16_cpu() -> bool:
    """The CPU computes bfloat16 natively (AVX512-BF16 or AMX)."""
    import torch

    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


class PeakRss:
    """Polls one process's ``VmHWM`` (its own peak resident set) until stopped, and when its
    current RSS (``VmRSS``) was highest."""

    def __init__(self, pid: int, every_s: float = 0.2):
        self.pid, self.every_s, self.peak_kb = pid, every_s, 0
        self.rss_kb, self.peak_at = 0, time.time()
        self.samples: list[tuple[float, int]] = []  # (time, VmRSS kB) once a second
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        status = Path(f"/proc/{self.pid}/status")
        while not self._stop.is_set():
            try:
                fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
                self.peak_kb = max(self.peak_kb, int(fields["VmHWM"].split()[0]))
                rss = int(fields["VmRSS"].split()[0])
            except (OSError, ValueError, KeyError):
                return  # exited
            now = time.time()
            if rss > self.rss_kb:
                self.rss_kb, self.peak_at = rss, now
            if not self.samples or now - self.samples[-1][0] >= 1.0:
                self.samples.append((now, rss))
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def stage_starts(log: Path) -> list[tuple[str, str]]:
    """``(HH:MM:SS, stage)`` of each stage start in a run log's progress lines."""
    starts = []
    for line in log.read_text(errors="replace").splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1].endswith(":") and parts[2].startswith("start"):
            starts.append((parts[0], parts[1][:-1]))
    return starts


def stage_at(starts: list[tuple[str, str]], when: float) -> str | None:
    """The stage running at ``when`` (None before the first stage's start)."""
    clock = time.strftime("%H:%M:%S", time.localtime(when))
    return next((stage for start, stage in reversed(starts) if start <= clock), None)


def rss_by_stage(rss: PeakRss, starts: list[tuple[str, str]]) -> dict[str, float]:
    """The driver's highest sampled RSS (MB) while each stage ran (``start-up`` before)."""
    out: dict[str, float] = {}
    for when, kb in rss.samples:
        stage = stage_at(starts, when) or "start-up"
        out[stage] = round(max(out.get(stage, 0.0), kb / 1024), 1)
    return out


def run_driver(config: Path, overrides: list[str], log: Path, timeout_s: float,
               load_pids: set[int]) -> tuple[int, float, PeakRss, CpuMeter]:
    """``arenaforge run CONFIG --fresh``: (exit code, wall seconds, its RSS meter, the
    machine's CPU meter, which tells the load generator's processes by ``load_pids``)."""
    cmd = [sys.executable, "-m", "arenaforge.pipeline.cli", "run", str(config), "--fresh"]
    for item in overrides:
        cmd += ["--set", item]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
        rss, cpu = PeakRss(proc.pid), CpuMeter(proc.pid, load_pids)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.terminate()
            rc = proc.wait(timeout=60)
    wall = time.perf_counter() - start
    rss.stop()
    cpu.stop()
    return rc, wall, rss, cpu


def summarize(stats: dict[str, dict], wall_s: float, servers: dict[str, dict]) -> dict[str, Any]:
    """The benchmark's numbers from a run's ``stats.json`` (see the module docstring)."""
    from arenaforge.stages import PIPELINE, get_stage

    stages, work_s, model_s, sandbox_s = {}, 0.0, 0.0, 0.0
    by_kind = {"model": 0.0, "other": 0.0}
    for name in sorted(stats, key=lambda n: PIPELINE.index(n) if n in PIPELINE else 99):
        s = stats[name]
        workers = max(int(s.get("workers") or 1), 1)
        stage_wall = s.get("wall_seconds_last_attempt") or 0.0
        # a stage's work is at most its wall: shards that wait together on one service
        # (decontaminate's embeddings) count their waits side by side
        work_s += min(s["seconds"] / workers, stage_wall)
        by_kind["model" if get_stage(name).uses_models else "other"] += stage_wall
        model_s += s["model_seconds"] / workers
        if name in SANDBOX_STAGES:
            sandbox_s += (s["seconds"] - s["model_seconds"]) / workers
        stages[name] = {"rows_in": s["rows_in"], "rows_out": s["rows_out"],
                        "wall_s": round(stage_wall, 2), "workers": workers,
                        "shards": s.get("shards"),
                        "rows_per_s": round(s["rows_in"] / stage_wall, 1) if stage_wall else None,
                        "model_s": round(s["model_seconds"], 2),
                        "other_s": round(s["seconds"] - s["model_seconds"], 2),
                        "io_s": round(s.get("io_seconds_last_attempt", 0.0), 2),
                        "gap_s": round(s.get("gap_seconds_last_attempt", 0.0), 2)}
    overhead = max(wall_s - work_s, 0.0)
    requests = sum(sum(v["requests"].values()) for v in servers.values())
    return {
        "rows_emitted": stats.get("emit", {}).get("rows_out", 0),
        "overhead_share": round(overhead / wall_s, 4) if wall_s else None,
        "runner_overhead_s": round(overhead, 2),
        "outside_stages_s": round(wall_s - sum(v["wall_s"] for v in stages.values()), 2),
        "model_s": round(model_s, 2),
        "overhead_vs_model": round(overhead / model_s, 3) if model_s else None,
        # walls of the stages that call models against the others', and decontaminate plus
        # compress (the embedding stages) as a share of the run's wall
        "model_stages_wall_s": round(by_kind["model"], 2),
        "other_stages_wall_s": round(by_kind["other"], 2),
        "embedding_stages_share": round(sum(stages.get(k, {}).get("wall_s", 0.0) for k in (
            "decontaminate", "compress")) / wall_s, 4) if wall_s else None,
        "sandbox_s": round(sandbox_s, 2),
        "server_requests": requests,
        "server_http_requests": sum(v.get("http_requests", 0) for v in servers.values()),
        "server_simulated_s": round(sum(v["simulated_s"] for v in servers.values()), 2),
        "server_busy_s": round(max((v["busy_s"] for v in servers.values()), default=0.0), 2),
        "server_cpu_s": round(max((v["cpu_s"] for v in servers.values()), default=0.0), 2),
        "servers": {name: {"requests": v["requests"], "max_in_flight": v["max_in_flight"]}
                    for name, v in servers.items()},
        "stages": stages,
    }


def bench_size(n: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Run the pipeline once on ``n`` instructions; returns its JSON entry."""
    size_dir = workdir / f"n{n}"
    size_dir.mkdir(parents=True, exist_ok=True)
    experts = EXPERTS
    if args.config:
        skills = list(EXPERTS.values())
        named = config_models(yaml.safe_load(args.config.read_text()))
        experts = {e: skills[i % len(skills)] for i, e in enumerate(named)}
    server, ports = start_load_server(args.ms_per_token, args.ms_per_prompt_token,
                                      size_dir / "load_server.log", experts,
                                      args.ms_per_request)
    try:
        if args.config:
            config = write_config_run_files(size_dir, ports, args.config, n, f"bench-{n}")
        else:
            source = write_jsonl(size_dir / "instructions.jsonl", n, seed=args.seed)
            config = write_run_files(size_dir, ports, source, f"bench-{n}", args.shard_size)
        rc, wall, rss, cpu = run_driver(config, args.set or [], size_dir / "run.log",
                                        args.timeout_s, {server.pid})
        servers = server_stats(ports)
    finally:
        server.stdin.close()  # the server exits at EOF
        server.wait(timeout=30)
    starts = stage_starts(size_dir / "run.log")
    entry: dict[str, Any] = {"instructions": n, "wall_s": round(wall, 2),
                             "driver_peak_rss_mb": round(rss.peak_kb / 1024, 1),
                             "driver_peak_stage": stage_at(starts, rss.peak_at),
                             "driver_rss_mb_by_stage": rss_by_stage(rss, starts),
                             "cores_by_stage": cores_by_stage(
                                 cpu.samples, lambda when: stage_at(starts, when)),
                             "exit_code": rc}
    stats_file = size_dir / "runs" / f"bench-{n}" / "stats.json"
    entry["embedding_precision"] = run_precision(stats_file.parent)
    if rc != 0 or not stats_file.is_file():
        tail = (size_dir / "run.log").read_text(errors="replace").splitlines()[-15:]
        entry.update(rows_emitted=0, overhead_share=None, error="\n".join(tail))
        return entry
    entry.update(summarize(json.loads(stats_file.read_text()), wall, servers))
    if args.workdir:  # a temporary one is gone when the benchmark ends
        entry["run_dir"] = str(stats_file.parent)
    return entry


def add_growth(entries: list[dict[str, Any]]) -> None:
    """Wall growth of each size relative to the first (1.0 = linear)."""
    base = entries[0]
    for e in entries[1:]:
        size_x = e["instructions"] / base["instructions"]
        wall_x = e["wall_s"] / base["wall_s"] if base["wall_s"] else None
        e["wall_growth"] = {"vs": base["instructions"], "size_x": round(size_x, 2),
                            "wall_x": round(wall_x, 2) if wall_x else None,
                            "wall_x_per_size_x": round(wall_x / size_x, 3) if wall_x else None}


def print_report(entries: list[dict[str, Any]]) -> None:
    for e in entries:
        print(f"\n== {e['instructions']} instructions: wall {e['wall_s']} s, driver peak RSS "
              f"{e['driver_peak_rss_mb']} MB (during {e['driver_peak_stage']}), rows emitted "
              f"{e['rows_emitted']}")
        if "error" in e:
            print(f"FAILED (exit {e['exit_code']}):\n{e['error']}")
            continue
        print(f"{'stage':<14}{'rows in':>9}{'rows out':>9}{'wall s':>9}{'rows/s':>9}"
              f"{'model s':>9}{'other s':>9}{'io s':>8}{'gap s':>8}{'workers':>8}{'shards':>7}")
        for name, s in e["stages"].items():
            print(f"{name:<14}{s['rows_in']:>9}{s['rows_out']:>9}{s['wall_s']:>9}"
                  f"{s['rows_per_s'] or '-':>9}{s['model_s']:>9}{s['other_s']:>9}"
                  f"{s.get('io_s', 0):>8}{s.get('gap_s', 0):>8}{s['workers']:>8}{s['shards'] or '-':>7}")
        print(f"runner overhead {e['runner_overhead_s']} s = {e['overhead_share']:.1%} of wall "
              f"({e['outside_stages_s']} s outside any stage); model time {e['model_s']} s "
              f"(overhead / model = {e['overhead_vs_model']}); sandbox {e['sandbox_s']} s; "
              f"servers: {e['server_requests']} prompts in {e['server_http_requests']} requests, "
              f"{e['server_simulated_s']} s simulated, "
              f"{e['server_cpu_s']} s CPU")
        print(f"stages that call models {e['model_stages_wall_s']} s of wall, the others "
              f"{e['other_stages_wall_s']} s; decontaminate + compress "
              f"{e['embedding_stages_share']:.1%} of the run's wall")
        print_cores(e["cores_by_stage"])
        if "wall_growth" in e:
            g = e["wall_growth"]
            print(f"vs {g['vs']}: {g['size_x']}x instructions, {g['wall_x']}x wall "
                  f"({g['wall_x_per_size_x']} per unit of size)")


def print_cores(cores: dict[str, dict[str, float]]) -> None:
    """The machine's cores in use per stage, by kind of process (``scripts/cpu_meter.py``)."""
    print(f"cores in use ({os.cpu_count()} on this machine), mean per stage:")
    print(f"{'stage':<14}{'busy':>6}" + "".join(f"{k[:12]:>13}" for k in KINDS))
    for stage, row in cores.items():
        print(f"{stage:<14}{row['busy']:>6}" + "".join(f"{row.get(k, 0.0):>13}" for k in KINDS))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instructions", type=int, nargs="+", required=True,
                        help="sizes to run, one after another")
    parser.add_argument("--json", type=Path, help="write the per-size results here")
    parser.add_argument("--ms-per-token", type=float, default=0.2)
    parser.add_argument("--ms-per-prompt-token", type=float, default=0.02)
    parser.add_argument("--ms-per-request", type=float, default=0.0,
                        help="fixed latency of every request on top of the tokens' (ms)")
    parser.add_argument("--config", type=Path,
                        help="run this config as it is (e.g. configs/openai.yaml), its models "
                             "served by the load generator, N instructions mined by its "
                             "experts, instead of the benchmark's own five-expert config")
    # 64, not configs/openai.yaml's 32: the runner's cost is ~12 ms of wall a shard (read,
    # write, Ray's dispatch), 5.6% of a 50k run's wall at 32 once judging and embedding got
    # fast (projected from the 50k run at 32: 181 s in-stage idle over 14.8k shards)
    parser.add_argument("--shard-size", type=int, default=64, help="runner.shard_size")
    parser.add_argument("--seed", type=int, default=0, help="seed of the instructions")
    parser.add_argument("--timeout-s", type=float, default=3 * 3600, help="per size")
    parser.add_argument("--workdir", type=Path,
                        help="keep run directories here (default: a temporary directory)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="config override passed to arenaforge run (repeatable)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    entries: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        workdir = args.workdir or Path(tmp)
        for n in args.instructions:
            entries.append(bench_size(n, args, workdir))
            add_growth(entries)
            print_report(entries[-1:])
            sys.stdout.flush()
            if args.json:  # after every size: a run of hours stopped late keeps what it has
                args.json.write_text(json.dumps(entries, indent=2) + "\n")
    return 0 if all("error" not in e for e in entries) else 1


if __name__ == "__main__":
    sys.exit(main())
