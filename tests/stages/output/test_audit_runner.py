"""``rate`` and ``audit`` under the real runner, store and RunContext with the report hook, then
``build_report``."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
from arenaforge.pipeline.apps.report import build_report, report_after_run
from arenaforge.pipeline.context import RunContext
from arenaforge.pipeline.executors import InlineExecutor
from arenaforge.pipeline.runner import run_stages
from arenaforge.pipeline.stage import StageConfig, StageSpec
from arenaforge.pipeline.store import RunStore
from arenaforge.stages.arena.rate import STAGE as RATE
from arenaforge.stages.arena.rate import RateConfig
from arenaforge.stages.output.audit import STAGE as AUDIT
from arenaforge.stages.output.audit import AuditConfig
from test_audit_stage import split_tables
from test_audit_stats import synthetic_audit

ROOT = Path(__file__).resolve().parents[3]


class Empty(StageConfig):
    pass


def fixed_stage(name: str, table: pa.Table) -> StageSpec:
    """An upstream stage that emits a prepared table (stands in for answer/judge/verify)."""
    return StageSpec(name=name, config=Empty, run=lambda t, cfg, ctx: t,
                     plan=lambda cfg, ctx: table, sharded=False,
                     outputs=tuple(table.column_names))


def test_rate_and_audit_in_a_real_run(tmp_path):
    judge, verify = split_tables(synthetic_audit(n=120, seed=9), untested=20)
    answer = verify[["instruction_id", "model"]].assign(response="r", code="c")
    specs = [fixed_stage("answer", pa.Table.from_pandas(answer, preserve_index=False)),
             fixed_stage("judge", pa.Table.from_pandas(judge, preserve_index=False)),
             fixed_stage("verify", pa.Table.from_pandas(verify, preserve_index=False)),
             RATE, AUDIT]
    cfgs = {"answer": Empty(), "judge": Empty(), "verify": Empty(),
            "rate": RateConfig(n_bootstrap=20), "audit": AuditConfig(gate_epsilon=0.3)}
    config = SimpleNamespace(seed=0, runner=SimpleNamespace(request_cache=False),
                             models_file=ROOT / "configs" / "models.yaml")
    store = RunStore(tmp_path)
    store.open("t", "t: true\n")
    # the report hook `arenaforge run` hands the runner (the runner imports no application)
    funnel = run_stages(specs, cfgs, RunContext(tmp_path, config, threads=1), store,
                        InlineExecutor(1), 1000, show_progress=False,
                        after_run=(report_after_run,))

    assert funnel.names() == ["answer", "judge", "verify", "rate", "audit"]
    assert funnel[3].rows_out == len(answer) and funnel[4].rows_out == len(verify)
    assert funnel[3].stats["battles_order_flip"] == 120  # the position-biased judge
    assert (tmp_path / "rate" / "leaderboard.md").is_file()
    metrics = json.loads((tmp_path / "audit" / "metrics.json").read_text())
    html = (tmp_path / "audit" / "report.html").read_text()
    assert "<td class=\"l\">verify</td>" in html  # funnel from the completed stages
    assert metrics["judges"]["separated_battles"] > 0
    out = store.stage("audit").read().to_pandas()
    assert {"judge_score", "gate_admitted"} <= set(out.columns)

    (tmp_path / "audit" / "report.html").unlink()
    assert build_report(tmp_path).is_file()  # `arenaforge report RUN_DIR`
    (tmp_path / "audit" / "metrics.json").unlink()
    rebuilt = json.loads(build_report(tmp_path).with_name("metrics.json").read_text())
    assert rebuilt["judges"]["separated_battles"] == metrics["judges"]["separated_battles"]
