"""Rust (rustc, edition 2021): one file, the solution (its own ``fn main`` renamed) then the
harness. Types follow MultiPL-E: ``i64``, ``f64``, ``bool``, ``String`` (owned, for parameters
too), ``Vec<T>``, ``HashMap<K, V>``, ``Option<T>``, tuples. Results are written as JSON through
a trait implemented for the standard types; a panic in a call is caught (``catch_unwind``)."""

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

_HARNESS = r'''
#[allow(dead_code)]
mod af {
    use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
    pub fn str(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }
    pub trait Json { fn json(&self) -> String; }
    macro_rules! ints { ($($t:ty),*) => { $(impl Json for $t { fn json(&self) -> String { self.to_string() } })* } }
    ints!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);
    impl Json for f64 {
        fn json(&self) -> String {
            if self.is_nan() { "NaN".into() }
            else if self.is_infinite() { if *self > 0.0 { "Infinity".into() } else { "-Infinity".into() } }
            else { format!("{:?}", self) }
        }
    }
    impl Json for f32 { fn json(&self) -> String { (*self as f64).json() } }
    impl Json for bool { fn json(&self) -> String { self.to_string() } }
    impl Json for char { fn json(&self) -> String { str(&self.to_string()) } }
    impl Json for str { fn json(&self) -> String { str(self) } }
    impl Json for String { fn json(&self) -> String { str(self) } }
    impl<T: Json + ?Sized> Json for &T { fn json(&self) -> String { (**self).json() } }
    impl<T: Json + ?Sized> Json for Box<T> { fn json(&self) -> String { (**self).json() } }
    impl<T: Json> Json for Option<T> {
        fn json(&self) -> String { match self { Some(v) => v.json(), None => "null".into() } }
    }
    fn list<'a, T: Json + 'a>(items: impl Iterator<Item = &'a T>) -> String {
        format!("[{}]", items.map(|x| x.json()).collect::<Vec<_>>().join(","))
    }
    impl<T: Json> Json for [T] { fn json(&self) -> String { list(self.iter()) } }
    impl<T: Json, const N: usize> Json for [T; N] { fn json(&self) -> String { list(self.iter()) } }
    impl<T: Json> Json for Vec<T> { fn json(&self) -> String { list(self.iter()) } }
    impl<T: Json> Json for VecDeque<T> { fn json(&self) -> String { list(self.iter()) } }
    impl<T: Json> Json for HashSet<T> { fn json(&self) -> String { list(self.iter()) } }
    fn map<'a, K: std::fmt::Display + 'a, V: Json + 'a>(items: impl Iterator<Item = (&'a K, &'a V)>) -> String {
        format!("{{{}}}", items.map(|(k, v)| format!("{}:{}", str(&k.to_string()), v.json())).collect::<Vec<_>>().join(","))
    }
    impl<K: std::fmt::Display, V: Json> Json for HashMap<K, V> { fn json(&self) -> String { map(self.iter()) } }
    impl<K: std::fmt::Display, V: Json> Json for BTreeMap<K, V> { fn json(&self) -> String { map(self.iter()) } }
    impl<A: Json, B: Json> Json for (A, B) { fn json(&self) -> String { format!("[{},{}]", self.0.json(), self.1.json()) } }
    impl<A: Json, B: Json, C: Json> Json for (A, B, C) {
        fn json(&self) -> String { format!("[{},{},{}]", self.0.json(), self.1.json(), self.2.json()) }
    }
    impl<A: Json, B: Json, C: Json, D: Json> Json for (A, B, C, D) {
        fn json(&self) -> String { format!("[{},{},{},{}]", self.0.json(), self.1.json(), self.2.json(), self.3.json()) }
    }
}

fn main() {
    use af::Json;
    use std::io::Write;
    use std::os::unix::io::FromRawFd;
    let args: Vec<String> = std::env::args().collect();
    let nonce = args[1].clone();
    let first: usize = args[2].parse().unwrap();
    let mut out = unsafe { std::fs::File::from_raw_fd(@FD@) };
    let calls: Vec<Box<dyn Fn() -> String>> = vec![
@CALLS@
    ];
    for k in first..calls.len() {
        writeln!(out, "{} @START@ {}", nonce, k).unwrap();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| calls[k]())) {
            Ok(text) => writeln!(out, "{} @VALUE@ {} {}", nonce, k, text).unwrap(),
            Err(e) => {
                let msg = e.downcast_ref::<&str>().map(|s| s.to_string())
                    .or_else(|| e.downcast_ref::<String>().cloned()).unwrap_or_default();
                writeln!(out, "{} @RAISED@ {} panic: {}", nonce, k, msg.replace('\n', " ")).unwrap();
            }
        }
    }
}
'''
_MAIN = re.compile(r"^(\s*)fn\s+main\s*\(\s*\)", re.MULTILINE)


def rust_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{{{ord(ch):x}}}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


class RustTarget(Target):
    language, display = "rust", "Rust"

    scalar_names: ClassVar[dict[str, str]] = {
        INT: "i64", FLOAT: "f64", BOOL: "bool", STR: "String"}
    containers: ClassVar[dict[str, str]] = {
        LIST: "Vec<{0}>", DICT: "HashMap<{0}, {1}>", OPTIONAL: "Option<{0}>",
        TUPLE: "({items1})"}
    # plain integer literals: the solution's own parameter type (i32, usize...) is inferred
    nan, inf, int_min = "f64::NAN", "f64::INFINITY", "i64::MIN"

    def string(self, text: str) -> str:
        return f"String::from({rust_string(text)})"

    def literal(self, value: Any, t: Type) -> str:
        if t.kind == OPTIONAL:
            return "None" if value is None else f"Some({self.literal(value, t.args[0])})"
        if t.kind in self.scalar_names:
            return self.scalar(value, t)
        if t.kind == LIST:
            return "vec![" + ", ".join(self.literal(v, t.args[0]) for v in value) + "]"
        if t.kind == TUPLE:
            items = [self.literal(v, a) for v, a in zip(value, t.args)]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if not value:
            return "std::collections::HashMap::new()"
        items = ", ".join(f"({self.literal(dict_key(k, t.args[0]), t.args[0])}, "
                          f"{self.literal(v, t.args[1])})" for k, v in value.items())
        return f"std::collections::HashMap::from([{items}])"

    def declaration(self, sig: Signature) -> str:
        params = ", ".join(f"{n}: {self.type_name(t)}" for n, t in sig.params)
        return f"fn {sig.name}({params}) -> {self.type_name(sig.returns)}"

    def harness(self, solution: str, sig: Signature, cases: Sequence[CallCase]
                ) -> tuple[str, str]:
        self.check_signature(sig)
        solution = _MAIN.sub(r"\1#[allow(dead_code)] fn af_solution_main()", solution)
        calls = "\n".join(
            f"        Box::new(|| {sig.name}("
            f"{', '.join(self.arguments(sig, case, f'case {i + 1}'))}).json()),"
            for i, case in enumerate(cases))
        harness = (_HARNESS.replace("@FD@", str(CALLS_FD)).replace("@CALLS@", calls)
                   .replace("@START@", CALL_START).replace("@VALUE@", CALL_VALUE)
                   .replace("@RAISED@", CALL_RAISED))
        return solution + "\n" + harness, ""
