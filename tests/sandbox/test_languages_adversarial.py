"""Hostile programs in every language (hostile_programs.py) are contained, as test_adversarial
checks for Python jobs: each test asserts the verdict AND the absence of side effects on the
host, that the pool holds no process of its uid beyond its server, and that it still runs a
correct program afterwards.

Python and C run by default; the other languages (a second or more to compile each) and the
compiler bombs (each runs into its compile limit) are slow tests.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import hostile_programs as hostile
import pytest
from arenaforge.pipeline.sandbox import SandboxConfig, SandboxPool
from arenaforge.pipeline.sandbox.languages import (
    COMPILE_ERROR,
    LANGUAGE_IDS,
    OK,
    ProgramJob,
    toolchain,
)
from arenaforge.pipeline.sandbox.result import MEMORY
from arenaforge.stages.verification.harness import complete_signature, function_job, grade
from arenaforge.stages.verification.harness.cases import CallCase
from sandbox_support import UID_BASE, processes_of_uids, requires_isolation

pytestmark = requires_isolation
ROOT = Path(__file__).resolve().parents[2]
QUICK = ("python", "c")
GOOD = {"python": "print(input())", "c": '#include <stdio.h>\nint main(void) { char b[64];'
        ' if (scanf("%63s", b) == 1) puts(b); return 0; }'}


def languages():
    for lang in LANGUAGE_IDS:
        yield pytest.param(lang, marks=[] if lang in QUICK else [pytest.mark.slow], id=lang)


@pytest.fixture(scope="module")
def pool():
    with SandboxPool.from_config(SandboxConfig(workers=1, uid_base=UID_BASE + 50)) as p:
        yield p


def _require(lang: str) -> None:
    if not toolchain(lang).available:
        pytest.skip(f"{lang} toolchain not installed")


def run(pool, lang, source, **kw):
    kw.setdefault("timeout_s", 2.0)
    kw.setdefault("memory_mb", 256)
    return pool.run_programs([ProgramJob(lang, source, stdins=("",), **kw)])[0]


def assert_clean(pool) -> None:
    """No process of the pool's uid but its server; a correct program still passes."""
    uids = {w.slot.uid for w in pool._workers}
    deadline = time.monotonic() + 3
    while len(processes_of_uids(uids)) > len(uids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(processes_of_uids(uids)) <= len(uids), processes_of_uids(uids)
    for lang, source in GOOD.items():
        result = pool.run_programs([ProgramJob(lang, source, stdins=("alive",))])[0]
        assert result.runs[0].stdout == "alive\n", result


@pytest.mark.parametrize("lang", list(languages()))
def test_fork_bomb(pool, lang):
    _require(lang)
    start = time.monotonic()
    result = run(pool, lang, hostile.FORK_BOMB[lang], timeout_s=2.0)
    assert result.compile.ok, result.compile.stderr
    assert result.runs[0].status != OK, result.runs[0]
    assert time.monotonic() - start < 30
    assert_clean(pool)


@pytest.mark.parametrize("lang", list(languages()))
def test_memory_bomb(pool, lang):
    _require(lang)
    result = run(pool, lang, hostile.MEMORY_BOMB[lang], memory_mb=128, timeout_s=10)
    assert result.compile.ok, result.compile.stderr
    assert result.runs[0].status == MEMORY, result.runs[0]
    assert_clean(pool)


@pytest.fixture
def host_victim(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.chmod(tmp_path, 0o777)
    os.chmod(victim, 0o666)  # world-writable: only the mount namespace protects it
    return victim


@pytest.mark.parametrize("lang", list(languages()))
def test_writes_outside_the_work_dir(pool, lang, host_victim):
    _require(lang)
    plant = host_victim.parent / "planted.txt"
    source = (hostile.WRITE_OUTSIDE[lang].replace("@VICTIM@", str(host_victim))
              .replace("@PLANT@", str(plant)).replace("@PROJECT@", str(ROOT)))
    result = run(pool, lang, source)
    assert result.compile.ok, result.compile.stderr
    assert host_victim.read_text() == "precious" and not plant.exists()
    for path in ("/usr/planted", "/etc/planted", "/root/planted", ROOT / "planted"):
        assert not Path(path).exists()
    assert "pwned" not in (ROOT / "pipeline/sandbox/inside/server.py").read_text()
    assert_clean(pool)


@pytest.mark.parametrize("lang", list(languages()))
def test_the_host_is_not_readable(pool, lang, tmp_path):
    _require(lang)
    secret = tmp_path / "secret.txt"
    secret.write_text("token-7f3a9c")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o644)
    source = (hostile.READ_HOST[lang].replace("@SECRET@", str(secret))
              .replace("@PROJECT@", str(ROOT)))
    result = run(pool, lang, source)
    assert result.compile.ok, result.compile.stderr
    out = result.runs[0].stdout + result.runs[0].stderr
    readme = (ROOT / "README.md").read_text().splitlines()[0]
    assert "token-7f3a9c" not in out and "root:" not in out and readme not in out
    assert "denied" in out  # it did run and try
    assert_clean(pool)


@pytest.mark.parametrize("lang", list(languages()))
def test_the_network_is_unreachable(pool, lang):
    _require(lang)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.setblocking(False)
    try:
        port = server.getsockname()[1]
        result = run(pool, lang, hostile.NETWORK[lang].replace("@PORT@", str(port)), timeout_s=5)
        assert result.compile.ok, result.compile.stderr
        assert "connected" not in result.runs[0].stdout, result.runs[0].stdout
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
    assert_clean(pool)


@pytest.mark.parametrize("lang", list(languages()))
def test_processes_outside_cannot_be_killed(pool, lang):
    _require(lang)
    victim = subprocess.Popen(["sleep", "60"])
    try:
        source = hostile.KILL_OUTSIDE[lang].replace("@VICTIM_PID@", str(victim.pid))
        result = run(pool, lang, source)
        assert result.compile.ok, result.compile.stderr
        time.sleep(0.2)
        assert victim.poll() is None  # still running
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    assert_clean(pool)


@pytest.mark.parametrize("lang", list(languages()))
def test_forged_results_do_not_pass(pool, lang):
    _require(lang)
    cases = [CallCase((x,), 2 * x) for x in (1, 2, 3)]
    sig = complete_signature("def f(x: int) -> int", cases)
    result = pool.run_programs([function_job(lang, hostile.FORGED[lang], sig, cases)])[0]
    assert result.compile.ok, result.compile.stderr
    assert not any(v.passed for v in grade(cases, result)), result.runs
    assert_clean(pool)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(hostile.COMPILER_BOMBS))
def test_compiler_bombs_are_the_programs_compile_error(pool, name):
    lang, source = hostile.COMPILER_BOMBS[name]
    _require(lang)
    start = time.monotonic()
    result = pool.run_programs([ProgramJob(lang, source, stdins=("",), compile_timeout_s=5,
                                           compile_memory_mb=512)])[0]
    assert result.status == COMPILE_ERROR and result.sandbox_fault is None, result.compile
    assert time.monotonic() - start < 20
    assert_clean(pool)
