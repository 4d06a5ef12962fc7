"""Judge protocols of the ``judge`` stage: one object per protocol, listed once in ``PROTOCOLS``.

A protocol (distilabel's ``Task``) holds its template, how it builds the judge requests of a
battle (:meth:`JudgeProtocol.requests`), how it parses one reply (:meth:`~JudgeProtocol.parse`,
pure: a failure is ``None`` + an error, never a default score), how it turns a battle's parsed
replies into verdicts (:meth:`~JudgeProtocol.judge`) and the backend capability it ``needs``.
The stage (:mod:`stages.judge`) sends the requests through the reader of that capability, and
``arenaforge config validate`` checks the capability against each judge's backend. Adding a
protocol is adding one class here and its template in ``pipeline/prompts/judge_*.txt``.

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
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pipeline.backends.capabilities import Capability
from stages.judge_logits import BACKEND_ERROR, choice_reading, expected_score
from stages.prompt_templates import PROMPTS, fill, load_template

if TYPE_CHECKING:
    from pipeline.backends.base import Completion, LogprobReading
    from stages.judge import JudgeConfig

__all__ = ["PROMPTS", "PROTOCOLS", "Battle", "JudgeProtocol", "Judgement", "Reply", "fill"]

ORDERS = ("ab", "ba")
SCORE_MIN, SCORE_MAX = 0, 3
SYSTEM_TEMPLATE, REFERENCE_TEMPLATE = "judge_system.txt", "judge_reference.txt"
# Single tokens whose probabilities the logprob protocols read; a leading space is a different
# token in BPE vocabularies and both spellings mean the same answer.
LETTER_SPELLINGS = {"A": ("A", " A"), "B": ("B", " B")}
DIGIT_SPELLINGS = {str(k): (str(k), f" {k}") for k in range(SCORE_MIN, SCORE_MAX + 1)}

_BRACKETED = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
_VERDICTS = {"A": "A", "B": "B", "C": "tie"}
Key = tuple[str, ...]
Conversation = list[dict[str, str]]


@dataclasses.dataclass(frozen=True)
class Battle:
    """Two answers to one instruction; ``model_a < model_b``."""

    instruction_id: str
    instruction: str
    model_a: str
    model_b: str
    answer_a: str
    answer_b: str
    reference: str | None = None

    @property
    def key(self) -> Key:
        return (self.instruction_id, self.model_a, self.model_b)

    def shown(self, order: str) -> tuple[str, str]:
        """The answers in the order shown: ``"ab"`` puts model_a's first."""
        return (self.answer_a, self.answer_b) if order == "ab" else (self.answer_b, self.answer_a)


@dataclasses.dataclass(frozen=True)
class Reply:
    """One judge request's parsed reply; ``value`` is ``None`` when ``error`` is set, and the
    judge's ``raw`` text (or its choice probabilities) is always kept."""

    value: Any
    raw: str
    error: str | None = None
    rationale: str | None = None


@dataclasses.dataclass(frozen=True)
class Judgement:
    """What a protocol concluded about one battle in one order: the verdict fields of a row."""

    verdict: str | None
    raw: str | None
    parse_error: str | None = None
    rationale: str | None = None
    score_a: int | None = None
    score_b: int | None = None
    prob_a: float | None = None
    expected_score_a: float | None = None
    expected_score_b: float | None = None


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


def _errors(*labelled: tuple[str, str | None]) -> str | None:
    return "; ".join(f"{label}: {e}" for label, e in labelled if e) or None


class JudgeProtocol:
    """One judge protocol: template, requests, parsing, verdicts and the capability it needs.

    Subclasses set ``name``, ``template`` (a file in ``pipeline/prompts``), ``needs`` and
    ``shows_pair`` (both answers per request, one request per order; else one answer per
    request, each answer judged once per judge), and implement ``parse`` and ``judge``.
    """

    name: ClassVar[str]
    template: ClassVar[str]
    needs: ClassVar[Capability]
    shows_pair: ClassVar[bool]

    @property
    def templates(self) -> tuple[str, ...]:
        """Every template file this protocol fills."""
        return (SYSTEM_TEMPLATE, self.template, REFERENCE_TEMPLATE)

    def conversation(self, instruction: str, answers: Sequence[str],
                     reference: str | None = None) -> Conversation:
        """The judge conversation showing ``answers`` (two: as Answer A and B; one: alone)."""
        if len(answers) != (2 if self.shows_pair else 1):
            kind = "pairwise" if self.shows_pair else "pointwise"
            raise ValueError(f"protocol {self.name!r} is {kind}: got {len(answers)} answer(s)")
        slots = ({"answer_a": answers[0].strip(), "answer_b": answers[1].strip()}
                 if self.shows_pair else {"answer": answers[0].strip()})
        block = ""
        if reference is not None and reference.strip():
            block = "\n" + fill(load_template(REFERENCE_TEMPLATE),
                                reference=reference.strip()) + "\n"
        user = fill(load_template(self.template), instruction=instruction.strip(),
                    reference_block=block, **slots)
        return [{"role": "system", "content": load_template(SYSTEM_TEMPLATE)},
                {"role": "user", "content": user}]

    def requests(self, battles: Sequence[Battle]) -> dict[Key, Conversation]:
        """The conversations to send, keyed ``battle.key + (order,)`` (pair protocols) or
        ``(instruction_id, model)`` (each answer once), in battle order."""
        out: dict[Key, Conversation] = {}
        for b in battles:
            if self.shows_pair:
                for order in ORDERS:
                    out[(*b.key, order)] = self.conversation(b.instruction, b.shown(order),
                                                             b.reference)
                continue
            for model, answer in ((b.model_a, b.answer_a), (b.model_b, b.answer_b)):
                if (b.instruction_id, model) not in out:
                    out[(b.instruction_id, model)] = self.conversation(b.instruction, (answer,),
                                                                       b.reference)
        return out

    def parse(self, reply: Any, cfg: JudgeConfig) -> Reply:
        """One backend reply (a ``Completion`` or a ``LogprobReading``) as a :class:`Reply`."""
        raise NotImplementedError

    def judge(self, battle: Battle, replies: Mapping[Key, Reply],
              cfg: JudgeConfig) -> dict[str, Judgement]:
        """The battle's judgement per order, from the parsed replies of :meth:`requests`."""
        raise NotImplementedError


class GenerativeProtocol(JudgeProtocol):
    """A protocol whose judge writes its verdict; ``parse_text`` reads it."""

    needs = "chat"

    # ``text -> (value, rationale, error)``: the written verdict, or ``None`` and why not
    parse_text: ClassVar[Callable[[str | None], tuple[Any, str | None, str | None]]]

    def parse(self, reply: Completion, cfg: JudgeConfig) -> Reply:
        if reply.error is not None:
            return Reply(None, reply.text, BACKEND_ERROR + reply.error)
        # A verdict written before the budget ran out is still a verdict; a reply cut before
        # it has none and parses as an error.
        value, rationale, error = self.parse_text(reply.text)
        return Reply(value, reply.text, error, rationale)


class LogprobProtocol(JudgeProtocol):
    """A protocol that reads the judge's next-token probabilities of ``spellings``; a reading
    under ``min_choice_mass`` may be read again with the reply started as ``retry_prefill``."""

    needs = "next_token_logprobs"
    spellings: ClassVar[Mapping[str, tuple[str, ...]]]
    retry_prefill: ClassVar[str]

    def parse(self, reply: LogprobReading, cfg: JudgeConfig) -> Reply:
        probs, raw, error = choice_reading(reply, self.spellings, cfg.min_choice_mass)
        return Reply(probs, raw, error)


class Pairwise(GenerativeProtocol):
    """Both answers shown; a written ``[[A]]``/``[[B]]``/``[[C]]`` verdict per order."""

    name, template, shows_pair = "pairwise", "judge_pairwise.txt", True

    parse_text = staticmethod(parse_verdict)

    def judge(self, battle, replies, cfg):
        out = {}
        for order in ORDERS:
            r = replies[(*battle.key, order)]
            out[order] = Judgement(to_model_verdict(r.value, order), r.raw, r.error, r.rationale)
        return out


class Pointwise(GenerativeProtocol):
    """Each answer alone; a written ``[[N]]`` score 0-3; the verdict compares scores."""

    name, template, shows_pair = "pointwise", "judge_pointwise.txt", False

    parse_text = staticmethod(parse_score)

    def judge(self, battle, replies, cfg):
        a, b = battle.model_a, battle.model_b
        ra, rb = replies[(battle.instruction_id, a)], replies[(battle.instruction_id, b)]
        j = Judgement(verdict_from_scores(ra.value, rb.value),
                      raw=f"[{a}]\n{ra.raw}\n\n[{b}]\n{rb.raw}",
                      parse_error=_errors((a, ra.error), (b, rb.error)),
                      rationale=f"[{a}] {ra.rationale or ''}\n[{b}] {rb.rationale or ''}",
                      score_a=ra.value, score_b=rb.value)
        return dict.fromkeys(ORDERS, j)  # scored alone: both orders are one judgement


class PairwiseLogprob(LogprobProtocol):
    """Both answers shown; P(A) vs P(B) in both orders, averaged (position cancels)."""

    name, template, shows_pair = "pairwise_logprob", "judge_pairwise_logprob.txt", True
    spellings, retry_prefill = LETTER_SPELLINGS, "Answer: "

    def judge(self, battle, replies, cfg):
        ab, ba = replies[(*battle.key, "ab")], replies[(*battle.key, "ba")]
        error = _errors(("order ab", ab.error), ("order ba", ba.error))
        verdict = None
        if error is None:
            p_a = debiased_probability(ab.value["A"], ba.value["A"])
            verdict = verdict_from_scores(p_a, 1.0 - p_a, 2 * cfg.prob_tie_margin)
        # prob_a: P(model_a) in this order alone (model_a is shown as B in order "ba")
        return {"ab": Judgement(verdict, ab.raw, error, prob_a=ab.value["A"] if ab.value else None),
                "ba": Judgement(verdict, ba.raw, error, prob_a=ba.value["B"] if ba.value else None)}


class PointwiseLogprob(LogprobProtocol):
    """Each answer alone; the expected 0-3 digit under the judge's probabilities."""

    name, template, shows_pair = "pointwise_logprob", "judge_pointwise_logprob.txt", False
    spellings, retry_prefill = DIGIT_SPELLINGS, "Score: "

    def judge(self, battle, replies, cfg):
        a, b = battle.model_a, battle.model_b
        ra, rb = replies[(battle.instruction_id, a)], replies[(battle.instruction_id, b)]
        exp_a = expected_score(ra.value) if ra.value else None
        exp_b = expected_score(rb.value) if rb.value else None
        j = Judgement(verdict_from_scores(exp_a, exp_b, cfg.score_tie_margin),
                      raw=f"[{a}] {ra.raw}\n[{b}] {rb.raw}",
                      parse_error=_errors((a, ra.error), (b, rb.error)),
                      score_a=int(max(ra.value, key=ra.value.get)) if ra.value else None,
                      score_b=int(max(rb.value, key=rb.value.get)) if rb.value else None,
                      expected_score_a=exp_a, expected_score_b=exp_b)
        return dict.fromkeys(ORDERS, j)


PROTOCOLS: dict[str, JudgeProtocol] = {
    p.name: p for p in (Pairwise(), Pointwise(), PairwiseLogprob(), PointwiseLogprob())}
ProtocolName = Literal[tuple(PROTOCOLS)]  # type: ignore[valid-type]


def pair_conversation(protocol: str, instruction: str, first: str, second: str,
                      reference: str | None = None) -> Conversation:
    """The judge conversation of a pairwise ``protocol`` showing ``first`` as Answer A."""
    if protocol not in PROTOCOLS or not PROTOCOLS[protocol].shows_pair:
        raise ValueError(f"protocol {protocol!r} is not pairwise")
    return PROTOCOLS[protocol].conversation(instruction, (first, second), reference)


def single_conversation(protocol: str, instruction: str, answer: str,
                        reference: str | None = None) -> Conversation:
    """The judge conversation of a pointwise ``protocol`` rating one answer alone."""
    if protocol not in PROTOCOLS or PROTOCOLS[protocol].shows_pair:
        raise ValueError(f"protocol {protocol!r} is not pointwise")
    return PROTOCOLS[protocol].conversation(instruction, (answer,), reference)
