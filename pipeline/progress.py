"""Live per-stage progress (rows done, rows/s, ETA) and the end-of-run funnel table."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

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
# Width of a command's output when stdout is not a terminal: wide enough that no row wraps.
_PIPED_WIDTH = 10_000
# A folding column (paths, commands) gets this many characters before a narrow table drops one.
_FOLD_MIN = 30


class _RowsPerSecond(TextColumn):
    def __init__(self) -> None:
        super().__init__("")

    def render(self, task: Any) -> Any:
        from rich.text import Text

        speed = task.finished_speed or task.speed
        return Text(f"{speed:6.2f} rows/s" if speed else "     - rows/s", style="cyan")


class Progress:
    """One bar per stage on a terminal, one line per finished shard in a log; a no-op when
    disabled (tests, ``--quiet``).

    Bars go to stderr when it is a terminal. When stdout or stderr is not one (``arenaforge run
    > run.log``, nohup, CI, a cluster job's log) each finished shard also prints a line, to
    stdout if that is the log, so a log shows progress and not only the final funnel.
    """

    def __init__(self, enabled: bool = True, bars: bool | None = None,
                 lines: TextIO | None | bool = None):
        self.enabled = enabled
        self._bars = console.is_terminal if bars is None else bars
        if lines is None:
            lines = (sys.stdout if not sys.stdout.isatty() else
                     sys.stderr if not sys.stderr.isatty() else False)
        self._lines: TextIO | None = lines if enabled and lines else None
        self._bar: _RichProgress | None = None
        self._tasks: dict[str, Any] = {}
        self._state: dict[str, dict[str, Any]] = {}

    def __enter__(self) -> Progress:
        if self.enabled and self._bars:
            self._bar = _RichProgress(
                TextColumn("[bold]{task.description:<14}"), BarColumn(), MofNCompleteColumn(),
                TaskProgressColumn(), _RowsPerSecond(), TimeElapsedColumn(), TextColumn("eta"),
                TimeRemainingColumn(), console=console, transient=False)
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def _line(self, text: str) -> None:
        if self._lines is not None:
            print(f"{time.strftime('%H:%M:%S')} {text}", file=self._lines, flush=True)

    def start(self, stage: str, total: int, done: int = 0, shards: int | None = None,
              shards_done: int = 0, why: str | None = None) -> None:
        if self._bar is not None:
            self._tasks[stage] = self._bar.add_task(stage, total=max(total, 1), completed=done)
        self._state[stage] = {"rows": done, "total": total, "shards": shards,
                              "shards_done": shards_done, "start": time.perf_counter(),
                              "rows_at_start": done}
        resumed = f", {shards_done} done before" if shards_done else ""
        reason = f" ({why})" if why else ""
        self._line(f"{stage}: start{reason}: {total} rows in {shards} shards{resumed}")

    def skip(self, stage: str, total: int) -> None:
        if self._bar is not None:
            self._bar.add_task(f"{stage} (done)", total=max(total, 1), completed=max(total, 1))
        self._line(f"{stage}: complete, skipped ({total} rows)")

    def advance(self, stage: str, rows: int) -> None:
        """A shard of ``rows`` input rows finished."""
        if self._bar is not None and stage in self._tasks:
            self._bar.advance(self._tasks[stage], rows)
        state = self._state.get(stage)
        if state is None:
            return
        state["rows"] += rows
        state["shards_done"] += 1
        elapsed = time.perf_counter() - state["start"]
        rate = (state["rows"] - state["rows_at_start"]) / elapsed if elapsed > 0 else 0.0
        self._line(f"{stage}: shard {state['shards_done']}/{state['shards']} done, rows "
                   f"{state['rows']}/{state['total']}, {elapsed:.1f} s, {rate:.2f} rows/s")

    def finish(self, stage: str) -> None:
        if self._bar is not None and stage in self._tasks:
            task = self._tasks[stage]
            self._bar.update(task, completed=self._bar.tasks[task].total)
        state = self._state.get(stage)
        if state is not None:
            self._line(f"{stage}: complete in {time.perf_counter() - state['start']:.1f} s")


def render_funnel(funnel: Any, seconds: float | None = None) -> None:
    """The end-of-run table on stderr: fitted to a terminal; in a log (a file or a pipe, for
    which rich assumes 80 columns) as wide as its cells need, so no column is cut."""
    if console.is_terminal:
        console.print(funnel_table(funnel, seconds, console.width))
    else:  # Console.print(width=) cannot exceed the console's own width
        Console(file=console.file, width=_PIPED_WIDTH, highlight=False).print(
            funnel_table(funnel, seconds))


def stdout_console() -> Console:
    """A console for a command's output (tables, JSON) on the current ``sys.stdout``.

    At the terminal's width when stdout is a terminal; piped (``| grep``), wide enough that
    every table row stays on one line.
    """
    tty = sys.stdout.isatty()
    return Console(file=sys.stdout, width=None if tty else _PIPED_WIDTH, highlight=False)


@dataclasses.dataclass(frozen=True)
class Col:
    """A column of :func:`fit_table`.

    Attributes:
        header: column title.
        whole: never wrapped (ids, numbers); other cells fold at any character.
        drop: order in which a narrow terminal drops the column (1 first); 0 never drops it.
        justify: ``left`` or ``right``.
    """

    header: str
    whole: bool = False
    drop: int = 0
    justify: str = "left"


def fit_table(columns: Sequence[Col], rows: Sequence[Sequence[str]], width: int | None = None,
              title: str | None = None) -> Table:
    """A rich table that never cuts a cell with "…".

    Whole columns keep every character on one line; the others fold. With ``width``, the
    droppable columns go (lowest ``drop`` first) until the whole columns fit with
    ``_FOLD_MIN`` characters for each folding one. Without it nothing is dropped.

    Example:
        >>> cols = [Col("id", whole=True), Col("path"), Col("sha256", drop=1)]
        >>> [c.header for c in fit_table(cols, [["a", "/x", "0" * 64]], width=40).columns]
        ['id', 'path']
    """
    keep = list(range(len(columns)))
    if width is not None:
        def need(i: int) -> int:
            col = columns[i]  # a folding column's header wraps at its spaces
            head = len(col.header) if col.whole else max(map(len, col.header.split()))
            longest = max([head, *(len(ln) for row in rows for ln in str(row[i]).splitlines())])
            return longest if col.whole else min(longest, _FOLD_MIN)

        # each column adds two padding characters and one rule: 3n + 1 beyond the cells
        for i in sorted((i for i, c in enumerate(columns) if c.drop),
                        key=lambda i: columns[i].drop):
            if sum(need(j) for j in keep) + 3 * len(keep) + 1 <= width:
                break
            keep.remove(i)
    table = Table(title=title)
    for i in keep:
        col = columns[i]
        table.add_column(col.header, justify=col.justify, no_wrap=col.whole, overflow="fold")
    for row in rows:
        table.add_row(*(str(row[i]) for i in keep))
    return table


_FUNNEL_COLUMNS = (
    Col("stage", whole=True), Col("rows in", whole=True, justify="right"),
    Col("kept", whole=True, justify="right"), Col("dropped (by reason)", drop=6),
    Col("model s", whole=True, drop=4, justify="right"),
    Col("other s", whole=True, drop=3, justify="right"),
    Col("wall s", whole=True, drop=5, justify="right"),
    Col("busy", whole=True, drop=2, justify="right"),
    Col("cache hits", whole=True, drop=1, justify="right"),
)


def funnel_table(funnel: Any, seconds: float | None = None, width: int | None = None) -> Table:
    """The funnel as a table (narrow ``width``: low-value columns dropped, nothing cut).

    ``funnel`` is a ``arenaforge.pipeline.funnel.Funnel`` (or records with a ``stage`` key, as the
    manifest holds them). A stage recomputed by this run says why under its name.
    """
    from arenaforge.pipeline.funnel import Funnel, StageCounts

    if not isinstance(funnel, Funnel):
        funnel = Funnel(tuple(r if isinstance(r, StageCounts) else
                              StageCounts.from_record(r["stage"], r) for r in funnel))
    rows = []
    for row in funnel:
        dropped = "\n".join(f"{k}={v}" for k, v in sorted(row.dropped.items())) or "-"
        hits, misses = row.cache_hits, row.cache_misses
        cache = f"{hits}/{hits + misses}" if hits + misses else "-"
        # wall and busy describe this attempt only (a resumed stage reran part of its shards)
        wall, used = row.wall_seconds_last_attempt, row.utilization_last_attempt
        busy = f"{used:.0%} of {row.workers}" if used is not None else "-"
        why = row.recomputed if row.recomputed and row.recomputed != "not complete" else None
        if why:
            dropped += f"\n(recomputed: {why})"
        rows.append([row.stage, str(row.rows_in), str(row.rows_out), dropped,
                     f"{row.model_seconds:.1f}", f"{row.other_seconds:.1f}",
                     f"{wall:.1f}" if wall else "-", busy, cache])
    title = "funnel" + (f" ({seconds:.1f} s)" if seconds is not None else "")
    return fit_table(_FUNNEL_COLUMNS, rows, width, title=title)
