"""Saved prompt states of the embedded llama.cpp backend (``llamacpp_logprobs.PrefixStates``):
readings that restore an earlier prompt's KV equal the readings of the same prompts read one
after the other, and evaluate each shared prefix once (needs the Qwen2.5-Coder-0.5B weights)."""

from __future__ import annotations

import pytest
from arenaforge.pipeline.backends.llamacpp_logprobs import PrefixStates, next_token_logprobs

pytestmark = pytest.mark.models
MODEL = "qwen2.5-coder-0.5b"
DIGITS = ["0", "1", "2", "3", " 0", " 1", " 2", " 3"]
ANSWERS = ["```python\ndef rev(s):\n    return s[::-1]\n```",
           ("```python\ndef rev(s):\n    out = ''\n    for c in s:\n        out = c + out\n"
            "    return out\n```")]


@pytest.fixture(scope="module")
def backend():
    from pathlib import Path

    from arenaforge.pipeline.backends import create_backend
    from arenaforge.pipeline.models import ModelNotInstalledError, load_registry

    spec = load_registry(Path(__file__).resolve().parents[2] / "configs/models.yaml")[MODEL]
    try:
        b = create_backend(spec, n_threads=2)
    except ModelNotInstalledError as exc:
        pytest.skip(str(exc))
    yield b
    b.close()


def rounds(backend) -> tuple[list[str], list[str]]:
    """Round 1 reads each answer alone; round 2 continues round 1's conversation (the
    pointwise_logprob judge's shape)."""
    ask = "Rate this answer to 'reverse a string'.\n\n"
    scale = ("\n\nScale: 0 = wrong or irrelevant, 1 = partly useful, 2 = acceptable, "
             "3 = excellent: correct, complete, handles edge cases. Reply with one digit.")
    first = [[{"role": "user", "content": ask + a + scale}] for a in ANSWERS]
    second = [[*c, {"role": "assistant", "content": "2"},
               {"role": "user", "content": "Now rate this second answer:\n\n" + other}]
              for c, other in zip(first, reversed(ANSWERS), strict=True)]
    render = backend.apply_chat_template
    return [render(c) for c in first], [render(c) for c in second]


def read(backend, prompts: list[str], capacity: int) -> tuple[list[dict], dict]:
    backend.prefix_states = PrefixStates(capacity) if capacity else None
    backend.llm.n_tokens = 0  # a cold context: nothing evaluated
    for key in backend.logprob_stats:
        backend.logprob_stats[key] = 0
    readings = next_token_logprobs(backend, prompts, DIGITS)
    assert all(error is None for _, error in readings)
    return [r for r, _ in readings], dict(backend.logprob_stats)


def test_restored_states_read_the_same_as_consecutive_prompts(backend):
    (r1a, r1b), (r2a, r2b) = rounds(backend)
    # each answer's round 2 straight after its round 1: the context holds the prefix
    want, consecutive = read(backend, [r1a, r2a, r1b, r2b], 0)
    # round by round: round 2's prefix was cut by the other answer's round 1 in between
    plain, cut = read(backend, [r1a, r1b, r2a, r2b], 0)
    got, cached = read(backend, [r1a, r1b, r2a, r2b], 64 << 20)
    assert cached["restores"] == 2 and cached["restored_tokens"] > 0
    assert cached["evaluated_tokens"] == consecutive["evaluated_tokens"]
    assert cut["evaluated_tokens"] == consecutive["evaluated_tokens"] + cached["restored_tokens"]
    order = [0, 2, 1, 3]  # got/plain are in round order, want in answer order
    for i, j in enumerate(order):
        assert max(got[i], key=got[i].get) == max(want[j], key=want[j].get)
        assert got[i] == pytest.approx(want[j], abs=1e-4)  # the same KV: the same numbers
        assert max(plain[i], key=plain[i].get) == max(want[j], key=want[j].get)


def test_states_are_bounded_by_bytes(backend):
    (r1a, r1b), _ = rounds(backend)
    read(backend, [r1a, r1b, "Hello"], 64 << 20)
    both = backend.prefix_states.size
    # room for one state: r1a's goes out when r1b's comes in
    read(backend, [r1a, r1b, "Hello"], both * 2 // 3)
    states = backend.prefix_states
    assert 0 < states.size <= both * 2 // 3
    assert tuple(backend._prompt_tokens(r1a)) not in states
    assert tuple(backend._prompt_tokens(r1b)) in states


def test_prefix_states_keep_the_longest_match():
    states = PrefixStates(1 << 20)
    states._states[(1, 2, 3)] = bytearray(4)
    states._states[(1, 2, 9, 9)] = bytearray(4)
    assert states.longest([1, 2, 9, 5]) == ((1, 2, 9, 9), 3)
    assert states.longest([7]) == ((), 0)


def test_forget_prompts_starts_cold(backend):
    (r1a, _), (r2a, _) = rounds(backend)
    read(backend, [r1a], 64 << 20)
    backend.forget_prompts()
    readings = next_token_logprobs(backend, [r2a], DIGITS)
    assert readings[0][1] is None
    stats = backend.logprob_stats
    assert stats["evaluated_tokens"] == stats["prompt_tokens"]  # r2a whole: nothing of r1a
    assert stats["restores"] == 0 and backend.prefix_states.size == 0
