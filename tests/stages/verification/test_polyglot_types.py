"""Language-neutral test data: types from signatures and values, cases, value and output
comparison (pure)."""

from __future__ import annotations

import math

import pytest
from arenaforge.stages.verification.harness.cases import (
    CallCase,
    CaseError,
    IOCase,
    load_cases,
    resolve_task_kind,
)
from arenaforge.stages.verification.harness.compare import (
    ValueParseError,
    normalize_stdout,
    parse_value,
    stdout_equal,
    values_equal,
)
from arenaforge.stages.verification.harness.jobs import complete_signature
from arenaforge.stages.verification.harness.types import (
    UnsupportedType,
    check_value,
    infer_type,
    parse_signature,
    parse_type,
)


@pytest.mark.parametrize("text,expected", [
    ("int", "int"), ("List[int]", "list[int]"), ("list[list[str]]", "list[list[str]]"),
    ("Dict[str, float]", "dict[str, float]"), ("dict[int, List[bool]]", "dict[int, list[bool]]"),
    ("Optional[int]", "Optional[int]"), ("int | None", "Optional[int]"),
    ("None | str", "Optional[str]"), ("Union[float, None]", "Optional[float]"),
    ("Tuple[int, str]", "tuple[int, str]"), ("typing.List[int]", "list[int]"),
    ("Optional[Optional[int]]", "Optional[int]"),
    ("Any", "Any"),  # parses; only Python has a form for it (Target.takes_any)
])
def test_annotations_in_the_subset_parse(text, expected):
    assert str(parse_type(text)) == expected


@pytest.mark.parametrize("text,why", [
    ("set[int]", ""), ("Union[int, str]", "union"), ("tuple[int, ...]", ""),
    ("dict[float, int]", "keys"), ("MyClass", ""), ("List[", "does not parse"),
    ("Callable[[int], int]", ""),
])
def test_annotations_outside_the_subset_are_named(text, why):
    with pytest.raises(UnsupportedType) as info:
        parse_type(text, "parameter 'x' of f")
    assert "parameter 'x' of f" in str(info.value) and why in str(info.value)


def test_signatures():
    sig = parse_signature("def f(self, xs: List[int], k=3) -> Dict[str, int]:\n    return {}")
    assert sig.name == "f" and [n for n, _ in sig.params] == ["xs", "k"]
    assert sig.params[1][1] is None and not sig.complete
    assert parse_signature("def g(a: int) -> int").complete  # a def line alone
    for bad, why in [("def f(*a) -> int", "positional"), ("def f(x: int) -> None", "None"),
                     ("x = 1", "no function"), ("def f(x: int) -> set[int]", "set")]:
        with pytest.raises(UnsupportedType, match=why):
            parse_signature(bad)


@pytest.mark.parametrize("values,expected", [
    ([1, 2], "int"), ([1, 2.5], "float"), ([True], "bool"), (["a"], "str"),
    ([None, 3], "Optional[int]"), ([[1], [], [2.5]], "list[float]"),
    ([[[]], [[1]]], "list[list[int]]"), ([{"a": 1}, {}], "dict[str, int]"),
    ([{1: "x"}], "dict[int, str]"), ([[1, None]], "list[Optional[int]]"),
    ([{"a": None}, {"b": 2}], "dict[str, Optional[int]]"),
])
def test_types_are_inferred_from_values(values, expected):
    assert str(infer_type(values, "argument 1")) == expected


@pytest.mark.parametrize("values,why", [
    ([None], "cannot infer"), ([[], []], "cannot infer"), ([1, "a"], "mixed"),
    ([True, 1], "mixed"), ([{1.5: 2}], "keys"), ([{1, 2}], "set"),
])
def test_values_that_say_no_type_are_an_error(values, why):
    with pytest.raises(UnsupportedType, match=why):
        infer_type(values, "argument 1")


def test_a_signature_is_completed_from_the_cases():
    cases = [CallCase(([1, 2], "a"), 3.5), CallCase(([], "b"), None)]
    sig = complete_signature("def f(xs, name: str)", cases)
    assert [str(t) for _, t in sig.params] == ["list[int]", "str"]
    assert str(sig.returns) == "Optional[float]"


def test_check_value():
    check_value(3, parse_type("float"), "x")  # an int is a float
    check_value({"1": [None]}, parse_type("dict[int, list[Optional[str]]]"), "x")  # JSON keys
    for value, text in [(True, "int"), (1.5, "int"), (None, "int"), ([1, "a"], "list[int]"),
                        ([1], "tuple[int, int]"), ({"a": 1}, "dict[int, int]")]:
        with pytest.raises(UnsupportedType, match="is not a value of type"):
            check_value(value, parse_type(text), "x")


def test_cases_load_from_plain_data_and_name_what_is_wrong():
    assert load_cases("Function", [{"args": [1, (2, 3)], "expected": {"a": 1}}]) == \
        [CallCase((1, [2, 3]), {"a": 1})]
    assert load_cases("program", [{"stdin": "1\n", "stdout": "2\n"}]) == [IOCase("1\n", "2\n")]
    for kind, rows, why in [
        ("function", [{"args": [1]}], "case 1: missing \\['expected'\\]"),
        ("function", [{"args": 1, "expected": 2}], "case 1: 'args' must be a list"),
        ("function", [{"args": [], "expected": 1}, {"args": [{1}], "expected": 1}],
         "case 2 argument 1: set"),
        ("program", [{"stdin": "x", "stdout": 3}], "'stdout' must be text"),
        ("program", [{"stdin": "x", "stdout": "y", "extra": 1}], "unknown field"),
        ("program", [], "no test cases"),
    ]:
        with pytest.raises(CaseError, match=why):
            load_cases(kind, rows)
    with pytest.raises(ValueError, match="unknown task kind 'script'"):
        resolve_task_kind("script")


@pytest.mark.parametrize("expected,got,equal", [
    (3, 3, True), (3, 3.0, True), (3, 4, False), (0.1 + 0.2, 0.3, True), (1e-12, 0.0, True),
    (1.0, 1.001, False), (float("nan"), float("nan"), True), (1, True, False),
    (True, True, True), (None, None, True), (None, 0, False), ("a", "a", True), ("1", 1, False),
    ([1, [2, 3]], [1, [2, 3.0000000001]], True), ([1, 2], [1, 2, 3], False),
    ((1, 2), [1, 2], True), ({"a": 1, 2: [3]}, {"a": 1, "2": [3]}, True),
    ({"a": 1}, {"a": 1, "b": 2}, False), (10**30, 10**30 + 1, False),
])
def test_values_compare_as_data(expected, got, equal):
    assert values_equal(expected, got) is equal


def test_values_parse_from_json_with_special_floats():
    assert math.isinf(parse_value("[Infinity]")[0]) and math.isnan(parse_value("NaN"))
    assert parse_value('{"1": true}') == {"1": True}
    with pytest.raises(ValueParseError):
        parse_value("PASSED")


@pytest.mark.parametrize("expected,got,equal", [
    ("3\n", "3", True), ("3\n", "3\n\n\n", True), ("1 2\n3\n", "1 2   \r\n3\t\n", True),
    ("a\nb\n", "a\n\nb\n", False), ("  x", "x", False), ("1.0", "1", False),
    ("Yes", "yes", False), ("", "\n\n", True),
])
def test_stdout_is_compared_after_the_stated_normalisation(expected, got, equal):
    assert stdout_equal(expected, got) is equal
    assert normalize_stdout("a \r\nb\t\n\n") == "a\nb"


def test_python_takes_values_of_mixed_types_and_typed_languages_do_not():
    """Values that share no one type (HumanEval's ``compare_one(1, "2,3")``) are ``Any`` for
    Python, whose harness passes each value as it is, and stay unsupported for a typed
    language."""
    from arenaforge.stages.verification.cases import CaseReply, choose_signature
    from arenaforge.stages.verification.harness.targets import target

    reply = CaseReply(None, ({"args": [1, 2.5], "expected": 2.5},
                             {"args": [1, "2,3"], "expected": "2,3"},
                             {"args": ["1", 1], "expected": None}))
    sig = choose_signature("compare_one", [reply], "python")
    assert str(sig.params[0][1]) == str(sig.returns) == "Any"  # Any holds None too
    assert parse_signature("def f(x: Any) -> Any").complete  # what verify reads back
    assert target("python").literal([1, "a", [2.5, None], {"k": True}], parse_type("Any")) == \
        "[1, 'a', [2.5, None], {'k': True}]"
    with pytest.raises(UnsupportedType, match="mixed"):
        choose_signature("compare_one", [reply], "cpp")
    with pytest.raises(UnsupportedType, match="no form for values of mixed or unknown types"):
        target("java").check_signature(parse_signature("def f(x: Any) -> int"))
    # an author's signature the language has no form for is no help: the cases decide
    typed = CaseReply("def add(a: Any, b: Any) -> Any", ({"args": [1, 2], "expected": 3},))
    assert str(choose_signature("add", [typed], "cpp").returns) == "int"
