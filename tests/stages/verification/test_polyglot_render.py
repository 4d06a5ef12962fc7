"""Rendering language-neutral calls into each language (pure: the text, not its execution; the
corpus test runs what is rendered)."""

from __future__ import annotations

import pytest
from arenaforge.pipeline.sandbox.languages import LANGUAGE_IDS, UnknownLanguage
from arenaforge.stages.verification.harness.cases import CallCase
from arenaforge.stages.verification.harness.jobs import complete_signature, function_job
from arenaforge.stages.verification.harness.targets import target
from arenaforge.stages.verification.harness.types import UnsupportedType, parse_type

SIG = "def f(xs: List[int], names: Dict[str, float], o: Optional[str], b: bool) -> List[int]"
CASE = CallCase(([1, -2], {"a": 1}, None, True), [1])


@pytest.mark.parametrize("language,text,value,expected", [
    ("python", "list[int]", [1, 2], "[1, 2]"),
    ("python", "tuple[int, str]", [1, "a"], "(1, 'a')"),
    ("python", "float", float("inf"), "float('inf')"),
    ("python", "dict[int, str]", {"1": "x"}, "{1: 'x'}"),
    ("cpp", "list[list[int]]", [[1], []], "{{1LL}, {}}"),
    ("cpp", "dict[str, bool]", {"a": True}, '{{std::string("a", 1), true}}'),
    ("cpp", "Optional[float]", None, "std::nullopt"),
    ("cpp", "str", 'a"\n?é', r'std::string("a\"\012\077\303\251", 6)'),
    ("cpp", "int", -(1 << 63), "(-9223372036854775807LL - 1)"),
    ("c", "list[float]", [1, 2.5], "(double[]){1.0, 2.5}, 2"),
    ("c", "list[str]", [], "NULL, 0"),
    ("javascript", "Optional[int]", None, "undefined"),
    ("javascript", "dict[int, str]", {-1: "a", 2: "b"}, '{[-1]: "a", 2: "b"}'),
    ("typescript", "float", float("nan"), "NaN"),
    ("java", "list[int]", [1, 2],
     "new java.util.ArrayList<Long>(java.util.Arrays.<Long>asList(1L, 2L))"),
    ("java", "Optional[str]", None, "java.util.Optional.<String>empty()"),
    ("java", "dict[str, float]", {},
     "new java.util.HashMap<String, Double>()"),
    ("go", "list[list[int]]", [[1], [2, 3]], "[][]int{[]int{1}, []int{2, 3}}"),
    ("go", "Optional[str]", "x", 'afPtr[string]("x")'),
    ("go", "dict[str, int]", {"a": 1}, 'map[string]int{"a": 1}'),
    ("rust", "str", "a\tb", 'String::from("a\\u{9}b")'),
    ("rust", "Optional[list[int]]", [1], "Some(vec![1])"),
    ("rust", "dict[str, int]", {"k": 2},
     'std::collections::HashMap::from([(String::from("k"), 2)])'),
    ("rust", "tuple[int, float]", [1, 2], "(1, 2.0)"),
])
def test_literals(language, text, value, expected):
    assert target(language).literal(value, parse_type(text)) == expected


@pytest.mark.parametrize("language,expected", [
    ("python", ("def f(xs: List[int], names: Dict[str, float], o: Optional[str], b: bool) "
                "-> List[int]:")),
    ("cpp", ("std::vector<long long> f(std::vector<long long> xs, std::map<std::string, "
             "double> names, std::optional<std::string> o, bool b)")),
    ("javascript", "function f(xs, names, o, b) {"),
    ("typescript", ("function f(xs: number[], names: {[key: string]: number}, "
                    "o: string | undefined, b: boolean): number[] {")),
    ("java", ("public static List<Long> f(List<Long> xs, Map<String, Double> names, "
              "Optional<String> o, boolean b)")),
    ("go", "func f(xs []int, names map[string]float64, o *string, b bool) []int"),
    ("rust", ("fn f(xs: Vec<i64>, names: HashMap<String, f64>, o: Option<String>, b: bool) "
              "-> Vec<i64>")),
])
def test_declarations(language, expected):
    assert target(language).declaration(complete_signature(SIG, [CASE])) == expected


def test_c_declares_lists_as_pointer_and_length():
    sig = complete_signature("def total(xs: List[float], name: str) -> str", [])
    assert target("c").declaration(sig) == \
        "char* total(const double* xs, int xs_len, const char* name)"


@pytest.mark.parametrize("language,text,why", [
    ("c", "dict[str, int]", "C takes int, float, bool, str"),
    ("c", "list[list[int]]", "C takes"),
    ("c", "Optional[int]", "C takes"),
    ("java", "tuple[int, int]", "tuple"),
    ("go", "tuple[int, int]", "tuple"),
])
def test_types_a_language_lacks_are_unsupported(language, text, why):
    sig = complete_signature(f"def f(x: {text}) -> int", [])
    with pytest.raises(UnsupportedType, match=why):
        target(language).harness("", sig, [])


def test_c_cannot_return_a_list():
    sig = complete_signature("def f(x: int) -> List[int]", [])
    with pytest.raises(UnsupportedType, match="cannot return a list"):
        target("c").harness("", sig, [])


@pytest.mark.parametrize("language", LANGUAGE_IDS)
def test_every_language_renders_a_harness_job(language):
    sig = complete_signature(SIG if language != "c" else
                             "def f(xs: List[int], b: bool) -> int", [])
    case = CASE if language != "c" else CallCase(([1, -2], True), 1)
    job = function_job(language, "/* solution */", sig, [case, case], timeout_s=2)
    assert job.calls == 2 and job.timeout_s == 2
    text = job.source + job.harness
    assert "/* solution */" in text
    assert bool(job.harness) == (language in ("python", "go"))  # a unit of its own there


def test_bad_calls_are_named():
    sig = complete_signature("def f(a: int, b: str) -> int", [])
    with pytest.raises(UnsupportedType, match="case 2: 1 arguments for f, which takes 2"):
        function_job("python", "", sig, [CallCase((1, "x"), 1), CallCase((1,), 1)])
    with pytest.raises(UnsupportedType, match="case 1, argument 'b': 3 is not a value of type"):
        function_job("cpp", "", sig, [CallCase((1, 3), 1)])
    with pytest.raises(UnsupportedType, match="64-bit"):
        function_job("rust", "", sig, [CallCase((1 << 70, "x"), 1)])
    with pytest.raises(UnknownLanguage):
        target("cobol")


def test_renaming_a_solutions_own_main():
    sig = complete_signature("def f(a: int) -> int", [])
    go_src, _ = target("go").harness("import \"fmt\"\nfunc main() { fmt.Println(1) }", sig, [])
    assert go_src.startswith("package main; import") and "func af_solution_main()" in go_src
    rs_src, _ = target("rust").harness("fn main() {}\nfn f(a: i64) -> i64 { a }", sig, [])
    assert "fn af_solution_main()" in rs_src and rs_src.count("fn main()") == 1
    java_src, _ = target("java").harness("import java.util.*;\nlong f(long a) { return a; }",
                                         sig, [CallCase((1,), 1)])
    assert java_src.startswith("import java.util.*; class Solution { \nlong f")
    assert "new Solution().f(1L)" in java_src
