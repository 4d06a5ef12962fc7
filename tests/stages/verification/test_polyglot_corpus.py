"""The correct/wrong corpus (tests/data/polyglot): for every language and task, both task kinds,
the correct version passes every case and each of the two wrong ones fails one at least, run
through the real sandbox exactly as the tests stage will (render, run, grade).

Python, JavaScript and C build in a fraction of a second and run by default; the languages
whose compilers take a second or more per program are slow tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from arenaforge.pipeline.sandbox.languages import LANGUAGE_IDS, LANGUAGES, toolchain
from arenaforge.stages.verification.harness.cases import FUNCTION, load_cases
from arenaforge.stages.verification.harness.jobs import (
    complete_signature,
    function_job,
    grade,
    program_job,
)

CORPUS = Path(__file__).resolve().parents[2] / "data" / "polyglot"
TASKS = json.loads((CORPUS / "tasks.json").read_text())
QUICK = ("python", "javascript", "c")
VERSIONS = ("correct", "wrong1", "wrong2")


def _params():
    for lang in LANGUAGE_IDS:
        marks = [] if lang in QUICK else [pytest.mark.slow]
        for task in TASKS:
            if lang not in task.get("languages_without", ()):
                yield pytest.param(lang, task, marks=marks, id=f"{lang}-{task['id']}")


def _source(lang: str, task: dict, version: str) -> str:
    ext = LANGUAGES[lang].source_name.rsplit(".", 1)[1]
    return (CORPUS / lang / task["id"] / f"{version}.{ext}").read_text()


def test_the_corpus_has_every_language_and_both_kinds():
    kinds = {t["kind"] for t in TASKS}
    assert kinds == {"function", "program"}
    for lang in LANGUAGE_IDS:
        tasks = [t for t in TASKS if lang not in t.get("languages_without", ())]
        assert len(tasks) >= 4
        for task in tasks:
            for version in VERSIONS:
                assert _source(lang, task, version).strip()


@pytest.mark.parametrize("lang,task", list(_params()))
def test_correct_passes_and_wrong_fails(sandbox_pool, lang, task):
    if not toolchain(lang).available:
        pytest.skip(f"{lang} toolchain not installed: {toolchain(lang).problem}")
    cases = load_cases(task["kind"], task["cases"])
    if task["kind"] == FUNCTION:
        sig = complete_signature(task["signature"], cases)
        jobs = [function_job(lang, _source(lang, task, v), sig, cases, timeout_s=5)
                for v in VERSIONS]
    else:
        jobs = [program_job(lang, _source(lang, task, v), cases, timeout_s=5) for v in VERSIONS]
    results = sandbox_pool.run_programs(jobs)
    for version, result in zip(VERSIONS, results):
        assert result.sandbox_fault is None, result.sandbox_fault
        verdicts = grade(cases, result)
        detail = [(v.status, v.message) for v in verdicts]
        if version == "correct":
            assert result.compile.ok, result.compile.stderr
            assert all(v.passed for v in verdicts), detail
        else:
            assert not all(v.passed for v in verdicts), f"{version} passed: {detail}"
