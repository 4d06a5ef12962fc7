"""The languages layer's pure parts: names, Java class detection, verdict classification,
artifacts, the frames a worker sends (no sandbox needed)."""

from __future__ import annotations

import binascii
import signal
import zlib

import pytest
from arenaforge.pipeline.sandbox.languages import (
    COMPILE_ERROR,
    KILLED,
    LANGUAGE_IDS,
    OK,
    RUN_STATUSES,
    RUNTIME_ERROR,
    ProgramJob,
    UnknownLanguage,
    classify,
    language,
    resolve_language,
)
from arenaforge.pipeline.sandbox.languages.catalog import java_classes
from arenaforge.pipeline.sandbox.languages.classify import (
    MAX_ARTIFACT_BYTES,
    artifacts,
    compile_result,
    process_status,
    run_results,
)
from arenaforge.pipeline.sandbox.languages.frames import compile_frame, run_frame, source_files
from arenaforge.pipeline.sandbox.languages.installed import Toolchain
from arenaforge.pipeline.sandbox.result import MEMORY, OUTPUT_LIMIT, TIMEOUT


def test_ids_and_statuses_are_the_contract():
    assert LANGUAGE_IDS == ("python", "cpp", "c", "javascript", "typescript", "java", "go",
                            "rust")
    assert RUN_STATUSES == ("ok", "compile_error", "runtime_error", "timeout", "memory",
                            "output_limit", "killed")


@pytest.mark.parametrize("name,expected", [
    ("C++", "cpp"), ("c++", "cpp"), ("cxx", "cpp"), (" JavaScript ", "javascript"),
    ("node", "javascript"), ("TS", "typescript"), ("TypeScript", "typescript"),
    ("golang", "go"), ("Go", "go"), ("Rust", "rust"), ("rs", "rust"), ("Python", "python"),
    ("py", "python"), ("Java", "java"), ("C", "c"),
])
def test_names_people_write_resolve_to_ids(name, expected):
    assert resolve_language(name) == expected


@pytest.mark.parametrize("name", ["cobol", "", "c#", "javascript2", None, 3])
def test_an_unknown_name_is_an_error_that_names_it(name):
    with pytest.raises(UnknownLanguage) as info:
        resolve_language(name)
    assert repr(name) in str(info.value) and "python, cpp, c" in str(info.value)


def test_java_classes_skips_comments_strings_and_nested_classes():
    source = ('import java.util.*;\n// class Fake { static void main(String[] a) {} }\n'
              'public class Sol { static class In { } String s = "}{ class X";\n'
              '  public static void main(String[] a) {} }\n'
              'class AfHarness { public static void main(String[] a) {} }\n')
    assert java_classes(source) == ("Sol", "AfHarness")
    assert java_classes("class A { void f() {} }") == (None, None)


def test_java_file_is_named_after_its_public_class():
    job = ProgramJob("java", "public class Answer { public static void main(String[] a) {} }",
                     stdins=("",))
    assert source_files(language("java"), job)[0][0] == "Answer.java"
    job = ProgramJob("java", "class Main { public static void main(String[] a) {} }",
                     stdins=("",))
    assert source_files(language("java"), job)[0][0] == "Main.java"


def test_a_job_needs_either_stdins_or_calls():
    with pytest.raises(ValueError, match="either stdins"):
        ProgramJob("c", "int main(){}")
    with pytest.raises(ValueError, match="either stdins"):
        ProgramJob("c", "int main(){}", stdins=("",), calls=2)
    with pytest.raises(ValueError, match="memory_mb"):
        ProgramJob("c", "int main(){}", stdins=("",), memory_mb=8)
    assert ProgramJob("c", "x", calls=3).tests == 3


@pytest.mark.parametrize("code,reason,stderr,oom,calls,expected", [
    (0, "", "", False, False, OK),
    (0, "", "", False, True, RUNTIME_ERROR),  # exited while a call ran: not a pass
    (1, "", "Traceback ... ValueError", False, False, RUNTIME_ERROR),
    (-signal.SIGSEGV, "", "", False, False, RUNTIME_ERROR),
    (-signal.SIGABRT, "", "terminate called after throwing an instance of 'std::bad_alloc'",
     False, False, MEMORY),
    (1, "", "Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space",
     False, False, MEMORY),
    (-signal.SIGKILL, "", "", True, False, MEMORY),
    (1, "", "", True, False, MEMORY),  # its child was OOM-killed, then it failed
    (0, "", "", True, False, OK),  # ... or it coped
    (-signal.SIGKILL, "", "", False, False, KILLED),
    (-signal.SIGTERM, "", "", False, False, KILLED),
    (-signal.SIGXCPU, "", "", False, False, TIMEOUT),
    (-signal.SIGKILL, "timeout", "", True, False, TIMEOUT),  # the driver's deadline first
    (0, "output_limit", "", False, False, OUTPUT_LIMIT),
    (0, "kept_limit", "", False, False, OUTPUT_LIMIT),
    (0, "", "MemoryError", False, False, OK),  # exit 0 is exit 0, whatever it printed
])
def test_process_status(code, reason, stderr, oom, calls, expected):
    assert process_status(code, reason, stderr, oom, 2.0, calls=calls)[0] == expected


def test_compile_failures_are_the_programs_compile_error():
    ok = compile_result({"code": "0", "reason": "", "wall_s": "0.5", "stdout": "",
                         "stderr": ""}, False, 30)
    assert ok.ok and ok.wall_s == 0.5
    failed = compile_result({"code": "1", "reason": "", "wall_s": "0.1", "stdout": "",
                             "stderr": "main.c:1: error"}, False, 30)
    assert failed.status == COMPILE_ERROR and failed.exit_code == 1 and "error" in failed.stderr
    bomb = compile_result({"code": "-9", "reason": "timeout", "wall_s": "30", "stdout": "",
                           "stderr": ""}, False, 30)
    assert bomb.status == COMPILE_ERROR and "time limit" in bomb.message
    assert compile_result(None, True, 30).status == COMPILE_ERROR


def _packed(data: bytes) -> str:
    return binascii.b2a_base64(zlib.compress(data), newline=False).decode()


def test_artifacts_decode_and_bound_their_size(monkeypatch):
    files = artifacts({"a": {"prog": _packed(b"\x7fELF...")}, "x": {"prog": "1"}})
    assert files == [("prog", b"\x7fELF...", True)]
    with pytest.raises(ValueError, match="corrupt"):
        artifacts({"a": {"prog": "not base64!"}})
    assert MAX_ARTIFACT_BYTES >= 64 << 20
    monkeypatch.setattr(classify, "MAX_ARTIFACT_BYTES", 1 << 20)
    bomb = _packed(b"\0" * (8 << 20))  # a zip bomb does not expand on the host
    with pytest.raises(ValueError, match="larger than"):
        artifacts({"a": {"prog": bomb}})


def test_run_results_of_calls_and_of_a_job_that_ended_early():
    verdict = {"r0": {"code": "0", "reason": "", "wall_s": "0.01", "stderr": "",
                      "note": "value", "value": "[1,2]"},
               "r1": {"code": "0", "reason": "", "wall_s": "0", "stderr": "",
                      "note": "raised", "value": "ValueError: no"},
               "r2": {"code": "", "reason": "skipped", "wall_s": "0", "stderr": "", "note": "",
                      "value": ""}}
    runs = run_results(verdict, 4, oom=False, timeout_s=1, calls=True)
    assert runs[0].status == OK and runs[0].value == "[1,2]"
    assert runs[1].status == RUNTIME_ERROR and "ValueError" in runs[1].message
    assert runs[2] is None
    assert runs[3].status == KILLED  # never reported: the job ended
    assert run_results({}, 1, oom=True, timeout_s=1, calls=False)[0].status == MEMORY
    assert run_results({"reason": "timeout"}, 1, oom=False, timeout_s=1,
                       calls=False)[0].status == TIMEOUT


def _toolchain(lang: str) -> Toolchain:
    tools = {"compiler": f"/usr/bin/{lang}c", "runtime": f"/usr/bin/{lang}",
             "linker": "/usr/bin/gcc", "type_roots": "/usr/lib/node_modules/@types"}
    return Toolchain(lang, True, "1.0", tools)


@pytest.mark.parametrize("lang", ["cpp", "c", "typescript", "java", "go", "rust"])
def test_compile_frames_bound_the_compiler(lang):
    job = ProgramJob(lang, "source", stdins=("",), compile_timeout_s=20, compile_memory_mb=1024)
    frame = compile_frame(language(lang), _toolchain(lang), job, 1 << 20)
    spec = frame["exec"]
    assert spec["step"] == "compile" and spec["timeout_s"] == 20
    assert frame["memory_mb"] == 1024 and frame["timeout_s"] > 20
    assert spec["argv"][0].startswith("/") and spec["collect"]
    assert spec["cpu_s"] > 20  # a backstop behind the wall clock, never the limit that decides


def test_run_frames_give_each_test_its_limits():
    job = ProgramJob("python", "print(1)", stdins=("a", "b"), timeout_s=2, memory_mb=128)
    files = [(n, d, False) for n, d in source_files(language("python"), job)]
    frame = run_frame(language("python"), _toolchain("python"), job, files, timeout_s=2,
                      memory_mb=128, output_limit=1 << 20, work_mb=64)
    spec = frame["exec"]
    assert spec["mode"] == "stdin" and spec["stdins"] == [b"a", b"b"]
    assert spec["check"] is not None  # an interpreted language's syntax check
    assert spec["as_bytes"] == 0  # the memory cgroup bounds it (RLIMIT_AS only without one)
    assert frame["timeout_s"] >= 2 * 2
    java = run_frame(language("java"), _toolchain("java"),
                     ProgramJob("java", "class A { public static void main(String[] a) {} }",
                                calls=3), [], timeout_s=1, memory_mb=256,
                     output_limit=1 << 20, work_mb=64)
    assert java["exec"]["as_bytes"] == 0  # the JVM: bounded by the cgroup and -Xmx
    assert java["exec"]["argv"][-1] == "A" and any("-Xmx" in a for a in java["exec"]["argv"])
