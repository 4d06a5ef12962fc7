"""An answer's own stated outputs, checked by running its demo.

Small models end many answers with a demo whose comments say what it prints
(``print(f(10))  # Output: 140``), and they often say it wrong. Such a row teaches a false
claim even when its function passes every test: an answer that returns ``sorted(arr)``, calls
it for its side effect and comments a printed list the program never prints is one. The tests
cannot see this (they call the function, not the demo), so the demo is run as written, once per
answer that states an output, and every stated output is compared with what its ``print``
printed.

Only clear contradictions count, so a loose comment never costs a right answer:

* a claim is the comment on the last line of a ``print(...)`` statement that starts with
  ``Output``, ``Expected output``, ``Prints``, ``Result`` (then ``:``, ``=``, ``->`` or
  ``is``), or with ``->`` / ``=>`` alone;
* it is checked only when it reads as a Python literal (``140``, ``[1, 2]``, ``'abc'``,
  ``True``) or is one bare word; prose (``12 days``, ``the sorted list``) is not checked;
* it agrees when the printed text equals it (as text, after stripping quotes, or as equal
  literals with a float tolerance), or ends with it (``print("sum:", s)  # Output: 8``);
* a ``print`` the run never reached (the demo raised, timed out, or waited for input) is not
  checked.

JavaScript and TypeScript answers are checked the same way (``LANGUAGES``): a claim is the
``//`` comment of a ``console.log(...)`` statement that stands on one line, by the same words;
the printed text is read as Node prints it (``true``/``false``/``null`` are the literals
``True``/``False``/``None``; an array Node abbreviates, ``... more items`` or ``[Object]``, is
not checked). The other languages print through formats (``printf``, ``fmt.Println``,
``System.out.println`` of a ``toString``, Rust's ``{:?}``) whose text is not the value's literal,
and their demos live in a ``main`` the function harness replaces, so their answers state
nothing this module checks.

``outputs_job`` builds the sandbox job (the program with a marker before and after each claimed
statement) and ``check_outputs`` reads its stdout back: ``none`` (nothing checkable),
``consistent``, or ``contradicted`` with the first mismatch. ``with_stated_outputs`` does both
for a batch of graded answers, reading each answer's claims once.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import math
import re
import tokenize

NONE, CONSISTENT, CONTRADICTED = "none", "consistent", "contradicted"
STATUSES = (NONE, CONSISTENT, CONTRADICTED)

_WORDS = (r"\s*(?:(?:expected\s+)?(?:output|prints?|result)s?\s*(?::|=|->|=>|\bis\b)"
          r"|->|=>)\s*(?P<claim>.+?)\s*$")
_CLAIM = re.compile("^#" + _WORDS, re.IGNORECASE)
_JS_CLAIM = re.compile("^//" + _WORDS, re.IGNORECASE)
_MARK = "\x1eaf-claim:"  # record separator: never in a demo's own output
PYTHON, JAVASCRIPT, TYPESCRIPT = "python", "javascript", "typescript"
LANGUAGES = (PYTHON, JAVASCRIPT, TYPESCRIPT)  # whose answers' stated outputs are checked
_NODE = (JAVASCRIPT, TYPESCRIPT)  # their demos print through Node's console.log
_JS_LOG = re.compile(r"^(?P<indent>\s*)console\.log\(.*\);?\s*$")
_JS_WORDS = {"true": "True", "false": "False", "null": "None"}
_JS_ABRIDGED = re.compile(r"\.\.\. \d+ more items?|\[Object\]|\[Array\]|\[Function")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One stated output: the ``print`` statement's source and the text its comment states."""

    statement: str
    stated: str
    line: int  # 1-based, of the statement's last line (where the comment is)
    first_line: int  # 1-based, of its first line


@dataclasses.dataclass(frozen=True)
class OutputCheck:
    status: str  # NONE, CONSISTENT or CONTRADICTED
    checked: int = 0
    mismatch: str | None = None  # the first contradiction, for a reader


def _comments(code: str) -> dict[int, str]:
    """Each line's comment (tokenize, so a ``#`` inside a string is not one)."""
    out: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {}
    return out


def _checkable(stated: str) -> bool:
    if re.fullmatch(r"[\w.+-]+", stated):
        return True
    try:
        ast.literal_eval(stated)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


def claims(code: str | None, language: str = PYTHON) -> list[Claim]:
    """The checkable stated outputs of ``code``'s ``print`` statements (``console.log`` in
    JavaScript and TypeScript), in source order; none in another language.

    >>> [c.stated for c in claims("print(2 + 2)  # Output: 4\\nprint(1)  # one\\n")]
    ['4']
    >>> [c.stated for c in claims("console.log(f([1]));  // Output: [2]", "javascript")]
    ['[2]']
    """
    if language in _NODE:
        return _js_claims(code)
    if language != PYTHON or not code or "#" not in code:
        return []
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    comments = _comments(code)
    lines = code.splitlines()
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "print"):
            continue
        m = _CLAIM.match(comments.get(node.end_lineno or node.lineno, ""))
        if m is None or not _checkable(m.group("claim")):
            continue
        # the statement must own its lines (no ``x = 1; print(x)``), so markers can wrap it
        if node.col_offset != len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip()):
            continue
        found.append(Claim(ast.get_source_segment(code, node) or "print(...)", m.group("claim"),
                           node.end_lineno or node.lineno, node.lineno))
    return sorted(found, key=lambda c: c.line)


def _js_comment(line: str) -> int | None:
    """Where the line's ``//`` comment starts, outside string and template literals."""
    quote, k = None, 0
    while k < len(line):
        ch = line[k]
        if quote:
            if ch == "\\":
                k += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif line.startswith("//", k):
            return k
        k += 1
    return None


def _js_claims(code: str | None) -> list[Claim]:
    """A JavaScript or TypeScript answer's claims: one-line ``console.log(...)`` statements
    whose ``//`` comment states an output (a line-level read: no JavaScript parser is needed
    for a statement that owns its line, and a statement over several lines is not checked)."""
    found = []
    for n, line in enumerate((code or "").splitlines(), 1):
        start = _js_comment(line) if "console.log" in line else None
        if start is None or _JS_LOG.match(line[:start]) is None:
            continue
        m = _JS_CLAIM.match(line[start:])
        if m is not None and _checkable(m.group("claim")):
            found.append(Claim(line[:start].strip(), m.group("claim"), n, n))
    return found


def instrumented(code: str, found: list[Claim], language: str = PYTHON) -> str:
    """``code`` with a marker line before and after each claimed ``print`` (same indentation),
    so its output can be cut out of the run's stdout."""
    lines = code.splitlines()
    out = list(lines)
    # from the bottom up, so earlier line numbers stay valid
    for k, claim in sorted(enumerate(found), key=lambda kc: -kc[1].line):
        first = claim.first_line
        indent = lines[first - 1][:len(lines[first - 1]) - len(lines[first - 1].lstrip())]
        mark = (f"{indent}console.log({json.dumps(_MARK + str(k) + chr(30))});"
                if language in _NODE else
                f"{indent}__import__('sys').stdout.write({_MARK + str(k)!r} + chr(30))")
        out[claim.line:claim.line] = [mark]
        out[first - 1:first - 1] = [mark]
    return "\n".join(out) + "\n"


def printed(stdout: str, k: int) -> str | None:
    """What the ``k``-th claimed ``print`` printed, or None when the run never finished it."""
    mark = f"{_MARK}{k}\x1e"
    parts = stdout.split(mark)
    if len(parts) < 3:
        return None
    return parts[1]


def _as_literal(text: str):
    try:
        return True, ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, None


def _equal(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)
        except (TypeError, ValueError):
            return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return type(a) is type(b) and a == b


def _from_node(text: str) -> str:
    """Node's printed ``true``/``false``/``null`` as Python's literals (outside strings)."""
    return re.sub(r"(?<![\w'\"])(true|false|null)(?![\w'\"])", lambda m: _JS_WORDS[m.group(1)],
                  text)


def agrees(out: str, stated: str) -> bool:
    """Whether a printed text agrees with a stated output (see the module docstring).

    >>> agrees("[1, 2]\\n", "[1,2]"), agrees("Sum: 8\\n", "8"), agrees("Hello\\n", "'Hello'")
    (True, True, True)
    >>> agrees("[64, 34, 25]\\n", "[12, 13, 14]")
    False
    """
    text = out.rstrip("\n").strip()
    if text == stated:
        return True
    quoted = len(stated) > 1 and stated[0] == stated[-1] and stated[0] in "'\""
    if quoted and text == stated[1:-1]:
        return True
    ok_s, want = _as_literal(stated)
    ok_t, got = _as_literal(text)
    if ok_s and ok_t and _equal(got, want):
        return True
    return bool(re.search(r"(^|[\s:=,(])" + re.escape(stated) + r"$", text))


def outputs_job(code: str | None, *, timeout_s: float, memory_mb: int | None = None,
                found: list[Claim] | None = None, language: str = PYTHON):
    """A sandbox job that runs ``code``'s demo with markers, or None when it states nothing
    checkable (``check_outputs`` then says ``none``). ``found``: ``claims(code, language)``,
    when read already."""
    from arenaforge.pipeline.sandbox.languages import ProgramJob

    found = claims(code, language) if found is None else found
    if not found:
        return None
    return ProgramJob(language=language, source=instrumented(code, found, language),
                      stdins=("",), timeout_s=timeout_s, memory_mb=memory_mb)


def check_outputs(code: str | None, result, found: list[Claim] | None = None,
                  language: str = PYTHON) -> OutputCheck:
    """Compare ``code``'s stated outputs with a run of ``outputs_job(code)`` (None: no job).
    ``found``: ``claims(code, language)``, when read already."""
    found = claims(code, language) if found is None else found
    if not found or result is None or not result.runs or result.runs[0] is None:
        return OutputCheck(NONE)
    stdout = result.runs[0].stdout
    node = language in _NODE
    checked = 0
    for k, claim in enumerate(found):
        out = printed(stdout, k)
        if out is None or (node and _JS_ABRIDGED.search(out)):
            continue
        checked += 1
        said = claim.stated
        if not agrees(out, said) and not (node and agrees(_from_node(out), _from_node(said))):
            return OutputCheck(CONTRADICTED, checked,
                               f"{claim.statement} states {claim.stated} but printed "
                               f"{out.rstrip()[:200]!r}")
    return OutputCheck(CONSISTENT if checked else NONE, checked)


def with_stated_outputs(pool, codes: list[str | None], grades: list, wanted: list[bool], *,
                        timeout_s: float, memory_mb: int | None = None,
                        languages: list[str] | None = None) -> list:
    """``grades`` (``grading.Graded``) with ``stated_outputs`` and ``stated_output_mismatch``
    set for the answers in ``wanted`` (answers that execution would verify: the check can only
    take a verdict away), in one batch of sandbox jobs. ``languages``: each answer's (Python
    when None)."""
    langs = languages or [PYTHON] * len(codes)
    found = {i: claims(codes[i], langs[i]) for i, want in enumerate(wanted) if want}
    jobs = {i: outputs_job(codes[i], timeout_s=timeout_s, memory_mb=memory_mb, found=f,
                           language=langs[i])
            for i, f in found.items() if f}
    if not jobs:
        return list(grades)
    results = dict(zip(jobs, pool.run_programs(list(jobs.values()))))
    out = list(grades)
    for i, result in results.items():
        check = check_outputs(codes[i], result, found[i], langs[i])
        out[i] = dataclasses.replace(grades[i], stated_outputs=check.status,
                                     stated_output_mismatch=check.mismatch)
    return out
