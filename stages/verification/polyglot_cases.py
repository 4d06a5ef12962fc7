"""The tests stage's language-neutral cases: what an author is asked, what its reply holds, and
the row fields a case becomes (pure; the stage runs them, ``polyglot_tests``).

An author is asked for test cases as data, never code (``testgen_cases_*.txt``): a JSON object
with ``cases`` (``{"args": [...], "expected": v}`` for a function, ``{"stdin": "...",
"stdout": "..."}`` for a program), ``inputs`` (argument lists or stdins without an expected
value: the generated inputs whose outputs the answers vote on) and, for a function, a
``signature`` in Python notation (``def f(xs: List[int]) -> int``) that gives the values their
types (``arenaforge.stages.verification.polyglot.types``). A reply without such an object is a
value (``parse_error``), as a reply without an assert is on the Python path.

A case becomes the same fields a Python assert does, so that the evidence rules
(``arenaforge.stages.verification.evidence``) read them alike: ``call`` (the normalised call,
``f([1, 2])``; a program's ``stdin '...'``), ``expected`` (``repr`` of the value; of the
normalised stdout for a program), ``test_code`` (the case as JSON, what verify runs again).
What an answer did on a case becomes an ``Outcome`` (``outcome``): the value it returned (its
``repr``), what it raised, a timeout or another error.

Example::

    >>> reply = '```json\\n{"signature": "def add(a: int, b: int) -> int", "cases": ' \\
    ...         '[{"args": [1, 2], "expected": 3}], "inputs": [[5, 6]]}\\n```'
    >>> parsed = parse_reply(reply, "function", "add", max_cases=5, max_inputs=5)
    >>> parsed.signature, parsed.cases, parsed.inputs
    ('def add(a: int, b: int) -> int', ({'args': [1, 2], 'expected': 3},), ([5, 6],))
    >>> case_fields("function", "add", {"args": [[1, 2], "x"], "expected": None})[:2]
    ("add([1, 2], 'x')", 'None')
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from arenaforge.pipeline.prompts import fill, load_template
from arenaforge.pipeline.statuses import KILLED, MEMORY, OK, OUTPUT_LIMIT, TIMEOUT
from arenaforge.stages.common.code_extract import code_blocks, function_names
from arenaforge.stages.common.task_kinds import FUNCTION, PROGRAM, display
from arenaforge.stages.verification.augment import Outcome
from arenaforge.stages.verification.entry_points import instruction_function_name
from arenaforge.stages.verification.polyglot.cases import (
    CallCase,
    CaseError,
    IOCase,
    call_case,
)
from arenaforge.stages.verification.polyglot.compare import (
    ValueParseError,
    normalize_stdout,
    parse_value,
)
from arenaforge.stages.verification.polyglot.targets import target
from arenaforge.stages.verification.polyglot.types import (
    Signature,
    UnsupportedType,
    check_value,
    infer_type,
    parse_signature,
)
from arenaforge.stages.verification.probe_gate import instruction_example
from arenaforge.stages.verification.test_split import _NOT_LITERAL, literal, normalised_call

PROGRAM_ENTRY = "main"  # a whole program's entry point, as the tests table names it


@dataclasses.dataclass(frozen=True)
class CaseReply:
    """One author's reply: its signature text (function tasks), cases and inputs as plain JSON
    data (checked against the instruction's signature later), or why there are none."""

    signature: str | None = None
    cases: tuple[Any, ...] = ()
    inputs: tuple[Any, ...] = ()
    parse_error: str | None = None


def conversation(instruction: str, language: str, kind: str, entry_point: str | None, n: int,
                 k: int) -> list[dict[str, str]]:
    """The request for ``n`` cases and ``k`` inputs of one task (no answer is shown)."""
    user = fill(load_template(f"testgen_cases_{kind}.txt"), n=str(n), k=str(k),
                language=display(language), entry_point=entry_point or PROGRAM_ENTRY,
                instruction=instruction)
    return [{"role": "system", "content": load_template("testgen_cases_system.txt")},
            {"role": "user", "content": user}]


def _json_object(text: str) -> dict | None:
    """The first JSON object of a reply: a fenced block (``json`` or untagged), else the text
    from its first ``{`` to its last ``}``."""
    candidates = [b.code for b in code_blocks(text) if b.language in ("json", "")]
    if "{" in text:
        candidates.append(text[text.index("{"):text.rindex("}") + 1] if "}" in text else "")
    for chunk in candidates:
        try:
            value = json.loads(chunk)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def parse_reply(text: str | None, kind: str, entry_point: str | None, *, max_cases: int,
                max_inputs: int) -> CaseReply:
    """The cases, inputs and signature of one reply (at most ``max_cases`` and
    ``max_inputs``); a reply without a JSON object holding a list of cases is a parse error."""
    if not text or not text.strip():
        return CaseReply(parse_error="empty output")
    data = _json_object(text)
    if data is None:
        return CaseReply(parse_error="no JSON object found")
    cases = data.get("cases")
    if not isinstance(cases, list) or not cases:
        return CaseReply(parse_error="no list of cases in the JSON object")
    inputs = data.get("inputs")
    inputs = inputs if isinstance(inputs, list) else []
    signature = data.get("signature") if kind == FUNCTION else None
    return CaseReply(signature if isinstance(signature, str) else None,
                     tuple(cases[:max_cases]), tuple(inputs[:max_inputs]))


# -- entry points and signatures ---------------------------------------------------------------

def entry_point(instruction: str, codes: Sequence[str | None], language: str, kind: str
                ) -> tuple[str, str] | None:
    """``(entry point, where it came from)``: ``main``/``program`` for a program; the function
    the instruction names, else the one most answers define (``answers``); None when no
    answer defines a function."""
    if kind == PROGRAM:
        return PROGRAM_ENTRY, "program"
    named = instruction_function_name(instruction)
    if named is not None:
        return named, "instruction"
    votes = Counter(n for code in codes for n in dict.fromkeys(function_names(code, language)))
    if not votes:
        return None
    return votes.most_common(1)[0][0], "answers"


def signature_text(sig: Signature) -> str:
    """A complete signature in the notation ``parse_signature`` reads back.

    >>> signature_text(parse_signature("def f(xs: List[int], d: Dict[str, float]) -> bool"))
    'def f(xs: list[int], d: dict[str, float]) -> bool'
    """
    params = ", ".join(f"{n}: {t}" for n, t in sig.params)
    return f"def {sig.name}({params}) -> {sig.returns}"


def choose_signature(entry: str, replies: Sequence[CaseReply], language: str) -> Signature:
    """The instruction's signature: the complete one most authors give (with the entry point's
    name; types that fit every case of theirs), else parameter names from any author and types
    inferred from every case that has the usual number of arguments.

    Raises:
        UnsupportedType: no types can be found, or the language cannot take them.
    """
    given: list[Signature] = []
    for reply in replies:
        try:
            sig = parse_signature(reply.signature) if reply.signature else None
        except UnsupportedType:
            sig = None
        if sig is not None:
            given.append(Signature(entry, sig.params, sig.returns))
    arities = Counter(len(c["args"]) for r in replies for c in r.cases
                      if isinstance(c, dict) and isinstance(c.get("args"), list))
    complete = Counter(signature_text(s) for s in given if s.complete
                       and (not arities or len(s.params) == arities.most_common(1)[0][0]))
    if complete:
        chosen = parse_signature(complete.most_common(1)[0][0])
    else:
        if not arities:
            raise UnsupportedType(f"{entry}: no case gives its arguments")
        n = arities.most_common(1)[0][0]
        names = next((tuple(p for p, _ in s.params) for s in given if len(s.params) == n),
                     tuple(f"arg{i + 1}" for i in range(n)))
        cases = [c for r in replies for c in r.cases if isinstance(c, dict)
                 and isinstance(c.get("args"), list) and len(c["args"]) == n
                 and "expected" in c]
        params = tuple((name, infer_type((c["args"][i] for c in cases),
                                         f"parameter {name!r} of {entry}"))
                       for i, name in enumerate(names))
        chosen = Signature(entry, params, infer_type((c["expected"] for c in cases),
                                                     f"the return of {entry}"))
    target(language).check_signature(chosen)
    return chosen


# -- cases as rows -------------------------------------------------------------------------

def check_case(kind: str, raw: Any, sig: Signature | None, language: str,
               expected: bool = True) -> CallCase | IOCase:
    """A case (or, ``expected`` False, an input: argument list or stdin) checked against the
    signature and the language's literals.

    Raises:
        CaseError, UnsupportedType: the case is not data of the task's shape.
    """
    if kind == PROGRAM:
        if not expected:
            if not isinstance(raw, str):
                raise CaseError(f"an input must be text (a whole stdin), got {type(raw).__name__}")
            return IOCase(raw, "")
        if not isinstance(raw, dict) or not isinstance(raw.get("stdin"), str) \
                or not isinstance(raw.get("stdout"), str):
            raise CaseError("a case must be an object with text 'stdin' and 'stdout'")
        return IOCase(raw["stdin"], raw["stdout"])
    if expected:
        if not isinstance(raw, dict) or "args" not in raw or "expected" not in raw:
            raise CaseError("a case must be an object with 'args' and 'expected'")
        case = call_case(raw["args"], raw["expected"])
        check_value(case.expected, sig.returns, "the expected value")
    else:
        case = call_case(raw, None)
    target(language).arguments(sig, case, "the case")  # arity, types, the language's literals
    if expected and isinstance(case.expected, int) and not isinstance(case.expected, bool):
        target(language).literal(case.expected, sig.returns)  # fits the language's integers
    return case


def case_fields(kind: str, entry: str, raw: dict) -> tuple[str, str | None, str]:
    """``(call, expected, test_code)`` of a checked case (``expected`` None: an input)."""
    if kind == PROGRAM:
        stdout = raw.get("stdout")
        code = {"stdin": raw["stdin"], "stdout": stdout}
        return (f"stdin {raw['stdin']!r}",
                None if stdout is None else repr(normalize_stdout(stdout)),
                json.dumps(code, ensure_ascii=False))
    return (normalised_call(entry, raw["args"]),
            repr(raw["expected"]) if "expected" in raw else None,
            json.dumps({"args": raw["args"], "expected": raw.get("expected")},
                       ensure_ascii=False))


def case_of_text(kind: str, test_code: str) -> CallCase | IOCase:
    """The case a row's ``test_code`` holds (what verify runs again)."""
    data = json.loads(test_code)
    if kind == PROGRAM:
        return IOCase(data["stdin"], data["stdout"])
    return call_case(data["args"], data["expected"])


def trusted_code(kind: str, row: dict, args: Any) -> str:
    """The ``test_code`` of a generated input the answers' majority decided: the input with the
    agreed value (``row["expected"]``, a repr) as its expected value."""
    value = literal(row["expected"])
    if kind == PROGRAM:
        return json.dumps({"stdin": args, "stdout": value}, ensure_ascii=False)
    return json.dumps({"args": args, "expected": value}, ensure_ascii=False)


# -- the instruction's own example -----------------------------------------------------------

_PROGRAM_EXAMPLE = re.compile(
    r"input[^\n`]*?:?\s*\n?```[^\n]*\n(?P<stdin>.*?)```.*?output[^\n`]*?:?\s*\n?```[^\n]*\n"
    r"(?P<stdout>.*?)```", re.IGNORECASE | re.DOTALL)


def example_case(instruction: str, kind: str, entry: str) -> dict | None:
    """The instruction's own worked example as a case: a call and its value (``f(2) returns
    4``), or a program's example input and output (fenced blocks after "input" and "output").

    >>> example_case("Write sum_evens(xs); sum_evens([1, 2, 4]) returns 6.", "function",
    ...              "sum_evens")
    {'args': [[1, 2, 4]], 'expected': 6}
    >>> example_case("Example input:\\n```\\n2\\n3 4\\n```\\nOutput:\\n```\\n7\\n```", "program",
    ...              "main")
    {'stdin': '2\\n3 4\\n', 'stdout': '7\\n'}
    """
    if kind == PROGRAM:
        m = _PROGRAM_EXAMPLE.search(instruction or "")
        return {"stdin": m.group("stdin"), "stdout": m.group("stdout")} if m else None
    assertion = instruction_example(instruction, entry)
    if assertion is None:
        return None
    import ast

    test = ast.parse(assertion).body[0].test  # type: ignore[attr-defined]
    args = [literal(ast.unparse(a)) for a in test.left.args]
    value = literal(ast.unparse(test.comparators[0]))
    try:
        case = call_case([_json_like(a) for a in args], _json_like(value))
    except (CaseError, TypeError):
        return None
    return {"args": list(case.args), "expected": case.expected}


def _json_like(value: Any) -> Any:
    if value is _NOT_LITERAL or isinstance(value, (set, frozenset, bytes, complex)):
        raise TypeError("not JSON-like")
    if isinstance(value, tuple):
        return [_json_like(v) for v in value]
    if isinstance(value, list):
        return [_json_like(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_like(v) for k, v in value.items()}
    return value


# -- what an answer did ------------------------------------------------------------------------

def outcome(kind: str, run: Any) -> Outcome:
    """What one run of a case shows (``RunResult``, None when skipped): the value returned (its
    repr; a program's normalised stdout), what it raised, a timeout, or another error."""
    if run is None:
        return Outcome("error", "skipped")
    if run.status == OK:
        if kind == PROGRAM:
            return Outcome("value", repr(normalize_stdout(run.stdout or "")))
        try:
            return Outcome("value", repr(parse_value(run.value or "")))
        except ValueParseError:
            return Outcome("error", "no value")
    if run.status == TIMEOUT:
        return Outcome("timeout")
    if run.status in (MEMORY, OUTPUT_LIMIT, KILLED):
        return Outcome("error", run.status)
    if kind == PROGRAM:  # a program that failed says so by its exit code
        return Outcome("raises", f"exit {run.exit_code}")
    message = (run.message or "").strip()
    raised = message.split(":", 1)[0].split()[0] if message else run.status
    return Outcome("raises", raised)


# -- what makes two answers one program ---------------------------------------------------------

_C_LIKE_NOISE = re.compile(r'(?P<s>"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|`[^`]*`)'
                           r'|//[^\n]*|/\*.*?\*/', re.DOTALL)


def program_key_of(code: str | None, language: str, kind: str) -> str | None:
    """``evidence.program_key`` for any language: a Python function's key is that function's;
    a Python program's is its syntax tree (its ``__main__`` block is the program); any other
    program's is its text without comments and with whitespace collapsed (two answers that
    differ only in formatting and comments are one program).

    >>> program_key_of("int f() { return 1; } // one", "cpp", "function") == program_key_of(
    ...     "int f()  {\\n  return 1;\\n}", "cpp", "function")
    True
    """
    import ast
    import hashlib

    from arenaforge.stages.verification.evidence import program_key

    if not code:
        return None
    if language == "python":
        if kind == FUNCTION:
            return program_key(code)
        try:
            text = ast.dump(ast.parse(code))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            text = code
    else:
        text = _C_LIKE_NOISE.sub(lambda m: m.group("s") or " ", code)
        text = " ".join(text.split())
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
