"""The audit report: one self-contained HTML page (inline CSS, plots as base64 PNG, no JS).

``render_report(metrics, ratings=None, funnel=None)`` fills ``template.html.j2`` with the
metrics dict of ``arenaforge.stages.output.audit.audit_table`` (its schema is that module's
docstring), the ratings table of the ``rate`` stage and the run's funnel. The audit stage writes
only ``audit/metrics.json``; ``build_report`` renders a run's page from it (after a run that
audited, through the post-run hook ``report_after_run`` that ``arenaforge run`` and
``arenaforge.pipeline.run`` hand the runner; ``arenaforge report`` on demand) and
``audit_file`` audits a user's own table (``arenaforge audit``).
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from arenaforge.pipeline import layout
from arenaforge.pipeline.apps.report import plots

TEMPLATE = Path(__file__).with_name("template.html.j2")


def normalise_funnel(funnel: Mapping | Sequence | None) -> list[dict]:
    """Accept a ``Funnel``, the run's ``stats.json`` shape or a list: ``[{stage, rows_in, ...}]``.

    Accepted forms: ``{stage: {"rows_in", "rows_out", "dropped": {reason: n}}}`` (the run's
    ``stats.json``), ``{stage: rows_out}``, or a list of dicts with a ``stage`` key. Stage
    order is kept as given.
    """
    if hasattr(funnel, "as_dicts"):  # arenaforge.pipeline.funnel.Funnel
        funnel = funnel.as_dicts()
    if not funnel:
        return []
    if isinstance(funnel, Mapping):
        items = [{"stage": k, **(v if isinstance(v, Mapping) else {"rows_out": v})}
                 for k, v in funnel.items()]
    else:
        items = [dict(f) for f in funnel]
    for item in items:
        if "stage" not in item:
            raise ValueError(f"funnel entry {item!r} has no 'stage'")
        item.setdefault("rows_in", None)
        item.setdefault("rows_out", None)
        item["dropped"] = dict(item.get("dropped") or {})
    return items


def _num(value, digits: int | None = None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if digits is None:
        return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"
    return f"{value:,.{digits}f}"


def _pct(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{100 * value:.1f}%"


def render_report(metrics: Mapping, ratings: pd.DataFrame | None = None,
                  funnel: Mapping | Sequence | None = None, title: str = "arenaforge audit"
                  ) -> str:
    """The report page as a string.

    Args:
        metrics: ``arenaforge.stages.output.audit.audit_table`` output.
        ratings: ``rate/ratings.parquet`` as a DataFrame (``model, rating, ci_low, ci_high,
            battles, win_rate`` and optionally ``sequential_elo, first_position_win_rate``).
        funnel: the run's funnel, see ``normalise_funnel``.
        title: page title.
    """
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.ChainableUndefined)
    env.filters["num"] = _num
    env.filters["pct"] = _pct
    template = env.from_string(TEMPLATE.read_text(encoding="utf-8"))
    steps = normalise_funnel(funnel)
    board = None
    if ratings is not None and len(ratings):
        board = ratings.copy()
        for col in ("sequential_elo", "first_position_win_rate"):
            if col not in board.columns:
                board[col] = float("nan")
    figures = {
        "funnel": plots.funnel_plot(steps),
        "leaderboard": plots.leaderboard_plot(board) if board is not None else None,
        "reliability": plots.reliability_plot(metrics.get("reliability", [])),
        "position": plots.position_plot(metrics.get("judges", {}).get("position", {})),
        "gate": plots.gate_plot(metrics.get("gate", {})),
    }
    return template.render(
        title=title, generated=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        m=metrics, funnel=steps, plots=figures,
        leaderboard=None if board is None else board.to_dict(orient="records"))


def write_report(out_dir: Path, metrics: Mapping, ratings: pd.DataFrame | None = None,
                  funnel: Mapping | Sequence | None = None) -> Path:
    """Write ``metrics.json`` and ``report.html`` into a local folder; returns the page."""
    from arenaforge.stages.output.audit import metrics_json

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / Path(layout.AUDIT_METRICS).name).write_text(metrics_json(metrics),
                                                           encoding="utf-8")
    page = out_dir / Path(layout.AUDIT_REPORT).name
    page.write_text(render_report(metrics, ratings, funnel), encoding="utf-8")
    return page


def audit_file(path: Path, out_dir: Path) -> Path:
    """Audit a user's table (Parquet, CSV or JSON lines) into ``out_dir``; returns report.html."""
    from arenaforge.stages.output.audit import audit_table

    path = Path(path)
    if path.suffix == ".parquet":
        table = pd.read_parquet(path)
    elif path.suffix == ".csv":
        table = pd.read_csv(path)
    elif path.suffix in (".jsonl", ".json"):
        table = pd.read_json(path, lines=path.suffix == ".jsonl")
    else:
        raise ValueError(f"{path}: expected .parquet, .csv, .jsonl or .json")
    return write_report(out_dir, audit_table(table))


def build_report(run_dir: Any) -> Path | str:
    """(Re)build ``audit/report.html`` of a run (its path, URI or ``RunStore``) from its
    ``audit/metrics.json``.

    Without metrics.json (the audit stage did not run) the metrics are computed from the
    stored ``judge`` and ``verify`` outputs with default settings and no families, and written
    beside the page.
    """
    import io
    import json

    from arenaforge.pipeline.store import RunStore
    from arenaforge.stages.output.audit import audit_table, build_audit_rows, metrics_json

    # a local path or a URI (s3://...)
    store = run_dir if isinstance(run_dir, RunStore) else RunStore(run_dir)
    text = store.read_artifact(layout.AUDIT_METRICS)
    if text is not None:
        metrics = json.loads(text.decode("utf-8"))
    else:
        rows = build_audit_rows(store.stage("judge").read().to_pandas(),
                                store.stage("verify").read().to_pandas())
        metrics = audit_table(rows)
        store.write_artifact(layout.AUDIT_METRICS, metrics_json(metrics))
    ratings = store.read_artifact(layout.RATINGS)
    ratings = pd.read_parquet(io.BytesIO(ratings)) if ratings is not None else None
    return store.write_artifact(layout.AUDIT_REPORT,
                                render_report(metrics, ratings, store.funnel()))


def report_after_run(store: Any, funnel: Any) -> None:
    """The post-run hook of ``arenaforge run`` and ``arenaforge.pipeline.run``
    (``arenaforge.pipeline.runner.AfterRun``): render ``audit/report.html`` from the audit's
    metrics.

    The audit stage writes only ``audit/metrics.json`` (a stage never imports an application,
    nor the runner one); the page shows the metrics, the ratings and the whole funnel, so it is
    rendered again when any stage was recomputed in this run, or when it is missing.
    """
    if not store.has_artifact(layout.AUDIT_METRICS):
        return
    if store.has_artifact(layout.AUDIT_REPORT) and all(s.recomputed is None for s in funnel):
        return
    build_report(store)
