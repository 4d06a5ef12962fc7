"""The run's funnel: per stage, rows in and out, drops by reason, time, and why it was recomputed.

One typed object shared by the runner (which builds it), ``emit`` (the dataset card), ``audit``
(the report), ``arenaforge inspect`` and the end-of-run table, so a count is spelled once. It is
read back from the stages' ``_SUCCESS`` records, which the store owns.

Example::

    >>> f = Funnel((StageCounts("mine", 10, 9, {"empty": 1}),))
    >>> f["mine"].rows_out, f.names()
    (9, ['mine'])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any


@dataclasses.dataclass(frozen=True)
class StageCounts:
    """One stage of the funnel (what its ``_SUCCESS`` record says)."""

    stage: str
    rows_in: int
    rows_out: int
    dropped: Mapping[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    model_seconds: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    # wall and busy describe the attempt that completed the stage (a resumed stage reran part)
    wall_seconds_last_attempt: float | None = None
    utilization_last_attempt: float | None = None
    # the workers' shard input reads and output writes, and their idle time between shards
    # (``arenaforge.pipeline.runner.shard_timing``)
    io_seconds_last_attempt: float | None = None
    gap_seconds_last_attempt: float | None = None
    workers: int | None = None
    stats: Mapping[str, float] = dataclasses.field(default_factory=dict)
    shards: int | None = None
    executor: str | None = None
    # why this run recomputed the stage ("new", "code changed: stages/arena/judge.py", ...); None when
    # the stage was already complete and skipped
    recomputed: str | None = None

    @classmethod
    def from_record(cls, stage: str, record: Mapping[str, Any]) -> StageCounts:
        names = {f.name for f in dataclasses.fields(cls)} - {"stage"}
        return cls(stage=stage, **{k: record[k] for k in names if record.get(k) is not None})

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def other_seconds(self) -> float:
        return max(self.seconds - self.model_seconds, 0.0)


@dataclasses.dataclass(frozen=True)
class Funnel:
    """Stages in run order."""

    stages: tuple[StageCounts, ...] = ()

    @classmethod
    def from_records(cls, records: Mapping[str, Mapping[str, Any]],
                     order: Sequence[str] | None = None) -> Funnel:
        """From ``{stage: _SUCCESS record}``, in ``order`` (default: the pipeline's)."""
        if order is None:
            from arenaforge.stages import PIPELINE

            order = [*PIPELINE, *sorted(set(records) - set(PIPELINE))]
        return cls(tuple(StageCounts.from_record(n, records[n]) for n in order if n in records))

    def __iter__(self) -> Iterator[StageCounts]:
        return iter(self.stages)

    def __len__(self) -> int:
        return len(self.stages)

    def __getitem__(self, key: str | int) -> StageCounts:
        if isinstance(key, int):
            return self.stages[key]
        for s in self.stages:
            if s.stage == key:
                return s
        raise KeyError(f"stage {key!r} is not in the funnel ({self.names()})")

    def __contains__(self, stage: object) -> bool:
        return any(s.stage == stage for s in self.stages)

    def names(self) -> list[str]:
        return [s.stage for s in self.stages]

    def plus(self, counts: StageCounts) -> Funnel:
        return Funnel(self.stages + (counts,))

    def as_dicts(self) -> list[dict[str, Any]]:
        return [s.as_dict() for s in self.stages]
