"""What every language target does, and the helpers they share.

A target renders a function task for one language, the way MultiPL-E's translators do: the
type names of a signature, literal values of those types, the declaration shown to a model,
and the harness that calls the solution once per test case. Where MultiPL-E's harness asserts
``candidate(args) == expected`` inside the program, ours never sees the expected value: it
writes each call's result as JSON on its own pipe (``CALLS_FD``, the line protocol of
``arenaforge.pipeline.sandbox.languages.jobs``), and the host compares (``compare``). So a
solution cannot pass by printing, exiting early or overriding equality; it has to return the
value. Lines count only with the nonce the sandbox gives each process; a solution written to
attack this harness could read it from its arguments and write lines of its own, but not the
expected values, which never enter the sandbox.

The harness runs calls ``first..n-1`` (its last two arguments are the nonce and ``first``);
an exception in a call is reported (``x``) and the next call runs; a call that crashes the
process or times out gets that verdict, and the sandbox starts the program again at the next
call.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, ClassVar

from arenaforge.pipeline.sandbox.languages.jobs import (
    CALL_RAISED,
    CALL_START,
    CALL_VALUE,
    CALLS_FD,
)
from arenaforge.stages.verification.harness.cases import CallCase
from arenaforge.stages.verification.harness.types import (
    ANY,
    BOOL,
    DICT,
    FLOAT,
    INT,
    LIST,
    OPTIONAL,
    STR,
    TUPLE,
    Signature,
    Type,
    UnsupportedType,
    check_value,
    dict_key,
)

__all__ = ["ANY", "BOOL", "CALLS_FD", "CALL_RAISED", "CALL_START", "CALL_VALUE", "C_INT_MIN",
           "C_INT_SUFFIX", "DICT", "FLOAT", "INT", "LIST", "OPTIONAL", "STR", "TUPLE", "Target",
           "c_string", "check_int64", "dict_key", "float_parts", "json_string"]

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# C and C++ write 64-bit integer literals alike (the literal 9223372036854775808 overflows)
C_INT_SUFFIX, C_INT_MIN = "LL", "(-9223372036854775807LL - 1)"


def json_string(text: str) -> str:
    """A double-quoted literal with JSON escapes (valid in JavaScript, TypeScript, Java, Go for
    text in the Basic Multilingual Plane, Rust with ``\\u{..}`` rewritten by its target)."""
    return json.dumps(text, ensure_ascii=False)


def c_string(text: str) -> str:
    """A C/C++ string literal: UTF-8 bytes, with every non-printable byte as a 3-digit octal
    escape (a hex escape would swallow the hex digits after it)."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= byte < 127 and ch != "?":  # '?': no trigraphs
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def check_int64(value: int, where: str, language: str) -> None:
    if not INT64_MIN <= value <= INT64_MAX:
        raise UnsupportedType(f"{where}: {value} does not fit the 64-bit integers of {language}")


def float_parts(value: float) -> str:
    """``repr`` of a finite float with a decimal point or exponent (``3`` -> ``3.0``)."""
    text = repr(float(value))
    return text if any(c in text for c in ".en") else text + ".0"


class Target:
    """A language target.

    A subclass names its types (``scalar_names`` and the ``containers`` templates, or its own
    ``type_name``), the words of its scalar literals (``bools``, ``nan``, ``inf``, how a 64-bit
    integer is written), and implements ``literal`` for its containers, ``declaration``,
    ``harness`` and, where the language lacks a type, ``unsupported``.
    """

    language = ""
    display = ""
    scalar_names: ClassVar[dict[str, str]] = {}
    # kind -> template: {0}, {1} the element types, {items} all of them, {items1} with a
    # trailing comma when there is one (a 1-tuple)
    containers: ClassVar[dict[str, str]] = {}
    bools = ("true", "false")
    nan = inf = ""
    int64 = True  # the language's integers are 64-bit: a larger value is UnsupportedType
    int_suffix = ""
    int_min = ""  # how -2**63 is written, where its literal would overflow
    takes_any = False  # whether a value may have no one type (``types.ANY``): Python only

    def unsupported(self, t: Type) -> str | None:
        """Why this language cannot take type ``t`` (None: it can)."""
        return None

    def check_type(self, t: Type, where: str) -> None:
        """Raise ``UnsupportedType`` when this language cannot take ``t``."""
        why = (f"has no form for values of mixed or unknown types ({t})"
               if t.kind == ANY and not self.takes_any else self.unsupported(t))
        if why:
            raise UnsupportedType(f"{where}: {self.display} {why}")
        for arg in t.args:
            self.check_type(arg, where)

    def type_name(self, t: Type) -> str:
        """The language's name of type ``t``."""
        if t.kind in self.scalar_names:
            return self.scalar_names[t.kind]
        args = [self.type_name(a) for a in t.args]
        items = ", ".join(args)
        return self.containers[t.kind].format(*args, items=items,
                                              items1=items + ("," if len(args) == 1 else ""))

    def literal(self, value: Any, t: Type) -> str:
        """``value`` as a literal of type ``t`` (containers: the subclass)."""
        return self.scalar(value, t)

    def string(self, text: str) -> str:
        """A string literal."""
        return json_string(text)

    def scalar(self, value: Any, t: Type) -> str:
        """A bool, int, float or str literal."""
        if t.kind == BOOL:
            return self.bools[0] if value else self.bools[1]
        if t.kind == INT:
            if self.int64:
                check_int64(value, "a value", self.display)
                if value == INT64_MIN and self.int_min:
                    return self.int_min
            return f"{value}{self.int_suffix}"
        if t.kind == FLOAT:
            value = float(value)
            if math.isnan(value):
                return self.nan
            if math.isinf(value):
                return self.inf if value > 0 else "-" + self.inf
            return float_parts(value)
        if t.kind == STR:
            return self.string(value)
        raise UnsupportedType(f"{self.display}: no literal for type {t}")

    def declaration(self, sig: Signature) -> str:
        """The function's declaration in this language (what a prompt shows)."""
        raise NotImplementedError

    def harness(self, solution: str, sig: Signature, cases: Sequence[CallCase]
                ) -> tuple[str, str]:
        """``(source, harness unit)`` of a program that runs every case (the unit is empty
        for languages that append the harness to the source)."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------

    def arguments(self, sig: Signature, case: CallCase, where: str) -> list[str]:
        """Each argument of ``case`` as a literal of its parameter's type."""
        if len(case.args) != len(sig.params):
            raise UnsupportedType(f"{where}: {len(case.args)} arguments for {sig.name}, which "
                                  f"takes {len(sig.params)}")
        out = []
        for i, (value, (name, t)) in enumerate(zip(case.args, sig.params)):
            arg_where = f"{where}, argument {name!r}"
            check_value(value, t, arg_where)
            out.append(self.literal(value, t))
        return out

    def check_signature(self, sig: Signature) -> None:
        if not sig.complete:
            raise UnsupportedType(f"{sig.name}: every parameter and the return need a type "
                                  "(annotate the signature or infer it from the cases)")
        for name, t in sig.params:
            self.check_type(t, f"parameter {name!r} of {sig.name}")
        self.check_type(sig.returns, f"the return of {sig.name}")
