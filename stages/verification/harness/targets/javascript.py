"""JavaScript and TypeScript (Node.js): one file, the solution wrapped in a function that gets a
``module`` of its own, so a ``require.main === module`` block does not run; ``None`` is
``undefined`` (as in MultiPL-E), dicts are plain objects. Numbers are doubles: an integer
beyond 2**53 is not exact (a test that needs one is for another language). TypeScript
type-checks the calls against the solution's own signature (what ``tsc`` rejects is a compile
error)."""

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
    json_string,
)
from arenaforge.stages.verification.harness.types import Signature, Type

# eval("require"): TypeScript then needs no declaration of Node's globals (they are any).
_HARNESS = '''
;(function () {{
  const req = eval("require"), proc = eval("process");
  const fs = req("fs");
  const nonce = proc.argv[2], first = Number(proc.argv[3]);
  const calls = eval("globalThis").__af_calls;
  const line = (s{a}) => {{ fs.writeSync({fd}, s.replace(/\\n/g, " ") + "\\n"); }};
  const enc = (v{a}){r} => {{
    if (v === null || v === undefined) return "null";
    if (typeof v === "number") {{
      if (Number.isFinite(v)) return JSON.stringify(v);
      return Number.isNaN(v) ? "NaN" : (v > 0 ? "Infinity" : "-Infinity");
    }}
    if (typeof v === "bigint") return v.toString();
    if (typeof v === "boolean" || typeof v === "string") return JSON.stringify(v);
    if (Array.isArray(v)) return "[" + v.map(enc).join(",") + "]";
    if (v instanceof Map) {{
      return "{{" + Array.from(v.entries()).map((e{a}) => JSON.stringify(String(e[0])) + ":" +
        enc(e[1])).join(",") + "}}";
    }}
    if (Object.getPrototypeOf(v) === Object.prototype) {{
      return "{{" + Object.keys(v).map((k) => JSON.stringify(k) + ":" + enc(v[k])).join(",") + "}}";
    }}
    throw new TypeError("unsupported value of type " + ((v.constructor && v.constructor.name) ||
      typeof v));
  }};
  for (let k = first; k < calls.length; k++) {{
    line(nonce + " {start} " + k);
    let text{a};
    try {{
      text = enc(calls[k]());
    }} catch (e{a}) {{
      line(nonce + " {raised} " + k + " " + String(e && e.name ? e.name + ": " + e.message : e).slice(0, 500));
      continue;
    }}
    line(nonce + " {value} " + k + " " + text);
  }}
}})();
'''
_IMPORT = re.compile(r"^\s*import\s[^\n]*$", re.MULTILINE)
_EXPORT = re.compile(r"^(\s*)export\s+(?:default\s+)?"
                     r"(?=(?:async\s+)?function\b|const\b|let\b|var\b|class\b)", re.MULTILINE)


class JavaScriptTarget(Target):
    language, display = "javascript", "JavaScript"
    typed = False

    def type_name(self, t: Type) -> str:
        if t.kind in (INT, FLOAT):
            return "number"
        if t.kind == BOOL:
            return "boolean"
        if t.kind == STR:
            return "string"
        if t.kind == LIST:
            inner = self.type_name(t.args[0])
            return f"({inner})[]" if " " in inner else f"{inner}[]"
        if t.kind == DICT:
            key = "number" if t.args[0].kind == INT else "string"
            return f"{{[key: {key}]: {self.type_name(t.args[1])}}}"
        if t.kind == OPTIONAL:
            return f"{self.type_name(t.args[0])} | undefined"
        return "[" + ", ".join(self.type_name(a) for a in t.args) + "]"  # tuple

    nan, inf, int64 = "NaN", "Infinity", False

    def literal(self, value: Any, t: Type) -> str:
        if value is None:
            return "undefined"
        if t.kind == OPTIONAL:
            return self.literal(value, t.args[0])
        if t.kind in (BOOL, INT, FLOAT, STR):
            return self.scalar(value, t)
        if t.kind in (LIST, TUPLE):
            types = t.args * len(value) if t.kind == LIST else t.args
            return "[" + ", ".join(self.literal(v, a) for v, a in zip(value, types)) + "]"
        # dict: int keys as numbers (computed when negative), others as strings
        items = []
        for k, v in value.items():
            k = dict_key(k, t.args[0])
            key = (f"[{k}]" if k < 0 else str(k)) if t.args[0].kind == INT else json_string(k)
            items.append(f"{key}: {self.literal(v, t.args[1])}")
        return "{" + ", ".join(items) + "}"

    def declaration(self, sig: Signature) -> str:
        if not self.typed:
            return f"function {sig.name}({', '.join(n for n, _ in sig.params)}) {{"
        params = ", ".join(f"{n}: {self.type_name(t)}" for n, t in sig.params)
        return f"function {sig.name}({params}): {self.type_name(sig.returns)} {{"

    def harness(self, solution: str, sig: Signature, cases: Sequence[CallCase]
                ) -> tuple[str, str]:
        self.check_signature(sig)
        lines = solution.split("\n")
        if lines and lines[0].startswith("#!"):
            lines[0] = ""  # a shebang is only valid on a file's first line
        body = "\n".join(lines)
        imports = [m.group().strip() for m in _IMPORT.finditer(body)]
        # imports cannot stay inside the wrapper: moved above it, the line left blank
        body = _IMPORT.sub("", body)
        if self.typed:
            body = _EXPORT.sub(r"\1", body)
        calls = ",\n".join(
            f"  () => {sig.name}({', '.join(self.arguments(sig, case, f'case {i + 1}'))})"
            for i, case in enumerate(cases))
        a = ": any" if self.typed else ""
        head = " ".join(imports)  # on the first line: the solution's line numbers stay its own
        opener = f"(function (require{a}, module{a}, exports{a}) {{"
        source = (f"{head} {opener}{body}\n;eval(\"globalThis\").__af_calls = [\n{calls}\n];\n"
                  "})(eval(\"require\"), { exports: {} }, {});\n"
                  + _HARNESS.format(a=a, r=": string" if self.typed else "", fd=CALLS_FD,
                                    start=CALL_START, value=CALL_VALUE, raised=CALL_RAISED))
        return source, ""


class TypeScriptTarget(JavaScriptTarget):
    language, display = "typescript", "TypeScript"
    typed = True
