"""From an answer and its language-neutral tests to a sandbox job, and from the job's result to
a verdict per test case.

``function_job`` renders the solution and the calls into the language's harness
(``targets``); ``program_job`` passes a whole program and each case's stdin. The stage hands the
jobs to ``ctx.sandbox().run_programs`` and ``grade`` compares what came back with the expected
values and outputs (``compare``), here on the host.

Example (a sandbox is needed for the middle line)::

    sig = complete_signature("def add(a: int, b: int) -> int", cases)
    result = pool.run_programs([function_job("cpp", solution, sig, cases)])[0]
    verdicts = grade(cases, result)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from arenaforge.pipeline.sandbox.languages.jobs import OK, ProgramJob, ProgramResult
from arenaforge.pipeline.statuses import WRONG_ANSWER
from arenaforge.stages.verification.harness.cases import CallCase, IOCase
from arenaforge.stages.verification.harness.compare import (
    ValueParseError,
    parse_value,
    stdout_equal,
    values_equal,
)
from arenaforge.stages.verification.harness.targets import target
from arenaforge.stages.verification.harness.types import (
    Signature,
    infer_type,
    parse_signature,
)


@dataclasses.dataclass(frozen=True)
class CaseVerdict:
    """One test case's verdict.

    Attributes:
        passed: The run was ``ok`` and its value or output is the expected one.
        status: The run's status (``RUN_STATUSES``), or ``wrong_answer`` for an ``ok`` run
            with another value or output.
        got: What the run returned (decoded JSON) or printed; None when it did neither.
        message: Why it did not pass.
    """

    passed: bool
    status: str
    got: Any = None
    message: str | None = None


def complete_signature(signature: str | Signature, cases: Sequence[CallCase]) -> Signature:
    """The signature with every missing type inferred from the cases' values.

    Raises:
        UnsupportedType: A type cannot be parsed or inferred.
    """
    sig = parse_signature(signature) if isinstance(signature, str) else signature
    if sig.complete:
        return sig
    params = []
    for i, (name, t) in enumerate(sig.params):
        if t is None:
            t = infer_type((c.args[i] for c in cases if i < len(c.args)),
                           f"parameter {name!r} of {sig.name}")
        params.append((name, t))
    returns = sig.returns or infer_type((c.expected for c in cases),
                                        f"the return of {sig.name}")
    return Signature(sig.name, tuple(params), returns)


def function_job(language: str, solution: str, signature: Signature,
                 cases: Sequence[CallCase], **limits: Any) -> ProgramJob:
    """The sandbox job running ``solution``'s function on every case (one process for all
    calls; ``limits``: ``ProgramJob``'s own, e.g. ``timeout_s``).

    Raises:
        UnsupportedType: The signature or a value has no form in this language.
    """
    source, unit = target(language).harness(solution, signature, cases)
    return ProgramJob(language, source, calls=len(cases), harness=unit, **limits)


def program_job(language: str, program: str, cases: Sequence[IOCase], **limits: Any
                ) -> ProgramJob:
    """The sandbox job running a whole program once per case, on the case's stdin."""
    return ProgramJob(language, program, stdins=tuple(c.stdin for c in cases), **limits)


def grade(cases: Sequence[CallCase] | Sequence[IOCase], result: ProgramResult
          ) -> list[CaseVerdict]:
    """A verdict per case, from the job's result (a skipped run is a ``timeout``)."""
    out = []
    for case, run in zip(cases, result.runs):
        if run is None:
            out.append(CaseVerdict(False, "timeout", message="skipped after the first test "
                                   "timed out"))
            continue
        if run.status != OK:
            out.append(CaseVerdict(False, run.status, message=run.message))
            continue
        if isinstance(case, IOCase):
            ok = stdout_equal(case.stdout, run.stdout)
            out.append(CaseVerdict(ok, OK if ok else WRONG_ANSWER, run.stdout,
                                   None if ok else "the output differs"))
            continue
        try:
            got = parse_value(run.value or "")
        except ValueParseError as exc:
            out.append(CaseVerdict(False, WRONG_ANSWER, message=str(exc)))
            continue
        ok = values_equal(case.expected, got)
        out.append(CaseVerdict(ok, OK if ok else WRONG_ANSWER, got,
                               None if ok else f"expected {case.expected!r}, got {got!r}"))
    return out
