"""Tokens/s of each embedded model through the backend layer, against llama-cpp-python direct.

Both paths share one loaded ``Llama`` (same weights, threads and buffers) and decode greedily
the same prompts; the context is reset before every call so neither path profits from the
other's prompt cache. Calls alternate (direct, backend, direct, ...) so load from other
processes hits both alike. Overhead = backend time / direct time - 1 over the same tokens
(target: under 5%). Greedy outputs must be identical: the layer may not change what is
generated.

Usage::

    python scripts/bench_backends.py                     # every installed embedded model
    python scripts/bench_backends.py --models smollm2-135m --max-tokens 64 --reps 3

``--batch`` measures instead the batched path (:mod:`arenaforge.pipeline.backends.llamacpp_batch`):
aggregate completion tok/s of one ``chat`` call over ``--batch-prompts`` distinct requests at
each ``--batch-sizes`` value, against the sequential path (batch size 1, each request alone)
in the same process (target: >= 3x at the best size for the 0.5B model). ``--threads`` defaults
to 1, what each of the pipeline's model workers uses (one per core)::

    python scripts/bench_backends.py --batch --models qwen2.5-coder-0.5b --batch-sizes 1 4 8 16

``--server`` measures instead one llama.cpp ``llama-server`` with ``--parallel`` slots (started
here on a free loopback port from ``--llama-server``, default ``$LLAMA_SERVER`` or ``PATH``),
driven by arenaforge's ``openai`` backend (``max_concurrency`` = ``--concurrency``, default the
slot count) against a saturating client of the same requests: a plain thread pool of httpx
calls with every request in flight at once. The two alternate, back to back, ``--reps`` times;
throughput is completion tokens over wall time (target: arenaforge >= 90% of the saturating
client)::

    python scripts/bench_backends.py --server --models smollm2-135m --parallel 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from arenaforge.pipeline.backends import SamplingParams, create_backend
from arenaforge.pipeline.backends.llamacpp import llama_sampling_kwargs
from arenaforge.pipeline.models import ModelNotInstalledError, load_registry

TASKS = ["Write a Python function that checks whether a string is a palindrome.",
         "Write a Python function that merges two sorted lists into one sorted list.",
         "Write a Python function that counts the words in a text file."]


def bench_model(spec, args) -> dict:
    """Time one model both ways; return tokens/s, overhead and whether outputs agree."""
    backend = create_backend(spec, n_threads=args.threads)
    llm = backend.llm
    params = SamplingParams(max_tokens=args.max_tokens)
    chat = backend.chat_template() is not None
    if chat:
        requests = [[{"role": "user", "content": t}] for t in TASKS]
        prompts = [backend.apply_chat_template(r) for r in requests]
        stop = list(spec.stop) or None
    else:  # a base model: raw completion of a code prefix
        requests = prompts = [f"# {t}\ndef " for t in TASKS]
        stop = None
    kwargs = llama_sampling_kwargs(params, None)

    def direct(i):
        llm.reset()
        out = llm.create_completion(prompts[i], stop=stop, **kwargs)
        return out["choices"][0]["text"], out["usage"]["completion_tokens"]

    def layered(i):
        llm.reset()
        call = backend.chat if chat else backend.complete
        [[c]] = call([requests[i]], params)
        return c.text, c.completion_tokens

    direct(0)  # warm-up: first decode allocates buffers
    times = {"direct": [], "backend": []}
    tokens = {"direct": 0, "backend": 0}
    same = True
    for _ in range(args.reps):
        for i in range(len(TASKS)):
            texts = {}
            for name, fn in (("direct", direct), ("backend", layered)):
                start = time.perf_counter()
                texts[name], n = fn(i)
                times[name].append(time.perf_counter() - start)
                tokens[name] += n
            same &= texts["direct"] == texts["backend"]
    backend.close()
    total = {k: sum(v) for k, v in times.items()}
    ratios = [b / d for b, d in zip(times["backend"], times["direct"], strict=True)]
    return {"model": spec.id, "direct_tok_s": tokens["direct"] / total["direct"],
            "backend_tok_s": tokens["backend"] / total["backend"],
            "overhead_total": total["backend"] / total["direct"] - 1,
            "overhead_median": statistics.median(ratios) - 1, "same_output": same,
            "tokens": tokens["backend"], "extra_buffers": backend.extra_buffers}


BATCH_TASKS = [f"Write a Python function that {t}." for t in (
    "reverses a string", "checks whether a number is prime", "merges two sorted lists",
    "counts vowels in a text", "flattens a nested list", "computes the nth Fibonacci number",
    "removes duplicates from a list keeping order", "parses a CSV line into fields",
    "transposes a matrix", "finds the longest common prefix of strings",
    "converts Roman numerals to integers", "validates an IPv4 address",
    "groups words by their anagram", "computes a running average", "rotates a list by k",
    "checks balanced brackets")]


def bench_batch(spec, args) -> list[dict]:
    """Aggregate tok/s of the sequential path and the batched path at each batch size."""
    backend = create_backend(spec, n_threads=args.threads, batch_size=1)
    llm = backend.llm
    convs = [[{"role": "user", "content": t}] for t in
             (BATCH_TASKS * (args.batch_prompts // len(BATCH_TASKS) + 1))[:args.batch_prompts]]
    params = SamplingParams(max_tokens=args.max_tokens, seed=0)
    rows, reference = [], None
    for size in args.batch_sizes:
        if backend._batcher:
            backend._batcher.close()
        backend._batcher, backend.batch_size = None, size
        start = time.perf_counter()
        if size == 1:  # the sequential path, each request alone (no prompt-cache carry-over)
            out = []
            for conv in convs:
                llm.reset()
                out += backend.chat([conv], params)
        else:
            out = backend.chat(convs, params)
        wall = time.perf_counter() - start
        tokens = sum(c[0].completion_tokens for c in out)
        reference = reference or out
        same = sum(a == b for a, b in zip(out, reference, strict=True))
        rows.append({"model": spec.id, "batch": size, "tokens": tokens, "wall_s": wall,
                     "tok_s": tokens / wall, "same": same, "n": len(out)})
        print(f"{spec.id:22} batch {size:>3}: {tokens:5d} tokens in {wall:7.1f}s = "
              f"{tokens / wall:6.1f} tok/s  x{rows[-1]['tok_s'] / rows[0]['tok_s']:.2f} vs "
              f"batch {args.batch_sizes[0]}  identical outputs {same}/{len(out)}", flush=True)
    backend.close()
    return rows


def bench_server(spec, args) -> dict:
    """Wall time of the same requests through arenaforge and through a saturating client."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from arenaforge.pipeline.backends.llamacpp_serve import (
        Served,
        free_port,
        llama_server_binary,
        llama_server_command,
    )
    from arenaforge.pipeline.backends.openai_server import request_body
    from arenaforge.pipeline.models import ModelSpec, resolve_weights

    binary = args.llama_server or llama_server_binary()
    if not binary:
        raise SystemExit("--server needs llama.cpp's llama-server: pass --llama-server PATH or "
                         "set LLAMA_SERVER")
    gguf = resolve_weights(spec)
    port = free_port()
    threads = args.server_threads or os.cpu_count() or 1
    log_path = Path(args.server_log)
    server = Served(llama_server_command(binary, gguf, port, parallel=args.parallel,
                                         threads=threads), port, log_path).start()
    concurrency = args.concurrency or args.parallel
    served = ModelSpec(id=f"{spec.id}-served", backend="openai", family=spec.family,
                       base_url=server.url, model_name="smol", tokenizer=str(gguf),
                       stop=spec.stop, options={"max_concurrency": concurrency})
    backend = create_backend(served)  # no request cache: every call reaches the server
    convs = [[{"role": "user", "content": t}] for t in
             (BATCH_TASKS * (args.server_requests // len(BATCH_TASKS) + 1))[:args.server_requests]]
    prompts = [backend.apply_chat_template(c) for c in convs]
    params = SamplingParams(max_tokens=args.max_tokens, seed=0, stop=list(spec.stop))
    bodies = [request_body("smol", params, params.sample_seed(0), prompt=p) for p in prompts]
    client = httpx.Client(timeout=600, limits=httpx.Limits(max_connections=len(bodies)))

    def saturating() -> tuple[list[str], int]:
        with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
            answers = list(pool.map(lambda b: client.post(server.url + "/completions",
                                                          json=b).json(), bodies))
        return ([a["choices"][0]["text"] for a in answers],
                sum(a["usage"]["completion_tokens"] for a in answers))

    def arenaforge() -> tuple[list[str], int]:
        out = backend.complete(prompts, params)
        assert all(row[0].error is None for row in out), [row[0].error for row in out]
        return [row[0].text for row in out], sum(row[0].completion_tokens for row in out)

    try:
        saturating(), arenaforge()  # warm-up: first decodes allocate buffers
        times = {"saturating": 0.0, "arenaforge": 0.0}
        tokens = {"saturating": 0, "arenaforge": 0}
        same = 0
        load_before = os.getloadavg()
        for _ in range(args.reps):
            texts = {}
            for name, fn in (("saturating", saturating), ("arenaforge", arenaforge)):
                start = time.perf_counter()
                texts[name], n = fn()
                times[name] += time.perf_counter() - start
                tokens[name] += n
            same += sum(a == b for a, b in zip(texts["saturating"], texts["arenaforge"],
                                               strict=True))
        load_after = os.getloadavg()
    finally:
        backend.close()
        client.close()
        server.stop()
    rate = {k: tokens[k] / times[k] for k in times}
    return {"model": spec.id, "parallel": args.parallel, "concurrency": concurrency,
            "requests": len(bodies), "reps": args.reps, "server_threads": threads,
            "saturating_tok_s": rate["saturating"], "arenaforge_tok_s": rate["arenaforge"],
            "ratio": rate["arenaforge"] / rate["saturating"], "tokens": tokens,
            "wall_s": times, "same_text": same, "load_before": load_before,
            "load_after": load_after}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default=str(ROOT / "configs" / "models.yaml"))
    parser.add_argument("--models", nargs="*", help="model ids (default: all llamacpp models)")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--reps", type=int, default=2)
    # One pipeline model worker: the Ray executor runs one single-threaded worker per core.
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", action="store_true", help="benchmark batch sizes instead")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--batch-prompts", type=int, default=16)
    parser.add_argument("--server", action="store_true",
                        help="benchmark one llama-server through arenaforge vs a saturating client")
    parser.add_argument("--llama-server", help="llama.cpp's llama-server binary")
    parser.add_argument("--parallel", type=int, default=4, help="llama-server slots")
    parser.add_argument("--concurrency", type=int, help="arenaforge's max_concurrency")
    parser.add_argument("--server-requests", type=int, default=32)
    parser.add_argument("--server-threads", type=int, help="llama-server threads (all cores)")
    parser.add_argument("--server-log", default="/tmp/arenaforge-bench-llama-server.log")
    args = parser.parse_args(argv)
    registry = load_registry(args.registry)
    if args.server:
        for model_id in args.models or ["smollm2-135m"]:
            row = bench_server(registry[model_id], args)
            print(f"{row['model']}: llama-server --parallel {row['parallel']} "
                  f"({row['server_threads']} threads), {row['requests']} requests x "
                  f"{row['reps']}, max_tokens {args.max_tokens}; arenaforge max_concurrency "
                  f"{row['concurrency']}")
            for name in ("saturating", "arenaforge"):
                print(f"  {name:10}: {row['tokens'][name]:6d} tokens in "
                      f"{row['wall_s'][name]:7.1f}s = {row[name + '_tok_s']:6.1f} tok/s")
            print(f"  arenaforge / saturating throughput: {row['ratio']:.1%} (target >= 90%); "
                  f"identical texts {row['same_text']}/{row['requests'] * row['reps']}; "
                  f"load average {row['load_before'][0]:.2f} -> {row['load_after'][0]:.2f}",
                  flush=True)
        return 0
    ids = args.models or [k for k, s in registry.items() if s.backend == "llamacpp"]
    if args.batch:
        for model_id in ids:
            if registry[model_id].role != "expert":
                continue
            try:
                rows = bench_batch(registry[model_id], args)
            except ModelNotInstalledError as exc:
                print(f"{model_id:22} skipped: {exc}")
                continue
            best = max(rows, key=lambda r: r["tok_s"])
            print(f"{model_id:22} best: batch {best['batch']} at "
                  f"x{best['tok_s'] / rows[0]['tok_s']:.2f} the sequential tok/s", flush=True)
        return 0
    print(f"{'model':22} {'direct tok/s':>12} {'backend tok/s':>13} {'overhead':>9} "
          f"{'median':>7} {'same':>5} {'tokens':>6}")
    worst = 0.0
    for model_id in ids:
        try:
            row = bench_model(registry[model_id], args)
        except ModelNotInstalledError as exc:
            print(f"{model_id:22} skipped: {exc}")
            continue
        worst = max(worst, row["overhead_total"])
        print(f"{row['model']:22} {row['direct_tok_s']:12.1f} {row['backend_tok_s']:13.1f} "
              f"{row['overhead_total']:+9.1%} {row['overhead_median']:+7.1%} "
              f"{'yes' if row['same_output'] else 'NO':>5} {row['tokens']:6d}", flush=True)
    print(f"worst backend-layer overhead: {worst:+.1%} (target < 5%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
