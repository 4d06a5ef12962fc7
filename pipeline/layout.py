"""The run directory's layout: every path in it, relative to the run directory.

The one owner of these names. ``arenaforge.pipeline.store`` reads and writes them (a stage never
touches the run directory itself); stages name the side artifacts they write and read with
them (``ctx.write_artifact(RATINGS, ...)``, ``StageSpec(artifacts=(RATINGS,))``), as the stage
contract ``arenaforge.pipeline.stage`` hands them on (a stage imports no module of the run
directory's), and the applications built on a run (report, inspect, ablate) find them here. Layout of
``<artifacts_dir>/<name>/``::

    config.yaml              the resolved config
    manifest.json            config hash, code version, per-stage status/rows/timings
    stages/<stage>/part-00003.parquet       a shard's kept rows
    stages/<stage>/part-00003.dropped.parquet   its dropped rows (reason, detail, row JSON)
    stages/<stage>/part-00003.done.json     marker: row counts, checksums, input hash, timings
    stages/<stage>/_SUCCESS                 the stage is complete (holds its fingerprint)
    stats.json, dropped.parquet             the whole run's funnel and dropped rows
    engines.json                            where each model's replicas ran (Ray)
    cache/requests/                         the request cache (``files`` store, or SQLite)
    cache/embeddings/                       embedding caches (local run directories only)
    rate/ratings.parquet, rate/battles.parquet, rate/leaderboard.md    the rate stage's
    compress/embeddings.parquet             the compress stage's embeddings
    audit/metrics.json, audit/report.html   the audit stage's (the report rendered from them)
    dataset/<split>-00000-of-00002.parquet, dataset/README.md          the emit stage's

Every name is relative (``/``-separated, whatever the filesystem), so a run directory moved
or copied elsewhere still resumes, reports and emits.
"""

from __future__ import annotations

CONFIG = "config.yaml"
MANIFEST = "manifest.json"
STATS = "stats.json"
DROPPED = "dropped.parquet"
ENGINES = "engines.json"
STAGES = "stages"
SUCCESS = "_SUCCESS"
CACHE = "cache"
REQUEST_CACHE = "requests"  # under CACHE

# Side artifacts of the stages.
RATINGS = "rate/ratings.parquet"
BATTLES = "rate/battles.parquet"
LEADERBOARD = "rate/leaderboard.md"
EMBEDDINGS = "compress/embeddings.parquet"
AUDIT_METRICS = "audit/metrics.json"
AUDIT_REPORT = "audit/report.html"
DATASET = "dataset"
DATASET_CARD = "dataset/README.md"
DATASET_SHARDS = "*-of-*.parquet"  # the dataset's Parquet shards, in DATASET


def stage_file(stage: str, name: str) -> str:
    """A file in a stage's shard folder: ``stage_file("judge", "_SUCCESS")``."""
    return f"{STAGES}/{stage}/{name}"


def shard_name(i: int, kind: str = "kept") -> str:
    """The file name of shard ``i``: its kept rows, its dropped rows or its marker.

    >>> shard_name(3), shard_name(3, "dropped"), shard_name(3, "marker")
    ('part-00003.parquet', 'part-00003.dropped.parquet', 'part-00003.done.json')
    """
    suffix = {"kept": ".parquet", "dropped": ".dropped.parquet", "marker": ".done.json"}[kind]
    return f"part-{i:05d}{suffix}"


def dataset_shard(split: str, i: int, n: int) -> str:
    """A dataset shard's name (the Hugging Face Hub's): ``train-00000-of-00002.parquet``."""
    return f"{split}-{i:05d}-of-{n:05d}.parquet"
