"""The evidence rules of the tests stage (``arenaforge.stages.verification.evidence``), pure."""

import dataclasses

from arenaforge.pipeline.statuses import ANSWERS_DISAGREE
from arenaforge.stages.verification.augment import Outcome
from arenaforge.stages.verification.evidence import (
    AUTHOR_CONTRADICTS_EXAMPLE,
    AUTHORS_AGREE,
    CONTRADICTORY,
    CONTRADICTS_EXAMPLE,
    CONTRADICTS_MAJORITY,
    CONTRADICTS_STRONGER,
    DECIDED,
    INDEPENDENT_AUTHOR,
    MAJORITY,
    NO_MAJORITY,
    NOT_INDEPENDENT,
    NOT_LITERAL,
    UNCONFIRMED,
    WRITTEN,
    WRITTEN_PASSER,
    Candidate,
    Example,
    program_key,
    weigh,
)


def written(author: str, call: str, expected: str) -> dict:
    return {"author": author, "call": call, "expected": expected, "survived": False,
            "reason": "", "test_code": f"assert {call} == {expected}", "split": None}


def aug(call: str) -> dict:
    return {"author": "a", "call": call, "expected": None, "survived": False, "reason": "",
            "test_code": None, "split": None, "kind": "augmented"}


def cand(model: str, written, example=None, inputs=(), program=None) -> Candidate:
    return Candidate(model, program or f"prog-{model}", tuple(written), example,
                     tuple(Outcome("value", v) for v in inputs))


def test_a_test_no_answer_passes_stays_trusted_and_blocks_the_answers():
    # count_primes(10) == 4 from a contestant, failed by both answers (one of them its own)
    rows = [written("m1", "count_primes(10)", "4"), written("m1", "count_primes(2)", "1")]
    verdict = weigh(rows, [], [cand("m1", [False, True]), cand("m2", [False, True])], None)
    assert verdict.status == DECIDED
    assert [r["survived"] for r in rows] == [True, True]
    assert rows[0]["trusted_by"] == WRITTEN and rows[0]["passed_by"] == []
    assert rows[1]["trusted_by"] == WRITTEN_PASSER  # m2's answer confirms m1's test
    assert rows[0]["consensus"] == []  # no answer passes everything


def test_an_author_whose_answer_did_not_run_is_still_a_contestant():
    # m1's answer did not compile: its tests are a contestant's, not an independent author's
    rows = [written("m1", "f(1)", "2")]
    weigh(rows, [], [cand("m2", [True])], None, contestants=["m1", "m2"])
    assert rows[0]["trusted_by"] == WRITTEN_PASSER
    alone = [written("m1", "f(1)", "2")]
    weigh(alone, [], [cand("m2", [False])], None, contestants=["m1", "m2"])
    assert (alone[0]["survived"], alone[0]["reason"]) == (False, UNCONFIRMED)  # rule 7
    unknown = [written("m1", "f(1)", "2")]
    weigh(unknown, [], [cand("m2", [False])], None)
    assert unknown[0]["trusted_by"] == INDEPENDENT_AUTHOR  # what it was taken for before


def test_tests_that_only_restate_the_instructions_examples_do_not_stand_as_a_voice():
    # HumanEval/74: the author copied the docstring's examples; its answer passes them, another
    # fails the first: the example told readings apart, but the author said nothing beyond it
    copied = [written("m1", "f([], [])", "[]"), written("m1", "f(['a'], ['bb'])", "['a']")]
    stated = [("f([], [])", "[]"), ("f(['a'], ['bb'])", "['a']")]
    answers = [cand("m1", [True, True], example=True), cand("m2", [False, False], example=False)]
    weigh(copied, [], answers, Example("f([], [])", "[]"), stated=stated)
    assert [(r["survived"], r["reason"]) for r in copied] == [(False, UNCONFIRMED)] * 2
    # two authors' agreeing copies of the examples are still only the instruction's word
    agreeing = [written("m1", "f([], [])", "[]"), written("m3", "f([], [])", "[]")]
    weigh(agreeing, [], answers, Example("f([], [])", "[]"), stated=stated)
    assert [(r["survived"], r["reason"]) for r in agreeing] == [(False, UNCONFIRMED)] * 2
    beyond = [written("m1", "f([], [])", "[]"), written("m1", "f(['a'], ['b'])", "['a']")]
    weigh(beyond, [], answers, Example("f([], [])", "[]"), stated=stated)
    assert [r["survived"] for r in beyond] == [True, True]  # a test of its own: rule 7 as before


def test_evidence_kinds_and_strengths():
    rows = [written("a", "f(1)", "2"), written("b", "f(1)", "2"), written("judge-free", "f(3)", "9"),
            written("a", "f(5)", "25")]
    weigh(rows, [], [cand("a", [True, True, True, True]), cand("b", [True, True, True, False])],
          None)
    assert [r["trusted_by"] for r in rows] == [AUTHORS_AGREE, AUTHORS_AGREE, INDEPENDENT_AUTHOR,
                                               WRITTEN]
    assert [r["strength"] for r in rows] == [3, 3, 2, 1]


def test_an_author_who_contradicts_the_example_loses_all_its_tests():
    rows = [written("b", "f(2)", "5"), written("b", "f(3)", "7"), written("a", "f(3)", "9")]
    verdict = weigh(rows, [], [cand("a", [False, False, True], example=True),
                               cand("c", [False, False, True], example=True)],
                    Example("f(2)", "4"))
    assert verdict.status == DECIDED
    assert [r["reason"] for r in rows] == [CONTRADICTS_EXAMPLE, AUTHOR_CONTRADICTS_EXAMPLE, None]
    assert rows[2]["survived"]


def test_equal_evidence_on_one_call_makes_the_instruction_contradictory():
    rows = [written("a", "f(3)", "14"), written("b", "f(3)", "13")]
    verdict = weigh(rows, [], [cand("a", [True, False]), cand("b", [False, True])], None)
    assert verdict.status == CONTRADICTORY and "f(3)" in verdict.detail


def test_the_strictly_stronger_value_wins_a_direct_conflict():
    rows = [written("a", "f(3)", "14"), written("b", "f(3)", "14"), written("c", "f(3)", "13")]
    verdict = weigh(rows, [], [cand("a", [True, True, False]), cand("c", [False, False, True])],
                    None)
    assert verdict.status == DECIDED
    assert [r["reason"] for r in rows] == [None, None, CONTRADICTS_STRONGER]


def test_authors_read_apart_without_an_example_contradict_each_other():
    # a is right; b and c share a wrong reading and each writes tests from it (other calls)
    rows = [written("a", "f(3)", "14"), written("b", "f(4)", "29"), written("c", "f(5)", "54")]
    answers = [cand("a", [True, False, False]), cand("b", [False, True, True]),
               cand("c", [False, True, True], program="prog-b")]
    verdict = weigh(rows, [], answers, None)
    assert verdict.status == CONTRADICTORY


def test_the_example_settles_authors_read_apart():
    rows = [written("a", "f(3)", "14"), written("b", "f(4)", "29"), written("c", "f(5)", "54")]
    answers = [cand("a", [True, False, False], example=True),
               cand("b", [False, True, True], example=False),
               cand("c", [False, True, True], example=False, program="prog-b")]
    verdict = weigh(rows, [], answers, Example("f(2)", "5"))
    assert verdict.status == DECIDED
    assert [r["reason"] for r in rows] == [None, AUTHOR_CONTRADICTS_EXAMPLE,
                                           AUTHOR_CONTRADICTS_EXAMPLE]
    assert rows[0]["consensus"] == ["a"]


def test_two_answers_that_are_one_program_are_one_vote():
    rows = [aug("f(7)")]
    answers = [cand("a", [], inputs=["3"]), cand("b", [], inputs=["4"], program="same"),
               cand("c", [], inputs=["4"], program="same")]
    weigh([], rows, answers, None)
    assert not rows[0]["survived"] and rows[0]["reason"] == NOT_INDEPENDENT


def test_a_majority_of_different_programs_becomes_a_hidden_test():
    rows = [aug("f(7)")]
    answers = [cand("a", [], inputs=["3"]), cand("b", [], inputs=["4"]),
               cand("c", [], inputs=["4"])]
    weigh([], rows, answers, None)
    assert rows[0]["survived"] and rows[0]["trusted_by"] == MAJORITY
    assert rows[0]["expected"] == "4" and rows[0]["test_code"] == "assert f(7) == 4"
    assert rows[0]["contradicted"] == ["a"] and rows[0]["split"] == "hidden"


def test_answers_that_fail_a_written_test_do_not_vote():
    rows, inputs = [written("a", "f(1)", "1")], [aug("f(7)")]
    answers = [cand("a", [True], inputs=["3"]), cand("b", [False], inputs=["4"]),
               cand("c", [False], inputs=["4"])]
    weigh(rows, inputs, answers, None)
    assert inputs[0]["reason"] == NO_MAJORITY


def test_a_majority_never_overrules_a_written_test_on_the_same_call():
    rows, inputs = [written("z", "f(7)", "3")], [aug("f(7)")]
    answers = [cand("a", [False], inputs=["4"]), cand("b", [False], inputs=["4"])]
    weigh(rows, inputs, answers, None)
    # the voters are the answers that pass the written test: none here
    assert not inputs[0]["survived"]
    rows, inputs = [written("z", "f(1)", "1")], [aug("f(1)")]
    answers = [cand("a", [True], inputs=["2"]), cand("b", [True], inputs=["2"])]
    weigh(rows, inputs, answers, None)
    assert inputs[0]["reason"] == CONTRADICTS_STRONGER


def test_program_key_ignores_formatting_docstrings_and_demo():
    assert program_key("def f(x):\n    return x+1\n") == program_key(
        "def f(x):\n    '''Add one.'''\n    return x + 1  # one\n\nif __name__ == '__main__':\n"
        "    print(f(1))\n")
    assert program_key("def f(x):\n    return x+1\n") != program_key("def f(x):\n    return x\n")


def test_an_agreed_value_of_a_subclass_is_never_asserted():
    rows = [aug("f(7)")]
    odd = Outcome("value", "'pq'", exact=False)
    answers = [Candidate("a", "p1", (), None, (odd,)), Candidate("b", "p2", (), None, (odd,))]
    weigh([], rows, answers, None)
    assert not rows[0]["survived"] and rows[0]["reason"] == NOT_LITERAL


def with_calls(model, written, calls, example=None, program=None, inputs=()):
    return Candidate(model, program or f"prog-{model}", tuple(written), example,
                     tuple(Outcome("value", v) for v in inputs),
                     tuple(None if v is None else Outcome("value", v) for v in calls))


def test_independent_answers_overrule_one_authors_slip():
    # a's slip: f(5) == 16; two different correct programs pass everything else and return 15
    rows = [written("a", "f(5)", "16"), written("a", "f(2)", "4"), written("b", "f(3)", "9")]
    answers = [with_calls("a", [False, True, True], ["15", "4", "9"]),
               with_calls("b", [False, True, True], ["15", "4", "9"])]
    assert weigh(rows, [], answers, None).status == DECIDED
    assert rows[0]["reason"] == CONTRADICTS_MAJORITY and rows[0]["contradicted"] == ["a", "b"]
    assert all(r["survived"] for r in rows[1:]) and rows[1]["consensus"] == ["a", "b"]


def test_a_majority_of_programs_never_drops_the_only_disagreeing_authors_tests():
    # the failure of the served world: the one right expert (a) is the only test author and
    # its answer passes its tests; two different wrong programs agree with each other, and
    # with it wherever the two readings meet (f(2))
    rows = [written("a", "f(5)", "15"), written("a", "f(2)", "6")]
    answers = [with_calls("a", [True, True], ["15", "6"]),
               with_calls("b", [False, True], ["16", "6"]),
               with_calls("c", [False, True], ["16", "6"])]
    verdict = weigh(rows, [], answers, None)
    assert verdict.status == ANSWERS_DISAGREE and "(a's test) vs 16 (b, c)" in verdict.detail
    assert all(r["reason"] != CONTRADICTS_MAJORITY for r in rows)


def test_an_independent_authors_test_is_not_outvoted_by_the_answers():
    # a tester that answers nothing: its value against the answers' is a reading, not a slip
    rows = [written("t", "f(5)", "15"), written("t", "f(2)", "6")]
    answers = [with_calls("b", [False, True], ["16", "6"]),
               with_calls("c", [False, True], ["16", "6"])]
    assert weigh(rows, [], answers, None).status == ANSWERS_DISAGREE
    assert rows[0]["reason"] is None


def test_an_author_whose_own_answer_errs_otherwise_still_disagrees():
    # a's program returns neither its test's value nor the majority's: nothing says the
    # majority read the task right, so the test is not dropped
    rows = [written("a", "f(5)", "15"), written("b", "f(2)", "6")]
    answers = [with_calls("a", [False, True], ["14", "6"]),
               with_calls("b", [False, True], ["16", "6"]),
               with_calls("c", [False, True], ["16", "6"])]
    assert weigh(rows, [], answers, None).status == ANSWERS_DISAGREE
    assert rows[0]["reason"] is None


def test_answers_agreeing_with_one_author_do_not_outweigh_another_author():
    # power_sum(4): a (right) expects 30, c (wrong) expects 14 and b's different wrong program
    # passes c's test; passing makes c's test written+passer, which is answers agreeing, not a
    # second author: one author against one, so nothing decides
    rows = [written("a", "power_sum(4)", "30"), written("c", "power_sum(4)", "14")]
    answers = [with_calls("a", [True, False], ["30", "30"]),
               with_calls("b", [False, True], ["14", "14"]),
               with_calls("c", [False, True], ["14", "14"])]
    verdict = weigh(rows, [], answers, None)
    assert verdict.status == CONTRADICTORY and "30 (a) vs 14 (c)" in verdict.detail
    assert rows[1]["trusted_by"] == WRITTEN_PASSER and rows[0]["reason"] is None


def test_one_program_twice_never_overrules_a_test():
    # two experts emit the same wrong program: one vote, the test stands against it
    rows = [written("a", "count_primes(10)", "4")]
    answers = [with_calls("b", [False], ["0"], program="same"),
               with_calls("c", [False], ["0"], program="same")]
    weigh(rows, [], answers, None)
    assert rows[0]["survived"] and rows[0]["reason"] is None


def test_answers_never_overrule_two_authors():
    rows = [written("a", "f(5)", "16"), written("b", "f(5)", "16")]
    answers = [with_calls("a", [False, False], ["15", "15"]),
               with_calls("b", [False, False], ["15", "15"]),
               with_calls("c", [False, False], ["15", "15"])]
    weigh(rows, [], answers, None)
    assert all(r["survived"] and r["trusted_by"] == AUTHORS_AGREE for r in rows)


def test_consistent_answers_that_disagree_on_an_input_decide_nothing():
    # two different programs pass every test, but return 7 and 8 on a generated input
    rows, inputs = [written("z", "f(1)", "1")], [aug("f(3)")]
    answers = [cand("a", [True], inputs=["7"]), cand("b", [True], inputs=["8"])]
    verdict = weigh(rows, inputs, answers, None)
    assert verdict.status == ANSWERS_DISAGREE and "f(3)" in verdict.detail
    # the same disagreement between answers that fail a test is no dispute: they are wrong
    answers = [cand("a", [True], inputs=["7"]), cand("b", [False], inputs=["8"])]
    assert weigh(rows, [aug("f(3)")], answers, None).status == DECIDED


def test_an_author_whose_answer_misreads_the_example_as_its_tests_do_loses_them():
    rows = [written("b", "f(4)", "29"), written("a", "f(3)", "14")]
    answers = [cand("a", [False, True], example=True), cand("b", [True, False], example=False)]
    assert weigh(rows, [], answers, Example("f(2)", "5")).status == DECIDED
    assert [r["reason"] for r in rows] == [AUTHOR_CONTRADICTS_EXAMPLE, None]
    # b's answer fails the example and its own test: its test may be right; it stays
    rows = [written("b", "f(4)", "30"), written("a", "f(3)", "14")]
    answers = [cand("a", [True, True], example=True), cand("b", [False, False], example=False)]
    weigh(rows, [], answers, Example("f(2)", "5"))
    assert [r["reason"] for r in rows] == [None, None]


def test_authors_whose_answers_are_one_program_are_one_voice():
    # b and c answer with the same wrong program and write tests that agree with it and with each
    # other; a's right answer and test disagree. b and c confirm nothing for each other, so
    # their shared reading is no stronger than a's: the instruction cannot be decided
    rows = [written("a", "power_sum(4)", "30"), written("b", "power_sum(4)", "14"),
            written("c", "power_sum(4)", "14"), written("c", "power_sum(2)", "1")]
    answers = [cand("a", [True, False, False, False]),
               cand("b", [False, True, True, True], program="same-wrong"),
               cand("c", [False, True, True, True], program="same-wrong")]
    verdict = weigh(rows, [], answers, None)
    assert [r["trusted_by"] for r in rows] == [WRITTEN] * 4
    assert verdict.status == CONTRADICTORY
    # the same tests from authors whose answers differ are two voices, and the pair wins
    rows = [written("a", "power_sum(4)", "30"), written("b", "power_sum(4)", "14"),
            written("c", "power_sum(4)", "14")]
    answers = [cand("a", [True, False, False]), cand("b", [False, True, True]),
               cand("c", [False, True, True])]
    verdict = weigh(rows, [], answers, None)
    assert [r["trusted_by"] for r in rows] == [None, AUTHORS_AGREE, AUTHORS_AGREE]
    assert rows[0]["reason"] == CONTRADICTS_STRONGER and verdict.status == DECIDED


def test_a_model_does_not_verify_itself():
    # word_frequency: the 0.5B's four tests never repeat a word, and only its own answer passes
    # them; no other program, no example, no majority confirms any of them
    rows = [written("m1", "wf('a b')", "{'a': 1, 'b': 1}"), written("m1", "wf('')", "{}")]
    answers = [cand("m1", [True, True]), cand("m2", [False, False])]
    verdict = weigh(rows, [], answers, None)
    assert verdict.status == DECIDED
    assert [r["reason"] for r in rows] == [UNCONFIRMED, UNCONFIRMED]
    assert not any(r["survived"] for r in rows)
    # one test another program passes confirms the suite: every test stays
    rows = [written("m1", "wf('a b')", "{'a': 1, 'b': 1}"), written("m1", "wf('')", "{}")]
    weigh(rows, [], [cand("m1", [True, True]), cand("m2", [False, True])], None)
    assert [r["trusted_by"] for r in rows] == [WRITTEN, WRITTEN_PASSER]
    # so does the instruction's example where it told readings apart (another answer fails it)
    rows = [written("m1", "wf('a b')", "{'a': 1, 'b': 1}")]
    weigh(rows, [], [cand("m1", [True], example=True), cand("m2", [False], example=False)],
          Example("wf('x')", "{'x': 1}"))
    assert rows[0]["survived"] and rows[0]["trusted_by"] == WRITTEN
    # but not where every answer passes it: it separated no reading, and the tests stay one
    # voice's (clamp_all: three experts, one program, the wrong bound; the example lies inside
    # both readings)
    rows = [written("a", "clamp_all([30])", "[25]"), written("b", "clamp_all([-3])", "[-3]")]
    answers = [cand(m, [True, True], example=True, program="same") for m in "abc"]
    verdict = weigh(rows, [], answers, Example("clamp_all([18, 5, 1])", "[18, 5, 1]"))
    assert verdict.status == DECIDED
    assert [r["reason"] for r in rows] == [UNCONFIRMED, UNCONFIRMED]


def test_one_programs_reading_against_anothers_decides_nothing():
    # fibonacci: the 0.5B's tests expect its own values; SmolLM2's different program agrees at
    # fib(2) and returns another value at fib(5); nothing but the 0.5B's own tests sides with it
    rows = [written("m1", "fib(2)", "1"), written("m1", "fib(5)", "5")]
    answers = [Candidate("m1", "p1", (True, True), None,
                         calls=(Outcome("value", "1"), Outcome("value", "5"))),
               Candidate("m2", "p2", (True, False), None,
                         calls=(Outcome("value", "1"), Outcome("value", "3")))]
    verdict = weigh(rows, [], answers, None)
    assert verdict.status == ANSWERS_DISAGREE and "fib(5): 5 (m1) vs 3 (m2)" in verdict.detail
    # an error is no reading: the other program crashed, the tests stand
    rows = [written("m1", "fib(2)", "1"), written("m1", "fib(5)", "5")]
    crashed = Candidate("m2", "p2", (True, False), None,
                        calls=(Outcome("value", "1"), Outcome("error", "RecursionError")))
    assert weigh(rows, [], [answers[0], crashed], None).status == DECIDED
    # nor does a program that fails the example speak against a test beside it
    rows = [written("m1", "fib(2)", "1"), written("m1", "fib(5)", "5")]
    misread = Candidate("m2", "p2", (True, False), False,
                        calls=(Outcome("value", "1"), Outcome("value", "3")))
    own = dataclasses.replace(answers[0], example=True)
    assert weigh(rows, [], [own, misread], Example("fib(3)", "2")).status == DECIDED
    # nor a reading a stronger test already refuted: the author fails the example
    rows = [written("m1", "fib(2)", "1"), written("m1", "fib(5)", "5")]
    refuted = dataclasses.replace(answers[0], example=False)
    other = dataclasses.replace(answers[1], example=True)
    assert weigh(rows, [], [refuted, other], Example("fib(3)", "2")).status == DECIDED
    # and a test its author's own answer fails is a claim against the answers, not a reading
    rows = [written("m1", "fib(2)", "1"), written("m1", "fib(5)", "5")]
    wrong_own = dataclasses.replace(answers[0], written=(True, False))
    assert weigh(rows, [], [wrong_own, answers[1]], None).status == DECIDED
