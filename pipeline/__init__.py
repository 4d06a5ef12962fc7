"""arenaforge: turn open code LLMs into a verified SFT dataset.

The Python API mirrors the CLI::

    from arenaforge.pipeline import load_config, run
    result = run(load_config("configs/smoke.yaml", ["runner.kind=inline"]))
    print(result.run_dir, result.funnel)
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def load_config(path: Any, overrides: list[str] | None = None) -> Any:
    from arenaforge.pipeline.config import load_config as _load

    return _load(path, overrides)


def run(config: Any, **kwargs: Any) -> Any:
    """Run the configured stages (``arenaforge.pipeline.runner.run_pipeline``), then render
    ``audit/report.html`` when the run audited: what ``arenaforge run`` does, which calls this.

    The report application is the run's post-run hook (``after_run``), handed in here because
    the runner imports no application; more hooks in ``after_run`` run after it.
    """
    from arenaforge.pipeline.apps.report import report_after_run
    from arenaforge.pipeline.runner import run_pipeline

    after_run = (report_after_run, *kwargs.pop("after_run", ()))
    return run_pipeline(config, after_run=after_run, **kwargs)
