"""Next-token log probabilities for the logprob protocols (judge and difficulty stages): the
backend call and the pure reading of choices out of it.

Backends that can read them implement ``arenaforge.pipeline.backends.base.LogprobBackend`` (llama.cpp,
OpenAI-compatible servers, vLLM: ``arenaforge.pipeline.backends.capabilities``); the request cache and the
runner's timer pass the call through, so readings are cached and counted as model time like
generations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from arenaforge.pipeline.backends.base import LogprobReading, LogprobUnsupportedError

__all__ = ["LogprobUnsupportedError", "choice_probabilities", "choice_reading",
           "describe_probabilities", "expected_score", "next_token_logprobs"]
BACKEND_ERROR = "backend error: "  # how a reading (or reply) the backend could not make starts


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
            "protocols read next-token probabilities, which this backend does not give; use a "
            "generative protocol with it (`arenaforge config validate` checks this)")
    candidates = sorted({t for texts in spellings.values() for t in texts})
    readings = read(list(conversations), candidates, prefill) if conversations else []
    for logprobs, _ in readings:
        if logprobs is not None:
            for choice, texts in spellings.items():
                if not any(t in logprobs for t in texts):
                    raise ValueError(f"choice {choice!r}: none of {list(texts)} is a single "
                                     "token of this model")
    return readings


def choice_probabilities(token_logprobs: Mapping[str, float],
                         spellings: Mapping[str, Sequence[str]]) -> tuple[dict[str, float], float]:
    """Probabilities of each choice, renormalised over the choices, and their total mass.

    Args:
        token_logprobs: next-token log probability per token text (at least the spellings).
        spellings: the token texts that mean each choice.

    Returns:
        ``(probs, mass)``; ``probs`` sums to 1 when ``mass > 0``, else is empty.

    >>> probs, mass = choice_probabilities({"A": math.log(0.3), " A": math.log(0.1),
    ...                                     "B": math.log(0.4)}, {"A": ("A", " A"), "B": ("B",)})
    >>> {k: round(v, 3) for k, v in probs.items()}, round(mass, 3)
    ({'A': 0.5, 'B': 0.5}, 0.8)
    """
    raw = {choice: sum(math.exp(token_logprobs[t]) for t in texts if t in token_logprobs)
           for choice, texts in spellings.items()}
    mass = sum(raw.values())
    if mass <= 0:
        return {}, 0.0
    return {choice: p / mass for choice, p in raw.items()}, mass


def describe_probabilities(probs: Mapping[str, float], mass: float) -> str:
    """The ``raw`` text recorded for a logprob reading (readable, round-trippable enough).

    >>> describe_probabilities({"A": 0.75, "B": 0.25}, 0.9)
    'P(A)=0.7500 P(B)=0.2500 mass=0.9000'
    """
    parts = [f"P({k})={v:.4f}" for k, v in probs.items()]
    return " ".join(parts + [f"mass={mass:.4f}"])


def expected_score(probs: Mapping[str, float]) -> float:
    """``sum_k k * P(k)`` over digit choices (``probs`` normalised, keys digits).

    >>> expected_score({"0": 0.5, "1": 0.0, "2": 0.0, "3": 0.5})
    1.5
    """
    return float(sum(int(k) * p for k, p in probs.items()))


def choice_reading(reading: LogprobReading, spellings: Mapping[str, Sequence[str]],
                   min_mass: float, tokens: str = "choice tokens"
                   ) -> tuple[dict[str, float] | None, str, str | None]:
    """Parse one reading: ``(probs, raw, None)``, or ``(None, raw, error)`` when the backend
    failed or the choices hold less than ``min_mass`` of the probability (the model meant to
    say something else: a parse error, never a default).

    >>> choice_reading(({"A": math.log(0.01)}, None), {"A": ("A",), "B": ("B",)}, 0.5)[2]
    'choice tokens hold 0.0100 of the probability, below min_choice_mass 0.5'
    >>> choice_reading((None, "timeout"), {"A": ("A",)}, 0.5)
    (None, '', 'backend error: timeout')
    """
    logprobs, error = reading
    if error is not None:
        return None, "", BACKEND_ERROR + error
    probs, mass = choice_probabilities(logprobs or {}, spellings)
    raw = describe_probabilities(probs, mass)
    if not probs or mass < min_mass:
        return None, raw, (f"{tokens} hold {mass:.4f} of the probability, "
                           f"below min_choice_mass {min_mass}")
    return probs, raw, None
