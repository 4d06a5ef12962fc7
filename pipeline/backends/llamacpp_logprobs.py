"""Next-token log probabilities from an embedded llama.cpp model (the logprob judge protocols).

Each rendered prompt is evaluated and the logits of its last position are read directly:
``create_completion(..., logprobs=k)`` would need the model built with ``logits_all=True`` (a
full n_ctx x vocab logits matrix, ~600 MB for Qwen at 4096 tokens), which generation does not
want. A reading costs only the tokens after the longest prefix already evaluated:

* the context keeps the prompt it evaluated last, so consecutive prompts reuse their common
  prefix (a judge's rubric, the instruction both answers of a pair are read under);
* :class:`PrefixStates` keeps the KV of earlier prompts (bounded by bytes), so a prompt that
  extends one read a while ago (round 2 of a pointwise protocol, which continues round 1's
  conversation, when other readings came in between) restores it instead of evaluating it again.

Both are exact: a restored sequence holds the same KV cells, at the same positions, as the
context held when it evaluated them, so the tokens after it are evaluated as they would be
straight after that prompt (``tests/backends/test_llamacpp_prefix_states.py``).
"""

from __future__ import annotations

import collections
import ctypes
import logging
from collections.abc import Sequence
from typing import Any

from arenaforge.pipeline.backends.base import LogprobReading
from arenaforge.pipeline.backends.llamacpp_batch import common_prefix_len

log = logging.getLogger(__name__)

# Restoring a saved state copies its whole KV (4 ms for 700 tokens of the 0.5B model, 2 cores);
# below this many extra tokens evaluating them is as cheap.
MIN_RESTORE_TOKENS = 16


def single_token_ids(llm: Any, candidates: Sequence[str]) -> dict[str, int]:
    """Candidate text -> token id, for the candidates that are exactly one token."""
    found: dict[str, int] = {}
    for text in candidates:
        toks = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        if len(toks) == 1 and toks[0] not in found.values():
            found[text] = toks[0]
    return found


class PrefixStates:
    """Saved KV states of a ``Llama`` context's sequence, keyed by their tokens, least recently
    used first out once they hold more than ``capacity_bytes``.

    llama-cpp-python's ``LlamaRAMCache`` keyed by token prefix, with the state of the
    sequence alone (``llama_state_seq_get_data``): ``Llama.save_state`` also copies the
    context's ``n_batch x n_vocab`` float scores (311 MB for Qwen's vocabulary), which the KV of
    a 1,000-token prompt (28 MB for the 1.5B model) does not need.

    >>> states = PrefixStates(0)
    >>> states.longest([1, 2, 3])
    ((), 0)
    """

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._states: collections.OrderedDict[tuple[int, ...], bytearray] = (
            collections.OrderedDict())
        self.size = 0

    def clear(self) -> None:
        """Drop every saved state."""
        self._states.clear()
        self.size = 0

    def __contains__(self, key: tuple[int, ...]) -> bool:
        return key in self._states

    def longest(self, tokens: Sequence[int]) -> tuple[tuple[int, ...], int]:
        """The saved key sharing the longest prefix with ``tokens``, and that prefix's length."""
        best, have = (), 0
        for key in self._states:
            n = common_prefix_len(key, tokens)
            if n > have:
                best, have = key, n
        return best, have

    def save(self, llm: Any, tokens: Sequence[int]) -> None:
        """Save the context's sequence 0, which holds exactly ``tokens``."""
        import llama_cpp

        key = tuple(tokens)
        if not key or self.capacity_bytes <= 0 or key in self._states:
            if key in self._states:
                self._states.move_to_end(key)
            return
        size = llama_cpp.llama_state_seq_get_size(llm.ctx, 0)
        if size > self.capacity_bytes:
            return
        data = bytearray(size)  # written in place: no second copy of the state
        view = (ctypes.c_uint8 * size).from_buffer(data)
        n = llama_cpp.llama_state_seq_get_data(llm.ctx, view, size, 0)
        del view  # a bytearray with a live export cannot be resized
        if n == 0:
            return
        del data[n:]
        self._states[key] = data
        self.size += n
        while self.size > self.capacity_bytes:
            _, old = self._states.popitem(last=False)
            self.size -= len(old)

    def restore(self, llm: Any, key: tuple[int, ...]) -> bool:
        """Load ``key``'s state into sequence 0 and tell ``llm`` which tokens it holds."""
        import llama_cpp

        data = self._states[key]
        self._states.move_to_end(key)
        buf = (ctypes.c_uint8 * len(data)).from_buffer(data)
        if llama_cpp.llama_state_seq_set_data(llm.ctx, buf, len(data), 0) != len(data):
            llm.n_tokens = 0  # the sequence is cleared on failure: nothing is reusable
            return False
        llm.input_ids[:len(key)] = key
        llm.n_tokens = len(key)
        return True


def next_token_logprobs(backend: Any, prompts: Sequence[str],
                        candidates: Sequence[str]) -> list[LogprobReading]:
    """Readings for rendered ``prompts`` from a ``LlamaCppBackend`` (holds its lock per prompt).

    Counts into ``backend.logprob_stats``: ``readings``, ``prompt_tokens`` (their lengths),
    ``evaluated_tokens`` (what llama.cpp evaluated), ``restored_tokens`` (taken from
    :class:`PrefixStates`) and ``restores``.
    """
    import llama_cpp
    import numpy as np

    llm = backend.llm
    states: PrefixStates | None = getattr(backend, "prefix_states", None)
    stats = backend.logprob_stats
    token_of = single_token_ids(llm, candidates)
    out: list[LogprobReading] = []
    for prompt in prompts:
        with backend._lock:  # the same lock generation takes: one llama context, one user
            try:
                tokens = backend._prompt_tokens(prompt)
                if len(tokens) >= llm.n_ctx():
                    raise ValueError(f"prompt of {len(tokens)} tokens exceeds the context "
                                     f"window of {llm.n_ctx()}")
                # Reuse the evaluated prefix but always re-evaluate the last token so that its
                # logits are fresh.
                limit = len(tokens) - 1
                keep = min(common_prefix_len(llm.input_ids[:llm.n_tokens].tolist(), tokens),
                           limit)
                if states is not None:
                    key, have = states.longest(tokens)
                    have = min(have, limit)
                    restore = have >= keep + MIN_RESTORE_TOKENS
                    if keep < llm.n_tokens or restore:
                        # the live prompt is about to be cut: keep it for a later extension
                        states.save(llm, llm.input_ids[:llm.n_tokens].tolist())
                    if restore and key in states:
                        if states.restore(llm, key):
                            stats["restores"] += 1
                            stats["restored_tokens"] += have - keep
                            keep = have
                        else:  # the sequence was cleared
                            keep = 0
                llm.n_tokens = keep
                llm.eval(tokens[keep:])
                stats["readings"] += 1
                stats["prompt_tokens"] += len(tokens)
                stats["evaluated_tokens"] += len(tokens) - keep
                logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                               shape=(llm.n_vocab(),)).astype(np.float64)
            except (ValueError, RuntimeError) as exc:
                log.warning("logprobs %s: request failed: %s", backend.model_id, exc)
                out.append((None, f"{type(exc).__name__}: {exc}"))
                continue
        top = logits.max()
        log_norm = top + np.log(np.exp(logits - top).sum())
        out.append(({text: float(logits[tok] - log_norm) for text, tok in token_of.items()},
                    None))
    return out
