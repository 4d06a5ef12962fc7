"""Judge prompts and parsing: strict formats, malformed output is an error, never a number."""

from __future__ import annotations

import math

import pytest
from arenaforge.stages.arena import judge_logits
from arenaforge.stages.arena import protocols as jp
from arenaforge.stages.common.code_extract import code_blocks, extract_code


@pytest.mark.parametrize("text,shown,rationale", [
    ("A forgets the empty list; B handles it.\nVerdict: [[B]]", "B",
     "A forgets the empty list; B handles it."),
    ("Verdict: [[A]]", "A", None),
    ("Both are wrong.\nVerdict: [[C]]", "tie", "Both are wrong."),
    ("verdict: [[ a ]]", "A", None),
    ("I choose [[B]].\nVerdict: [[B]]", "B", "I choose"),  # the same verdict twice is one verdict
])
def test_parse_verdict_valid(text, shown, rationale):
    assert jp.parse_verdict(text) == (shown, rationale, None)


@pytest.mark.parametrize("text,error", [
    (None, "empty output"),
    ("", "empty output"),
    ("  \n ", "empty output"),
    ("Answer A is better.", "no verdict in the [[...]] format"),
    ("Verdict: A", "no verdict in the [[...]] format"),
    ("Verdict: [A]", "no verdict in the [[...]] format"),
    ("Verdict: [[A]]\nVerdict: [[B]]", "conflicting verdicts: [[A]], [[B]]"),
    ("Verdict: [[D]]", "verdict is not A, B or C: [[D]]"),
    ("Verdict: [[tie]]", "verdict is not A, B or C: [[TIE]]"),
    ("Verdict: [[A or B]]", "verdict is not A, B or C: [[A OR B]]"),
    ("Verdict: [[1]]", "verdict is not A, B or C: [[1]]"),
    ("Verdict: [[]]", "verdict is not A, B or C: [[]]"),
])
def test_parse_verdict_malformed_is_an_error(text, error):
    assert jp.parse_verdict(text) == (None, None, error)


@pytest.mark.parametrize("text,score", [
    ("Runs and is correct.\nScore: [[3]]", 3),
    ("Score: [[0]]", 0),
    ("Score: [[ 2 ]]", 2),
])
def test_parse_score_valid(text, score):
    assert jp.parse_score(text)[0] == score and jp.parse_score(text)[2] is None


@pytest.mark.parametrize("text,error", [
    (None, "empty output"),
    ("Score: 2", "no score in the [[...]] format"),
    ("Score: [[4]]", "score out of range 0-3: 4"),
    ("Score: [[-1]]", "score out of range 0-3: -1"),
    ("Score: [[2.5]]", "score is not an integer: [[2.5]]"),
    ("Score: [[N]]", "score is not an integer: [[N]]"),
    ("Score: [[two]]", "score is not an integer: [[TWO]]"),
    ("Score: [[1]] ... Score: [[3]]", "conflicting scores: [[1]], [[3]]"),
])
def test_parse_score_malformed_is_an_error(text, error):
    assert jp.parse_score(text) == (None, None, error)


@pytest.mark.parametrize("shown,order,model", [
    ("A", "ab", "a"), ("B", "ab", "b"), ("A", "ba", "b"), ("B", "ba", "a"),
    ("tie", "ab", "tie"), ("tie", "ba", "tie"), (None, "ab", None), (None, "ba", None),
])
def test_verdict_maps_back_from_shown_position(shown, order, model):
    assert jp.to_model_verdict(shown, order) == model
    if shown in ("A", "B"):
        assert jp.first_chosen(model, order) is (shown == "A")
    else:
        assert jp.first_chosen(model, order) is None


def test_bad_order_or_shown_value_is_an_error():
    with pytest.raises(ValueError, match="order"):
        jp.to_model_verdict("A", "xy")
    with pytest.raises(ValueError, match="shown verdict"):
        jp.to_model_verdict("C", "ab")


def test_pair_prompt_shows_answers_in_the_given_order_and_keeps_braces():
    conv = jp.pair_conversation("pairwise", "Parse {json} please", "first {answer_b}", "second")
    user = conv[1]["content"]
    assert conv[0]["role"] == "system" and conv[1]["role"] == "user"
    assert "Parse {json} please" in user
    # An answer containing a slot name must not receive the other answer.
    assert "first {answer_b}" in user and user.index("first {answer_b}") < user.index("second")
    assert "[[A]]" in user and "[[C]]" in user and "Reference" not in user


@pytest.mark.parametrize("protocol", jp.PROTOCOLS)
def test_reference_slot_is_filled_only_when_given(protocol):
    answers = ("x", "y") if jp.PROTOCOLS[protocol].shows_pair else ("x",)
    build = lambda ref: jp.PROTOCOLS[protocol].conversation("Q", answers, ref)
    with_ref, without = build("def ok(): return 1")[1]["content"], build(None)[1]["content"]
    assert "def ok(): return 1" in with_ref and "[Reference answer]" in with_ref
    assert "Reference" not in without and "{reference" not in without


def test_pointwise_prompt_has_the_stackeval_scale():
    user = jp.single_conversation("pointwise", "Q", "x")[1]["content"]
    for phrase in ("0 = wrong or irrelevant", "1 = partly useful", "2 = acceptable",
                   "3 = excellent", "Score: [[N]]", "step by step"):
        assert phrase in user
    with pytest.raises(ValueError):
        jp.single_conversation("pairwise", "Q", "x")
    with pytest.raises(ValueError):
        jp.pair_conversation("pointwise", "Q", "x", "y")


def test_choice_probabilities_sum_spellings_and_renormalise():
    logprobs = {"A": math.log(0.5), " A": math.log(0.1), "B": math.log(0.2), " B": math.log(0.0001)}
    probs, mass = judge_logits.choice_probabilities(logprobs, jp.LETTER_SPELLINGS)
    assert mass == pytest.approx(0.8001)
    assert probs["A"] == pytest.approx(0.6 / 0.8001) and sum(probs.values()) == pytest.approx(1)
    assert judge_logits.choice_probabilities({}, jp.LETTER_SPELLINGS) == ({}, 0.0)


@pytest.mark.parametrize("p_ab,p_ba,p_a", [
    (1.0, 1.0, 0.5),   # always "A": pure position bias carries no preference
    (0.0, 0.0, 0.5),   # always "B"
    (0.9, 0.1, 0.9),   # prefers model_a in both orders
    (0.6, 0.9, 0.35),  # first-position bias plus a lean towards model_b
])
def test_debiased_probability_cancels_position(p_ab, p_ba, p_a):
    assert jp.debiased_probability(p_ab, p_ba) == pytest.approx(p_a)


def test_verdict_from_scores_and_expected_score():
    assert jp.verdict_from_scores(None, 2) is None
    assert jp.verdict_from_scores(1, 3) == "b"
    assert jp.verdict_from_scores(2.0, 2.05, margin=0.1) == "tie"
    assert judge_logits.expected_score({"0": 0.1, "1": 0.2, "2": 0.3, "3": 0.4}) == pytest.approx(2.0)


# -- code extraction -------------------------------------------------------------------------

@pytest.mark.parametrize("text,language,code", [
    ("Here:\n```python\ndef f():\n    return 1\n```\nDone.", "python", "def f():\n    return 1\n"),
    ("```py\na = 1\n```\ntext\n```python\nb = 2\n```", "python", "a = 1\n\nb = 2\n"),
    ("Install:\n```bash\npip install x\n```\n```python\nimport x\n```", "python", "import x\n"),
    ("```js\nlet x = 1;\n```", "python", "let x = 1;\n"),  # no python block: keep what there is
    ("1. Do this:\n   ```python\n   x = 1\n   ```\n", "python", "x = 1\n"),  # inside a list
    ("````python\nprint('```')\n````", "python", "print('```')\n"),
    ("~~~python\nx = 2\n~~~", None, "x = 2\n"),
    ("```python\ndef f(:\n    return", "python", "def f(:\n    return\n"),  # cut by max_tokens
])
def test_extract_code(text, language, code):
    assert extract_code(text, language) == code


@pytest.mark.parametrize("text", ["", "Just prose, no code.", "Inline `x = 1` only.",
                                  "```python\n```"])
def test_extract_code_none_without_a_block(text):
    assert extract_code(text, "python") is None


def test_unclosed_block_is_marked():
    assert [b.closed for b in code_blocks("```python\nx\n```\n```python\ny")] == [True, False]
