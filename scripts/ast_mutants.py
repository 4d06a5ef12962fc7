"""Mutants of one function by AST rewriting: the wrong programs a test suite should reject.

Each mutation changes one node of the target function's body (its docstring is left alone):

- ``arith``: an arithmetic or augmented-assignment operator swapped (``+`` <-> ``-``,
  ``*`` <-> ``//``, ``%`` -> ``//`` ...);
- ``boolop``: ``and`` <-> ``or``;
- ``compare``: a comparison negated (``==`` <-> ``!=``, ``<`` <-> ``>=``, ``in`` <-> ``not in``,
  ``is`` <-> ``is not``);
- ``boundary``: a comparison's boundary moved (``<`` <-> ``<=``, ``>`` <-> ``>=``);
- ``constant``: an int or float constant +1 and -1, a bool constant flipped;
- ``negate``: an ``if``/``while`` condition wrapped in ``not``, or a ``not`` dropped;
- ``drop_branch``: an ``if`` replaced by its ``else`` branch (nothing when it has none), or its
  ``else`` branch dropped;
- ``drop_statement``: one statement removed (``pass`` when it was alone in its block);
- ``return_value``: ``return <expr>`` -> ``return None``.

Mutants are deduplicated by their unparsed source (two rewrites that print the same are one
mutant, and a rewrite that prints like the original is no mutant), and only those that compile
are kept. ``mutants(source, "f", cap=20, seed=0)`` keeps a seeded sample of at most 20, in the
order they were generated.

>>> [m.operator for m in mutants("def f(x):\\n    return x + 1\\n", "f")]
['drop_statement', 'return_value', 'arith', 'constant', 'constant']
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import random
from collections.abc import Callable, Iterator

OPERATORS = ("arith", "boolop", "compare", "boundary", "constant", "negate", "drop_branch",
             "drop_statement", "return_value")

_ARITH: dict[type, tuple[type, ...]] = {
    ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.FloorDiv, ast.Add),
    ast.Div: (ast.Mult,), ast.FloorDiv: (ast.Div, ast.Mult), ast.Mod: (ast.FloorDiv,),
    ast.Pow: (ast.Mult,), ast.LShift: (ast.RShift,), ast.RShift: (ast.LShift,),
    ast.BitAnd: (ast.BitOr,), ast.BitOr: (ast.BitAnd,), ast.BitXor: (ast.BitOr,),
}
_NEGATED: dict[type, type] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE,
    ast.LtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_BOUNDARY: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE,
                               ast.GtE: ast.Gt}


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One mutated program: the whole module's source with a single change."""

    operator: str
    line: int  # line of the changed node in the original source
    description: str
    source: str


# A site: (operator, line, description, apply). ``apply`` changes, in place, the copy of the
# node the site was found on (for statement-level changes: the node that owns the block).
_Site = tuple[str, int, str, Callable[[ast.AST], None]]


def _set_op(new: type) -> Callable[[ast.AST], None]:
    def apply(node: ast.AST) -> None:
        node.op = new()
    return apply


def _set_cmp(k: int, new: type) -> Callable[[ast.AST], None]:
    def apply(node: ast.AST) -> None:
        node.ops[k] = new()
    return apply


def _set_attr(name: str, value: Callable[[ast.AST], object]) -> Callable[[ast.AST], None]:
    def apply(node: ast.AST) -> None:
        setattr(node, name, value(node))
    return apply


def _expression_sites(node: ast.AST) -> Iterator[_Site]:
    line = getattr(node, "lineno", 0)
    if isinstance(node, (ast.BinOp, ast.AugAssign)):
        for new in _ARITH.get(type(node.op), ()):
            yield ("arith", line, f"{type(node.op).__name__} -> {new.__name__}", _set_op(new))
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        yield ("boolop", line, f"{type(node.op).__name__} -> {new.__name__}", _set_op(new))
    elif isinstance(node, ast.Compare):
        for k, op in enumerate(node.ops):
            kind = type(op)
            yield ("compare", line, f"{kind.__name__} -> {_NEGATED[kind].__name__}",
                   _set_cmp(k, _NEGATED[kind]))
            if kind in _BOUNDARY:
                yield ("boundary", line, f"{kind.__name__} -> {_BOUNDARY[kind].__name__}",
                       _set_cmp(k, _BOUNDARY[kind]))
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            yield ("constant", line, f"{value} -> {not value}",
                   _set_attr("value", lambda n: not n.value))
        elif isinstance(value, (int, float)):
            for delta in (1, -1):
                yield ("constant", line, f"{value!r} -> {value + delta!r}",
                       _set_attr("value", lambda n, d=delta: n.value + d))
    elif isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None):
        yield ("return_value", line, "return <expr> -> return None",
               _set_attr("value", lambda n: ast.Constant(None)))
    elif isinstance(node, (ast.If, ast.While)):
        kind = type(node).__name__
        if isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not):
            yield ("negate", line, f"{kind}: drop not", _set_attr("test", lambda n: n.test.operand))
        else:
            yield ("negate", line, f"{kind}: not <cond>",
                   _set_attr("test", lambda n: ast.UnaryOp(ast.Not(), n.test)))


def _replace_statement(field: str, k: int, new: Callable[[ast.stmt], list[ast.stmt]]
                       ) -> Callable[[ast.AST], None]:
    """Statement ``k`` of ``owner.<field>`` becomes ``new(statement)`` (``pass`` if empty)."""
    def apply(owner: ast.AST) -> None:
        block = getattr(owner, field)
        setattr(owner, field, block[:k] + new(block[k]) + block[k + 1:] or [ast.Pass()])
    return apply


def _statement_sites(owner: ast.AST, field: str, skip_docstring: bool) -> Iterator[_Site]:
    """Drop-statement and drop-branch sites of one statement block (``owner.<field>``)."""
    for k, stmt in enumerate(getattr(owner, field)):
        if skip_docstring and k == 0 and _is_docstring(stmt):
            continue
        yield ("drop_statement", stmt.lineno, f"drop {type(stmt).__name__}",
               _replace_statement(field, k, lambda s: []))
        if isinstance(stmt, ast.If):
            yield ("drop_branch", stmt.lineno, "if -> its else branch",
                   _replace_statement(field, k, lambda s: list(s.orelse)))
            if stmt.orelse:
                yield ("drop_branch", stmt.lineno, "drop the else branch",
                       _replace_statement(field, k, lambda s: [_without_else(s)]))


def _without_else(stmt: ast.If) -> ast.If:
    return ast.If(test=stmt.test, body=stmt.body, orelse=[])


def _is_docstring(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str))


def _target(tree: ast.Module, function: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function:
            return node
    raise ValueError(f"no top-level function {function!r} to mutate")


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Pre-order in field order: the same numbering on the tree and on a deep copy of it."""
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _walk(child)


def _sites(func: ast.AST) -> Iterator[tuple[int, _Site]]:
    """Every mutation site of ``func``'s body, with the pre-order index of its node."""
    body = func.body
    docstring = body[0] if body and _is_docstring(body[0]) else None
    skip = {id(docstring), id(docstring.value)} if docstring else set()
    for i, node in enumerate(_walk(func)):
        if node is not func and id(node) not in skip:
            for site in _expression_sites(node):
                yield i, site
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                for site in _statement_sites(node, field, skip_docstring=node is func):
                    yield i, site


def _apply(tree: ast.Module, function: str, index: int, site: _Site) -> str:
    mutated = copy.deepcopy(tree)
    node = next(n for i, n in enumerate(_walk(_target(mutated, function))) if i == index)
    site[3](node)
    return ast.unparse(ast.fix_missing_locations(mutated))


def _compiles(source: str) -> bool:
    try:
        compile(source, "<mutant>", "exec")
    except (SyntaxError, ValueError):
        return False
    return True


def mutants(source: str, function: str, *, cap: int | None = None, seed: int = 0
            ) -> list[Mutant]:
    """The distinct, compilable single-change mutants of ``function`` in ``source``.

    Args:
        source: a module that defines ``function`` at top level (other code is kept as is).
        function: the function whose body is mutated.
        cap: keep at most this many (a sample seeded by ``seed``, in generation order).
        seed: the sampling seed; the same inputs always give the same mutants.

    Raises:
        ValueError: ``source`` does not parse or defines no such function.
    """
    tree = ast.parse(source)
    seen, out = {ast.unparse(tree)}, []
    for index, site in _sites(_target(tree, function)):
        text = _apply(tree, function, index, site)
        if text in seen or not _compiles(text):
            continue
        seen.add(text)
        operator, line, description, _ = site
        out.append(Mutant(operator, line, description, text + "\n"))
    if cap is not None and len(out) > cap:
        keep = sorted(random.Random(seed).sample(range(len(out)), cap))
        out = [out[i] for i in keep]
    return out
