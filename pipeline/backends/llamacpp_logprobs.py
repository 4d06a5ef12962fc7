"""Next-token log probabilities from an embedded llama.cpp model (the logprob judge protocols).

Each rendered prompt is evaluated and the logits of its last position are read directly:
``create_completion(..., logprobs=k)`` would need the model built with ``logits_all=True`` (a
full n_ctx x vocab logits matrix, ~600 MB for Qwen at 4096 tokens), which generation does not
want. Consecutive prompts reuse the evaluated common prefix (a judge's rubric, both orders of a
pair), so a reading costs only the tokens after it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from arenaforge.pipeline.backends.base import LogprobReading

log = logging.getLogger(__name__)


def single_token_ids(llm: Any, candidates: Sequence[str]) -> dict[str, int]:
    """Candidate text -> token id, for the candidates that are exactly one token."""
    found: dict[str, int] = {}
    for text in candidates:
        toks = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        if len(toks) == 1 and toks[0] not in found.values():
            found[text] = toks[0]
    return found


def next_token_logprobs(backend: Any, prompts: Sequence[str],
                        candidates: Sequence[str]) -> list[LogprobReading]:
    """Readings for rendered ``prompts`` from a ``LlamaCppBackend`` (holds its lock per prompt)."""
    import llama_cpp
    import numpy as np

    llm = backend.llm
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
                keep = 0
                limit = min(llm.n_tokens, len(tokens) - 1)
                cached = llm.input_ids
                while keep < limit and cached[keep] == tokens[keep]:
                    keep += 1
                llm.n_tokens = keep
                llm.eval(tokens[keep:])
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
