"""Judge protocols of the ``judge`` stage: prompt building and output parsing, all pure.

Four protocols (templates in ``pipeline/prompts/judge_*.txt``):

- ``pairwise``: both answers shown, short step-by-step reasoning, then ``Verdict: [[A]]``,
  ``[[B]]`` or ``[[C]]`` (tie), the MT-Bench format. One generation per order.
- ``pointwise``: StackEval: each answer alone, step-by-step reasoning, then ``Score: [[N]]``
  with N in 0-3 (0 wrong/irrelevant, 1 partly useful, 2 acceptable, 3 excellent).
- ``pairwise_logprob``: both answers shown, the judge's next-token probabilities of ``A`` and
  ``B`` read in both orders and averaged, so a judge that always prefers the first position
  contributes nothing: ``p(model_a better) = (P_ab(A) + P_ba(B)) / 2`` (each normalised over
  the two letters).
- ``pointwise_logprob``: each answer alone; the expected score ``sum_k k * P(k)`` over the
  digits 0-3 at the score position (G-Eval style), so two answers rarely tie.

Every template may get a reference answer (``judge_reference.txt`` fills ``{reference_block}``).
Parsing never turns malformed output into a number: it returns ``None`` and an error string.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Literal

PROMPTS = Path(__file__).resolve().parent.parent / "pipeline" / "prompts"
PROTOCOLS = ("pairwise", "pointwise", "pairwise_logprob", "pointwise_logprob")
Protocol = Literal["pairwise", "pointwise", "pairwise_logprob", "pointwise_logprob"]
PAIRWISE = frozenset({"pairwise", "pairwise_logprob"})
LOGPROB = frozenset({"pairwise_logprob", "pointwise_logprob"})
ORDERS = ("ab", "ba")
SCORE_MIN, SCORE_MAX = 0, 3
# Single tokens whose probabilities the logprob protocols read; a leading space is a different
# token in BPE vocabularies and both spellings mean the same answer.
LETTER_SPELLINGS = {"A": ("A", " A"), "B": ("B", " B")}
DIGIT_SPELLINGS = {str(k): (str(k), f" {k}") for k in range(SCORE_MIN, SCORE_MAX + 1)}

_SLOT = re.compile(r"\{(instruction|answer|answer_a|answer_b|reference_block|reference)\}")
_BRACKETED = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
_VERDICTS = {"A": "A", "B": "B", "C": "tie"}


@cache
def load_template(name: str) -> str:
    """A judge template ``pipeline/prompts/judge_<name>.txt`` (stripped)."""
    path = PROMPTS / f"judge_{name}.txt"
    if not path.is_file():
        raise FileNotFoundError(f"judge prompt template {path} not found")
    return path.read_text(encoding="utf-8").strip()


def fill(template: str, **slots: str) -> str:
    """Fill ``{slot}`` placeholders in one pass.

    One pass, not ``str.format`` or repeated ``str.replace``: answers contain braces, and an
    answer that contains the text ``{answer_b}`` must not receive the other answer.

    >>> fill("Q: {instruction} A: {answer}", instruction="{answer}", answer="x")
    'Q: {answer} A: x'
    """
    return _SLOT.sub(lambda m: slots[m.group(1)] if m.group(1) in slots else m.group(0),
                     template)


def _reference_block(reference: str | None) -> str:
    if reference is None or not reference.strip():
        return ""
    return "\n" + fill(load_template("reference"), reference=reference.strip()) + "\n"


def _conversation(user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": load_template("system")},
            {"role": "user", "content": user}]


def pair_conversation(protocol: str, instruction: str, first: str, second: str,
                      reference: str | None = None) -> list[dict[str, str]]:
    """The judge conversation showing ``first`` as Answer A and ``second`` as Answer B."""
    if protocol not in PAIRWISE:
        raise ValueError(f"protocol {protocol!r} is not pairwise")
    user = fill(load_template(protocol), instruction=instruction.strip(), answer_a=first.strip(),
                answer_b=second.strip(), reference_block=_reference_block(reference))
    return _conversation(user)


def single_conversation(protocol: str, instruction: str, answer: str,
                        reference: str | None = None) -> list[dict[str, str]]:
    """The judge conversation rating one answer alone (pointwise protocols)."""
    if protocol in PAIRWISE or protocol not in PROTOCOLS:
        raise ValueError(f"protocol {protocol!r} is not pointwise")
    user = fill(load_template(protocol), instruction=instruction.strip(), answer=answer.strip(),
                reference_block=_reference_block(reference))
    return _conversation(user)


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


def choice_probabilities(token_logprobs: Mapping[str, float],
                         spellings: Mapping[str, tuple[str, ...]]) -> tuple[dict[str, float], float]:
    """Probabilities of each choice, renormalised over the choices, and their total mass.

    Args:
        token_logprobs: next-token log probability per token text (at least the spellings).
        spellings: the token texts that mean each choice.

    Returns:
        ``(probs, mass)``; ``probs`` sums to 1 when ``mass > 0``, else is empty.

    >>> probs, mass = choice_probabilities({"A": math.log(0.3), " A": math.log(0.1),
    ...                                     "B": math.log(0.4)}, LETTER_SPELLINGS)
    >>> {k: round(v, 3) for k, v in probs.items()}, round(mass, 3)
    ({'A': 0.5, 'B': 0.5}, 0.8)
    """
    raw = {choice: sum(math.exp(token_logprobs[t]) for t in texts if t in token_logprobs)
           for choice, texts in spellings.items()}
    mass = sum(raw.values())
    if mass <= 0:
        return {}, 0.0
    return {choice: p / mass for choice, p in raw.items()}, mass


def debiased_probability(p_first_ab: float, p_first_ba: float) -> float:
    """P(model_a's answer is better) from both orders, position preference cancelled.

    ``p_first_ab`` is P(A) with model_a shown first; ``p_first_ba`` is P(A) with model_b shown
    first, so P(model_a) there is ``1 - p_first_ba``. A judge that always says "A" gets 0.5.

    >>> debiased_probability(0.99, 0.99), debiased_probability(0.9, 0.3)
    (0.5, 0.8)
    """
    return round((p_first_ab + (1.0 - p_first_ba)) / 2.0, 12)


def expected_score(probs: Mapping[str, float]) -> float:
    """``sum_k k * P(k)`` over digit choices (``probs`` normalised, keys ``"0"``..``"3"``).

    >>> expected_score({"0": 0.5, "1": 0.0, "2": 0.0, "3": 0.5})
    1.5
    """
    return float(sum(int(k) * p for k, p in probs.items()))


def describe_probabilities(probs: Mapping[str, float], mass: float) -> str:
    """The ``raw`` text recorded for a logprob judgement (readable, round-trippable enough).

    >>> describe_probabilities({"A": 0.75, "B": 0.25}, 0.9)
    'P(A)=0.7500 P(B)=0.2500 mass=0.9000'
    """
    parts = [f"P({k})={v:.4f}" for k, v in probs.items()]
    return " ".join(parts + [f"mass={mass:.4f}"])
