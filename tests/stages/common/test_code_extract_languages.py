"""Fences and entry points in every language: each function of the polyglot corpus is found
under its task's name in each of its three versions; a whole program defines none but main."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from arenaforge.pipeline.sandbox.languages import LANGUAGE_IDS, LANGUAGES
from arenaforge.stages.common.code_extract import canonical_language, extract_code, function_names

CORPUS = Path(__file__).resolve().parents[2] / "data" / "polyglot"
TASKS = json.loads((CORPUS / "tasks.json").read_text())


@pytest.mark.parametrize("lang", LANGUAGE_IDS)
def test_corpus_entry_points(lang):
    ext = LANGUAGES[lang].source_name.rsplit(".", 1)[1]
    for task in TASKS:
        folder = CORPUS / lang / task["id"]
        if not folder.exists():
            continue
        for path in sorted(folder.glob(f"*.{ext}")):
            names = function_names(path.read_text(), lang)
            if task["kind"] == "function":
                assert task["id"] in names, (path, names)
            else:
                assert names == [] or task["id"] not in names, (path, names)


@pytest.mark.parametrize("tag, lang", [("c++", "cpp"), ("golang", "go"), ("ts", "typescript"),
                                       ("js", "javascript"), ("rs", "rust"), ("py3", "python"),
                                       ("Java", "java"), ("h", "c")])
def test_fences_name_the_languages(tag, lang):
    assert canonical_language(tag) == lang
    text = f"Run it:\n```sh\nmake\n```\n```{tag}\nX\n```\n"
    assert extract_code(text, lang) == "X\n"


def test_scan_skips_comments_strings_and_nested_code():
    code = ('// int fake(int x) {\n/* long long also_fake() { */\n'
            'const char* s = "int nope(int a) {";\n'
            'struct P { int inside(int a) { return a; } };\n'
            'static inline long long f(const long long* xs, int n) {\n'
            '  while (n) { n--; }\n  return 0;\n}\n')
    assert function_names(code, "c") == ["f"]
    go = "package main\n\nfunc (p P) method() int { return 0 }\nfunc helper(x int) int {\n" \
         "\treturn x\n}\nfunc main() {}\n"
    assert function_names(go, "go") == ["helper"]
    rust = "impl P {\n    fn method(&self) {}\n}\npub fn solve(v: Vec<i64>) -> i64 { 0 }\n"
    assert function_names(rust, "rust") == ["solve"]
