"""Calling several models for one shard: at once when they are served, in turn when local.

A stage that puts one shard's requests to several models (answer: every expert; tests: every
author; judge and difficulty: every judge) asked them one after another, so each served model
sat idle while the shard talked to the others: with five experts, each server was busy a fifth
of a shard's time at most, and ``scripts/bench_busy.py`` measured two served experts at 60% of
what a saturating client gets from them. Served models (``backend: openai``) each wait on their
own server, so they are asked at once, one thread each. Local engines (llama.cpp, vLLM,
transformers, in this process or in engine actors) share this machine's cores and stay one
after another: running them together would only split the same cores.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def all_served(ctx: Any, models: Iterable[str]) -> bool:
    """Whether every model is served over HTTP (``ModelSpec.served``)."""
    spec = getattr(ctx, "model_spec", None)
    if spec is None:  # a context without a registry (unit tests): nothing is known served
        return False
    try:
        return all(spec(m).served for m in models)
    except KeyError:
        return False


def per_model(ctx: Any, models: Iterable[str], call: Callable[[str], T]) -> dict[str, T]:
    """``call(model)`` for each model, by model in the given order; concurrently when every
    model is served (``all_served``). Results are the same either way: each call is one
    model's own requests."""
    models = list(models)
    if len(models) < 2 or not all_served(ctx, models):
        return {m: call(m) for m in models}
    before = getattr(ctx, "model_seconds", None)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(models), thread_name_prefix="model") as pool:
        futures = {m: pool.submit(call, m) for m in models}
        out = {m: f.result() for m, f in futures.items()}
    if before is not None:
        # the calls overlapped: the shard waited on models for the span, not for their sum
        ctx.model_seconds = before + (time.perf_counter() - start)
    return out
