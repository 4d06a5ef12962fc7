"""Benchmark: the peer job (mine, answer, judge) through arenaforge vs plain llama-cpp-python.

The job: ``--mine-samples`` Magpie mining samples from the 0.5B model, answers to
``--instructions`` coding instructions from the 0.5B and the 135M model, and a pairwise verdict
in both orders per instruction from the 0.5B judge. arenaforge runs it through its backends
(one ``complete``/``chat`` call per phase: the batched path); the reference makes the same
requests one by one with ``Llama.create_completion`` on the same loaded models (so weights,
threads and prompts are identical; llama-cpp-python's own prompt cache stays on, as a plain
user would have it). Phases alternate reference / arenaforge so load from other processes hits
both alike. Prints wall time per phase and the ratio (target: arenaforge >= 1.3x faster).

    python scripts/bench_peer.py                                  # the full job
    python scripts/bench_peer.py --instructions 8 --mine-samples 8 --answer-tokens 64
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.backends import SamplingParams, create_backend
from pipeline.backends.base import merged_stop
from pipeline.backends.llamacpp import llama_sampling_kwargs
from pipeline.models import load_registry
from stages.answer import build_conversation
from stages.judge_protocols import pair_conversation
from stages.mine import DEFAULT_SYSTEM, build_pre_query

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


def plain(backend, prompts: list[str], params: SamplingParams, stop: list[str]) -> list:
    """The reference: one ``create_completion`` per (prompt, sample), in order."""
    out = []
    for prompt in prompts:
        for i in range(params.n):
            res = backend.llm.create_completion(
                prompt, stop=stop or None, **llama_sampling_kwargs(params, params.sample_seed(i)))
            out.append((res["choices"][0]["text"], res["usage"]["completion_tokens"]))
    return out


def flat(completions) -> list:
    return [(c.text, c.completion_tokens) for group in completions for c in group]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default=str(ROOT / "configs" / "models.yaml"))
    parser.add_argument("--instructions", type=int, default=24)
    parser.add_argument("--mine-samples", type=int, default=24)
    parser.add_argument("--mine-tokens", type=int, default=64)
    parser.add_argument("--answer-tokens", type=int, default=128)
    parser.add_argument("--judge-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--prefix-reuse", action="store_true",
                        help="batched path also reuses partly shared prompt prefixes")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    registry = load_registry(args.registry)
    opts = {"batch_size": args.batch_size, "batch_prefix_reuse": args.prefix_reuse}
    miner = create_backend(registry[MINER], n_threads=args.threads, **opts)
    small = create_backend(registry[SMALL], n_threads=args.threads, **opts)
    instructions = (INSTRUCTIONS * (args.instructions // len(INSTRUCTIONS) + 1))[
        :args.instructions]
    times = {"plain": {}, "arenaforge": {}}
    tokens = {"plain": 0, "arenaforge": 0}
    agree = [0, 0]

    def phase(name, backend, prompts, params, stop, arena_call):
        start = time.perf_counter()
        ref = plain(backend, prompts, params, stop)
        times["plain"][name] = times["plain"].get(name, 0.0) + time.perf_counter() - start
        start = time.perf_counter()
        got = flat(arena_call())
        times["arenaforge"][name] = (times["arenaforge"].get(name, 0.0)
                                     + time.perf_counter() - start)
        tokens["plain"] += sum(n for _, n in ref)
        tokens["arenaforge"] += sum(n for _, n in got)
        agree[0] += sum(a[0] == b[0] for a, b in zip(ref, got, strict=True))
        agree[1] += len(got)
        print(f"{name:8} plain {times['plain'][name]:7.1f}s  arenaforge "
              f"{times['arenaforge'][name]:7.1f}s", flush=True)
        return got

    # 1. mining: n samples of one pre-query prompt
    render = lambda m, add_generation_prompt: miner.apply_chat_template(
        m, add_generation_prompt=add_generation_prompt)
    pre = build_pre_query(render, registry[MINER].family, "auto",
                          DEFAULT_SYSTEM.format(language="Python"))
    mine_params = SamplingParams(n=args.mine_samples, temperature=1.0, top_p=1.0,
                                 max_tokens=args.mine_tokens, stop=pre.stop, seed=0)
    phase("mine", miner, [pre.prompt], mine_params, list(mine_params.stop),
          lambda: miner.complete([pre.prompt], mine_params))

    # 2. answers from both experts
    answer_params = SamplingParams(max_tokens=args.answer_tokens, seed=0)
    convs = [build_conversation(t, None) for t in instructions]
    answers = {}
    for model_id, backend in ((MINER, miner), (SMALL, small)):
        prompts = [backend.apply_chat_template(c) for c in convs]
        stop = merged_stop(answer_params, registry[model_id].stop)
        answers[model_id] = phase(f"answer/{model_id.split('-')[0]}", backend, prompts,
                                  answer_params, stop,
                                  lambda b=backend: b.chat(convs, answer_params))

    # 3. pairwise judging, both orders, by the 0.5B model (on arenaforge's answers)
    judge_params = SamplingParams(max_tokens=args.judge_tokens, seed=0)
    judge_convs = []
    for i, text in enumerate(instructions):
        a, b = answers[MINER][i][0], answers[SMALL][i][0]
        judge_convs += [pair_conversation("pairwise", text, a, b, None),
                        pair_conversation("pairwise", text, b, a, None)]
    prompts = [miner.apply_chat_template(c) for c in judge_convs]
    phase("judge", miner, prompts, judge_params, merged_stop(judge_params, registry[MINER].stop),
          lambda: miner.chat(judge_convs, judge_params))

    total = {k: sum(v.values()) for k, v in times.items()}
    print(f"requests: {args.mine_samples} mining samples, {2 * len(instructions)} answers, "
          f"{len(judge_convs)} judge calls; batch size {args.batch_size}, "
          f"partial prefix reuse {'on' if args.prefix_reuse else 'off'}")
    print(f"completion tokens: plain {tokens['plain']}, arenaforge {tokens['arenaforge']}; "
          f"identical texts {agree[0]}/{agree[1]}")
    print(f"wall: plain {total['plain']:.1f}s, arenaforge {total['arenaforge']:.1f}s -> "
          f"arenaforge x{total['plain'] / total['arenaforge']:.2f} faster (target >= 1.3x)")
    miner.close()
    small.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
