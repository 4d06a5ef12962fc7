"""The run store on a local directory and on a real S3-compatible server (moto, loopback)."""

import json

import pyarrow as pa
import pytest
from arenaforge.pipeline import filesystem as fsys
from arenaforge.pipeline.shards import DROPPED_SCHEMA
from arenaforge.pipeline.store import RunStore, StoreError, atomic_write_json


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    """A run directory that does not exist yet: a local path or an ``s3://`` URI."""
    if request.param == "local":
        return tmp_path / "run"
    return request.getfixturevalue("s3_server").uri("run")


def _put(store, path, data: bytes):
    with store.fs.open_output_stream(path) as f:
        f.write(data)


def _shard(store, i=0, rows=3):
    stage = store.stage("s")
    kept = pa.table({"instruction_id": [str(j) for j in range(rows)], "x": list(range(rows))})
    dropped = pa.table({"instruction_id": pa.array([], pa.string()),
                        "reason": pa.array([], pa.string())})
    stage.write_shard(i, kept, dropped, {"input_hash": "h"})
    return stage


def test_marker_commits_shard(root):
    stage = _shard(RunStore(root))
    marker = stage.shard_done(0, "h")
    assert marker["rows"] == 3 and marker["dropped"] == 0
    assert stage.shard_done(0, "other-input") is None
    assert [m["rows"] for m in stage.markers()] == [3]


def test_truncated_shard_is_not_done(root):
    store = RunStore(root)
    stage = _shard(store)
    path = stage.shard_path(0)
    _put(store, path, fsys.read_bytes(store.fs, path)[:-20])
    assert stage.shard_done(0, "h") is None


def test_missing_marker_means_not_done(root):
    store = RunStore(root)
    stage = _shard(store)
    store.fs.delete_file(stage.marker_path(0))
    assert stage.shard_done(0, "h") is None


def test_read_refuses_corrupt_complete_stage(root):
    store = RunStore(root)
    stage = _shard(store)
    stage.mark_success({"shards": 1})
    assert stage.read().num_rows == 3
    assert stage.verify() == []
    _put(store, stage.shard_path(0), b"PAR1garbage")
    with pytest.raises(StoreError, match="checksum mismatch") as err:
        stage.read()
    # the message names the file as the user named the run directory
    assert fsys.display(root if isinstance(root, str) else str(root)) in str(err.value)
    assert any("checksum mismatch" in p for p in stage.verify())


def test_open_refuses_other_config(root):
    store = RunStore(root)
    store.open("aaa", "a: 1\n")
    store.open("aaa", "a: 1\n")  # same config: fine
    with pytest.raises(StoreError, match="different config"):
        store.open("bbb", "a: 2\n")
    store.write_artifact("rate/old.md", "from the first config")
    store.open("bbb", "a: 2\n", fresh=True)
    assert RunStore(root).manifest()["config_hash"] == "bbb"
    assert store.read_artifact("rate/old.md") is None  # --fresh discarded the old run
    assert store.read_artifact("config.yaml") == b"a: 2\n"


def test_artifact_cannot_escape_run_dir(root):
    store = RunStore(root)
    store.open("a", "")
    where = store.write_artifact("rate/x.md", "hello")
    assert store.read_artifact("rate/x.md") == b"hello"
    assert str(where).split("?")[0].endswith("run/rate/x.md")
    with pytest.raises(StoreError):
        store.write_artifact("../escape.txt", "x")
    with pytest.raises(StoreError):
        store.read_artifact("rate/../../escape.txt")


def test_artifact_table_round_trip_and_removal(root):
    store = RunStore(root)
    store.open("a", "")
    for name in ("train-00000-of-00002.parquet", "train-00001-of-00002.parquet",
                 "README.md"):
        store.write_artifact(f"dataset/{name}", pa.table({"x": [1]}) if name.endswith(
            "parquet") else "card")
    removed = store.remove_artifacts("dataset", "*-of-*.parquet",
                                     keep=["train-00000-of-00002.parquet"])
    assert removed == ["train-00001-of-00002.parquet"]
    assert store.read_artifact("dataset/train-00001-of-00002.parquet") is None
    assert store.read_artifact("dataset/README.md") == b"card"
    import pyarrow.parquet as pq

    table = pq.read_table(pa.BufferReader(
        store.read_artifact("dataset/train-00000-of-00002.parquet")))
    assert table.column("x").to_pylist() == [1]


def test_atomic_write_leaves_no_temp_files(tmp_path):
    atomic_write_json(tmp_path / "a.json", {"x": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_read_where_filters_each_shard_and_keeps_order(root):
    stage = RunStore(root).stage("s")
    parts = [pa.table({"k": ["a", "b", "a"], "v": [1, 2, 3]}), pa.table({}),
             pa.table({"k": ["c", "a"], "v": [4, 5]})]
    for i, part in enumerate(parts):
        stage.write_shard(i, part, DROPPED_SCHEMA.empty_table(), {"input_hash": str(i)})
    stage.mark_success({"shards": 3})
    out = stage.read_where("k", ["a", "c"])
    assert out.column("v").to_pylist() == [1, 3, 4, 5]
    assert stage.read_where("k", ["c"], parts=[2]).column("v").to_pylist() == [4]
    assert stage.key_parts("k") == [(0, ["a", "b", "a"]), (2, ["c", "a"])]
    assert stage.schema().names == ["k", "v"]


def test_read_where_decodes_a_shard_once_and_sees_a_rewritten_one(root, monkeypatch):
    # every shard of a stage sharded from an unsharded source reads the same one file
    import arenaforge.pipeline.store as store_module

    stage = RunStore(root).stage("s")
    stage.write_shard(0, pa.table({"k": ["a", "b", "c"], "v": [1, 2, 3]}),
                      DROPPED_SCHEMA.empty_table(), {"input_hash": "0"})
    stage.mark_success({"shards": 1})
    decodes = []
    real = store_module.pq.read_table
    monkeypatch.setattr(store_module.pq, "read_table",
                        lambda *a, **k: decodes.append(1) or real(*a, **k))
    assert [stage.read_where("k", [key], parts=[0]).column("v").to_pylist()
            for key in "abc"] == [[1], [2], [3]]
    assert len(decodes) == 1
    stage.write_shard(0, pa.table({"k": ["a"], "v": [10]}), DROPPED_SCHEMA.empty_table(),
                      {"input_hash": "1"})
    assert stage.read_where("k", ["a"], parts=[0]).column("v").to_pylist() == [10]
    assert len(decodes) == 2


def test_read_where_refuses_an_incomplete_stage_and_an_altered_file(root):
    stage = RunStore(root).stage("s")
    stage.write_shard(0, pa.table({"k": ["a"], "v": [1]}), DROPPED_SCHEMA.empty_table(),
                      {"input_hash": "0"})
    with pytest.raises(StoreError, match="s: not complete"):
        stage.read_where("k", ["a"], parts=[0])
    stage.mark_success({"shards": 1})
    fsys.write_bytes(stage.fs, stage.shard_path(0), b"not parquet")
    with pytest.raises(StoreError, match="part-00000.*checksum mismatch"):
        stage.read_where("k", ["a"], parts=[0])


def test_reading_columns_skips_shards_that_kept_no_row(root):
    stage = RunStore(root).stage("s")
    for i, part in enumerate([pa.table({}), pa.table({"k": ["a"], "v": [1]})]):
        stage.write_shard(i, part, DROPPED_SCHEMA.empty_table(), {"input_hash": str(i)})
    stage.mark_success({"shards": 2})
    assert stage.read(columns=["k"]).column("k").to_pylist() == ["a"]


def test_reading_columns_reads_only_those_the_output_has(root):
    stage = RunStore(root).stage("s")
    stage.write_shard(0, pa.table({"k": ["a", "b"], "v": [1, 2], "w": ["x", "y"]}),
                      DROPPED_SCHEMA.empty_table(), {"input_hash": "0"})
    stage.mark_success({"shards": 1})
    # an optional column the stage did not write is left out, not an error
    assert stage.read(columns=["v", "k", "absent"]).column_names == ["v", "k"]
    assert stage.read().column_names == ["k", "v", "w"]


def test_success_markers_completed_stages_and_stale_shards(root):
    store = RunStore(root)
    store.open("a", "")
    stage = store.stage("s")
    for i in range(3):
        stage.write_shard(i, pa.table({"k": [str(i)]}), DROPPED_SCHEMA.empty_table(),
                          {"input_hash": str(i)})
    stage.mark_success({"shards": 3, "rows_out": 3})
    assert store.completed() == {"s": {"shards": 3, "rows_out": 3}}
    stage.clear_success()
    assert store.completed() == {}
    stage.remove_stale(keep=1)  # a new plan with one shard: the others must go
    assert stage.shard_done(0, "0") is not None
    assert stage.shard_done(1, "1") is None and stage.shard_done(2, "2") is None
    assert [m["input_hash"] for m in stage.markers()] == ["0"]


def test_dropped_summary_streams_every_stage(root):
    store = RunStore(root)
    store.open("a", "")
    for name in ("s", "t"):
        stage = store.stage(name)
        dropped = pa.table({"instruction_id": ["i-" + name], "stage": [name],
                            "reason": ["short"], "detail": [None], "row": ["{}"]},
                           schema=DROPPED_SCHEMA)
        stage.write_shard(0, pa.table({}), dropped, {"input_hash": "h"})
        stage.mark_success({"shards": 1})
    where = store.write_dropped_summary(["s", "t"], DROPPED_SCHEMA)
    assert str(where).split("?")[0].endswith("run/dropped.parquet")
    import pyarrow.parquet as pq

    table = pq.read_table(pa.BufferReader(store.read_artifact("dropped.parquet")))
    assert table.column("instruction_id").to_pylist() == ["i-s", "i-t"]
    assert store.stage("t").read_dropped_detail() is None
    if not store.remote:  # no temp file survives the rename
        assert not list(store.root.rglob("*.tmp"))


def test_cache_dir_is_local_and_request_cache_follows_the_store(root, tmp_path):
    store = RunStore(root, local_cache_dir=tmp_path / "local-cache")
    cache = store.cache_dir("embeddings/m")
    assert cache.is_dir()
    with pytest.raises(StoreError, match="leaves the cache"):
        store.cache_dir("../../x")
    location, kind = store.request_cache("auto")
    if store.remote:
        assert cache.is_relative_to(tmp_path / "local-cache")
        assert kind == "files" and location.startswith("s3://") and "cache/requests" in location
        with pytest.raises(StoreError, match="sqlite needs a local run directory"):
            store.request_cache("sqlite")
    else:
        assert cache == root / "cache" / "embeddings" / "m"
        assert (kind, location) == ("sqlite", root / "cache" / "requests")
        assert store.request_cache("files") == (root / "cache" / "requests", "files")


def test_manifest_json_is_valid_on_disk(tmp_path):
    store = RunStore(tmp_path / "run")
    store.open("aaa", "a: 1\n")
    store.update_stage("s", {"status": "complete"})
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["stages"] == {"s": {"status": "complete"}}


def test_uri_helpers():
    assert fsys.join("s3://b/runs?scheme=http", "r1") == "s3://b/runs/r1?scheme=http"
    assert fsys.split("s3://b/runs/r1/") == ("s3://b/runs", "r1")
    with pytest.raises(ValueError, match="needs a bucket and a name"):
        fsys.split("s3://bucket")
    assert RunStore("s3://b/runs/r1?scheme=http&endpoint_override=h:1").name == "r1"
    with pytest.raises(ValueError, match="nosuch://"):
        fsys.resolve("nosuch://x/y")
