"""``arenaforge ablate RUN_DIR``: does the selection rule change what the fine-tuned model learns?

From one completed run's answers (the ``verify`` table: one row per (instruction, expert) with
its execution verdict and the rate stage's winner) one SFT dataset is emitted per selection
rule, over the same instructions and so of the same size:

* ``random``: a seeded random expert's answer (the baseline every rule is compared with);
* ``judge``: the rate stage's winner, as the WarriorCoder paper did;
* ``verified`` and ``execution_first``: ``arenaforge.stages.arena.selection.select_answer`` as the verify stage
  applies them.

Each dataset trains the same recipe (same base model, steps and seed) and is evaluated on
HumanEval through the sandbox; pass@1 gets an exact Clopper-Pearson 95% interval and each rule
a paired exact McNemar test against ``random`` over the same problems. The untrained base model
is evaluated once as a reference row.

Layout under ``RUN_DIR/ablation/``::

    selection.json            the instructions used, the ones excluded and why
    <rule>/dataset/           train-00000-of-00001.parquet (the emit stage's schema)
    <rule>/dataset.json       the dataset's fingerprint and file checksums
    <rule>/model/             the fine-tuned model (ablation.json: its fingerprint)
    <rule>/eval.json          the eval result (samples under <rule>/eval/)
    base/eval.json            the untrained base model's eval result
    results.json, table.md    the comparison

Every step is keyed by a fingerprint of its inputs, so a rerun skips what is done and redoes
only what a changed setting invalidates (a new eval limit re-evaluates without retraining).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import yaml
from arenaforge.pipeline import layout
from arenaforge.pipeline.apps.ablate_select import (
    ABLATION_RULES,
    BASELINE,
    AblationRule,
    Plan,
    plan_selection,
    rule_table,
)
from arenaforge.pipeline.apps.ablate_stats import BASE_ROW, cells, markdown_table, summarize
from arenaforge.pipeline.store import (
    RunStore,
    atomic_write_bytes,
    atomic_write_json,
    file_sha256,
    read_json,
    table_hash,
)
from pydantic import BaseModel, ConfigDict, Field, field_validator

log = logging.getLogger(__name__)

DEFAULT_CONFIG = Path("configs/ablate-tiny.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EvalSettings(_Strict):
    """How every model of the ablation is evaluated (the same for all)."""

    suite: str = "humaneval"
    language: str = Field(
        "python", description="the language the models are evaluated in (an id or a name): "
        "HumanEval itself for python, its translation for the others (docs/EVALUATION.md), so "
        "an ablation shows what one language's data is worth")
    limit: int | None = Field(20, ge=1, description="first N problems; None: all")
    max_new_tokens: int = Field(256, ge=1)
    prompt_style: Literal["auto", "completion", "chat"] = Field(
        "chat", description="chat: the models are trained on chat turns")
    timeout_s: float | None = Field(None, gt=0, description="per program; None: the sandbox's")
    seed: int = 0

    @field_validator("language")
    @classmethod
    def _one_language(cls, value: str) -> str:
        from arenaforge.pipeline.apps.evaluate_languages import resolve_languages

        ids = resolve_languages([value])
        if len(ids) != 1:
            raise ValueError(f"one language, not {value!r} (one ablation per language)")
        return ids[0]


class AblateConfig(_Strict):
    """``configs/ablate-*.yaml``.

    Attributes:
        train_recipe: the ``arenaforge train`` config every rule is trained with; its
            ``datasets`` and ``output_dir`` are replaced per rule.
        train_overrides: ``key=value`` overrides applied to the recipe (e.g. ``max_steps=20``).
        rules: the selection rules to compare; must include ``random``, the baseline.
        source: the stage whose answers are selected from. ``verify`` (default) holds every
            expert's original answer; ``repair`` replaced only the answers the run's own rule
            selected, which would favour that rule.
        seed: seeds the ``random`` rule and the ``max_instructions`` sample.
        require_passing: keep only instructions where some answer passed its tests, so that
            ``verified`` admits a verified answer everywhere; otherwise every instruction.
        max_instructions: a seeded sample of at most this many instructions (None: all).
        min_pass_rate, min_gap: ``execution_first``'s thresholds; None: the run's verify config.
        system_prompt: the optional system turn of every SFT row.
        include_base: also evaluate the untrained base model.
        eval: the evaluation settings.
    """

    train_recipe: Path
    train_overrides: list[str] = Field(default_factory=list)
    rules: list[AblationRule] = Field(default_factory=lambda: list(ABLATION_RULES))
    source: Literal["verify", "repair"] = "verify"
    seed: int = 0
    require_passing: bool = True
    max_instructions: int | None = Field(None, ge=1)
    min_pass_rate: float | None = Field(None, ge=0, le=1)
    min_gap: float | None = Field(None, ge=0, le=1)
    system_prompt: str | None = None
    include_base: bool = True
    eval: EvalSettings = Field(default_factory=EvalSettings)

    @field_validator("rules")
    @classmethod
    def _rules(cls, rules: list[str]) -> list[str]:
        if len(set(rules)) != len(rules):
            raise ValueError(f"rules must be unique, got {rules}")
        if BASELINE not in rules:
            raise ValueError(f"rules must include {BASELINE!r}, the baseline of the comparison")
        return rules


def load_ablate_config(path: Path, overrides: list[str] | None = None) -> AblateConfig:
    """Load an ablation config; ``train_recipe`` resolves against the working directory, else
    against the config's folder.

    Raises:
        ConfigError: missing file, bad YAML, unknown key, wrong type, missing recipe.
    """
    from arenaforge.pipeline.config import ConfigError, load_yaml_model

    path = Path(path)
    cfg = load_yaml_model(path, AblateConfig, list(overrides or []), what="ablation config")
    recipe = cfg.train_recipe
    if not recipe.is_absolute() and not recipe.is_file():
        recipe = path.parent / recipe
    if not recipe.is_file():
        raise ConfigError(f"{path}: train_recipe: {cfg.train_recipe} not found (looked in the "
                          f"working directory and in {path.parent})")
    return cfg.model_copy(update={"train_recipe": recipe})


# -- the steps ----------------------------------------------------------------------------

def _fingerprint(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cached(path: Path, fingerprint: str) -> dict[str, Any] | None:
    record = read_json(path)
    return record if record and record.get("fingerprint") == fingerprint else None


def load_answers(run_dir: Path, source: str) -> tuple[pa.Table, str]:
    """The complete ``source`` stage of a run and its fingerprint (from its ``_SUCCESS``)."""
    stage = RunStore(run_dir).stage(source)
    info = stage.success()
    if info is None:
        raise FileNotFoundError(f"{run_dir}: stage {source!r} is not complete (no "
                                f"{stage.dir}/_SUCCESS); run the pipeline through {source}")
    table = stage.read()
    content = info.get("output_hash") or table_hash(table)  # the runner records it; else hash
    return table, _fingerprint(source, info.get("fingerprint"), content)


def emit_rule(table: pa.Table, plan: Plan, rule: str, out: Path, *, run_id: str,
              system_prompt: str | None, selection_fp: str) -> dict[str, Any]:
    """Write one rule's dataset (skipped when the same content is already there)."""
    from arenaforge.pipeline.statuses import PASSED
    from arenaforge.stages.output.emit import build_sft_rows, write_dataset

    chosen = rule_table(table, plan, rule)
    sft = build_sft_rows(chosen, system_prompt=system_prompt, run_id=run_id,
                         config_hash=selection_fp)
    fp = _fingerprint("dataset", table_hash(sft))
    record_path = out / "dataset.json"
    record = _cached(record_path, fp)
    folder = out / layout.DATASET
    if record and all((folder / f).is_file() and file_sha256(folder / f) == sha
                      for f, sha in record["files"].items()):
        return record
    paths = write_dataset(sft, folder)
    for stale in set(folder.glob(layout.DATASET_SHARDS)) - set(paths):
        stale.unlink()  # an earlier, differently sharded write
    judge_pick = {iid: table["model"][plan.picks["judge"][iid]].as_py()
                  for iid in plan.instruction_ids} if "judge" in plan.picks else None
    record = {
        "fingerprint": fp, "rule": rule, "rows": sft.num_rows,
        "verified": sum(s == PASSED for s in sft["status"].to_pylist()),
        "sources": dict(Counter(sft["source_model"].to_pylist())),
        "differs_from_judge": None if judge_pick is None else sum(
            judge_pick[iid] != m for iid, m in zip(sft["instruction_id"].to_pylist(),
                                                   sft["source_model"].to_pylist())),
        "files": {p.name: file_sha256(p) for p in paths},
    }
    atomic_write_json(record_path, record)
    return record


def train_rule(train_cfg: Any, dataset_fp: str, out: Path) -> tuple[Path, str, bool]:
    """Fine-tune the recipe on ``out/dataset``; returns (model dir, fingerprint, skipped)."""
    from arenaforge.pipeline.apps.training import TrainConfig, train
    from arenaforge.pipeline.apps.training.base_model import is_model_dir

    model_dir = out / "model"
    recipe = train_cfg.model_dump(mode="json", exclude={"datasets", "output_dir"})
    fp = _fingerprint("model", dataset_fp, recipe)
    marker = model_dir / "ablation.json"
    if is_model_dir(model_dir) and _cached(marker, fp):
        return model_dir, fp, True
    marker.unlink(missing_ok=True)  # a killed training must not pass for a finished one
    cfg = TrainConfig.model_validate({**train_cfg.model_dump(), "datasets": [str(out / layout.DATASET)],
                                      "output_dir": model_dir})
    train(cfg)
    atomic_write_json(marker, {"fingerprint": fp, "dataset": dataset_fp, "recipe": recipe})
    return model_dir, fp, False


def eval_model(model_dir: Path, model_fp: str, out: Path, settings: EvalSettings,
               models_file: Path) -> tuple[dict[str, Any], bool]:
    """HumanEval pass@1 of a model dir in ``settings.language`` (skipped when the same model and
    settings were done); for another language than Python, that language's result."""
    from arenaforge.pipeline.apps.evaluate import evaluate

    fp = _fingerprint("eval", model_fp, settings.model_dump(mode="json"))
    record = _cached(out / "eval.json", fp)
    if record:
        return record["result"], True
    language = settings.language
    result = evaluate(str(model_dir), suite=settings.suite, limit=settings.limit, n_samples=1,
                      k=(1,), max_new_tokens=settings.max_new_tokens,
                      prompt_style=settings.prompt_style, timeout_s=settings.timeout_s,
                      seed=settings.seed, models_file=models_file, output_dir=out / "eval",
                      languages=[language])
    if language != "python":  # the same shape as Python's result: problems, pass@1, statuses
        result = {**{k: v for k, v in result.items() if k != "languages"},
                  **result["languages"][language], "language": language}
    atomic_write_json(out / "eval.json", {"fingerprint": fp, "result": result})
    return result, False


def _run_thresholds(run_dir: Path, cfg: AblateConfig) -> tuple[float, float]:
    run_cfg = yaml.safe_load((run_dir / layout.CONFIG).read_text()) if (
        run_dir / layout.CONFIG).is_file() else {}
    verify = (run_cfg or {}).get("verify") or {}
    return (cfg.min_pass_rate if cfg.min_pass_rate is not None
            else float(verify.get("min_pass_rate", 0.0)),
            cfg.min_gap if cfg.min_gap is not None else float(verify.get("min_gap", 0.0)))


def _passive_openmp() -> None:
    # torch's OpenMP threads spin while they wait for each other; on shared cores a spinning
    # thread starves the others. Measured here (2 cores, load ~14): 24 greedy tokens of
    # SmolLM2-135M took 74 s with 2 spinning threads, 6.9 s with OMP_WAIT_POLICY=PASSIVE.
    # libgomp reads the variable once, when torch loads, so it is set before any import of it.
    if "torch" in sys.modules:
        log.debug("torch already loaded: OMP_WAIT_POLICY left as it is")
        return
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def run_ablation(run_dir: Path, cfg: AblateConfig) -> dict[str, Any]:
    """Emit, train and evaluate one dataset per rule; write ``results.json`` and ``table.md``.

    Returns:
        The content of ``results.json``: settings, the selection summary, per-rule dataset
        records and eval summaries, and the comparison ``rows``.

    Raises:
        FileNotFoundError: the run lacks a complete ``cfg.source`` stage.
        ValueError: no instruction survives the selection.
    """
    _passive_openmp()
    from arenaforge.pipeline.apps.training import load_train_config, resolve_model_dir

    run_dir = Path(run_dir)
    out = run_dir / "ablation"
    table, source_fp = load_answers(run_dir, cfg.source)
    min_pass_rate, min_gap = _run_thresholds(run_dir, cfg)
    plan = plan_selection(table, list(cfg.rules), seed=cfg.seed,
                          require_passing=cfg.require_passing,
                          max_instructions=cfg.max_instructions, min_pass_rate=min_pass_rate,
                          min_gap=min_gap)
    selection = {"source": cfg.source, "source_fingerprint": source_fp,
                 "instructions_in": len(plan.instruction_ids) + len(plan.excluded),
                 "instructions_kept": len(plan.instruction_ids),
                 "excluded": dict(Counter(plan.excluded.values())),
                 "excluded_ids": plan.excluded, "min_pass_rate": min_pass_rate,
                 "min_gap": min_gap}
    atomic_write_json(out / "selection.json", selection)
    if not plan.instruction_ids:
        raise ValueError(f"ablate: no instruction of {run_dir} can be used by every rule "
                         f"(excluded: {selection['excluded']})")
    selection_fp = _fingerprint(source_fp, cfg.model_dump(mode="json", include={
        "rules", "seed", "require_passing", "max_instructions", "system_prompt"}),
        min_pass_rate, min_gap)

    train_cfg = load_train_config(cfg.train_recipe, cfg.train_overrides)
    datasets, results, steps = {}, {}, {}
    if cfg.include_base:
        base_dir = resolve_model_dir(train_cfg.model, models_file=train_cfg.models_file)
        results[BASE_ROW], skipped = eval_model(base_dir, _fingerprint("base", str(base_dir)),
                                                out / BASE_ROW, cfg.eval, train_cfg.models_file)
        steps[BASE_ROW] = {"eval_skipped": skipped}
    for rule in cfg.rules:
        rule_dir = out / rule
        datasets[rule] = emit_rule(table, plan, rule, rule_dir, system_prompt=cfg.system_prompt,
                                   run_id=f"{run_dir.name}/ablation/{rule}",
                                   selection_fp=selection_fp)
        model_dir, model_fp, trained_before = train_rule(train_cfg, datasets[rule]["fingerprint"],
                                                         rule_dir)
        results[rule], eval_skipped = eval_model(model_dir, model_fp, rule_dir, cfg.eval,
                                                 train_cfg.models_file)
        metrics = read_json(model_dir / "train_metrics.json") or {}
        steps[rule] = {"train_skipped": trained_before, "eval_skipped": eval_skipped,
                       "global_step": metrics.get("global_step"),
                       "training_loss": metrics.get("training_loss")}
    rows = summarize(results, datasets)
    report = {
        "run_dir": str(run_dir), "config": cfg.model_dump(mode="json"),
        "train_recipe": train_cfg.model_dump(mode="json", exclude={"datasets", "output_dir"}),
        "selection": {k: v for k, v in selection.items() if k != "excluded_ids"},
        "datasets": datasets, "steps": steps, "rows": rows,
        "evals": {name: {k: v for k, v in r.items() if k not in ("problems", "output")}
                  for name, r in results.items()},
    }
    atomic_write_json(out / "results.json", report)
    atomic_write_bytes(out / "table.md", (_caption(report) + "\n" + markdown_table(rows)).encode())
    return report


def _caption(report: dict[str, Any]) -> str:
    cfg, sel, recipe = report["config"], report["selection"], report["train_recipe"]
    limit = cfg["eval"]["limit"]
    steps = {s.get("global_step") for s in report["steps"].values() if "global_step" in s}
    return (f"Selection-rule ablation of `{report['run_dir']}`: {sel['instructions_kept']} of "
            f"{sel['instructions_in']} instructions (excluded: {sel['excluded'] or 'none'}); "
            f"each rule trained from `{recipe['model']}` for {sorted(steps)} step(s), seed "
            f"{recipe['seed']}; pass@1 on HumanEval "
            f"{'all problems' if limit is None else f'first {limit} problems'}, greedy, "
            f"{cfg['eval']['prompt_style']} prompts; p: exact McNemar vs `random` on the same "
            "problems.\n")


def rich_table(report: dict[str, Any]) -> Any:
    """The comparison as a ``rich`` table (what the CLI prints)."""
    from rich.table import Table

    table = Table(title=f"selection-rule ablation: {report['run_dir']}",
                  caption=f"written to {Path(report['run_dir']) / 'ablation' / 'table.md'}")
    for col in ("rule", "rows", "verified", "!= judge", "pass@1", "95% CI", "delta vs random",
                "+/-", "p"):
        table.add_column(col, justify="left" if col == "rule" else "right")
    for row in report["rows"]:
        table.add_row(*cells(row))
    return table


def ablate_main(run_dir: Path, overrides: list[str],
                config_path: Path | None = None) -> Any:
    """``arenaforge ablate RUN_DIR [--set k=v ...]``; returns the rich table to print.

    ``config_path`` defaults to ``configs/ablate-tiny.yaml`` (in the working directory, else in
    the repository).
    """
    path = config_path or DEFAULT_CONFIG
    if config_path is None and not path.is_file():
        path = Path(__file__).resolve().parents[2] / DEFAULT_CONFIG
    return rich_table(run_ablation(Path(run_dir), load_ablate_config(path, overrides)))
