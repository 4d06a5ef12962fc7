"""``arenaforge inspect``: a run's funnel and leaderboard, or one stage's schema and rows.

Printed to stdout: tables at the terminal's width (ids and numbers whole, the rest folded,
low-value columns dropped when narrow), full rows when piped, or JSON with ``as_json``. The run
directory is a local path or a URI (``s3://bucket/runs/r1``); everything is read through the
store.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from arenaforge.pipeline.filesystem import display
from arenaforge.pipeline.layout import AUDIT_REPORT, LEADERBOARD, RATINGS
from arenaforge.pipeline.progress import Col, fit_table, funnel_table, stdout_console
from arenaforge.pipeline.store import RunStore
from rich.json import JSON

# artifacts of the rate and audit stages that the summary shows

# A human view shortens string values longer than this (instructions, answers); --json does not.
_SAMPLE_CHARS = 2000


def inspect_run(run_dir: Path | str, stage: str | None = None, rows: int = 3,
                as_json: bool = False) -> None:
    """Print what a run directory holds, as tables or (``as_json``) as one JSON document.

    Raises:
        FileNotFoundError: not a run directory.
        KeyError: the stage has no complete output.
    """
    info = run_summary(run_dir) if stage is None else stage_summary(run_dir, stage, rows)
    out = stdout_console()
    if as_json:
        out.file.write(json.dumps(_jsonable(info), indent=2, default=str, ensure_ascii=False,
                                  allow_nan=False) + "\n")
    elif stage is None:
        board = RunStore(run_dir).read_artifact(LEADERBOARD) if info["leaderboard"] else None
        _print_summary(out, info, board.decode("utf-8") if board is not None else None)
    else:
        _print_stage(out, info)


def run_summary(run_dir: Path | str) -> dict[str, Any]:
    """The manifest's facts: stages in pipeline order, ratings and report paths when present.

    Raises:
        FileNotFoundError: not a run directory.
    """
    store, manifest = _open(run_dir)
    ratings = store.read_artifact(RATINGS)
    if ratings is not None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        ratings = pq.read_table(pa.BufferReader(ratings)).to_pylist()
    present = {relpath for relpath in (LEADERBOARD, AUDIT_REPORT) if store.has_artifact(relpath)}
    return {"run_dir": store.location, "config_hash": manifest.get("config_hash"),
            "code_version": manifest.get("code_version"),
            "stages": [{"stage": name, **info} for name, info in _in_pipeline_order(manifest)],
            "ratings": ratings,
            "leaderboard": _shown(store, LEADERBOARD) if LEADERBOARD in present else None,
            "audit_report": _shown(store, AUDIT_REPORT) if AUDIT_REPORT in present else None}


def _shown(store: RunStore, relpath: str) -> str:
    """An artifact's location for a reader: a local path, or a URI without its options."""
    return display(store.artifact_location(relpath))


def stage_summary(run_dir: Path | str, stage: str, rows: int = 3) -> dict[str, Any]:
    """One complete stage: row and shard counts, schema and the first ``rows`` rows.

    Raises:
        FileNotFoundError: not a run directory.
        KeyError: the stage has no complete output.
    """
    store, manifest = _open(run_dir)
    stage_store = store.stage(stage)
    success = stage_store.success()
    if success is None:
        done = sorted(manifest.get("stages", {}))
        raise KeyError(f"stage {stage!r} is not complete in {store.location} "
                       f"(complete: {done})")
    table = stage_store.read()
    return {"stage": stage, "rows": table.num_rows, "shards": success["shards"],
            "schema": [{"name": f.name, "type": str(f.type), "nullable": f.nullable}
                       for f in table.schema],
            "sample": table.slice(0, rows).to_pylist()}


def _open(run_dir: Path | str) -> tuple[RunStore, dict[str, Any]]:
    store = RunStore(run_dir)
    try:
        manifest = store.manifest()
    except OSError as exc:  # an unreachable endpoint, a bucket that does not exist
        raise FileNotFoundError(f"{store.location}: cannot read the run directory: {exc}") from None
    if not manifest:
        raise FileNotFoundError(f"{store.location}: no manifest.json, not an arenaforge run "
                                "directory")
    return store, manifest


def _print_summary(out, info: dict[str, Any], leaderboard: str | None) -> None:
    # free text is soft-wrapped: the terminal wraps it, no newline splits a path or an id
    out.print(f"run {info['run_dir']}  config {info['config_hash']}  "
              f"code {info['code_version']}", markup=False, soft_wrap=True)
    width = out.width
    if info["stages"]:
        out.print(funnel_table(info["stages"], width=width))
    if leaderboard:
        out.print(leaderboard, markup=False, soft_wrap=True)
    if info["audit_report"]:
        out.print(f"audit report: {info['audit_report']}", markup=False, soft_wrap=True)
    out.print(fit_table([Col("stage", whole=True), Col("status", whole=True)],
                        [[s["stage"], s.get("status", "?")] for s in info["stages"]], width,
                        title="stages"))


def _print_stage(out, info: dict[str, Any]) -> None:
    out.print(f"{info['stage']}: {info['rows']} rows, {info['shards']} shards", markup=False,
              soft_wrap=True)
    out.print(fit_table([Col("column", whole=True), Col("type"), Col("nullable", True, 1)],
                        [[f["name"], f["type"], str(f["nullable"])] for f in info["schema"]],
                        out.width, title="schema"))
    for row in info["sample"]:
        out.print(JSON(json.dumps(_jsonable(row, _SAMPLE_CHARS), default=str,
                                  ensure_ascii=False)), soft_wrap=True)


def _jsonable(value: Any, max_chars: int | None = None) -> Any:
    """NaN and infinities as ``null`` (JSON has no spelling for them); with ``max_chars``,
    longer strings shortened with a marker saying how much is left out.

    Example:
        >>> _jsonable({"x": [float("nan"), "abcdef"]}, max_chars=3)
        {'x': [None, 'abc... [3 more chars; --json]']}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str) and max_chars is not None and len(value) > max_chars:
        return f"{value[:max_chars]}... [{len(value) - max_chars} more chars; --json]"
    if isinstance(value, dict):
        return {k: _jsonable(v, max_chars) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, max_chars) for v in value]
    return value


def _in_pipeline_order(manifest: dict) -> list[tuple[str, dict]]:
    """The manifest's stages in the order they run (the manifest's JSON keys are sorted)."""
    from arenaforge.stages import PIPELINE

    stages = manifest.get("stages", {})
    rank = {name: i for i, name in enumerate(PIPELINE)}
    return sorted(stages.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0]))
