"""``arenaforge inspect``: a run's funnel and leaderboard, or one stage's schema and rows."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from pipeline.progress import console, funnel_table
from pipeline.store import RunStore


def inspect_run(run_dir: Path, stage: str | None = None, rows: int = 3) -> None:
    """Print what a run directory holds.

    Raises:
        FileNotFoundError: not a run directory.
        KeyError: the stage has no complete output.
    """
    store = RunStore(run_dir)
    manifest = store.manifest()
    if not manifest:
        raise FileNotFoundError(f"{run_dir}: no manifest.json, not an arenaforge run directory")
    if stage is None:
        _summary(store, manifest)
        return
    stage_store = store.stage(stage)
    if stage_store.success() is None:
        done = sorted(manifest.get("stages", {}))
        raise KeyError(f"stage {stage!r} is not complete in {run_dir} (complete: {done})")
    table = stage_store.read()
    console.print(f"[bold]{stage}[/bold]: {table.num_rows} rows, "
                  f"{stage_store.success()['shards']} shards")
    console.print(str(table.schema))
    for row in table.slice(0, rows).to_pylist():
        console.print_json(json.dumps(row, default=str, ensure_ascii=False)[:4000])


def _summary(store: RunStore, manifest: dict) -> None:
    console.print(f"run {store.root}  config {manifest.get('config_hash')}  "
                  f"code {manifest.get('code_version')}")
    funnel = [{"stage": name, **info} for name, info in _in_pipeline_order(manifest)]
    if funnel:
        console.print(funnel_table(funnel))
    leaderboard = store.root / "rate" / "leaderboard.md"
    if leaderboard.is_file():
        console.print(leaderboard.read_text())
    report = store.root / "audit" / "report.html"
    if report.is_file():
        console.print(f"audit report: {report}")
    table = Table(title="stages")
    table.add_column("stage")
    table.add_column("status")
    for name, info in _in_pipeline_order(manifest):
        table.add_row(name, info.get("status", "?"))
    console.print(table)


def _in_pipeline_order(manifest: dict) -> list[tuple[str, dict]]:
    """The manifest's stages in the order they run (the manifest's JSON keys are sorted)."""
    from stages import PIPELINE

    stages = manifest.get("stages", {})
    rank = {name: i for i, name in enumerate(PIPELINE)}
    return sorted(stages.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0]))
