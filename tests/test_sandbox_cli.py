"""``arenaforge sandbox languages|run``, run as a user runs them (a subprocess), checked as the
contract names them: the keys, the statuses, ``--memory-mb`` bounding the whole job. (Every
status of a run is checked through the Python API in tests/sandbox/test_languages_run.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from arenaforge.pipeline.sandbox import SandboxConfig, self_check
from arenaforge.pipeline.sandbox.languages import LANGUAGE_IDS, RUN_STATUSES, toolchain

CLI = [sys.executable, "-m", "arenaforge.pipeline.cli", "sandbox"]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


needs_sandbox = pytest.mark.skipif(bool(self_check(SandboxConfig())),
                                   reason="sandbox isolation unavailable here")


def test_languages_json_lists_every_language():
    done = cli("languages", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["language"] for r in rows] == list(LANGUAGE_IDS)
    for row in rows:
        assert set(row) == {"language", "available", "version", "compiled"}
        assert isinstance(row["available"], bool)
        assert row["compiled"] == (row["language"] not in ("python", "javascript"))
        if row["available"]:
            assert row["version"]
    python = rows[0]
    assert python["available"] and python["version"].startswith("Python 3.")


def run_json(tmp_path: Path, language: str, source: str, *extra: str, stdin: str | None = None):
    program = tmp_path / "prog.txt"
    program.write_text(source)
    args = ["run", str(program), "--language", language, "--json", *extra]
    if stdin is not None:
        (tmp_path / "in.txt").write_text(stdin)
        args += ["--stdin", str(tmp_path / "in.txt")]
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert {"status", "exit_code", "stdout", "stderr", "wall_s", "isolation"} <= set(row)
    assert row["status"] in RUN_STATUSES and row["isolation"]
    return row


@needs_sandbox
def test_run_a_compiled_program_with_stdin(tmp_path):
    if not toolchain("c").available:
        pytest.skip("gcc not installed")
    row = run_json(tmp_path, "C", '#include <stdio.h>\nint main(void) { long a, b;'
                   ' scanf("%ld %ld", &a, &b); printf("%ld\\n", a + b); return 0; }',
                   stdin="40 2\n")
    assert (row["status"], row["exit_code"], row["stdout"]) == ("ok", 0, "42\n")
    assert row["wall_s"] >= 0 and "seccomp" in row["isolation"]


@needs_sandbox
def test_memory_mb_bounds_the_whole_job(tmp_path):
    # 8 processes of 24 MB each: under any one process's share, over the job's 64 MB
    bomb = ("import os, time\nkids = []\nfor _ in range(8):\n    pid = os.fork()\n"
            "    if pid == 0:\n        b = b'x' * (24 << 20)\n        time.sleep(2)\n"
            "        os._exit(0)\n    kids.append(pid)\n"
            "codes = [os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids]\n"
            "raise SystemExit(1 if any(codes) else 0)\n")
    row = run_json(tmp_path, "python", bomb, "--memory-mb", "64", "--timeout", "10")
    assert row["status"] in ("memory", "runtime_error") and row["status"] != "ok"


def test_run_rejects_bad_arguments(tmp_path):
    program = tmp_path / "p.txt"
    program.write_text("x")
    done = cli("run", str(program), "--language", "cobol", "--json")
    assert done.returncode == 2 and "cobol" in done.stderr
