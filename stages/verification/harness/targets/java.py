"""Java (OpenJDK 17): one file, the solution then a class ``AfHarness`` with the ``main`` that
runs. Types follow MultiPL-E: ``int`` is ``long``, ``float`` ``double``, lists ``List<Long>``
(``java.util``), dicts ``Map<K, V>``, ``Optional<T>``; tuples are ``UnsupportedType``. The
function is a method of the solution's class (static, or on a fresh instance, as declared);
a solution without a class declaring it is wrapped in ``class Solution``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from arenaforge.stages.verification.harness.cases import CallCase
from arenaforge.stages.verification.harness.targets.base import (
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

_HARNESS = r'''
class AfHarness {
  static String str(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') b.append('\\').append(c);
      else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
      else b.append(c);
    }
    return b.append('"').toString();
  }
  static String json(Object v) {
    if (v == null) return "null";
    if (v instanceof Boolean) return v.toString();
    if (v instanceof Double || v instanceof Float) {
      double d = ((Number) v).doubleValue();
      if (Double.isNaN(d)) return "NaN";
      if (Double.isInfinite(d)) return d > 0 ? "Infinity" : "-Infinity";
      return Double.toString(d);
    }
    if (v instanceof Number) return v.toString();
    if (v instanceof Character || v instanceof CharSequence) return str(v.toString());
    if (v instanceof java.util.Optional) {
      java.util.Optional<?> o = (java.util.Optional<?>) v;
      return o.isPresent() ? json(o.get()) : "null";
    }
    StringBuilder b = new StringBuilder();
    if (v instanceof java.util.Map) {
      b.append('{');
      for (java.util.Map.Entry<?, ?> e : ((java.util.Map<?, ?>) v).entrySet()) {
        if (b.length() > 1) b.append(',');
        b.append(str(String.valueOf(e.getKey()))).append(':').append(json(e.getValue()));
      }
      return b.append('}').toString();
    }
    b.append('[');
    if (v instanceof Iterable) {
      for (Object x : (Iterable<?>) v) { if (b.length() > 1) b.append(','); b.append(json(x)); }
    } else if (v.getClass().isArray()) {
      for (int i = 0; i < java.lang.reflect.Array.getLength(v); i++) {
        if (i > 0) b.append(',');
        b.append(json(java.lang.reflect.Array.get(v, i)));
      }
    } else {
      throw new IllegalArgumentException("unsupported value of type " + v.getClass().getName());
    }
    return b.append(']').toString();
  }
  public static void main(String[] args) throws Exception {
    String nonce = args[0];
    int first = Integer.parseInt(args[1]);
    java.io.PrintStream out = new java.io.PrintStream(
        new java.io.FileOutputStream("/proc/self/fd/@FD@"), true, "UTF-8");
    java.util.List<java.util.concurrent.Callable<Object>> calls = new java.util.ArrayList<>();
@CALLS@
    for (int k = first; k < calls.size(); k++) {
      out.println(nonce + " @START@ " + k);
      String text;
      try {
        text = json(calls.get(k).call());
      } catch (Throwable e) {
        out.println(nonce + " @RAISED@ " + k + " " + (e.getClass().getName() + ": "
            + e.getMessage()).replace('\n', ' '));
        continue;
      }
      out.println(nonce + " @VALUE@ " + k + " " + text);
    }
    out.flush();
    System.exit(0);
  }
}
'''
_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)
_CLASS = re.compile(r"\b(?:class|record|enum)\s+([A-Za-z_$][\w$]*)")
_IMPORTS = re.compile(r"\A(?:\s*(?:package|import)\s[^;]*;[^\n]*\n?|\s*(?://[^\n]*)?\n)*")


def find_method(source: str, name: str) -> tuple[str | None, bool]:
    """(the top-level class declaring method ``name``, whether it is static); the class is
    None when no class declares it (a bare method: the solution is then wrapped)."""
    text = _NOISE.sub(lambda m: " " * len(m.group()), source)
    depth, current, bare = 0, None, None
    decl = re.compile(rf"\b{re.escape(name)}\s*\(")
    pos = 0
    tokens = sorted([(m.start(), "class", m.group(1)) for m in _CLASS.finditer(text)]
                    + [(m.start(), "decl", "") for m in decl.finditer(text)])
    for at, kind, cls in tokens:
        depth += text.count("{", pos, at) - text.count("}", pos, at)
        pos = at
        if kind == "class" and depth == 0:
            current = cls
            continue
        head = text[max(text.rfind(c, 0, at) for c in ";{}") + 1:at]
        if kind != "decl" or "=" in head or "return" in head or not head.strip():
            continue  # a call, a field's initialiser: not the declaration
        static = bool(re.search(r"\bstatic\b", head))
        if depth == 1 and current is not None:
            return current, static
        if depth == 0 and bare is None:
            bare = static
    return None, bool(bare)


class JavaTarget(Target):
    language, display = "java", "Java"
    nan, inf, int_suffix, int_min = "Double.NaN", "Double.POSITIVE_INFINITY", "L", "Long.MIN_VALUE"

    def unsupported(self, t: Type) -> str | None:
        return "has no tuple type here (return a List)" if t.kind == TUPLE else None

    def _boxed(self, t: Type, qualified: bool) -> str:
        util = "java.util." if qualified else ""
        if t.kind == INT:
            return "Long"
        if t.kind == FLOAT:
            return "Double"
        if t.kind == BOOL:
            return "Boolean"
        if t.kind == STR:
            return "String"
        if t.kind == LIST:
            return f"{util}List<{self._boxed(t.args[0], qualified)}>"
        if t.kind == DICT:
            return (f"{util}Map<{self._boxed(t.args[0], qualified)}, "
                    f"{self._boxed(t.args[1], qualified)}>")
        return f"{util}Optional<{self._boxed(t.args[0], qualified)}>"

    def type_name(self, t: Type) -> str:
        return {INT: "long", FLOAT: "double", BOOL: "boolean"}.get(t.kind) or \
            self._boxed(t, qualified=False)

    def literal(self, value: Any, t: Type) -> str:
        if t.kind == OPTIONAL:
            inner = self._boxed(t.args[0], True)
            if value is None:
                return f"java.util.Optional.<{inner}>empty()"
            return f"java.util.Optional.<{inner}>of({self.literal(value, t.args[0])})"
        if t.kind in (BOOL, INT, FLOAT, STR):
            return self.scalar(value, t)
        if t.kind == LIST:
            elem = self._boxed(t.args[0], True)
            items = ", ".join(self.literal(v, t.args[0]) for v in value)
            return (f"new java.util.ArrayList<{elem}>(java.util.Arrays.<{elem}>asList({items}))"
                    if value else f"new java.util.ArrayList<{elem}>()")
        key, val = self._boxed(t.args[0], True), self._boxed(t.args[1], True)
        entries = ", ".join(
            f"java.util.Map.entry({self.literal(dict_key(k, t.args[0]), t.args[0])}, "
            f"{self.literal(v, t.args[1])})" for k, v in value.items())
        return (f"new java.util.HashMap<{key}, {val}>(java.util.Map.<{key}, {val}>ofEntries("
                f"{entries}))" if value else f"new java.util.HashMap<{key}, {val}>()")

    def declaration(self, sig: Signature) -> str:
        params = ", ".join(f"{self.type_name(t)} {n}" for n, t in sig.params)
        return f"public static {self.type_name(sig.returns)} {sig.name}({params})"

    def harness(self, solution: str, sig: Signature, cases: Sequence[CallCase]
                ) -> tuple[str, str]:
        self.check_signature(sig)
        cls, static = find_method(solution, sig.name)
        if cls is None:  # a bare method: into a class of its own, imports left above it
            head = _IMPORTS.match(solution).group()
            cls, solution = "Solution", (head.rstrip("\n") + " class Solution { "
                                         + solution[len(head.rstrip("\n")):] + "\n}")
        target = cls if static else f"new {cls}()"
        calls = "\n".join(
            f"    calls.add(() -> {target}.{sig.name}("
            f"{', '.join(self.arguments(sig, case, f'case {i + 1}'))}));"
            for i, case in enumerate(cases))
        harness = (_HARNESS.replace("@FD@", str(CALLS_FD)).replace("@CALLS@", calls)
                   .replace("@START@", CALL_START).replace("@VALUE@", CALL_VALUE)
                   .replace("@RAISED@", CALL_RAISED))
        return solution + "\n" + harness, ""
