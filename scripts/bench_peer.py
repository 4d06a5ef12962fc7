"""Benchmark: the peer job (mine, answer, judge) through arenaforge vs plain llama-cpp-python.

The job: ``--mine-samples`` Magpie samples from the 0.5B model, answers to ``--instructions``
instructions from the 0.5B and the 135M model, then ``--judge-model`` (the 0.5B; the default
config's judge is the 1.5B) judging those answers as the judge stage does by default:
``pointwise_logprob``, both rounds. Round 1 reads each answer alone, round 2 reads, per pair and
order, the conversation of round 1 continued with the judge's digit and the second answer.
arenaforge's workers run the stage's own ``judge_with`` on their instructions; the reference is
a plain loop over the same prompts (``judge_two_rounds``) that keeps the evaluated common prefix
of consecutive prompts, as ``Llama.generate`` does: ``--ref-order rounds`` (the default) reads
round 1 for every answer, then round 2, as the protocol is written down; ``interleaved`` reads
each answer's round 2 right after its round 1, the judge stage's order, so both sides evaluate
the same tokens. Both read the digits' log probabilities off the last position's logits; the
judge line counts the prompt tokens llama.cpp evaluated (``ev``) and the expected scores that
agree within 1e-3. ``--judge-protocol pairwise`` generates a verdict per instruction in both
orders (``--judge-tokens`` at most); ``pairwise_logprob`` reads A/B once per order.

Each side has its own ``spawn``-ed processes (no llama.cpp/OpenMP state inherited), loaded and
warmed up (one 1-token request per model; it creates arenaforge's batch context) before timing;
each run (``--repeat``) starts with no evaluated prompt kept on either side:

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
    python scripts/bench_peer.py --repeat 3                        # median and range of ratios
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
import statistics
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
            out.append(({t: float(logits[i] - norm) for t, i in ids.items()}, len(tokens),
                        len(tokens) - keep))
        return out

    def handle(op, model_id, *args):
        if op == "forget":  # the next prompt shares nothing with what was evaluated before
            llms[model_id].n_tokens = 0
            return None
        return (complete if op == "complete" else logprobs)(llms[model_id], *args)

    conn.send(policy)
    serve(conn, handle)


def arena_process(conn, registry_path: str, model_ids: list[str], threads: int,
                  options: dict) -> None:
    """One arenaforge model worker (a Ray model actor's role): load, warm up, serve shards."""
    from arenaforge.pipeline.backends import create_backend
    from arenaforge.stages.instructions.mine import build_pre_query

    registry = load_registry(registry_path)
    backends = {m: create_backend(registry[m], n_threads=threads, **options) for m in model_ids}
    for backend in backends.values():
        backend.complete(["Hello"], WARMUP)
        backend.next_token_logprobs([[{"role": "user", "content": "Hello"}]], ["A"])

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
        if op == "judge":  # the judge stage's own reading code, both rounds
            return judge_shard(b, *args)
        if op == "forget":
            return b.forget_prompts()
        return [(c.text, c.completion_tokens) for group in getattr(b, op)(*args) for c in group]

    conn.send("ready")
    serve(conn, handle)


def judge_shard(backend, protocol: str, battles: list[jp.Battle]) -> tuple[dict, int]:
    """The judge stage's rows of ``battles`` read by ``backend`` (``judge_with``, as one judge
    of the stage reads its battles; no retry with a prefill, which the reference loop does not
    do either): ``{(instruction_id, order): (expected_score_a, expected_score_b)}`` and the
    prompt tokens llama.cpp evaluated."""
    from arenaforge.stages.arena.judge import JudgeConfig, judge_with

    before = backend.logprob_stats["evaluated_tokens"]
    cfg = JudgeConfig(judges=["judge"], protocol=protocol, retry_prefill=False)
    rows = judge_with(jp.PROTOCOLS[protocol], backend, "judge", battles, cfg, 0)
    return ({(r["instruction_id"], r["order"]): (r["expected_score_a"], r["expected_score_b"])
             for r in rows}, backend.logprob_stats["evaluated_tokens"] - before)


def judge_two_rounds(ask, protocol: jp.SequentialScoring, battles: list[jp.Battle],
                     render, candidates: list[str], interleaved: bool) -> tuple[dict, int, int]:
    """The plain loop's pointwise readings of ``battles`` in both rounds; ``ask(prompts)`` reads
    on the reference and returns ``[(reading, prompt tokens, evaluated tokens)]``.

    ``interleaved``: each answer's round-2 prompts right after its round-1 reading (the judge
    stage's order, which keeps round 1's prompt in the context for round 2); else round 1 for
    every answer, then round 2, as the protocol is written down. Returns
    ``({(instruction_id, order): (expected_score_a, expected_score_b)}, prompt tokens,
    evaluated tokens)``; ``render`` is not timed by the caller."""
    from arenaforge.stages.arena.judge import JudgeConfig

    cfg = JudgeConfig(judges=["judge"], protocol=protocol.name, retry_prefill=False)
    first = protocol.requests(battles)
    parsed: dict = {}
    counts = [0, 0]

    def read(keys: list, convs: list) -> None:
        for key, (reading, n, evaluated) in zip(keys, ask(render(convs)), strict=True):
            parsed[key] = protocol.parse((reading, None), cfg)
            counts[0] += n
            counts[1] += evaluated

    def second(keys) -> dict:
        return {(*b.key, order): c for b in battles for order in jp.ORDERS
                if protocol.first_key(b, order) in keys
                and (c := protocol.followup(b, order, parsed[protocol.first_key(b, order)]))}

    if interleaved:
        for key, conv in first.items():
            read([key], [conv])
            if later := second({key}):
                read(list(later), list(later.values()))
    else:
        read(list(first), list(first.values()))
        if later := second(set(first)):
            read(list(later), list(later.values()))
    rows = {(b.instruction_id, order): (j.expected_score_a, j.expected_score_b)
            for b in battles for order, j in protocol.judge(b, parsed, cfg).items()}
    return rows, counts[0], counts[1]


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


def summary(label: str, ratios: list[float]) -> str:
    """``label`` with the median and range of per-run ratios.

    >>> summary("judge", [1.2, 1.0, 1.5])
    'judge x1.20 (range 1.00-1.50 over 3 runs)'
    """
    return (f"{label} x{statistics.median(ratios):.2f} (range {min(ratios):.2f}-"
            f"{max(ratios):.2f} over {len(ratios)} run{'s' * (len(ratios) > 1)})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default=str(ROOT / "configs" / "models.yaml"))
    for flag, default in (("--instructions", 24), ("--mine-samples", 24), ("--mine-tokens", 64),
                          ("--answer-tokens", 128), ("--judge-tokens", 64)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--judge-protocol", default="pointwise_logprob",
                        choices=("pairwise", "pairwise_logprob", "pointwise_logprob"),
                        help="pointwise_logprob (the judge stage's default): both rounds")
    parser.add_argument("--judge-model", default=MINER,
                        help="the judge (the default config's is qwen2.5-coder-1.5b)")
    parser.add_argument("--ref-order", default="rounds", choices=("rounds", "interleaved"),
                        help="pointwise_logprob on the reference: round 1 for every answer, "
                             "then round 2 (rounds), or each answer's round 2 right after its "
                             "round 1 (interleaved, the judge stage's order)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run the job this many times (models loaded once); prints the "
                             "median and range of the ratios")
    parser.add_argument("--skip", default="",
                        help="phases not timed: mine, answer (arenaforge still writes the "
                             "answers the judge reads), e.g. 'mine,answer'")
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
    models = list(dict.fromkeys([MINER, SMALL, args.judge_model]))
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
              f"{'on' if args.prefix_reuse else 'off'}; judge {args.judge_model}, protocol "
              f"{args.judge_protocol}"
              + (f", reference order {args.ref_order}"
                 if args.judge_protocol == "pointwise_logprob" else ""), flush=True)
        runs = [job(args, registry, models, ref, arena, workers) for _ in range(args.repeat)]
        if args.repeat > 1:
            for name in runs[0]:
                print(summary(f"{'overall' if name == 'total' else name:14}",
                              [r[name][0] for r in runs]))
    finally:
        for proc in procs:  # nothing to save in them
            proc.terminate()
    return 0


def job(args, registry, models, ref, arena, workers) -> dict[str, tuple[float, ...]]:
    """One run of the peer job; returns per phase (and ``total``) the ratio reference /
    arenaforge first."""
    rows: dict[str, tuple] = {}
    for model_id in models:  # every run starts cold: nothing of an earlier run is reused
        call(ref + arena, [("forget", model_id, ())] * (1 + workers))

    def report(name, ref_s, arena_s, ref_tok, arena_tok, same, n, unit="tok"):
        rows[name] = (ref_s / arena_s, ref_s, arena_s, same, n)
        print(f"{name:14} reference {ref_s:7.1f}s {ref_tok:6d} {unit} {ref_tok / ref_s:6.1f} "
              f"{unit}/s | arenaforge {arena_s:7.1f}s {arena_tok:6d} {unit} "
              f"{arena_tok / arena_s:6.1f} {unit}/s | x{ref_s / arena_s:.2f} | identical "
              f"{same}/{n}", flush=True)

    def phase(name, ref_msg, arena_msgs, logprob=False):
        [ref_out], ref_s = call(ref, [ref_msg])
        outs, arena_s = call(arena, arena_msgs)
        got = [x for out in outs for x in out]
        if logprob:  # arenaforge's readings, with the prompt tokens the reference counted
            got = [(r, n) for r, (_, n, _) in zip(got, ref_out, strict=True)]
            ref_out = [(r, n) for r, n, _ in ref_out]
            best = lambda r: max(r, key=r.get) if r else None
            same = sum(best(a) == best(b) for (a, _), (b, _) in zip(got, ref_out))
        else:
            same = sum(a == b for (a, _), (b, _) in zip(got, ref_out, strict=True))
        report(name, ref_s, arena_s, sum(n for _, n in ref_out), sum(n for _, n in got), same,
               len(got))
        return got

    def render(model_id, convs):
        return call(arena[:1], [("render", model_id, (convs,))])[0][0]

    # 1. mining: n samples of one pre-query prompt; worker k takes samples o_k..o_k+c_k-1
    if "mine" not in args.skip:
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
    for model_id in (MINER, SMALL):
        stop = merged_stop(answer, registry[model_id].stop)
        msgs = [("chat", model_id, (s, answer)) for s in split(convs, workers)]
        if "answer" in args.skip:  # arenaforge's answers, untimed: they are the judge's input
            got = [x for out in call(arena, msgs)[0] for x in out]
        else:
            got = phase(f"answer/{model_id.split('-')[0]}",
                        ("complete", model_id, (render(model_id, convs), answer, stop)), msgs)
        answers[model_id] = [text for text, _ in got]

    # 3. judging on arenaforge's answers; a pair's orders stay together as the judge stage
    # asks (stages/arena/judge.py, read_chat): both orders share a prefix
    judge_model, protocol = args.judge_model, args.judge_protocol
    judge = SamplingParams(max_tokens=args.judge_tokens, seed=0,
                           reuse_prefix=not args.no_judge_prefix_reuse)
    if protocol == "pointwise_logprob":
        # both rounds, as the judge stage reads them: arenaforge runs the stage's judge_with on
        # each worker's battles; the reference is the plain loop of judge_two_rounds
        battles = [jp.Battle(f"i{i}", t, MINER, SMALL, answers[MINER][i], answers[SMALL][i])
                   for i, t in enumerate(instructions)]
        candidates = sorted({t for texts in jp.DIGIT_SPELLINGS.values() for t in texts})
        ref_wall = [0.0]

        def ask(prompts):
            [out], wall = call(ref, [("logprobs", judge_model, (prompts, candidates))])
            ref_wall[0] += wall
            return out

        want, n_prompt, ref_evaluated = judge_two_rounds(
            ask, jp.PROTOCOLS[protocol], battles, lambda c: render(judge_model, c), candidates,
            args.ref_order == "interleaved")
        outs, arena_s = call(arena, [("judge", judge_model, (protocol, s))
                                     for s in split(battles, workers)])
        got = {k: v for out, _ in outs for k, v in out.items()}
        same = sum(g == w or (g is not None and w is not None and abs(g - w) <= 1e-3)
                   for k in want for g, w in zip(got[k], want[k], strict=True))
        report("judge", ref_wall[0], arena_s, ref_evaluated, sum(n for _, n in outs),
               same, 2 * len(want), unit="ev")
        print(f"{'':14} evaluated prompt tokens (ev) of {n_prompt} in "
              f"{sum(len(v) for v in want.values())} readings; identical: expected scores "
              "within 1e-3", flush=True)
    else:
        pairs = zip(instructions, answers[MINER], answers[SMALL], strict=True)
        groups = [[jp.pair_conversation(protocol, t, a, b),
                   jp.pair_conversation(protocol, t, b, a)] for t, a, b in pairs]
        shards = [[c for g in s for c in g] for s in split(groups, workers)]
        prompts = render(judge_model, [c for g in groups for c in g])
        if protocol == "pairwise":
            phase("judge", ("complete", judge_model, (prompts, judge, merged_stop(
                judge, registry[judge_model].stop))),
                  [("chat", judge_model, (s, judge)) for s in shards])
        else:
            candidates = sorted({t for texts in jp.LETTER_SPELLINGS.values() for t in texts})
            phase("judge", ("logprobs", judge_model, (prompts, candidates)),
                  [("logprobs", judge_model, (s, candidates)) for s in shards], logprob=True)

    ref_s, arena_s = sum(r[1] for r in rows.values()), sum(r[2] for r in rows.values())
    print(f"identical outputs {sum(r[3] for r in rows.values())}/"
          f"{sum(r[4] for r in rows.values())}")
    print(f"wall (loading excluded): reference {ref_s:.1f}s, arenaforge {arena_s:.1f}s -> "
          f"arenaforge x{ref_s / arena_s:.2f} faster (target >= 1.3x)", flush=True)
    rows["total"] = (ref_s / arena_s,)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
