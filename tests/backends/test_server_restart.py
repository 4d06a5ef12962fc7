"""A server killed in the middle of a mining stage and restarted: no row lost, none doubled.

The mine stage runs through a real llama-cpp-python server (``tests/backends/served.py``); a
thread SIGKILLs the server while requests are in flight and starts it again on the same port.
The client benches the dead server and retries its requests until it is back
(``down_wait_s``): a request whose answer died with the server is sent again, the same request
(its seed included), and makes its row, once. What it does not promise is the same text: a
batching server's output for a seeded request depends on what the request is batched with
(llama.cpp's and vLLM's do), so a re-sent request can come back other than an uninterrupted run
would have had it (docs/RELIABILITY.md, "What a resume guarantees").
"""

import threading
import time

import pytest
from arenaforge.pipeline.config import load_config
from arenaforge.pipeline.context import RunContext, close_process_resources
from arenaforge.pipeline.models import ModelNotInstalledError, load_registry, resolve_weights
from arenaforge.stages.instructions import mine

from tests.backends.served import ROOT, Served, free_port, python_server_command, served_run_config

pytestmark = pytest.mark.models  # two server starts and 24 short requests: ~15 s on 2 busy cores
SAMPLES = 12


def _mine(tmp_path, url, gguf, name, during=None):
    config = served_run_config(tmp_path / name, url, gguf, max_concurrency=2, down_wait_s=120,
                               backoff_s=0.2)
    ctx = RunContext(tmp_path / name / "run", load_config(config), threads=1)
    cfg = mine.MineConfig(miners=["smol-served"], samples_per_language=SAMPLES, max_tokens=24)
    backend = ctx.backend("smol-served")
    watcher = threading.Thread(target=during, args=(backend,), daemon=True) if during else None
    try:
        if watcher:
            watcher.start()
        rows = mine.run(mine.plan(cfg, ctx), cfg, ctx).to_pylist()
        sent = sum(backend.server_stats().values())
    finally:
        close_process_resources()
    if watcher:
        watcher.join(timeout=180)
    return rows, sent


def test_mining_survives_a_server_killed_and_restarted(tmp_path):
    pytest.importorskip("uvicorn")
    try:
        gguf = resolve_weights(load_registry(ROOT / "configs/models.yaml")["smollm2-135m"])
    except ModelNotInstalledError as exc:
        pytest.skip(str(exc))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    port = free_port()
    server = Served(python_server_command(gguf, port), port, tmp_path / "server.log").start()
    killed = {}

    def kill_and_restart(backend):
        while sum(backend.server_stats().values()) < 4:  # a few requests out, more to come
            time.sleep(0.02)
        server.kill()
        killed["at"] = sum(backend.server_stats().values())
        time.sleep(1.0)
        server.start()

    try:
        rows, sent = _mine(tmp_path, server.url, gguf, "a", during=kill_and_restart)
        reference, sent_ref = _mine(tmp_path, server.url, gguf, "b")
    finally:
        server.stop()
    assert killed, "the server was never killed"
    assert sorted(r["sample_index"] for r in rows) == list(range(SAMPLES))  # each row once
    # whole answers, none failed (an empty one is the model's, after the client's retries)
    assert all(r["finish_reason"] in ("stop", "length") for r in rows)
    assert sent > SAMPLES == sent_ref  # the requests lost with the server were sent again
    # Each row is the answer to the request an uninterrupted run sends for it (the same seed);
    # its text is not compared: a batching server may answer a re-sent request otherwise.
    asked = {r["sample_index"]: r["sample_params"] for r in reference}
    assert {r["sample_index"]: r["sample_params"] for r in rows} == asked
    assert [r["task_id"] for r in sorted(rows, key=lambda r: r["sample_index"])] == \
        [r["task_id"] for r in sorted(reference, key=lambda r: r["sample_index"])]
