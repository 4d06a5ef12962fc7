"""Next-token log probabilities from the embedded llama.cpp backend (logprob judge protocols).

The ``Backend`` Protocol has no logprob method yet, so this reaches the ``llama_cpp.Llama`` that
``LlamaCppBackend`` holds (through any request-cache / timing wrappers). It evaluates each
rendered prompt and reads the logits of its last position directly: ``create_completion(...,
logprobs=k)`` would need the model built with ``logits_all=True`` (a full n_ctx x vocab logits
matrix, ~600 MB for Qwen at 4096 tokens), which the generation path does not want.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)


class LogprobUnsupportedError(RuntimeError):
    """The backend cannot give next-token probabilities (it is not the embedded llama.cpp one)."""


def llama_backend(backend: Any) -> Any:
    """The ``LlamaCppBackend`` under any wrappers (``CachedBackend.inner``, the runner's timer).

    Raises:
        LogprobUnsupportedError: no llama.cpp model underneath.
    """
    seen = backend
    for _ in range(8):
        if "llm" in vars(seen) and seen.llm is not None:
            return seen
        inner = vars(seen).get("inner", vars(seen).get("_inner"))
        if inner is None:
            break
        seen = inner
    model_id = getattr(backend, "model_id", type(backend).__name__)
    raise LogprobUnsupportedError(
        f"judge model {model_id!r}: the logprob judge protocols read next-token probabilities "
        "from an embedded llama.cpp model, and this backend is not one; use judge.protocol "
        "'pairwise' or 'pointwise' with it")


def _single_tokens(llm: Any, spellings: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Token text -> id for every spelling that is one token; each choice needs at least one."""
    found: dict[str, int] = {}
    for choice, texts in spellings.items():
        mine = {}
        for text in texts:
            toks = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            if len(toks) == 1 and toks[0] not in mine.values():
                mine[text] = toks[0]
        if not mine:
            raise ValueError(f"choice {choice!r}: none of {list(texts)} is a single token")
        found.update(mine)
    return found


def next_token_logprobs(backend: Any, conversations: Sequence[list[dict[str, str]]],
                        spellings: Mapping[str, Sequence[str]]
                        ) -> list[tuple[dict[str, float] | None, str | None]]:
    """Log probabilities of chosen tokens as the assistant's first token, per conversation.

    Args:
        backend: a backend built by ``pipeline.backends.create_backend`` for a llamacpp model
            (possibly wrapped).
        conversations: chat conversations; each is rendered with the model's template and the
            generation prompt.
        spellings: choice -> token texts (each must be one token) whose probabilities are read.

    Returns:
        Per conversation ``(logprobs, None)`` with ``logprobs`` keyed by token text (only
        single-token spellings appear), or ``(None, error)`` when the prompt could not be
        evaluated (longer than the context, decode failure).

    Raises:
        LogprobUnsupportedError: the backend is not llama.cpp.
    """
    import llama_cpp
    import numpy as np

    inner = llama_backend(backend)
    llm = inner.llm
    token_of = _single_tokens(llm, spellings)
    out: list[tuple[dict[str, float] | None, str | None]] = []
    for conversation in conversations:
        prompt = backend.apply_chat_template(conversation, add_generation_prompt=True)
        with inner._lock:  # the same lock generation takes: one llama context, one user
            try:
                tokens = inner._prompt_tokens(prompt)
                if len(tokens) >= llm.n_ctx():
                    raise ValueError(f"prompt of {len(tokens)} tokens exceeds the context "
                                     f"window of {llm.n_ctx()}")
                # Reuse the evaluated prefix (both orders of a pair share system + question),
                # but always re-evaluate the last token so its logits are fresh.
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
                log.warning("logprob judge %s: request failed: %s", inner.model_id, exc)
                out.append((None, f"{type(exc).__name__}: {exc}"))
                continue
        top = logits.max()
        log_norm = top + np.log(np.exp(logits - top).sum())
        out.append(({text: float(logits[tok] - log_norm) for text, tok in token_of.items()},
                    None))
    return out
