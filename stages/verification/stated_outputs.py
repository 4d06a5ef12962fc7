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

``outputs_job`` builds the sandbox job (the program with a marker before and after each claimed
``print``) and ``check_outputs`` reads its stdout back: ``none`` (nothing checkable),
``consistent``, or ``contradicted`` with the first mismatch. ``with_stated_outputs`` does both
for a batch of graded answers, reading each answer's claims once.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import math
import re
import tokenize

NONE, CONSISTENT, CONTRADICTED = "none", "consistent", "contradicted"
STATUSES = (NONE, CONSISTENT, CONTRADICTED)

_CLAIM = re.compile(r"^#\s*(?:(?:expected\s+)?(?:output|prints?|result)s?\s*(?::|=|->|=>|\bis\b)"
                    r"|->|=>)\s*(?P<claim>.+?)\s*$", re.IGNORECASE)
_MARK = "\x1eaf-claim:"  # record separator: never in a demo's own output


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


def claims(code: str | None) -> list[Claim]:
    """The checkable stated outputs of ``code``'s ``print`` statements, in source order.

    >>> [c.stated for c in claims("print(2 + 2)  # Output: 4\\nprint(1)  # one\\n")]
    ['4']
    """
    if not code or "#" not in code:
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


def instrumented(code: str, found: list[Claim]) -> str:
    """``code`` with a marker line before and after each claimed ``print`` (same indentation),
    so its output can be cut out of the run's stdout."""
    lines = code.splitlines()
    out = list(lines)
    # from the bottom up, so earlier line numbers stay valid
    for k, claim in sorted(enumerate(found), key=lambda kc: -kc[1].line):
        first = claim.first_line
        indent = lines[first - 1][:len(lines[first - 1]) - len(lines[first - 1].lstrip())]
        mark = f"{indent}__import__('sys').stdout.write({_MARK + str(k)!r} + chr(30))"
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
                found: list[Claim] | None = None):
    """A sandbox job that runs ``code``'s demo with markers, or None when it states nothing
    checkable (``check_outputs`` then says ``none``). ``found``: ``claims(code)``, when read
    already."""
    from arenaforge.pipeline.sandbox.languages import ProgramJob

    found = claims(code) if found is None else found
    if not found:
        return None
    return ProgramJob(language="python", source=instrumented(code, found), stdins=("",),
                      timeout_s=timeout_s, memory_mb=memory_mb)


def check_outputs(code: str | None, result, found: list[Claim] | None = None) -> OutputCheck:
    """Compare ``code``'s stated outputs with a run of ``outputs_job(code)`` (None: no job).
    ``found``: ``claims(code)``, when read already."""
    found = claims(code) if found is None else found
    if not found or result is None or not result.runs or result.runs[0] is None:
        return OutputCheck(NONE)
    stdout = result.runs[0].stdout
    checked = 0
    for k, claim in enumerate(found):
        out = printed(stdout, k)
        if out is None:
            continue
        checked += 1
        if not agrees(out, claim.stated):
            return OutputCheck(CONTRADICTED, checked,
                               f"{claim.statement} states {claim.stated} but printed "
                               f"{out.rstrip()[:200]!r}")
    return OutputCheck(CONSISTENT if checked else NONE, checked)


def with_stated_outputs(pool, codes: list[str | None], grades: list, wanted: list[bool], *,
                        timeout_s: float, memory_mb: int | None = None) -> list:
    """``grades`` (``grading.Graded``) with ``stated_outputs`` and ``stated_output_mismatch``
    set for the answers in ``wanted`` (Python answers that execution would verify: the check
    can only take a verdict away), in one batch of sandbox jobs."""
    found = {i: claims(codes[i]) for i, want in enumerate(wanted) if want}
    jobs = {i: outputs_job(codes[i], timeout_s=timeout_s, memory_mb=memory_mb, found=f)
            for i, f in found.items() if f}
    if not jobs:
        return list(grades)
    results = dict(zip(jobs, pool.run_programs(list(jobs.values()))))
    out = list(grades)
    for i, result in results.items():
        check = check_outputs(codes[i], result, found[i])
        out[i] = dataclasses.replace(grades[i], stated_outputs=check.status,
                                     stated_output_mismatch=check.mismatch)
    return out
