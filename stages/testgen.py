"""Stage ``tests``: every expert writes assert tests per instruction; dual agreement keeps some.

Input (source ``answer``, one row per (instruction_id, model)): ``instruction_id, instruction,
model, code``. The function the tests must call (name and signature) is the public function or
class most answers define (``find_entry_point``); the authors see the task and that signature,
never an answer. Each author's reply is parsed into single asserts (or small blocks ending in
one); a reply without a usable test is a value (``parse_error``, raw text kept).

Every test is then run against every answer in the sandbox, and CodeT-style dual agreement
(``stages.selection.dual_agreement``) trusts the tests passed by the largest consistent group of
answers. An instruction whose tests all fail that cross-check is marked ``no_tests`` and is left
to the judge gate.

Output: one row per (instruction_id, author, test_idx): ``test_code, survived, reason``
(``null`` when survived; ``no_candidate_passes``, ``contradicts_consensus``, ``no_consensus``,
``duplicate``), ``entry_point, signature, passed_by`` (models whose answer passed it),
``consensus`` (models of the trusted group), ``no_tests`` (per instruction), ``raw`` and
``parse_error`` (the author's reply). An author whose reply held no test, or an instruction
without an entry point, gets one row with ``test_idx = -1`` and ``test_code = null`` (reason
``parse_error`` / ``no_entry_point``) so that nothing disappears silently.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import Field

from pipeline.stage import StageConfig, StageContext, StageResult, StageSpec
from stages.selection import dual_agreement
from stages.test_parsing import EntryPoint, ParsedTests, extract_tests, find_entry_point

PROMPTS = Path(__file__).resolve().parent.parent / "pipeline" / "prompts"
DUPLICATE, PARSE_ERROR, NO_ENTRY_POINT = "duplicate", "parse_error", "no_entry_point"

TESTS_SCHEMA = pa.schema([
    ("instruction_id", pa.string()), ("author", pa.string()), ("test_idx", pa.int64()),
    ("test_code", pa.string()), ("survived", pa.bool_()), ("reason", pa.string()),
    ("entry_point", pa.string()), ("signature", pa.string()),
    ("passed_by", pa.list_(pa.string())), ("consensus", pa.list_(pa.string())),
    ("no_tests", pa.bool_()), ("raw", pa.string()), ("parse_error", pa.string()),
])


class TestGenConfig(StageConfig):
    """Authors, sampling and execution limits of the ``tests`` stage."""

    __test__ = False  # not a pytest test class despite the name

    authors: list[str] | None = Field(None, description="test authors; default: the experts")
    tests_per_author: int = Field(5, ge=1, le=50, description="tests asked of each author")
    max_tests_per_author: int = Field(8, ge=1, le=100, description="tests kept per author")
    max_tokens: int = Field(384, ge=16)
    temperature: float = Field(0.0, ge=0)
    # Large by default: the llama.cpp backend refills a finished sequence's slot from the
    # conversations of the same call, so small calls leave slots idle behind one long reply.
    batch_size: int = Field(64, ge=1, description="conversations per backend call")
    timeout_s: float = Field(
        3.0, gt=0, description="wall-clock limit of one test run; below verify's 5 s so that a "
        "test trusted here does not time out there on a loaded machine")
    memory_mb: int | None = Field(None, ge=32, description="memory limit; None: the sandbox's")


@cache
def load_prompt(name: str) -> str:
    """A prompt template from ``pipeline/prompts`` (``testgen_system``, ``testgen_user``)."""
    return (PROMPTS / f"{name}.txt").read_text(encoding="utf-8").strip()


def build_conversation(instruction: str, entry: EntryPoint, n: int) -> list[dict[str, str]]:
    """The test-writing conversation for one instruction (no answer is shown)."""
    # str.replace, not str.format: instructions contain braces.
    user = load_prompt("testgen_user")
    for key, value in (("{n}", str(n)), ("{signature}", entry.signature),
                       ("{entry_point}", entry.name), ("{instruction}", instruction)):
        user = user.replace(key, value)
    return [{"role": "system", "content": load_prompt("testgen_system")},
            {"role": "user", "content": user}]


def write_tests(backend: Any, jobs: list[tuple[str, EntryPoint]], cfg: TestGenConfig,
                seed: int) -> list[tuple[ParsedTests, str]]:
    """One author's tests for each ``(instruction, entry point)``: ``(parsed, raw reply)``."""
    from pipeline.backends.base import SamplingParams

    params = SamplingParams(n=1, temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=seed)
    out: list[tuple[ParsedTests, str]] = []
    for start in range(0, len(jobs), cfg.batch_size):
        batch = jobs[start:start + cfg.batch_size]
        replies = backend.chat([build_conversation(text, entry, cfg.tests_per_author)
                                for text, entry in batch], params)
        for (_, entry), reply in zip(batch, replies):
            completion = reply[0]
            if completion.finish_reason == "error":
                out.append((ParsedTests((), f"backend error: {completion.error}"), completion.text))
            else:
                out.append((extract_tests(completion.text, entry.name, cfg.max_tests_per_author),
                            completion.text))
    return out


def cross_check(tests: list[dict], models: list[str], passes: list[list[bool]]) -> bool:
    """Mark ``survived / reason / passed_by / consensus`` on one instruction's test rows.

    ``tests`` are that instruction's rows in order (duplicates already marked and left out of
    ``passes``); ``passes[c][t]`` covers the non-duplicate tests. Returns ``no_tests``.
    """
    unique = [t for t in tests if t["reason"] != DUPLICATE]
    trust = dual_agreement(passes, n_tests=len(unique))
    consensus = [models[c] for c in trust.consensus]
    for t, row in enumerate(unique):
        row.update(survived=trust.survived[t], reason=trust.reasons[t], consensus=consensus,
                   passed_by=[models[c] for c in range(len(models)) if passes[c][t]])
    return not any(trust.survived)


def _rows_for_instruction(iid: str, entry: EntryPoint | None, authors: list[str],
                          written: dict[str, tuple[ParsedTests, str]]) -> list[dict]:
    base = {"instruction_id": iid, "entry_point": entry.name if entry else None,
            "signature": entry.signature if entry else None, "survived": False,
            "passed_by": [], "consensus": [], "no_tests": True}
    if entry is None:
        return [dict(base, author=a, test_idx=-1, test_code=None, reason=NO_ENTRY_POINT,
                     raw=None, parse_error=None) for a in authors]
    rows, seen = [], set()
    for author in authors:
        parsed, raw = written[author]
        if not parsed.tests:
            rows.append(dict(base, author=author, test_idx=-1, test_code=None, reason=PARSE_ERROR,
                             raw=raw, parse_error=parsed.parse_error))
        for k, code in enumerate(parsed.tests):
            rows.append(dict(base, author=author, test_idx=k, test_code=code,
                             reason=DUPLICATE if code in seen else "", raw=raw, parse_error=None))
            seen.add(code)
    return rows


def run(table: pa.Table, cfg: TestGenConfig, ctx: StageContext) -> StageResult:
    """Write tests with every author, cross-check them against every answer, keep the trusted."""
    from stages.verify import execute

    if not cfg.authors:
        raise ValueError("tests.authors: no author configured (a run fills in its experts)")
    authors = list(cfg.authors)
    if not authors:
        raise ValueError("tests.authors: no test author configured")
    answers: dict[str, list[dict]] = defaultdict(list)
    for row in table.select(["instruction_id", "instruction", "model", "code"]).to_pylist():
        answers[row["instruction_id"]].append(row)
    entries = {iid: find_entry_point([r["code"] for r in rows]) for iid, rows in answers.items()}
    todo = [iid for iid in answers if entries[iid] is not None]
    written: dict[str, dict[str, tuple[ParsedTests, str]]] = defaultdict(dict)
    for author in authors:
        jobs = [(answers[iid][0]["instruction"], entries[iid]) for iid in todo]
        for iid, result in zip(todo, write_tests(ctx.backend(author), jobs, cfg, ctx.seed)):
            written[iid][author] = result

    per_instruction = {iid: _rows_for_instruction(iid, entries[iid], authors, written[iid])
                       for iid in answers}
    # One sandbox batch for the whole shard: every (answer, unique test) pair of every instruction.
    items, spans = [], {}
    for iid in todo:
        unique = [r["test_code"] for r in per_instruction[iid] if r["reason"] == ""]
        spans[iid] = (len(items), unique)
        items.extend((r["code"], unique) for r in answers[iid])
    verdicts = execute(ctx.sandbox(), items, timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb,
                       fail_fast=False) if items else []
    stats: dict[str, float] = defaultdict(float)
    out_rows = []
    for iid, rows in per_instruction.items():
        test_rows = [r for r in rows if r["test_idx"] >= 0]
        no_tests = True
        if iid in spans and test_rows:
            start, unique = spans[iid]
            models = [r["model"] for r in answers[iid]]
            passes = [[s == "passed" for s in v.per_test] or [False] * len(unique)
                      for v in verdicts[start:start + len(models)]]
            no_tests = cross_check(test_rows, models, passes)
        for r in rows:
            r["no_tests"] = no_tests
            r["reason"] = r["reason"] or None
            stats[f"tests_written.{r['author']}"] += r["test_idx"] >= 0
            stats[f"tests_survived.{r['author']}"] += bool(r["survived"])
            stats[f"parse_errors.{r['author']}"] += r["reason"] == PARSE_ERROR
            if r["reason"] and r["test_idx"] >= 0:
                stats[f"discarded.{r['reason']}"] += 1
        stats["instructions_no_tests"] += no_tests
        stats["instructions_no_entry_point"] += entries[iid] is None
        out_rows.extend(rows)
    ctx.advance(table.num_rows)
    out = pa.Table.from_pylist(out_rows, schema=TESTS_SCHEMA)
    return StageResult(table=out, stats=dict(stats))


STAGE = StageSpec(name="tests", config=TestGenConfig, run=run, source="answer", uses_models=True,
                  inputs=("instruction_id", "instruction", "model", "code"),
                  prompts=("testgen_*.txt",),
                  outputs=tuple(TESTS_SCHEMA.names))
