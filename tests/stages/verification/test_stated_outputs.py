"""An answer's demo must print what its comments say it prints (``stated_outputs``): the pure
reading of claims, and the check in verify's real sandbox."""

from __future__ import annotations

import pyarrow as pa
import pytest
from arenaforge.stages.verification.stated_outputs import (
    CONSISTENT,
    CONTRADICTED,
    NONE,
    agrees,
    check_outputs,
    claims,
    outputs_job,
)
from arenaforge.stages.verification.verify import VerifyConfig, run
from test_verify import ADD, ADD_TESTS, Ctx, make_tests_table

# the default run's answer to "implement a simple sorting algorithm": sorted() under a
# bubble-sort name, called for a side effect it does not have, with an invented printed list
FALSE_SORT = ("def bubble_sort(arr):\n    return sorted(arr)\n\n# Example usage:\n"
              "arr = [64, 34, 25, 12, 12, 12, 13, 14, 15]\nbubble_sort(arr)\n"
              "print(arr)  # Output: [12, 13, 14, 15, 64, 12, 14, 15]\n")


@pytest.mark.parametrize("code,stated", [
    ("print(f(1))  # Output: 4\n", ["4"]),
    ("print(f(1))  # Expected output: [1, 2]\n", ["[1, 2]"]),
    ("print(f(1))  # -> 'abc'\n", ["'abc'"]),
    ("print(f(1))  # prints: True\n", ["True"]),
    ("print(f(1))  # Output: 12 days\n", []),  # prose: not checked
    ("x = f(1)  # Output: 4\n", []),  # not a print
    ("# Return the smallest number\nprint(f(1))\n", []),  # a code comment, not a claim
    ("print('# Output: 4')\n", []),  # inside a string
    ("x = 1; print(x)  # Output: 1\n", []),  # shares its line: cannot be wrapped
    ("def f(:\n", []),  # does not parse
    (None, []),
])
def test_claims_reads_only_checkable_stated_outputs(code, stated):
    assert [c.stated for c in claims(code)] == stated


@pytest.mark.parametrize("out,stated,ok", [
    ("4\n", "4", True), ("[1, 2]\n", "[1,2]", True), ("Hello World\n", '"Hello World"', True),
    ("Sum: 8\n", "8", True), ("0.30000000000000004\n", "0.3", True), ("(1, 2)\n", "[1, 2]", True),
    ("285\n", "140", False), ("18\n", "8", False), ("True\n", "False", False),
    ("[64, 34]\n", "[34, 64]", False),
])
def test_agrees(out, stated, ok):
    assert agrees(out, stated) is ok


@pytest.mark.parametrize("code,status", [
    (FALSE_SORT, CONTRADICTED),
    (("def sq(n):\n    return n * n\n\nif __name__ == '__main__':\n"
     "    print(sq(3))  # Output: 9\n    print('sq(2) =', sq(2))  # Output: 4\n"), CONSISTENT),
    (("def sq(n):\n    return sum(i * i for i in range(n))\n"
     "print(sq(10))  # Output: 385\n"), CONTRADICTED),  # 0..9, not 1..10
    # the demo waits for input: the claimed print is never reached, so nothing is checked
    ("def sq(n):\n    return n * n\nprint(sq(int(input())))  # Output: 9\n", NONE),
    ("def sq(n):\n    return n * n\nfor k in range(2):\n    print(sq(k))  # Output: 0\n",
     CONSISTENT),  # a print in a loop: its first run is checked
])
def test_check_outputs_in_the_sandbox(sandbox_pool, code, status):
    job = outputs_job(code, timeout_s=2)
    [result] = sandbox_pool.run_programs([job])
    check = check_outputs(code, result)
    assert check.status == status
    assert (check.mismatch is not None) == (status == CONTRADICTED)


JS_SUM = "function total(xs) {\n  return xs.reduce((a, b) => a + b, 0);\n}\n"


@pytest.mark.parametrize("code,stated", [
    ('console.log(total([1, 2]));  // Output: 3\nconsole.log(1); // one\n', ["3"]),
    ('  console.log("a // b", total([1]))  // => 1\n', ["1"]),  # a // inside a string
    ('const s = total([1]); console.log(s); // Output: 1\n', []),  # not alone on its line
    ('console.log(total([1]),\n  2);  // Output: 1 2\n', []),  # over two lines
    ('// console.log(total([1]));  // Output: 1\n', []),  # commented out
])
def test_javascript_claims_are_one_line_console_logs(code, stated):
    assert [c.stated for c in claims(code, "javascript")] == stated
    assert claims(code, "cpp") == []  # a language whose demos are not read states nothing


@pytest.mark.parametrize("language,demo,status", [
    ("javascript", "console.log(total([1, 2, 3]));  // Output: 6\n", CONSISTENT),
    ("javascript", "console.log(total([1, 2, 3]));  // Output: 5\n", CONTRADICTED),
    ("javascript", "console.log([total([1]) > 0, null]);  // Output: [True, None]\n",
     CONSISTENT),  # Node prints [ true, null ]
    ("javascript", "console.log(Array(200).fill(1));  // Output: [1, 1]\n",
     NONE),  # Node abbreviates the array (... more items): not checked
    ("typescript", "console.log(total([2, 2]));  // Output: 4\n", CONSISTENT),
    ("typescript", "console.log('sum:', total([2, 2]));  // Output: 5\n", CONTRADICTED),
])
def test_javascript_and_typescript_demos_in_the_sandbox(sandbox_pool, language, demo, status):
    from arenaforge.pipeline.sandbox.languages import toolchain

    if not toolchain(language).available:
        pytest.skip(f"no {language} toolchain here (scripts/setup.sh installs it)")
    code = JS_SUM + demo
    [result] = sandbox_pool.run_programs([outputs_job(code, timeout_s=5, language=language)])
    check = check_outputs(code, result, language=language)
    assert check.status == status, (result.compile, result.runs)


def test_verify_withholds_verified_from_a_false_demo(sandbox_pool):
    """Both answers pass every test; the one whose demo states a wrong sum is not verified,
    and verify selects the other."""
    false_demo = ADD + "print(add(2, 2))  # Output: 5\n"
    true_demo = ADD.replace("a + b", "b + a") + "print(add(2, 2))  # Output: 4\n"
    answers = pa.table({"instruction_id": ["i1", "i1"], "instruction": ["add two numbers"] * 2,
                        "model": ["m1", "m2"], "response": ["..."] * 2,
                        "code": [false_demo, true_demo]})
    tests = make_tests_table([("i1", "m1", k, t, True) for k, t in enumerate(ADD_TESTS)])
    rate = pa.table({"instruction_id": ["i1", "i1"], "model": ["m1", "m2"],
                     "final_score": [0.8, 0.2], "winner": ["m1", "m1"]})
    result = run(answers, VerifyConfig(), Ctx(sandbox_pool, {"tests": tests, "rate": rate}))
    rows = {r["model"]: r for r in result.table.to_pylist()}
    assert rows["m1"]["status"] == rows["m2"]["status"] == "passed"
    assert (rows["m1"]["admission"], rows["m1"]["verified"]) == ("false_stated_output", False)
    assert rows["m1"]["stated_outputs"] == CONTRADICTED
    assert "states 5 but printed '4'" in rows["m1"]["stated_output_mismatch"]
    assert (rows["m2"]["admission"], rows["m2"]["stated_outputs"]) == ("verified", CONSISTENT)
    assert rows["m2"]["selected"] and not rows["m1"]["selected"]
    assert result.stats["stated_outputs.contradicted"] == 1
    assert result.stats["stated_outputs.consistent"] == 1
