"""Next-token log probabilities over an OpenAI-compatible ``/completions`` route.

The prompt (the conversation rendered on the client with the model's chat template, plus the
prefill) is completed by one greedy token with ``logprobs: k``; the answer's top-k list at the
first generated position is the reading. Servers answer in one of two shapes:

* the legacy OpenAI completions shape, ``logprobs.top_logprobs[0] = {token text: logprob}``
  (``vllm serve``, SGLang, llama-cpp-python's server; vLLM writes ``-9999.0`` for ``-inf``);
* the chat shape, ``logprobs.content[0].top_logprobs = [{"token", "logprob", ...}]``
  (llama.cpp's ``llama-server``).

A server reports only its top k tokens, so a candidate that is a single token of the model
but not among them gets ``-inf``: its probability is below the k-th's, and the judges'
probability mass treats it as zero. Which candidates are single tokens comes from the
server's tokenize route when it has one (see :func:`single_tokens_from_counts`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

# vLLM's server clamps -inf to this (OpenAI's JSON cannot carry infinities).
_FLOOR = -9999.0


def logprob_body(model: str, prompt: str | list[str], top_k: int) -> dict[str, Any]:
    """The ``/completions`` body that reads the next token's top ``top_k`` log probabilities
    (of each prompt, when ``prompt`` is a list).

    >>> logprob_body("m", "Score: ", 5)["logprobs"]
    5
    """
    return {"model": model, "prompt": prompt, "n": 1, "max_tokens": 1, "temperature": 0.0,
            "top_p": 1.0, "logprobs": top_k}


def top_logprobs(data: dict[str, Any]) -> dict[str, float]:
    """``{token text: logprob}`` of the first generated position of a completions answer.

    When a server lists one text twice (two token ids that decode alike), the first, most
    probable, is kept.

    >>> top_logprobs({"choices": [{"logprobs": {"top_logprobs": [{"A": -0.1, "B": -9999.0}]}}]})
    {'A': -0.1, 'B': -inf}
    >>> top_logprobs({"choices": [{"logprobs": {"content": [{"top_logprobs": [
    ...     {"token": "A", "logprob": -0.2}, {"token": "A", "logprob": -3.0}]}]}}]})
    {'A': -0.2}

    Raises:
        ValueError: the answer carries no log probabilities (the server ignored ``logprobs``).
    """
    try:
        logprobs = data["choices"][0].get("logprobs")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed response ({exc!r}): {str(data)[:300]}") from None
    if not isinstance(logprobs, dict):
        # A missing field in a server's answer, not a caller's type error: hence ValueError.
        raise ValueError(f"the server returned no logprobs: {str(data)[:300]}")  # noqa: TRY004
    pairs: list[tuple[str, float]]
    if logprobs.get("top_logprobs"):
        first = logprobs["top_logprobs"][0] or {}
        pairs = sorted(first.items(), key=lambda kv: -kv[1])
    elif logprobs.get("content"):
        pairs = [(e["token"], e["logprob"]) for e in logprobs["content"][0]["top_logprobs"]]
    else:
        raise ValueError(f"the server returned empty logprobs: {str(data)[:300]}")
    out: dict[str, float] = {}
    for text, value in pairs:
        value = float(value)
        out.setdefault(text, -math.inf if value <= _FLOOR else value)
    return out


def reading_from_top(top: Mapping[str, float], candidates: Sequence[str],
                     singles: set[str] | None) -> dict[str, float]:
    """The reading for ``candidates`` from a server's top-k list.

    Args:
        top: ``{token text: logprob}`` of the next position (:func:`top_logprobs`).
        candidates: the token texts asked about.
        singles: the candidates that are one token of the model; ``None`` when the server
            cannot say (no tokenize route): then every candidate is taken as one token.

    >>> reading_from_top({"Yes": -0.1, "No": -2.5}, ["Yes", "No", " Yes", "Yes sir"],
    ...                  {"Yes", "No", " Yes"})
    {'Yes': -0.1, 'No': -2.5, ' Yes': -inf}
    """
    keep = [c for c in candidates if singles is None or c in singles]
    return {c: top.get(c, -math.inf) for c in keep}


def single_tokens_from_counts(candidates: Sequence[str], tokens: Mapping[str, list[int]],
                              empty: list[int]) -> set[str]:
    """The candidates a tokenize route turns into exactly one token.

    ``empty`` is what the route returns for ``""``: llama-cpp-python's ``/extras/tokenize``
    adds the BOS token to every text, other routes add nothing.

    >>> single_tokens_from_counts(["A", "AB"], {"A": [1, 7], "AB": [1, 7, 8]}, [1])
    {'A'}
    """
    n = len(empty)
    return {c for c in candidates
            if len(tokens[c]) == n + 1 and list(tokens[c][:n]) == list(empty)}
