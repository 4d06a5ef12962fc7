"""The status words of an executed program and of a graded answer (named constants, evalplus
style). Every module that writes or reads a status imports it from here.

An execution in the sandbox ends ``passed``, ``failed``, ``error``, ``timeout``, ``memory`` or
``output_limit`` (``arenaforge.pipeline.sandbox.result.ExecResult.status``). An answer graded
on its tests (the verify and repair stages' ``status`` column) has the words of the first test
that did not pass (an output cap reads as ``error``), or one of two that say it was not tested
as a program at all: ``no_tests`` (no trusted test for the instruction), ``no_entry_point``
(nothing in the answer binds to the function the tests call: never a logic failure) and
``contradictory_tests`` (the instruction's tests contradict each other, so they decide nothing),
and one that says testing could not decide: ``answers_disagree`` (two programs' readings
stand one voice each: the answers that pass every trusted test return different values on an
input the tests do not decide, or a test only its author's own answer backs is met by another
program's different value).
"""

from __future__ import annotations

PASSED = "passed"
FAILED = "failed"  # the tests ran and at least one assertion was false
ERROR = "error"  # syntax error, exception, early exit, or a sandbox failure
TIMEOUT = "timeout"  # wall-clock deadline or CPU limit
MEMORY = "memory"  # MemoryError, or the memory cgroup killed a process of the job
OUTPUT_LIMIT = "output_limit"  # stdout + stderr exceeded the cap (an execution's status only)
NO_TESTS = "no_tests"  # no trusted test for the instruction (an answer's status only)
NO_ENTRY_POINT = "no_entry_point"  # nothing binds to the entry point (an answer's status only)
SKIPPED = "skipped"  # a test not run because the answer already timed out (fail-fast)
# the instruction's tests contradict each other: none of them accepts or rejects an answer
# (an answer's status only)
CONTRADICTORY_TESTS = "contradictory_tests"
# the answers that pass every trusted test return different values on an input the tests do
# not decide: one side is wrong and nothing tells which (an answer's status only)
ANSWERS_DISAGREE = "answers_disagree"

# The statuses of an execution in the sandbox.
EXECUTION_STATUSES = (PASSED, FAILED, ERROR, TIMEOUT, MEMORY, OUTPUT_LIMIT)
# An answer's statuses that say its program ran and did not pass: the ones that separate a
# battle, that repair retries, and that a calibrated gate counts as failures.
FAILED_STATUSES = (FAILED, ERROR, TIMEOUT, MEMORY)
# Every status an answer row may carry.
ANSWER_STATUSES = (PASSED, *FAILED_STATUSES, NO_TESTS, NO_ENTRY_POINT, CONTRADICTORY_TESTS,
                   ANSWERS_DISAGREE)
# An execution's status as an answer's: the output cap is an error of the program.
ANSWER_STATUS_OF = {**{s: s for s in (PASSED, *FAILED_STATUSES)}, OUTPUT_LIMIT: ERROR}

# The status of one run of a program in any language (``arenaforge.pipeline.sandbox.languages``:
# the same words for every language; ``timeout``, ``memory`` and ``output_limit`` as above).
OK = "ok"  # the run finished: exit 0 (a whole program), or the call returned a value
COMPILE_ERROR = "compile_error"  # the program did not compile (or, interpreted, parse)
RUNTIME_ERROR = "runtime_error"  # non-zero exit, a crash, or the call raised
KILLED = "killed"  # ended by a signal no limit explains (or the sandbox failed: sandbox_fault)
RUN_STATUSES = (OK, COMPILE_ERROR, RUNTIME_ERROR, TIMEOUT, MEMORY, OUTPUT_LIMIT, KILLED)
# A test case a run answered (``ok``) with another value or output than expected
# (``stages/verification/harness``).
WRONG_ANSWER = "wrong_answer"
