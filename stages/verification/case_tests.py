"""The ``tests`` stage for every task that is not a Python function: cases as data, the same
evidence rules.

For each such instruction (its ``language`` and ``task_kind``,
``arenaforge.stages.common.task_kinds``) every author is asked for test cases as data
(``arenaforge.stages.verification.cases``) and, for a function, for ``generate_inputs()`` in a
second request, run in the sandbox as on the Python path (``augment.run_generators``; a
program's inputs come in its reply). A function task's signature is the one most authors give
(types from the cases where none is complete), and must be one its language can take (else
every row is ``unsupported_type``). Each answer then runs once in the sandbox on every case,
every generated input and the instruction's own example, rendered into its language's harness
(``arenaforge.stages.verification.harness``: ``function_job`` / ``program_job``, compiled
once, all in one sandbox call); what it returned on each is compared on the host. Trust is
then decided by ``arenaforge.stages.verification.evidence.weigh`` on that data, exactly as for
a Python function: which answers pass which case, what each returned on each call, and which
answers are one program (``program_key_of``). An answer that does not compile is no evidence
(a compile error is the answer's failure, never the test's); it is counted apart
(``compile_errors``, ``language.<id>.<kind>.compile_errors``).

Rows have the Python path's columns (``TESTS_SCHEMA``): ``test_code`` is the case as JSON,
``call`` and ``expected`` its normalised call (``stdin '...'`` for a program) and the repr of
its value, ``signature`` the chosen signature in Python notation (null for a program),
``entry_point`` ``main`` and ``entry_source`` ``program`` for a program. ``candidate_runs`` and
``graded_passed_by`` record each answer's run as for a Python function
(``arenaforge.stages.verification.recorded_runs``: its first probe is that the answer
compiled), so verify grades an answer that passed every trusted case from that run instead of
compiling and running it again. Stats, beside the Python path's:
``language.<id>.<kind>.instructions``, ``compile_errors``, ``language.<id>.<kind>.compile_errors``,
``sandbox_faults``, ``harness_errors`` (an answer whose checked cases its language's harness
could not render: not run), ``instructions_unsupported_type``, ``augment.generators``,
``asked_again`` and ``asked_again_parsed`` (function replies without a test asked once more,
``retry_unparsed``, and those whose second reply held tests).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable
from typing import Any, NamedTuple

from arenaforge.pipeline.prompts import fill, load_template
from arenaforge.pipeline.stage import per_model
from arenaforge.stages.arena.judge_logits import BACKEND_ERROR
from arenaforge.stages.common.task_kinds import FUNCTION, PROGRAM
from arenaforge.stages.verification import cases as pc
from arenaforge.stages.verification.augment import (
    GENERATOR_REPLY,
    argument_tuple,
    extract_generator,
    inputs_request,
    run_generators,
)
from arenaforge.stages.verification.evidence import (
    EXAMPLE,
    STRENGTH,
    Candidate,
    Example,
    tally,
    weigh,
)
from arenaforge.stages.verification.grading import exec_result, harness_program, loaded
from arenaforge.stages.verification.harness.jobs import function_job, grade, program_job
from arenaforge.stages.verification.harness.types import UnsupportedType
from arenaforge.stages.verification.probe_gate import stated_examples
from arenaforge.stages.verification.recorded_runs import candidate_run
from arenaforge.stages.verification.suites import (
    AUGMENTED,
    EXAMPLE_KIND,
    INSTRUCTION_AUTHOR,
    WRITTEN,
    suites_of_rows,
)
from arenaforge.stages.verification.test_split import VISIBLE, split_tests

DUPLICATE, PARSE_ERROR, NO_ENTRY_POINT = "duplicate", "parse_error", "no_entry_point"
UNSUPPORTED = "unsupported_type"  # the task's values have no form in its language


def ask_authors(jobs: list[tuple[str, str, str, str | None]], authors: list[str], cfg: Any,
                ctx: Any) -> dict[str, list[tuple[pc.CaseReply, str]]]:
    """Each author's ``(parsed reply, raw text)`` per job ``(instruction, language, kind,
    entry point)``, in job order. With ``augment`` and ``inputs_call: second_call`` an author
    whose reply held a function's cases is then asked for ``generate_inputs()`` (the request
    the Python path makes, ``augment.inputs_request``); its reply is joined to the raw text."""
    from arenaforge.pipeline.backends.base import SamplingParams

    params = SamplingParams(n=1, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                            seed=ctx.seed)
    # The reply is asked for inputs too, with either ``inputs_call``: without that line the
    # 0.5B wrote its function instead of asserts in 22 of 30 replies instead of 9 (verify-bench,
    # JavaScript + C++), though it wrote no input there; ``second_call`` then asks a function's
    # authors for ``generate_inputs()`` apart (a program's stdins come in the reply only)
    k = cfg.inputs_per_author if cfg.augment else 0
    convs = [pc.conversation(text, lang, kind, entry, cfg.tests_per_author, k)
             for text, lang, kind, entry in jobs]

    def author_writes(author: str) -> list[tuple[pc.CaseReply, str]]:
        backend, replies = ctx.backend(author), []
        for start in range(0, len(convs), cfg.batch_size):
            for (_, _, kind, entry), reply in zip(
                    jobs[start:start + cfg.batch_size],
                    backend.chat(convs[start:start + cfg.batch_size], params)):
                c = reply[0]
                parsed = (pc.CaseReply(parse_error=f"{BACKEND_ERROR}{c.error}")
                          if c.finish_reason == "error" else
                          pc.parse_reply(c.text, kind, entry, max_cases=cfg.max_tests_per_author,
                                         max_inputs=k))
                replies.append((parsed, c.text))
        if cfg.retry_unparsed:
            replies = _ask_again(backend, jobs, convs, replies, k, cfg, params)
        if cfg.augment and cfg.inputs_call == "second_call" and (
                cfg.generator_authors is None or author in cfg.generator_authors):
            replies = _ask_generators(backend, jobs, replies, cfg, ctx.seed)
        return replies

    return per_model(ctx, authors, author_writes)


RETRY_REPLY = "\n\n--- reply asked again ---\n"  # joins the second reply to ``raw``


def _ask_again(backend: Any, jobs: list[tuple[str, str, str, str | None]], convs: list,
               replies: list[tuple[pc.CaseReply, str]], k: int, cfg: Any, params: Any
               ) -> list[tuple[pc.CaseReply, str]]:
    """One author's function replies that held no test, asked once more with what was wrong
    (``testgen_cases_retry.txt``); the second reply replaces the first when it parses, and
    is joined to the raw text either way (the first reply's failure stays in it)."""
    todo = [i for i, (parsed, raw) in enumerate(replies) if jobs[i][2] == FUNCTION
            and parsed.parse_error is not None
            and not parsed.parse_error.startswith(BACKEND_ERROR)]
    out = list(replies)
    for start in range(0, len(todo), cfg.batch_size):
        batch = todo[start:start + cfg.batch_size]
        asked = [[*convs[i], {"role": "assistant", "content": replies[i][1]},
                  {"role": "user", "content": fill(load_template("testgen_cases_retry.txt"),
                                                   entry_point=jobs[i][3] or "",
                                                   n=str(cfg.tests_per_author))}]
                 for i in batch]
        for i, reply in zip(batch, backend.chat(asked, params)):
            first, raw = replies[i]
            text = reply[0].text if reply[0].finish_reason != "error" else ""
            parsed = pc.parse_reply(text, FUNCTION, jobs[i][3],
                                    max_cases=cfg.max_tests_per_author, max_inputs=k)
            out[i] = (first if parsed.parse_error else parsed, f"{raw}{RETRY_REPLY}{text}")
    return out


def _ask_generators(backend: Any, jobs: list[tuple[str, str, str, str | None]],
                    replies: list[tuple[pc.CaseReply, str]], cfg: Any, seed: int
                    ) -> list[tuple[pc.CaseReply, str]]:
    """One author's second requests: ``generate_inputs()`` for each function task its reply
    gave cases for, the author's own arguments showing their form."""
    from arenaforge.pipeline.backends.base import SamplingParams

    params = SamplingParams(n=1, temperature=cfg.temperature,
                            max_tokens=cfg.generator_max_tokens, seed=seed)
    todo = [i for i, (parsed, _) in enumerate(replies)
            if jobs[i][2] == FUNCTION and parsed.cases]
    out = list(replies)
    for start in range(0, len(todo), cfg.batch_size):
        batch = todo[start:start + cfg.batch_size]
        convs = []
        for i in batch:
            text, lang, _, entry = jobs[i]
            args = [c["args"] for c in replies[i][0].cases
                    if isinstance(c, dict) and isinstance(c.get("args"), list)]
            convs.append(inputs_request(
                text, pc.shown_declaration(text, lang, entry, len(args[0]) if args else 0),
                entry or "", [argument_tuple(a) for a in args], cfg.inputs_per_author))
        for i, reply in zip(batch, backend.chat(convs, params)):
            parsed, raw = replies[i]
            out[i] = (parsed, f"{raw}{GENERATOR_REPLY}{reply[0].text}")
    return out


def _rows(base: dict, lang: str, kind: str, replies: dict[str, tuple[pc.CaseReply, str]],
          sig: Any, generated: dict[str, dict] | None = None) -> list[dict]:
    """The written rows of every author and the augmented rows of their inputs.
    ``generated``: per author, its generator's columns (``generator``, ``generator_error``,
    ``generated_inputs``)."""
    entry, rows, seen, calls = base["entry_point"], [], set(), set()
    for author, (reply, raw) in replies.items():
        common = dict(base, author=author, raw=raw, **(generated or {}).get(author, {}))
        if reply.parse_error is not None:
            rows.append(dict(common, test_idx=-1, test_code=None, reason=PARSE_ERROR,
                             parse_error=reply.parse_error))
            continue
        for k, raw_case in enumerate(reply.cases):
            try:
                pc.check_case(kind, raw_case, sig, lang)
            except (ValueError, TypeError) as exc:  # CaseError, UnsupportedType
                rows.append(dict(common, test_idx=k, test_code=_dump(raw_case),
                                 reason=PARSE_ERROR, parse_error=str(exc)))
                continue
            call, expected, code = pc.case_fields(kind, entry, raw_case)
            rows.append(dict(common, test_idx=k, test_code=code, call=call, expected=expected,
                             reason=DUPLICATE if code in seen else "", _case=raw_case))
            seen.add(code)
    for author, (reply, _) in replies.items():
        own = [r for r in rows if r["author"] == author]
        next_idx = 1 + max((r["test_idx"] for r in own), default=-1)
        for raw_input in reply.inputs:
            try:
                pc.check_case(kind, raw_input, sig, lang, expected=False)
            except (ValueError, TypeError):
                continue
            shaped = {"stdin": raw_input} if kind == PROGRAM else {"args": raw_input}
            call = pc.case_fields(kind, entry, shaped)[0]
            if call in calls:
                continue
            calls.add(call)
            rows.append(dict(base, author=author, kind=AUGMENTED, test_idx=next_idx,
                             test_code=None, call=call, reason="", raw=None, _input=raw_input,
                             **(generated or {}).get(author, {})))
            next_idx += 1
    return rows


class _Pending(NamedTuple):
    """An instruction whose signature is chosen, before its rows are built."""

    iid: str
    rows: list[dict]  # its answers
    lang: str
    kind: str
    entry: str
    sig: Any
    example: dict | None
    replies: dict[str, tuple[pc.CaseReply, str]]
    row_base: dict


def _generated_inputs(pending: list[_Pending], cfg: Any, ctx: Any, stats: dict
                      ) -> list[tuple[dict, dict[str, dict]]]:
    """Run the authors' generators of every pending function task (``augment.run_generators``,
    one sandbox batch) and put the inputs they printed in their replies. Per task: the
    replies, and per author its generator's columns."""
    found = [{a: extract_generator(raw.rpartition(GENERATOR_REPLY)[2])
              for a, (_, raw) in p.replies.items() if GENERATOR_REPLY in raw}
             if p.kind == FUNCTION and p.sig is not None else {} for p in pending]
    owners = [[a for a, (src, _) in by_author.items() if src] for by_author in found]
    stats["augment.generators"] += sum(map(len, owners))
    sources = [[by_author[a][0] for a in authors] for by_author, authors in zip(found, owners)]
    ran = run_generators(ctx.sandbox(), sources,
                         [(len(p.sig.params),) if p.sig is not None else () for p in pending],
                         cfg.inputs_per_author, timeout_s=cfg.timeout_s,
                         memory_mb=cfg.memory_mb) if any(sources) else [[] for _ in pending]
    out = []
    for p, by_author, authors, per_author in zip(pending, found, owners, ran):
        replies = dict(p.replies)
        columns = {a: {"generator": src, "generator_error": why, "generated_inputs": 0}
                   for a, (src, why) in by_author.items()}
        for author, (inputs, error) in zip(authors, per_author):
            reply, raw = replies[author]
            replies[author] = (dataclasses.replace(
                reply, inputs=(*reply.inputs, *(list(args) for args in inputs))), raw)
            columns[author].update(generator_error=error, generated_inputs=len(inputs))
        out.append((replies, columns))
    return out


def _dump(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, default=repr)


def _cases(kind: str, sig: Any, lang: str, written: list[dict], augmented: list[dict],
           example: dict | None) -> list:
    cases = [pc.check_case(kind, r["_case"], sig, lang) for r in written]
    cases += [pc.check_case(kind, r["_input"], sig, lang, expected=False) for r in augmented]
    if example is not None:
        cases.append(pc.check_case(kind, example, sig, lang))
    return cases


def _job(kind: str, lang: str, program: str, sig: Any, cases: list, cfg: Any) -> Any:
    limits = {"timeout_s": cfg.timeout_s, "memory_mb": cfg.memory_mb}
    if kind == PROGRAM:
        return program_job(lang, program, cases, **limits)
    return function_job(lang, program, sig, cases, **limits)


def _candidates(task: dict, results: list, stats: dict, cfg: Any
                ) -> tuple[list[Candidate], list[dict]]:
    """What each answer that ran did (an answer that did not compile, or whose sandbox failed,
    is no evidence), and its run as ``recorded_runs`` keeps it for verify."""
    lang, kind = task["language"], task["kind"]
    n, m = len(task["written"]), len(task["augmented"])
    out, records = [], []
    for (model, code), program, result in zip(task["answers"], task["programs"], results):
        if result is None:
            continue
        if result.sandbox_fault is not None:
            stats["sandbox_faults"] += 1
            continue
        if not result.compile.ok:
            stats["compile_errors"] += 1
            stats[f"language.{lang}.{kind}.compile_errors"] += 1
            continue
        verdicts = grade(task["cases"], result)
        out.append(Candidate(
            model, pc.program_key_of(code, lang, kind),
            tuple(v.passed for v in verdicts[:n]),
            verdicts[-1].passed if task["example"] is not None else None,
            tuple(pc.outcome(kind, r) for r in result.runs[n:n + m]),
            tuple(pc.outcome(kind, r) for r in result.runs[:n])))
        runs = [None if run is None else exec_result(run, v)
                for run, v in zip(result.runs, verdicts)]
        loads = loaded(result)  # verify's first probe
        probes = [loads, *(runs[-1:] if task["example"] is not None else [])]
        records.append(candidate_run(model, program, probes, [loads, *runs],
                                     timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb))
    return out, records


def _finish(task: dict, candidates: list[Candidate], seed: int, stats: dict) -> list[dict]:
    """Decide trust (``evidence.weigh``), split, add the example's row; the instruction's rows."""
    rs, kind, iid = task["rows"], task["kind"], task["rows"][0]["instruction_id"]
    written, augmented = task["written"], task["augmented"]
    example = task["example"]
    shown = None
    if example is not None:
        call, expected, code = pc.case_fields(kind, rs[0]["entry_point"], example)
        shown = Example(call, expected)
    duplicates = [r for r in rs if r["kind"] == WRITTEN and r["reason"] == DUPLICATE]
    verdict = weigh(written, augmented, candidates, shown, duplicates,
                    contestants=[model for model, _ in task["answers"]], stated=task["stated"])
    for row in rs:
        row.update(suite_status=verdict.status, suite_detail=verdict.detail)
    for j, row in enumerate(augmented):
        if row["survived"]:
            row["test_code"] = pc.trusted_code(kind, row, row["_input"])
            row["graded_passed_by"] = sorted(c.model for c in candidates
                                             if c.inputs[j].is_exactly(row["expected"]))
    for t, row in enumerate(written):
        row["graded_passed_by"] = sorted(c.model for c in candidates
                                         if row["survived"] and c.written[t])
    kept = [r for r in written if r["survived"]]
    for row, split in zip(kept, split_tests(seed, iid, len(kept))):
        row["split"] = split
    consensus = rs[0]["consensus"] if rs else []
    if shown is not None:
        passed = sorted(c.model for c in candidates if c.example)
        rs.append(dict(rs[0], author=INSTRUCTION_AUTHOR, test_idx=0, kind=EXAMPLE_KIND,
                       test_code=code, survived=True, reason=None, trusted_by=EXAMPLE,
                       strength=STRENGTH[EXAMPLE], split=VISIBLE, call=shown.call,
                       expected=shown.expected, author_name=None, passed_by=passed,
                       contradicted=sorted(c.model for c in candidates if c.example is False),
                       raw=None, parse_error=None, consensus=consensus,
                       graded_passed_by=passed))
    tally(stats, rs, augmented, candidates, verdict, shown is not None, consensus)
    return rs


def run_cases(answers: dict[str, list[dict]], tasks: dict[str, tuple[str, str]],
              authors: list[str], cfg: Any, ctx: Any, base: Callable[..., dict]
              ) -> tuple[list[dict], dict[str, float]]:
    """The rows and stats of every instruction in ``answers`` (none a Python function).

    Args:
        answers: the answer rows (``instruction_id, instruction, model, code``) per instruction.
        tasks: each instruction's ``(language, task_kind)``.
        authors: the test authors.
        cfg: the stage's ``TestGenConfig``.
        ctx: the stage context (backends, the sandbox, the seed).
        base: ``tests._base``: a row with every column at its default.
    """
    stats: dict[str, float] = defaultdict(float)
    out: list[dict] = []
    entries = {iid: pc.entry_point(rows[0]["instruction"], [r["code"] for r in rows],
                                   *tasks[iid]) for iid, rows in answers.items()}
    todo = [iid for iid in answers if entries[iid] is not None]
    asked = ask_authors([(answers[iid][0]["instruction"], *tasks[iid], entries[iid][0])
                         for iid in todo], authors, cfg, ctx)
    position = {iid: k for k, iid in enumerate(todo)}
    work: list[dict] = []
    pending: list[_Pending] = []
    for iid, rows in answers.items():
        lang, kind = tasks[iid]
        stats[f"language.{lang}.{kind}.instructions"] += 1
        if entries[iid] is None:
            out.extend(dict(base(iid, None, None, None), author=a, test_idx=-1, test_code=None,
                            reason=NO_ENTRY_POINT) for a in authors)
            stats["instructions_no_entry_point"] += 1
            stats["instructions_no_tests"] += 1
            continue
        entry, source = entries[iid]
        replies = {a: asked[a][position[iid]] for a in authors}
        for reply, raw in replies.values():
            stats["asked_again"] += RETRY_REPLY in raw
            stats["asked_again_parsed"] += RETRY_REPLY in raw and reply.parse_error is None
        example = pc.example_case(rows[0]["instruction"], kind, entry)
        # no author gave a case: only the instruction's example can give the signature (it is
        # still the probe every answer must pass, as on the Python path)
        no_case = kind == FUNCTION and all(r.parse_error for r, _ in replies.values())
        sig = None
        try:
            if no_case and example is None:
                raise UnsupportedType(f"{entry}: no case gives its arguments")
            if kind == FUNCTION:
                declared = pc.stated_declaration(rows[0]["instruction"], lang, entry)
                sig = pc.choose_signature(
                    entry, [r for r, _ in replies.values()], lang,
                    stated=declared[1] if declared and declared[0] == entry else None,
                    example=example)
            if example is not None:
                pc.check_case(kind, example, sig, lang)
        except ValueError as exc:  # UnsupportedType, or the example is no case of the signature
            if no_case or (sig is None and isinstance(exc, UnsupportedType)):
                # each reply's error is the reason when no author gave a case
                out.extend(dict(base(iid, None, source, None), entry_point=entry, author=a,
                                test_idx=-1, test_code=None,
                                reason=PARSE_ERROR if no_case else UNSUPPORTED,
                                parse_error=replies[a][0].parse_error if no_case else str(exc),
                                raw=replies[a][1]) for a in authors)
                stats["instructions_unsupported_type"] += not no_case
                stats["instructions_no_tests"] += 1
                continue
            example = None
        row_base = dict(base(iid, None, source, None), entry_point=entry,
                        signature=pc.signature_text(sig) if sig else None,
                        example=pc.case_fields(kind, entry, example)[2] if example else None)
        pending.append(_Pending(iid, rows, lang, kind, entry, sig, example, replies, row_base))
    for (iid, rows, lang, kind, entry, sig, example, _, row_base), (replies, gen) in zip(
            pending, _generated_inputs(pending, cfg, ctx, stats)):
        rs = _rows(row_base, lang, kind, replies, sig, gen)
        written = [r for r in rs if r["kind"] == WRITTEN and r["reason"] == ""]
        augmented = [r for r in rs if r["kind"] == AUGMENTED]
        # what the harness runs of each answer (a Python function bound as verify binds it)
        suite = suites_of_rows(rs)[iid]
        programs = [harness_program(r["code"], suite, lang, kind) if r["code"] else
                    (r["code"], None) for r in rows]
        work.append({"language": lang, "kind": kind, "sig": sig, "rows": rs,
                     "programs": [p for p, _ in programs],
                     "bound": [b is None or b.bound_function is not None for _, b in programs],
                     "written": written, "augmented": augmented, "example": example,
                     "cases": _cases(kind, sig, lang, written, augmented, example),
                     "answers": [(r["model"], r["code"]) for r in rows],
                     "stated": stated_examples(rows[0]["instruction"], entry)
                     if kind == FUNCTION else []})
    jobs, where = [], []
    for w, task in enumerate(work):
        for c, (_, code) in enumerate(task["answers"]):
            if code and code.strip() and task["cases"] and task["bound"][c]:
                try:
                    jobs.append(_job(task["kind"], task["language"], task["programs"][c],
                                     task["sig"], task["cases"], cfg))
                except (ValueError, TypeError):  # checked cases the harness cannot render
                    stats["harness_errors"] += 1
                    continue
                where.append((w, c))
    results = ctx.sandbox().run_programs(jobs) if jobs else []
    per_task: list[list] = [[None] * len(t["answers"]) for t in work]
    for (w, c), result in zip(where, results):
        per_task[w][c] = result
    for task, task_results in zip(work, per_task):
        candidates, records = _candidates(task, task_results, stats, cfg)
        rs = _finish(task, candidates, ctx.seed, stats)
        # the example alone is one call, not a suite (``Suite.example_only``)
        no_tests = not any(r["survived"] and r["kind"] != EXAMPLE_KIND for r in rs)
        for r in rs:
            r.pop("_case", None)
            r.pop("_input", None)
            r["no_tests"] = no_tests
            r["candidate_runs"] = records
        stats["instructions_no_tests"] += no_tests
        out.extend(rs)
    return out, dict(stats)
