"""Judge protocols of the ``judge`` stage: one object per protocol, listed once in ``PROTOCOLS``.

A protocol (distilabel's ``Task``) holds its template, how it builds the judge requests of a
battle (:meth:`JudgeProtocol.requests`), how it parses one reply (:meth:`~JudgeProtocol.parse`,
pure: a failure is ``None`` + an error, never a default score), how it turns a battle's parsed
replies into verdicts (:meth:`~JudgeProtocol.judge`) and the backend capability it ``needs``.
The stage (:mod:`arenaforge.stages.arena.judge`) sends the requests through the reader of that capability, and
``arenaforge config validate`` checks the capability against each judge's backend. Adding a
protocol is adding one class here and its template in ``stages/arena/prompts/judge_*.txt``.

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
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from arenaforge.pipeline.backends.capabilities import Capability
from arenaforge.pipeline.prompts import fill, load_template
from arenaforge.stages.arena.judge_logits import BACKEND_ERROR, choice_reading, expected_score
from arenaforge.stages.arena.judge_verdicts import (
    ORDERS,
    SCORE_MAX,
    SCORE_MIN,
    debiased_probability,
    first_chosen,
    parse_score,
    parse_verdict,
    to_model_verdict,
    verdict_from_scores,
)

if TYPE_CHECKING:
    from arenaforge.pipeline.backends.base import Completion, LogprobReading

__all__ = ["ORDERS", "PROTOCOLS", "Battle", "JudgeProtocol", "Judgement", "Reply",
           "debiased_probability", "fill", "first_chosen", "parse_score", "parse_verdict",
           "to_model_verdict", "verdict_from_scores"]


class JudgeSettings(Protocol):
    """What a protocol reads of the judge stage's config (``JudgeConfig`` of
    ``arenaforge.stages.arena.judge`` has these fields; the stage imports this module, never
    the other way round)."""

    min_choice_mass: float
    prob_tie_margin: float
    score_tie_margin: float


SYSTEM_TEMPLATE, REFERENCE_TEMPLATE = "judge_system.txt", "judge_reference.txt"
# Single tokens whose probabilities the logprob protocols read; a leading space is a different
# token in BPE vocabularies and both spellings mean the same answer.
LETTER_SPELLINGS = {"A": ("A", " A"), "B": ("B", " B")}
DIGIT_SPELLINGS = {str(k): (str(k), f" {k}") for k in range(SCORE_MIN, SCORE_MAX + 1)}

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

    def shown_models(self, order: str) -> tuple[tuple[str, str], tuple[str, str]]:
        """``(model, answer)`` shown first and second in ``order``."""
        a, b = (self.model_a, self.answer_a), (self.model_b, self.answer_b)
        return (a, b) if order == "ab" else (b, a)


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
    order_verdict: str | None = None  # this order's own reading, before orders are combined


def _errors(*labelled: tuple[str, str | None]) -> str | None:
    return "; ".join(f"{label}: {e}" for label, e in labelled if e) or None


class JudgeProtocol:
    """One judge protocol: template, requests, parsing, verdicts and the capability it needs.

    Subclasses set ``name``, ``template`` (a file in ``stages/arena/prompts``), ``needs`` and
    ``shows_pair`` (both answers per request, one request per order; else one answer per
    request: see :class:`SequentialScoring`), and implement ``parse`` and ``judge``.
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
        """The first round of conversations, keyed ``battle.key + (order,)`` (pair protocols)
        or ``(instruction_id, model)`` (each answer alone, once), in battle order."""
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

    def followups(self, battles: Sequence[Battle],
                  replies: Mapping[Key, Reply]) -> dict[Key, Conversation]:
        """The second round, built on the first round's parsed ``replies`` (none by default)."""
        return {}

    def parse(self, reply: Any, cfg: JudgeSettings) -> Reply:
        """One backend reply (a ``Completion`` or a ``LogprobReading``) as a :class:`Reply`."""
        raise NotImplementedError

    def judge(self, battle: Battle, replies: Mapping[Key, Reply],
              cfg: JudgeSettings) -> dict[str, Judgement]:
        """The battle's judgement per order, from the parsed replies of both rounds."""
        raise NotImplementedError


class GenerativeProtocol(JudgeProtocol):
    """A protocol whose judge writes its verdict; ``parse_text`` reads it."""

    needs = "chat"

    # ``text -> (value, rationale, error)``: the written verdict, or ``None`` and why not
    parse_text: ClassVar[Callable[[str | None], tuple[Any, str | None, str | None]]]

    def parse(self, reply: Completion, cfg: JudgeSettings) -> Reply:
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

    def parse(self, reply: LogprobReading, cfg: JudgeSettings) -> Reply:
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
            verdict = to_model_verdict(r.value, order)
            out[order] = Judgement(verdict, r.raw, r.error, r.rationale, order_verdict=verdict)
        return out


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
        out = {}
        for order, r in (("ab", ab), ("ba", ba)):
            # prob_a: P(model_a) in this order alone (model_a is shown as B in order "ba")
            p = None if r.value is None else r.value["A" if order == "ab" else "B"]
            own = None if p is None else verdict_from_scores(p, 1.0 - p, 2 * cfg.prob_tie_margin)
            out[order] = Judgement(verdict, r.raw, error, prob_a=p, order_verdict=own)
        return out


class SequentialScoring(JudgeProtocol):
    """Pointwise scoring in a conversation: in order ``"ab"`` the judge scores model_a's answer
    alone, then, with that exchange in its context, model_b's; in ``"ba"`` the reverse.

    The first answer of each order is scored alone (StackEval's setting), so it is requested
    once per answer and judge; the second is where the order can pull the judge (anchoring on
    the first score), which is what this protocol's ``order_verdict`` readings measure. The
    combined ``verdict`` compares each answer's score summed over both orders, so the answer
    shown first and the one shown second count once each.
    """

    shows_pair = False
    next_template: ClassVar[str]

    @property
    def templates(self) -> tuple[str, ...]:
        return (*super().templates, self.next_template)

    def assistant_text(self, reply: Reply) -> str:
        """The judge's first reply as the second round shows it."""
        raise NotImplementedError

    def score_of(self, reply: Reply) -> float:
        """The number a reading contributes to the verdict (score or expected score)."""
        raise NotImplementedError

    def first_key(self, battle: Battle, order: str) -> Key:
        """The first-round request whose reply a second-round request of ``order`` shows."""
        return (battle.instruction_id, battle.shown_models(order)[0][0])

    def followup(self, battle: Battle, order: str, first: Reply) -> Conversation | None:
        """The second-round conversation of ``order`` (None: no first score to show, so this
        order stays unread)."""
        if first.value is None:
            return None
        (_, first_answer), (_, second) = battle.shown_models(order)
        conv = self.conversation(battle.instruction, (first_answer,), battle.reference)
        return [*conv, {"role": "assistant", "content": self.assistant_text(first)},
                {"role": "user", "content": fill(load_template(self.next_template),
                                                 answer=second.strip())}]

    def followups(self, battles, replies):
        out: dict[Key, Conversation] = {}
        for b in battles:
            for order in ORDERS:
                conv = self.followup(b, order, replies[self.first_key(b, order)])
                if conv is not None:
                    out[(*b.key, order)] = conv
        return out

    def readings(self, battle: Battle, replies: Mapping[Key, Reply], order: str
                 ) -> tuple[Reply | None, Reply | None, str | None]:
        """This order's readings of model_a's and model_b's answers (``None``: not read) and
        its error, if any."""
        (first_model, _), (second_model, _) = battle.shown_models(order)
        first = replies[(battle.instruction_id, first_model)]
        second = replies.get((*battle.key, order))
        second_error = ("not read: the first answer has no score" if second is None
                        else second.error)
        by_model = {first_model: first, second_model: second}
        return (by_model[battle.model_a], by_model[battle.model_b],
                _errors((first_model, first.error), (second_model, second_error)))

    def judge(self, battle, replies, cfg):
        margin = self.tie_margin(cfg)
        per_order, errors = {}, []
        for order in ORDERS:
            ra, rb, error = self.readings(battle, replies, order)
            sa, sb = (None if r is None or r.value is None else self.score_of(r) for r in (ra, rb))
            if sa is None or sb is None:
                errors.append(f"order {order}: {error}")
            per_order[order] = (ra, rb, sa, sb)
        verdict = None
        if not errors:  # summed over orders: a tie margin on the mean is twice that on the sum
            verdict = verdict_from_scores(sum(p[2] for p in per_order.values()),
                                          sum(p[3] for p in per_order.values()), 2 * margin)
        return {order: self.judgement(battle, ra, rb, sa, sb, verdict,
                                      verdict_from_scores(sa, sb, margin), "; ".join(errors) or None)
                for order, (ra, rb, sa, sb) in per_order.items()}

    def tie_margin(self, cfg: JudgeSettings) -> float:
        return 0.0

    def judgement(self, battle: Battle, ra: Reply | None, rb: Reply | None, sa: float | None,
                  sb: float | None, verdict: str | None, own: str | None,
                  error: str | None) -> Judgement:
        """One order's row fields: its readings ``ra``/``rb`` and scores ``sa``/``sb``, the
        combined ``verdict`` and this order's own verdict ``own``."""
        raise NotImplementedError


def _raw(model: str, r: Reply | None) -> str:
    return f"[{model}] " + ("(not read)" if r is None else r.raw)


class Pointwise(SequentialScoring, GenerativeProtocol):
    """Each answer scored with a written ``[[N]]`` 0-3 after its reasoning (StackEval)."""

    name, template, next_template = "pointwise", "judge_pointwise.txt", "judge_pointwise_next.txt"
    parse_text = staticmethod(parse_score)

    def assistant_text(self, reply):
        return reply.raw

    def score_of(self, reply):
        return float(reply.value)

    def judgement(self, battle, ra, rb, sa, sb, verdict, own, error):
        a, b = battle.model_a, battle.model_b
        return Judgement(
            verdict, raw=f"{_raw(a, ra)}\n\n{_raw(b, rb)}", parse_error=error,
            rationale=f"[{a}] {(ra.rationale if ra else None) or ''}\n"
                      f"[{b}] {(rb.rationale if rb else None) or ''}",
            score_a=None if sa is None else int(sa), score_b=None if sb is None else int(sb),
            order_verdict=own)


class PointwiseLogprob(SequentialScoring, LogprobProtocol):
    """Each answer scored by the expected 0-3 digit under the judge's probabilities."""

    name, template = "pointwise_logprob", "judge_pointwise_logprob.txt"
    next_template = "judge_pointwise_logprob_next.txt"
    spellings, retry_prefill = DIGIT_SPELLINGS, "Score: "

    def assistant_text(self, reply):
        return max(reply.value, key=reply.value.get)  # the digit the judge would most say

    def score_of(self, reply):
        return expected_score(reply.value)

    def tie_margin(self, cfg):
        return cfg.score_tie_margin

    def judgement(self, battle, ra, rb, sa, sb, verdict, own, error):
        a, b = battle.model_a, battle.model_b

        def top(r):
            return int(max(r.value, key=r.value.get)) if r is not None and r.value else None

        return Judgement(verdict, raw=f"{_raw(a, ra)}\n{_raw(b, rb)}", parse_error=error,
                         score_a=top(ra), score_b=top(rb), expected_score_a=sa,
                         expected_score_b=sb, order_verdict=own)


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
