"""Value types of language-neutral tests: parsed from a Python-style signature, or inferred from
the test values, then rendered per language (``targets``).

The supported subset, what MultiPL-E's translations cover for HumanEval/MBPP:

* scalars ``int``, ``float``, ``bool``, ``str``;
* ``list[T]`` (also ``List[T]``), ``dict[K, V]`` (``Dict``; ``K`` is ``int`` or ``str``),
  ``Optional[T]`` (also ``T | None``, ``Union[T, None]``), ``tuple[T1, ..., Tn]`` (fixed length;
  ``Tuple``), nested freely.

Anything else (``Any``, ``set``, a class, ``Union`` of two real types, ``tuple[int, ...]``, a
function returning ``None``) is an ``UnsupportedType`` naming the annotation and where it was.
Some languages take less (C has no maps; see each target).

Example::

    >>> sig = parse_signature("def f(xs: List[int], k: int = 2) -> Optional[float]: ...")
    >>> sig.name, [str(t) for _, t in sig.params], str(sig.returns)
    ('f', ['list[int]', 'int'], 'Optional[float]')
    >>> str(infer_type([[1, 2], [], [3.5]], "argument 1"))
    'list[float]'
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

INT, FLOAT, BOOL, STR = "int", "float", "bool", "str"
LIST, DICT, OPTIONAL, TUPLE = "list", "dict", "optional", "tuple"
# any value: what a dynamically typed target (Python) takes where the values mix types; a typed
# target has no form for it (``Target.takes_any``)
ANY = "any"
SCALARS = (INT, FLOAT, BOOL, STR)
_UNKNOWN_KIND = "?"  # an element type no value has shown yet (the elements of [])
SUPPORTED = ("int, float, bool, str, list[T], dict[K, V] (K int or str), Optional[T], "
             "tuple[T1, ..., Tn]")


class UnsupportedType(ValueError):
    """A signature or value outside the supported subset; the message names it and where."""


@dataclasses.dataclass(frozen=True)
class Type:
    """A value type: ``kind`` one of the scalars, ``list``, ``dict``, ``optional``, ``tuple``;
    ``args`` its element types (list: 1, dict: key and value, optional: 1, tuple: n)."""

    kind: str
    args: tuple[Type, ...] = ()

    def __str__(self) -> str:
        if self.kind in SCALARS:
            return self.kind
        if self.kind == ANY:
            return "Any"
        if self.kind == OPTIONAL:
            return f"Optional[{self.args[0]}]"
        return f"{self.kind}[{', '.join(str(a) for a in self.args)}]"


_UNKNOWN = Type(_UNKNOWN_KIND)


def scalar(kind: str) -> Type:
    return Type(kind)


def list_of(t: Type) -> Type:
    return Type(LIST, (t,))


def dict_of(k: Type, v: Type) -> Type:
    return Type(DICT, (k, v))


def optional(t: Type) -> Type:
    return t if t.kind == OPTIONAL else Type(OPTIONAL, (t,))


def tuple_of(items: Sequence[Type]) -> Type:
    return Type(TUPLE, tuple(items))


@dataclasses.dataclass(frozen=True)
class Signature:
    """A function's name, parameters (name, type or None when not annotated) and return type."""

    name: str
    params: tuple[tuple[str, Type | None], ...]
    returns: Type | None

    @property
    def complete(self) -> bool:
        return self.returns is not None and all(t is not None for _, t in self.params)


# -- parsing annotations ---------------------------------------------------------------------

_ALIASES = {"List": LIST, "list": LIST, "Dict": DICT, "dict": DICT, "Tuple": TUPLE,
            "tuple": TUPLE, "Optional": OPTIONAL, "Union": "union"}


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id in ("typing", "t"):
        return node.attr
    return None


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None or _name(node) == "None"


def _from_ast(node: ast.expr, text: str, where: str) -> Type:
    def unsupported(detail: str = "") -> UnsupportedType:
        return UnsupportedType(f"unsupported type {text!r} in {where}{detail}; supported: "
                               f"{SUPPORTED}")

    name = _name(node)
    if name in SCALARS:
        return Type(name)
    if name == "Any":
        return Type(ANY)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        sides = [node.left, node.right]
        real = [s for s in sides if not _is_none(s)]
        if len(real) == 1:
            return optional(_from_ast(real[0], text, where))
        raise unsupported(" (a union of two types)")
    if not isinstance(node, ast.Subscript):
        raise unsupported()
    head = _ALIASES.get(_name(node.value) or "")
    items = list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]
    if head == LIST and len(items) == 1:
        return list_of(_from_ast(items[0], text, where))
    if head == DICT and len(items) == 2:
        key = _from_ast(items[0], text, where)
        if key.kind not in (INT, STR):
            raise unsupported(" (dict keys must be int or str)")
        return dict_of(key, _from_ast(items[1], text, where))
    if head == OPTIONAL and len(items) == 1:
        return optional(_from_ast(items[0], text, where))
    if head == "union":
        real = [i for i in items if not _is_none(i)]
        if len(real) == 1 and len(items) == 2:
            return optional(_from_ast(real[0], text, where))
        raise unsupported(" (a union of two types)")
    if head == TUPLE and items and not any(isinstance(i, ast.Constant) and i.value is Ellipsis
                                           for i in items):
        return tuple_of([_from_ast(i, text, where) for i in items])
    raise unsupported()


def parse_type(text: str, where: str = "a type") -> Type:
    """A ``Type`` from a Python annotation (``List[int]``, ``dict[str, float]``...).

    Raises:
        UnsupportedType: The annotation is outside the subset, or does not parse.
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise UnsupportedType(f"type {text!r} in {where} does not parse: {exc.msg}") from exc
    return _from_ast(node, text.strip(), where)


def parse_signature(text: str) -> Signature:
    """The signature of the first function defined in ``text`` (a whole function or its
    ``def`` line alone).

    Raises:
        UnsupportedType: No function, ``*args``/``**kwargs``/keyword-only parameters, a
            ``-> None`` return, or an annotation outside the subset.
    """
    source = text.strip()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        try:
            tree = ast.parse(source.rstrip(":") + ":\n    pass")
        except SyntaxError as exc:
            raise UnsupportedType(f"the signature does not parse: {exc.msg}") from exc
    func = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), None)
    if func is None:
        raise UnsupportedType("no function definition (`def name(...)`) in the signature")
    args = func.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise UnsupportedType(f"{func.name}: only plain positional parameters are supported")
    params = []
    for i, arg in enumerate(args.args):
        if i == 0 and arg.arg in ("self", "cls"):
            continue
        where = f"parameter {arg.arg!r} of {func.name}"
        ann = arg.annotation
        params.append((arg.arg, None if ann is None else
                       _from_ast(ann, ast.unparse(ann), where)))
    returns = None
    if func.returns is not None:
        if _is_none(func.returns):
            raise UnsupportedType(f"{func.name} returns None: a tested function must return "
                                  "its result")
        returns = _from_ast(func.returns, ast.unparse(func.returns), f"the return of {func.name}")
    return Signature(func.name, tuple(params), returns)


# -- inference and checks --------------------------------------------------------------------

def _join(a: Type | None, b: Type | None, where: str) -> Type | None:
    """The least type holding values of both (``None``: nothing known yet)."""
    if a is None or a == b:
        return b if a is None else a
    if b is None:
        return a
    if a.kind == OPTIONAL or b.kind == OPTIONAL:
        inner_a = a.args[0] if a.kind == OPTIONAL else a
        inner_b = b.args[0] if b.kind == OPTIONAL else b
        return optional(_join(inner_a, inner_b, where))
    if {a.kind, b.kind} == {INT, FLOAT}:
        return Type(FLOAT)
    if a.kind == b.kind == LIST:
        return list_of(_join(a.args[0], b.args[0], where))
    if a.kind == b.kind == DICT:
        return dict_of(_join(a.args[0], b.args[0], where), _join(a.args[1], b.args[1], where))
    raise UnsupportedType(f"{where}: values of types {a} and {b} mixed; one type is needed "
                          "(annotate the signature)")


def _shape(value: Any, where: str) -> Type | None:
    """The type of one value; None for ``None``; element types may be partly unknown."""
    if value is None:
        return None
    if isinstance(value, bool):
        return Type(BOOL)
    if isinstance(value, int):
        return Type(INT)
    if isinstance(value, float):
        return Type(FLOAT)
    if isinstance(value, str):
        return Type(STR)
    if isinstance(value, (list, tuple)):
        return list_of(_element(value, where))
    if isinstance(value, dict):
        key = None
        for k in value:
            key = _merge_unknown(key, _shape(k, where), where)
        if key is not None and key.kind not in (INT, STR):
            raise UnsupportedType(f"{where}: dict keys must be int or str, got {key}")
        return dict_of(key or _UNKNOWN, _element(value.values(), where))
    raise UnsupportedType(f"{where}: value of type {type(value).__name__} is not supported "
                          f"({SUPPORTED})")


def _element(items: Iterable[Any], where: str) -> Type:
    """The element type of a container's items (``?`` when it has none, Optional with None)."""
    elem: Type | None = None
    has_none = False
    for item in items:
        t = _shape(item, where)
        has_none |= t is None
        elem = _merge_unknown(elem, t, where) if t is not None else elem
    elem = elem or _UNKNOWN
    return optional(elem) if has_none else elem


def _merge_unknown(a: Type | None, b: Type | None, where: str) -> Type | None:
    """``_join`` where ``?`` (an unknown element type) gives way to anything."""
    if a is None or b is None:
        return a or b
    if a.kind == _UNKNOWN_KIND:
        return b
    if b.kind == _UNKNOWN_KIND:
        return a
    if a.kind == OPTIONAL or b.kind == OPTIONAL:
        ia = a.args[0] if a.kind == OPTIONAL else a
        ib = b.args[0] if b.kind == OPTIONAL else b
        return optional(_merge_unknown(ia, ib, where))
    if a.kind == b.kind and a.kind in (LIST, DICT):
        return Type(a.kind, tuple(_merge_unknown(x, y, where) for x, y in zip(a.args, b.args)))
    return _join(a, b, where)


def _has_unknown(t: Type) -> bool:
    return t.kind == _UNKNOWN_KIND or any(_has_unknown(a) for a in t.args)


def infer_type(values: Iterable[Any], where: str, *, loose: bool = False) -> Type:
    """The type of a parameter (or the return) from its values in every test case.

    ``loose`` (a target that takes ``Any``): values that no one type holds, or that say no
    type, are ``Any`` instead of an error.

    >>> str(infer_type([1, "a"], "x", loose=True)), str(infer_type([[]], "x", loose=True))
    ('Any', 'Any')

    Raises:
        UnsupportedType: No value says it (only ``None``, or only empty lists), or values of
            incompatible types (``1`` and ``"a"``); never with ``loose``.
    """
    if loose:
        try:
            return infer_type(values, where)
        except UnsupportedType:
            return Type(ANY)
    found: Type | None = None
    has_none = False
    for value in values:
        t = _shape(value, where)
        has_none |= t is None
        found = _merge_unknown(found, t, where) if t is not None else found
    if found is None or _has_unknown(found):
        raise UnsupportedType(f"{where}: cannot infer a type from the test values "
                              f"(only None or empty containers); annotate the signature")
    return optional(found) if has_none else found


def check_value(value: Any, t: Type, where: str) -> None:
    """Raise ``UnsupportedType`` unless ``value`` is a value of ``t`` (an int is a float)."""
    ok = True
    if t.kind == ANY:
        return
    if t.kind == OPTIONAL:
        if value is not None:
            check_value(value, t.args[0], where)
        return
    if value is None:
        ok = False
    elif t.kind == BOOL:
        ok = isinstance(value, bool)
    elif t.kind == INT:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif t.kind == FLOAT:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif t.kind == STR:
        ok = isinstance(value, str)
    elif t.kind == LIST:
        ok = isinstance(value, (list, tuple))
        for i, item in enumerate(value if ok else ()):
            check_value(item, t.args[0], f"{where}[{i}]")
    elif t.kind == TUPLE:
        ok = isinstance(value, (list, tuple)) and len(value) == len(t.args)
        for i, (item, sub) in enumerate(zip(value if ok else (), t.args)):
            check_value(item, sub, f"{where}[{i}]")
    elif t.kind == DICT:
        ok = isinstance(value, dict)
        for k, v in (value.items() if ok else ()):
            check_value(dict_key(k, t.args[0]), t.args[0], f"{where} key {k!r}")
            check_value(v, t.args[1], f"{where}[{k!r}]")
    if not ok:
        raise UnsupportedType(f"{where}: {value!r} is not a value of type {t}")


def dict_key(key: Any, t: Type) -> Any:
    """A key as its type wants it (JSON objects make every key a string: "3" is int 3)."""
    if t.kind == INT and isinstance(key, str):
        try:
            return int(key)
        except ValueError:
            return key
    return key
