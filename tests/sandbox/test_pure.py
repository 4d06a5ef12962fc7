"""Pure logic of the sandbox: test compilation, verdict classification, configuration."""

from __future__ import annotations

import marshal

import pydantic
import pytest
from arenaforge.pipeline.sandbox import SandboxConfig, checks
from arenaforge.pipeline.sandbox.prepare import prepare_tests
from arenaforge.pipeline.sandbox.verdict import classify


def _run(tests: str, namespace: dict) -> None:
    """Execute prepared tests with trivial helpers (the harness's real ones are tested live)."""
    def cmp(ops, *vals):
        import operator
        table = {"==": operator.eq, "<": operator.lt, "in": lambda a, b: a in b}
        return all(table[op](vals[i], vals[i + 1]) for i, op in enumerate(ops))
    namespace.update(__af_cmp=cmp, __af_plain=lambda v: v, __af_assert=lambda v: v)
    for chunk in prepare_tests(tests).chunks:
        exec(marshal.loads(chunk.code), namespace)  # noqa: S102


def test_prepare_splits_top_level_asserts():
    prog = prepare_tests("import math\nassert math.pi > 3\nassert 1 < 2 < 3\ndef g():\n    assert 1\n")
    assert [c.kind for c in prog.chunks] == ["stmt", "assert", "assert", "stmt"]
    assert prog.tests_total == 2
    assert [c.lineno for c in prog.chunks] == [1, 2, 3, 4]


def test_prepare_keeps_line_numbers_for_tracebacks():
    prog = prepare_tests("def check(c):\n    x = 1\n    assert c(x) == 2\ncheck(abs)\n")
    ns: dict = {}
    with pytest.raises(AssertionError) as info:
        for chunk in prog.chunks:
            code = marshal.loads(chunk.code)
            ns.update(__af_cmp=lambda ops, a, b: a == b, __af_plain=lambda v: v,
                      __af_assert=lambda v: v)
            exec(code, ns)  # noqa: S102
    tb = info.tb
    while tb.tb_next:
        tb = tb.tb_next
    assert tb.tb_lineno == 3 and tb.tb_frame.f_code.co_filename == "<tests>"


def test_rewritten_asserts_keep_their_meaning():
    _run("assert 1 == 1\nassert [x for x in range(3) if x in (1, 2)] == [1, 2]\nassert not 0\n", {})
    with pytest.raises(AssertionError):
        _run("assert 1 < 2 < 2\n", {})


@pytest.mark.parametrize("bad", ["assert (", "def f(:\n", "(" * 300 + ")" * 300])
def test_prepare_rejects_unparsable_tests(bad):
    with pytest.raises(SyntaxError):
        prepare_tests(bad)


@pytest.mark.parametrize(("verdict", "oom", "expected"), [
    ({"done": True, "exit_code": 0, "ok": 3}, False, "passed"),
    ({"done": True, "exit_code": 0, "ok": 0}, False, "error"),  # no assertion ran
    ({"done": False, "exit_code": 0}, False, "error"),  # ended before the tests finished
    ({"done": True, "exit_code": 137, "ok": 1}, False, "error"),
    ({"done": True, "exit_code": 137}, True, "memory"),
    ({"done": False, "exit_code": 152}, False, "timeout"),  # SIGXCPU
    ({"reason": "timeout", "done": True, "exit_code": 0}, False, "timeout"),
    ({"reason": "output_limit", "exit_code": 0}, False, "output_limit"),
    ({"first_failure": {"kind": "assertion", "name": "AssertionError", "msg": "m"},
      "exit_code": 0}, False, "failed"),
    ({"first_error": {"kind": "runtime", "name": "KeyError", "msg": "m"},
      "first_failure": {"kind": "assertion", "name": "AssertionError", "msg": "m"},
      "done": True, "exit_code": 0}, False, "error"),
    ({"first_error": {"kind": "memory", "name": "MemoryError", "msg": "m"}, "exit_code": 0},
     False, "memory"),
    ({"setup": "unshare: EPERM", "exit_code": 70}, False, "error"),
])
def test_classify(verdict, oom, expected):
    assert classify(verdict, 1.0, oom)[0] == expected


def test_config_is_frozen_and_strict():
    cfg = SandboxConfig()
    assert cfg.mode == "auto" and cfg.workers == "auto"
    with pytest.raises(pydantic.ValidationError, match="extra"):
        SandboxConfig(worker=3)
    with pytest.raises(pydantic.ValidationError):
        SandboxConfig(mode="none")
    with pytest.raises(pydantic.ValidationError):
        cfg.workers = 4


def test_self_check_names_what_is_missing_and_how_to_install(monkeypatch):
    monkeypatch.setattr(checks.shutil, "which", lambda name: None)
    problems = checks._static_problems()
    assert any("bubblewrap" in p and "apt-get install bubblewrap" in p for p in problems)


def test_verdict_codec_roundtrip_and_rejects_nothing_silently():
    from arenaforge.pipeline.sandbox.inside.wire import decode_verdict, encode_verdict

    verdict = {"ok": 3, "done": True, "started": False, "duration_s": 0.25, "setup": None,
               "stdout": "tab\there\nnew line \u00e9 \"quoted\"",
               "first_error": {"phase": "tests", "kind": "runtime", "name": "KeyError", "msg": "x\ny"}}
    decoded = decode_verdict(encode_verdict(verdict))
    assert decoded == {k: v for k, v in verdict.items() if v is not None}


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"solution": None, "tests": "assert 1"}, "solution"),
    ({"solution": "", "tests": b"assert 1"}, "tests"),
    ({"solution": "", "tests": "assert 1", "timeout_s": 0}, "timeout_s"),
    ({"solution": "", "tests": "assert 1", "memory_mb": 8}, "memory_mb"),
])
def test_bad_jobs_name_the_field(kwargs, field):
    from arenaforge.pipeline.sandbox import Job

    with pytest.raises((TypeError, ValueError), match=f"Job.{field}"):
        Job(**kwargs)


def test_auto_pool_size_is_the_cpus_ray_gives_the_worker(ray_local):
    """A shard task holds one CPU, so each worker process runs one slot and a node as many
    slots as the cores it gives to shards; outside Ray, the process's cores."""
    import os

    from arenaforge.pipeline.sandbox.config import pool_size

    @ray_local.remote
    def size(workers):
        return pool_size(workers)

    one = size.options(num_cpus=1).remote("auto")
    two = size.options(num_cpus=2).remote("auto")
    fixed = size.options(num_cpus=1).remote(3)
    assert ray_local.get([one, two, fixed]) == [1, 2, 3]
    assert SandboxConfig().workers == "auto"
    assert pool_size("auto") == len(os.sched_getaffinity(0))  # the driver holds no CPU
    with pytest.raises(pydantic.ValidationError, match="workers: expected 'auto' or 1-256"):
        SandboxConfig(workers=0)
