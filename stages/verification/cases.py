"""The tests stage's language-neutral cases: what an author is asked, what its reply holds, and
the row fields a case becomes (pure; the stage runs them, ``case_tests``).

An author is asked for test cases as data, never code (``testgen_cases_*.txt``): a function's
as asserts in Python notation (``assert f([1, 2]) == 3``, bare calls ``f([5])`` its inputs),
each read into a case ``{"args": [...], "expected": v}``; a program's as a JSON object with
``cases`` (``{"stdin": "...", "stdout": "..."}``) and ``inputs`` (stdins without an expected
output). A function's reply may also be such a JSON object, with a ``signature`` in Python
notation (``def f(xs: List[int]) -> int``) that gives the values their types
(``arenaforge.stages.verification.harness.types``). Inputs are the generated inputs whose
outputs the answers vote on. A reply with none of these is a value (``parse_error``), as a
reply without an assert is on the Python path.

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

import ast
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
from arenaforge.stages.verification.harness.cases import (
    CallCase,
    CaseError,
    IOCase,
    call_case,
)
from arenaforge.stages.verification.harness.compare import (
    ValueParseError,
    normalize_stdout,
    parse_value,
)
from arenaforge.stages.verification.harness.targets import target
from arenaforge.stages.verification.harness.types import (
    Signature,
    UnsupportedType,
    check_value,
    infer_type,
    parse_signature,
)
from arenaforge.stages.verification.probe_gate import stated_examples
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
    """The request for ``n`` cases and ``k`` inputs of one task (no answer is shown). A function
    task's author writes asserts in Python notation, whatever the solution's language (the
    values are language-neutral, and asserts are what models write best: small models asked
    for the same cases as JSON copy the prompt's example instead); a program's, JSON."""
    inputs = fill(load_template("testgen_cases_inputs_function.txt"), k=str(k),
                  entry_point=entry_point or PROGRAM_ENTRY) if k and kind == FUNCTION else ""
    user = fill(load_template(f"testgen_cases_{kind}.txt"), n=str(n), k=str(k),
                language=display(language), entry_point=entry_point or PROGRAM_ENTRY,
                instruction=instruction, inputs=inputs,
                declaration=shown_declaration(instruction, language, entry_point)
                if kind == FUNCTION else "")
    system = "testgen_system.txt" if kind == FUNCTION else "testgen_cases_system.txt"
    return [{"role": "system", "content": load_template(system)},
            {"role": "user", "content": user}]


def shown_declaration(instruction: str, language: str, entry: str | None, arity: int = 0
                      ) -> str:
    """The function as a test author's request shows it, in Python notation whatever the
    language (the asserts are written so): its parameters as the instruction declares them,
    else ``arity`` placeholders (``...`` when that is not known either).

    >>> shown_declaration("Write add(a, b) in C++.", "cpp", "add")
    'def add(a, b)'
    >>> shown_declaration("Sum a list.", "go", "total", 1), shown_declaration("Sum.", "go", "f")
    ('def total(arg1)', 'def f(...)')
    """
    declared = stated_declaration(instruction, language, entry)
    if declared is not None and declared[0] == entry:
        return f"def {entry}({', '.join(declared[1])})"
    return f"def {entry}({', '.join(f'arg{i + 1}' for i in range(arity)) or '...'})"


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
    ``max_inputs``): a function's asserts (``assert f(1) == 2``; bare calls ``f(3)`` are its
    inputs) or a JSON object holding a list of cases; a reply with neither is a parse error.

    >>> r = parse_reply("```python\\nassert f([1], 'a') == 2\\nassert f([]) > 0\\nf([5], 'b')\\n```",
    ...                 "function", "f", max_cases=5, max_inputs=5)
    >>> r.cases, r.inputs
    (({'args': [[1], 'a'], 'expected': 2}, {'unparsed': 'assert f([]) > 0'}), ([[5], 'b'],))
    """
    if not text or not text.strip():
        return CaseReply(parse_error="empty output")
    if kind == FUNCTION and entry_point:
        asserted = _assert_reply(text, entry_point, max_cases, max_inputs)
        if asserted is not None:
            return asserted
    data = _json_object(text)
    if data is None:
        return CaseReply(parse_error=f"no assert calling {entry_point} and no JSON object found"
                         if kind == FUNCTION else "no JSON object found")
    cases = data.get("cases")
    if not isinstance(cases, list) or not cases:
        return CaseReply(parse_error="no list of cases in the JSON object")
    inputs = data.get("inputs")
    inputs = inputs if isinstance(inputs, list) else []
    signature = data.get("signature") if kind == FUNCTION else None
    return CaseReply(signature if isinstance(signature, str) else None,
                     tuple(cases[:max_cases]), tuple(inputs[:max_inputs]))


def _assert_reply(text: str, entry: str, max_cases: int, max_inputs: int) -> CaseReply | None:
    """A function author's asserts as cases (the Python path's parser reads them, so an author
    that calls the function by a name of its own is read alike); an assert that is not a call
    with literal arguments equal to a literal is kept as ``{"unparsed": text}`` (a test fault
    of its author, counted as a parse error). None when the reply holds no assert."""
    from arenaforge.stages.verification.test_parsing import extract_tests, python_blocks

    parsed = extract_tests(text, entry, max_tests=max_cases)
    if not parsed.tests:
        return None
    cases = tuple(_case_of_assert(t, entry) for t in parsed.tests)
    names, inputs = {entry, parsed.author_name}, []
    for block in python_blocks(text):
        for line in block.splitlines():
            try:
                node = ast.parse(line.strip(), mode="eval").body
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in names and not node.keywords:
                args = _literal_args(node)
                if args is not None:
                    inputs.append(args)
    return CaseReply(None, cases, tuple(inputs[:max_inputs]))


def _literal_args(call: Any) -> list | None:
    try:
        return [_json_like(literal(ast.unparse(a))) for a in call.args]
    except TypeError:
        return None


def _case_of_assert(test: str, entry: str) -> dict:
    """``{"args": [...], "expected": v}`` of a literal equality assert, else ``{"unparsed":
    test}`` (what an author's assert and the instruction's example both become)."""
    from arenaforge.stages.verification.test_split import call_and_expected

    return _case_of_shape(call_and_expected(test, entry), test)


def _case_of_shape(shape: tuple[str, str] | None, test: str) -> dict:
    """The case of a ``(normalised call, repr of the value)`` (``call_and_expected``'s), else
    ``{"unparsed": test}``."""
    call = ast.parse(shape[0], mode="eval").body if shape is not None else None
    if isinstance(call, ast.Call) and not call.keywords:
        args = _literal_args(call)
        try:
            if args is not None:
                return {"args": args, "expected": _json_like(literal(shape[1]))}
        except TypeError:  # a value no case holds (a set, bytes)
            pass
    return {"unparsed": test}


# -- entry points and signatures ---------------------------------------------------------------

def entry_point(instruction: str, codes: Sequence[str | None], language: str, kind: str
                ) -> tuple[str, str] | None:
    """``(entry point, where it came from)``: ``main``/``program`` for a program; the function
    the instruction names or declares, else the one most answers define (``answers``); None when
    no answer defines a function."""
    if kind == PROGRAM:
        return PROGRAM_ENTRY, "program"
    named = instruction_function_name(instruction)
    if named is None and (stated := stated_declaration(instruction, language)) is not None:
        named = stated[0]
    if named is not None:
        return named, "instruction"
    votes = Counter(n for code in codes for n in dict.fromkeys(function_names(code, language)))
    if not votes:
        return None
    return votes.most_common(1)[0][0], "answers"


# the last line of a code block that reads as a declaration: a name, a parameter list without
# literals, then a return type, a body's brace or nothing
_DECLARATION = re.compile(r"\b(?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)"
                          r"[^;{}=\n]*\{?[ \t]*$")
_NOT_NAMES = frozenset({"if", "for", "while", "switch", "return", "catch", "sizeof", "print"})
# where a parameter's name stands: before its ``:`` (Python, Rust, TypeScript), first (Go), last
# (C, C++, Java, JavaScript)
_NAME_FIRST = frozenset({"go"})


def stated_declaration(instruction: str | None, language: str, entry: str | None = None
                       ) -> tuple[str, tuple[str, ...]] | None:
    """``(name, parameter names)`` of the function the instruction declares: the last line of
    its last code block when that is a declaration (a translated HumanEval prompt ends so), else
    the first mention of ``entry`` with names for arguments (``add(a, b)``); None otherwise.

    >>> stated_declaration("```cpp\\n// f(1, 2) is 3\\nlong long add(std::vector<long long> xs,"
    ...                    " long long k)\\n```", "cpp")
    ('add', ('xs', 'k'))
    >>> stated_declaration("```go\\nfunc Add(numbers []int, k int) int {\\n```", "go")
    ('Add', ('numbers', 'k'))
    >>> stated_declaration("```rust\\nfn add(mut xs: Vec<i64>) -> i64 {\\n```", "rust")
    ('add', ('xs',))
    >>> stated_declaration("Write add(a, b); add(1, 2) returns 3.", "cpp", "add")
    ('add', ('a', 'b'))
    >>> stated_declaration("Write add; add([1, 2], 3) returns 6.", "cpp", "add") is None
    True
    """
    blocks = [b.code for b in code_blocks(instruction or "") if b.code.strip()]
    lines = [ln for ln in blocks[-1].splitlines() if ln.strip()] if blocks else []
    m = _DECLARATION.search(lines[-1]) if lines else None
    if m is not None and m.group("name") not in _NOT_NAMES:
        names = _parameter_names(m.group("params"), language)
        if names is not None:
            return m.group("name"), names
    if entry is None:
        return None
    for m in re.finditer(rf"\b{re.escape(entry)}\s*\((?P<params>[^()]*)\)", instruction or ""):
        names = _parameter_names(m.group("params"), language)
        if names is not None:
            return entry, names
    return None


def _parameter_names(params: str, language: str) -> tuple[str, ...] | None:
    """The names of a declaration's parameters; None when the list holds values (a call)."""
    names = []
    for piece in _top_level_split(params):
        piece = re.split(r"(?<!:):(?!:)", piece.split("=", 1)[0].strip(), maxsplit=1)[0]
        words = re.findall(r"[A-Za-z_]\w*", piece)
        if not words or not re.fullmatch(r"[\w\s<>\[\]*&:,.]*", piece) \
                or words[-1] in ("True", "False", "None", "true", "false", "null"):
            return None  # a call with values, not a declaration
        names.append(words[0] if language in _NAME_FIRST else words[-1])
    return tuple(names)


def _top_level_split(params: str) -> list[str]:
    """``params`` split at the commas outside ``<>``, ``[]`` and ``{}``."""
    pieces, depth, current = [], 0, ""
    for ch in params:
        depth += ch in "<[{"
        depth -= ch in ">]}"
        if ch == "," and depth == 0:
            pieces.append(current)
            current = ""
        else:
            current += ch
    return [p for p in (*pieces, current) if p.strip()]


def signature_text(sig: Signature) -> str:
    """A complete signature in the notation ``parse_signature`` reads back.

    >>> signature_text(parse_signature("def f(xs: List[int], d: Dict[str, float]) -> bool"))
    'def f(xs: list[int], d: dict[str, float]) -> bool'
    """
    params = ", ".join(f"{n}: {t}" for n, t in sig.params)
    return f"def {sig.name}({params}) -> {sig.returns}"


def choose_signature(entry: str, replies: Sequence[CaseReply], language: str,
                     stated: Sequence[str] | None = None, example: dict | None = None
                     ) -> Signature:
    """The instruction's signature. Its arity and parameter names are the ones the instruction
    declares (``stated``) when it declares one, else the usual number of arguments of the
    authors' cases (the instruction's ``example``'s when no author gave one); its types are
    the complete signature most authors give with that arity (types that fit every case of
    theirs), else inferred from every case of that arity and the instruction's own
    ``example``. An author's case of another arity is then its test fault.

    Raises:
        UnsupportedType: no types can be found, or the language cannot take them.
    """
    lang = target(language)
    given: list[Signature] = []
    for reply in replies:
        try:
            sig = parse_signature(reply.signature) if reply.signature else None
            if sig is not None and sig.complete:
                lang.check_signature(sig)  # a type the language has no form for is no help
        except UnsupportedType:
            sig = None
        if sig is not None:
            given.append(Signature(entry, sig.params, sig.returns))
    arities = Counter(len(c["args"]) for r in replies for c in r.cases
                      if isinstance(c, dict) and isinstance(c.get("args"), list))
    n = len(stated) if stated is not None else (
        arities.most_common(1)[0][0] if arities else
        len(example["args"]) if example is not None else None)
    complete = Counter(signature_text(s) for s in given if s.complete
                       and (n is None or len(s.params) == n))
    if complete:
        chosen = parse_signature(complete.most_common(1)[0][0])
    else:
        if n is None:
            raise UnsupportedType(f"{entry}: no case gives its arguments")
        names = next((tuple(p for p, _ in s.params) for s in given if len(s.params) == n),
                     tuple(f"arg{i + 1}" for i in range(n)))
        cases = [c for r in replies for c in r.cases if isinstance(c, dict)
                 and isinstance(c.get("args"), list) and len(c["args"]) == n
                 and "expected" in c]
        if example is not None and len(example["args"]) == n:
            cases.append(example)
        loose = lang.takes_any  # Python: values of mixed types are Any, not an error
        params = tuple((name, infer_type((c["args"][i] for c in cases),
                                         f"parameter {name!r} of {entry}", loose=loose))
                       for i, name in enumerate(names))
        chosen = Signature(entry, params, infer_type((c["expected"] for c in cases),
                                                     f"the return of {entry}", loose=loose))
    if stated is not None:
        chosen = Signature(entry, tuple((name, t) for name, (_, t) in zip(stated, chosen.params)),
                           chosen.returns)
    lang.check_signature(chosen)
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
        if isinstance(raw, dict) and "unparsed" in raw:
            raise CaseError("not a call with literal arguments equal to a literal value "
                            "(tests as data need both)")
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
    stated = stated_examples(instruction, entry)
    raw = _case_of_shape(stated[0], "") if stated else {"unparsed": None}
    if "unparsed" in raw:
        return None
    try:
        case = call_case(raw["args"], raw["expected"])
    except CaseError:
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
