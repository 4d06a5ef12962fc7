"""What a model is shown of a translated HumanEval problem in each language, and the program
made of its answer (``humaneval_translate`` gives the problem).

A chat model sees the docstring as the language's comment above the declaration
(``language_prompt``) and answers with the whole function: ``chat_program`` keeps its code
block that defines the entry point. A base model continues ``completion_prompt`` (includes or
imports a body may use, the comment, the declaration and its ``{``) up to the function's
closing brace (``completion_stops``). ``stub_solution`` is a function of the declared signature
returning a default value: every harness must compile around it
(``humaneval_selfcheck.stub_compiles``).

Example::

    tr = translate(load_problems("humaneval")[0])
    language_prompt(tr, "rust")   # '/// Check if in given list ...\\nfn has_close_elements(...'
"""

from __future__ import annotations

from arenaforge.pipeline.apps.humaneval_translate import Translation, language_signature
from arenaforge.stages.verification.harness import Signature, Type, target
from arenaforge.stages.verification.harness.types import DICT, FLOAT, INT


def _uses(sig: Signature, kind: str) -> bool:
    def walk(t: Type | None) -> bool:
        return t is not None and (t.kind == kind or any(walk(a) for a in t.args))
    return walk(sig.returns) or any(walk(t) for _, t in sig.params)


# What a function body may use without adding lines above the function (a completion cannot):
# about the headers and imports of MultiPL-E's prompts.
_CPP_HEADERS = ("algorithm", "cassert", "climits", "cmath", "map", "numeric", "optional", "set",
                "sstream", "string", "tuple", "unordered_map", "vector")
_C_HEADERS = ("ctype.h", "limits.h", "math.h", "stdbool.h", "stdio.h", "stdlib.h", "string.h")
_GO_IMPORTS = ("fmt", "math", "sort", "strconv", "strings")
_GO_KEEP = {"fmt": "fmt.Sprint", "math": "math.Abs", "sort": "sort.Ints",
            "strconv": "strconv.Itoa", "strings": "strings.Split"}


def preamble(tr: Translation, language: str) -> str:
    """The lines above the function in a completion prompt (and, where a repeat is harmless,
    above a chat answer): includes and imports the function may use."""
    lang = target(language).language
    if lang == "cpp":
        return "".join(f"#include <{h}>\n" for h in _CPP_HEADERS) + "\n"
    if lang == "c":
        return "".join(f"#include <{h}>\n" for h in _C_HEADERS) + "\n"
    if lang == "java":
        return "import java.util.*;\nimport java.util.stream.*;\n\nclass Problem {\n"
    if lang == "go":
        return "package main\n\nimport (\n" + "".join(f'\t"{m}"\n' for m in _GO_IMPORTS) + ")\n\n"
    if lang == "rust" and _uses(tr.signature, DICT):
        return "use std::collections::HashMap;\n\n"
    return ""


def doc_comment(docstring: str, language: str, indent: str = "") -> str:
    """The docstring as the language's line comments (``///`` in Rust: its doc comments)."""
    mark = "///" if target(language).language == "rust" else "//"
    return "".join(f"{indent}{mark} {line}".rstrip() + "\n" for line in docstring.splitlines())


def language_prompt(tr: Translation, language: str) -> str:
    """What a chat prompt shows: the docstring as a comment above the declaration."""
    return (doc_comment(tr.docstring, language)
            + target(language).declaration(language_signature(tr, language)))


def completion_prompt(tr: Translation, language: str) -> str:
    """What a base model continues: preamble, comment, declaration and the body's ``{``."""
    tgt = target(language)
    decl = tgt.declaration(language_signature(tr, language))
    opener = decl if decl.endswith("{") else decl + " {"
    indent = "    " if tgt.language == "java" else ""
    return (preamble(tr, language) + doc_comment(tr.docstring, language, indent)
            + indent + opener + "\n")


def completion_stops(language: str) -> tuple[str, ...]:
    """Where a completed body ends: the function's closing brace (the method's, in Java)."""
    return ("\n    }",) if target(language).language == "java" else ("\n}",)


def completion_program(tr: Translation, language: str, completion: str) -> str:
    """The program of a completion (already cut at ``completion_stops``)."""
    lang = target(language).language
    close = "\n    }\n}\n" if lang == "java" else "\n}\n"
    keep = ""
    if lang == "go":  # Go refuses an unused import; these keep the prompt's imports used
        keep = "".join(f"\nvar _ = {_GO_KEEP[m]}" for m in _GO_IMPORTS) + "\n"
    return completion_prompt(tr, language) + completion + close + keep


def chat_program(tr: Translation, language: str, answer: str) -> str:
    """The program of a chat answer: its code block (in the language, or untagged) that
    defines the entry point, else all of them, else the whole text; below the preamble where
    repeating an include or import is harmless (C, C++, Java)."""
    from arenaforge.stages.common.code_extract import code_blocks, extract_code, function_names

    lang = target(language).language
    blocks = [b.code for b in code_blocks(answer) if b.language in (lang, "")]
    code = next((b for b in blocks if tr.signature.name in function_names(b, lang)), None)
    if code is None:
        code = extract_code(answer, lang) or answer
    if lang in ("c", "cpp"):
        return preamble(tr, lang) + code
    if lang == "java":
        return "import java.util.*;\nimport java.util.stream.*;\n" + code
    return code


def stub_solution(tr: Translation, language: str) -> str:
    """A function with the declared signature that returns a default value: it must compile
    with the harness (the check that every translated harness is valid in the language)."""
    tgt = target(language)
    sig = language_signature(tr, language)
    decl = tgt.declaration(sig)
    lang = tgt.language
    if lang in ("cpp",):
        return preamble(tr, lang) + decl + " { return {}; }\n"
    if lang == "c":
        return preamble(tr, lang) + decl + " { return 0; }\n"
    if lang == "java":
        value = {INT: "0", FLOAT: "0", "bool": "false"}.get(sig.returns.kind, "null")
        return preamble(tr, lang) + f"    {decl} {{ return {value}; }}\n}}\n"
    if lang == "go":
        return f"package main\n\n{decl} {{\n\tvar r {tgt.type_name(sig.returns)}\n\treturn r\n}}\n"
    if lang == "rust":
        return preamble(tr, lang) + decl + " { Default::default() }\n"
    if lang == "typescript":
        return decl + " return undefined as any; }\n"
    if lang == "javascript":
        return decl + " return undefined; }\n"
    if lang == "python":
        return f"from typing import Dict, List, Optional, Tuple\n\n\n{decl}\n    return None\n"
    raise ValueError(f"no stub for language {language!r}")


__all__ = ["chat_program", "completion_program", "completion_prompt", "completion_stops",
           "doc_comment", "language_prompt", "preamble", "stub_solution"]
