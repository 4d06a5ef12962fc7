"""A whole ``arenaforge run`` from an instruction file that mixes six languages (Python, C++, C,
JavaScript, TypeScript, Go) and both task kinds (``function``, ``program``): the real CLI, the
real sandbox, stand-in experts over OpenAI-compatible HTTP on 127.0.0.1
(``scripts/polyglot_run.py``). Two experts answer with the corpus's right versions
(``tests/data/polyglot``), the third with a wrong one; all write the corpus's test cases, as data
where the tests stage asks for data.

The experts are stand-ins because the embedded 0.5B and 1.5B models are too weak to answer, and
to write test cases, in five languages: a run of them could not tell whether the
language-neutral path verifies right answers and only those.
"""

from __future__ import annotations

import sys

import pytest
from arenaforge.pipeline.sandbox.languages import toolchain

from tests.e2e.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

import polyglot_run  # a script: importable once scripts/ is on the path


@pytest.mark.slow
def test_a_mixed_run_verifies_right_versions_in_every_language_and_no_wrong_one(tmp_path):
    languages = sorted({lang for lang, _ in polyglot_run.MIX})
    missing = [lang for lang in languages if not toolchain(lang).available]
    if missing:
        pytest.skip(f"toolchains not installed: {missing} (bash scripts/setup.sh)")
    result = polyglot_run.run(tmp_path)
    assert result["rc"] == 0, (tmp_path / "run.log").read_text()[-3000:]
    # the dataset: one row per instruction, each verified with a right version
    assert len(result["languages"]) >= 5, result
    assert result["languages"] == languages, result
    assert result["task_kinds"] == ["function", "program"], result
    assert result["verified"] == result["emitted"] == len(polyglot_run.MIX), result
    assert result["wrong_verified"] == [] and result["unmatched_verified"] == [], result
    # every answer in the verify stage: both right versions verified, no wrong one
    assert result["answers"] == 3 * len(polyglot_run.MIX), result
    assert result["right_answers_unverified"] == [], result
    assert result["wrong_answers_verified"] == [], result
    assert result["ok"]


def test_the_check_catches_a_wrong_version_verified():
    def row(key, code, verified=True):
        lang, task = key
        return {"instruction_id": task, "verified": verified, "language": lang,
                "task_kind": polyglot_run.CASES[task]["kind"],
                "messages": [{"role": "user", "content": polyglot_run.instruction(lang, task)},
                             {"role": "assistant", "content": f"```\n{code}```"}]}

    function, program = polyglot_run.MIX[2], polyglot_run.MIX[3]  # C++
    right = [row(key, polyglot_run.right_versions(*key)[1]) for key in (function, program)]
    wrong = polyglot_run.version(*function, "wrong1")
    assert polyglot_run.check(right, 1)["ok"]
    caught = polyglot_run.check([*right, row(function, wrong)], 1)
    assert caught["wrong_verified"] == ["cpp/reverse_words"] and not caught["ok"]
    assert not polyglot_run.check(right, 2)["ok"]  # too few languages
    assert not polyglot_run.check(right[:1], 1)["ok"]  # one task kind
    text = polyglot_run.instruction(*function)
    answers = polyglot_run.check_answers(
        [{"instruction": text, "model": "m", "code": wrong, "verified": True, "admission": "v"},
         {"instruction": text, "model": "n", "code": polyglot_run.right_versions(*function)[0],
          "verified": False, "admission": "rejected"}])
    assert answers["wrong_answers_verified"] == ["cpp/reverse_words m"]
    assert answers["right_answers_unverified"] == ["cpp/reverse_words n: rejected"]
