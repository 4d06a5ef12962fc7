"""Language-neutral tests, rendered into each language's harness (a pure library).

A test case is data (``cases``): a call with literal arguments and its expected value
(``function`` tasks), or stdin text and its expected stdout (``program`` tasks). ``types`` gives
each value a type, from a Python-style signature with annotations or inferred from the values;
``targets`` renders types, literals, declarations and a calls harness per language, the way
MultiPL-E translates HumanEval's tests, except that the harness reports each call's value as
JSON and the comparison (``compare``: values with a float tolerance, outputs after a stated
normalisation) happens on the host, where the expected values stay. ``harness`` turns an
answer and its cases into a ``ProgramJob`` for ``ctx.sandbox().run_programs`` and grades the
result, case by case.

Example (the middle line needs a sandbox pool)::

    cases = load_cases("function", [{"args": [[1, 2, 3, 4]], "expected": 6}])
    sig = complete_signature("def sum_evens(xs: List[int]) -> int", cases)
    target("java").declaration(sig)   # 'public static long sum_evens(List<Long> xs)'
    result = pool.run_programs([function_job("java", answer, sig, cases)])[0]
    [v.passed for v in grade(cases, result)]
"""

from arenaforge.stages.verification.harness.cases import (
    FUNCTION,
    PROGRAM,
    TASK_KINDS,
    CallCase,
    CaseError,
    IOCase,
    load_cases,
    resolve_task_kind,
)
from arenaforge.stages.verification.harness.compare import (
    normalize_stdout,
    stdout_equal,
    values_equal,
)
from arenaforge.stages.verification.harness.jobs import (
    WRONG_ANSWER,
    CaseVerdict,
    complete_signature,
    function_job,
    grade,
    program_job,
)
from arenaforge.stages.verification.harness.targets import target
from arenaforge.stages.verification.harness.types import (
    Signature,
    Type,
    UnsupportedType,
    infer_type,
    parse_signature,
    parse_type,
)

__all__ = [
    "FUNCTION", "PROGRAM", "TASK_KINDS", "WRONG_ANSWER", "CallCase", "CaseError", "CaseVerdict",
    "IOCase", "Signature", "Type", "UnsupportedType", "complete_signature", "function_job",
    "grade", "infer_type", "load_cases", "normalize_stdout", "parse_signature", "parse_type",
    "program_job", "resolve_task_kind", "stdout_equal", "target", "values_equal",
]
