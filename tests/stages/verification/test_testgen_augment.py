"""tests stage with generators, bound candidates and every kind of trust (real sandbox)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from arenaforge.stages.verification.tests import TestGenConfig, run
from arenaforge.stages.verification.verify import VerifyConfig
from arenaforge.stages.verification.verify import run as verify_run
from scripted import ScriptedChat

CLASSIFY = ("Write a Python function `classify(n)` that returns 'neg', 'zero' or 'pos' for an "
            "integer n. Keep {output} literally in mind.")
# m1 solves it under another name (bound by signature), m2 as asked; m3 calls 0 positive.
# m2 refuses n >= 1000 and m3 returns None there: three outcomes, no majority.
SIGN_CLASS = ("def sign_class(n):\n    if n >= 1000:\n        return 'pos'\n"
              "    return 'neg' if n < 0 else 'zero' if n == 0 else 'pos'\n")
CLASSIFY_OK = ("def classify(n):\n    if n >= 1000:\n        raise ValueError(n)\n"
               "    return 'neg' if n < 0 else 'zero' if n == 0 else 'pos'\n")
CLASSIFY_BAD = ("def classify(n):\n    if n >= 1000:\n        return None\n"
                "    return 'neg' if n < 0 else 'pos'\n")
DOUBLE = "Write a function `double(n)` that returns twice n."


def fence(*lines):
    return "```python\n" + "\n".join(lines) + "\n```"


GENERATOR = ("def generate_inputs():",
             "    return [(0,), (1, 2), (-1,), (1000,), ('x',), (7,), (8,)]")
REPLIES = {
    "m1": {"classify": fence("assert classify(0) == 'zero'", "assert classify(5) == 'pos'",
                             *GENERATOR),
           "double": fence("assert double(2) == 4", "assert double(0) == 0",
                           "assert double(3) == 6")},
    "m2": {"classify": fence("assert classify(-3) == 'neg'", "assert classify(0) == 'pos'"),
           "double": fence("assert 4 == twice(2)", "assert twice(3) == 6",
                           "assert twice(5) == 11")},
}


class ScriptedAuthor(ScriptedChat):
    """Replies by the entry point named in the request."""

    def reply(self, conv):
        return self.replies["classify" if "classify" in conv[1]["content"] else "double"]


class Ctx:
    def __init__(self, pool, authors, tables=None):
        self.pool, self.authors, self.tables, self.seed = pool, authors, tables or {}, 0

    def backend(self, model_id):
        return self.authors[model_id]

    def read(self, stage, columns=None, instruction_ids=None):
        table = self.tables[stage]
        return table.select(columns) if columns else table

    def sandbox(self):
        return self.pool

    def advance(self, rows):
        pass


@pytest.fixture(scope="module")
def tested(request):
    pool = request.getfixturevalue("sandbox_pool")
    answers = pa.table({
        "instruction_id": ["c"] * 3 + ["d"] * 2,
        "instruction": [CLASSIFY] * 3 + [DOUBLE] * 2,
        "model": ["m1", "m2", "m3", "m1", "m2"],
        "response": ["..."] * 5,
        "code": [SIGN_CLASS, CLASSIFY_OK, CLASSIFY_BAD, "def double(n):\n    return 3 * n\n",
                 "def double(n):\n    return n + n + 1\n"],
    })
    authors = {m: ScriptedAuthor(r) for m, r in REPLIES.items()}
    result = run(answers, TestGenConfig(authors=list(authors), inputs_per_author=4),
                 Ctx(pool, authors))
    return answers, authors, result


def _rows(result, iid):
    return [r for r in result.table.to_pylist() if r["instruction_id"] == iid]


def test_the_authors_see_the_instructions_name_and_its_braces_unchanged(tested):
    _, authors, _ = tested
    tests, inputs = (c[1]["content"] for c in authors["m1"].seen if "classify" in c[1]["content"])
    for user in (tests, inputs):
        assert CLASSIFY in user  # "{output}" in the instruction is not a slot
        assert "def classify(n)" in user and "sign_class" not in user
    # the generator is asked for in a second request that shows the author's own arguments
    assert "generate_inputs" not in tests
    assert "4 new, varied, valid inputs" in inputs and "(0,)\n(5,)" in inputs


def test_majority_agreed_outputs_become_assertions_and_the_disagreement_is_kept(tested):
    _, _, result = tested
    aug = {r["call"]: r for r in _rows(result, "c") if r["kind"] == "augmented"}
    # (1, 2) has two arguments where the tests call classify with one: rejected, not run;
    # 4 inputs are kept per author
    assert set(aug) == {"classify(0)", "classify(-1)", "classify(1000)", "classify('x')"}
    zero = aug["classify(0)"]
    assert (zero["survived"], zero["trusted_by"], zero["split"]) == (True, "majority", "hidden")
    assert zero["test_code"] == "assert classify(0) == 'zero'" and zero["expected"] == "'zero'"
    assert zero["passed_by"] == ["m1", "m2"] and zero["contradicted"] == ["m3"]
    assert aug["classify(-1)"]["survived"] and aug["classify(-1)"]["contradicted"] == []
    split = aug["classify(1000)"]
    assert (split["survived"], split["reason"], split["contradicted"]) == \
        (False, "no_majority", [])
    assert json.loads(split["raw"]) == {"m1": "value: 'pos'", "m2": "raises: ValueError",
                                        "m3": "value: None"}
    assert aug["classify('x')"]["reason"] == "agreed_no_value"  # all raise TypeError
    assert {r["author"] for r in aug.values()} == {"m1"}
    gen = next(r for r in _rows(result, "c") if r["author"] == "m1" and r["test_idx"] == 0)
    assert gen["generated_inputs"] == 4 and "generate_inputs" in gen["generator"]
    assert gen["generator_error"].startswith("1 inputs rejected")
    s = result.stats
    assert (s["augment.inputs"], s["augment.agreed"], s["augment.disagreed"],
            s["augment.no_majority"]) == (4, 2, 2, 1)


def test_of_two_authors_disagreeing_on_a_call_the_independent_majority_decides(tested):
    _, _, result = tested
    written = {(r["author"], r["test_idx"]): r for r in _rows(result, "c")
               if r["kind"] == "written"}
    # classify(0): m1 expects 'zero' (passed by m2's answer too), m2 expects 'pos' (passed by
    # m3's only); both are one contestant's test confirmed by another model, and the answers
    # that pass every other test, two different programs (m1's and m2's), return 'zero': m2's
    # test is the odd one out
    assert (written["m2", 1]["survived"], written["m2", 1]["reason"]) == \
        (False, "contradicts_majority")
    assert written["m2", 1]["contradicted"] == ["m1", "m2"]
    assert written["m1", 0]["trusted_by"] == "written+passer"
    kept = [r for r in written.values() if r["survived"]]
    assert sorted(r["split"] for r in kept) == ["hidden", "hidden", "visible"]
    assert {r["suite_status"] for r in _rows(result, "c")} == {"decided"}


def test_two_authors_agreeing_trust_a_test_no_answer_passes(tested):
    _, _, result = tested
    rows = {(r["author"], r["test_idx"]): r for r in _rows(result, "d")}
    # m2 called the function "twice": renamed to the entry point, recorded
    assert [rows["m2", k]["test_code"] for k in range(3)] == [
        "assert 4 == double(2)", "assert double(3) == 6", "assert double(5) == 11"]
    assert rows["m2", 0]["author_name"] == "twice"
    # double(2) == 4 written twice (spelled differently), double(3) == 6 twice (the same text:
    # the second is a duplicate and still counts as m2's vote); no answer passes either
    for key in (("m1", 0), ("m2", 0), ("m1", 2)):
        assert (rows[key]["survived"], rows[key]["trusted_by"]) == (True, "authors_agree")
        assert rows[key]["passed_by"] == [] and rows[key]["strength"] == 3
    assert rows["m2", 1]["reason"] == "duplicate"
    # double(0) == 0 is passed by 3 * n only, double(5) == 11 by n + n + 1 only: each is its
    # author's own answer's behaviour, unconfirmed, and stays (a wrong answer never removes a
    # test); no answer passes everything
    for key in (("m1", 1), ("m2", 2)):
        assert (rows[key]["survived"], rows[key]["trusted_by"]) == (True, "written")
    assert result.stats["instructions_all_fail"] == 1
    assert result.stats["trusted.authors_agree"] == 3


def test_verify_binds_the_other_name_and_records_both_gates(tested, sandbox_pool):
    answers, _, result = tested
    rate = pa.table({"instruction_id": ["c"] * 3 + ["d"] * 2,
                     "model": ["m1", "m2", "m3", "m1", "m2"],
                     "final_score": [0.2, 0.7, 0.1, 0.6, 0.4],
                     "winner": ["m2"] * 3 + ["m1"] * 2})
    ctx = Ctx(sandbox_pool, {}, {"tests": result.table, "rate": rate})
    out = verify_run(answers, VerifyConfig(), ctx)
    rows = {(r["instruction_id"], r["model"]): r for r in out.table.to_pylist()}
    m1 = rows["c", "m1"]
    assert (m1["bound_function"], m1["binding_rule"], m1["entry_point"]) == \
        ("sign_class", "signature", "classify")
    assert m1["status"] == "passed" and m1["tests_augmented"] == 2
    assert (m1["probe_gate"], m1["program_gate"]) == ("pass", "pass")
    assert rows["c", "m2"]["binding_rule"] == "instruction"
    assert rows["c", "m3"]["status"] == "failed" and rows["c", "m3"]["program_gate"] == "fail"
    # every answer of "d" fails its trusted tests: the judge's pick stays selected (for repair)
    d1 = rows["d", "m1"]
    assert (d1["status"], d1["selected"], d1["judge_pick"], d1["replaced_judge_pick"]) == \
        ("failed", True, "m1", False)
    assert {r["judge_pick"] for k, r in rows.items() if k[0] == "c"} == {"m2"}
