"""``arenaforge verify-bench``: a run's own roles on problems whose hidden tests it never sees.

The problems (``problems``) become the run's instruction file; the config runs on them as
shipped except for ``BYPASS``: no decontamination (HumanEval is what it would remove), compress
keeps every row (no budget, no semantic dedup), clean keeps near-duplicates and text that does
not read as a request, difficulty rates every problem and asks its concrete-task question as
configured but drops none (a bench problem is a task by construction), and emit keeps every
verified task (no task dedup), so that every problem reaches the arena and its row reaches the
card (a drop there still would be counted, by stage and reason). Then every
answer, every judges' winner and every emitted row is run on the hidden tests
(``grading``), and the card (``card``, ``report``) is written. Under ``--out``::

    instructions.jsonl   the run's mine.source: instruction, language, task_kind (no tests)
    run/                 the run directory: a rerun resumes it (requests come from its cache)
    results.jsonl        per problem: each answer's hidden-test status, the winner, the
                         emitted row and, if lost, why (never the tests' text)
    card.json, card.md   the card

A problem reaches nothing of the run but its instruction: not the prompts, the test authors,
repair or any stage's rows (``tests/apps/test_verify_bench.py`` checks it with a canary).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from arenaforge.pipeline.apps.verify_bench.card import ProblemResult, build_card, lost_reason
from arenaforge.pipeline.apps.verify_bench.problems import (
    HUMANEVAL,
    Problem,
    humaneval_problems,
    write_instructions,
)
from arenaforge.pipeline.apps.verify_bench.problems_file import load_problems_file
from arenaforge.pipeline.apps.verify_bench.run_view import RunView, read_run
from arenaforge.stages.instructions.difficulty import SCORE_MIN

BYPASS = ("decontaminate.humaneval=false", "decontaminate.benchmarks=[]",
          "decontaminate.embedding.enabled=false", "compress.budget=1.0",
          "compress.min_distance=null", "clean.near_dup.enabled=false",
          "clean.require_request=false", "clean.max_chars=100000",
          f"difficulty.min_difficulty={SCORE_MIN}", "emit.dedup_distance=null")
NEEDED_STAGES = ("answer", "judge", "rate", "tests", "verify", "emit")
RUN_NAME, INSTRUCTIONS = "run", "instructions.jsonl"


class BenchError(ValueError):
    """The bench cannot run as asked: ``code`` 2 for bad input or config (nothing ran), 1 for
    a run that failed."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def bench_problems(n: int | None, languages: Sequence[str] | None, problems_file: Path | None,
                   seed: int) -> tuple[list[Problem], str, dict[str, Any]]:
    """The problems, the benchmark's name and what was untranslatable (per language).

    Raises:
        BenchError: an unknown language, a bad --problems or problems file (names the row).
    """
    from arenaforge.pipeline.apps.evaluate_languages import resolve_languages

    try:
        if problems_file is not None:
            if languages:
                raise BenchError("--language picks HumanEval's translations; a problems file "
                                 "names each problem's language (its 'language' field)")
            return load_problems_file(problems_file, n, seed), str(problems_file), {}
        problems, skipped = humaneval_problems(n, resolve_languages(languages or ["python"]),
                                               seed)
    except BenchError:
        raise
    except ValueError as exc:
        raise BenchError(str(exc)) from None
    return problems, HUMANEVAL, skipped


def bench_config(config: Path, out: Path, overrides: Sequence[str]) -> tuple[Any, list[str]]:
    """The run config: the file, ``BYPASS``, the user's ``--set``, then the bench's own
    instruction file and run directory; and the overrides applied.

    Raises:
        BenchError: a config error, a stage the bench needs is not configured, or a model
            that cannot serve its stage's protocol.
    """
    from arenaforge.pipeline.capability_check import check_protocol_capabilities
    from arenaforge.pipeline.config import ConfigError, load_config

    where = out.resolve()
    applied = [*BYPASS, *overrides, f"mine.source={where / INSTRUCTIONS}",
               f"artifacts_dir={where}", f"name={RUN_NAME}"]
    try:
        cfg = load_config(config, applied)
        if cfg.difficulty.min_task_prob:  # still asked (its column kept), no longer a filter
            applied.insert(len(BYPASS), "difficulty.min_task_prob=0.0")
            cfg = load_config(config, applied)
        check_protocol_capabilities(cfg, f"{config} (with verify-bench's overrides)")
    except ConfigError as exc:
        raise BenchError(str(exc)) from None
    missing = [s for s in NEEDED_STAGES if s not in cfg.stages]
    if missing:
        raise BenchError(f"{config}: stages: verify-bench needs {', '.join(missing)} (it grades "
                         "answers, winners and emitted rows)")
    return cfg, applied


def run_checked(cfg: Any, fresh: bool, show_progress: bool) -> Any:
    """``run_pipeline``, its failures as ``BenchError`` with the code ``arenaforge run`` gives
    them (``arenaforge.pipeline.run_failures``: 2 nothing could start, 1 a stage failed or a
    model could not serve; completed shards are kept)."""
    from arenaforge.pipeline.run_failures import run_failure
    from arenaforge.pipeline.runner import run_pipeline

    try:
        return run_pipeline(cfg, fresh=fresh, show_progress=show_progress)
    except Exception as exc:
        failure = run_failure(exc)
        if failure is None:
            raise
        raise BenchError(*failure) from None


def problem_id(problem: Problem) -> str:
    """The instruction_id the run gives the problem's instruction (``clean``'s recipe)."""
    from arenaforge.pipeline.textnorm import instruction_id
    from arenaforge.stages.instructions.clean import normalize_instruction

    return instruction_id(normalize_instruction(problem.instruction), problem.language,
                          problem.task_kind)


def grade_run(problems: Sequence[Problem], view: RunView, cfg: Any
              ) -> tuple[list[ProblemResult], list[dict[str, Any]]]:
    """Each problem's result on its hidden tests, and the rows of ``results.jsonl``."""
    from arenaforge.pipeline.apps.verify_bench.grading import grade_answers
    from arenaforge.pipeline.sandbox import SandboxPool

    ids = [problem_id(p) for p in problems]
    items: dict[tuple[int, str], int] = {}  # (problem, text) -> its index in the batch
    for i, iid in enumerate(ids):
        texts = [*view.answers.get(iid, {}).values()]
        texts += [view.emitted[iid]["text"]] if iid in view.emitted else []
        for text in texts:
            items.setdefault((i, text), len(items))
    pool = SandboxPool.from_config(cfg.sandbox)
    try:
        grades = grade_answers(pool, [(problems[i], text) for i, text in items],
                               timeout_s=cfg.verify.timeout_s, memory_mb=cfg.verify.memory_mb)
    finally:
        pool.close()
    results, rows = [], []
    for i, (problem, iid) in enumerate(zip(problems, ids)):
        answers = view.answers.get(iid, {})
        status = {m: grades[items[(i, text)]] for m, text in answers.items()}
        emitted = None
        if iid in view.emitted:
            row = view.emitted[iid]
            passed, hidden = grades[items[(i, row["text"])]]
            emitted = {**{k: v for k, v in row.items() if k != "text"}, "passed": passed,
                       "hidden_status": hidden}
        result = ProblemResult(
            problem.task_id, problem.group, view.dropped.get(iid),
            {m: ok for m, (ok, _) in status.items()}, view.outcomes.get(iid, {}),
            view.winners.get(iid), emitted, view.emit_dropped.get(iid, {}))
        results.append(result)
        rows.append({"task_id": problem.task_id, "language": problem.language,
                     "task_kind": problem.task_kind, "instruction_id": iid,
                     "dropped": result.dropped, "answers": {m: s for m, (_, s) in status.items()},
                     "admission": {m: o.get("admission") for m, o in result.outcomes.items()},
                     "winner": result.winner, "emitted": emitted,
                     "lost": lost_reason(result) if result.solvable and not result.verified
                     else None})
    return results, rows


def run_bench(config: Path, n: int | None, out: Path, *, languages: Sequence[str] | None = None,
              problems_file: Path | None = None, overrides: Sequence[str] = (), seed: int = 0,
              fresh: bool = False, show_progress: bool = True,
              progress: Callable[[str], None] = print, command: str = "") -> dict[str, Any]:
    """Run the bench into ``out`` and return the card (also ``card.json`` and ``card.md``).

    Raises:
        BenchError: bad input or config before anything ran (``code`` 2), or a failed run (1).
    """
    from arenaforge.pipeline.apps.host import processor
    from arenaforge.pipeline.apps.verify_bench.report import card_markdown
    from arenaforge.stages.output.audit_stats import jsonable

    began = time.perf_counter()
    problems, benchmark, skipped = bench_problems(n, languages, problems_file, seed)
    out = Path(out)
    write_instructions(problems, out / INSTRUCTIONS)
    cfg, applied = bench_config(config, out, overrides)
    progress(f"verify-bench: {len(problems)} problems ({benchmark}) -> {out / RUN_NAME}")
    result = run_checked(cfg, fresh, show_progress)
    run_s = time.perf_counter() - began
    results, rows = grade_run(problems, read_run(result.run_dir), cfg)
    (out / "results.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
    meta = {"config": str(config), "command": command, "benchmark": benchmark, "seed": seed,
            "problems_requested": n, "untranslatable": skipped, "overrides": applied,
            "experts": list(cfg.answer.experts), "judges": list(cfg.judge.judges),
            "test_authors": list(cfg.tests.authors or ()), "config_hash": cfg.config_hash(),
            "run_dir": str(result.run_dir), "hidden_timeout_s": cfg.verify.timeout_s,
            "processor": processor(), "run_s": round(run_s, 1),
            "wall_s": round(time.perf_counter() - began, 1)}
    card = jsonable(build_card(results, meta))
    (out / "card.json").write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
    (out / "card.md").write_text(card_markdown(card))
    return card


def bench_main(config: Path, n: int | None, out: Path, languages: Sequence[str] | None,
               problems_file: Path | None, overrides: Sequence[str], seed: int, fresh: bool,
               quiet: bool) -> dict[str, Any]:
    """The CLI's entry: run the bench, print the headline table and where the card is."""
    from arenaforge.pipeline.apps.verify_bench.report import headline_table

    command = "arenaforge verify-bench " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    card = run_bench(config, n, out, languages=languages, problems_file=problems_file,
                     overrides=overrides, seed=seed, fresh=fresh, show_progress=not quiet,
                     progress=lambda text: print(text, flush=True), command=command)
    print(headline_table(card))
    print(f"card written to {Path(out) / 'card.md'} ({card['wall_s'] / 60:.1f} min)")
    return card
