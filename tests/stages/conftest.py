import pytest


@pytest.fixture(scope="session")
def sandbox_pool():
    """One real sandbox pool (2 workers) for the stage tests that execute code.

    Skips, naming what is missing, where the machine lacks the isolation layers (bubblewrap,
    seccomp, a non-root uid); everywhere else the tests run on the real sandbox.
    """
    from arenaforge.pipeline.sandbox import SandboxConfig, SandboxPool, SandboxUnavailable

    try:
        pool = SandboxPool.from_config(SandboxConfig(workers=2))
    except SandboxUnavailable as exc:
        pytest.skip(f"sandbox isolation unavailable here: {exc}")
    yield pool
    pool.close()

