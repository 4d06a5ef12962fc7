"""A toy three-stage pipeline (no models) used by the runner tests and the kill/resume test.

``python tests/toy_pipeline.py RUN_DIR [SLEEP_S] [inline|ray]`` runs it to completion; RUN_DIR
may be a URI (``s3://bucket/prefix``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arenaforge.pipeline.context import RunContext
from arenaforge.pipeline.stage import StageConfig, StageResult, StageSpec
from arenaforge.pipeline.store import RunStore
from arenaforge.pipeline.textnorm import instruction_id


class GenConfig(StageConfig):
    n: int = 60


class SquareConfig(StageConfig):
    sleep_s: float = 0.0
    poison: str | None = None  # an instruction text that makes the stage raise
    die_once_file: str | None = None  # first shard to see this path absent kills its process
    slow_row: int | None = None  # the shard holding this row sleeps slow_s more
    slow_s: float = 0.0
    record_pid: bool = False  # add the worker's pid as a column


class FilterConfig(StageConfig):
    modulo: int = 3


def gen_plan(cfg: GenConfig, ctx) -> pa.Table:
    texts = [f"task number {i}" for i in range(cfg.n)]
    return pa.table({"instruction_id": [instruction_id(t) for t in texts], "instruction": texts,
                     "i": list(range(cfg.n))})


def gen_run(table: pa.Table, cfg: GenConfig, ctx) -> pa.Table:
    return table


def square_run(table: pa.Table, cfg: SquareConfig, ctx) -> pa.Table:
    if cfg.die_once_file and not os.path.exists(cfg.die_once_file):
        Path(cfg.die_once_file).write_text(str(os.getpid()))
        os.kill(os.getpid(), 9)
    texts = table.column("instruction").to_pylist()
    if cfg.poison is not None and cfg.poison in texts:
        raise ValueError(f"poisoned row: {cfg.poison}")
    rows = table.column("i").to_pylist()
    time.sleep(cfg.sleep_s + (cfg.slow_s if cfg.slow_row in rows else 0.0))
    table = table.append_column("square", pa.array([i * i for i in rows]))
    if cfg.record_pid:
        table = table.append_column("pid", pa.array([os.getpid()] * table.num_rows))
    return table


def filter_run(table: pa.Table, cfg: FilterConfig, ctx) -> StageResult:
    keep = [i % cfg.modulo != 0 for i in table.column("i").to_pylist()]
    mask = pa.array(keep)
    dropped = table.filter(pc.invert(mask))
    dropped = dropped.append_column("reason", pa.array(["divisible"] * dropped.num_rows))
    return StageResult(table=table.filter(mask), dropped=dropped, stats={"seen": table.num_rows})


GEN = StageSpec(name="gen", config=GenConfig, run=gen_run, plan=gen_plan,
                outputs=("instruction_id", "instruction", "i"))
SQUARE = StageSpec(name="square", config=SquareConfig, run=square_run, source="gen",
                   inputs=("i",), outputs=("square",))
FILTER = StageSpec(name="filter", config=FilterConfig, run=filter_run, source="square",
                   inputs=("square",), outputs=("square",))
SPECS = [GEN, SQUARE, FILTER]


def toy_ctx(run_dir: Path | str) -> RunContext:
    cfg = SimpleNamespace(seed=0, runner=SimpleNamespace(request_cache=False),
                          models_file=Path(__file__).parents[1] / "configs" / "models.yaml")
    return RunContext(run_dir, cfg, threads=1)


def run_toy(run_dir: Path | str, executor, cfgs: dict | None = None, shard_size: int = 2,
            specs=None) -> list[dict]:
    from arenaforge.pipeline.runner import run_stages

    cfgs = {"gen": GenConfig(), "square": SquareConfig(), "filter": FilterConfig(), **(cfgs or {})}
    store = RunStore(run_dir)
    store.open("toy", "toy: true\n")
    return run_stages(specs or SPECS, cfgs, toy_ctx(run_dir), store, executor, shard_size,
                      show_progress=False)


if __name__ == "__main__":
    from arenaforge.pipeline.executors import InlineExecutor, RayExecutor

    sleep = float(sys.argv[2]) if len(sys.argv) > 2 else 0.02
    kind = sys.argv[3] if len(sys.argv) > 3 else "inline"
    executor = InlineExecutor(1) if kind == "inline" else RayExecutor()  # RAY_ADDRESS decides
    where = sys.argv[1]  # a local path or a URI (s3://bucket/prefix)
    funnel = run_toy(where if "://" in where else Path(where), executor,
                     {"square": SquareConfig(sleep_s=sleep)})
    if kind == "ray":
        import ray

        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        print(f"ray nodes: {len(nodes)}")
