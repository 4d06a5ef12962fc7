"""Entry points: the instruction's name, per-candidate binding rules, and the probe-gate example."""

from __future__ import annotations

import pytest
from arenaforge.stages.verification.entry_points import (
    bind,
    bound_code,
    call_arities,
    instruction_function_name,
)
from arenaforge.stages.verification.probe_gate import instruction_example
from arenaforge.stages.verification.test_split import (
    call_and_expected,
    split_tests,
)


@pytest.mark.parametrize("text,name", [
    ("Write a function `split_string_into_words(s)` that splits s into words.",
     "split_string_into_words"),
    ("Implement def find_maximum(numbers): return the largest.", "find_maximum"),
    ("Create a Python function named `is_even` that checks n.", "is_even"),
    ("Write a function called reverse_words which reverses word order.", "reverse_words"),
    ("The function count_vowels(s) should count vowels.", "count_vowels"),
    ("Write a Python function that returns the max of a list. Name it find_max.", "find_max"),
    ("Write a program that sorts numbers using `sorted()`.", None),
    ("Write a function that adds two numbers.", None),
    (None, None),
])
def test_instruction_function_name(text, name):
    assert instruction_function_name(text) == name


TWO = "def first(a):\n    return a\ndef second(a, b):\n    return a + b\n"


@pytest.mark.parametrize("code,kwargs,bound,rule", [
    ("def add(a, b):\n    return a + b\n", {"from_instruction": True}, "add", "instruction"),
    ("def add(a, b):\n    return a + b\n", {}, "add", "same_name"),
    ("class Solution:\n    def add(self, a, b):\n        return a + b\n", {},
     "Solution().add", "same_name"),
    (TWO, {"arities": (2,)}, "second", "signature"),
    ("def _h(x):\n    return x\ndef plus(a, b):\n    return _h(a) + b\n", {"arities": (3,)},
     "plus", "single_public"),
    (TWO.replace("a, b", "a"), {"arities": (1,), "author_names": ["second"]}, "second",
     "author_name"),
    (TWO.replace("a, b", "a"), {"arities": (1,)}, None, None),  # two candidates, no hint
    ("x = 1\n", {}, None, None),
    ("def broken(:\n", {}, None, None),
    (None, {}, None, None),
])
def test_binding_rules(code, kwargs, bound, rule):
    b = bind(code, "add", **kwargs)
    assert (b.bound_function, b.rule) == (bound, rule)


def test_the_issue_case_binds_separate_words_to_the_instructions_name():
    code = "def separate_words(text):\n    return text.split()\n"
    tests = ['assert split_string_into_words("a b") == ["a", "b"]']
    b = bind(code, "split_string_into_words", from_instruction=True,
             arities=call_arities(tests, "split_string_into_words"))
    assert (b.bound_function, b.rule, b.fits) == ("separate_words", "signature", True)
    namespace: dict = {}
    exec(bound_code(code, b), namespace)  # noqa: S102  (our own literal code)
    assert namespace["split_string_into_words"]("a b") == ["a", "b"]


def test_signature_fit_is_recorded_for_a_misfit():
    b = bind("def add(a):\n    return a\n", "add", arities=(2,))
    assert (b.bound_function, b.fits) == ("add", False)


@pytest.mark.parametrize("text,test", [
    ("For example, `is_even(4)` should return `True`.", "assert is_even(4) == True"),
    ("is_even(3) -> False", "assert is_even(3) == False"),
    ('>>> is_even(10)\nTrue', "assert is_even(10) == True"),
    ("is_even(n) returns True for even n", None),
    ("Use is_even(len(s)) for that.", None),
    ("Example: is_even(2.5) returns 0.5 (a float)", "assert _close(is_even(2.5), 0.5)"),
])
def test_instruction_example(text, test):
    got = instruction_example(text, "is_even")
    assert (got.splitlines()[-1] if got else None) == test


def test_normalised_calls_make_different_spellings_agree():
    a = call_and_expected("assert f( [1,2],'x' )==3", "f")
    b = call_and_expected('assert 3 == f([1, 2], "x")', "f")
    assert a == b == ("f([1, 2], 'x')", "3")
    assert call_and_expected("x = 1\nassert f(x) == 2", "f") is None
    assert call_and_expected("assert f(g(1)) == 2", "f") is None


@pytest.mark.parametrize("n", range(1, 9))
def test_split_is_seeded_and_at_least_half_hidden(n):
    split = split_tests(7, "iid", n)
    assert split == split_tests(7, "iid", n)
    assert split.count("hidden") == (n + 1) // 2
    others = [split_tests(seed, "iid", n) for seed in range(8)]
    if n > 2:
        assert len({tuple(s) for s in others}) > 1  # the seed decides, not the position


def test_a_prompt_that_defines_helpers_first_names_the_stub_to_write():
    # HumanEval/10's shape: a finished helper, then the function to implement (the mutation
    # bench found the first `def` taken, so no mutant of the real function could fail)
    prompt = ('def is_palindrome(string: str) -> bool:\n    """ Test if palindrome """\n'
              '    return string == string[::-1]\n\n\n'
              'def make_palindrome(string: str) -> str:\n    """ Find the shortest palindrome\n'
              '    >>> make_palindrome(\'cat\')\n    \'catac\'\n    """\n')
    assert instruction_function_name(prompt) == "make_palindrome"
    fenced = "Complete this:\n```python\ndef helper(x):\n    return x\n\ndef solve(a):\n    ...\n```"
    assert instruction_function_name(fenced) == "solve"


def test_every_humaneval_prompt_names_its_entry_point():
    from arenaforge.pipeline.apps.evaluate import load_problems

    problems = load_problems()
    wrong = [p["task_id"] for p in problems
             if instruction_function_name(p["prompt"]) != p["entry_point"]]
    assert not wrong, wrong
