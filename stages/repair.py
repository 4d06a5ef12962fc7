"""Stage ``repair``: a selected answer that failed its tests goes back to its author, with feedback.

Input (source ``verify``): the verify rows, one per (instruction_id, model). Reads ``tests`` (the
trusted tests, the same ones verify ran).

Debugging feedback only (the one feedback stage of ELABORATION / CP-Agent a pipeline can produce
without a human): the author sees its own answer, then how it failed: tests passed, the failing
test, the error and traceback line, what the tested expression returned (a sandboxed probe) and
the program's output. No reference solution is ever shown. The reply's code is re-verified with
the same tests through ``stages.verify.execute``; up to ``max_rounds`` rounds continue the same
conversation until the tests pass.

Output: the verify rows and columns, where a repair succeeded with ``response, code`` and the
verdict columns (``status, tests_passed, ...``) replaced by the repaired, re-verified version,
plus ``repair_rounds`` (rounds tried; 0 when not attempted), ``repaired`` and
``repair_trajectory`` (JSON list: round 0 is the original answer, then per round the feedback
shown, the reply, the code, its verdict or parse error; null when not attempted).
Stats (counts, summed over shards): ``repair_attempted``, ``repaired``, ``repaired_within.<k>``
(Refine@k = repaired_within.k / repair_attempted) and the same per model.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pyarrow as pa
from pydantic import Field

from pipeline.stage import StageConfig, StageContext, StageResult, StageSpec
from stages.prompt_templates import fill, load_template
from stages.test_parsing import extract_program, probe_program
from stages.verify import (
    PASSED,
    TRUSTED_TEST_COLUMNS,
    Verdict,
    VerifyConfig,
    execute,
    trusted_tests,
    verdict_columns,
    with_columns,
)

REPAIRABLE = ("failed", "error", "timeout", "memory")


class RepairConfig(StageConfig):
    """Rounds and sampling of the repair stage (limits default to the verify stage's)."""

    max_rounds: int = Field(2, ge=0, le=10, description="R: repair attempts per failing answer")
    max_tokens: int = Field(768, ge=16)
    temperature: float = Field(0.0, ge=0)
    timeout_s: float | None = Field(None, gt=0, description="None: verify.timeout_s")
    memory_mb: int | None = Field(None, ge=32, description="None: verify.memory_mb")
    fail_fast: bool | None = Field(None, description="None: verify.fail_fast")
    probe: bool = Field(True, description="run the failing expression to show what it returned")


def feedback_text(v: Verdict | None, parse_error: str | None = None,
                  returned: tuple[str, str] | None = None) -> str:
    """The debugging feedback after one attempt.

    Args:
        v: the attempt's verdict (``None`` when its code could not be extracted).
        parse_error: why no code could be extracted from the reply.
        returned: ``(expression, repr of its value)`` from the probe, when available.
    """
    if v is None:
        return (f"Your reply did not contain Python code that parses ({parse_error}). Reply with "
                "the complete corrected code in one ```python code block.")
    output = ""
    if returned is not None:
        output += f"\n`{returned[0]}` returned: {returned[1]}\n"
    if v.stdout_tail.strip():
        output += f"\nOutput:\n```\n{v.stdout_tail.strip()[-1500:]}\n```\n"
    if v.stderr_tail.strip():
        output += f"\nStandard error:\n```\n{v.stderr_tail.strip()[-1500:]}\n```\n"
    # one pass: a model-written test or output that contains "{output}" reaches the model as is
    return fill(load_template("repair_feedback.txt"), tests_passed=str(v.tests_passed),
                tests_total=str(v.tests_total), failed_test=v.failed_test or "(none)",
                error_class=v.error_class or v.status,
                error=(v.error_message or v.status).strip()[-2000:], output=output)


def _verdict_from_row(row: dict) -> Verdict:
    return Verdict(row["status"], row["tests_passed"] or 0, row["tests_total"] or 0,
                   row["error_class"], row["error_message"], row["failed_test"],
                   row["stdout_tail"] or "", row["stderr_tail"] or "", row["duration_s"] or 0.0)


def _probe(pool: Any, items: list[tuple[str, Verdict]],
           limits: dict) -> list[tuple[str, str] | None]:
    """What the failing test's expression returned, per (code, verdict); sandboxed."""
    programs = [probe_program(v.failed_test) if v.failed_test and v.error_class == "assertion"
                else None for _, v in items]
    todo = [i for i, p in enumerate(programs) if p is not None]
    jobs = [(items[i][0], [programs[i][0]]) for i in todo]
    results = execute(pool, jobs, **limits) if todo else []
    out: list[tuple[str, str] | None] = [None] * len(items)
    for i, res in zip(todo, results):
        if res.status == PASSED and res.stdout_tail.strip():
            out[i] = (programs[i][1], res.stdout_tail.strip().splitlines()[-1][:300])
    return out


def repair_loop(targets: list[dict], tests: dict[str, list[str]], backend_for: Any, pool: Any,
                cfg: RepairConfig, limits: dict, seed: int) -> list[dict]:
    """Run up to ``cfg.max_rounds`` feedback rounds for each target row.

    Args:
        targets: verify rows to repair (``instruction_id, instruction, model, response, code``
            and the verdict columns).
        tests: trusted tests per instruction id.
        backend_for: ``model_id -> backend`` (``ctx.backend``).
        pool: the sandbox pool.
        limits: ``timeout_s, memory_mb, fail_fast`` for ``execute``.

    Returns:
        Per target: ``{"rounds", "repaired", "response", "code", "verdict", "trajectory"}``;
        ``verdict``/``response``/``code`` are the passing attempt's when repaired.
    """
    from pipeline.backends.base import SamplingParams

    params = SamplingParams(n=1, temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=seed)
    state = []
    for t in targets:
        verdict = _verdict_from_row(t)
        conversation = [{"role": "system", "content": load_template("repair_system.txt")},
                        {"role": "user", "content": t["instruction"]},
                        {"role": "assistant", "content": t["response"] or ""}]
        original = {"round": 0, "response": t["response"], "code": t["code"],
                    **_verdict_dict(verdict)}
        state.append({"rounds": 0, "repaired": False, "response": t["response"],
                      "code": t["code"], "verdict": verdict, "last": verdict,
                      "last_code": t["code"], "parse_error": None, "trajectory": [original],
                      "conversation": conversation})
    for k in range(1, cfg.max_rounds + 1):
        active = [i for i, s in enumerate(state) if not s["repaired"]]
        if not active:
            break
        probes = _probe(pool, [(state[i]["last_code"], state[i]["last"]) for i in active], limits) \
            if cfg.probe else [None] * len(active)
        for i, returned in zip(active, probes):
            s = state[i]
            s["feedback"] = feedback_text(s["last"] if s["parse_error"] is None else None,
                                          s["parse_error"], returned)
            s["conversation"].append({"role": "user", "content": s["feedback"]})
        by_model: dict[str, list[int]] = defaultdict(list)
        for i in active:
            by_model[targets[i]["model"]].append(i)
        replies: dict[int, Any] = {}
        for model, idx in by_model.items():
            out = backend_for(model).chat([list(state[i]["conversation"]) for i in idx], params)
            replies.update({i: r[0] for i, r in zip(idx, out)})
        parsed = {i: extract_program(replies[i].text) if replies[i].finish_reason != "error"
                  else (None, f"backend error: {replies[i].error}") for i in active}
        runnable = [i for i in active if parsed[i][0] is not None]
        verdicts = dict(zip(runnable, execute(
            pool, [(parsed[i][0], tests[targets[i]["instruction_id"]]) for i in runnable],
            **limits)))
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
                v = verdicts[i]
                s.update(parse_error=None, last=v, last_code=code)
                step.update(_verdict_dict(v))
                if v.status == PASSED:
                    s.update(repaired=True, response=reply.text, code=code, verdict=v)
            s["trajectory"].append(step)
    return [{key: s[key] for key in ("rounds", "repaired", "response", "code", "verdict",
                                     "trajectory")} for s in state]


def _verdict_dict(v: Verdict) -> dict:
    return {"status": v.status, "tests_passed": v.tests_passed, "tests_total": v.tests_total,
            "error_class": v.error_class, "error_message": v.error_message}


def _limits(cfg: RepairConfig) -> dict:
    # a run fills these in from its verify section; a bare RepairConfig takes verify's defaults
    verify = VerifyConfig()
    return {"timeout_s": cfg.timeout_s or verify.timeout_s,
            "memory_mb": cfg.memory_mb or verify.memory_mb,
            "fail_fast": verify.fail_fast if cfg.fail_fast is None else cfg.fail_fast}


def run(table: pa.Table, cfg: RepairConfig, ctx: StageContext) -> StageResult:
    """Repair the selected answers that failed; re-verify; keep every row."""
    rows = table.to_pylist()
    target_idx = [i for i, r in enumerate(rows)
                  if r["selected"] and r["status"] in REPAIRABLE and r["tests_total"]]
    results: dict[int, dict] = {}
    if target_idx and cfg.max_rounds:
        ids = sorted({rows[i]["instruction_id"] for i in target_idx})
        tests = trusted_tests(ctx.read("tests", instruction_ids=ids))
        out = repair_loop([rows[i] for i in target_idx], tests, ctx.backend, ctx.sandbox(), cfg,
                          _limits(cfg), ctx.seed)
        results = dict(zip(target_idx, out))
    ctx.advance(len(rows))

    verdicts = [_verdict_from_row(r) for r in rows]
    responses, codes = [r["response"] for r in rows], [r["code"] for r in rows]
    stats: dict[str, float] = defaultdict(float, repair_attempted=0.0, repaired=0.0)
    for i, res in results.items():
        model = rows[i]["model"]
        stats["repair_attempted"] += 1
        stats[f"repair_attempted.{model}"] += 1
        if res["repaired"]:
            verdicts[i], responses[i], codes[i] = res["verdict"], res["response"], res["code"]
            stats["repaired"] += 1
            stats[f"repaired.{model}"] += 1
    for k in range(1, cfg.max_rounds + 1):
        stats[f"repaired_within.{k}"] = float(sum(r["repaired"] and r["rounds"] <= k
                                                  for r in results.values()))
    columns = verdict_columns(verdicts)
    columns["response"] = pa.array(responses, pa.string())
    columns["code"] = pa.array(codes, pa.string())
    columns["repair_rounds"] = pa.array([results[i]["rounds"] if i in results else 0
                                         for i in range(len(rows))], pa.int64())
    columns["repaired"] = pa.array([i in results and results[i]["repaired"]
                                    for i in range(len(rows))], pa.bool_())
    columns["repair_trajectory"] = pa.array(
        [json.dumps(results[i]["trajectory"]) if i in results else None for i in range(len(rows))],
        pa.string())
    return StageResult(table=with_columns(table, columns), stats=dict(stats))


STAGE = StageSpec(
    name="repair", config=RepairConfig, run=run, source="verify",
    reads={"tests": TRUSTED_TEST_COLUMNS}, prompts=("repair_*.txt",),
    uses_models=True,
    inputs=("instruction_id", "instruction", "model", "response", "code", "status",
            "tests_passed", "tests_total", "selected"),
    outputs=("response", "code", "status", "tests_passed", "tests_total", "repair_rounds",
             "repaired", "repair_trajectory"),
)
