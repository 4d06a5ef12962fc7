"""tests stage: entry points, assert extraction, and cross-checking in the real sandbox."""

from __future__ import annotations

import pyarrow as pa
import pytest
from arenaforge.stages.verification.test_parsing import (
    EntryPoint,
    extract_program,
    extract_tests,
    find_entry_point,
    probe_program,
    strip_main_guard,
)
from arenaforge.stages.verification.tests import TestGenConfig, build_conversation, run
from scripted import ScriptedChat

# -- parsing (pure) -------------------------------------------------------------------------------

def test_entry_point_skips_helpers_and_votes():
    codes = [("import math\ndef _h(x):\n    return x\ndef area(r: float) -> float:\n"
             "    return math.pi * _h(r) ** 2\n"),
             "def square(x):\n    return x * x\ndef area(r):\n    return 3.14 * square(r)\n",
             "def circle_area(r):\n    return 3.14 * r * r\n", None, "def broken(:"]
    assert find_entry_point(codes) == EntryPoint("area", "def area(r: float) -> float", 2)
    assert find_entry_point([None, "print('hi')"]) is None


def test_entry_point_can_be_a_class():
    code = "class Stack:\n    def push(self, x):\n        pass\ndef main():\n    Stack()\n"
    assert find_entry_point([code]).signature == "class Stack"


REPLY = '''Sure! Here are the tests:

```python
import math
from solution import area

assert area(1) == math.pi
assert area(0) == 0
assert area(0) == 0
assert helper(2) == 1
print(area(2))

def test_two():
    r = 2
    assert area(r) == 4 * math.pi

class TestArea(unittest.TestCase):
    def test_neg(self):
        self.assertEqual(area(-1), math.pi)
        self.assertTrue(area(3) > 28)

def check(candidate):
    assert candidate(10) > 314

def area(r):
    assert r >= 0
    return math.pi * r * r

if __name__ == "__main__":
    assert area(5) > 78
    unittest.main()
```
These cover the edge cases.'''


def test_extract_tests_from_a_realistic_reply():
    parsed = extract_tests(REPLY, "area")
    assert parsed.parse_error is None
    assert parsed.tests == (
        "import math\nassert area(1) == math.pi",
        "assert area(0) == 0",
        "import math\nr = 2\nassert area(r) == 4 * math.pi",
        "import math\nassert area(-1) == math.pi",
        "assert area(3) > 28",
        "assert area(10) > 314",
        "assert area(5) > 78",
    )
    assert extract_tests(REPLY, "area", max_tests=2).tests == parsed.tests[:2]


@pytest.mark.parametrize("text,error", [
    (None, "empty output"),
    ("   ", "empty output"),
    ("I can't write tests without more details.", "no assert calling area found"),
    ("```python\nassert len([1]) == 1\n```", "no assert calling area found"),
    ("```python\nassert area(x) == 2\n```", "no assert calling area found"),  # x undefined
])
def test_extract_tests_failure_is_a_value(text, error):
    parsed = extract_tests(text, "area")
    assert parsed.tests == () and parsed.parse_error == error


def test_extract_tests_salvages_lines_from_a_cut_reply():
    text = "```python\nassert area(1) == 3.14\nassert area(2) == 12.56\nassert area(3) == (28"
    assert extract_tests(text, "area").tests == ("assert area(1) == 3.14",
                                                  "assert area(2) == 12.56")


def test_program_helpers():
    assert extract_program("no code at all, just words")[0] is None
    assert extract_program("def f():\n    return 1\n") == ("def f():\n    return 1\n", None)
    assert strip_main_guard("x = 1\nif __name__ == '__main__':\n    y = input()\nz = 2\n") == \
        "x = 1\nz = 2\n"
    assert probe_program("assert f(1) > 2") is None
    assert probe_program("assert f(1) == 2") == ("print(repr(f(1))[:300])\nassert True", "f(1)")


def test_conversation_shows_signature_not_answers():
    entry = EntryPoint("area", "def area(r)", 2)
    conv = build_conversation("Compute {the} area of a circle", entry, 4)
    user = conv[1]["content"]
    assert "Compute {the} area of a circle" in user and "def area(r)" in user
    assert "4" in user and "assert area(" in user and "return" not in user


# -- the stage with a scripted author and the real sandbox ---------------------------------------

class ScriptedAuthor(ScriptedChat):
    """Replies from a table keyed by a substring of the request."""

    def reply(self, conv):
        return next((r for key, r in self.replies.items() if key in conv[1]["content"]), "")


class Ctx:
    def __init__(self, pool, authors):
        self.pool, self.authors, self.seed = pool, authors, 0

    def backend(self, model_id):
        return self.authors[model_id]

    def sandbox(self):
        return self.pool

    def advance(self, rows):
        pass


@pytest.fixture()
def pool(sandbox_pool):
    return sandbox_pool


def fence(*lines):
    return "```python\n" + "\n".join(lines) + "\n```"


def test_stage_cross_checks_against_all_answers(pool):
    good = "def add(a, b):\n    return a + b\n"
    answers = pa.table({
        "instruction_id": ["i1"] * 3 + ["i2"] * 2,
        "instruction": ["Add two ints"] * 3 + ["Print a poem"] * 2,
        "model": ["m1", "m2", "m3", "m1", "m2"],
        "code": [good, good, "def add(a, b):\n    return a - b\n", None, None],
    })
    authors = {
        "m1": ScriptedAuthor({"Add two": fence("assert add(1, 2) == 3", "assert add(2, 2) == 5",
                                               "assert add(0, 0) == 0")}),
        "m2": ScriptedAuthor({"Add two": "I would test it by hand."}),
        "m3": ScriptedAuthor({"Add two": fence("assert add(5, 5) == 0", "assert add(1, 2) == 3")}),
    }
    result = run(answers, TestGenConfig(authors=list(authors)), Ctx(pool, authors))
    rows = result.table.to_pylist()
    i1 = {(r["author"], r["test_idx"]): r for r in rows if r["instruction_id"] == "i1"}
    # m1's tests: t0 passed by {m1, m2} and written by m3 too; t1 passed by nobody; t2 by all
    assert i1["m1", 0]["passed_by"] == ["m1", "m2"]
    assert (i1["m1", 0]["survived"], i1["m1", 0]["trusted_by"]) == (True, "authors_agree")
    # a test no answer passes is evidence against the answers: it stays (strength 1)
    assert (i1["m1", 1]["survived"], i1["m1", 1]["reason"], i1["m1", 1]["trusted_by"],
            i1["m1", 1]["strength"]) == (True, None, "written", 1)
    assert i1["m1", 2]["survived"] and i1["m1", 2]["passed_by"] == ["m1", "m2", "m3"]
    assert i1["m1", 2]["trusted_by"] == "written+passer"
    # m2 wrote nothing usable: kept as a value with its raw text
    assert (i1["m2", -1]["reason"], i1["m2", -1]["raw"]) == ("parse_error",
                                                             "I would test it by hand.")
    assert i1["m2", -1]["parse_error"] == "no assert calling add found"
    # m3's first test encodes its own wrong answer's behaviour (only that answer passes it):
    # nothing contradicts it on its call, so it stays, as weak evidence; its second duplicates
    assert (i1["m3", 0]["survived"], i1["m3", 0]["trusted_by"]) == (True, "written")
    assert (i1["m3", 1]["survived"], i1["m3", 1]["reason"]) == (False, "duplicate")
    # no answer passes every trusted test, so none will be verified
    assert all(r["consensus"] == [] for k, r in i1.items() if k[1] >= 0)
    assert {r["suite_status"] for r in i1.values()} == {"decided"}
    assert not any(r["no_tests"] for r in i1.values())
    assert {r["entry_point"] for r in i1.values()} == {"add"}
    # i2 has no code at all: no entry point, nobody was asked, marked no_tests
    i2 = [r for r in rows if r["instruction_id"] == "i2"]
    assert len(i2) == 3 and all(r["no_tests"] and r["reason"] == "no_entry_point" for r in i2)
    assert all("Print a poem" not in c[1]["content"] for a in authors.values() for c in a.seen)
    s = result.stats
    assert s["tests_written.m1"] == 3 and s["tests_survived.m1"] == 3
    assert s["parse_errors.m2"] == 1 and s["instructions_no_tests"] == 1
    assert s["discarded.duplicate"] == 1 and s["instructions_all_fail"] == 1
    assert not any(k.startswith("discarded.") and k != "discarded.duplicate" for k in s)
