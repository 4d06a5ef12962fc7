"""Stage ``tests``: every expert writes tests and an input generator; the evidence decides trust.

A task that is not a Python function (another ``language``, or ``task_kind`` ``program``;
``arenaforge.stages.common.task_kinds``) takes the language-neutral path
(``arenaforge.stages.verification.case_tests``): the authors write cases as data, every
answer runs on them in its own language's harness, and the same evidence rules decide. What
follows is the Python path, which a Python function takes as it always did.

Input (source ``answer``, one row per (instruction_id, model)): ``instruction_id, instruction,
model, code``. The entry point the tests call is the function the instruction names when it
names one (``arenaforge.stages.verification.entry_points.instruction_function_name``), else the public function most
answers define; the authors see the task and that signature (named as the tests will call it),
never an answer. Each author's reply is parsed into single asserts (calls under the author's
own name for the function are renamed to the entry point) and, with ``augment``, its
``generate_inputs()`` (``arenaforge.stages.verification.augment``). A reply without a usable test is a value
(``parse_error``, raw text kept).

Execution (the sandbox, two batches per shard): each generator runs and prints its inputs
(literals only, at most ``inputs_per_author``); then every candidate, bound to the entry point
(``arenaforge.stages.verification.entry_points.bind``; an unbound candidate is not run), runs every written test,
every generated input and the two probe tests verify runs (``arenaforge.stages.verification.grading.probes``) in one
suite job. What those runs show is kept for verify (``arenaforge.stages.verification.recorded_runs``), which then does
not run an answer again that passed every trusted test here. Trust is decided by the evidence
(``arenaforge.stages.verification.evidence``, where the rules are stated): never because the
answers fail a test; the instruction's own example is a trusted row of its own; contradicting
expectations resolve by strength or make the instruction ``contradictory_tests``; a generated
input becomes an ``augmented`` test (``majority``) only when independent answers that pass every
written test agree on its output. Surviving written tests are split visible/hidden, seeded by
the run seed and the instruction id; augmented tests are hidden, the example is visible.

Output: one row per (instruction_id, author, test_idx): ``kind`` (written, augmented, example:
author ``instruction``), ``test_code, survived, reason`` (null when survived; ``duplicate``,
``parse_error``, ``contradicts_example``, ``author_contradicts_example``,
``contradicts_stronger``, ``no_majority``, ``not_independent``, ``agreed_no_value``,
``not_literal``, ``unconfirmed``), ``trusted_by, strength`` (the evidence and its strength), ``split, call,
expected, entry_point, entry_source`` (instruction, answers), ``signature, example`` (the
instruction's own example as an assert, for the probe gate), ``author_name`` (the name the
author called), ``passed_by, contradicted, consensus`` (the models whose answers pass every
trusted test), ``no_tests`` (per instruction: no trusted test but the example), ``raw``
(the reply; the candidates' outcomes for an augmented row), ``parse_error, generator,
generator_error, generated_inputs``,
``graded_passed_by`` (the models whose run passed the row's test as verify grades it),
``candidate_runs`` (per instruction: each candidate's run, its program's digest, probes and
limits; both ``arenaforge.stages.verification.recorded_runs``) and ``suite_status,
suite_detail`` (per instruction: ``decided`` or ``contradictory_tests``, and what contradicts
what). Augmented rows carry the author whose generator made the input first. An author whose
reply held no test, or an instruction without an entry point, gets one row with ``test_idx =
-1`` (reason ``parse_error`` / ``no_entry_point``) so that nothing disappears.
Stats (counts, summed over shards): ``tests_written.<a>``, ``tests_survived.<a>``,
``parse_errors.<a>``, ``discarded.<reason>``, ``trusted.<trusted_by>``, ``augment.*``,
``contradictory_tests``, ``instructions_with_example``, ``instructions_no_tests``,
``instructions_all_fail``, ``instructions_no_entry_point``.
"""

from __future__ import annotations

import ast
import dataclasses
from collections import defaultdict
from typing import Any, Literal

import pyarrow as pa
from arenaforge.pipeline.prompts import fill, load_template
from arenaforge.pipeline.stage import StageConfig, StageContext, StageResult, StageSpec, per_model
from arenaforge.stages.arena.judge_logits import BACKEND_ERROR
from arenaforge.stages.common.task_kinds import table_tasks, uses_python_path
from arenaforge.stages.verification.augment import (
    GENERATOR_REPLY,
    call_program,
    extract_generator,
    input_program,
    inputs_request,
    outcome_of,
    run_generators,
)
from arenaforge.stages.verification.entry_points import (
    bind,
    bound_code,
    call_arities,
    instruction_function_name,
)
from arenaforge.stages.verification.evidence import (
    EXAMPLE,
    STRENGTH,
    Candidate,
    Example,
    Verdict,
    program_key,
    tally,
    weigh,
)
from arenaforge.stages.verification.grading import probes
from arenaforge.stages.verification.probe_gate import instruction_example, stated_examples
from arenaforge.stages.verification.recorded_runs import CANDIDATE_RUN, candidate_run
from arenaforge.stages.verification.suites import (
    AUGMENTED,
    EXAMPLE_KIND,
    INSTRUCTION_AUTHOR,
    WRITTEN,
    Suite,
    suites_of_rows,
)
from arenaforge.stages.verification.test_parsing import (
    EntryPoint,
    ParsedTests,
    extract_tests,
    find_entry_point,
    public_definitions,
    signature_of,
)
from arenaforge.stages.verification.test_split import (
    VISIBLE,
    assertion_source,
    call_and_expected,
    compares_floats,
    normalised_call,
    split_tests,
)
from pydantic import Field

DUPLICATE, PARSE_ERROR, NO_ENTRY_POINT = "duplicate", "parse_error", "no_entry_point"

TESTS_SCHEMA = pa.schema([
    ("instruction_id", pa.string()), ("author", pa.string()), ("test_idx", pa.int64()),
    ("kind", pa.string()), ("test_code", pa.string()), ("survived", pa.bool_()),
    ("reason", pa.string()), ("trusted_by", pa.string()), ("strength", pa.int64()),
    ("split", pa.string()),
    ("call", pa.string()), ("expected", pa.string()),
    ("entry_point", pa.string()), ("entry_source", pa.string()), ("signature", pa.string()),
    ("example", pa.string()), ("author_name", pa.string()),
    ("passed_by", pa.list_(pa.string())), ("contradicted", pa.list_(pa.string())),
    ("consensus", pa.list_(pa.string())), ("no_tests", pa.bool_()), ("raw", pa.string()),
    ("parse_error", pa.string()), ("generator", pa.string()), ("generator_error", pa.string()),
    ("generated_inputs", pa.int64()),
    ("graded_passed_by", pa.list_(pa.string())), ("candidate_runs", pa.list_(CANDIDATE_RUN)),
    ("suite_status", pa.string()), ("suite_detail", pa.string()),
])


class TestGenConfig(StageConfig):
    """Authors, sampling, augmentation and execution limits of the ``tests`` stage."""

    __test__ = False  # not a pytest test class despite the name

    authors: list[str] | None = Field(None, description="test authors; default: the experts")
    tests_per_author: int = Field(5, ge=1, le=50, description="tests asked of each author")
    retry_unparsed: bool = Field(
        True, description="ask an author whose reply to a function's request held no test once "
        "more, saying so (the case path; the 0.5B writes its function instead of asserts in "
        "about a quarter of its replies)")
    max_tests_per_author: int = Field(8, ge=1, le=100, description="tests kept per author")
    augment: bool = Field(True, description="ask each author for generate_inputs() too")
    inputs_call: Literal["same_reply", "second_call"] = Field(
        "second_call", description="same_reply: the generator in the test-writing reply; "
        "second_call: a second request that shows the author's own argument tuples")
    inputs_per_author: int = Field(
        6, ge=1, le=50, description="generated inputs asked of and kept per author")
    generator_authors: list[str] | None = Field(
        None, description="the authors asked for a generator; None: every author (the inputs "
        "need not be independent, the candidates' outputs on them are what is compared)")
    generator_max_tokens: int = Field(
        64, ge=16, description="second_call: reply limit (6 small tuples and the def are ~45 "
        "tokens; the small models list on past the number asked, and the cut list is closed)")
    max_tokens: int = Field(384, ge=16)
    temperature: float = Field(0.0, ge=0)
    # Large by default: the llama.cpp backend refills a finished sequence's slot from the
    # conversations of the same call, so small calls leave slots idle behind one long reply.
    batch_size: int = Field(64, ge=1, description="conversations per backend call")
    timeout_s: float = Field(
        3.0, gt=0, description="wall-clock limit of one test run; below verify's 5 s so that a "
        "test trusted here does not time out there on a loaded machine")
    memory_mb: int | None = Field(None, ge=32, description="memory limit; None: the sandbox's")

    def sandbox_languages(self, run_cfg: Any) -> dict[str, str]:
        """The languages this stage compiles and runs, ``{id: where they come from}``: those of
        the run's rows (``MineConfig.languages_used``). Declared here, the first stage that runs
        answers (verify, repair and emit run the same ones after it), so that
        ``arenaforge.pipeline.toolchain_check`` finds a missing toolchain before any model runs."""
        return run_cfg.stage_config("mine").languages_used()


def build_conversation(instruction: str, entry: EntryPoint, n: int,
                       inputs: int | None = None) -> list[dict[str, str]]:
    """The test-writing conversation for one instruction (no answer is shown).

    ``inputs``: also ask for ``generate_inputs()`` returning that many inputs.
    """
    name = "testgen_user_augment.txt" if inputs else "testgen_user.txt"
    # one pass: an instruction containing "{signature}" or "{output}" reaches the model as is
    user = fill(load_template(name), n=str(n), k=str(inputs or 0), signature=entry.signature,
                entry_point=entry.name, instruction=instruction)
    return [{"role": "system", "content": load_template("testgen_system.txt")},
            {"role": "user", "content": user}]


def inputs_conversation(instruction: str, entry: EntryPoint, tests: ParsedTests,
                        k: int) -> list[dict[str, str]]:
    """The second request for ``generate_inputs()``: the author's own calls show the form."""
    args = []
    for test in tests.tests:
        shape = call_and_expected(test, entry.name)
        if shape is not None:
            call = ast.parse(shape[0]).body[0].value  # type: ignore[attr-defined]
            args.append("(" + "".join(f"{ast.unparse(a)}, " for a in call.args).rstrip() + ")")
    return inputs_request(instruction, entry.signature, entry.name, args, k)


def write_generators(backend: Any, jobs: list[tuple[str, EntryPoint]],
                     written: list[tuple[ParsedTests, str]], cfg: TestGenConfig,
                     seed: int) -> list[tuple[ParsedTests, str]]:
    """``inputs_call = second_call``: ask for the generators; the reply is joined to ``raw``.

    Only authors whose reply held tests are asked: their calls show the form of an input.
    """
    from arenaforge.pipeline.backends.base import SamplingParams

    params = SamplingParams(n=1, temperature=cfg.temperature, max_tokens=cfg.generator_max_tokens,
                            seed=seed)
    out = list(written)
    todo = [i for i, (parsed, _) in enumerate(written) if parsed.tests]
    for start in range(0, len(todo), cfg.batch_size):
        batch = todo[start:start + cfg.batch_size]
        replies = backend.chat([inputs_conversation(*jobs[i], written[i][0], cfg.inputs_per_author)
                                for i in batch], params)
        for i, reply in zip(batch, replies):
            parsed, raw = written[i]
            out[i] = (parsed, f"{raw}{GENERATOR_REPLY}{reply[0].text}")
    return out


def write_tests(backend: Any, jobs: list[tuple[str, EntryPoint]], cfg: TestGenConfig,
                seed: int) -> list[tuple[ParsedTests, str]]:
    """One author's tests for each ``(instruction, entry point)``: ``(parsed, raw reply)``."""
    from arenaforge.pipeline.backends.base import SamplingParams

    params = SamplingParams(n=1, temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=seed)
    inputs = cfg.inputs_per_author if cfg.augment and cfg.inputs_call == "same_reply" else None
    out: list[tuple[ParsedTests, str]] = []
    for start in range(0, len(jobs), cfg.batch_size):
        batch = jobs[start:start + cfg.batch_size]
        replies = backend.chat([build_conversation(text, entry, cfg.tests_per_author, inputs)
                                for text, entry in batch], params)
        for (_, entry), reply in zip(batch, replies):
            completion = reply[0]
            if completion.finish_reason == "error":
                out.append((ParsedTests((), f"{BACKEND_ERROR}{completion.error}"),
                            completion.text))
            else:
                out.append((extract_tests(completion.text, entry.name, cfg.max_tests_per_author),
                            completion.text))
    return out


def resolve_entry_point(instruction: str, codes: list[str | None]) -> tuple[EntryPoint, str] | None:
    """The entry point of an instruction and where it came from (``instruction``/``answers``).

    The signature shown to the authors is that of the answers' function bound to it, under the
    entry point's name. ``None`` when no answer defines a public callable.
    """
    voted = find_entry_point(codes)
    if voted is None:
        return None
    name = instruction_function_name(instruction)
    if name is None:
        return voted, "answers"
    for code in codes:
        b = bind(code, name, from_instruction=True)
        if b.bound_function is None or "." in b.bound_function:
            continue
        node = public_definitions(ast.parse(code)).get(b.bound_function) or next(
            (n for n in ast.parse(code).body if getattr(n, "name", None) == b.bound_function),
            None)
        if node is not None:
            return EntryPoint(name, signature_of(node, name), voted.votes), "instruction"
    return EntryPoint(name, f"def {name}(...)", 0), "instruction"


def _base(iid: str, entry: EntryPoint | None, source: str | None, example: str | None) -> dict:
    return {"instruction_id": iid, "kind": WRITTEN, "survived": False, "reason": "",
            "trusted_by": None, "strength": None, "split": None, "call": None, "expected": None,
            "entry_point": entry.name if entry else None, "entry_source": source,
            "signature": entry.signature if entry else None, "example": example,
            "author_name": None, "passed_by": [], "contradicted": [], "consensus": [],
            "no_tests": True, "raw": None, "parse_error": None, "generator": None,
            "generator_error": None, "generated_inputs": None, "graded_passed_by": [],
            "candidate_runs": [], "suite_status": None, "suite_detail": None}


def _written_rows(base: dict, authors: list[str], written: dict, generators: dict) -> list[dict]:
    rows, seen = [], set()
    for author in authors:
        parsed, raw = written[author]
        gen = dict(zip(("generator", "generator_error"), generators.get(author, (None, None))))
        common = dict(base, author=author, raw=raw, author_name=parsed.author_name, **gen)
        if not parsed.tests:
            rows.append(dict(common, test_idx=-1, test_code=None, reason=PARSE_ERROR,
                             parse_error=parsed.parse_error))
        for k, code in enumerate(parsed.tests):
            shape = call_and_expected(code, base["entry_point"])
            rows.append(dict(common, test_idx=k, test_code=code,
                             reason=DUPLICATE if code in seen else "",
                             call=shape[0] if shape else None,
                             expected=shape[1] if shape else None))
            seen.add(code)
    return rows


def _run_generators(pool: Any, rows: dict[str, list[dict]], cfg: TestGenConfig) -> None:
    """Run every author's generator (``augment.run_generators``); add the augmented rows."""
    where = [(iid, {r["author"]: r for r in rs if r["generator"]}) for iid, rs in rows.items()]
    where = [(iid, by_author) for iid, by_author in where if by_author]
    arities = [call_arities([r["test_code"] for r in rows[iid]], rows[iid][0]["entry_point"])
               for iid, _ in where]
    ran = run_generators(pool, [[r["generator"] for r in by_author.values()]
                                for _, by_author in where], arities, cfg.inputs_per_author,
                         timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb)
    for (iid, by_author), per_author in zip(where, ran):
        rs = rows[iid]
        entry = rs[0]["entry_point"]
        # not deduplicated against written calls: an input a test also calls is the evidence
        # that confirms or contradicts that test
        seen: set[str] = set()
        for author, (inputs, error) in zip(by_author, per_author):
            own = [x for x in rs if x["author"] == author and x["kind"] == WRITTEN]
            for x in own:
                x.update(generator_error=error or x["generator_error"],
                         generated_inputs=len(inputs))
            next_idx = 1 + max(x["test_idx"] for x in own)
            for args in inputs:
                call = normalised_call(entry, args)
                if call in seen:
                    continue
                seen.add(call)
                rs.append(dict(own[0], kind=AUGMENTED, test_idx=next_idx, test_code=None,
                               call=call, reason="", raw=None, author_name=None,
                               _args=args))
                next_idx += 1


@dataclasses.dataclass(frozen=True)
class _Run:
    """One candidate's run on its instruction's written tests, generated inputs and probes."""

    solution: str  # the program that ran: the answer bound to the entry point
    written: list  # per written test (in ``_runnable_written`` order), its ExecResult
    inputs: list  # per augmented row, the ExecResult of its input program
    probes: list  # ``arenaforge.stages.verification.grading.probes`` of the suite
    calls: list = dataclasses.field(default_factory=list)  # per written test: the ExecResult
    # of its call alone (what the answer returns there), None where the test has no call shape


def _runnable_written(rs: list[dict]) -> list[dict]:
    return [r for r in rs if r["kind"] == WRITTEN and r["reason"] == ""]


def _run_candidates(pool: Any, rows: dict[str, list[dict]], answers: dict[str, list[dict]],
                    suites: dict[str, Suite], cfg: TestGenConfig) -> dict[str, list[_Run | None]]:
    """Every bound candidate on every written test, generated input and probe of its
    instruction (the probes too, so that verify can grade a passing answer from this run)."""
    from arenaforge.stages.verification.execution import execute_results

    jobs, where = [], []
    for iid, rs in rows.items():
        suite = suites[iid]
        written = _runnable_written(rs)
        tests = [r["test_code"] for r in written]
        inputs = [input_program(suite.entry_point, r["_args"]) for r in rs
                  if r["kind"] == AUGMENTED]
        # what each answer returns on each written test's call: the evidence that confirms
        # or overrules a test (``arenaforge.stages.verification.evidence``, rule 3)
        called = [t for t, r in enumerate(written) if r["call"]]
        calls = [call_program(written[t]["call"]) for t in called]
        checks = probes(suite)
        for c, answer in enumerate(answers[iid]):
            b = suite.bind(answer["code"])
            if b.bound_function is not None and (tests or inputs):
                jobs.append((bound_code(answer["code"], b), [*tests, *inputs, *checks, *calls]))
                where.append((iid, c, len(tests), len(inputs), len(checks), called,
                              len(written)))
    results = execute_results(pool, jobs, timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb,
                              fail_fast=False) if jobs else []
    out: dict[str, list[_Run | None]] = {iid: [None] * len(answers[iid]) for iid in rows}
    for (job, _), (iid, c, n, m, k, called, w), res in zip(jobs, where, results):
        if isinstance(res, list):
            per_test: list = [None] * w
            for t, r in zip(called, res[n + m + k:]):
                per_test[t] = r
            out[iid][c] = _Run(job, res[:n], res[n:n + m], res[n + m:n + m + k], per_test)
    return out


def _record_runs(rs: list[dict], ran: list[tuple[dict, str]], models: list[str],
                 runs: list[_Run | None], cfg: TestGenConfig) -> None:
    """Set ``graded_passed_by`` and ``candidate_runs`` (``arenaforge.stages.verification.recorded_runs``) on the
    instruction's rows, once trust is decided. ``ran``: each written row that ran, with the
    text it ran (a test trusted on float agreement is rewritten after the run)."""
    for t, (row, text) in enumerate(ran):
        row["graded_passed_by"] = [
            models[c] for c, run in enumerate(runs) if run is not None and row["survived"]
            and row["test_code"] == text and run.written[t] is not None and run.written[t].passed]
    for j, row in enumerate(r for r in rs if r["kind"] == AUGMENTED):
        row["graded_passed_by"] = [
            models[c] for c, run in enumerate(runs) if run is not None and row["survived"]
            and outcome_of(run.inputs[j]).is_exactly(row["expected"])]
    records = [candidate_run(models[c], run.solution, run.probes,
                             [*run.written, *run.inputs, *run.probes], timeout_s=cfg.timeout_s,
                             memory_mb=cfg.memory_mb)
               for c, run in enumerate(runs) if run is not None]
    for row in rs:
        row["candidate_runs"] = records


def _example(rs: list[dict]) -> Example | None:
    shape = call_and_expected(rs[0]["example"], rs[0]["entry_point"]) if rs[0]["example"] else None
    return Example(*shape) if shape else None


def _candidates(runs: list[_Run | None], models: list[str], example: Example | None
                ) -> list[Candidate]:
    out = []
    for model, run in zip(models, runs):
        if run is None:
            continue
        ran = run.probes[1] if example is not None and len(run.probes) > 1 else None
        out.append(Candidate(
            model, program_key(run.solution),
            tuple(r is not None and r.passed for r in run.written),
            None if example is None else (ran is not None and ran.passed),
            tuple(outcome_of(r) for r in run.inputs),
            tuple(None if r is None else outcome_of(r) for r in run.calls)))
    return out


def _example_row(rs: list[dict], candidates: list[Candidate], verdict: Verdict) -> dict:
    """The instruction's own example as a trusted test (visible: the instruction shows it)."""
    example = _example(rs)
    passed = [c.model for c in candidates if c.example]
    return dict(rs[0], author=INSTRUCTION_AUTHOR, test_idx=0, kind=EXAMPLE_KIND,
                test_code=rs[0]["example"], survived=True, reason=None, trusted_by=EXAMPLE,
                strength=STRENGTH[EXAMPLE], split=VISIBLE, call=example.call,
                expected=example.expected, author_name=None, passed_by=passed,
                contradicted=sorted(c.model for c in candidates if c.example is False),
                raw=None, parse_error=None, generator=None, generator_error=None,
                generated_inputs=None, graded_passed_by=passed)


def _judge(iid: str, rs: list[dict], models: list[str], runs: list, seed: int,
           stats: dict, stated: list[tuple[str, str]] = ()) -> list[dict]:
    """Trust and split one instruction's rows (``arenaforge.stages.verification.evidence``);
    returns the example's row (empty when the instruction states none)."""
    tests = _runnable_written(rs)
    augmented = [r for r in rs if r["kind"] == AUGMENTED]
    example = _example(rs)
    candidates = _candidates(runs, models, example)
    duplicates = [r for r in rs if r["kind"] == WRITTEN and r["reason"] == DUPLICATE]
    verdict = weigh(tests, augmented, candidates, example, duplicates, contestants=models,
                    stated=stated)
    for row in rs:
        row.update(suite_status=verdict.status, suite_detail=verdict.detail)
    for row in tests:
        if row["survived"] and row["call"] and compares_floats(row["expected"]):
            # graded with the tolerance that agreement on floats used (an exact `== 0.999`
            # that no program can meet would stand against every answer)
            row["test_code"] = assertion_source(row["call"], row["expected"])
    kept = [r for r in tests if r["survived"]]
    for row, split in zip(kept, split_tests(seed, iid, len(kept))):
        row["split"] = split
    extra = [_example_row(rs, candidates, verdict)] if example is not None else []
    consensus = rs[0]["consensus"] if rs else []
    for row in extra:
        row["consensus"] = consensus
    tally(stats, [*rs, *extra], augmented, candidates, verdict, bool(extra), consensus)
    return extra


def run(table: pa.Table, cfg: TestGenConfig, ctx: StageContext) -> StageResult:
    """Write tests (and generators) with every author, run them, keep what the evidence trusts."""
    if not cfg.authors:
        raise ValueError("tests.authors: no author configured (a run fills in its experts)")
    authors = list(cfg.authors)
    unknown = sorted(set(cfg.generator_authors or ()) - set(authors))
    if unknown:
        raise ValueError(f"tests.generator_authors: {unknown} are not among tests.authors")
    answers: dict[str, list[dict]] = defaultdict(list)
    others: dict[str, list[dict]] = defaultdict(list)  # not Python functions: data cases
    tasks = dict(zip(table.column("instruction_id").to_pylist(), table_tasks(table)))
    for row in table.select(["instruction_id", "instruction", "model", "code"]).to_pylist():
        iid = row["instruction_id"]
        (answers if uses_python_path(*tasks[iid]) else others)[iid].append(row)
    entries = {iid: resolve_entry_point(rows[0]["instruction"], [r["code"] for r in rows])
               for iid, rows in answers.items()}
    todo = [iid for iid in answers if entries[iid] is not None]
    written: dict[str, dict[str, tuple[ParsedTests, str]]] = defaultdict(dict)
    jobs = [(answers[iid][0]["instruction"], entries[iid][0]) for iid in todo]

    def author_writes(author: str) -> list:
        results = write_tests(ctx.backend(author), jobs, cfg, ctx.seed)
        if cfg.augment and cfg.inputs_call == "second_call" and (
                cfg.generator_authors is None or author in cfg.generator_authors):
            results = write_generators(ctx.backend(author), jobs, results, cfg, ctx.seed)
        return results

    by_author = per_model(ctx, authors, author_writes)
    for author in authors:
        for iid, result in zip(todo, by_author[author]):
            written[iid][author] = result

    rows: dict[str, list[dict]] = {}
    out_rows, stats = [], defaultdict(float)
    if others:
        from arenaforge.stages.verification.case_tests import run_cases

        case_rows, case_stats = run_cases(others, tasks, authors, cfg, ctx, _base)
        out_rows.extend(case_rows)
        for key, value in case_stats.items():
            stats[key] += value
    for iid in answers:
        entry, source = entries[iid] or (None, None)
        example = instruction_example(answers[iid][0]["instruction"], entry.name) if entry else None
        base = _base(iid, entry, source, example)
        if entry is None:
            out_rows.extend(dict(base, author=a, test_idx=-1, test_code=None,
                                 reason=NO_ENTRY_POINT) for a in authors)
            stats["instructions_no_entry_point"] += 1
            continue
        generators = {a: extract_generator(raw.rpartition(GENERATOR_REPLY)[2]
                                           if cfg.inputs_call == "same_reply"
                                           or GENERATOR_REPLY in raw else None)
                      for a, (_, raw) in written[iid].items()
                      if cfg.generator_authors is None or a in cfg.generator_authors} \
            if cfg.augment else {}
        rows[iid] = _written_rows(base, authors, written[iid], generators)
    pool = ctx.sandbox()
    if cfg.augment:
        _run_generators(pool, rows, cfg)
    suites = suites_of_rows([r for rs in rows.values() for r in rs])
    runs = _run_candidates(pool, rows, answers, suites, cfg)
    for iid, rs in rows.items():
        models = [r["model"] for r in answers[iid]]
        ran = [(r, r["test_code"]) for r in _runnable_written(rs)]
        rs.extend(_judge(iid, rs, models, runs[iid], ctx.seed, stats,
                         stated_examples(answers[iid][0]["instruction"], rs[0]["entry_point"])))
        _record_runs(rs, ran, models, runs[iid], cfg)
        # the example alone is one call, not a suite (``Suite.example_only``)
        no_tests = not any(r["survived"] and r["kind"] != EXAMPLE_KIND for r in rs)
        for r in rs:
            r.pop("_args", None)
            r["no_tests"] = no_tests
        out_rows.extend(rs)
        stats["augment.generators"] += sum(1 for r in rs if r["kind"] == WRITTEN
                                           and r["test_idx"] <= 0 and r["generator"])
    stats["instructions_no_tests"] += sum(1 for iid in answers if iid not in rows) + sum(
        1 for rs in rows.values() if rs and rs[0]["no_tests"])
    for r in out_rows:
        r["reason"] = r["reason"] or None
        if r["kind"] == WRITTEN:
            stats[f"tests_written.{r['author']}"] += r["test_idx"] >= 0
            stats[f"tests_survived.{r['author']}"] += bool(r["survived"])
            stats[f"parse_errors.{r['author']}"] += r["reason"] == PARSE_ERROR
        if r["reason"] and r["test_idx"] >= 0:
            stats[f"discarded.{r['reason']}"] += 1
    ctx.advance(table.num_rows)
    out = pa.Table.from_pylist(out_rows, schema=TESTS_SCHEMA)
    return StageResult(table=out, stats=dict(stats))


STAGE = StageSpec(name="tests", config=TestGenConfig, run=run, source="answer", uses_models=True,
                  inputs=("instruction_id", "instruction", "model", "code"),
                  prompts=("testgen_*.txt",),
                  outputs=tuple(TESTS_SCHEMA.names))
