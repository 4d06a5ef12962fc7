"""Next-token log probabilities for the logprob judge protocols (judge and difficulty stages).

Backends that can read them implement ``pipeline.backends.base.LogprobBackend`` (the embedded
llama.cpp one; the request cache and the runner's timer pass the call through, so readings are
cached and counted as model time like generations).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.backends.base import LogprobReading, LogprobUnsupportedError

__all__ = ["LogprobUnsupportedError", "next_token_logprobs"]


def next_token_logprobs(backend: Any, conversations: Sequence[list[dict[str, str]]],
                        spellings: Mapping[str, Sequence[str]],
                        prefill: str = "") -> list[LogprobReading]:
    """Log probabilities of chosen tokens as the assistant's first token, per conversation.

    Args:
        backend: a backend from ``RunContext.backend`` / ``create_backend``.
        conversations: chat conversations; each is rendered with the model's template and the
            generation prompt.
        spellings: choice -> token texts whose probabilities are read; each choice needs at
            least one spelling that is a single token of this model.
        prefill: text the reply is made to start with (the reading is of the token after it).

    Returns:
        Per conversation ``(logprobs, None)`` keyed by token text (only single-token spellings
        appear), or ``(None, error)`` when the prompt could not be evaluated.

    Raises:
        LogprobUnsupportedError: the backend gives no next-token probabilities.
        ValueError: a choice has no single-token spelling.
    """
    read = getattr(backend, "next_token_logprobs", None)
    if read is None:
        raise LogprobUnsupportedError(
            f"model {getattr(backend, 'model_id', type(backend).__name__)!r}: the logprob "
            "protocols read next-token probabilities from an embedded llama.cpp model, and this "
            "backend is not one; use a generative protocol with it")
    candidates = sorted({t for texts in spellings.values() for t in texts})
    readings = read(list(conversations), candidates, prefill) if conversations else []
    for logprobs, _ in readings:
        if logprobs is not None:
            for choice, texts in spellings.items():
                if not any(t in logprobs for t in texts):
                    raise ValueError(f"choice {choice!r}: none of {list(texts)} is a single "
                                     "token of this model")
    return readings
