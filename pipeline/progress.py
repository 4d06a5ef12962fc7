"""Live per-stage progress (rows done, rows/s, ETA) and the end-of-run funnel table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as _RichProgress
from rich.table import Table

console = Console(stderr=True)


class _RowsPerSecond(TextColumn):
    def __init__(self) -> None:
        super().__init__("")

    def render(self, task: Any) -> Any:
        from rich.text import Text

        speed = task.finished_speed or task.speed
        return Text(f"{speed:6.2f} rows/s" if speed else "     - rows/s", style="cyan")


class Progress:
    """One bar per stage; a no-op when disabled (tests, ``--quiet``)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._bar: _RichProgress | None = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> Progress:
        if self.enabled:
            self._bar = _RichProgress(
                TextColumn("[bold]{task.description:<14}"), BarColumn(), MofNCompleteColumn(),
                TaskProgressColumn(), _RowsPerSecond(), TimeElapsedColumn(), TextColumn("eta"),
                TimeRemainingColumn(), console=console, transient=False)
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def start(self, stage: str, total: int, done: int = 0) -> None:
        if self._bar is not None:
            self._tasks[stage] = self._bar.add_task(stage, total=max(total, 1), completed=done)

    def skip(self, stage: str, total: int) -> None:
        if self._bar is not None:
            self._bar.add_task(f"{stage} (done)", total=max(total, 1), completed=max(total, 1))

    def advance(self, stage: str, rows: int) -> None:
        if self._bar is not None and stage in self._tasks:
            self._bar.advance(self._tasks[stage], rows)

    def finish(self, stage: str) -> None:
        if self._bar is not None and stage in self._tasks:
            task = self._tasks[stage]
            self._bar.update(task, completed=self._bar.tasks[task].total)


def funnel_table(funnel: list[dict[str, Any]], seconds: float | None = None) -> Table:
    table = Table(title="funnel" + (f" ({seconds:.1f} s)" if seconds is not None else ""))
    for col in ("stage", "rows in", "kept", "dropped (by reason)", "model s", "other s",
                "wall s", "busy", "cache hits"):
        table.add_column(col, justify="left" if col.startswith(("stage", "dropped")) else "right",
                         overflow="fold", no_wrap=col == "stage")
    for row in funnel:
        dropped = "\n".join(f"{k}={v}" for k, v in sorted(row.get("dropped", {}).items())) or "-"
        model_s = row.get("model_seconds", 0.0)
        hits, misses = row.get("cache_hits", 0), row.get("cache_misses", 0)
        cache = f"{hits}/{hits + misses}" if hits + misses else "-"
        # wall and busy describe this attempt only (a resumed stage reran part of its shards)
        wall = row.get("wall_seconds_last_attempt")
        used = row.get("utilization_last_attempt")
        busy = f"{used:.0%} of {row.get('workers')}" if used is not None else "-"
        table.add_row(row["stage"], str(row["rows_in"]), str(row["rows_out"]), dropped,
                      f"{model_s:.1f}", f"{max(row.get('seconds', 0.0) - model_s, 0.0):.1f}",
                      f"{wall:.1f}" if wall else "-", busy, cache)
    return table


def render_funnel(funnel: list[dict[str, Any]], seconds: float | None = None) -> None:
    console.print(funnel_table(funnel, seconds))
