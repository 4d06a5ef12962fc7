"""The probe gate: a cheap check of an answer before its program-level tests.

An answer passes the probe gate when it has code, defines something the tests can bind to
(``arenaforge.stages.verification.entry_points.bind``) with a signature that accepts the tests' calls, loads without
error, and returns what the instruction's own example says, when the instruction gives one
(``instruction_example``: ``f(2) returns 4``, ``f([1, 2]) -> 3``, ``>>> f(1)`` then ``1``).
Verdicts, first that applies: ``no_code``, ``no_entry_point``, ``signature_mismatch``,
``import_error``, ``example_failed``, ``pass``. The program gate is the hidden + augmented suite
(``pass``, ``fail``, ``no_tests``); verify records both on every row so that their agreement
can be measured.
"""

from __future__ import annotations

import re

from arenaforge.stages.verification.test_split import (
    _NOT_LITERAL,
    assertion_source,
    call_and_expected,
    literal,
)

PASS, NO_CODE, NO_ENTRY_POINT, SIGNATURE_MISMATCH, IMPORT_ERROR, EXAMPLE_FAILED = (
    "pass", "no_code", "no_entry_point", "signature_mismatch", "import_error", "example_failed")
PROBE_VERDICTS = (PASS, NO_CODE, NO_ENTRY_POINT, SIGNATURE_MISMATCH, IMPORT_ERROR,
                  EXAMPLE_FAILED)
PROGRAM_PASS, PROGRAM_FAIL, PROGRAM_NO_TESTS = "pass", "fail", "no_tests"
# the probe verdicts that say an answer has no usable code: never emitted, whatever the judge said
NO_USABLE_CODE = (NO_CODE, NO_ENTRY_POINT, SIGNATURE_MISMATCH, IMPORT_ERROR)

# Words between an example call and its value ("f(2) should return 4", "f(2) -> 4", "f(2) is 4",
# HumanEval's "f(2) ==> 4" and "f(2) ➞ 4").
_CONNECTOR = re.compile(
    r"\s*(?:`\s*)?(?:,?\s*(?:it\s+)?(?:should|would|will|must)\s+(?:return|output|give|be)"
    r"|returns?|outputs?|gives|yields|==>|==|=>|->|→|➞|=|is|:)\s*(?:`\s*)?", re.IGNORECASE)


def _balanced_call(text: str, start: int) -> int | None:
    """Index just past the ``)`` closing the ``(`` at ``start``."""
    depth, quote = 0, None
    for i in range(start, min(len(text), start + 500)):
        ch = text[i]
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _leading_literal(text: str) -> str | None:
    """The longest prefix of ``text`` (up to 300 characters) that is a Python literal and is
    not followed by more of a word or expression."""
    text = text[:300]
    for end in range(len(text), 0, -1):
        if end < len(text) and (text[end].isalnum() or text[end] in "_([{.'\""):
            continue
        candidate = text[:end].strip().rstrip(".,;")
        if candidate and literal(candidate) is not _NOT_LITERAL:
            return candidate
    return None


def instruction_example(instruction: str | None, entry_point: str) -> str | None:
    """The assert for the instruction's own example of ``entry_point``, when it gives one.

    >>> instruction_example("E.g. `add(2, 3)` should return `5`.", "add")
    'assert add(2, 3) == 5'
    >>> instruction_example("Example: >>> evens([1, 2, 4])\\n[2, 4]", "evens")
    'assert evens([1, 2, 4]) == [2, 4]'
    >>> instruction_example("// >>> evens([1, 2, 4])\\n// [2, 4]\\nfunction evens(xs) {", "evens")
    'assert evens([1, 2, 4]) == [2, 4]'
    >>> instruction_example("Write add(a, b) returning their sum.", "add") is None
    True
    """
    found = stated_examples(instruction, entry_point)
    return assertion_source(*found[0]) if found else None


def stated_examples(instruction: str | None, entry_point: str) -> list[tuple[str, str]]:
    """``(normalised call, repr of the value)`` of every example the instruction states, in
    order, each once; the first is ``instruction_example``'s. A test that restates one is the
    instruction's word, not its author's (evidence rule 7). The shapes are read as they are
    found, not back from their asserts: a float's assert is a tolerance helper, not one ``==``.

    >>> stated_examples("f(1) ➞ 2.5\\nf(2) ➞ 3\\nf(1) ➞ 2.5", "f")
    [('f(1)', '2.5'), ('f(2)', '3')]
    """
    if not instruction:
        return []
    found = _examples_in(instruction, entry_point)
    if not found and _COMMENT_PREFIX.search(instruction):
        # A docstring translated into another language's comments (MultiPL-E's ``// >>> f(1)``
        # then ``// 2``): the same examples with the comment markers taken off each line.
        found = _examples_in(_COMMENT_PREFIX.sub("", instruction), entry_point)
    return list(dict.fromkeys(found))


# a line comment's marker at the start of a line: ``//``, ``#``, ``--``, ``;;``, a block comment's
# ``*`` continuation, with the space after it
_COMMENT_PREFIX = re.compile(r"(?m)^[ \t]*(?://+|#+|--|;+|\*(?!\*))[ \t]?")


def _examples_in(instruction: str, entry_point: str) -> list[tuple[str, str]]:
    found = []
    for m in re.finditer(rf"\b{re.escape(entry_point)}\s*\(", instruction):
        end = _balanced_call(instruction, m.end() - 1)
        if end is None:
            continue
        rest = instruction[end:]
        joined = _CONNECTOR.match(rest) or re.match(r"\s*\n\s*", rest)
        if joined is None or not joined.group(0).strip(" `") and "\n" not in joined.group(0):
            continue
        value = _leading_literal(rest[joined.end():])
        if value is None:
            continue
        parsed = call_and_expected(f"assert {instruction[m.start():end]} == {value}",
                                   entry_point)
        if parsed is not None:
            found.append(parsed)
    return found


def probe_gate(*, has_code: bool, bound: bool, signature_ok: bool, loads: bool,
               example_ok: bool | None) -> str:
    """The probe-gate verdict (``example_ok`` None: the instruction gives no example)."""
    if not has_code:
        return NO_CODE
    if not bound:
        return NO_ENTRY_POINT
    if not signature_ok:
        return SIGNATURE_MISMATCH
    if not loads:
        return IMPORT_ERROR
    if example_ok is False:
        return EXAMPLE_FAILED
    return PASS
