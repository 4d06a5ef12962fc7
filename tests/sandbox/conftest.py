"""Shared pools and side-effect probes for the sandbox tests."""

from __future__ import annotations

import os

import pytest
from sandbox_support import (  # noqa: F401  (re-exported for the tests)
    ISOLATED_MODES,
    SUITE,
    UID_BASE,
    PoolUnderTest,
    _problems,
    processes_of_uids,
    read_proc,
    requires_isolation,
)


@pytest.fixture(scope="module", params=(*ISOLATED_MODES, SUITE))
def sandbox(request):
    if _problems():
        pytest.skip(f"sandbox isolation unavailable: {_problems()}")
    under_test = PoolUnderTest(request.param, timeout_s=5.0, memory_mb=256)
    yield under_test
    under_test.pool.close()


@pytest.fixture
def host_victim(tmp_path):
    """A host file and directory an attacker would like to delete or overwrite."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.chmod(tmp_path, 0o777)
    os.chmod(victim, 0o666)  # even world-writable: only the mount namespace protects it
    return victim
