"""The contract between a stage and the runner.

A stage is a pure function ``run(table, cfg, ctx) -> pa.Table | StageResult`` plus a frozen
pydantic config model and the columns it reads and writes. It never imports ``ray`` and never
touches the run directory itself: the runner shards its input, calls it (in-process or in a Ray
task), writes the result atomically and counts what it kept and dropped.

Example (a toy stage)::

    class UpperConfig(StageConfig):
        suffix: str = "!"

    def run(table, cfg, ctx):
        texts = [t.upper() + cfg.suffix for t in table.column("instruction").to_pylist()]
        return table.append_column("shout", pa.array(texts))

    STAGE = StageSpec(name="upper", config=UpperConfig, run=run, source="mine",
                      inputs=("instruction",), outputs=("shout",))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import pyarrow as pa
from arenaforge.pipeline.layout import (
    AUDIT_METRICS,
    BATTLES,
    DATASET,
    DATASET_CARD,
    DATASET_SHARDS,
    EMBEDDINGS,
    LEADERBOARD,
    RATINGS,
    dataset_shard,
)
from arenaforge.pipeline.model_fanout import per_model
from pydantic import BaseModel, ConfigDict

# This module is all of the kit's runner side a stage sees. Besides the contract's own types it
# hands on two things the kit owns: the names of the side artifacts a stage writes and reads
# (``ctx.write_artifact(RATINGS, ...)``, ``StageSpec(artifacts=(RATINGS,))``: the run
# directory's layout owns every name in it, the store every path), and ``per_model``, which
# puts one shard's requests to several models (at once when they are all served, in turn when
# local: ``arenaforge.pipeline.model_fanout``). A stage imports neither owner.
__all__ = [
    "AUDIT_METRICS", "BATTLES", "DATASET", "DATASET_CARD", "DATASET_SHARDS", "EMBEDDINGS",
    "LEADERBOARD", "RATINGS", "AheadFn", "EmbedAhead", "PlanFn", "RunFn", "StageConfig",
    "StageContext", "StageResult", "StageSpec", "TableCache", "as_result", "dataset_shard",
    "per_model",
]


class StageConfig(BaseModel):
    """Base of every stage config: frozen, and unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclasses.dataclass
class StageResult:
    """What a stage returns when it drops rows.

    ``dropped`` holds the dropped input rows (any columns) plus a ``reason`` column (short,
    enumerable: ``too_short``, ``near_duplicate``...) and optionally a ``detail`` column.
    ``stats`` are extra counters merged into the stage's ``stats.json``.
    """

    table: pa.Table
    dropped: pa.Table | None = None
    stats: dict[str, float] = dataclasses.field(default_factory=dict)


class StageContext(Protocol):
    """What the runner hands a stage. Implemented by ``arenaforge.pipeline.context.RunContext``."""

    # No run directory and no run config here: a stage's settings are its frozen config
    # section and what it reads comes through ``read`` (the store owns the layout).
    seed: int
    run_id: str  # the run directory's name (what a dataset row records as its provenance)

    def config_hash(self) -> str | None:
        """The run config's hash (provenance of a dataset row)."""

    def backend(self, model_id: str) -> Any:
        """The LLM backend for a registered model id (loaded once per process, request-cached)."""

    def model_spec(self, model_id: str) -> Any:
        """The registry entry (arenaforge.pipeline.models.ModelSpec) for a model id."""

    def read(self, stage: str, columns: Sequence[str] | None = None,
             instruction_ids: Sequence[str] | None = None) -> pa.Table:
        """A declared earlier output (its declared columns, or ``columns`` among them),
        optionally filtered to some instructions."""

    def read_artifact(self, relpath: str) -> bytes | None:
        """A declared side artifact of an earlier stage (None when that stage wrote none)."""

    def funnel(self) -> Any:
        """The run's funnel so far (``arenaforge.pipeline.funnel.Funnel``: completed stages in order)."""

    def sandbox(self) -> Any:
        """A sandbox pool (arenaforge.pipeline.sandbox) shared by the process."""

    def embedder(self, model_path: Path, device: str | None = None) -> Any:
        """A sentence-embedding model (``embed(texts, batch_size, precision)``,
        ``precision(asked)``: ``arenaforge.pipeline.embedder``), loaded once for the run on Ray,
        once per process inline; only for stages whose spec sets ``uses_embeddings``."""

    def advance(self, rows: int) -> None:
        """Report progress inside a shard (rows finished); optional to call."""

    def write_artifact(self, relpath: str, data: bytes | str | pa.Table) -> Path | str:
        """Atomically write a side artifact (ratings table, report) under the run directory."""

    def table_cache(self, name: str) -> TableCache:
        """A cache of the run (``embeddings/<model>``): Parquet parts the stage names, reads and
        writes; the store owns where it lives and writes each part atomically."""

    def map(self, fn: Callable[[Any, StageContext], Any], items: Sequence[Any]) -> list[Any]:
        """``[fn(item, ctx) for item in items]``, in item order, each item on a worker of the
        run: one after another in this process inline, each its own task on Ray (one CPU,
        retried when its worker dies), where ``ctx`` is a context of that task (its own
        ``sandbox``; its ``map`` runs inline). How a whole-table stage (``sharded=False``)
        spreads its pieces over the run's workers (a sharded stage's shards fill them
        already: its ``map`` runs inline). ``fn`` must be a module-level function and
        the items and results picklable; an item's exception is raised here."""

    def map_workers(self) -> int:
        """How many items of ``map`` run at once (1 inline; the run's CPUs on Ray): a stage
        deals its work into that many shares."""


class TableCache(Protocol):
    """A run's cache of tables, as ``StageContext.table_cache`` hands it to a stage."""

    def parts(self) -> list[str]:
        """The names of the parts written so far, sorted."""

    def read(self, name: str) -> pa.Table | None:
        """The part ``name``, or None when it was never written."""

    def write(self, name: str, table: pa.Table) -> None:
        """Write the part ``name`` atomically (readers see no part or the whole one)."""


RunFn = Callable[[pa.Table, StageConfig, StageContext], "pa.Table | StageResult"]
PlanFn = Callable[[StageConfig, StageContext], pa.Table]


@dataclasses.dataclass(frozen=True)
class EmbedAhead:
    """Texts a stage will embed, as its ``ctx.embedder`` will be asked for them (the same
    model, device, batch size and asked precision; the texts as embedded)."""

    model_path: str
    device: str | None
    texts: Sequence[str]
    batch_size: int
    precision: str


# (the rows the stage before reads, this stage's config) -> what this stage will embed, or None
AheadFn = Callable[[pa.Table, StageConfig], "EmbedAhead | None"]


@dataclasses.dataclass(frozen=True)
class StageSpec:
    """Declares a stage to the runner.

    Attributes:
        name: stage name, also its config key and its directory in the run.
        config: the stage's config model (a ``StageConfig`` subclass).
        run: the pure function.
        source: the stage whose output is this stage's input table; ``None`` when ``plan``
            builds the input (the first stage).
        plan: builds the input table from config alone (mining prompts, for example).
        inputs: columns the input table must have.
        outputs: columns the stage's output must have.
        shard_key: rows sharing this value always land in the same shard.
        sharded: False for stages that need all rows at once (dedup, k-center, ratings).
        reads: every earlier output the stage reads besides its source, with the columns it
            reads (``{"rate": ("instruction_id", "model", "winner")}``). The runner checks each
            column before any model loads, and ``ctx.read`` hands out only what is declared.
        optional: stages among ``reads`` that may be absent from a run (``ctx.read`` then
            raises ``KeyError``).
        artifacts: side artifacts of earlier stages the stage reads (``"rate/ratings.parquet"``,
            through ``ctx.read_artifact``); the first path part names the producing stage.
        prompts: prompt templates the stage fills (globs of template names, which live in the
            ``prompts/`` folder beside the stage: ``arenaforge.pipeline.prompts``; or absolute
            paths); their text is part of the stage's resume fingerprint, like its code.
        uses_models: True when the stage calls LLM backends (the runner sizes its pool).
        uses_embeddings: True when the stage embeds text through ``ctx.embedder`` (the runner
            keeps the run's embedding service from the first such stage to the last).
        embeds_ahead: for a stage whose source is a row filter: from the rows that source
            reads (a superset of this stage's), what this stage will embed. On Ray the runner
            sends it to the embedding service while the source stage runs, so the vectors are
            computed while that stage waits on its models.
    """

    name: str
    config: type[StageConfig]
    run: RunFn
    source: str | None = None
    plan: PlanFn | None = None
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    shard_key: str = "instruction_id"
    sharded: bool = True
    reads: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    optional: tuple[str, ...] = ()
    artifacts: tuple[str, ...] = ()
    prompts: tuple[str, ...] = ()
    uses_models: bool = False
    uses_embeddings: bool = False
    embeds_ahead: AheadFn | None = None

    def __post_init__(self) -> None:
        if (self.source is None) == (self.plan is None):
            raise ValueError(f"stage {self.name!r}: give exactly one of source= or plan=")
        # frozen, hashable and safe to share between workers
        object.__setattr__(self, "reads", MappingProxyType(
            {stage: tuple(cols) for stage, cols in dict(self.reads).items()}))
        unknown = [s for s in self.optional if s not in self.reads]
        if unknown:
            raise ValueError(f"stage {self.name!r}: optional {unknown} are not among its reads")

    @property
    def upstream(self) -> tuple[str, ...]:
        """Every earlier stage whose output this one depends on (source, reads, artifacts)."""
        deps = [self.source] if self.source else []
        deps += list(self.reads) + [a.split("/", 1)[0] for a in self.artifacts]
        return tuple(dict.fromkeys(deps))


def as_result(out: pa.Table | StageResult) -> StageResult:
    """Normalise a stage's return value."""
    return out if isinstance(out, StageResult) else StageResult(table=out)
