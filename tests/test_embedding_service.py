"""The run's embedding service on a real local Ray: decontaminate and compress share one model,
loaded once by one actor (no shard task loads it), released after the last stage that embeds,
and the rows are those of an inline run, which loads the model in its own process; a killed
service restarts and embeds the same vectors."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pytest
from arenaforge.pipeline.executors import InlineExecutor, RayExecutor
from arenaforge.pipeline.stage import StageConfig, StageSpec
from arenaforge.pipeline.store import RunStore
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.common.embeddings import resolve_model_path
from arenaforge.stages.instructions import decontaminate
from arenaforge.stages.output import compress

from tests.toy_pipeline import toy_ctx

TEXTS = [
    # rewordings of one task: compress keeps one, drops the rest as semantic_duplicate
    "Write a Python function that calculates the factorial of a given number.",
    "Create a Python function to calculate the factorial of a given number.",
    "Can you create a Python function that calculates the factorial of a number?",
    # only the embedding check catches it (HumanEval/55): decontaminate drops it
    "Write a Python function that returns the n-th Fibonacci number.",
    "Write a SQL query that counts orders per customer.",
    "Write a short poem about the ocean at sunset.",
    "Use the requests library to fetch JSON from a REST API endpoint.",
    "Implement insertion sort on a Python list of ints.",
    "Write a Python function that parses an ISO 8601 date string into a datetime object.",
    "Implement an LRU cache class in Python with get and put in constant time.",
    "Write a function that flattens an arbitrarily nested list of integers.",
    "Write a Python function that validates an IPv4 address given as a string.",
]


class SourceConfig(StageConfig):
    pass


def source_plan(cfg, ctx) -> pa.Table:
    return pa.table({"instruction_id": [instruction_id(t) for t in TEXTS], "instruction": TEXTS})


def probe_run(table: pa.Table, cfg, ctx) -> pa.Table:
    """Whether the shard's worker process ever imported sentence-transformers (a model load)."""
    return table.append_column("worker_pid", pa.array([os.getpid()] * table.num_rows)).append_column(
        "worker_loaded_model",
        pa.array(["sentence_transformers" in sys.modules] * table.num_rows))


# named as the stage decontaminate reads from
SOURCE = StageSpec(name="difficulty", config=SourceConfig, run=lambda t, c, x: t,
                   plan=source_plan, outputs=("instruction_id", "instruction"))
PROBE = StageSpec(name="probe", config=SourceConfig, run=probe_run, source="compress",
                  inputs=("instruction_id",), outputs=("worker_loaded_model",))
SPECS = [SOURCE, decontaminate.STAGE, compress.STAGE, PROBE]


def _run(run_dir, executor):
    from arenaforge.pipeline.runner import run_stages

    cfgs = {"difficulty": SourceConfig(), "decontaminate": decontaminate.DecontaminateConfig(),
            "compress": compress.CompressConfig(), "probe": SourceConfig()}
    store = RunStore(run_dir)
    store.open("embed", "embed: true\n")
    run_stages(SPECS, cfgs, toy_ctx(run_dir), store, executor, 4, show_progress=False)
    return store


def _rows(store: RunStore, stage: str, which: str = "kept") -> list[dict]:
    return store.stage(stage).read(which).sort_by("instruction_id").to_pylist()


@pytest.mark.models
def test_two_embedding_stages_share_one_model_loaded_once_on_ray(tmp_path, ray_local):
    executor = RayExecutor()
    try:
        store = _run(tmp_path / "ray", executor)
        # released by the runner after compress, the last stage that embeds (before close)
        assert executor.embedding_stats, "the service was not stopped after compress"
        loaded = executor.loaded_models()
    finally:
        executor.close()
    model = f"embeddings:{resolve_model_path(None)}"
    assert [k for k in loaded if k.startswith("embeddings:")] == [model]
    (service,) = loaded[model]  # one model load for the whole run
    assert service["load_seconds"] > 0
    assert service["warm_seconds"] > 0  # imported at the start of the run, before decontaminate
    # the requests and HumanEval's 164 docstrings (each shard that misses the cache embeds
    # those too); compress found the requests' vectors in the run's cache
    assert service["texts"] >= len(TEXTS) + 164
    assert store.stage("decontaminate").success()["shards"] == 4  # from several tasks
    # no shard task's process loaded a model (the probe runs in the same pool of workers)
    probe = _rows(store, "probe")
    assert probe and not any(r["worker_loaded_model"] for r in probe)
    assert service["pid"] not in {r["worker_pid"] for r in probe}
    # resumed with every stage done, the run starts no service and loads no model
    again = RayExecutor()
    try:
        _run(tmp_path / "ray", again)
        assert again.embedding_stats == [] and again.loaded_models() == {}
    finally:
        again.close()

    # the rows are those of an inline run (one model in this process), decisions and picks alike
    inline = _run(tmp_path / "inline", InlineExecutor(1))
    for stage in ("decontaminate", "compress"):
        for which in ("kept", "dropped"):
            assert _rows(store, stage, which) == _rows(inline, stage, which), (stage, which)
    assert [r["reason"] for r in _rows(store, "decontaminate", "dropped")] == [
        "embedding_similarity"]
    assert [r["reason"] for r in _rows(store, "compress", "dropped")] == [
        "semantic_duplicate"] * 2


def slow_filter(table, cfg, ctx):
    import time

    time.sleep(8)  # a stage that waits on its servers: the service embeds meanwhile
    return table


# clean -> difficulty (a row filter) -> decontaminate: what decontaminate will embed is known
# from clean's output before difficulty runs
AHEAD_SPECS = [StageSpec(name="clean", config=SourceConfig, run=lambda t, c, x: t,
                         plan=source_plan, outputs=("instruction_id", "instruction")),
               StageSpec(name="difficulty", config=SourceConfig, run=slow_filter,
                         source="clean", inputs=("instruction_id", "instruction"),
                         outputs=("instruction_id", "instruction")),
               decontaminate.STAGE, compress.STAGE]


@pytest.mark.models
def test_decontaminate_embeds_while_the_stage_before_it_runs(tmp_path, ray_local):
    from arenaforge.pipeline.runner import run_stages

    cfgs = {"clean": SourceConfig(), "difficulty": SourceConfig(),
            "decontaminate": decontaminate.DecontaminateConfig(),
            "compress": compress.CompressConfig()}
    stores, loaded = {}, {}
    for name, executor in (("ray", RayExecutor()), ("inline", InlineExecutor(1))):
        # a run name of its own: a Ray worker keeps a run's benchmark vectors by run id
        # (decontaminate.benchmark_vectors), and another test's run "ray" may have used it
        run_dir = tmp_path / f"ahead-{name}"
        store = stores[name] = RunStore(run_dir)
        store.open("ahead", "ahead: true\n")
        try:
            run_stages(AHEAD_SPECS, cfgs, toy_ctx(run_dir), store, executor, 4,
                       show_progress=False)
            loaded.update(executor.loaded_models() if name == "ray" else {})
        finally:
            executor.close()
    (service,) = loaded[f"embeddings:{resolve_model_path(None)}"]
    # every request and HumanEval docstring was computed ahead, and decontaminate's shards
    # found them there: none was computed for a shard
    assert service["prefetched"] == len(TEXTS) + 164
    assert service["texts"] == len(TEXTS) + 164
    assert service["memo_hits"] >= len(TEXTS) + 164
    # the rows are an inline run's, which computes every vector in its shards
    for stage in ("decontaminate", "compress"):
        for which in ("kept", "dropped"):
            assert _rows(stores["ray"], stage, which) == _rows(stores["inline"], stage, which)
    assert len(_rows(stores["ray"], "decontaminate", "dropped")) == 1


@pytest.mark.models
def test_a_killed_service_restarts_and_embeds_the_same_vectors(ray_local):
    import numpy as np
    from arenaforge.pipeline.embedding_service import RemoteEmbedder, start_service, stop_service

    service = start_service(2)
    embedder = RemoteEmbedder(service, resolve_model_path(None))
    first = embedder.embed(TEXTS[:4], 64, "float32")
    (before,) = ray_local.get(service.stats.remote())
    os.kill(before["pid"], 9)
    again = embedder.embed(TEXTS[:4], 64, "float32")  # the call is sent to the restarted one
    (after,) = stop_service(service)
    assert after["pid"] != before["pid"] and after["texts"] == 4
    assert np.array_equal(first, again)


class CountingEmbedder:
    """Stands in for the model: slow enough that requests overlap, and counts its calls."""

    def __init__(self, fail_first: bool = False):
        import threading

        self.calls: list[list[str]] = []
        self.fail_first = fail_first
        self.lock = threading.Lock()

    def precision(self, asked):
        return asked

    def embed(self, texts, batch_size, precision):
        import time

        import numpy as np

        with self.lock:
            self.calls.append(list(texts))
            fail = self.fail_first and len(self.calls) == 1
        time.sleep(0.3)
        if fail:
            raise RuntimeError("model died")
        return np.array([[len(t), batch_size] for t in texts], np.float32)


def _service_with(embedder):
    from arenaforge.pipeline.embedding_service import EmbeddingService

    service = EmbeddingService(2)
    service._embedders[("m", None)] = embedder
    return service


def _at_once(service, requests):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(requests)) as pool:
        futures = [pool.submit(service.embed, "m", None, texts, 64, "float32")
                   for texts in requests]
        return [f.exception() or f.result() for f in futures]


def test_equal_requests_in_flight_are_computed_once():
    import numpy as np

    embedder = CountingEmbedder()
    service = _service_with(embedder)
    docs, shard_a, shard_b = ["doc one", "doc two"], ["a"], ["b b"]
    out = _at_once(service, [docs, docs, shard_a, docs, shard_b])
    # the benchmark documents once for the three shards that asked together; each shard's own
    # texts on their own
    assert sorted(map(tuple, embedder.calls)) == sorted([tuple(docs), ("a",), ("b b",)])
    assert service.shared_requests == 2
    assert all(np.array_equal(out[0], out[i]) for i in (1, 3))
    assert out[2].tolist() == [[1, 64]] and out[4].tolist() == [[3, 64]]
    # once answered, the texts are known: asked again (in any company, at any batch size),
    # only the unknown ones are computed
    assert service.embed("m", None, docs, 32, "float32").tolist() == out[0].tolist()
    assert len(embedder.calls) == 3
    mixed = service.embed("m", None, ["new", "doc two", "a"], 16, "float32")
    assert embedder.calls[3:] == [["new"]]
    assert mixed.tolist() == [[3, 16], out[0][1].tolist(), [1, 64]]
    # another precision is another memo
    service.embed("m", None, ["a"], 64, "bfloat16")
    assert embedder.calls[4:] == [["a"]]


def test_a_prefetch_computes_ahead_and_a_request_finds_its_vectors():
    import time

    embedder = CountingEmbedder()
    service = _service_with(embedder)
    texts = [f"text {i}" for i in range(5)]
    service.prefetch("m", None, texts + texts[:2], 16, "float32")
    deadline = time.time() + 10
    while service.prefetched < 5 and time.time() < deadline:
        time.sleep(0.05)
    assert service.prefetched == 5 and embedder.calls == [texts]  # each distinct text once
    out = service.embed("m", None, texts[3:] + ["other"], 64, "float32")
    assert embedder.calls[1:] == [["other"]] and service.memo_hits == 2
    assert out.tolist() == [[6, 16], [6, 16], [5, 64]]  # the prefetch's batch size: a text's
    # vector does not depend on it (arenaforge.pipeline.embedder); the stand-in shows whose


def test_a_failed_computation_fails_its_request_and_its_waiters_compute_it_themselves():
    embedder = CountingEmbedder(fail_first=True)
    service = _service_with(embedder)
    out = _at_once(service, [["x"], ["x"], ["x"]])
    failed = [o for o in out if isinstance(o, Exception)]
    assert len(failed) == 1 and "model died" in str(failed[0])
    assert [o.tolist() for o in out if o is not failed[0]] == [[[1, 64]], [[1, 64]]]
    assert len(embedder.calls) == 2 and not service._pending[("m", None, "float32")]


def test_inline_one_embedder_per_process_until_the_runner_releases_it(tmp_path):
    # every context of the process (each stage's, each shard's) shares one model; the runner
    # drops it after the last stage that embeds (nothing is loaded here: the load is lazy)
    from arenaforge.pipeline.context import release_embedders

    path = resolve_model_path(None)
    first = toy_ctx(tmp_path / "a").embedder(path)
    assert toy_ctx(tmp_path / "b").embedder(path) is first
    InlineExecutor(1).release_embeddings()
    assert toy_ctx(tmp_path / "a").embedder(path) is not first
    release_embedders()
