"""Problems of one's own for a verify-bench: a JSONL file, checked row by row.

A JSONL file of one's own problems, one problem an object (``load_problems_file``), with the
fields (``FIELDS``):

- ``prompt``: what the model completes: a function's signature with its docstring or
  comment, or a program's task statement (or ``instruction``: the whole instruction text,
  used verbatim instead of the template around ``prompt``);
- ``tests`` (hidden, required): for a Python function, Python test code (asserts that call
  the entry point by name, or HumanEval's ``def check(candidate)``, then called on it); in
  any language, a list of cases: ``{"args": [...], "expected": v}`` per call of a function,
  ``{"stdin": "...", "stdout": "..."}`` per run of a program;
- ``entry_point``: the function's name (required for a function);
- ``language`` (default ``python``; any id or name of the eight), ``task_kind``
  (``function``, the default, or ``program``), ``task_id`` (default ``row-N``), and
  ``signature``: a typed Python-style signature for call cases (``def f(xs: List[int]) ->
  int``; default: a Python prompt's own ``def``, else types read from the cases).

A row without tests, of an unknown language or kind, without an entry point, with tests
that do not parse or fit the language, or with an unknown field is an error naming the file,
the row and its line, before anything runs. For example::

    {"task_id": "add", "prompt": "def add(a: int, b: int) -> int:\\n    \\"\\"\\"Sum.\\"\\"\\"",
     "entry_point": "add", "tests": "assert add(1, 2) == 3"}
    {"language": "go", "prompt": "// Sum of a and b.\\nfunc add(a int, b int) int",
     "entry_point": "add", "tests": [{"args": [1, 2], "expected": 3}]}
    {"language": "c", "task_kind": "program", "prompt": "Print the sum of two integers.",
     "tests": [{"stdin": "1 2\\n", "stdout": "3\\n"}]}
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from arenaforge.pipeline.apps.humaneval_translate import Translation, Untranslatable
from arenaforge.pipeline.apps.verify_bench.problems import (
    Hidden,
    Problem,
    instruction_text,
    selection_order,
)
from arenaforge.stages.verification.harness.cases import FUNCTION, PROGRAM

FIELDS = {
    "task_id": "optional: the problem's name in the card (default: row-N)",
    "language": "optional: a language id or name (python, cpp, c, javascript, typescript, "
                "java, go, rust; default: python)",
    "task_kind": "optional: function (default) or program (stdin in, stdout out)",
    "prompt": "what the model completes: a function's signature with its docstring or "
              "comment, or a program's task statement",
    "instruction": "optional: the whole instruction, used verbatim instead of the template "
                   "around prompt",
    "entry_point": "a function's name (required for task_kind function)",
    "tests": "the hidden tests: Python test code (Python functions: asserts that call the "
             "entry point, or HumanEval's def check(candidate)), or a list of cases: "
             '{"args": [...], "expected": v} per call, {"stdin": s, "stdout": s} per run',
    "signature": "optional: a typed Python-style signature for call cases in another "
                 "language (def f(xs: List[int]) -> int); default: types from the cases",
}
_IDENT = re.compile(r"^[A-Za-z_]\w*$")
_DEFINES_CHECK = re.compile(r"^def\s+check\s*\(", re.MULTILINE)


class ProblemsFileError(ValueError):
    """A problems file that cannot be used; the message names the file, the row and line."""


def load_problems_file(path: str | Path, n: int | None = None, seed: int = 0) -> list[Problem]:
    """The problems of a JSONL file (see the module), every row checked before any is used;
    ``n`` of them (the bench's fixed order, ``selection_order``) when given.

    Raises:
        ProblemsFileError: unreadable file, malformed JSON, or a row that cannot be a problem
            (no hidden tests, an unknown language, no entry point, ...): names the file, the
            row (from 0, blank lines not counted) and its line.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemsFileError(f"{path}: cannot read the problems file: {exc}") from None
    problems: list[Problem] = []
    seen: dict[tuple[str, str], int] = {}
    texts: dict[str, int] = {}
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        row = len(problems)
        where = f"{path}: row {row} (line {line_no})"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ProblemsFileError(f"{where}: not valid JSON: {exc.msg} (column {exc.colno})"
                                    ) from None
        try:
            problem = problem_from_row(obj, row)
        except ValueError as exc:
            raise ProblemsFileError(f"{where}: {exc}") from None
        key = (problem.language, problem.task_id)
        if key in seen:
            raise ProblemsFileError(f"{where}: task_id {problem.task_id!r} in "
                                    f"{problem.language} repeats row {seen[key]}")
        if problem.instruction in texts:
            raise ProblemsFileError(f"{where}: the same instruction as row "
                                    f"{texts[problem.instruction]} (its hidden tests would be "
                                    "ambiguous)")
        seen[key], texts[problem.instruction] = row, row
        problems.append(problem)
    if not problems:
        raise ProblemsFileError(f"{path}: no problems")
    if n is not None:
        if n < 1:
            raise ValueError(f"--problems must be >= 1, got {n}")
        chosen = set(selection_order([f"{p.language}/{p.task_id}" for p in problems], seed)[:n])
        problems = [p for p in problems if f"{p.language}/{p.task_id}" in chosen]
    return problems


def problem_from_row(obj: Any, row: int) -> Problem:
    """One file row as a problem (pure; the caller adds the file and line to errors).

    Raises:
        ValueError: what is wrong with the row, naming the field.
    """
    from arenaforge.pipeline.sandbox.languages.catalog import (
        LANGUAGE_IDS,
        UnknownLanguage,
        resolve_language,
    )
    from arenaforge.stages.verification.harness.cases import resolve_task_kind

    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")  # noqa: TRY004
    unknown = sorted(set(obj) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}; known: {', '.join(FIELDS)}")
    try:
        language = resolve_language(_text(obj, "language", "python"))
    except UnknownLanguage:
        raise ValueError(f"field 'language': unknown language {obj['language']!r}; known: "
                         f"{', '.join(LANGUAGE_IDS)}") from None
    task_kind = resolve_task_kind(_text(obj, "task_kind", FUNCTION))
    task_id = _text(obj, "task_id", f"row-{row}")
    prompt = _text(obj, "prompt", "")
    own = _text(obj, "instruction", "")
    if not (prompt.strip() or own.strip()):
        raise ValueError("no prompt (field 'prompt', or 'instruction' for the whole text)")
    tests = obj.get("tests")
    if tests is None or tests == "" or tests == [] or (isinstance(tests, str)
                                                       and not tests.strip()):
        raise ValueError("no hidden tests (field 'tests')")
    entry_point = obj.get("entry_point")
    if task_kind == FUNCTION and not (isinstance(entry_point, str) and _IDENT.match(entry_point)):
        raise ValueError("no entry point (field 'entry_point': the function's name)"
                         if entry_point in (None, "") else
                         f"field 'entry_point': {entry_point!r} is not a function name")
    hidden = _hidden(language, task_kind, prompt, entry_point, tests, obj.get("signature"),
                     task_id)
    return Problem(task_id, language, task_kind,
                   own.strip() or instruction_text(language, task_kind, prompt), hidden)


def _text(obj: dict, field: str, default: str) -> str:
    value = obj.get(field)
    if value is None:
        return default
    if not isinstance(value, str):
        got = type(value).__name__
        raise ValueError(f"field {field!r}: expected text, got {got}")  # noqa: TRY004
    return value


def _hidden(language: str, task_kind: str, prompt: str, entry_point: str | None, tests: Any,
            signature: Any, task_id: str) -> Hidden:
    from arenaforge.stages.verification.harness.cases import CaseError, load_cases

    if isinstance(tests, str):
        if (language, task_kind) != ("python", FUNCTION):
            raise ValueError(f"field 'tests': a {language} {task_kind} takes a list of cases "
                             "(test code is for Python functions)")
        try:
            ast.parse(tests)
        except SyntaxError as exc:
            raise ValueError(f"field 'tests': not valid Python: {exc.msg} (line {exc.lineno} "
                             "of the tests)") from None
        call = f"\n\ncheck({entry_point})\n" if _DEFINES_CHECK.search(tests) else "\n"
        return Hidden("python", prompt, entry_point, tests.rstrip() + call)
    if not isinstance(tests, list):
        got = type(tests).__name__
        raise ValueError(f"field 'tests': test code or a list of cases, not {got}")  # noqa: TRY004
    try:
        cases = load_cases(task_kind, tests)
    except CaseError as exc:
        raise ValueError(f"field 'tests': {exc}") from None
    if task_kind == PROGRAM:
        return Hidden("io", prompt, None, io=tuple(cases))
    tr = _translation(task_id, language, prompt, entry_point, cases, signature)
    return Hidden("calls", prompt, entry_point, translation=tr)


def _translation(task_id: str, language: str, prompt: str, entry_point: str, cases: list,
                 signature: Any) -> Translation:
    """Call cases with their typed signature, checked against the language's harness."""
    from arenaforge.pipeline.apps.humaneval_translate import check_language
    from arenaforge.stages.verification.harness import UnsupportedType, complete_signature

    if signature is not None and not isinstance(signature, str):
        raise ValueError(f"field 'signature': expected text, got {type(signature).__name__}")
    if signature:
        texts = [signature]
    else:  # the prompt's def (typed, then untyped), else arg1, arg2, ... typed by the cases
        found = (_python_def(prompt, entry_point), _python_def(prompt, entry_point, typed=False))
        width = max(len(c.args) for c in cases)
        texts = [t for t in found if t and language == "python"] or [
            f"def {entry_point}({', '.join(f'arg{i + 1}' for i in range(width))})"]
    for i, text in enumerate(texts):  # a prompt's annotations outside the subset: untyped
        try:
            sig = complete_signature(text, cases)
            break
        except UnsupportedType as exc:
            if i == len(texts) - 1:
                raise ValueError(f"field 'signature': {exc}" if signature else
                                 f"field 'tests': {exc}") from None
    if sig.name != entry_point:
        raise ValueError(f"field 'signature' names {sig.name!r}, entry_point {entry_point!r}")
    if any(len(c.args) != len(sig.params) for c in cases):
        raise ValueError(f"field 'tests': every case must pass {len(sig.params)} argument(s), "
                         f"as {sig.name} takes")
    tr = Translation(task_id, sig, tuple(cases), docstring="")
    try:
        check_language(tr, language)
    except Untranslatable as exc:
        raise ValueError(f"field 'tests': {exc.detail}") from None
    return tr


def _python_def(prompt: str, entry_point: str, typed: bool = True) -> str | None:
    """The ``def`` line of ``entry_point`` in a Python prompt (annotations kept when
    ``typed``), if any."""
    try:
        tree = ast.parse(prompt.rstrip() + "\n    pass\n")
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == entry_point:
            if not typed:
                return f"def {node.name}({', '.join(a.arg for a in node.args.args)})"
            returns = f" -> {ast.unparse(node.returns)}" if node.returns else ""
            return f"def {node.name}({ast.unparse(node.args)}){returns}"
    return None
