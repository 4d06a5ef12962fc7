"""Programs in the real sandbox: every status, stdin per test, a fresh work dir per test, the
compile cache, calls that crash or raise, syntax errors of interpreted languages.

C and the interpreted languages only here (they build in a fraction of a second); the other
compilers are exercised by the slow corpora (test_languages_adversarial, the polyglot corpus).
"""

from __future__ import annotations

import pytest
from arenaforge.pipeline.sandbox import SandboxConfig, SandboxPool
from arenaforge.pipeline.sandbox.languages import (
    COMPILE_ERROR,
    KILLED,
    OK,
    RUNTIME_ERROR,
    ProgramJob,
    ToolchainUnavailable,
    UnknownLanguage,
    toolchain,
)
from arenaforge.pipeline.sandbox.result import MEMORY, OUTPUT_LIMIT, TIMEOUT
from sandbox_support import UID_BASE, requires_isolation

pytestmark = requires_isolation


def needs(*languages: str):
    missing = [lang for lang in languages if not toolchain(lang).available]
    return pytest.mark.skipif(bool(missing), reason=f"toolchain missing: {missing}")


@pytest.fixture(scope="module")
def pool():
    with SandboxPool.from_config(SandboxConfig(workers=2, uid_base=UID_BASE + 40)) as p:
        yield p


def run(pool, language, source, stdins=("",), **kw):
    return pool.run_programs([ProgramJob(language, source, stdins=tuple(stdins), **kw)])[0]


C_STATUSES = {
    OK: 'int main(void) { puts("fine"); return 0; }',
    RUNTIME_ERROR: "int main(void) { int *p = 0; return *p; }",
    TIMEOUT: "int main(void) { volatile long i = 0; for (;;) i++; }",
    MEMORY: ("int main(void) { for (;;) { char *p = malloc(16 << 20); if (!p) return 3;"
             " memset(p, 1, 16 << 20); } }"),
    OUTPUT_LIMIT: 'int main(void) { for (;;) fputs("xxxxxxxxxxxxxxxxxxxxxxx\\n", stdout); }',
    KILLED: "#include <signal.h>\nint main(void) { raise(SIGTERM); return 0; }",
}


@needs("c")
@pytest.mark.parametrize("status", list(C_STATUSES))
def test_every_status_of_a_c_program(pool, status):
    source = "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n" + C_STATUSES[status]
    result = run(pool, "c", source, timeout_s=1.0, memory_mb=64)
    assert result.compile.ok, result.compile.stderr
    assert result.runs[0].status == status, result.runs[0]
    assert result.status == status
    assert result.isolation and "seccomp" in result.limits and "bwrap" in result.limits
    if status == OK:
        assert result.runs[0].stdout == "fine\n" and result.runs[0].exit_code == 0
    if status == TIMEOUT:
        assert result.runs[0].wall_s < 3


@needs("c")
def test_a_compile_error_is_the_programs_failure(pool):
    result = run(pool, "c", "int main(void) { return x; }", stdins=("", ""))
    assert result.status == COMPILE_ERROR and result.sandbox_fault is None
    assert result.compile.exit_code == 1 and "undeclared" in result.compile.stderr
    assert [r.status for r in result.runs] == [COMPILE_ERROR, COMPILE_ERROR]


@needs("c")
def test_each_test_gets_its_stdin_and_a_fresh_work_dir(pool):
    source = r'''#include <stdio.h>
int main(void) {
  long a, b; if (scanf("%ld %ld", &a, &b) != 2) return 1;
  int seen = 0; FILE *f = fopen("marker", "r"); if (f) { seen = 1; fclose(f); }
  FILE *g = fopen("/tmp/marker", "r"); if (g) { seen += 2; fclose(g); }
  f = fopen("marker", "w"); fputs("x", f); fclose(f); g = fopen("/tmp/marker", "w"); fclose(g);
  printf("%ld %d\n", a + b, seen); return 0; }'''
    result = run(pool, "c", source, stdins=("1 2\n", "40 2", "x"))
    assert [r.stdout for r in result.runs[:2]] == ["3 0\n", "42 0\n"]
    assert result.runs[2].status == RUNTIME_ERROR and result.runs[2].exit_code == 1


@needs("c")
def test_a_program_is_compiled_once_and_cached(pool):
    source = '#include <stdio.h>\nint main(void) { puts("cached"); return 0; }'
    first = run(pool, "c", source)
    again = run(pool, "c", source, stdins=("", ""))
    assert not first.compile.cached and again.compile.cached
    assert [r.stdout for r in again.runs] == ["cached\n", "cached\n"]
    assert not run(pool, "c", source + "\n").compile.cached
    other = ProgramJob("c", source + "\n\n", stdins=("",))
    compiled = pool.compile_programs([other, ProgramJob("python", "x", stdins=("",))])
    assert compiled[0].ok and not compiled[0].cached
    assert compiled[1].ok  # nothing to compile: its syntax is checked with its runs
    assert pool.run_programs([other])[0].compile.cached


@needs("python", "javascript")
@pytest.mark.parametrize("language,source", [
    ("python", "def f(:\n    pass\n"), ("javascript", "function f( {\n"),
])
def test_a_syntax_error_of_an_interpreted_language_is_a_compile_error(pool, language, source):
    result = run(pool, language, source, stdins=("", ""))
    assert result.status == COMPILE_ERROR and "SyntaxError" in result.compile.stderr
    assert all(r.status == COMPILE_ERROR for r in result.runs)


@needs("python")
def test_calls_resume_after_a_crash_and_report_exceptions(pool):
    harness = r'''import os, sys
nonce, first = sys.argv[1], int(sys.argv[2])
def say(s): os.write(3, (s + "\n").encode())
for k in range(first, 5):
    say(f"{nonce} s {k}")
    if k == 1: raise SystemExit(0)         # exits during call 1
    if k == 2: say(f"{nonce} x {k} ValueError: no")
    elif k == 3: os.kill(os.getpid(), 9)   # killed during call 3
    else: say(f"{nonce} r {k} [{k}]")
'''
    job = ProgramJob("python", "", calls=5, harness=harness, timeout_s=2)
    result = pool.run_programs([job])[0]
    statuses = [r.status for r in result.runs]
    assert statuses == [OK, RUNTIME_ERROR, RUNTIME_ERROR, KILLED, OK], result.runs
    assert result.runs[0].value == "[0]" and result.runs[4].value == "[4]"
    assert "ValueError" in result.runs[2].message


@needs("python")
def test_fail_fast_skips_the_rest_after_a_first_timeout(pool):
    result = run(pool, "python", "while True: pass\n", stdins=("", "", ""), timeout_s=0.5,
                 fail_fast=True)
    assert result.runs[0].status == TIMEOUT and result.runs[1:] == (None, None)


def test_unknown_languages_and_missing_toolchains_fail_before_any_job(pool, monkeypatch):
    with pytest.raises(UnknownLanguage):
        pool.run_programs([ProgramJob("cobol", "x", stdins=("",))])
    from arenaforge.pipeline.sandbox.languages import installed as tc_module

    missing = tc_module.Toolchain("go", False, problem="Go: `go` not found; install it")
    monkeypatch.setattr(tc_module, "toolchain", lambda lang: missing)
    with pytest.raises(ToolchainUnavailable, match="go. not found"):
        pool.run_programs([ProgramJob("go", "package main", stdins=("",))])
