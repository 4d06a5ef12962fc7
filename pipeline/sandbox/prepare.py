"""Compile a test program for the harness: one code object per top-level statement.

Done on the host, in the supervisor, because the rewrite needs ``ast`` and the code objects keep
the original line numbers (the sandboxed harness only ``marshal.loads`` them; same interpreter).

Two rewrites make a cheating solution fail instead of pass:

* every comparison inside an ``assert`` becomes ``__af_cmp(ops, *operands)``, which refuses
  operands that are not built from exact builtin types (an object whose ``__eq__`` always returns
  True, an ``int`` subclass...), and
* every value whose truth an ``assert`` tests goes through ``__af_plain``, so a custom
  ``__bool__`` cannot decide it.

Example::

    >>> prog = prepare_tests("assert f(1) == 2\\nassert f(2) == 3\\n")
    >>> [c.kind for c in prog.chunks], prog.tests_total
    (['assert', 'assert'], 2)
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import marshal

TESTS_FILENAME = "<tests>"
SOLUTION_FILENAME = "<solution>"
CMP_HELPER = "__af_cmp"
PLAIN_HELPER = "__af_plain"
ASSERT_HELPER = "__af_assert"

_OP_NAMES = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
}


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One top-level statement of the tests: ``kind`` is ``assert`` or ``stmt``."""

    kind: str
    code: bytes  # marshal of the compiled statement
    lineno: int


@dataclasses.dataclass(frozen=True)
class PreparedTests:
    """Compiled tests; ``tests_total`` counts top-level asserts (None when there are none)."""

    chunks: tuple[Chunk, ...]
    tests_total: int | None
    lines: tuple[str, ...]


class _CompareRewriter(ast.NodeTransformer):
    """Replace every ``a OP b [OP c]`` with ``__af_cmp(("OP", ...), a, b, ...)``."""

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        ops = ast.Tuple([ast.Constant(_OP_NAMES[type(op)]) for op in node.ops], ast.Load())
        call = ast.Call(ast.Name(CMP_HELPER, ast.Load()), [ops, node.left, *node.comparators], [])
        return ast.copy_location(call, node)


def _guard_truth(node: ast.expr) -> ast.expr:
    """Make every truth test in an assert's top-level logic act on a builtin value."""
    if isinstance(node, ast.BoolOp):
        node.values = [_guard_truth(v) for v in node.values]
        return node
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        node.operand = _guard_truth(node.operand)
        return node
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CMP_HELPER:
        return node  # already returns a bool
    return ast.copy_location(ast.Call(ast.Name(PLAIN_HELPER, ast.Load()), [node], []), node)


class _AssertRewriter(ast.NodeTransformer):
    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        test = _guard_truth(_CompareRewriter().visit(node.test))
        node.test = ast.copy_location(ast.Call(ast.Name(ASSERT_HELPER, ast.Load()), [test], []), node)
        return node


@functools.lru_cache(maxsize=4096)  # the candidates of one problem share its tests
def prepare_tests(source: str) -> PreparedTests:
    """Parse, rewrite and compile a test program.

    Args:
        source: Plain asserts, or ``def check(candidate): ...`` followed by its call.

    Returns:
        The compiled chunks.

    Raises:
        SyntaxError: The tests do not parse (also for inputs too deeply nested to parse).
    """
    try:
        tree = ast.parse(source, TESTS_FILENAME)
        tree = _AssertRewriter().visit(tree)
        ast.fix_missing_locations(tree)
        chunks = []
        for stmt in tree.body:
            module = ast.Module(body=[stmt], type_ignores=[])
            code = compile(module, TESTS_FILENAME, "exec", dont_inherit=True, optimize=0)
            kind = "assert" if isinstance(stmt, ast.Assert) else "stmt"
            chunks.append(Chunk(kind, marshal.dumps(code), stmt.lineno))
    except (RecursionError, MemoryError, ValueError) as exc:
        raise SyntaxError(f"tests cannot be compiled: {type(exc).__name__}: {exc}") from exc
    total = sum(c.kind == "assert" for c in chunks)
    return PreparedTests(tuple(chunks), total or None, tuple(source.splitlines()))
