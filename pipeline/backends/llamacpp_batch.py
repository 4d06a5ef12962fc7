"""Batched generation for the llamacpp backend: many sequences in one ``llama_batch``.

llama-cpp-python's ``Llama`` decodes one sequence at a time; on a CPU the weights are read
once per decode step whatever the number of rows, so decoding B sequences together costs little
more than one (2 cores, Qwen2.5-Coder-0.5B: ~31 tok/s alone, ~100 aggregate at B=16). This
module drives llama.cpp's low-level API on a second context over the same loaded model:

* one KV-cache *stream* per slot (``n_seq_max = B``, ``kv_unified = False``): each sequence
  keeps the sequential path's cell layout and attends only over its own cells;
* continuous batching: a slot that finishes is refilled from the queue at the next step;
* prefix reuse: requests are queued in token order so shared prefixes are adjacent; a new
  request keeps the longest matching prefix of a free slot's old KV, or copies a live slot's
  stream (``llama_memory_seq_cp``) and trims it, instead of decoding the prefix again;
* one sampler chain per request, built like ``Llama._init_sampler`` builds it, so a seeded
  request samples the same tokens as on the sequential path;
* :class:`~arenaforge.pipeline.backends.completion_text.CompletionText` replays ``Llama._create_completion``'s stop / multibyte / length
  rules, so the text and ``finish_reason`` match the sequential path.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import random
from collections import deque

from arenaforge.pipeline.backends.base import Completion, SamplingParams
from arenaforge.pipeline.backends.completion_text import CompletionText

log = logging.getLogger(__name__)

# Below this many shared tokens a stream copy (a memcpy of a whole KV stream) is not worth it.
MIN_SHARED_PREFIX = 16


@dataclasses.dataclass
class BatchRequest:
    """One sequence to generate: prompt tokens and its own sampling settings."""

    tokens: list[int]
    params: SamplingParams
    seed: int
    stop: list[str]


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists.

    >>> common_prefix_len([1, 2, 3], [1, 2, 4, 5])
    2
    """
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclasses.dataclass
class _Slot:
    seq_id: int
    cached: list[int] = dataclasses.field(default_factory=list)  # tokens whose KV is stored
    todo: list[int] = dataclasses.field(default_factory=list)  # tokens still to decode
    request: int | None = None  # index into the requests of the current run
    leader: _Slot | None = None  # set while waiting to fork a slot decoding the same prompt
    sampler: object = None
    text: CompletionText | None = None
    n_prompt: int = 0

    @property
    def active(self) -> bool:
        return self.request is not None


class BatchedDecoder:
    """Continuous batching over one llama.cpp context with ``n_slots`` KV streams.

    Args:
        llm: a loaded ``llama_cpp.Llama``; its model is shared, its context params copied.
        n_slots: sequences decoded together (the context's ``n_seq_max``).
        prefix_reuse: also reuse the KV of *partly* shared prompts (a free slot's old prefix,
            or a copy of a live slot's stream). Identical prompts (``n > 1``) are always
            decoded once and forked, which is exact. Partial reuse decodes the rest of a
            prompt as a separate chunk, and llama.cpp's logits depend slightly on how a prompt
            is chunked (up to ~0.4 on Qwen2.5-0.5B logits, enough to flip a near-tie), so it
            trades bit-equality with a one-pass prompt for speed, as llama-cpp-python's own
            prefix cache does between consecutive calls.

    Raises:
        RuntimeError: llama.cpp could not create the context (out of memory).
    """

    def __init__(self, llm, n_slots: int, *, prefix_reuse: bool = False) -> None:
        import llama_cpp

        self._lib = llama_cpp
        self._llm = llm
        self.n_slots = n_slots
        self.prefix_reuse = prefix_reuse
        self.n_ctx = llm.n_ctx()  # per sequence, as on the sequential path
        params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
        params.n_seq_max = n_slots
        params.kv_unified = False  # one stream per sequence; see the module docstring
        params.n_ctx = self.n_ctx * n_slots
        self.n_batch = int(params.n_batch)
        self.ctx = llama_cpp.llama_init_from_model(llm.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not create a context with {n_slots} sequences "
                               f"of {self.n_ctx} tokens")
        self._mem = llama_cpp.llama_get_memory(self.ctx)
        self._vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self._slots = [_Slot(i) for i in range(n_slots)]
        self._pieces: dict[int, bytes] = {}
        self._bos = llm.token_bos()
        self.stats = {"prefix_tokens_reused": 0, "prompt_tokens": 0, "stream_copies": 0,
                      "decode_calls": 0}

    # -- per-token helpers -----------------------------------------------------------------------
    def _piece(self, token: int) -> bytes:
        # Same call as llama-cpp-python's _LlamaModel.detokenize (special=False), memoised.
        piece = self._pieces.get(token)
        if piece is None:
            buf = ctypes.create_string_buffer(32)
            n = self._lib.llama_token_to_piece(self._vocab, token, buf, 32, 0, False)
            piece = self._pieces[token] = bytes(buf[:max(n, 0)])
        return piece

    def _new_sampler(self, params: SamplingParams, seed: int):
        # The chain Llama._init_sampler builds for llama_sampling_kwargs (top_k 0, typical 1,
        # min_p 0, repeat penalty 1: no-ops kept so the chain, and thus the RNG use, is equal).
        lib = self._lib
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        if params.temperature == 0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
            return chain
        for smpl in (lib.llama_sampler_init_top_k(0), lib.llama_sampler_init_typical(1.0, 1),
                     lib.llama_sampler_init_top_p(params.top_p, 1),
                     lib.llama_sampler_init_min_p(0.0, 1),
                     lib.llama_sampler_init_temp(params.temperature),
                     lib.llama_sampler_init_dist(seed)):
            lib.llama_sampler_chain_add(chain, smpl)
        return chain

    # -- slot management -----------------------------------------------------------------------
    def _seq_rm(self, slot: _Slot, keep: int) -> None:
        self._lib.llama_memory_seq_rm(self._mem, slot.seq_id, keep, -1)
        del slot.cached[keep:]

    def _copy_stream(self, src: _Slot, dst: _Slot) -> None:
        # Across streams llama.cpp copies the whole stream buffer at the next decode, before
        # that decode writes any new cell.
        self._lib.llama_memory_seq_cp(self._mem, src.seq_id, dst.seq_id, -1, -1)
        dst.cached = list(src.cached)
        self.stats["stream_copies"] += 1

    def _admit(self, slot: _Slot, index: int, req: BatchRequest, source: _Slot | None,
               leader: _Slot | None) -> None:
        tokens = req.tokens
        self.stats["prompt_tokens"] += len(tokens)
        slot.request, slot.n_prompt, slot.leader = index, len(tokens), leader
        slot.sampler = self._new_sampler(req.params, req.seed)
        max_tokens = req.params.max_tokens
        if max_tokens + len(tokens) >= self.n_ctx:  # Llama._create_completion's truncation
            max_tokens = self.n_ctx - len(tokens)
        slot.text = CompletionText(req.stop, max_tokens)
        if leader is not None:  # forked from the leader's stream once its prompt is decoded
            slot.todo = []
            self.stats["prefix_tokens_reused"] += len(tokens)
            return
        if source is not None:
            self._copy_stream(source, slot)
        keep = min(common_prefix_len(slot.cached, tokens), len(tokens) - 1)
        if not self.prefix_reuse:
            keep = 0
        self._seq_rm(slot, keep)
        self.stats["prefix_tokens_reused"] += keep
        slot.todo = list(tokens[keep:])

    def _pick(self, tokens: list[int], free: list[_Slot]
              ) -> tuple[_Slot, _Slot | None, _Slot | None, bool]:
        """(free slot, live slot to copy from, leader to fork from, defer: wait one step)."""
        for live in self._slots:
            # The same prompt still being decoded: fork it (exact: its logits are shared).
            if (live.active and live.leader is None and len(live.cached) < live.n_prompt
                    and live.cached + live.todo == tokens):
                return free[0], None, live, False
        if not self.prefix_reuse:
            return free[0], None, None, False
        best = max(free, key=lambda s: (common_prefix_len(s.cached, tokens), -s.seq_id))
        have = common_prefix_len(best.cached, tokens)
        source, source_len, planned_len = None, have, have
        for live in self._slots:
            if not live.active or live.leader is not None:
                continue
            done = common_prefix_len(live.cached, tokens)
            if done >= source_len + MIN_SHARED_PREFIX:
                source, source_len = live, done
            if done == len(live.cached):
                planned_len = max(planned_len, done + common_prefix_len(live.todo, tokens[done:]))
        # A live slot still decoding a longer shared prompt: wait for it, then copy.
        defer = planned_len >= source_len + MIN_SHARED_PREFIX
        return best, source, None, defer

    def _finish(self, slot: _Slot, results: list, completion: Completion) -> None:
        results[slot.request] = completion
        self._lib.llama_sampler_free(slot.sampler)
        slot.request, slot.sampler, slot.text, slot.todo, slot.leader = None, None, None, [], None

    def _compact(self) -> None:
        # llama.cpp splits a multi-stream batch wherever sequence ids are not consecutive, so
        # once the queue is empty the live sequences are moved down to the lowest slots.
        if any(s.leader is not None for s in self._slots):
            return
        while True:
            free = [s for s in self._slots if not s.active]
            live = [s for s in self._slots if s.active]
            if not free or not live or free[0].seq_id > live[-1].seq_id:
                return
            src, dst = live[-1], free[0]
            self._copy_stream(src, dst)
            dst.todo, dst.request, dst.sampler, dst.text, dst.n_prompt = (
                src.todo, src.request, src.sampler, src.text, src.n_prompt)
            src.request, src.sampler, src.text, src.todo = None, None, None, []

    # -- the loop --------------------------------------------------------------------------------
    def run(self, requests: list[BatchRequest]) -> list[Completion]:
        """Generate every request; a request that fails is a failed :class:`Completion`."""
        results: list[Completion | None] = [None] * len(requests)
        order = sorted((i for i, r in enumerate(requests)),
                       key=lambda i: requests[i].tokens)  # shared prefixes become neighbours
        queue: deque[int] = deque()
        for i in order:
            n = len(requests[i].tokens)
            if n == 0:
                results[i] = Completion.failed("ValueError: empty prompt")
            elif n >= self.n_ctx:
                results[i] = Completion.failed(
                    f"ValueError: Requested tokens ({n}) exceed context window of {self.n_ctx}")
            else:
                queue.append(i)
        while queue or any(s.active for s in self._slots):
            deferred: list[int] = []
            while queue:
                free = [s for s in self._slots if not s.active]
                if not free:
                    break
                i = queue.popleft()
                slot, source, leader, defer = self._pick(requests[i].tokens, free)
                if defer:
                    deferred.append(i)
                    continue
                self._admit(slot, i, requests[i], source, leader)
            queue.extendleft(reversed(deferred))
            if not queue:
                self._compact()
            self._step(results)
        # Free slots keep their KV: with prefix_reuse the next call may share a prefix with it.
        return [r if r is not None else Completion.failed("internal: no result") for r in results]

    def _step(self, results: list) -> None:
        # Prompts first, each alone and in n_batch chunks, as Llama.eval feeds them: llama.cpp's
        # logits depend on how a prompt is split into ubatches (and a mixed batch is split
        # per sequence), so decoding a prompt together with other tokens changes outputs.
        for slot in self._slots:
            while slot.active and slot.leader is None and len(slot.cached) < slot.n_prompt:
                self._decode([(slot, min(len(slot.todo), self.n_batch))], results)
        # Then one token for every generating sequence, all in one batch.
        decoding = [(slot, 1) for slot in self._slots if slot.active and slot.todo]
        if decoding:
            self._decode(decoding, results)

    def _decode(self, work: list[tuple[_Slot, int]], results: list) -> None:
        lib, batch = self._lib, self._batch
        plan: list[tuple[_Slot, int, int]] = []  # (slot, tokens, batch index of logits or -1)
        n = 0
        for slot, take in work:  # ascending seq ids: llama.cpp groups consecutive sequences
            for j, token in enumerate(slot.todo[:take]):
                batch.token[n] = token
                batch.pos[n] = len(slot.cached) + j
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = slot.seq_id
                batch.logits[n] = take == len(slot.todo) and j == take - 1
                n += 1
            plan.append((slot, take, n - 1 if take == len(slot.todo) else -1))
        batch.n_tokens = n
        rc = lib.llama_decode(self.ctx, batch)
        self.stats["decode_calls"] += 1
        if rc != 0:
            # This call failed: its sequences fail, the others and later requests go on.
            failed = {id(slot) for slot, _, _ in plan}
            for slot in self._slots:
                if id(slot) in failed or id(slot.leader) in failed:
                    self._finish(slot, results, Completion.failed(
                        f"RuntimeError: llama_decode returned {rc}"))
                    self._seq_rm(slot, 0)
            return
        for slot, take, idx in plan:
            slot.cached.extend(slot.todo[:take])
            del slot.todo[:take]
            if idx < 0:
                continue
            for follower in self._slots:
                if follower.leader is slot:  # the prompt is decoded: fork it now
                    self._copy_stream(slot, follower)
                    follower.leader = None
                    self._sample(follower, idx, results)
            self._sample(slot, idx, results)

    def _sample(self, slot: _Slot, idx: int, results: list) -> None:
        lib = self._lib
        token = lib.llama_sampler_sample(slot.sampler, self.ctx, idx)
        text = slot.text
        reason = "stop" if lib.llama_vocab_is_eog(self._vocab, token) else None
        if reason is None:
            if text.n_tokens == 0 and token == self._bos:
                text._strip_first_space = True
            reason = text.push(self._piece(token))
        if reason is None and len(slot.cached) + 1 >= self.n_ctx:
            self._finish(slot, results, Completion.failed(
                f"RuntimeError: context of {self.n_ctx} tokens is full"))
            return
        if reason is None:
            slot.todo = [token]
            return
        self._finish(slot, results, Completion(
            text=text.text, finish_reason=reason, prompt_tokens=slot.n_prompt,
            completion_tokens=text.n_tokens))

    def forget(self) -> None:
        """Drop the KV that free slots keep for a later call's prefix reuse."""
        for slot in self._slots:
            if not slot.active:
                self._seq_rm(slot, 0)

    def close(self) -> None:
        """Free the context and the batch (the model belongs to the ``Llama``)."""
        if getattr(self, "ctx", None):
            for slot in self._slots:
                if slot.sampler is not None:
                    self._lib.llama_sampler_free(slot.sampler)
                    slot.sampler = None
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self.ctx)
            self.ctx = None


def sequential_seeds(llm, params: SamplingParams, n_prompts: int) -> list[int]:
    """The seed each (prompt, sample) gets on the sequential path, advancing ``llm``'s seed.

    ``Llama.create_completion`` sets its seed to the request's, or, unseeded, to
    ``Random(previous seed).randint(0, 2**32)``; replaying that keeps unseeded batched runs
    equal to sequential ones too.
    """
    seeds = []
    current = llm._seed
    for _ in range(n_prompts):
        for i in range(params.n):
            seed = params.sample_seed(i)
            current = random.Random(current).randint(0, 2**32) if seed is None else seed
            seeds.append(current)
    llm.set_seed(current)
    return seeds


def can_batch(llm) -> bool:
    """Whether this model can be decoded with several KV streams (not recurrent/hybrid)."""
    import llama_cpp

    model = llm.model
    return not (llama_cpp.llama_model_is_recurrent(model) or llama_cpp.llama_model_is_hybrid(model)
                or llama_cpp.llama_model_is_diffusion(model))
