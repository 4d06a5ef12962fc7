"""Per-stage wall time and rows/s of the non-model stages on a synthetic arena.

Runs the stages' own ``run`` functions in order, through a real ``RunContext`` on a temporary
run directory (the real sandbox, the embedded MiniLM): ``clean`` (MinHash dedup) on ``--size``
mined requests, ``decontaminate`` and ``compress`` on what survives, then ``tests`` and
``verify`` on three experts' answers for the first ``--answered`` instructions (default: 35%
of ``--size``, the share a real run at 3,600 mined requests answered). ``tests`` talks to
"fast servers": each expert's test-writing reply is ready (``scripts/synth_arena.py``), so the
stage's time is its prompt building, parsing and cross-checking in the sandbox. Data: see
``synth_arena``. Per stage it prints wall time, rows/s, and CPU seconds (this process, its
threads and every sandbox process it started), whose rows per CPU second is the per-core
throughput and much less sensitive than wall time to other processes on the machine.

Usage::

    python scripts/profile_stages.py --size 3600
    python scripts/profile_stages.py --size 3600 --profile /tmp/prof   # + cProfile per stage
    python scripts/profile_stages.py --size 300 --json out.json       # what the slow test reads
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import pyarrow as pa
from arenaforge.pipeline.backends.base import Completion
from arenaforge.pipeline.context import RunContext, close_process_resources
from arenaforge.pipeline.sandbox import SandboxConfig
from arenaforge.pipeline.store import RunStore
from synth_arena import EXPERTS, arena_tables, mined_table

STAGES = ("clean", "decontaminate", "compress", "tests", "verify")


class _FastServer:
    """A backend whose replies are ready: the expert's tests for the task in the prompt."""

    def __init__(self, model_id: str, replies: dict[str, str]):
        self.model_id, self._replies = model_id, replies

    def chat(self, conversations: list, params: Any) -> list[list[Completion]]:
        out = []
        for conv in conversations:
            user = conv[-1]["content"]
            start = user.index("<<<\n") + 4
            text = user[start:user.index("\n>>>", start)]
            out.append([Completion(self._replies.get(text, ""), "stop")])
        return out


class ProfileContext(RunContext):
    """A real run context whose model backends are ``_FastServer``s."""

    replies: ClassVar[dict[str, dict[str, str]]] = {}

    def backend(self, model_id: str) -> Any:
        from arenaforge.pipeline.context import _TimedBackend

        return _TimedBackend(_FastServer(model_id, self.replies[model_id]), self)


def _publish(run_dir: Path, stage: str, table: pa.Table) -> None:
    """Store ``table`` as a complete stage output, so that later stages ``ctx.read`` it."""
    store = RunStore(run_dir).stage(stage)
    store.write_shard(0, table, pa.table({"reason": pa.array([], pa.string())}), {})
    store.mark_success({"shards": 1, "fingerprint": f"profile-{time.time()}"})


def cpu_seconds() -> float:
    """CPU time of this process, its reaped children and every live descendant (the sandbox
    servers and the job processes they reaped): what the stages cost, whatever the load."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    parent, ticks = {}, {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(entry.name)] = int(fields[1])
            ticks[int(entry.name)] = sum(int(x) for x in fields[11:15])  # u, s, cu, cs time
    me, hz = os.getpid(), os.sysconf("SC_CLK_TCK")
    for pid, used in ticks.items():
        p = parent.get(pid)
        while p is not None and p not in (me, 0, 1):
            p = parent.get(p)
        if p == me and pid != me:
            total += used / hz
    return total


def _timed(name: str, fn: Any, profile_dir: Path | None) -> tuple[Any, float, float, str]:
    prof = cProfile.Profile() if profile_dir else None
    start, cpu0 = time.perf_counter(), cpu_seconds()
    if prof:
        prof.enable()
    out = fn()
    if prof:
        prof.disable()
    wall = time.perf_counter() - start
    cpu = cpu_seconds() - cpu0
    top = ""
    if prof:
        profile_dir.mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(profile_dir / f"{name}.prof"))
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
        top = buf.getvalue()
        (profile_dir / f"{name}.txt").write_text(top)
    return out, wall, cpu, top


def run_stages(size: int, answered: int | None, run_dir: Path, stages: tuple[str, ...],
               workers: int, seed: int, profile_dir: Path | None) -> list[dict]:
    """Run the stages in order; one result dict per stage asked for (rows in, wall, CPU).

    ``clean`` and ``decontaminate`` also run, untimed, when a later stage needs their output.
    """
    from arenaforge.stages.instructions import clean, decontaminate
    from arenaforge.stages.output import compress
    from arenaforge.stages.verification import tests as testgen
    from arenaforge.stages.verification import verify

    config = SimpleNamespace(seed=seed, experts=list(EXPERTS), models_file=None,
                             sandbox=SandboxConfig(workers=workers),
                             runner=SimpleNamespace(request_cache=False))
    ctx = ProfileContext(run_dir, config, threads=workers)
    run_dir.mkdir(parents=True, exist_ok=True)
    plan = {
        "clean": (clean.run, clean.CleanConfig()),
        "decontaminate": (decontaminate.run, decontaminate.DecontaminateConfig()),
        "compress": (compress.run, compress.CompressConfig()),
        "tests": (testgen.run, testgen.TestGenConfig(authors=list(EXPERTS))),
        "verify": (verify.run, verify.VerifyConfig()),
    }
    last = max(STAGES.index(s) for s in stages)
    if "verify" in stages and "tests" not in stages:
        raise SystemExit("verify needs the tests stage's output: include tests")
    inputs, outputs, results = {"clean": mined_table(size, seed)}, {}, []
    for name in STAGES[:last + 1]:
        if name == "decontaminate":
            inputs["decontaminate"] = outputs["clean"]
        if name == "compress":
            inputs["compress"] = outputs["decontaminate"]
        if name == "tests":
            # Answers for the first instructions decontaminate kept (compress keeps a diverse
            # few; a real run answers what it kept at its budget, here the sizes of the issue).
            n = answered if answered is not None else round(size * 0.35)
            answers, replies, rate = arena_tables(outputs["decontaminate"].slice(0, n), seed)
            ProfileContext.replies = replies
            _publish(run_dir, "rate", rate)
            inputs["tests"] = inputs["verify"] = answers
        if name not in stages and name not in ("clean", "decontaminate"):
            continue
        run, cfg = plan[name]
        table = inputs[name]
        ctx.model_seconds = 0.0
        result, wall, cpu, top = _timed(name, lambda run=run, cfg=cfg, table=table:
                                        run(table, cfg, ctx), profile_dir)
        out = outputs[name] = result.table if hasattr(result, "table") else result
        if name == "tests":
            _publish(run_dir, "tests", out)
        if name in stages:
            results.append({
                "stage": name, "rows_in": table.num_rows, "rows_out": out.num_rows,
                "wall_s": round(wall, 3), "model_s": round(ctx.model_seconds, 3),
                "cpu_s": round(cpu, 3),
                "rows_per_s": round(table.num_rows / wall, 1) if wall else None,
                "rows_per_cpu_s": round(table.num_rows / cpu, 1) if cpu > 0 else None,
                "profile_top": top})
    return results


def main(args: argparse.Namespace) -> list[dict]:
    """Run the harness, print a table, optionally write JSON; returns the per-stage results."""
    stages = tuple(s for s in STAGES if s in args.stages.split(","))
    with tempfile.TemporaryDirectory(prefix="af-profile-") as tmp:
        run_dir = Path(args.run_dir) if args.run_dir else Path(tmp) / "run"
        try:
            results = run_stages(args.size, args.answered, run_dir, stages, args.workers,
                                 args.seed, Path(args.profile) if args.profile else None)
        finally:
            close_process_resources()
    load = os.getloadavg()
    print(f"size {args.size}, workers {args.workers}, load average "
          f"{load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}")
    print(f"{'stage':<14}{'rows in':>9}{'rows out':>10}{'wall s':>9}{'model s':>9}{'rows/s':>9}"
          f"{'CPU s':>9}{'rows/CPU s':>12}")
    for r in results:
        print(f"{r['stage']:<14}{r['rows_in']:>9}{r['rows_out']:>10}{r['wall_s']:>9.2f}"
              f"{r['model_s']:>9.2f}{r['rows_per_s']:>9.1f}{r['cpu_s']:>9.2f}"
              f"{r['rows_per_cpu_s'] or 0:>12.1f}")
    total = sum(r["wall_s"] - r["model_s"] for r in results)
    print(f"non-model total: {total:.2f} s")
    if args.profile:
        for r in results:
            print(f"\n== {r['stage']} (cProfile, cumulative) ==\n{r['profile_top']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"size": args.size, "load": load,
                                               "stages": results}, indent=1))
    return results


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=3600, help="mined requests")
    parser.add_argument("--answered", type=int, default=None,
                        help="instructions answered for tests/verify (default 35%% of --size)")
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--workers", type=int, default=2, help="sandbox workers and threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", default=None, help="default: a temporary directory")
    parser.add_argument("--profile", default=None, help="directory for cProfile output")
    parser.add_argument("--json", default=None, help="write the results here")
    return parser.parse_args(argv)


if __name__ == "__main__":
    main(parse_args())
