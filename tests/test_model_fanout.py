"""Several models of one shard: served ones are asked at once, local ones in turn."""

from __future__ import annotations

import threading
import time
import types

import pytest
from arenaforge.pipeline.model_fanout import all_served, per_model
from arenaforge.pipeline.models import ModelSpec


class Ctx:
    def __init__(self, backends: dict[str, str]):
        self.backends, self.model_seconds = backends, 0.0

    def model_spec(self, model_id):
        backend = self.backends[model_id]  # KeyError: not in the registry, as RunContext's
        where = ({"base_url": "http://127.0.0.1:8000/v1", "model_name": model_id}
                 if backend == "openai" else {"path": f"/models/{model_id}.gguf"})
        return ModelSpec(id=model_id, backend=backend, family="test", **where)


def test_served_models_are_asked_at_once_and_counted_once():
    ctx = Ctx({"a": "openai", "b": "openai", "c": "openai"})
    together = threading.Barrier(3, timeout=5)  # breaks unless all three calls overlap

    calls = []  # each call's own seconds

    def call(model):
        begin = time.perf_counter()
        together.wait()
        time.sleep(0.2)
        ctx.model_seconds += 0.2  # what each timed backend adds for its own call
        calls.append(time.perf_counter() - begin)
        return model.upper()

    start = time.perf_counter()
    out = per_model(ctx, ["c", "a", "b"], call)
    span = time.perf_counter() - start
    assert out == {"c": "C", "a": "A", "b": "B"} and list(out) == ["c", "a", "b"]
    # The shard waited for the span of the overlapping calls, not their sum: measured here,
    # not taken as 0.2 s, since a busy machine stretches the calls and the threads' start.
    assert max(calls) <= ctx.model_seconds <= span
    assert ctx.model_seconds < sum(calls)  # each call 0.2 s or more, together at least 0.6 s


@pytest.mark.parametrize("backends", [{"a": "llamacpp", "b": "openai"},
                                      {"a": "vllm", "b": "transformers"}])
def test_local_models_are_asked_in_turn(backends):
    ctx, order = Ctx(backends), []

    def call(model):
        order.append((model, threading.current_thread() is threading.main_thread()))
        return model

    assert per_model(ctx, ["a", "b"], call) == {"a": "a", "b": "b"}
    assert order == [("a", True), ("b", True)]


def test_unknown_or_unregistered_models_are_not_served():
    assert not all_served(types.SimpleNamespace(), ["a"])  # no registry at all
    assert not all_served(Ctx({"a": "openai"}), ["a", "missing"])
    assert all_served(Ctx({"a": "openai"}), ["a"])


def test_an_error_in_one_served_model_reaches_the_caller():
    ctx = Ctx({"a": "openai", "b": "openai"})

    def call(model):
        if model == "b":
            raise RuntimeError("server b is down")
        return model

    with pytest.raises(RuntimeError, match="server b is down"):
        per_model(ctx, ["a", "b"], call)
