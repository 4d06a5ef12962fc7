"""Entry points bound per candidate, not guessed: which function of an answer the tests call.

The tests of an instruction call one name, its entry point: the function the instruction names
when it names one (``instruction_function_name``), else the public function most answers define
(``test_parsing.find_entry_point``). Each candidate answer is then bound to it (``bind``), by the
first rule that applies:

1. ``instruction`` / ``same_name``: the candidate defines the entry point itself (``instruction``
   when the name came from the instruction);
2. ``signature``: exactly one public top-level function whose arity fits every call the tests
   make;
3. ``single_public``: the candidate has exactly one public top-level function;
4. ``author_name``: the candidate defines the name a test author called (``find_max`` for
   ``find_maximum``; ``test_parsing.extract_tests`` renames such calls to the entry point).

A bound candidate runs with ``entry = its_function`` appended (``bound_code``), so an answer that
solves the task as ``separate_words`` passes tests that call ``split_string_into_words``. A
candidate with nothing to bind is status ``no_entry_point``, never a logic failure.
Pure: ``ast`` parsing only, nothing is executed.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import keyword
import re
from collections.abc import Iterable, Sequence

from arenaforge.stages.verification.test_parsing import public_definitions

INSTRUCTION, SAME_NAME, SIGNATURE, SINGLE_PUBLIC, AUTHOR_NAME = (
    "instruction", "same_name", "signature", "single_public", "author_name")
BINDING_RULES = (INSTRUCTION, SAME_NAME, SIGNATURE, SINGLE_PUBLIC, AUTHOR_NAME)

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# Strongest first: ``def name(``, a backticked call, "named/called name", "function name(".
_NAME_FORMS = (
    re.compile(rf"\bdef\s+({_IDENT})\s*\("),
    re.compile(rf"`({_IDENT})\s*\([^`]*\)?`"),
    re.compile(rf"\b(?:named|called|[Nn]ame it|[Nn]ame the function)\s+[`'\"]?({_IDENT})[`'\"]?"),
    re.compile(rf"\bfunction\s+[`'\"]?({_IDENT})[`'\"]?\s*\("),
    re.compile(rf"\bfunction\s+`({_IDENT})`"),
    re.compile(rf"`({_IDENT})`\s+function\b"),
)
_NOT_A_NAME = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | {
    "main", "solution", "function", "python", "it", "that", "this", "the", "a", "an"}


def instruction_function_name(instruction: str | None) -> str | None:
    """The function name an instruction asks for, when it gives one.

    >>> instruction_function_name("Write a function `split_string_into_words(s)` that ...")
    'split_string_into_words'
    >>> instruction_function_name("Create a Python function named is_prime that checks n.")
    'is_prime'
    >>> instruction_function_name("Sort the list with `sorted()` and return it.") is None
    True
    """
    if not instruction:
        return None
    if (stub := _stub_function(instruction)) is not None:
        return stub
    for form in _NAME_FORMS:
        for m in form.finditer(instruction):
            name = m.group(1)
            if name not in _NOT_A_NAME and not name.isupper():
                return name
    return None


def _stub_function(instruction: str) -> str | None:
    """The function left to write when the instruction is (or holds) Python source.

    HumanEval-style prompts define helpers first and end with the stub to implement (a body
    of only a docstring, ``pass`` or ``...``): the first ``def`` would name a helper
    (``is_palindrome`` before ``make_palindrome``).
    """
    sources = [instruction, *re.findall(r"```(?:python|py)?\n(.*?)```", instruction, re.DOTALL)]
    for source in sources:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError):
            continue
        stubs = [node.name for node in tree.body
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _is_stub(node)]
        if stubs:
            return stubs[-1]
    return None


def _is_stub(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    def empty(stmt: ast.stmt) -> bool:
        return isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr)
                                              and isinstance(stmt.value, ast.Constant)
                                              and (isinstance(stmt.value.value, str)
                                                   or stmt.value.value is Ellipsis))
    return all(empty(stmt) for stmt in node.body)


@dataclasses.dataclass(frozen=True)
class Binding:
    """How one candidate is bound to the entry point (``bound_function`` None: unbound)."""

    entry_point: str
    bound_function: str | None
    rule: str | None
    alias: str = ""  # the statement appended to the solution ("" when none is needed)
    fits: bool = True  # the bound function accepts every call arity of the tests


def _arity(node: ast.AST) -> tuple[int, float]:
    """(required, most) positional arguments of a function or a class's ``__init__``."""
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef)
                     and n.name == "__init__"), None)
        return (0, 0) if init is None else _arity(init)  # ``self`` is dropped there
    args = node.args  # type: ignore[attr-defined]
    positional = len(args.posonlyargs) + len(args.args)
    required = positional - len(args.defaults)
    most = float("inf") if args.vararg is not None else positional
    if positional and (args.posonlyargs or args.args)[0].arg in ("self", "cls"):
        required, most = max(required - 1, 0), most - 1
    return required, most


def arity_fits(node: ast.AST, arities: Iterable[int]) -> bool:
    """Every call arity in ``arities`` is accepted by the function (or class constructor)."""
    required, most = _arity(node)
    return all(required <= n <= most for n in arities)


def call_arities(test_codes: Iterable[str | None], entry_point: str) -> tuple[int, ...]:
    """The argument counts of every call to ``entry_point`` in the tests (sorted, distinct).

    >>> call_arities(["assert f(1, 2) == 3", "x = f(0, b=1)\\nassert x", None], "f")
    (2,)
    """
    found = set()
    for code in test_codes:
        try:
            tree = ast.parse(code or "")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == entry_point
                    and not any(isinstance(a, ast.Starred) for a in node.args)):
                found.add(len(node.args) + len(node.keywords))
    return tuple(sorted(found))


def bind(code: str | None, entry_point: str, *, from_instruction: bool = False,
         arities: Sequence[int] = (), author_names: Iterable[str | None] = ()) -> Binding:
    """Bind one candidate's code to ``entry_point`` (rules in the module docstring).

    Args:
        code: the candidate's code (``None`` or unparsable code binds nothing).
        entry_point: the name the tests call.
        from_instruction: the entry point is the name the instruction gives.
        arities: the argument counts the tests call it with (``call_arities``).
        author_names: names the test authors called it by.

    >>> b = bind("def separate_words(s):\\n    return s.split()\\n", "split_string_into_words",
    ...          from_instruction=True, arities=(1,))
    >>> b.bound_function, b.rule, b.alias
    ('separate_words', 'signature', 'split_string_into_words = separate_words')
    """
    unbound = Binding(entry_point, None, None)
    try:
        tree = ast.parse(code or "")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return unbound
    top = {n.name: n for n in tree.body
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    own = INSTRUCTION if from_instruction else SAME_NAME
    if entry_point in top:
        return Binding(entry_point, entry_point, own, "", arity_fits(top[entry_point], arities))
    if entry_point in _assigned_names(tree):
        return Binding(entry_point, entry_point, own)
    method = _method(tree, entry_point)
    if method is not None:  # LeetCode style: ``class Solution: def entry(self, ...)``
        owner, node = method
        return Binding(entry_point, f"{owner}().{entry_point}", own,
                       f"{entry_point} = {owner}().{entry_point}", arity_fits(node, arities))
    public = public_definitions(tree)
    functions = {n: node for n, node in public.items() if not isinstance(node, ast.ClassDef)}
    fitting = [n for n, node in functions.items() if arity_fits(node, arities)]
    if len(fitting) == 1:
        return _alias(entry_point, fitting[0], SIGNATURE, True)
    if len(functions) == 1:
        name, node = next(iter(functions.items()))
        return _alias(entry_point, name, SINGLE_PUBLIC, arity_fits(node, arities))
    for name in author_names:
        if name and name in top:
            return _alias(entry_point, name, AUTHOR_NAME, arity_fits(top[name], arities))
    return unbound


def bound_code(code: str, binding: Binding) -> str:
    """The solution with the binding's alias appended (unchanged when none is needed)."""
    if not binding.alias:
        return code
    return f"{code.rstrip()}\n\n{binding.alias}\n"


def _alias(entry_point: str, name: str, rule: str, fits: bool) -> Binding:
    return Binding(entry_point, name, rule, f"{entry_point} = {name}", fits)


def _assigned_names(tree: ast.Module) -> set[str]:
    return {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name)}


def _method(tree: ast.Module, name: str) -> tuple[str, ast.FunctionDef] | None:
    """``(class name, method)`` of a public class with a no-argument constructor."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            methods = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
            init = methods.get("__init__")
            if name in methods and (init is None or _arity(init)[0] == 0):
                return node.name, methods[name]
    return None
