"""Python: the solution stays ``main.py`` and is imported as module ``main`` by the harness
(``af_harness.py``), so its ``if __name__ == "__main__":`` block does not run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from arenaforge.stages.verification.harness.cases import CallCase
from arenaforge.stages.verification.harness.targets.base import (
    ANY,
    BOOL,
    CALL_RAISED,
    CALL_START,
    CALL_VALUE,
    CALLS_FD,
    DICT,
    FLOAT,
    INT,
    LIST,
    OPTIONAL,
    STR,
    TUPLE,
    Target,
    dict_key,
)
from arenaforge.stages.verification.harness.types import Signature, Type

_HARNESS = '''import json as _json
import os as _os
import sys as _sys

_sys.path.insert(0, _os.getcwd())
_NONCE, _FIRST = _sys.argv[1], int(_sys.argv[2])


def _line(text):
    _os.write({fd}, (text.replace("\\n", " ") + "\\n").encode("utf-8", "replace"))


import main as _solution  # noqa: E402 - runs the solution (as module main, not __main__)

_f = getattr(_solution, {name!r}, None)
if _f is None and hasattr(_solution, "Solution"):  # a LeetCode-style class
    _f = getattr(_solution.Solution(), {name!r})
_CALLS = [
{calls}
]
for _k in range(_FIRST, len(_CALLS)):
    _line(f"{{_NONCE}} {start} {{_k}}")
    try:
        _text = _json.dumps(_CALLS[_k](), ensure_ascii=False)
    except BaseException as _e:  # noqa: BLE001 - reported as the call's exception
        _line(f"{{_NONCE}} {raised} {{_k}} {{type(_e).__name__}}: {{str(_e)[:500]}}")
        continue
    _line(f"{{_NONCE}} {value} {{_k}} {{_text}}")
'''


class PythonTarget(Target):
    language, display = "python", "Python"
    scalar_names: ClassVar[dict[str, str]] = {
        **{k: k for k in (INT, FLOAT, BOOL, STR)}, ANY: "Any"}
    containers: ClassVar[dict[str, str]] = {
        LIST: "List[{0}]", DICT: "Dict[{0}, {1}]", OPTIONAL: "Optional[{0}]",
        TUPLE: "Tuple[{items}]"}
    bools, nan, inf, int64 = ("True", "False"), "float('nan')", "float('inf')", False
    takes_any = True  # Python passes any value; its tests' values need not share one type

    def string(self, text: str) -> str:
        return repr(text)

    def literal(self, value: Any, t: Type) -> str:
        if value is None:
            return "None"
        if t.kind == ANY:  # the value as it is: each part by its own kind
            if isinstance(value, (list, tuple)):
                return "[" + ", ".join(self.literal(v, t) for v in value) + "]"
            if isinstance(value, dict):
                return "{" + ", ".join(f"{self.literal(k, t)}: {self.literal(v, t)}"
                                       for k, v in value.items()) + "}"
            kind = (BOOL if isinstance(value, bool) else INT if isinstance(value, int) else
                    FLOAT if isinstance(value, float) else STR)
            return self.scalar(value, Type(kind))
        if t.kind == OPTIONAL:
            return self.literal(value, t.args[0])
        if t.kind == LIST:
            return "[" + ", ".join(self.literal(v, t.args[0]) for v in value) + "]"
        if t.kind == TUPLE:
            items = [self.literal(v, a) for v, a in zip(value, t.args)]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if t.kind == DICT:
            return "{" + ", ".join(
                f"{self.literal(dict_key(k, t.args[0]), t.args[0])}: {self.literal(v, t.args[1])}"
                for k, v in value.items()) + "}"
        return self.scalar(value, t)

    def declaration(self, sig: Signature) -> str:
        params = ", ".join(f"{n}: {self.type_name(t)}" for n, t in sig.params)
        return f"def {sig.name}({params}) -> {self.type_name(sig.returns)}:"

    def harness(self, solution: str, sig: Signature, cases: Sequence[CallCase]
                ) -> tuple[str, str]:
        self.check_signature(sig)
        calls = "\n".join(
            f"    lambda: _f({', '.join(self.arguments(sig, case, f'case {i + 1}'))}),"
            for i, case in enumerate(cases))
        return solution, _HARNESS.format(fd=CALLS_FD, name=sig.name, calls=calls,
                                         start=CALL_START, value=CALL_VALUE, raised=CALL_RAISED)
