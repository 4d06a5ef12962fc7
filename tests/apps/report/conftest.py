"""Fixtures of the report tests."""

from __future__ import annotations

import pytest
from arenaforge.stages.output.audit import audit_table

from tests.apps.report.report_data import synthetic_rows


@pytest.fixture(scope="session")
def audit_metrics() -> dict:
    return audit_table(synthetic_rows(), gate_epsilon=0.3)
