"""Benchmark: the peer job (mine, answer, judge) through arenaforge vs plain llama-cpp-python.

The job: ``--mine-samples`` Magpie samples from the 0.5B model, answers to ``--instructions``
instructions from the 0.5B and the 135M model, then the 0.5B judging those answers:
``--judge-protocol pairwise`` (the default) generates a verdict per instruction in
both orders (``--judge-tokens`` at most); with ``pairwise_logprob``/``pointwise_logprob`` (the
judge stage's default) both sides instead evaluate each judge prompt, keeping the common prefix
already in the KV cache, and read the verdict letters'/score digits' log probabilities from the
last position's logits (tokens and tok/s then count judge prompt tokens).

Each side has its own ``spawn``-ed processes (no llama.cpp/OpenMP state inherited), loaded and
warmed up (one 1-token request per model; it creates arenaforge's batch context) before timing:

- reference: ONE process as a plain user writes it: ``llama_cpp.Llama(path, n_ctx,
  n_threads=--ref-threads)`` (default: all cores) in the script's own environment (OpenMP's
  default wait policy: threads spin), one sequential ``create_completion`` per (prompt, sample);
- arenaforge: as the pipeline's Ray executor runs model stages: ``--workers`` processes (default:
  one per core), each ``create_backend(spec, n_threads=cores // workers)`` (which sets
  ``OMP_WAIT_POLICY=PASSIVE``) with the batched path; each phase's requests are split across
  them in contiguous shards; they keep their models across phases (like Ray actors).

Same rendered prompts, sampling parameters, seeds (sample i of n: seed + i) and stop strings on
both sides; the judge prompts use arenaforge's answers on both. Each phase runs reference, then
arenaforge, timed from the first request sent to the last result back. Identical outputs (texts;
for logprob readings the most probable token) are counted, not required. Prints wall time,
tokens and tok/s per phase and the total ratio reference / arenaforge (target >= 1.3x). Run it
on an idle machine: spinning threads lose far more than arenaforge's to other processes.

    python scripts/bench_peer.py                                   # the full job
    python scripts/bench_peer.py --instructions 4 --mine-samples 4 --answer-tokens 32 \\
        --judge-tokens 16                                          # a quick check
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Light imports only: spawned children re-import this module, and nothing here may load
# llama_cpp or touch OMP_WAIT_POLICY (arenaforge.pipeline.backends.create_backend does, in the workers).
from arenaforge.pipeline.backends.base import SamplingParams, merged_stop
from arenaforge.pipeline.models import load_registry, resolve_weights
from arenaforge.stages.arena import protocols as jp
from arenaforge.stages.arena.answer import build_conversation
from arenaforge.stages.instructions.mine import DEFAULT_SYSTEM

MINER, SMALL = "qwen2.5-coder-0.5b", "smollm2-135m"
INSTRUCTIONS = [f"Write a Python function that {t}." for t in (
    "reverses a string", "checks whether a number is prime", "merges two sorted lists",
    "counts vowels in a text", "flattens a nested list", "computes the nth Fibonacci number",
    "removes duplicates from a list keeping order", "parses a CSV line into fields",
    "transposes a matrix", "finds the longest common prefix of strings",
    "converts Roman numerals to integers", "validates an IPv4 address",
    "groups words by their anagram", "computes a running average", "rotates a list by k",
    "checks balanced brackets", "returns the second largest number in a list",
    "capitalises every word in a sentence", "computes the GCD of two integers",
    "counts word frequencies in a text", "checks whether two strings are anagrams",
    "converts a decimal number to binary", "finds all pairs in a list summing to a target",
    "chunks a list into pieces of size n")]
WARMUP = SamplingParams(n=2, max_tokens=1, seed=0)  # n=2 takes arenaforge's batched path


def split(items: list, k: int) -> list[list]:
    """``items`` in at most ``k`` contiguous, near-equal, non-empty shards, order kept.

    >>> split([1, 2, 3, 4, 5], 2)
    [[1, 2, 3], [4, 5]]
    """
    size, extra = divmod(len(items), k)
    bounds = [i * size + min(i, extra) for i in range(k + 1)]
    return [items[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def serve(conn, handle) -> None:
    """Answer ``(op, model_id, args)`` messages until the parent terminates the process. An
    error ends it (its traceback goes to stderr) and the parent sees the pipe close."""
    while True:
        op, model_id, args = conn.recv()
        conn.send(handle(op, model_id, *args))


def reference_process(conn, weights: dict[str, tuple[str, int]], threads: int) -> None:
    """The plain llama-cpp-python side: load, warm up, then serve sequential requests."""
    policy = os.environ.get("OMP_WAIT_POLICY", "unset")  # libgomp reads it at import
    import llama_cpp
    import numpy as np
    from arenaforge.pipeline.backends import llamacpp as lc

    llms = {}
    for model_id, (path, n_ctx) in weights.items():
        # This build has AMX kernels whose matmul segfaults on the first decode on some hosts
        # (ggml-org/llama.cpp#20824): LlamaCppBackend then loads without weight repacking
        # (use_extra_bufts=False), and so must the reference, or it crashes.
        with (lc.model_params_override(use_extra_bufts=False) if lc.build_has_amx()
              else contextlib.nullcontext()):
            llms[model_id] = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_threads=threads,
                                             verbose=False)
        llms[model_id].create_completion("Hello", max_tokens=1)

    def complete(llm, prompts, params, stop):
        out = []
        for prompt in prompts:
            for i in range(params.n):
                kwargs = lc.llama_sampling_kwargs(params, params.sample_seed(i))
                res = llm.create_completion(prompt, stop=stop or None, **kwargs)
                out.append((res["choices"][0]["text"], res["usage"]["completion_tokens"]))
        return out

    def logprobs(llm, prompts, candidates):
        ids = {t: tok[0] for t in candidates
               if len(tok := llm.tokenize(t.encode(), add_bos=False, special=False)) == 1}
        out = []
        for prompt in prompts:
            tokens = llm.tokenize(prompt.encode(), special=True)
            # Keep the evaluated common prefix (as Llama.generate does), re-evaluate the rest.
            keep = llama_cpp.Llama.longest_token_prefix(
                llm.input_ids[:llm.n_tokens].tolist(), tokens[:-1])
            llm.n_tokens = keep
            llm.eval(tokens[keep:])
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                           shape=(llm.n_vocab(),)).astype(np.float64)
            norm = logits.max() + np.log(np.exp(logits - logits.max()).sum())
            out.append(({t: float(logits[i] - norm) for t, i in ids.items()}, len(tokens)))
        return out

    conn.send(policy)
    serve(conn, lambda op, model_id, *args: (complete if op == "complete" else logprobs)(
        llms[model_id], *args))


def arena_process(conn, registry_path: str, model_ids: list[str], threads: int,
                  options: dict) -> None:
    """One arenaforge model worker (a Ray model actor's role): load, warm up, serve shards."""
    from arenaforge.pipeline.backends import create_backend
    from arenaforge.stages.instructions.mine import build_pre_query

    registry = load_registry(registry_path)
    backends = {m: create_backend(registry[m], n_threads=threads, **options) for m in model_ids}
    for backend in backends.values():
        backend.complete(["Hello"], WARMUP)

    def handle(op, model_id, *args):
        b = backends[model_id]
        if op == "render":
            return [b.apply_chat_template(c) for c in args[0]]
        if op == "pre_query":
            pre = build_pre_query(b.apply_chat_template, registry[model_id].family, "auto",
                                  args[0])
            return pre.prompt, pre.stop
        if op == "logprobs":
            return [reading for reading, _ in b.next_token_logprobs(*args)]
        return [(c.text, c.completion_tokens) for group in getattr(b, op)(*args) for c in group]

    conn.send("ready")
    serve(conn, handle)


def call(conns, msgs: list | None) -> tuple[list, float]:
    """Send ``msgs[i]`` to ``conns[i]`` (``None``: send nothing, wait on all), wait for every
    answer: (results, wall seconds)."""
    start = time.perf_counter()
    for conn, msg in zip(conns, msgs or []):
        conn.send(msg)
    try:
        replies = [conn.recv() for conn in (conns if msgs is None else conns[:len(msgs)])]
    except EOFError:
        raise RuntimeError("a benchmark process died (its error is printed above)") from None
    return replies, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default=str(ROOT / "configs" / "models.yaml"))
    for flag, default in (("--instructions", 24), ("--mine-samples", 24), ("--mine-tokens", 64),
                          ("--answer-tokens", 128), ("--judge-tokens", 64)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--judge-protocol", default="pairwise",
                        choices=("pairwise", "pairwise_logprob", "pointwise_logprob"))
    parser.add_argument("--batch-size", type=int, default=16,
                        help="arenaforge's batched path (LlamaCppBackend's default: 16)")
    parser.add_argument("--prefix-reuse", action="store_true",
                        help="batched path also reuses partly shared prompt prefixes")
    parser.add_argument("--no-judge-prefix-reuse", action="store_true",
                        help="generative judging without the prefix reuse the judge stage asks for")
    parser.add_argument("--workers", type=int, default=None,
                        help="arenaforge model workers (default: one per core)")
    parser.add_argument("--ref-threads", type=int, default=None,
                        help="threads of the reference process (default: all cores)")
    args = parser.parse_args(argv)

    cores = os.cpu_count() or 1
    if (load := os.getloadavg()[0]) > 0.5:
        print(f"WARNING: load average {load:.1f}: other processes share the cores, and they slow "
              "the reference's spinning threads far more than arenaforge (unfair)", flush=True)
    workers = args.workers or cores
    threads = max(1, cores // workers)
    registry = load_registry(args.registry)
    models = [MINER, SMALL]
    weights = {m: (str(resolve_weights(registry[m])), registry[m].n_ctx) for m in models}
    opts = {"batch_size": args.batch_size, "batch_prefix_reuse": args.prefix_reuse}
    spawn = mp.get_context("spawn")
    procs, ref, arena = [], [], []
    for conns, target, extra in (
            [(ref, reference_process, (weights, args.ref_threads or cores))]
            + [(arena, arena_process, (args.registry, models, threads, opts))] * workers):
        parent, child = spawn.Pipe()
        procs.append(spawn.Process(target=target, args=(child, *extra), daemon=True))
        procs[-1].start()
        child.close()  # so that a child's death closes the pipe (EOFError), never a hang
        conns.append(parent)
    try:
        [policy, *_], _ = call(ref + arena, None)  # wait for every process to load
        print(f"{cores} cores; reference: 1 process x {args.ref_threads or cores} threads, "
              f"OMP_WAIT_POLICY={policy}; arenaforge: {workers} workers x {threads} thread(s), "
              f"batch size {args.batch_size}, partial prefix reuse "
              f"{'on' if args.prefix_reuse else 'off'}; judge protocol {args.judge_protocol}",
              flush=True)
        rows = []

        def phase(name, ref_msg, arena_msgs, logprob=False):
            [ref_out], ref_s = call(ref, [ref_msg])
            outs, arena_s = call(arena, arena_msgs)
            got = [x for out in outs for x in out]
            if logprob:  # arenaforge's readings, with the prompt tokens the reference counted
                got = [(r, n) for r, (_, n) in zip(got, ref_out, strict=True)]
                best = lambda r: max(r, key=r.get) if r else None
                same = sum(best(a) == best(b) for (a, _), (b, _) in zip(got, ref_out))
            else:
                same = sum(a == b for (a, _), (b, _) in zip(got, ref_out, strict=True))
            ref_tok, arena_tok = sum(n for _, n in ref_out), sum(n for _, n in got)
            rows.append((ref_s, arena_s, ref_tok, arena_tok, same, len(got)))
            print(f"{name:14} reference {ref_s:7.1f}s {ref_tok:6d} tok {ref_tok / ref_s:6.1f} "
                  f"tok/s | arenaforge {arena_s:7.1f}s {arena_tok:6d} tok "
                  f"{arena_tok / arena_s:6.1f} tok/s | x{ref_s / arena_s:.2f} | identical "
                  f"{same}/{len(got)}", flush=True)
            return got

        def render(model_id, convs):
            return call(arena[:1], [("render", model_id, (convs,))])[0][0]

        # 1. mining: n samples of one pre-query prompt; worker k takes samples o_k..o_k+c_k-1
        [(pre_prompt, pre_stop)], _ = call(
            arena[:1], [("pre_query", MINER, (DEFAULT_SYSTEM.format(language="Python"),))])
        mine = SamplingParams(n=args.mine_samples, temperature=1.0, top_p=1.0,
                              max_tokens=args.mine_tokens, stop=pre_stop, seed=0)
        shards = split(list(range(mine.n)), workers)
        phase("mine", ("complete", MINER, ([pre_prompt], mine, list(mine.stop))),
              [("complete", MINER, ([pre_prompt], dataclasses.replace(
                  mine, n=len(s), seed=mine.seed + s[0]))) for s in shards])

        # 2. answers from both experts
        instructions = (INSTRUCTIONS * (args.instructions // len(INSTRUCTIONS) + 1))[
            :args.instructions]
        answer = SamplingParams(max_tokens=args.answer_tokens, seed=0)
        convs = [build_conversation(t, None) for t in instructions]
        answers = {}
        for model_id in models:
            stop = merged_stop(answer, registry[model_id].stop)
            got = phase(f"answer/{model_id.split('-')[0]}",
                        ("complete", model_id, (render(model_id, convs), answer, stop)),
                        [("chat", model_id, (s, answer)) for s in split(convs, workers)])
            answers[model_id] = [text for text, _ in got]

        # 3. judging by the 0.5B model, on arenaforge's answers; a pair's orders stay together
        # as the judge stage asks (stages/arena/judge.py, read_chat): both orders share a prefix
        judge = SamplingParams(max_tokens=args.judge_tokens, seed=0,
                               reuse_prefix=not args.no_judge_prefix_reuse)
        protocol = args.judge_protocol
        if protocol == "pointwise_logprob":
            groups = [[jp.single_conversation(protocol, t, answers[m][i]) for m in models]
                      for i, t in enumerate(instructions)]
        else:
            pairs = zip(instructions, answers[MINER], answers[SMALL], strict=True)
            groups = [[jp.pair_conversation(protocol, t, a, b),
                       jp.pair_conversation(protocol, t, b, a)] for t, a, b in pairs]
        shards = [[c for g in s for c in g] for s in split(groups, workers)]
        prompts = render(MINER, [c for g in groups for c in g])
        if protocol == "pairwise":
            phase("judge", ("complete", MINER, (prompts, judge, merged_stop(
                judge, registry[MINER].stop))), [("chat", MINER, (s, judge)) for s in shards])
        else:
            spellings = (jp.DIGIT_SPELLINGS if protocol == "pointwise_logprob"
                         else jp.LETTER_SPELLINGS)
            candidates = sorted({t for texts in spellings.values() for t in texts})
            phase("judge", ("logprobs", MINER, (prompts, candidates)),
                  [("logprobs", MINER, (s, candidates)) for s in shards], logprob=True)

        ref_s, arena_s = sum(r[0] for r in rows), sum(r[1] for r in rows)
        print(f"requests: {args.mine_samples} mining samples, {2 * len(instructions)} answers, "
              f"{len(prompts)} judge calls; identical outputs {sum(r[4] for r in rows)}/"
              f"{sum(r[5] for r in rows)}")
        print(f"wall (loading excluded): reference {ref_s:.1f}s, arenaforge {arena_s:.1f}s -> "
              f"arenaforge x{ref_s / arena_s:.2f} faster (target >= 1.3x)")
    finally:
        for proc in procs:  # nothing to save in them
            proc.terminate()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
