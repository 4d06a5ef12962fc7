"""``arenaforge judge-bench``: sample, execute, pair, judge, and write the judge card.

Everything it computes is kept under ``--out``: ``samples.parquet`` (every answer with its
execution status), ``references.parquet`` (the expert's answers), ``pairs.parquet``,
``verdicts/<variant>/*.parquet`` (the judge stage's rows, both orders, per chunk of pairs),
``requests/`` (the request cache) and the card (``card.json``, ``card.md``, ``*.png``). A
rerun reads what is there; a bigger ``--problems`` samples only the new problems.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from arenaforge.pipeline.apps.host import processor
from arenaforge.pipeline.apps.judge_bench import card, judging, pairs, report, samples
from arenaforge.pipeline.apps.judge_bench.config import BenchConfig
from arenaforge.pipeline.statuses import PASSED
from arenaforge.stages.output.audit_stats import jsonable

log = logging.getLogger(__name__)


class Backends:
    """One loaded model at a time (the judges run one after another), through the request
    cache under ``out/requests``."""

    def __init__(self, cfg: BenchConfig, cache_dir: Path):
        from arenaforge.pipeline.models import load_registry

        self.registry = load_registry(cfg.models_file)
        self.cfg, self.cache_dir = cfg, cache_dir
        self.current: tuple[str, object] | None = None

    def family(self, model: str) -> str | None:
        spec = self.registry.get(model)
        return spec.family if spec is not None else None

    def __call__(self, model: str):
        from arenaforge.pipeline.backends import create_backend

        if self.current is not None and self.current[0] == model:
            return self.current[1]
        self.close()
        if model not in self.registry:
            raise ValueError(f"judge-bench: model {model!r} is not in {self.cfg.models_file}")
        backend = create_backend(self.registry[model], n_threads=self.cfg.threads,
                                 cache_dir=self.cache_dir)
        self.current = (model, backend)
        return backend

    def close(self) -> None:
        if self.current is not None:
            self.current[1].close()
            self.current = None


def _read(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist() if path.exists() else []


def _write(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)


def answer_problems(cfg: BenchConfig, problems: list[dict], backends: Backends, out: Path,
                    models: list[str], n: int, temperature: float, path: Path,
                    progress) -> list[dict]:
    """Answers of ``models`` to ``problems``, executed; kept in ``path``, only new ones made."""
    from arenaforge.pipeline.sandbox import SandboxPool
    from arenaforge.pipeline.sandbox.config import SandboxConfig

    rows = _read(path)
    done = {(r["model"], r["task_id"]) for r in rows}
    by_id = {p["task_id"]: p for p in problems}
    pool = None
    try:
        for model in models:
            todo = [p for p in problems if (model, p["task_id"]) not in done]
            for start in range(0, len(todo), 8):  # saved every 8 problems: a kill loses little
                chunk = todo[start:start + 8]
                began = time.perf_counter()
                new = samples.sample_answers(backends(model), model, chunk, n, temperature,
                                             cfg.max_tokens, cfg.seed)
                pool = pool or SandboxPool.from_config(SandboxConfig())
                samples.execute_answers(pool, by_id, new, cfg.timeout_s)
                rows += new
                _write(path, rows)
                passed = sum(r["status"] == PASSED for r in new)
                progress(f"  {model}: {len(chunk)} problems x {n} answers, {passed} pass "
                         f"({time.perf_counter() - began:.0f} s)")
    finally:
        if pool is not None:
            pool.close()
    wanted = set(by_id)
    return [r for r in rows if r["task_id"] in wanted and r["model"] in models]


def expert_references(cfg: BenchConfig, problems: list[dict], backends: Backends, out: Path,
                      progress) -> dict[str, str]:
    """task_id -> the expert's greedy answer, for problems where it passes the tests."""
    rows = answer_problems(cfg, problems, backends, out, [cfg.expert], 1, 0.0,
                           out / "references.parquet", progress)
    by_id = {p["task_id"]: p for p in problems}
    return {r["task_id"]: samples.shown_text(by_id[r["task_id"]], r["response"], cfg.show)
            for r in rows if r["status"] == PASSED}


def write_card(cfg: BenchConfig, out: Path, problems: list[dict], answers: list[dict],
               counts: dict, results: list[dict], command: str, began: float) -> dict:
    """Write card.json, card.md and the figures from the results so far."""

    result = {
        "schema_version": 1, "name": cfg.name, "benchmark": cfg.problems,
        "problems": len(problems), "contestants": cfg.contestants, "samples": cfg.samples,
        "temperature": cfg.temperature, "shown": cfg.show, "pairs": counts,
        "results": results, "variants_planned": [v.name for v in cfg.variants],
        "answers": {m: {"answers": sum(r["model"] == m for r in answers),
                        "passed": sum(r["model"] == m and r["status"] == PASSED
                                      for r in answers)} for m in cfg.contestants},
        "command": command, "wall_s": round(time.perf_counter() - began, 1),
        "processor": processor(),
    }
    (out / "card.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (out / "card.md").write_text(report.card_markdown(result, report.write_plots(result, out)))
    return result


def run_bench(cfg: BenchConfig, n_problems: int | None, out: Path, progress=print,
              command: str = "") -> dict:
    """Run the bench into ``out`` and return the card (also written as card.json/card.md)."""
    began = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    problems = samples.load_benchmark(cfg.problems, n_problems)
    by_id = {p["task_id"]: p for p in problems}
    backends = Backends(cfg, out / "requests")
    try:
        progress(f"judge-bench: {len(problems)} problems, {cfg.samples} samples per contestant")
        answers = answer_problems(cfg, problems, backends, out, cfg.contestants, cfg.samples,
                                  cfg.temperature, out / "samples.parquet", progress)
        for r in answers:  # lengths are of what the judge sees (the length-bias measure)
            r["shown"] = samples.shown_text(by_id[r["task_id"]], r["response"], cfg.show)
            r["chars"] = len(r["shown"])
        pair_rows = pairs.build_pairs(answers, cfg.pairs_per_problem, cfg.seed)
        _write(out / "pairs.parquet", pair_rows)
        counts = card.pair_counts(pd.DataFrame(pair_rows))
        progress(f"pairs: {counts['count']} ({counts['same_model']} same-model, "
                 f"{counts['cross_model']} cross-model) from {counts['problems']} problems")
        texts = {(r["task_id"], r["sample_id"]): r["shown"] for r in answers}
        results: list[dict] = []
        correct: dict[tuple, pd.Series] = {}  # (judge, protocol, reference) -> per pair
        result: dict = {}
        for variant in cfg.variants:
            chosen = pairs.subset(pair_rows, variant.max_pairs)
            refs = {}
            if variant.reference == "canonical":
                refs = {t: samples.canonical_answer(p) for t, p in by_id.items()}
            elif variant.reference == "expert":
                refs = expert_references(cfg, [by_id[t] for t in
                                               dict.fromkeys(p["task_id"] for p in chosen)],
                                         backends, out, progress)
                chosen = [p for p in chosen if p["task_id"] in refs]
            battles = [judging.battle(p, texts, samples.instruction(by_id[p["task_id"]]),
                                      refs.get(p["task_id"])) for p in chosen]
            rows = judging.judge_variant(variant, battles, [p["pair_id"] for p in chosen],
                                         cfg.judge_config(variant), backends, out,
                                         cfg.chunk_pairs, cfg.seed, progress)
            if rows.num_rows:
                frame = rows.to_pandas()
                families = {m: backends.family(m) for m in
                            {variant.judge, *cfg.contestants}}
                entry = card.variant_result(variant, frame, pd.DataFrame(pair_rows), families)
                key = (variant.judge, variant.protocol)
                correct[(*key, variant.reference)] = card.pair_correct(
                    frame, pd.DataFrame(pair_rows))
                if variant.reference != "none" and (*key, "none") in correct:
                    entry["reference_effect"] = jsonable(card.paired_effect(
                        correct[(*key, variant.reference)], correct[(*key, "none")]))
                entry["seconds_per_verdict"], entry["seconds_measured_pairs"] = \
                    judging.measured_seconds(variant, out)
                results.append(entry)
            # written after every variant: a long bench shows its card while it runs
            result = write_card(cfg, out, problems, answers, counts, results, command, began)
    finally:
        backends.close()
    return result


def bench_main(config: Path, n_problems: int | None, out: Path) -> dict:
    """The CLI's entry: load the config, run, print the headline table."""
    import shlex
    import sys

    from arenaforge.pipeline.apps.judge_bench.config import load_bench_config
    from arenaforge.pipeline.apps.judge_bench.report import headline_table

    cfg = load_bench_config(config)
    command = "arenaforge judge-bench " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    result = run_bench(cfg, n_problems, Path(out), command=command,
                       progress=lambda text: print(text, flush=True))
    print(headline_table(result))
    print(f"card written to {Path(out) / 'card.md'} ({result['wall_s'] / 60:.1f} min)")
    return result
