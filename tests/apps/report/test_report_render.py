"""The HTML report: self-contained, escaped, robust to missing parts."""

from __future__ import annotations

import re

import pytest
from arenaforge.pipeline.apps.report import normalise_funnel, render_report

from tests.apps.report.report_data import FUNNEL, RATINGS


def test_report_is_self_contained_with_all_sections(audit_metrics):
    html = render_report(audit_metrics, RATINGS, FUNNEL)
    for section in ("Funnel", "Leaderboard", "Judges against execution", "Position bias",
                    "Judge score vs execution", "Calibrated gate"):
        assert f"<h2>{section}</h2>" in html
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,', html)) == 5
    # nothing fetched from elsewhere: every src/href is inline data
    assert not re.findall(r'(?:src|href)="(?!data:)', html)
    assert "<script" not in html
    assert "near_duplicate: 280" in html and "[1,020, 1,100]" in html
    maj = audit_metrics["judges"]["majority"]
    assert f"{maj['k']} / {maj['n']}" in html


def test_model_names_are_escaped(audit_metrics):
    evil = RATINGS.assign(model=["<script>alert(1)</script>", "beta"])
    html = render_report(audit_metrics, evil)
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_report_without_ratings_or_funnel(audit_metrics):
    html = render_report(audit_metrics)
    assert "No ratings available." in html and "No run statistics were given." in html


def test_normalise_funnel_shapes():
    steps = normalise_funnel(FUNNEL)
    assert [s["stage"] for s in steps] == ["mine", "clean", "audit"]
    assert steps[2] == {"stage": "audit", "rows_out": 120, "rows_in": None, "dropped": {}}
    assert normalise_funnel([{"stage": "x", "rows_out": 1}])[0]["rows_in"] is None
    with pytest.raises(ValueError, match="has no 'stage'"):
        normalise_funnel([{"rows_out": 3}])
