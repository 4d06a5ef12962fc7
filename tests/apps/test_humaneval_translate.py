"""HumanEval's tests read as language-neutral cases; what each language takes and shows
(``humaneval_translate``, ``humaneval_prompts``)."""

from __future__ import annotations

import pytest
from arenaforge.pipeline.apps.evaluate import load_problems
from arenaforge.pipeline.apps.evaluate_languages import check_model_languages, resolve_languages
from arenaforge.pipeline.apps.humaneval_prompts import (
    chat_program,
    completion_program,
    completion_prompt,
    language_prompt,
)
from arenaforge.pipeline.apps.humaneval_translate import (
    INT_FLOAT,
    LANGUAGES,
    NAME_IN_LANGUAGE,
    PROMPT_HELPER,
    SKIP_REASONS,
    TEST_FORM,
    TYPE,
    TYPE_IN_LANGUAGE,
    VALUE_RANGE,
    Untranslatable,
    check_language,
    language_signature,
    read_cases,
    translate,
    translate_suite,
)


@pytest.fixture(scope="module")
def problems():
    return {p["task_id"]: p for p in load_problems("humaneval")}


def _cases(body: str, entry: str = "f"):
    test = "def check(candidate):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    return [(c.args, c.expected) for c in read_cases("T/0", test, entry)]


def test_every_assert_form_read_becomes_a_case():
    cases = _cases("import math\n"
                   "assert candidate(1, [2, 3]) == 'x'\n"
                   "assert {'a': 1} == candidate(2, [])\n"
                   "assert candidate(3, [-1])\n"
                   "assert not candidate(4, [])\n"
                   "assert candidate(5, []) is False\n"
                   "assert abs(candidate(6, []) - 2.0/4) < 1e-6\n"
                   "assert math.fabs(0.25 - candidate(7, [])) < 1e-6\n"
                   "assert tuple(candidate(8, [])) == tuple([1, 2])\n"
                   "assert True, 'a marker, no case'\n"
                   "print('debugging output')")
    assert cases == [((1, [2, 3]), "x"), ((2, []), {"a": 1}), ((3, [-1]), True),
                     ((4, []), False), ((5, []), False), ((6, []), 0.5), ((7, []), 0.25),
                     ((8, []), [1, 2])]


def test_loops_and_assignments_unroll_into_cases_and_random_inputs_are_seeded():
    body = ("xs = list(range(3))\n"
            "for x in xs:\n"
            "    assert candidate(x) == str(x)\n"
            "import random\n"
            "for _ in range(3):\n"
            "    a = random.randint(0, 10 ** 6)\n"
            "    assert candidate(a) == str(a)\n")
    first, again = _cases(body), _cases(body)
    assert first[:3] == [((0,), "0"), ((1,), "1"), ((2,), "2")]
    assert len(first) == 6 and first == again  # fixed data, run after run


def test_assert_against_the_entry_point_itself_is_vacuous_and_dropped():
    assert _cases("assert candidate([1]) == [1]\nassert tuple(candidate([2])) == tuple(f([2]))",
                  entry="f") == [(([1],), [1])]


@pytest.mark.parametrize("body,match", [
    ("assert candidate(1) > 0", "not a call compared"),
    ("x = candidate(1)\nassert x == 1", "outside a compared call"),
    ("import os\nassert candidate(1) == 1", "imports os"),
    ("assert candidate(x=1) == 1", "keyword"),
    ("while True:\n    break", "While"),
    ("print(1)", "no test compares"),
])
def test_other_test_forms_are_untranslatable_with_the_line(body, match):
    with pytest.raises(Untranslatable, match=match) as exc:
        _cases(body)
    assert exc.value.reason == TEST_FORM


def test_a_translated_problem_has_the_prompt_types_and_its_docstring(problems):
    tr = translate(problems["HumanEval/0"])
    assert tr.signature.name == "has_close_elements"
    assert [(n, str(t)) for n, t in tr.signature.params] == [
        ("numbers", "list[float]"), ("threshold", "float")]
    assert str(tr.signature.returns) == "bool" and len(tr.cases) == 7
    assert tr.docstring.startswith("Check if in given list of numbers")
    # unannotated: inferred from the cases; an unannotated tuple stays a tuple
    assert str(translate(problems["HumanEval/53"]).signature.returns) == "int"
    assert str(translate(problems["HumanEval/136"]).signature.returns) == \
        "tuple[Optional[int], Optional[int]]"
    # `l: list` says less than the values: its element type is inferred
    assert str(translate(problems["HumanEval/30"]).signature.params[0][1]) == "list[int]"


@pytest.mark.parametrize("task_id,language,reason", [
    ("HumanEval/22", "cpp", TYPE_IN_LANGUAGE),    # List[Any]: Python's harness takes it
    ("HumanEval/137", "rust", TYPE),              # int, float and str in one parameter
    ("HumanEval/32", "python", PROMPT_HELPER),    # find_zero needs the prompt's poly
    ("HumanEval/38", "go", PROMPT_HELPER),        # decode_cyclic: the encoder is Python
    ("HumanEval/92", "java", INT_FLOAT),          # any_int: isinstance(x, int)
    ("HumanEval/7", "c", TYPE_IN_LANGUAGE),       # C cannot return a list
    ("HumanEval/8", "java", TYPE_IN_LANGUAGE),    # no tuple type
    ("HumanEval/23", "c", NAME_IN_LANGUAGE),      # strlen of <string.h>
    ("HumanEval/114", "javascript", VALUE_RANGE),  # -9999999999999999 > 2**53
])
def test_skips_say_why(problems, task_id, language, reason):
    with pytest.raises(Untranslatable) as exc:
        check_language(translate(problems[task_id]), language)
    assert exc.value.reason == reason and task_id in exc.value.detail
    assert reason in SKIP_REASONS


def test_coverage_per_language_is_what_the_docs_say(problems):
    counts = {lang: len(translate_suite(list(problems.values()), lang)[0]) for lang in LANGUAGES}
    assert counts == {"python": 154, "cpp": 153, "c": 97, "javascript": 152, "typescript": 152,
                      "java": 147, "go": 147, "rust": 153}


def test_parameters_named_like_a_keyword_are_renamed(problems):
    algebra, palindrome = translate(problems["HumanEval/160"]), translate(problems["HumanEval/10"])
    assert "operator_" in language_prompt(algebra, "cpp")
    assert "operator: Vec<String>" in language_prompt(algebra, "rust")  # no keyword there
    assert "func make_palindrome(string_ string) string" in language_prompt(palindrome, "go")
    # Go: a parameter named like a package the prompt imports would shadow it
    strings = translate(problems["HumanEval/7"])
    assert language_signature(strings, "go").params[0][0] == "strings_"
    assert language_signature(strings, "java").params[0][0] == "strings"


def test_prompts_show_the_docstring_as_a_comment_above_the_declaration(problems):
    tr = translate(problems["HumanEval/7"])
    rust = language_prompt(tr, "rust")
    assert rust.startswith("/// Filter an input list of strings") and rust.endswith(
        "fn filter_by_substring(strings: Vec<String>, substring: String) -> Vec<String>")
    java = completion_prompt(tr, "java")
    assert java.startswith("import java.util.*;") and "class Problem {" in java
    assert java.endswith("public static List<String> filter_by_substring(List<String> strings, "
                         "String substring) {\n")
    assert completion_program(tr, "java", "        return strings;").endswith(
        "        return strings;\n    }\n}\n")
    go = completion_program(tr, "go", "\treturn nil")
    assert "var _ = strings.Split" in go  # the prompt's imports stay used


def test_a_chat_answer_keeps_the_block_defining_the_entry_point(problems):
    tr = translate(problems["HumanEval/2"])
    answer = ("Usage:\n```cpp\nint main() { return 0; }\n```\nSolution:\n```cpp\n"
              "double truncate_number(double number) { return number - (long long)number; }\n"
              "```")
    program = chat_program(tr, "cpp", answer)
    assert program.startswith("#include <algorithm>") and "int main" not in program
    assert program.rstrip().endswith("(long long)number; }")


def test_languages_resolve_and_canonical_is_python_only():
    assert resolve_languages(["all"]) == list(LANGUAGES)
    assert resolve_languages(["C++", "cpp", "rust"]) == ["cpp", "rust"]
    with pytest.raises(ValueError, match="unknown eval language 'cobol'"):
        resolve_languages(["cobol"])
    assert check_model_languages("canonical", ["python"]) == ["python"]
    with pytest.raises(ValueError, match="Python only, not in cpp"):
        check_model_languages("canonical", ["python", "cpp"])
