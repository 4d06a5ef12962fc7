"""Stage ``repair``: a selected answer that failed its tests goes back to its author, with feedback.

Input (source ``verify``): the verify rows, one per (instruction_id, model). Reads ``tests`` (each
instruction's suite, the same one verify graded on; ``arenaforge.stages.verification.suites``).

Debugging feedback only (the one feedback stage of ELABORATION / CP-Agent a pipeline can produce
without a human), and it never leaks what certifies the answer: the author sees its own answer,
then how it failed on the **visible** tests (the failing test, the error and traceback line, what
the tested expression returned from a sandboxed probe, the program's output); a failure on hidden
or augmented tests is reported without its text, call, expected value or output ("fails N hidden
checks, error class X"). No reference solution is ever shown. Every attempt is graded again
(``arenaforge.stages.verification.grading.grade``, bound to the entry point); an attempt counts as repaired only when it
passes the hidden + augmented tests it never saw, and the visible ones too. Up to ``max_rounds``
rounds continue the same conversation until it does.

Targets: selected answers that verify did not accept (``admission`` ``no_usable_code``,
``example_failed`` or ``below_pass_fraction``) and whose instruction has trusted tests that do
not contradict each other: a ``contradictory_tests`` suite is never a target (its feedback would
push the answer towards one side of the contradiction). A repaired attempt must be verified
(the example and ``min_pass_fraction`` of the trusted tests, as verify decides).

A task that is not a Python function (its ``language`` and ``task_kind``) is repaired the same
way in its own language: graded by ``arenaforge.stages.verification.grading``, the
feedback (``task_feedback``, templates ``repair_task_*.txt``) shows the failing visible case as
data, or the compiler's message when the answer did not compile, and asks for one block of that
language's code (``extract_answer``); nothing is probed.

Output: the verify rows and columns; where a repair succeeded, ``response`` (the repaired program
alone, ``plain_answer``: nothing of the repair dialogue), ``code`` and the verify
grade columns (``status, tests_*, probe_gate, program_gate, bound_function, ...``) are the
repaired answer's; plus ``repair_rounds`` (rounds tried; 0 when not attempted), ``repaired`` and
``repair_trajectory`` (JSON list: round 0 is the original answer, then per round the feedback
shown, the reply, the code, its verdict or parse error; null when not attempted).
Stats (counts, summed over shards): ``repair_attempted``, ``repaired``, ``repaired_within.<k>``
and the same per model; ``refine.tested`` (selected answers with trusted tests) and
``refine.passed_within.<k>`` for k = 0..R (k = 0: the original passed), so
Refine@k = ``refine.passed_within.k / refine.tested``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pyarrow as pa
from arenaforge.pipeline.prompts import fill, load_template
from arenaforge.pipeline.stage import StageConfig, StageContext, StageResult, StageSpec, per_model
from arenaforge.pipeline.statuses import PASSED
from arenaforge.stages.arena.judge_logits import BACKEND_ERROR
from arenaforge.stages.common.code_extract import extract_code
from arenaforge.stages.common.task_kinds import (
    FUNCTION,
    PROGRAM,
    PYTHON,
    display,
    fence,
    table_tasks,
    uses_python_path,
)
from arenaforge.stages.verification.grading import (
    COMPILE_ERROR_CLASS,
    REPAIRABLE,
    Graded,
    grade_any,
)
from arenaforge.stages.verification.suites import SUITE_COLUMNS, Suite, trusted_suites
from arenaforge.stages.verification.test_parsing import extract_program, probe_program
from arenaforge.stages.verification.verify import (
    GRADE_SCHEMA,
    VERDICT_SCHEMA,
    VerifyConfig,
    execute,
    graded_columns,
    with_columns,
)
from pydantic import Field


class RepairConfig(StageConfig):
    """Rounds and sampling of the repair stage (limits default to the verify stage's)."""

    max_rounds: int = Field(2, ge=0, le=10, description="R: repair attempts per failing answer")
    max_tokens: int = Field(768, ge=16)
    temperature: float = Field(0.0, ge=0)
    timeout_s: float | None = Field(None, gt=0, description="None: verify.timeout_s")
    memory_mb: int | None = Field(None, ge=32, description="None: verify.memory_mb")
    fail_fast: bool | None = Field(None, description="None: verify.fail_fast")
    min_pass_fraction: float | None = Field(
        None, gt=0, le=1, description="None: verify.min_pass_fraction")
    probe: bool = Field(True, description="run the failing expression to show what it returned")


def feedback_text(g: Graded | None, suite: Suite | None = None, parse_error: str | None = None,
                  returned: tuple[str, str] | None = None,
                  task: tuple[str, str] = (PYTHON, FUNCTION)) -> str:
    """The debugging feedback after one attempt; nothing of a hidden test reaches it.

    Args:
        g: the attempt's grade (``None`` when its code could not be extracted).
        suite: the instruction's suite (entry point and signature for an unbound answer).
        parse_error: why no code could be extracted from the reply.
        returned: ``(expression, repr of its value)`` from the probe of the failing visible test.
        task: ``(language, task_kind)``; a task that is not a Python function gets the same
            feedback in its language's words (``task_feedback``).
    """
    if not uses_python_path(*task):
        return task_feedback(g, task, parse_error)
    # one pass each: a model-written test or output that contains "{output}" reaches the model
    # as it is
    if g is None:
        return fill(load_template("repair_no_code.txt"), parse_error=parse_error or "")
    if g.binding is None or g.binding.bound_function is None:
        entry = (g.binding.entry_point if g.binding else None) or (suite and suite.entry_point)
        signature = (suite.signature if suite else None) or f"def {entry}(...)"
        return fill(load_template("repair_no_entry_point.txt"), entry_point=str(entry),
                    signature=signature)
    hidden = _hidden_line(g)
    v = g.visible
    if v is None or v.status == PASSED:
        return fill(load_template("repair_feedback_hidden.txt"),
                    tests_total=str(v.tests_total if v else 0),
                    hidden_failed=str(g.hidden_failed), error_class=g.hidden_error or "unknown")
    output = ""
    if returned is not None:
        output += f"\n`{returned[0]}` returned: {returned[1]}\n"
    output += _tails(v)
    return fill(load_template("repair_feedback.txt"), tests_passed=str(v.tests_passed),
                tests_total=str(v.tests_total), failed_test=v.failed_test or "(none)",
                error_class=v.error_class or v.status,
                error=(v.error_message or v.status).strip()[-2000:], output=output,
                hidden=hidden)


def _hidden_line(g: Graded) -> str:
    """How many certifying tests failed and how, never their text (empty when none did)."""
    if not g.hidden_failed:
        return ""
    return fill(load_template("repair_hidden_line.txt"), hidden_failed=str(g.hidden_failed),
                error_class=g.hidden_error or "unknown") + "\n"


def _tails(v: Any) -> str:
    """The failing run's standard output and error, their last 1,500 characters each."""
    out = ""
    if v.stdout_tail.strip():
        out += f"\nOutput:\n```\n{v.stdout_tail.strip()[-1500:]}\n```\n"
    if v.stderr_tail.strip():
        out += f"\nStandard error:\n```\n{v.stderr_tail.strip()[-1500:]}\n```\n"
    return out


def task_feedback(g: Graded | None, task: tuple[str, str], parse_error: str | None = None
                  ) -> str:
    """``feedback_text`` for a task that is not a Python function: the failing visible case
    (as data), its error and output, the count of hidden failures without their text; a
    compile error with the compiler's message. Nothing is probed (there is no expression)."""
    language, kind = task
    words = {"language": display(language), "fence": fence(language),
             "keep": ("Keep it one whole program that reads standard input and writes standard "
                      "output." if kind == PROGRAM else
                      "Keep the same function name and signature.")}
    if g is None:
        return fill(load_template("repair_task_no_code.txt"), parse_error=parse_error or "",
                    **words)
    v = g.visible
    if g.verdict.error_class == COMPILE_ERROR_CLASS:
        error = "\n".join(x for x in (g.verdict.error_message, g.verdict.stderr_tail.strip())
                          if x)
        return fill(load_template("repair_task_compile_error.txt"),
                    error_class=COMPILE_ERROR_CLASS, error=error.strip()[-2000:], **words)
    if v is None or v.status == PASSED:
        return fill(load_template("repair_task_feedback_hidden.txt"),
                    tests_total=str(v.tests_total if v else 0),
                    hidden_failed=str(g.hidden_failed), error_class=g.hidden_error or "unknown",
                    **words)
    hidden = _hidden_line(g)
    output = _tails(v)
    return fill(load_template("repair_task_feedback.txt"), tests_passed=str(v.tests_passed),
                tests_total=str(v.tests_total), failed_test=v.failed_test or "(none)",
                error_class=v.error_class or v.status,
                error=(v.error_message or v.status).strip()[-2000:], output=output,
                hidden=hidden, **words)


def extract_answer(text: str | None, task: tuple[str, str]) -> tuple[str | None, str | None]:
    """``(code, None)`` of a repair reply, or ``(None, why not)``: a Python task's program
    must parse (``extract_program``); another language's is its fenced blocks in that
    language (the answer stage's ``extract_code``)."""
    language = task[0]
    if language == PYTHON:
        return extract_program(text)
    if text is None or not text.strip():
        return None, "empty output"
    code = extract_code(text, language)
    return (code, None) if code else (None, f"no {display(language)} code block in the reply")


def _probe(pool: Any, items: list[tuple[str, Graded]],
           limits: dict) -> list[tuple[str, str] | None]:
    """What the failing visible test's expression returned, per (code, grade); sandboxed."""
    from arenaforge.stages.verification.entry_points import bound_code

    programs = []
    for _, g in items:
        v = g.visible
        ok = (v is not None and v.failed_test and v.error_class == "assertion"
              and g.binding is not None and g.binding.bound_function is not None)
        programs.append(probe_program(v.failed_test) if ok else None)
    todo = [i for i, p in enumerate(programs) if p is not None]
    jobs = [(bound_code(items[i][0], items[i][1].binding), [programs[i][0]]) for i in todo]
    results = execute(pool, jobs, **limits) if todo else []
    out: list[tuple[str, str] | None] = [None] * len(items)
    for i, res in zip(todo, results):
        if res.status == PASSED and res.stdout_tail.strip():
            out[i] = (programs[i][1], res.stdout_tail.strip().splitlines()[-1][:300])
    return out


def _certified(g: Graded, suite: Suite, min_pass_fraction: float) -> bool:
    # verified, and something it never saw certifies it
    return g.verified(min_pass_fraction) and bool(suite.certifying)


def repair_loop(targets: list[dict], suites: dict[str, Suite], backend_for: Any, pool: Any,
                cfg: RepairConfig, limits: dict, seed: int,
                tasks: list[tuple[str, str]] | None = None, fan_out: Any = None) -> list[dict]:
    """Run up to ``cfg.max_rounds`` feedback rounds for each target row.

    Args:
        targets: verify rows to repair (``instruction_id, instruction, model, response, code``).
        suites: each instruction's suite (``arenaforge.stages.verification.suites.trusted_suites``).
        backend_for: ``model_id -> backend`` (``ctx.backend``).
        pool: the sandbox pool.
        limits: ``timeout_s, memory_mb, fail_fast`` for the sandbox.
        tasks: each target's ``(language, task_kind)`` (None: every one a Python function).
        fan_out: ``(models, model -> replies) -> {model: replies}`` (``model_fanout.per_model``:
            at once for served models); None: one model after another.

    Returns:
        Per target: ``{"rounds", "repaired", "response", "code", "graded", "trajectory"}``;
        ``graded``/``response``/``code`` are the certified attempt's when repaired (``graded``
        is the original's otherwise).
    """
    from arenaforge.pipeline.backends.base import SamplingParams

    params = SamplingParams(n=1, temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=seed)
    suite_of = [suites[t["instruction_id"]] for t in targets]
    tasks = list(tasks) if tasks is not None else [(PYTHON, FUNCTION)] * len(targets)
    python = [uses_python_path(*task) for task in tasks]
    # the original is graded again here: verify's row holds its first failure, which may be a
    # hidden test's, and feedback needs the first visible one
    originals = grade_any(pool, [(t["code"], s) for t, s in zip(targets, suite_of)], tasks,
                          **limits)
    state = []
    for t, g, task, py in zip(targets, originals, tasks, python):
        system = (load_template("repair_system.txt") if py else
                  fill(load_template("repair_task_system.txt"), language=display(task[0])))
        conversation = [{"role": "system", "content": system},
                        {"role": "user", "content": t["instruction"]},
                        {"role": "assistant", "content": t["response"] or ""}]
        original = {"round": 0, "response": t["response"], "code": t["code"], **_grade_dict(g)}
        state.append({"rounds": 0, "repaired": False, "response": t["response"],
                      "code": t["code"], "graded": g, "last": g, "last_code": t["code"],
                      "parse_error": None, "trajectory": [original],
                      "conversation": conversation})
    for k in range(1, cfg.max_rounds + 1):
        active = [i for i, s in enumerate(state) if not s["repaired"]]
        if not active:
            break
        probed = [i for i in active if python[i]]  # a Python expression can be probed
        probes = dict(zip(probed, _probe(
            pool, [(state[i]["last_code"], state[i]["last"]) for i in probed], limits)
            if cfg.probe and probed else [None] * len(probed)))
        for i in active:
            s = state[i]
            s["feedback"] = feedback_text(s["last"] if s["parse_error"] is None else None,
                                          suite_of[i], s["parse_error"], probes.get(i),
                                          tasks[i])
            s["conversation"].append({"role": "user", "content": s["feedback"]})
        by_model: dict[str, list[int]] = defaultdict(list)
        for i in active:
            by_model[targets[i]["model"]].append(i)

        convs = {m: [list(state[i]["conversation"]) for i in idx] for m, idx in by_model.items()}

        def ask(model: str, convs: dict = convs) -> list:
            return backend_for(model).chat(convs[model], params)

        models = list(by_model)
        outs = fan_out(models, ask) if fan_out else {m: ask(m) for m in models}
        replies: dict[int, Any] = {i: r[0] for m in models
                                   for i, r in zip(by_model[m], outs[m])}
        parsed = {i: extract_answer(replies[i].text, tasks[i])
                  if replies[i].finish_reason != "error"
                  else (None, f"{BACKEND_ERROR}{replies[i].error}") for i in active}
        runnable = [i for i in active if parsed[i][0] is not None]
        # a repaired answer must print what its own demo says, as a first answer must
        grades = dict(zip(runnable, grade_any(
            pool, [(parsed[i][0], suite_of[i]) for i in runnable],
            [tasks[i] for i in runnable], **limits, stated_outputs_at=_pass_fraction(cfg))))
        for i in active:
            s, reply = state[i], replies[i]
            code, error = parsed[i]
            s["rounds"] = k
            s["conversation"].append({"role": "assistant", "content": reply.text})
            step = {"round": k, "feedback": s["feedback"], "response": reply.text,
                    "code": code, "parse_error": error}
            if code is None:
                s["parse_error"] = error
                step.update(status=None)
            else:
                g = grades[i]
                s.update(parse_error=None, last=g, last_code=code)
                step.update(_grade_dict(g))
                if _certified(g, suite_of[i], _pass_fraction(cfg)):
                    s.update(repaired=True, response=plain_answer(code, fence(tasks[i][0])),
                             code=code, graded=g)
            s["trajectory"].append(step)
    return [{key: s[key] for key in ("rounds", "repaired", "response", "code", "graded",
                                     "trajectory")} for s in state]


def plain_answer(code: str, language: str = "python") -> str:
    """The response a repaired answer is emitted with: its program alone, as a first answer to
    the instruction would give it. The repair reply speaks to the feedback ("Here is the
    corrected code ... now passes the tests"), which must not reach an SFT target; the reply
    itself stays in ``repair_trajectory``.

    >>> plain_answer("def f():\n    return 1\n")
    '```python\ndef f():\n    return 1\n```'
    """
    return f"```{language}\n{code.strip()}\n```"


def _grade_dict(g: Graded) -> dict:
    v = g.verdict
    return {"status": v.status, "tests_passed": v.tests_passed, "tests_total": v.tests_total,
            "error_class": v.error_class, "error_message": v.error_message,
            "tests_visible_passed": g.counts["visible"][0],
            "tests_hidden_passed": g.counts["hidden"][0],
            "tests_augmented_passed": g.counts["augmented"][0],
            "probe_gate": g.probe_gate, "program_gate": g.program_gate}


def _pass_fraction(cfg: RepairConfig) -> float:
    return cfg.min_pass_fraction or VerifyConfig().min_pass_fraction


def _limits(cfg: RepairConfig) -> dict:
    # a run fills these in from its verify section; a bare RepairConfig takes verify's defaults
    verify = VerifyConfig()
    return {"timeout_s": cfg.timeout_s or verify.timeout_s,
            "memory_mb": cfg.memory_mb or verify.memory_mb,
            "fail_fast": verify.fail_fast if cfg.fail_fast is None else cfg.fail_fast}


def run(table: pa.Table, cfg: RepairConfig, ctx: StageContext) -> StageResult:
    """Repair the selected answers that failed; grade again; keep every row."""
    rows = table.to_pylist()
    # a contradictory suite or one without tests is never a target: its feedback would push
    # the answer towards one side of a contradiction, or towards nothing
    target_idx = [i for i, r in enumerate(rows)
                  if r["selected"] and r["admission"] in REPAIRABLE and r["tests_total"]]
    results: dict[int, dict] = {}
    if target_idx and cfg.max_rounds:
        ids = sorted({rows[i]["instruction_id"] for i in target_idx})
        suites = trusted_suites(ctx.read("tests", columns=list(SUITE_COLUMNS),
                                         instruction_ids=ids))
        tasks = table_tasks(table, target_idx)
        out = repair_loop([rows[i] for i in target_idx], suites, ctx.backend, ctx.sandbox(),
                          cfg, _limits(cfg), ctx.seed, tasks,
                          fan_out=lambda models, call: per_model(ctx, models, call))
        results = dict(zip(target_idx, out))
    ctx.advance(len(rows))

    repaired = {i: res for i, res in results.items() if res["repaired"]}
    names = [*VERDICT_SCHEMA.names, *GRADE_SCHEMA.names]
    new = graded_columns([res["graded"] for res in repaired.values()], _pass_fraction(cfg))
    for k, i in enumerate(repaired):
        rows[i].update({name: new[name][k].as_py() for name in names},
                       response=repaired[i]["response"], code=repaired[i]["code"])
    types = {f.name: f.type for f in (*VERDICT_SCHEMA, *GRADE_SCHEMA)}
    columns = {name: pa.array([r.get(name) for r in rows], types[name]) for name in names}
    columns["response"] = pa.array([r["response"] for r in rows], pa.string())
    columns["code"] = pa.array([r["code"] for r in rows], pa.string())
    columns["repair_rounds"] = pa.array([results[i]["rounds"] if i in results else 0
                                         for i in range(len(rows))], pa.int64())
    columns["repaired"] = pa.array([i in repaired for i in range(len(rows))], pa.bool_())
    columns["repair_trajectory"] = pa.array(
        [json.dumps(results[i]["trajectory"]) if i in results else None for i in range(len(rows))],
        pa.string())
    return StageResult(table=with_columns(table, columns),
                       stats=repair_stats(rows, table, results, cfg.max_rounds))


def repair_stats(rows: list[dict], table: pa.Table, results: dict[int, dict],
                 max_rounds: int) -> dict[str, float]:
    """Counts of a shard (they add up over shards): attempts, repairs, Refine@k numerators."""
    stats: dict[str, float] = defaultdict(float, repair_attempted=0.0, repaired=0.0)
    for i, res in results.items():
        model = rows[i]["model"]
        stats["repair_attempted"] += 1
        stats[f"repair_attempted.{model}"] += 1
        if res["repaired"]:
            stats["repaired"] += 1
            stats[f"repaired.{model}"] += 1
    for k in range(1, max_rounds + 1):
        stats[f"repaired_within.{k}"] = float(sum(r["repaired"] and r["rounds"] <= k
                                                  for r in results.values()))
    original = table.column("verified").to_pylist()
    tested = [i for i, r in enumerate(rows) if r["selected"] and r["tests_total"]]
    stats["refine.tested"] = float(len(tested))
    for k in range(max_rounds + 1):
        stats[f"refine.passed_within.{k}"] = float(sum(
            original[i] or (i in results and results[i]["repaired"]
                                      and results[i]["rounds"] <= k) for i in tested))
    return dict(stats)


STAGE = StageSpec(
    name="repair", config=RepairConfig, run=run, source="verify",
    reads={"tests": SUITE_COLUMNS}, prompts=("repair_*.txt",),
    uses_models=True,
    inputs=("instruction_id", "instruction", "model", "response", "code", "status",
            "tests_passed", "tests_total", "selected", "admission"),
    outputs=("response", "code", *VERDICT_SCHEMA.names, *GRADE_SCHEMA.names, "repair_rounds",
             "repaired", "repair_trajectory"),
)
