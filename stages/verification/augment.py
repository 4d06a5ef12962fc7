"""Test augmentation: inputs from each author's generator, outputs trusted where candidates agree.

Each test author also writes ``def generate_inputs():`` returning argument tuples (CP-Agent's
test augmentation). The generator runs in the sandbox (``generator_program``); what it prints
must be Python literals (``ast.literal_eval``), at most ``cap`` inputs per author. Every input
then runs on every bound candidate in the sandbox (``input_program``; one suite job per
candidate), which records ``repr`` of the result or the exception's class (``outcome_of``). An
input on which a majority of independent candidates (distinct models, at least two; with two
candidates: both) return the same value becomes an ``augmented`` assertion with that value
(differential testing, as rStar-Coder's mutual verification and CodeT); the minority is kept
as evidence against it (``contradicted``), and an input without a majority is kept as a
disagreement. Parsing here is pure; the stage runs the programs.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from arenaforge.pipeline.statuses import ERROR, PASSED, TIMEOUT
from arenaforge.stages.verification.test_parsing import python_blocks
from arenaforge.stages.verification.test_split import (
    _NOT_LITERAL,
    is_literal,
    literal,
    normalised_call,
    reprs_agree,
)

GENERATOR = "generate_inputs"
GENERATOR_REPLY = "\n\n--- generate_inputs reply ---\n"  # joins the second reply to ``raw``
MARK = "@@arenaforge@@"  # prefixes the lines a program prints for the host
_MAX_REPR = 1000  # per printed value; a longer repr is cut and so is no literal


def extract_generator(text: str | None) -> tuple[str | None, str | None]:
    """The ``generate_inputs`` function of a reply (with the imports of its block).

    Returns:
        ``(source, None)`` or ``(None, why not)``.

    >>> extract_generator("```python\\nimport math\\ndef generate_inputs():\\n"
    ...                   "    return [(1,), (2,)]\\n```")[0]
    'import math\\n\\ndef generate_inputs():\\n    return [(1,), (2,)]'
    >>> extract_generator("def generate_inputs():\\n    return [(2,), (3,), (4")[0]
    'def generate_inputs():\\n    return [(2,), (3,)]'
    >>> extract_generator("assert f(1) == 2")
    (None, 'no generate_inputs function found')
    """
    for block in python_blocks(text or ""):
        tree = _parse_or_close(block)
        if tree is None:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == GENERATOR:
                imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
                return ast.unparse(ast.Module([*imports, node], [])), None
    return None, f"no {GENERATOR} function found"


def _parse_or_close(block: str) -> ast.Module | None:
    """The block's tree; for a reply cut inside the returned list (the small models run on
    past the number of inputs asked until the token limit), the list closed after its last
    complete element."""
    try:
        return ast.parse(block)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    if f"def {GENERATOR}" not in block:
        return None
    ends = [i for i, ch in enumerate(block) if ch == ","][-200:]
    for end in reversed(ends):
        try:
            return ast.parse(block[:end] + "]")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return None


def generator_program(source: str, cap: int) -> str:
    """A test program that prints the first ``2 * cap`` generated inputs, one repr per line
    (``parse_generated`` keeps ``cap`` of those that are usable).

    ``random`` is seeded so that a generator that draws numbers gives the same inputs on every
    run (and so the same resume fingerprint of its results).
    """
    return (f"import random as _random\n_random.seed(0)\n{source}\n"
            f"for _args in list({GENERATOR}())[:{2 * int(cap)}]:\n"
            f"    print({MARK!r} + repr(_args)[:{_MAX_REPR}])\n"
            "assert True")


def parse_generated(stdout: str, arities: Sequence[int], cap: int) -> tuple[list[tuple], int]:
    """The argument tuples a generator printed, and how many lines were no usable literal.

    A value that is not a tuple is one argument (``[1, 2]`` for ``f(xs)``). When the tests'
    call arities are known, a tuple of another length is rejected (the small models copy
    another task's tuples there), except that when every tuple has exactly one element more
    than the tests' calls, they are read as ``(arguments..., expected)`` pairs.

    >>> parse_generated("@@arenaforge@@(1, 2)\\n@@arenaforge@@[3]\\n@@arenaforge@@<obj>", (), 9)
    ([(1, 2), ([3],)], 1)
    >>> parse_generated("@@arenaforge@@('ab', 2)\\n@@arenaforge@@('cd', 3, 4)", (1,), 9)
    ([], 2)
    >>> parse_generated("@@arenaforge@@('ab', 2)\\n@@arenaforge@@('cd', 0)", (1,), 9)
    ([('ab',), ('cd',)], 0)
    """
    values = [literal(line[len(MARK):]) for line in stdout.splitlines() if line.startswith(MARK)]
    tuples = [v if isinstance(v, tuple) else (v,) for v in values if v is not _NOT_LITERAL]
    rejected = len(values) - len(tuples)
    if arities and tuples and all(len(t) - 1 in arities and len(t) not in arities
                                  for t in tuples):
        # every tuple is (arguments..., expected), as the small models write them: the expected
        # value is dropped (the candidates decide the output, never the generator)
        tuples = [t[:-1] for t in tuples]
    inputs = []
    for value in tuples:
        if arities and len(value) not in arities:
            rejected += 1
        elif len(inputs) < cap:
            inputs.append(value)
    return inputs, rejected


def inputs_request(instruction: str, signature: str, entry_point: str,
                   calls: Sequence[str], k: int) -> list[dict[str, str]]:
    """The tests stage's second request to an author: ``def generate_inputs()`` returning ``k``
    inputs, the author's own first calls (argument tuples as Python literals) showing their
    form. The same request for every language: inputs are language-neutral values."""
    from arenaforge.pipeline.prompts import fill, load_template

    user = fill(load_template("testgen_inputs.txt"), instruction=instruction,
                signature=signature, entry_point=entry_point, k=str(k),
                calls="\n".join(calls[:3]) or "(none shown)",
                example=calls[0] if calls else "(first_argument, second_argument)")
    return [{"role": "system", "content": load_template("testgen_system.txt")},
            {"role": "user", "content": user}]


def argument_tuple(args: Sequence[Any]) -> str:
    """A case's arguments as the Python tuple literal the inputs request shows.

    >>> argument_tuple([[1, 2], "a"]), argument_tuple([3])
    ("([1, 2], 'a',)", '(3,)')
    """
    return "(" + "".join(f"{a!r}, " for a in args).rstrip() + ")"


def run_generators(pool: Any, sources: Sequence[Sequence[str]], arities: Sequence[Sequence[int]],
                   cap: int, *, timeout_s: float, memory_mb: int | None
                   ) -> list[list[tuple[list[tuple], str | None]]]:
    """Run every author's generator of every instruction in the sandbox (one suite job per
    instruction, every instruction's in one batch; the generators are Python whatever the
    task's language, as the inputs are language-neutral values).

    Args:
        sources: per instruction, each author's ``generate_inputs`` source.
        arities: per instruction, the argument counts its calls take (``parse_generated``).

    Returns:
        Per instruction, per author: ``(inputs, error)``: the argument tuples kept (at most
        ``cap``) and why none or some were not (``None`` when every printed input was kept).
    """
    from arenaforge.stages.verification.execution import execute_results

    jobs = [("pass", [generator_program(src, cap) for src in srcs]) for srcs in sources if srcs]
    results = iter(execute_results(pool, jobs, timeout_s=timeout_s, memory_mb=memory_mb,
                                   fail_fast=False) if jobs else [])
    out = []
    for srcs, arity in zip(sources, arities):
        res = next(results) if srcs else []
        per_author = []
        for r in (res if isinstance(res, list) else [None] * len(srcs)):
            if r is None or not r.passed:
                per_author.append(
                    ([], "skipped" if r is None else (r.error_name or r.error_type or r.status)))
                continue
            inputs, rejected = parse_generated(r.stdout_tail, arity, cap)
            per_author.append((inputs, f"{rejected} inputs rejected (no literal, or another "
                                       "number of arguments than the tests call with)"
                               if rejected else None))
        out.append(per_author)
    return out


INEXACT = "~"  # prefixes the printed repr of a value that is not built from exact builtin types


def input_program(entry_point: str, args: Sequence[Any]) -> str:
    """A test program that prints ``repr`` of ``entry(*args)`` for the host, prefixed with
    ``INEXACT`` when the value is not built only from exact builtin types (the harness's
    ``__af_exact``: no subclasses, no numpy; a value whose repr merely looks like a literal, a
    ``str`` subclass or a ``UserDict``, must not become or pass as an expected literal)."""
    return call_program(normalised_call(entry_point, args))


def call_program(call: str) -> str:
    """``input_program`` for a call already written out (a written test's normalised call).

    ``random`` is seeded first, so that an answer that draws random numbers prints the same
    value on every run (its outcome, and so the stage's rows, do not change between runs)."""
    return (f"import random as _random\n_random.seed(0)\n_result = {call}\n"
            f"print({MARK!r} + ('' if __af_exact(_result) else {INEXACT!r}) + "
            f"repr(_result)[:{_MAX_REPR + 1}])\nassert True")


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one candidate did on one input: ``value`` (a repr), ``raises`` (exception class),
    ``timeout`` or ``error`` (anything else: memory, exit, sandbox). ``exact``: a value built
    only from exact builtin types (only such a value can be asserted)."""

    kind: str
    detail: str | None = None
    exact: bool = True

    def same(self, other: Outcome) -> bool:
        if self.kind != other.kind or self.exact != other.exact:
            return False
        if self.kind == "value":
            return reprs_agree(self.detail or "", other.detail or "")
        return self.detail == other.detail

    def is_exactly(self, expected: str | None) -> bool:
        """This run returned ``expected`` to the character, as an exact builtin value: the
        assertion of ``expected`` on the same call passes (a repr round-trips; both ``==`` and
        ``_close`` accept equal builtin values). A repr cut at the print limit never counts."""
        return (self.kind == "value" and self.exact and expected is not None
                and self.detail == expected and len(expected) <= _MAX_REPR)

    def as_text(self) -> str:
        if self.detail is None:
            return self.kind
        return f"{self.kind}: {'' if self.exact else INEXACT}{self.detail}"


def outcome_of(result: Any) -> Outcome:
    """The outcome of one ``input_program`` run (an ``ExecResult``, ``None`` when skipped)."""
    if result is None:
        return Outcome("error", "skipped")
    if result.status == PASSED:
        lines = [ln for ln in (result.stdout_tail or "").splitlines() if ln.startswith(MARK)]
        if lines:
            text = lines[-1][len(MARK):]
            exact = not text.startswith(INEXACT)
            return Outcome("value", text if exact else text[len(INEXACT):], exact)
        return Outcome("error", "no output")
    if result.status == TIMEOUT:
        return Outcome("timeout")
    if result.status == ERROR and result.error_type == "runtime":
        return Outcome("raises", result.error_name)
    return Outcome("error", result.error_type or result.status)


@dataclasses.dataclass(frozen=True)
class Agreement:
    """The vote on one input: the agreed outcome (``None``: no majority), who agreed, who not."""

    outcome: Outcome | None
    agreed: tuple[str, ...]
    contradicted: tuple[str, ...]

    @property
    def unanimous(self) -> bool:
        return self.outcome is not None and not self.contradicted

    @property
    def assertable(self) -> bool:
        """An agreed value that is a literal of exact builtin types: it can become an assertion."""
        return (self.outcome is not None and self.outcome.kind == "value"
                and self.outcome.exact and is_literal(self.outcome.detail))


def majority(outcomes: Mapping[str, Outcome]) -> Agreement:
    """The outcome more than half of the models (and at least two) share.

    >>> v = majority({"a": Outcome("value", "3"), "b": Outcome("value", "3"),
    ...               "c": Outcome("raises", "KeyError")})
    >>> v.outcome.detail, v.agreed, v.contradicted
    ('3', ('a', 'b'), ('c',))
    >>> majority({"a": Outcome("value", "3"), "b": Outcome("value", "4")}).outcome is None
    True
    """
    models = sorted(outcomes)
    groups: list[list[str]] = []
    for m in models:
        group = next((g for g in groups if outcomes[g[0]].same(outcomes[m])), None)
        if group is None:
            groups.append([m])
        else:
            group.append(m)
    best = max(groups, key=len, default=[])
    if len(best) < 2 or 2 * len(best) <= len(models):
        return Agreement(None, (), ())
    return Agreement(outcomes[best[0]], tuple(best),
                     tuple(m for m in models if m not in best))
