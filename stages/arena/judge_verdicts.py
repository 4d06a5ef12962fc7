"""Verdicts of the judge protocols (pure): parsing a written verdict or score, mapping a shown
position back to a model, and turning scores or probabilities into a verdict."""

from __future__ import annotations

import re

ORDERS = ("ab", "ba")
SCORE_MIN, SCORE_MAX = 0, 3
_BRACKETED = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
_VERDICTS = {"A": "A", "B": "B", "C": "tie"}


def _single_bracketed(text: str | None, what: str) -> tuple[str | None, str | None, str | None]:
    """The one ``[[...]]`` value of a reply (identical repeats allowed), the text before its
    first occurrence, or an error."""
    if text is None or not text.strip():
        return None, None, "empty output"
    found = [m for m in _BRACKETED.finditer(text)]
    if not found:
        return None, None, f"no {what} in the [[...]] format"
    values = {m.group(1).strip().upper() for m in found}
    if len(values) > 1:
        shown = ", ".join(f"[[{m.group(1)}]]" for m in found)
        return None, None, f"conflicting {what}s: {shown}"
    rationale = text[:found[0].start()]
    rationale = re.sub(r"(?i)\b(verdict|score)\s*:?\s*$", "", rationale.rstrip()).strip()
    return values.pop(), rationale or None, None


def parse_verdict(text: str | None) -> tuple[str | None, str | None, str | None]:
    """Parse a ``pairwise`` reply.

    Returns:
        ``(shown, rationale, error)``: ``shown`` is ``"A"``, ``"B"`` or ``"tie"`` in terms of
        the positions shown, or ``None`` with ``error`` set.

    >>> parse_verdict("A misses n=0; B is right.\\nVerdict: [[B]]")
    ('B', 'A misses n=0; B is right.', None)
    >>> parse_verdict("Verdict: [[A]] ... Verdict: [[B]]")
    (None, None, 'conflicting verdicts: [[A]], [[B]]')
    >>> parse_verdict("Answer A is better.")
    (None, None, 'no verdict in the [[...]] format')
    """
    value, rationale, error = _single_bracketed(text, "verdict")
    if error:
        return None, None, error
    if value not in _VERDICTS:
        return None, None, f"verdict is not A, B or C: [[{value}]]"
    return _VERDICTS[value], rationale, None


def parse_score(text: str | None) -> tuple[int | None, str | None, str | None]:
    """Parse a ``pointwise`` reply: ``(score 0-3, rationale, None)`` or ``(None, None, error)``.

    >>> parse_score("The loop is off by one.\\nScore: [[1]]")
    (1, 'The loop is off by one.', None)
    >>> parse_score("Score: [[4]]")
    (None, None, 'score out of range 0-3: 4')
    """
    value, rationale, error = _single_bracketed(text, "score")
    if error:
        return None, None, error
    if not re.fullmatch(r"[+-]?\d+", value):
        return None, None, f"score is not an integer: [[{value}]]"
    score = int(value)
    if not SCORE_MIN <= score <= SCORE_MAX:
        return None, None, f"score out of range {SCORE_MIN}-{SCORE_MAX}: {score}"
    return score, rationale, None


def to_model_verdict(shown: str | None, order: str) -> str | None:
    """Map a verdict about shown positions back to the models.

    In order ``"ab"`` model_a's answer is shown as A; in ``"ba"`` it is shown as B.

    >>> to_model_verdict("A", "ba"), to_model_verdict("tie", "ba"), to_model_verdict("B", "ab")
    ('b', 'tie', 'b')
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if shown is None or shown == "tie":
        return shown
    if shown not in ("A", "B"):
        raise ValueError(f"shown verdict must be 'A', 'B', 'tie' or None, got {shown!r}")
    first_is_a = order == "ab"
    return "a" if (shown == "A") == first_is_a else "b"


def first_chosen(verdict: str | None, order: str) -> bool | None:
    """Did a model verdict pick the answer shown first? ``None`` for a tie or no verdict.

    >>> first_chosen("b", "ba"), first_chosen("b", "ab"), first_chosen("tie", "ab")
    (True, False, None)
    """
    if verdict not in ("a", "b"):
        return None
    return (verdict == "a") == (order == "ab")


def verdict_from_scores(score_a: float | None, score_b: float | None,
                        margin: float = 0.0) -> str | None:
    """``"a"``/``"b"`` when one score exceeds the other by more than ``margin``, else ``"tie"``;
    ``None`` when either score is missing.

    >>> verdict_from_scores(3, 1), verdict_from_scores(2, 2), verdict_from_scores(1.9, 2.0, 0.2)
    ('a', 'tie', 'tie')
    """
    if score_a is None or score_b is None:
        return None
    if abs(score_a - score_b) <= margin:
        return "tie"
    return "a" if score_a > score_b else "b"


def debiased_probability(p_first_ab: float, p_first_ba: float) -> float:
    """P(model_a's answer is better) from both orders, position preference cancelled.

    ``p_first_ab`` is P(A) with model_a shown first; ``p_first_ba`` is P(A) with model_b shown
    first, so P(model_a) there is ``1 - p_first_ba``. A judge that always says "A" gets 0.5.

    >>> debiased_probability(0.99, 0.99), debiased_probability(0.9, 0.3)
    (0.5, 0.8)
    """
    return round((p_first_ab + (1.0 - p_first_ba)) / 2.0, 12)
