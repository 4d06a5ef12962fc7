"""C (gcc, GNU C17): one file, laid out as for C++ (``cpp``). C has no containers, so the subset
is smaller: ``int`` (``long long``), ``float`` (``double``), ``bool``, ``str`` (``const char*``;
a returned NULL is None) for parameters and returns, and lists of those scalars as parameters
only, each passed as a pointer and a length (``const long long* xs, int xs_len``). Dicts,
optionals, tuples, nested lists and returned lists are ``UnsupportedType``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from arenaforge.stages.verification.harness.cases import CallCase
from arenaforge.stages.verification.harness.targets.base import (
    BOOL,
    C_INT_MIN,
    C_INT_SUFFIX,
    CALL_RAISED,
    CALL_START,
    CALL_VALUE,
    CALLS_FD,
    FLOAT,
    INT,
    LIST,
    STR,
    Target,
    c_string,
)
from arenaforge.stages.verification.harness.types import Signature, Type

_ = CALL_RAISED  # C has no exceptions: a failing call crashes its process
_PRELUDE = ("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n#include <stdbool.h>\n"
            "#include <math.h>\n#include <stdint.h>\n#include <limits.h>\n"
            "#define main af_solution_main\n#line 1 \"main.c\"\n")
_HARNESS = r'''
#undef main
#line 1 "af_harness.c"
static FILE* af_out;
static void af_str(const char* s) {
  if (!s) { fputs("null", af_out); return; }
  fputc('"', af_out);
  for (const unsigned char* p = (const unsigned char*)s; *p; p++) {
    if (*p == '"' || *p == '\\') { fputc('\\', af_out); fputc(*p, af_out); }
    else if (*p < 0x20) fprintf(af_out, "\\u%04x", *p);
    else fputc(*p, af_out);
  }
  fputc('"', af_out);
}
static void af_float(double v) {
  if (isnan(v)) fputs("NaN", af_out);
  else if (isinf(v)) fputs(v > 0 ? "Infinity" : "-Infinity", af_out);
  else fprintf(af_out, "%.17g", v);
}
static void af_int(long long v) { fprintf(af_out, "%lld", v); }
static void af_bool(bool v) { fputs(v ? "true" : "false", af_out); }
int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const char* nonce = argv[1];
  int first = atoi(argv[2]);
  af_out = fdopen(@FD@, "w");
  if (!af_out) return 2;
  for (int k = first; k < @N@; k++) {
    fprintf(af_out, "%s @START@ %d\n", nonce, k);
    fflush(af_out);
    switch (k) {
@CASES@
    }
    fputc('\n', af_out);
    fflush(af_out);
  }
  return 0;
}
'''
_WRITER = {INT: "af_int", FLOAT: "af_float", BOOL: "af_bool", STR: "af_str"}


class CTarget(Target):
    language, display = "c", "C"

    def unsupported(self, t: Type) -> str | None:
        if t.kind in _WRITER or t.kind == LIST and t.args[0].kind in _WRITER:
            return None
        return (f"has no form for {t}: C takes int, float, bool, str, and lists of those as "
                "parameters (a pointer and a length)")

    def check_signature(self, sig: Signature) -> None:
        super().check_signature(sig)
        if sig.returns.kind == LIST:
            raise self._no_list_return(sig)

    def _no_list_return(self, sig: Signature):
        from arenaforge.stages.verification.harness.types import UnsupportedType

        return UnsupportedType(f"the return of {sig.name}: C cannot return a list (a pointer "
                               "without its length); use another language for this task")

    scalar_names: ClassVar[dict[str, str]] = {
        INT: "long long", FLOAT: "double", BOOL: "bool", STR: "const char*"}
    containers: ClassVar[dict[str, str]] = {
        LIST: "const {0}*"}
    nan, inf = "NAN", "INFINITY"
    int_suffix, int_min = C_INT_SUFFIX, C_INT_MIN

    def string(self, text: str) -> str:
        return c_string(text)

    def literal(self, value: Any, t: Type) -> str:
        if t.kind != LIST:
            return self.scalar(value, t)
        elem = t.args[0]
        if not value:
            return "NULL, 0"
        items = ", ".join(self.literal(v, elem) for v in value)
        base = "const char*" if elem.kind == STR else self.type_name(elem)
        return f"({base}[]){{{items}}}, {len(value)}"

    def declaration(self, sig: Signature) -> str:
        params = []
        for name, t in sig.params:
            if t.kind == LIST:
                params += [f"{self.type_name(t)} {name}", f"int {name}_len"]
            else:
                params.append(f"{self.type_name(t)} {name}")
        ret = "char*" if sig.returns.kind == STR else self.type_name(sig.returns)
        return f"{ret} {sig.name}({', '.join(params)})"

    def harness(self, solution: str, sig: Signature, cases: Sequence[CallCase]
                ) -> tuple[str, str]:
        self.check_signature(sig)
        ret = self.type_name(sig.returns)
        writer = _WRITER[sig.returns.kind]
        blocks = []
        for i, case in enumerate(cases):
            args = ", ".join(self.arguments(sig, case, f"case {i + 1}"))
            blocks.append(f"    case {i}: {{ {ret} af_r = {sig.name}({args}); "
                          f"fprintf(af_out, \"%s {CALL_VALUE} %d \", nonce, k); {writer}(af_r); "
                          "break; }")
        harness = (_HARNESS.replace("@FD@", str(CALLS_FD)).replace("@N@", str(len(cases)))
                   .replace("@CASES@", "\n".join(blocks)).replace("@START@", CALL_START))
        return _PRELUDE + solution + "\n" + harness, ""
