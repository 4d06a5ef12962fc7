"""The judge-bench config (``configs/judge-bench.yaml``): contestants, sampling, judge variants.

A *variant* is one judge model under one protocol, with or without a reference solution in its
prompt; the card has one result per variant. Unknown keys are errors, like a run config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from arenaforge.stages.arena.protocols import ProtocolName
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Reference = Literal["none", "canonical", "expert"]


class Variant(BaseModel):
    """One judge model under one protocol.

    Attributes:
        judge: registry id of the judge model.
        protocol: a judge protocol (``arenaforge.stages.arena.protocols.PROTOCOLS``).
        reference: ``canonical``: the benchmark's reference solution shown to the judge
            (StackEval's setting); ``expert``: a passing answer of the non-contestant
            ``expert`` (what a run could supply); ``none``.
        max_pairs: judge only this many pairs (the first of a fixed shuffled order, the same
            for every variant, so smaller variants judge a subset of the bigger ones' pairs).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    judge: str
    protocol: ProtocolName
    reference: Reference = "none"
    max_pairs: int | None = Field(default=None, ge=1)

    @property
    def name(self) -> str:
        ref = "" if self.reference == "none" else f"+ref:{self.reference}"
        return f"{self.judge}/{self.protocol}{ref}"


class BenchConfig(BaseModel):
    """What judge-bench samples, executes and judges.

    ``judge`` holds settings of the judge stage (``arenaforge.stages.arena.judge.JudgeConfig``: budget,
    margins, min_choice_mass); ``problems`` is ``humaneval`` or a JSONL file in HumanEval's
    shape (task_id, prompt, entry_point, test, canonical_solution).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "judge-bench"
    models_file: Path = Path("models.yaml")
    problems: str = "humaneval"
    seed: int = 0
    threads: int = Field(default=2, ge=1)
    contestants: list[str] = Field(min_length=1)
    samples: int = Field(default=4, ge=1, description="samples per contestant and problem")
    temperature: float = Field(default=0.8, gt=0.0)
    max_tokens: int = Field(default=384, ge=16)
    pairs_per_problem: int = Field(default=6, ge=1)
    show: Literal["code", "response"] = Field(
        default="code", description="what the judge sees of an answer: its code block (the "
        "program that was executed; half the tokens of the whole reply) or the whole reply")
    expert: str | None = Field(default=None, description="non-contestant expert (reference)")
    timeout_s: float = Field(default=5.0, gt=0)
    chunk_pairs: int = Field(default=8, ge=1, description="pairs per saved judging step")
    judge: dict = Field(default_factory=dict)
    variants: list[Variant] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> BenchConfig:
        if any(v.reference == "expert" for v in self.variants) and self.expert is None:
            raise ValueError("a variant has reference: expert, but no expert model is set")
        if self.expert in self.contestants:
            raise ValueError(f"expert {self.expert!r} is a contestant; the expert reference "
                             "must come from a model outside the battle")
        names = [v.name for v in self.variants]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"variants: duplicate {dup}")
        return self

    def judge_config(self, variant: Variant):
        """The judge stage config of one variant."""
        from arenaforge.stages.arena.judge import JudgeConfig

        return JudgeConfig(**{**self.judge, "protocol": variant.protocol,
                              "judges": [variant.judge], "allow_self_judge": True})


def _refuse_run_config(path: Path, data: object) -> None:
    """Both are YAML, and a run config is the one users have at hand: say which it is and
    which command takes it, instead of one ``extra_forbidden`` error per stage section."""
    from arenaforge.pipeline.config import RunConfig

    if not isinstance(data, dict) or "variants" in data:
        return
    run_only = set(RunConfig.model_fields) - set(BenchConfig.model_fields)
    if set(data) & run_only:
        raise ValueError(f"{path} is a run config, not a judge-bench config: run it with "
                         f"`arenaforge run {path}` (judge-bench takes a file like "
                         "configs/judge-bench.yaml)")


def load_bench_config(path: Path) -> BenchConfig:
    """Read a judge-bench YAML; ``models_file`` and a problems file are relative to it.

    Raises:
        ValueError: the file is missing or a field is wrong (the message names it).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"judge-bench config {path} not found")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    _refuse_run_config(path, data)
    try:
        cfg = BenchConfig(**data)
    except ValidationError as exc:
        raise ValueError(f"{path}: {exc}") from exc
    updates = {"models_file": (path.parent / cfg.models_file).resolve()}
    if cfg.problems != "humaneval":
        updates["problems"] = str((path.parent / cfg.problems).resolve())
    return cfg.model_copy(update=updates)
