"""Pure parsing for the execution stages: entry points, generated tests, repaired code.

Nothing here executes code: everything works on ``ast`` trees of untrusted text (``ast.parse``
only parses). Malformed model output is a value: ``ParsedTests(tests=(), parse_error=...)`` with
the raw text kept by the caller, never a silent default.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
from collections import Counter
from collections.abc import Sequence

from arenaforge.stages.common.code_extract import code_blocks, extract_code

_BUILTINS = frozenset(dir(builtins))
# unittest-style assertions we can express as a plain assert (the sandbox rewrites plain asserts
# so that cheating values cannot pass them; method calls would bypass that).
_UNITTEST = {"assertEqual": "==", "assertNotEqual": "!=", "assertIs": "is", "assertIsNot": "is not",
             "assertIn": "in", "assertNotIn": "not in", "assertLess": "<", "assertLessEqual": "<=",
             "assertGreater": ">", "assertGreaterEqual": ">="}


@dataclasses.dataclass(frozen=True)
class EntryPoint:
    """The function (or class) the tests must call, as the candidate answers define it.

    Attributes:
        name: the callable's name.
        signature: ``def name(a, b: int) -> str`` / ``class Name``, for the test-writing prompt.
        votes: how many candidates define it.
    """

    name: str
    signature: str
    votes: int


@dataclasses.dataclass(frozen=True)
class ParsedTests:
    """Tests parsed from one model reply: each a single assert or a small block ending in one."""

    tests: tuple[str, ...]
    parse_error: str | None = None
    author_name: str | None = None  # the name the author called, renamed to the entry point


def python_blocks(text: str) -> list[str]:
    """Fenced Python (or untagged) blocks of a reply; the whole text when there is none.

    >>> python_blocks("Here:\\n```python\\nx = 1\\n```\\nand\\n```\\ny = 2\\n```")
    ['x = 1\\n', 'y = 2\\n']
    """
    blocks = [b.code for b in code_blocks(text) if b.language in ("", "python")]
    return blocks if blocks else [text]


def extract_program(text: str | None) -> tuple[str | None, str | None]:
    """The Python program of a reply, extracted as the answer stage does.

    The answer stage's ``extract_code`` joins the reply's Python blocks; a reply without a
    fence is taken whole when it parses as Python (small models often omit the fence).

    Returns:
        ``(code, None)``, or ``(None, parse_error)`` when there is no code that parses.

    >>> extract_program("Fixed:\\n```python\\ndef f():\\n    return 1\\n```")
    ('def f():\\n    return 1\\n', None)
    >>> extract_program("```python\\ndef f(:\\n```")[1]
    'code does not parse: invalid syntax (line 1)'
    """
    if text is None or not text.strip():
        return None, "empty output"
    code = extract_code(text, "python")
    if code is None:
        code = text
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        where = f"line {getattr(exc, 'lineno', '?')}"
        return None, f"code does not parse: {getattr(exc, 'msg', exc)} ({where})"
    return code, None


def strip_main_guard(code: str) -> str:
    """Remove top-level ``if __name__ == "__main__":`` blocks (demo code, ``input()`` calls).

    Tests import the solution; the harness runs it as ``__main__``, so without this a demo
    block that reads stdin would fail every test. Other lines are kept as they are, so error
    line numbers still point into the answer.

    >>> strip_main_guard("def f():\\n    return 1\\nif __name__ == '__main__':\\n    print(f())\\n")
    'def f():\\n    return 1\\n'
    """
    tree = _parse(code)
    if tree is None:
        return code
    lines = code.splitlines(keepends=True)
    drop = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "__name__" in _free_names(node.test):
            drop.update(range(node.lineno - 1, node.end_lineno))
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def _parse(code: str | None) -> ast.Module | None:
    if not code:
        return None
    try:
        return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def public_definitions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef
                                                   | ast.ClassDef]:
    """Top-level functions/classes not called by another top-level definition.

    Skips ``main``, ``test*`` and private names: a demo or test function calling the solution
    does not make it a helper, and is not the solution either.
    """
    defs = {n.name: n for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    called: set[str] = set()
    for name, node in defs.items():
        if name == "main" or name.startswith("test"):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id != name and sub.id in defs:
                called.add(sub.id)
    return {name: node for name, node in defs.items()
            if not (name in called or name.startswith(("_", "test")) or name == "main")}


def signature_of(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
                 name: str | None = None) -> str:
    """``def name(a, b: int) -> str`` / ``class Name`` (``name`` replaces the node's own)."""
    name = name or node.name
    if isinstance(node, ast.ClassDef):
        return f"class {name}"
    ret = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    return f"def {name}({ast.unparse(node.args)}){ret}"


def _public_defs(tree: ast.Module) -> dict[str, str]:
    return {name: signature_of(node) for name, node in public_definitions(tree).items()}


def find_entry_point(codes: Sequence[str | None]) -> EntryPoint | None:
    """The callable most candidates define as their public function.

    A candidate's public definitions are its top-level functions and classes that no other
    top-level definition uses (helpers are excluded), skipping ``main``, ``test*`` and private
    names. The name defined by most candidates wins (ties: first seen); its signature is taken
    from the first candidate that defines it.

    >>> find_entry_point(["def helper(x):\\n    return x\\n"
    ...                   "def solve(a, b=2):\\n    return helper(a)",
    ...                   "def solve(a, b):\\n    return a", None, "not python("])
    EntryPoint(name='solve', signature='def solve(a, b=2)', votes=2)
    """
    votes: Counter = Counter()
    signature: dict[str, str] = {}
    for code in codes:
        tree = _parse(code)
        if tree is None:
            continue
        for name, sig in _public_defs(tree).items():
            votes[name] += 1
            signature.setdefault(name, sig)
    if not votes:
        return None
    name, n = votes.most_common(1)[0]
    return EntryPoint(name, signature[name], n)


def _unittest_to_assert(call: ast.Call) -> ast.Assert | None:
    """``self.assertEqual(a, b)`` -> ``assert a == b`` (and the other simple forms)."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            and func.value.id == "self"):
        return None
    args = call.args
    if func.attr in _UNITTEST and len(args) >= 2:
        op = {"==": ast.Eq(), "!=": ast.NotEq(), "is": ast.Is(), "is not": ast.IsNot(),
              "in": ast.In(), "not in": ast.NotIn(), "<": ast.Lt(), "<=": ast.LtE(), ">": ast.Gt(),
              ">=": ast.GtE()}[_UNITTEST[func.attr]]
        return ast.Assert(ast.Compare(args[0], [op], [args[1]]))
    if func.attr == "assertTrue" and args:
        return ast.Assert(args[0])
    if func.attr == "assertFalse" and args:
        return ast.Assert(ast.UnaryOp(ast.Not(), args[0]))
    if func.attr in ("assertIsNone", "assertIsNotNone") and args:
        op = ast.Is() if func.attr == "assertIsNone" else ast.IsNot()
        return ast.Assert(ast.Compare(args[0], [op], [ast.Constant(None)]))
    return None


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.new, node.ctx) if node.id == self.old else node


def _calls(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def _bound_names(stmts: Sequence[ast.stmt]) -> set[str]:
    names = set()
    for stmt in stmts:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in n.names)
    return names


def _free_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


_SETUP = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Import, ast.ImportFrom)


def _tests_in_body(body: Sequence[ast.stmt], entry: str, known: set[str]) -> list[str]:
    """Tests of one scope: each assert alone, or with the setup statements it depends on."""
    tests, setup = [], []
    for stmt in body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            converted = _unittest_to_assert(stmt.value)
            if converted is not None:
                stmt = ast.copy_location(converted, stmt)
        if isinstance(stmt, ast.Assert):
            bound = _bound_names(setup)
            free = _free_names(stmt)
            unknown = free - bound - known - _BUILTINS
            if not _calls(stmt, entry) and not (free & bound):
                continue  # does not exercise the entry point
            if unknown:
                continue  # refers to something nobody defines (a fixture, a variable of the reply)
            if free & bound:
                tests.append(ast.unparse(ast.Module([*setup, stmt], [])))
            else:
                tests.append(ast.unparse(stmt))
        elif isinstance(stmt, _SETUP) and not (isinstance(stmt, ast.Expr)
                                               and isinstance(stmt.value, ast.Constant)):
            if isinstance(stmt, ast.Expr) and _is_print(stmt.value):
                continue
            if _free_names(stmt) - _bound_names(setup) - known - _BUILTINS - _bound_names([stmt]):
                continue  # e.g. ``unittest.main()`` or ``check(f)``: not runnable here
            if entry in _bound_names([stmt]):
                continue  # ``from solution import f`` or a stub would replace the answer
            setup.append(stmt)
    return tests


def _is_print(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "print")


def _scopes(tree: ast.Module, entry: str) -> list[list[ast.stmt]]:
    """The module body plus the bodies of test functions and methods (``check(candidate)`` gets
    ``candidate`` renamed to the entry point)."""
    scopes = [tree.body]
    for node in tree.body:
        if isinstance(node, ast.If) and "__name__" in _free_names(node.test):
            scopes.append(node.body)  # ``if __name__ == "__main__":`` blocks of asserts
            continue
        funcs = [node] if isinstance(node, ast.FunctionDef) else []
        if isinstance(node, ast.ClassDef):
            funcs = [n for n in node.body if isinstance(n, ast.FunctionDef)]
        for func in funcs:
            if func.name == entry:
                continue  # the reply re-implemented the function: not a test
            params = [a.arg for a in func.args.args if a.arg != "self"]
            body = func.body
            if len(params) == 1 and params[0] in ("candidate", "func", "fn", "f"):
                body = [_Rename(params[0], entry).visit(s) for s in body]
            elif params:
                continue  # a parametrised test whose arguments we cannot supply
            scopes.append(body)
    return scopes


def extract_tests(text: str | None, entry_point: str, max_tests: int | None = None) -> ParsedTests:
    """Assert-style tests of ``entry_point`` in a model reply.

    Reads fenced blocks (or the whole reply), then top-level asserts, asserts inside ``test_*``
    functions, ``check(candidate)`` and unittest methods (``self.assertEqual`` becomes a plain
    assert). An assert that uses variables set up before it keeps that setup as a small block.
    Duplicates are dropped; a block that does not parse is retried line by line. When no
    assert calls ``entry_point``, the function the reply's asserts call is taken as the
    author's name for it and renamed (``author_name``).

    Args:
        text: the raw reply.
        entry_point: the function or class the tests must call.
        max_tests: keep at most this many.

    >>> extract_tests("```python\\nassert add(1, 2) == 3\\nassert add(0, 0) == 0\\n"
    ...               "print('ok')\\n```", "add")
    ParsedTests(tests=('assert add(1, 2) == 3', 'assert add(0, 0) == 0'), parse_error=None, author_name=None)
    >>> extract_tests("```python\\nassert find_max([1, 3]) == 3\\n```", "find_maximum")
    ParsedTests(tests=('assert find_maximum([1, 3]) == 3',), parse_error=None, author_name='find_max')
    >>> extract_tests("I cannot help with that.", "add").parse_error
    'no assert calling add found'
    """
    if text is None or not text.strip():
        return ParsedTests((), "empty output")
    trees = _reply_trees(text)
    tests = _tests_of(trees, entry_point)
    author_name = None
    if not tests:
        # The author called the function by a name of its own (``find_max`` for
        # ``find_maximum``): its asserts still test the task, under the entry point's name.
        author_name = _called_name(trees, entry_point)
        if author_name is not None:
            tests = _tests_of([_Rename(author_name, entry_point).visit(t) for t in trees],
                              entry_point)
    if max_tests is not None:
        tests = tests[:max_tests]
    if not tests:
        return ParsedTests((), f"no assert calling {entry_point} found")
    return ParsedTests(tests, None, author_name)


def _reply_trees(text: str) -> list[ast.Module]:
    trees = []
    for block in python_blocks(text):
        tree = _parse(block)
        if tree is None:
            # A reply cut mid-statement, or prose around asserts: salvage the lines that parse.
            lines = [ln.strip() for ln in block.splitlines() if ln.strip().startswith("assert ")]
            parsed = [t for t in (_parse(ln) for ln in lines) if t is not None]
            tree = ast.Module([s for t in parsed for s in t.body], [])
        trees.append(tree)
    return trees


def _tests_of(trees: Sequence[ast.Module], entry_point: str) -> tuple[str, ...]:
    found: list[str] = []
    for tree in trees:
        # Only the entry point is defined where the tests run: helpers of the reply are not.
        imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        for i, body in enumerate(_scopes(tree, entry_point)):
            found.extend(_tests_in_body(body if i == 0 else [*imports, *body], entry_point,
                                        {entry_point}))
    return tuple(dict.fromkeys(found))


def _called_name(trees: Sequence[ast.Module], entry_point: str) -> str | None:
    """The function most asserts of the reply call (not a builtin), or ``None``."""
    votes: Counter = Counter()
    for tree in trees:
        bound = _bound_names(tree.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert):
                for call in ast.walk(node):
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                            and call.func.id not in _BUILTINS and call.func.id not in bound
                            and call.func.id != entry_point):
                        votes[call.func.id] += 1
    return votes.most_common(1)[0][0] if votes else None


def probe_program(test_code: str) -> tuple[str, str] | None:
    """A program that prints what the tested expression returned, for repair feedback.

    For a test ending in ``assert EXPR == EXPECTED`` (after optional setup) returns
    ``(program, EXPR source)``; the program runs the setup, prints ``repr(EXPR)`` and ends with
    ``assert True`` (the sandbox refuses to pass a program that checks nothing). ``None`` for
    other shapes. The printed value is only shown to the model, never used as a verdict.

    >>> probe_program("x = [3, 1]\\nassert sort_list(x) == [1, 3]")
    ('x = [3, 1]\\nprint(repr(sort_list(x))[:300])\\nassert True', 'sort_list(x)')
    """
    tree = _parse(test_code)
    if tree is None or not tree.body or not isinstance(tree.body[-1], ast.Assert):
        return None
    test = tree.body[-1].test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)):
        return None
    expr = ast.unparse(test.left)
    setup = [ast.unparse(s) for s in tree.body[:-1]]
    return "\n".join([*setup, f"print(repr({expr})[:300])", "assert True"]), expr
