"""Stage ``verify``: run every answer against the trusted tests; select one answer per instruction.

Input (source ``answer``, one row per (instruction_id, model)): ``instruction_id, model, code``
and the other answer columns, kept unchanged. Reads ``tests`` (the surviving tests of each
instruction) and ``rate`` (``final_score`` and ``winner`` per (instruction_id, model)).

Output adds, per row: ``status`` (passed, failed, error, timeout, memory, no_tests),
``tests_passed``, ``tests_total``, ``error_class`` (syntax, runtime, assertion, timeout, memory,
output_limit, exit, sandbox, no_code), ``error_message`` (the first failing test's error, with
the failing line), ``failed_test`` (its code), ``stdout_tail``, ``stderr_tail``, ``duration_s``,
``judge_winner``, ``final_score``, ``selected``, ``selection_rule``, ``flipped``.

Every answer is one sandbox job that runs each test on its own (``execute``), so one test's
failure, timeout or leftover process never hides the others and ``tests_passed`` counts exactly;
all jobs of a shard go to the pool in one batch. Sharded by instruction (selection is per
instruction), so on a cluster every node's sandbox pool takes part; its stats are counts
(``tested.<model>``, ``passed.<model>``, ``winners_failed``, ``flipped``, ``no_tests``) that add
up over shards. It runs no model.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pydantic import Field

from pipeline.stage import StageConfig, StageContext, StageResult, StageSpec
from stages.selection import Candidate, Rule, select_answer
from stages.test_parsing import strip_main_guard

PASSED, FAILED, ERROR, TIMEOUT, MEMORY, NO_TESTS = (
    "passed", "failed", "error", "timeout", "memory", "no_tests")
SKIPPED = "skipped"  # a test not run because the answer already timed out (fail-fast)
_STATUS_OF = {"passed": PASSED, "failed": FAILED, "error": ERROR, "timeout": TIMEOUT,
              "memory": MEMORY, "output_limit": ERROR}


class VerifyConfig(StageConfig):
    """Execution limits and the selection rule."""

    rule: Rule = Field("verified", description="judge | verified | execution_first")
    timeout_s: float = Field(5.0, gt=0, description="wall-clock limit of one test run")
    memory_mb: int | None = Field(None, ge=32, description="memory limit; None: the sandbox's")
    fail_fast: bool = Field(
        True, description="skip an answer's remaining tests once its first test timed out")
    min_pass_rate: float = Field(
        0.0, ge=0, le=1, description="execution_first: execution overrides the judge only when "
        "the best answer passes at least this fraction (AceCoder: 0.8)")
    min_gap: float = Field(
        0.0, ge=0, le=1, description="execution_first: ... and beats the judge's pick by this "
        "many pass-rate points (AceCoder: 0.4)")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """An answer's result over a list of tests.

    ``status`` is that of the first test that did not pass (``passed`` when all did);
    ``per_test`` holds each test's status (``skipped`` after a fail-fast timeout).
    """

    status: str
    tests_passed: int
    tests_total: int
    error_class: str | None = None
    error_message: str | None = None
    failed_test: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0
    per_test: tuple[str, ...] = ()

    @property
    def pass_rate(self) -> float | None:
        return self.tests_passed / self.tests_total if self.tests_total else None


def _compile_error(code: str | None) -> Verdict | None:
    """Answers without code or that do not parse fail on the host without a sandbox job."""
    if code is None or not code.strip():
        return Verdict(ERROR, 0, 0, "no_code", "the answer has no code")
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        return Verdict(ERROR, 0, 0, "syntax", f"SyntaxError: {exc}")
    return None


def summarize(tests: Sequence[str], results: Sequence[Any]) -> Verdict:
    """Fold per-test ``ExecResult``s (``None`` for a skipped test) into one ``Verdict``."""
    per_test = tuple(SKIPPED if r is None else _STATUS_OF[r.status] for r in results)
    passed = sum(s == PASSED for s in per_test)
    duration = sum(r.duration_s for r in results if r is not None)
    first = next((i for i, r in enumerate(results) if r is None or not r.passed), None)
    if first is None:  # output of the last test: a probe prints there
        last = results[-1]
        return Verdict(PASSED, passed, len(tests), stdout_tail=last.stdout_tail,
                       stderr_tail=last.stderr_tail, duration_s=duration, per_test=per_test)
    r = results[first]
    if r is None:  # only possible after an earlier timeout, which would have been first
        raise AssertionError("skipped test before any failure")
    error_class = "assertion" if r.status == "failed" else (r.error_type or r.status)
    return Verdict(_STATUS_OF[r.status], passed, len(tests), error_class, r.error_message,
                   tests[first], r.stdout_tail, r.stderr_tail, duration, per_test)


def execute(pool: Any, items: Sequence[tuple[str | None, Sequence[str]]], *, timeout_s: float,
            memory_mb: int | None = None, fail_fast: bool = True) -> list[Verdict]:
    """Run each solution against its tests in the sandbox pool, each test judged on its own.

    This is the execution function of the pipeline (verify, repair and the HumanEval check all
    go through it). A test is one assert (or a small block ending in one) or a whole test
    program such as HumanEval's ``check`` + ``check(entry_point)``. Solutions are run as
    modules: a top-level ``if __name__ == "__main__":`` demo block is removed first.

    One sandbox job per solution (``SuiteJob``): inside it the tests run one after another,
    each with its own deadline, output and verdict; a test that times out, crashes or exits
    ends only itself (the next runs in a fresh process), and different solutions never share a
    job. All jobs go to the pool in one batch.

    Args:
        pool: a ``pipeline.sandbox.SandboxPool`` (anything with ``run_suites(jobs)``).
        items: ``(solution code or None, tests)`` pairs.
        timeout_s: wall-clock limit per test.
        memory_mb: memory limit per job (``None``: the pool's default).
        fail_fast: skip a solution's other tests when its first test timed out, so an endless
            loop costs one timeout, not one per test. Only for trusted tests: a test that times
            out on every solution would otherwise hide the others.

    Returns:
        One ``Verdict`` per item (``tests_total == 0`` and status ``no_tests`` when it had none).
    """
    from pipeline.sandbox import SuiteJob

    verdicts: list[Verdict | None] = [None] * len(items)
    solutions: dict[int, str] = {}
    for i, (code, tests) in enumerate(items):
        if not tests:
            verdicts[i] = Verdict(NO_TESTS, 0, 0)
        elif (bad := _compile_error(code)) is not None:
            verdicts[i] = dataclasses.replace(bad, tests_total=len(tests))
        else:
            solutions[i] = strip_main_guard(code)
    jobs = [SuiteJob(solutions[i], tuple(items[i][1]), timeout_s, memory_mb, fail_fast)
            for i in solutions]
    for i, results in zip(solutions, pool.run_suites(jobs) if jobs else []):
        verdicts[i] = summarize(items[i][1], results)
    return verdicts  # type: ignore[return-value]


TRUSTED_TEST_COLUMNS = ("instruction_id", "author", "test_idx", "test_code", "survived")


def trusted_tests(tests: pa.Table) -> dict[str, list[str]]:
    """The surviving tests of the ``tests`` stage per instruction, ordered by author and index."""
    out: dict[str, list[str]] = defaultdict(list)
    rows = tests.select(list(TRUSTED_TEST_COLUMNS))
    rows = rows.to_pylist()
    rows.sort(key=lambda r: (r["instruction_id"], r["author"] or "", r["test_idx"]))
    for r in rows:
        if r["survived"] and r["test_code"]:
            out[r["instruction_id"]].append(r["test_code"])
    return out


def _select(rows: list[dict], verdicts: list[Verdict], rate: dict, cfg: VerifyConfig) -> list[dict]:
    """Per-row selection columns (``judge_winner, final_score, selected, flipped``)."""
    out = [{"judge_winner": False, "final_score": None, "selected": False, "flipped": False}
           for _ in rows]
    by_instruction: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_instruction[row["instruction_id"]].append(i)
    for iid, idx in by_instruction.items():
        cands = []
        for i in idx:
            score, winner = rate.get((iid, rows[i]["model"]), (None, None))
            out[i].update(final_score=score, judge_winner=winner is not None
                          and winner == rows[i]["model"])
            cands.append(Candidate(rows[i]["model"], verdicts[i].status == PASSED,
                                   verdicts[i].pass_rate, score, out[i]["judge_winner"]))
        choice = select_answer(cands, cfg.rule, cfg.min_pass_rate, cfg.min_gap)
        if choice.index is not None:
            out[idx[choice.index]].update(selected=True, flipped=choice.flipped)
    return out


VERDICT_SCHEMA = pa.schema([
    ("status", pa.string()), ("tests_passed", pa.int64()), ("tests_total", pa.int64()),
    ("error_class", pa.string()), ("error_message", pa.string()), ("failed_test", pa.string()),
    ("stdout_tail", pa.string()), ("stderr_tail", pa.string()), ("duration_s", pa.float64()),
])
SELECTION_SCHEMA = pa.schema([
    ("judge_winner", pa.bool_()), ("final_score", pa.float64()), ("selected", pa.bool_()),
    ("selection_rule", pa.string()), ("flipped", pa.bool_()),
])


def with_columns(table: pa.Table, columns: dict[str, pa.Array]) -> pa.Table:
    """``table`` with ``columns`` set (replaced where they exist, appended otherwise)."""
    for name, values in columns.items():
        if name in table.column_names:
            table = table.set_column(table.column_names.index(name), name, values)
        else:
            table = table.append_column(name, values)
    return table


def verdict_columns(verdicts: Sequence[Verdict]) -> dict[str, pa.Array]:
    """The verdict columns of the verify schema."""
    return {f.name: pa.array([getattr(v, f.name) for v in verdicts], f.type)
            for f in VERDICT_SCHEMA}


def verify_stats(rows: list[dict], verdicts: Sequence[Verdict],
                 sel: list[dict]) -> dict[str, float]:
    """Per-model tested/passed counts and the judge-vs-execution counters of a shard.

    Counts only: the runner adds shard stats up, so a rate here would be summed (a pass rate is
    ``passed.M / tested.M`` of the stage's totals).
    """
    stats: dict[str, float] = defaultdict(float)
    no_tests, winners_failed = set(), 0
    for row, v, s in zip(rows, verdicts, sel):
        model = row["model"]
        if v.status == NO_TESTS:
            no_tests.add(row["instruction_id"])
            continue
        stats[f"tested.{model}"] += 1
        stats[f"passed.{model}"] += v.status == PASSED
        winners_failed += s["judge_winner"] and v.status != PASSED
        stats["selected_passed"] += s["selected"] and v.status == PASSED
    stats["winners_failed"] = float(winners_failed)
    stats["flipped"] = float(sum(s["flipped"] for s in sel))
    stats["no_tests"] = float(len(no_tests))
    stats["selected"] = float(sum(s["selected"] for s in sel))
    return dict(stats)


def run(table: pa.Table, cfg: VerifyConfig, ctx: StageContext) -> StageResult:
    """Execute every answer against its instruction's surviving tests, then select."""
    ids = sorted(set(table.column("instruction_id").to_pylist()))
    tests = trusted_tests(ctx.read("tests", instruction_ids=ids))
    rate_rows = ctx.read("rate", columns=["instruction_id", "model", "final_score", "winner"],
                         instruction_ids=ids).to_pylist()
    rate = {(r["instruction_id"], r["model"]): (r["final_score"], r["winner"]) for r in rate_rows}
    rows = table.select(["instruction_id", "model", "code"]).to_pylist()
    verdicts = execute(ctx.sandbox(), [(r["code"], tests.get(r["instruction_id"], []))
                                       for r in rows],
                       timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb, fail_fast=cfg.fail_fast)
    ctx.advance(len(rows))
    sel = _select(rows, verdicts, rate, cfg)
    columns = verdict_columns(verdicts)
    for f in SELECTION_SCHEMA:
        values = [cfg.rule] * len(rows) if f.name == "selection_rule" else [s[f.name] for s in sel]
        columns[f.name] = pa.array(values, f.type)
    return StageResult(table=with_columns(table, columns), stats=verify_stats(rows, verdicts, sel))


STAGE = StageSpec(
    name="verify", config=VerifyConfig, run=run, source="answer",
    reads={"tests": TRUSTED_TEST_COLUMNS,
           "rate": ("instruction_id", "model", "final_score", "winner")},
    inputs=("instruction_id", "model", "code"),
    outputs=(*VERDICT_SCHEMA.names, *SELECTION_SCHEMA.names),
)
