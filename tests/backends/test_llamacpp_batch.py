"""The batched llama.cpp path: same completions as the sequential path, many sequences at once."""

import dataclasses
import random
from pathlib import Path

import pytest
from arenaforge.pipeline.backends import SamplingParams
from arenaforge.pipeline.backends.completion_text import CompletionText
from arenaforge.pipeline.backends.llamacpp_batch import common_prefix_len, sequential_seeds

ROOT = Path(__file__).resolve().parents[2]


# -- pure logic -----------------------------------------------------------------------------------
def test_completion_text_first_listed_stop_wins_like_llama_cpp_python():
    # llama-cpp-python cuts at the first stop *in list order* that occurs, not the earliest.
    t = CompletionText(stop=["B", "A"], max_tokens=10)
    assert t.push(b"xAyB") == "stop"
    assert t.text == "xAy"


def test_completion_text_length_and_counts():
    t = CompletionText(stop=["zz"], max_tokens=3)
    assert [t.push(p) for p in (b"a", b"b", b"c")] == [None, None, "length"]
    assert (t.text, t.n_tokens) == ("abc", 3)


def test_completion_text_waits_for_a_whole_utf8_character():
    # "é" is two bytes; a stop string is not looked for, and max_tokens not checked, while
    # the character is split across tokens (llama-cpp-python's multibyte rule).
    e = "é".encode()
    t = CompletionText(stop=["x"], max_tokens=1)
    assert t.push(b"abx" + e[:1]) is None  # contains the stop, but the character is open
    assert t.push(e[1:]) == "stop"
    assert t.text == "ab"
    assert t.n_tokens == 2


def test_completion_text_strips_the_space_after_a_generated_bos():
    t = CompletionText(stop=[], max_tokens=2, bos_piece_strip=True)
    t.push(b" hi")
    assert t.text == "hi"


def test_common_prefix_len():
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2], [1, 2]) == 2
    assert common_prefix_len([1, 2, 3], [1, 9, 3]) == 1


class _SeedHolder:
    """The two members of ``Llama`` that seed replay touches."""

    def __init__(self, seed):
        self._seed = seed

    def set_seed(self, seed):
        self._seed = seed


def test_sequential_seeds_replays_llama_seed_chain():
    llm = _SeedHolder(0)
    seeds = sequential_seeds(llm, SamplingParams(n=2), 2)
    expected, cur = [], 0
    for _ in range(4):
        cur = random.Random(cur).randint(0, 2**32)
        expected.append(cur)
    assert seeds == expected and llm._seed == expected[-1]
    assert sequential_seeds(llm, SamplingParams(n=3, seed=10), 1) == [10, 11, 12]
    assert llm._seed == 12


# -- real models ----------------------------------------------------------------------------------
_LOADED: dict = {}


def load(model_id: str):
    """One backend per model (small context to keep the KV cache of 4 streams small)."""
    from arenaforge.pipeline.backends.llamacpp import LlamaCppBackend
    from arenaforge.pipeline.models import ModelNotInstalledError, load_registry, resolve_weights

    if model_id not in _LOADED:
        spec = load_registry(ROOT / "configs/models.yaml")[model_id]
        try:
            path = resolve_weights(spec)
        except ModelNotInstalledError as exc:
            pytest.skip(str(exc))
        _LOADED[model_id] = LlamaCppBackend(spec.id, path, n_ctx=512, stop=spec.stop,
                                            n_threads=2, batch_size=4)
    return _LOADED[model_id]


@pytest.fixture(scope="module", autouse=True)
def _close_models():
    yield
    for backend in _LOADED.values():
        backend.close()
    _LOADED.clear()


def both_paths(backend, method, requests, params):
    """(batched, one-pass sequential) results of one call.

    The reference runs each (request, sample) alone after ``llm.reset()``: llama-cpp-python
    otherwise reuses the previous prompt's KV and decodes the rest as a second chunk, and
    llama.cpp's logits depend slightly on chunking, so its own results depend on call order.
    """
    backend.batch_size = 4
    batched = getattr(backend, method)(requests, params)
    backend.batch_size = 1
    try:
        sequential = []
        for request in requests:
            samples = []
            for i in range(params.n):
                backend.llm.reset()
                one = dataclasses.replace(params, n=1, seed=params.sample_seed(i))
                samples.append(getattr(backend, method)([request], one)[0][0])
            sequential.append(samples)
    finally:
        backend.batch_size = 4
    return batched, sequential


SYSTEM = {"role": "system", "content": "You are a careful Python expert. Answer with code only."}
ASKS = ["Write a function that reverses a string.", "Write a function that reverses a list.",
        "Write a function is_prime(n).", "Write fizzbuzz.", "Sum a list without sum().",
        "Write a function that counts vowels."]


@pytest.mark.models
@pytest.mark.parametrize("model_id", ["qwen2.5-coder-0.5b", "smollm2-135m"])
def test_greedy_batched_equals_sequential(model_id):
    backend = load(model_id)
    convs = [[SYSTEM, {"role": "user", "content": q}] for q in ASKS]  # 6 requests, 4 slots
    batched, sequential = both_paths(backend, "chat", convs,
                                     SamplingParams(max_tokens=24, seed=0))
    assert backend._batcher, "the batched path was not used"
    assert_equal_up_to_near_ties(backend, convs, batched, sequential)
    assert all(c[0].text and c[0].completion_tokens > 0 for c in batched)


# How close the top two logits must be for float rounding to explain a different greedy pick.
# Batched and one-sequence decoding run different matmul shapes, so llama.cpp takes other
# kernels (and quantises activations differently) for the same dot products; which ones depends
# on the processor. On an AMD EPYC with AVX-512, 1 of these 6 greedy texts flips at a gap of
# 0.108 (elsewhere all 6 were identical), and llama.cpp's own chunking alone (one eval of
# prompt + 20 tokens vs the same tokens one at a time, Qwen 0.5B) moved logits by up to 0.33,
# the top ones by 0.12. A wrong KV slot or position moves them by whole units.
NEAR_TIE_LOGITS = 0.35


def _logits_after(backend, conversation, completion_tokens):
    import llama_cpp
    import numpy as np

    llm = backend.llm
    prompt = backend._prompt_tokens(backend.apply_chat_template(conversation,
                                                                add_generation_prompt=True))
    llm.reset()
    llm.eval(prompt + completion_tokens)
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                 shape=(llm.n_vocab(),)).astype(np.float64)


def assert_equal_up_to_near_ties(backend, convs, batched, sequential):
    """Batched greedy text equals one-pass sequential text, or the two first part where the
    sequential model's top two next tokens are within ``NEAR_TIE_LOGITS`` of each other."""
    tokenize = lambda t: backend.llm.tokenize(t.encode("utf-8"), add_bos=False, special=False)
    diverged = 0
    for conv, b, s in zip(convs, batched, sequential):
        if b == s:
            continue
        diverged += 1
        tb, ts = tokenize(b[0].text), tokenize(s[0].text)
        k = common_prefix_len(tb, ts)
        assert k < min(len(tb), len(ts)), (b, s)  # same tokens, different text: a real bug
        logits = _logits_after(backend, conv, ts[:k])
        gap = abs(logits[tb[k]] - logits[ts[k]])
        why = f"texts part at token {k} where the logits differ by {gap:.3f}: not rounding"
        assert gap < NEAR_TIE_LOGITS, (why, b[0].text, s[0].text)
    assert diverged <= len(convs) // 3, f"{diverged} of {len(convs)} greedy texts differ"


@pytest.mark.models
def test_seeded_samples_are_forked_and_equal_sequential():
    backend = load("qwen2.5-coder-0.5b")
    convs = [[{"role": "user", "content": q}] for q in ASKS[:2]]
    params = SamplingParams(n=2, temperature=0.9, top_p=0.95, max_tokens=16, seed=11)
    before = backend._batcher.stats["prefix_tokens_reused"] if backend._batcher else 0
    batched, sequential = both_paths(backend, "chat", convs, params)
    assert batched == sequential
    assert len({c.text for c in batched[0]}) > 1  # n samples are different sequences
    # 4 sequences in 4 slots: sample 2 of each prompt was forked from sample 1's prompt
    assert backend._batcher.stats["prefix_tokens_reused"] - before == sum(
        c[0].prompt_tokens for c in batched)


@pytest.mark.models
def test_stop_and_max_tokens_per_sequence_and_a_failing_prompt_does_not_kill_the_batch():
    backend = load("qwen2.5-coder-0.5b")
    too_long = "word " * 600  # over the 512-token context
    prompts = ["def add(a, b):\n", too_long, "# Count to ten\n1, 2, 3,",
               "Q: Capital of France?\nA:"]
    params = SamplingParams(max_tokens=20, stop=["\n"], seed=0)
    batched, sequential = both_paths(backend, "complete", prompts, params)
    assert batched == sequential
    failed = batched[1][0]
    assert failed.finish_reason == "error" and "exceed context window" in failed.error
    reasons = {c[0].finish_reason for i, c in enumerate(batched) if i != 1}
    assert reasons == {"stop", "length"}, reasons  # each sequence ends on its own terms
    for i, c in enumerate(batched):
        if i != 1:
            assert "\n" not in c[0].text and c[0].completion_tokens <= 20
            if c[0].finish_reason == "length":
                assert c[0].completion_tokens == 20


@pytest.mark.models
def test_partial_prefix_reuse_shares_the_system_prompt():
    from arenaforge.pipeline.backends.llamacpp_batch import BatchedDecoder, BatchRequest

    backend = load("smollm2-135m")
    decoder = BatchedDecoder(backend.llm, 4, prefix_reuse=True)
    try:
        params = SamplingParams(max_tokens=8, seed=0)
        prompts = [backend._prompt_tokens(backend.apply_chat_template([SYSTEM, {
            "role": "user", "content": q}])) for q in ASKS]
        out = decoder.run([BatchRequest(t, params, 0, ["<|im_end|>"]) for t in prompts])
    finally:
        decoder.close()
    shared = min(common_prefix_len(prompts[0], p) for p in prompts[1:])  # the system turn
    assert shared >= 16
    # the first prompt is decoded whole, every other one reuses at least the common part
    assert decoder.stats["prefix_tokens_reused"] >= shared * (len(ASKS) - 1)
    assert all(c.error is None and c.completion_tokens > 0 for c in out)


@pytest.mark.models
def test_reuse_prefix_is_asked_per_call_and_is_no_part_of_the_cache_key():
    """A backend built without partial prefix reuse reuses a shared system turn for a call
    that asks for it (the judge stage's generative readings), and only for that call."""
    backend = load("smollm2-135m")
    assert not backend.batch_prefix_reuse
    backend.batch_size = 4
    convs = [[SYSTEM, {"role": "user", "content": q}] for q in ASKS[:4]]
    plain = SamplingParams(max_tokens=4, seed=0)
    reusing = dataclasses.replace(plain, reuse_prefix=True)
    assert reusing.to_json() == plain.to_json()  # the same request, the same cache entry

    def reused(params):
        before = backend._batcher.stats["prefix_tokens_reused"] if backend._batcher else 0
        out = backend.chat(convs, params)
        assert all(c[0].error is None for c in out)
        return backend._batcher.stats["prefix_tokens_reused"] - before

    assert reused(plain) == 0
    assert reused(reusing) >= 16 * (len(convs) - 1)  # the system turn, at least
    assert reused(plain) == 0 and not backend._batcher.prefix_reuse
