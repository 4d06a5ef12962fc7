"""Stage ``verify``: run every answer against the trusted tests; select one answer per instruction.

Input (source ``answer``, one row per (instruction_id, model)): ``instruction_id, model, code``
and the other answer columns, kept unchanged. Reads ``tests`` (each instruction's suite:
entry point, visible, hidden and augmented tests, the instruction's example; ``arenaforge.stages.verification.suites``)
and ``rate`` (``final_score`` and ``winner`` per (instruction_id, model)).

Each answer is bound to the entry point first (``arenaforge.stages.verification.entry_points``: the instruction's name,
the same name, a matching signature, a single public function, or the name a test author
called), so a task solved under another name is graded, not errored.

Output adds, per row: ``status`` (passed, failed, error, timeout, memory, no_tests,
no_entry_point: nothing in the answer binds to the entry point), ``tests_passed``,
``tests_total`` (every trusted test), ``tests_visible[_passed]``, ``tests_hidden[_passed]``,
``tests_augmented[_passed]``, ``entry_point``, ``bound_function``, ``binding_rule``,
``probe_gate`` and ``program_gate`` (``arenaforge.stages.verification.probe_gate``; both on every row),
``stated_outputs`` and ``stated_output_mismatch`` (a Python, JavaScript or TypeScript function
answer execution would verify runs its own demo: a ``print`` or ``console.log`` whose comment
states an output it does not print makes it
``false_stated_output``; ``arenaforge.stages.verification.stated_outputs``), ``error_class``
(syntax, runtime, assertion, timeout, memory, output_limit, exit, sandbox, no_code,
no_entry_point, compile_error, harness), ``error_message`` (the first failing test's error, with the failing line),
``failed_test`` (its code), ``stdout_tail``, ``stderr_tail``, ``duration_s``, ``judge_winner``,
``final_score``, ``judge_pick`` (the model the judges picked, on every row of the instruction),
``selected``, ``selection_rule``, ``flipped``, ``replaced_judge_pick`` (selected, and not the
judge's pick), ``reused_tests_run`` (graded from the tests stage's run, see below).

Every answer is one sandbox job that runs each test on its own (``arenaforge.stages.verification.grading.grade``), so
one test's failure, timeout or leftover process never hides the others and ``tests_passed``
counts exactly; all jobs of a shard go to the pool in one batch. The exception: an answer (in any
language) that the ``tests`` stage already ran as the same program, and that passed every trusted test there
and decided both probes, is graded from that run (``reuse_tests_runs``; ``arenaforge.stages.verification.recorded_runs``
says exactly when); its ``duration_s`` is that run's and its output tails are empty. Every
answer that fails is run here. Sharded by instruction (selection is per instruction); its stats
are counts (``tested.<model>``, ``passed.<model>``, ``no_entry_point.<model>``,
``binding.<rule>``, ``probe_gate.<verdict>``, ``program_gate.<verdict>``, ``winners_failed``,
``flipped``, ``no_tests``, ``reused_tests_run``) that add up over shards. It runs no model.

A task that is not a Python function (the rows' ``language`` and ``task_kind``) is graded in
its own language (``arenaforge.stages.verification.grading``) into the same columns:
its tests are cases as data, a wrong value or output is error class ``assertion``, and an
answer that does not compile is the answer's failure (status ``error``, error class
``compile_error``, admission ``no_usable_code``). Such rows add the counts
``language.<id>.<kind>.{answers,tested,verified,compile_errors}`` and ``compile_errors``
(``compile_errors.<model>``); a table of Python functions alone adds none of them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pyarrow as pa
from arenaforge.pipeline.stage import StageConfig, StageContext, StageResult, StageSpec
from arenaforge.pipeline.statuses import NO_ENTRY_POINT, NO_TESTS, PASSED
from arenaforge.stages.arena.selection import RULES, Candidate, Rule, select_answer
from arenaforge.stages.common.task_kinds import table_tasks
from arenaforge.stages.verification.execution import (  # noqa: F401  (re-exported: callers run answers here)
    Verdict,
    execute,
    summarize,
)
from arenaforge.stages.verification.grading import (  # noqa: F401
    VERIFIED,
    Graded,
    grade,
    grade_any,
    language_stats,
)
from arenaforge.stages.verification.recorded_runs import EVIDENCE_COLUMNS, recorded_runs
from arenaforge.stages.verification.stated_outputs import NONE as NO_STATED_OUTPUT
from arenaforge.stages.verification.suites import SUITE_COLUMNS, suites_of_rows
from pydantic import Field


class VerifyConfig(StageConfig):
    """Execution limits and the selection rule."""

    rule: Rule = Field("verified", description=" | ".join(RULES))
    timeout_s: float = Field(5.0, gt=0, description="wall-clock limit of one test run")
    memory_mb: int | None = Field(None, ge=32, description="memory limit; None: the sandbox's")
    fail_fast: bool = Field(
        True, description="skip an answer's remaining tests once its first test timed out")
    reuse_tests_runs: bool = Field(
        True, description="grade an answer from the tests stage's run of the same program when "
        "that run passed every trusted test and decided both probes under limits no looser "
        "than these (arenaforge.stages.verification.recorded_runs); False: run every answer again")
    min_pass_fraction: float = Field(
        1.0, gt=0, le=1, description="share of an instruction's trusted tests an answer must "
        "pass to be verified (the instruction's own example always; 1.0: every test)")
    min_pass_rate: float = Field(
        0.0, ge=0, le=1, description="execution_first: execution overrides the judge only when "
        "the best answer passes at least this fraction (AceCoder: 0.8)")
    min_gap: float = Field(
        0.0, ge=0, le=1, description="execution_first: ... and beats the judge's pick by this "
        "many pass-rate points (AceCoder: 0.4)")


def _select(rows: list[dict], grades: Sequence[Graded], rate: dict,
            cfg: VerifyConfig) -> list[dict]:
    """Per-row selection columns (``judge_winner, final_score, judge_pick, selected, flipped,
    replaced_judge_pick``)."""
    out = [{"judge_winner": False, "final_score": None, "judge_pick": None, "selected": False,
            "flipped": False, "replaced_judge_pick": False} for _ in rows]
    by_instruction: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_instruction[row["instruction_id"]].append(i)
    for iid, idx in by_instruction.items():
        cands = []
        for i in idx:
            score, winner = rate.get((iid, rows[i]["model"]), (None, None))
            out[i].update(final_score=score, judge_winner=winner is not None
                          and winner == rows[i]["model"])
            cands.append(Candidate(rows[i]["model"], grades[i].verified(cfg.min_pass_fraction),
                                   grades[i].verdict.pass_rate, score, out[i]["judge_winner"]))
        choice = select_answer(cands, cfg.rule, cfg.min_pass_rate, cfg.min_gap)
        pick = select_answer(cands, "judge").index
        for i in idx:
            out[i]["judge_pick"] = rows[idx[pick]]["model"] if pick is not None else None
        if choice.index is not None:
            out[idx[choice.index]].update(selected=True, flipped=choice.flipped,
                                          replaced_judge_pick=choice.index != pick)
    return out


VERDICT_SCHEMA = pa.schema([
    ("status", pa.string()), ("tests_passed", pa.int64()), ("tests_total", pa.int64()),
    ("error_class", pa.string()), ("error_message", pa.string()), ("failed_test", pa.string()),
    ("stdout_tail", pa.string()), ("stderr_tail", pa.string()), ("duration_s", pa.float64()),
])
GRADE_SCHEMA = pa.schema([
    ("entry_point", pa.string()), ("bound_function", pa.string()), ("binding_rule", pa.string()),
    ("tests_visible", pa.int64()), ("tests_visible_passed", pa.int64()),
    ("tests_hidden", pa.int64()), ("tests_hidden_passed", pa.int64()),
    ("tests_augmented", pa.int64()), ("tests_augmented_passed", pa.int64()),
    ("probe_gate", pa.string()), ("program_gate", pa.string()),
    ("reused_tests_run", pa.bool_()), ("stated_outputs", pa.string()),
    ("stated_output_mismatch", pa.string()), ("admission", pa.string()), ("verified", pa.bool_()),
])
SELECTION_SCHEMA = pa.schema([
    ("judge_winner", pa.bool_()), ("final_score", pa.float64()), ("judge_pick", pa.string()),
    ("selected", pa.bool_()), ("selection_rule", pa.string()), ("flipped", pa.bool_()),
    ("replaced_judge_pick", pa.bool_()),
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


def graded_columns(grades: Sequence[Graded], min_pass_fraction: float) -> dict[str, pa.Array]:
    """The verdict and grade columns of the verify schema (verify's and repair's rows):
    ``admission`` is where execution stops the answer (``Graded.admission``), ``verified``
    whether it gets through."""
    columns = verdict_columns([g.verdict for g in grades])
    values: dict[str, list] = {f.name: [] for f in GRADE_SCHEMA}
    for g in grades:
        b = g.binding
        values["entry_point"].append(b.entry_point if b else None)
        values["bound_function"].append(b.bound_function if b else None)
        values["binding_rule"].append(b.rule if b else None)
        for split, (passed, total) in g.counts.items():
            values[f"tests_{split}"].append(total)
            values[f"tests_{split}_passed"].append(passed)
        values["probe_gate"].append(g.probe_gate)
        values["program_gate"].append(g.program_gate)
        values["reused_tests_run"].append(g.reused)
        values["stated_outputs"].append(g.stated_outputs)
        values["stated_output_mismatch"].append(g.stated_output_mismatch)
        values["admission"].append(g.admission(min_pass_fraction))
        values["verified"].append(values["admission"][-1] == VERIFIED)
    columns.update({f.name: pa.array(values[f.name], f.type) for f in GRADE_SCHEMA})
    return columns


def verify_stats(rows: list[dict], grades: Sequence[Graded], sel: list[dict],
                 min_pass_fraction: float) -> dict[str, float]:
    """Per-model tested/passed counts and the judge-vs-execution counters of a shard.

    Counts only: the runner adds shard stats up, so a rate here would be summed (a pass rate is
    ``passed.M / tested.M`` of the stage's totals).
    """
    stats: dict[str, float] = defaultdict(float)
    no_tests, winners_failed = set(), 0
    for row, g, s in zip(rows, grades, sel):
        model, v = row["model"], g.verdict
        stats[f"probe_gate.{g.probe_gate}"] += 1
        stats["reused_tests_run"] += g.reused
        stats[f"program_gate.{g.program_gate}"] += 1
        if g.stated_outputs != NO_STATED_OUTPUT:
            stats[f"stated_outputs.{g.stated_outputs}"] += 1
        step = g.admission(min_pass_fraction)
        stats[f"admission.{step}"] += 1
        stats[f"admission.selected.{step}"] += s["selected"]
        if g.binding is not None:
            stats[f"binding.{g.binding.rule}"] += 1
        if v.status == NO_TESTS:
            no_tests.add(row["instruction_id"])
            continue
        stats[f"tested.{model}"] += 1
        stats[f"passed.{model}"] += v.status == PASSED
        stats[f"verified.{model}"] += step == VERIFIED
        stats[f"no_entry_point.{model}"] += v.status == NO_ENTRY_POINT
        winners_failed += s["judge_winner"] and step != VERIFIED
        stats["selected_passed"] += s["selected"] and step == VERIFIED
    stats["winners_failed"] = float(winners_failed)
    stats["flipped"] = float(sum(s["flipped"] for s in sel))
    stats["no_tests"] = float(len(no_tests))
    stats["selected"] = float(sum(s["selected"] for s in sel))
    stats["replaced_judge_pick"] = float(sum(s["replaced_judge_pick"] for s in sel))
    return dict(stats)


def run(table: pa.Table, cfg: VerifyConfig, ctx: StageContext) -> StageResult:
    """Grade every answer against its instruction's suite, then select."""
    ids = sorted(set(table.column("instruction_id").to_pylist()))
    wanted = [*SUITE_COLUMNS, *EVIDENCE_COLUMNS] if cfg.reuse_tests_runs else list(SUITE_COLUMNS)
    tests = ctx.read("tests", columns=wanted, instruction_ids=ids).to_pylist()
    suites = suites_of_rows(tests)
    runs = recorded_runs(tests) if cfg.reuse_tests_runs else {}
    rate_rows = ctx.read("rate", columns=["instruction_id", "model", "final_score", "winner"],
                         instruction_ids=ids).to_pylist()
    rate = {(r["instruction_id"], r["model"]): (r["final_score"], r["winner"]) for r in rate_rows}
    rows = table.select(["instruction_id", "model", "code"]).to_pylist()
    tasks = table_tasks(table)
    grades = grade_any(ctx.sandbox(), [(r["code"], suites.get(r["instruction_id"])) for r in rows],
                       tasks, timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb,
                       fail_fast=cfg.fail_fast,
                       recorded=[runs.get((r["instruction_id"], r["model"])) for r in rows],
                       stated_outputs_at=cfg.min_pass_fraction)
    ctx.advance(len(rows))
    sel = _select(rows, grades, rate, cfg)
    columns = graded_columns(grades, cfg.min_pass_fraction)
    for f in SELECTION_SCHEMA:
        values = [cfg.rule] * len(rows) if f.name == "selection_rule" else [s[f.name] for s in sel]
        columns[f.name] = pa.array(values, f.type)
    stats = verify_stats(rows, grades, sel, cfg.min_pass_fraction)
    stats.update(language_stats(rows, grades, tasks, cfg.min_pass_fraction))
    return StageResult(table=with_columns(table, columns), stats=stats)


STAGE = StageSpec(
    name="verify", config=VerifyConfig, run=run, source="answer",
    reads={"tests": (*SUITE_COLUMNS, *EVIDENCE_COLUMNS),
           "rate": ("instruction_id", "model", "final_score", "winner")},
    inputs=("instruction_id", "model", "code"),
    outputs=(*VERDICT_SCHEMA.names, *GRADE_SCHEMA.names, *SELECTION_SCHEMA.names),
)
