"""Go: two files of ``package main``, the solution (``main.go``) and the harness
(``af_harness.go``, with its own imports: Go refuses unused ones, so neither file's imports can
be merged into the other). A solution's own ``func main`` is renamed; a missing ``package``
clause is added on its first line. ``int`` is Go's ``int`` (64-bit), ``float`` ``float64``,
lists slices, dicts maps, ``Optional[T]`` a pointer ``*T``; tuples are ``UnsupportedType``.
Results are written as JSON by reflection; a panic in a call is caught (``recover``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar

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

_HARNESS = r'''package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
)

func afPtr[T any](v T) *T { return &v }

func afJSON(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Invalid:
		return "null"
	case reflect.Ptr, reflect.Interface:
		if v.IsNil() {
			return "null"
		}
		return afJSON(v.Elem())
	case reflect.Bool:
		if v.Bool() {
			return "true"
		}
		return "false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) {
			return "NaN"
		}
		if math.IsInf(f, 0) {
			if f > 0 {
				return "Infinity"
			}
			return "-Infinity"
		}
		return strconv.FormatFloat(f, 'g', -1, 64)
	case reflect.String:
		b, _ := json.Marshal(v.String())
		return string(b)
	case reflect.Slice, reflect.Array:
		parts := make([]string, v.Len())
		for i := range parts {
			parts[i] = afJSON(v.Index(i))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case reflect.Map:
		parts := []string{}
		iter := v.MapRange()
		for iter.Next() {
			k, _ := json.Marshal(fmt.Sprint(iter.Key().Interface()))
			parts = append(parts, string(k)+":"+afJSON(iter.Value()))
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	panic("unsupported value of kind " + v.Kind().String())
}

func afCall(f func() interface{}) (text string, raised string) {
	defer func() {
		if r := recover(); r != nil {
			raised = strings.ReplaceAll(fmt.Sprint(r), "\n", " ")
		}
	}()
	return afJSON(reflect.ValueOf(f())), ""
}

func main() {
	nonce := os.Args[1]
	first, _ := strconv.Atoi(os.Args[2])
	out := os.NewFile(@FD@, "calls")
	calls := []func() interface{}{
@CALLS@
	}
	for k := first; k < len(calls); k++ {
		fmt.Fprintf(out, "%s @START@ %d\n", nonce, k)
		text, raised := afCall(calls[k])
		if raised != "" {
			fmt.Fprintf(out, "%s @RAISED@ %d panic: %s\n", nonce, k, raised)
			continue
		}
		fmt.Fprintf(out, "%s @VALUE@ %d %s\n", nonce, k, text)
	}
}
'''
_PACKAGE = re.compile(r"^(\s*)package\s+\w+", re.MULTILINE)
_MAIN = re.compile(r"^func\s+main\s*\(\s*\)", re.MULTILINE)


class GoTarget(Target):
    language, display = "go", "Go"

    def unsupported(self, t: Type) -> str | None:
        return "has no tuple type here (return a slice)" if t.kind == TUPLE else None

    scalar_names: ClassVar[dict[str, str]] = {
        INT: "int", FLOAT: "float64", BOOL: "bool", STR: "string"}
    containers: ClassVar[dict[str, str]] = {
        LIST: "[]{0}", DICT: "map[{0}]{1}", OPTIONAL: "*{0}"}
    nan, inf = "math.NaN()", "math.Inf(1)"

    def literal(self, value: Any, t: Type) -> str:
        if t.kind == OPTIONAL:
            if value is None:
                return "nil"
            return f"afPtr[{self.type_name(t.args[0])}]({self.literal(value, t.args[0])})"
        if t.kind in self.scalar_names:
            return self.scalar(value, t)
        if t.kind == LIST:
            items = ", ".join(self.literal(v, t.args[0]) for v in value)
            return f"{self.type_name(t)}{{{items}}}"
        items = ", ".join(f"{self.literal(dict_key(k, t.args[0]), t.args[0])}: "
                          f"{self.literal(v, t.args[1])}" for k, v in value.items())
        return f"{self.type_name(t)}{{{items}}}"

    def declaration(self, sig: Signature) -> str:
        params = ", ".join(f"{n} {self.type_name(t)}" for n, t in sig.params)
        return f"func {sig.name}({params}) {self.type_name(sig.returns)}"

    def harness(self, solution: str, sig: Signature, cases: Sequence[CallCase]
                ) -> tuple[str, str]:
        self.check_signature(sig)
        if _PACKAGE.search(solution):
            solution = _PACKAGE.sub(r"\1package main", solution, count=1)
        else:  # on the first line: the solution's line numbers stay its own
            solution = "package main; " + solution
        solution = _MAIN.sub("func af_solution_main()", solution)
        calls = "\n".join(
            f"\t\tfunc() interface{{}} {{ return {sig.name}("
            f"{', '.join(self.arguments(sig, case, f'case {i + 1}'))}) }},"
            for i, case in enumerate(cases))
        harness = (_HARNESS.replace("@FD@", str(CALLS_FD)).replace("@CALLS@", calls)
                   .replace("@START@", CALL_START).replace("@VALUE@", CALL_VALUE)
                   .replace("@RAISED@", CALL_RAISED))
        return solution, harness
