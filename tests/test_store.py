import json

import pyarrow as pa
import pytest

from pipeline.store import RunStore, StoreError, atomic_write_json


def _shard(store, i=0, rows=3):
    stage = store.stage("s")
    kept = pa.table({"instruction_id": [str(j) for j in range(rows)], "x": list(range(rows))})
    dropped = pa.table({"instruction_id": pa.array([], pa.string()), "reason": pa.array([], pa.string())})
    stage.write_shard(i, kept, dropped, {"input_hash": "h"})
    return stage


def test_marker_commits_shard(tmp_path):
    stage = _shard(RunStore(tmp_path))
    marker = stage.shard_done(0, "h")
    assert marker["rows"] == 3 and marker["dropped"] == 0
    assert stage.shard_done(0, "other-input") is None


def test_truncated_shard_is_not_done(tmp_path):
    stage = _shard(RunStore(tmp_path))
    path = stage.shard_path(0)
    path.write_bytes(path.read_bytes()[:-20])
    assert stage.shard_done(0, "h") is None


def test_missing_marker_means_not_done(tmp_path):
    stage = _shard(RunStore(tmp_path))
    stage.marker_path(0).unlink()
    assert stage.shard_done(0, "h") is None


def test_read_refuses_corrupt_complete_stage(tmp_path):
    store = RunStore(tmp_path)
    stage = _shard(store)
    stage.mark_success({"shards": 1})
    assert stage.read().num_rows == 3
    stage.shard_path(0).write_bytes(b"PAR1garbage")
    with pytest.raises(StoreError, match="checksum mismatch"):
        stage.read()


def test_open_refuses_other_config(tmp_path):
    store = RunStore(tmp_path / "run")
    store.open("aaa", "a: 1\n")
    store.open("aaa", "a: 1\n")  # same config: fine
    with pytest.raises(StoreError, match="different config"):
        store.open("bbb", "a: 2\n")
    store.open("bbb", "a: 2\n", fresh=True)
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["config_hash"] == "bbb"


def test_artifact_cannot_escape_run_dir(tmp_path):
    store = RunStore(tmp_path / "run")
    store.open("a", "")
    store.write_artifact("rate/x.md", "hello")
    assert (tmp_path / "run" / "rate" / "x.md").read_text() == "hello"
    with pytest.raises(StoreError):
        store.write_artifact("../escape.txt", "x")


def test_atomic_write_leaves_no_temp_files(tmp_path):
    atomic_write_json(tmp_path / "a.json", {"x": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_read_where_filters_each_shard_and_keeps_order(tmp_path):
    import pyarrow as pa

    from pipeline.shards import DROPPED_SCHEMA
    from pipeline.store import RunStore

    stage = RunStore(tmp_path).stage("s")
    parts = [pa.table({"k": ["a", "b", "a"], "v": [1, 2, 3]}), pa.table({}),
             pa.table({"k": ["c", "a"], "v": [4, 5]})]
    for i, part in enumerate(parts):
        stage.write_shard(i, part, DROPPED_SCHEMA.empty_table(), {"input_hash": str(i)})
    stage.mark_success({"shards": 3})
    out = stage.read_where("k", ["a", "c"])
    assert out.column("v").to_pylist() == [1, 3, 4, 5]


def test_reading_columns_skips_shards_that_kept_no_row(tmp_path):
    import pyarrow as pa

    from pipeline.shards import DROPPED_SCHEMA
    from pipeline.store import RunStore

    stage = RunStore(tmp_path).stage("s")
    for i, part in enumerate([pa.table({}), pa.table({"k": ["a"], "v": [1]})]):
        stage.write_shard(i, part, DROPPED_SCHEMA.empty_table(), {"input_hash": str(i)})
    stage.mark_success({"shards": 2})
    assert stage.read(columns=["k"]).column("k").to_pylist() == ["a"]
