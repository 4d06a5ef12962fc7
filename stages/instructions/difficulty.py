"""Stage ``difficulty``: every judge rates each request 1-10 (clarity, specificity, difficulty).

Input columns: ``instruction_id, instruction``. Output adds:

- ``difficulty_votes``: list<struct<judge, score (null on a parse error), raw, parse_error>>,
  one vote per judge, with the judge's raw text (or digit probabilities) always kept;
- ``difficulty``: mean of the valid votes (null when there is none);
- ``difficulty_n_valid``: number of valid votes.

With the logprob protocol each judge also answers "does the request state a concrete programming
task?" and ``task_prob`` is the mean P(Yes) (null when no judge gave a reading); rows below
``min_task_prob`` are dropped as ``not_a_task`` (``no_task_reading`` when no judge gave one). Measured on 36 requests mined by the 0.5B model:
the 1-9 vote of the 0.5B judge is nearly flat (4.7-5.5), while its P(Yes) ranks meta requests
("What is the name of your Python function?", 0.44-0.55) below concrete tasks (0.56-0.70).

Rows without a valid vote are dropped as ``no_valid_vote``, with fewer than ``min_valid_votes``
as ``too_few_valid_votes``; rows whose
mean is below ``min_difficulty`` as ``below_min_difficulty``. The prompts live in
``stages/instructions/prompts/difficulty_*.txt``. Two protocols, one object each in ``PROTOCOLS`` (its
templates, its request, its pure parsing and the backend capability it needs, which
``arenaforge config validate`` checks against each judge):

- ``logprob`` (default; judges whose backend reads next-token logprobs: llama.cpp, servers,
  vLLM): the judge is asked for one digit 1-9 and the
  vote is the expected digit under its next-token probabilities. It costs one prompt evaluation
  and no generated tokens, and the rubric comes before the request so that llama.cpp reuses the
  evaluated rubric across requests. A vote whose digits hold less than ``min_choice_mass`` of the
  probability is a parse error. In the smoke run the 0.5B judge missed the generative format on
  4 of 11 requests; this reading cannot miss a format.
- ``generative``: the judge writes a justification and ``[[N]]`` (1-10, the strict bracketed
  format of MT-Bench-style judges); anything else is a parse error, never a number. For judges
  whose backend only chats (transformers).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar, Literal

import pyarrow as pa
from arenaforge.pipeline.backends.capabilities import Capability, JudgedSection
from arenaforge.pipeline.prompts import fill, load_template
from arenaforge.pipeline.stage import StageConfig, StageResult, StageSpec, per_model
from arenaforge.stages.arena import judge_logits
from arenaforge.stages.arena.judge_logits import BACKEND_ERROR, choice_reading, expected_score
from pydantic import Field

SCORE_MIN, SCORE_MAX = 1, 10
_BRACKETED = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
_INTEGER = re.compile(r"[+-]?\d+")

LOGPROB_MAX = 9  # one digit: "10" would be two tokens, and P("1") would mean both 1 and 10
DIGIT_SPELLINGS = {str(k): (str(k), f" {k}") for k in range(SCORE_MIN, LOGPROB_MAX + 1)}
YES_NO_SPELLINGS = {"yes": ("Yes", " Yes", "yes"), "no": ("No", " No", "no")}
SYSTEM_TEMPLATE = "difficulty_system.txt"

# score is a float: the logprob protocol's vote is an expected digit, the generative one an integer.
VOTE_TYPE = pa.struct([("judge", pa.string()), ("score", pa.float64()), ("raw", pa.string()),
                       ("parse_error", pa.string())])
Conversation = list[dict[str, str]]


def _conversation(template: str, instruction: str) -> Conversation:
    # fill, not str.format: requests contain braces (code) that format would parse.
    return [{"role": "system", "content": load_template(SYSTEM_TEMPLATE)},
            {"role": "user", "content": fill(load_template(template), instruction=instruction)}]


class DifficultyProtocol:
    """One difficulty protocol: its templates, the request of an instruction, how a reply
    becomes a vote (pure), and the backend capability it needs."""

    name: ClassVar[str]
    template: ClassVar[str]
    needs: ClassVar[Capability]
    asks_task: ClassVar[bool] = False  # also asks the concrete-task question (``min_task_prob``)

    @property
    def templates(self) -> tuple[str, ...]:
        """Every template file this protocol fills."""
        return (SYSTEM_TEMPLATE, self.template)

    def conversation(self, instruction: str) -> Conversation:
        """The judge conversation rating one request."""
        return _conversation(self.template, instruction)

    def parse(self, reply, cfg: DifficultyConfig) -> tuple[float | None, str, str | None]:
        """``(score, raw, None)`` or ``(None, raw, error)`` from one backend reply."""
        raise NotImplementedError


class GenerativeDifficulty(DifficultyProtocol):
    """The judge writes a justification and ``[[N]]``, N in 1-10."""

    name, template, needs = "generative", "difficulty_user.txt", "chat"

    def parse(self, reply, cfg):
        if reply.finish_reason == "error":
            return None, reply.text, BACKEND_ERROR + str(reply.error)
        score, error = parse_score(reply.text)
        return score, reply.text, error


class LogprobDifficulty(DifficultyProtocol):
    """The expected 1-9 digit under the judge's next-token probabilities; also P(Yes) to the
    concrete-task question."""

    name, template, needs = "logprob", "difficulty_logprob_user.txt", "next_token_logprobs"
    task_template: ClassVar[str] = "difficulty_task_user.txt"
    spellings: ClassVar[Mapping[str, tuple[str, ...]]] = DIGIT_SPELLINGS
    task_spellings: ClassVar[Mapping[str, tuple[str, ...]]] = YES_NO_SPELLINGS
    asks_task = True

    @property
    def templates(self) -> tuple[str, ...]:
        return (*super().templates, self.task_template)

    def task_conversation(self, instruction: str) -> Conversation:
        """The yes/no question: does the request state a concrete programming task?"""
        return _conversation(self.task_template, instruction)

    def parse(self, reply, cfg):
        probs, raw, error = choice_reading(reply, self.spellings, cfg.min_choice_mass,
                                           tokens="digit tokens")
        return (None if probs is None else expected_score(probs)), raw, error

    def parse_task(self, reply, cfg: DifficultyConfig) -> float | None:
        """P(Yes), or ``None`` when the reading failed or holds too little yes/no mass."""
        probs, _, _ = choice_reading(reply, self.task_spellings, cfg.min_choice_mass)
        return None if probs is None else probs["yes"]


PROTOCOLS: dict[str, DifficultyProtocol] = {
    p.name: p for p in (LogprobDifficulty(), GenerativeDifficulty())}
ProtocolName = Literal[tuple(PROTOCOLS)]  # type: ignore[valid-type]


class DifficultyConfig(JudgedSection, StageConfig):
    """Judges, sampling and the filter of the difficulty stage."""

    capability_stage: ClassVar[str] = "difficulty"
    protocol_registry: ClassVar[dict] = PROTOCOLS

    judges: list[str] | None = Field(default=None,
                                     description="Judge model ids; default: the run's judges.")
    protocol: ProtocolName = Field(
        default=LogprobDifficulty.name, description="logprob: expected 1-9 digit from "
        "next-token probabilities; generative: written [[N]] rating 1-10.")
    min_choice_mass: float = Field(
        default=0.5, ge=0.0, lt=1.0, description="logprob: a vote whose digit tokens hold less "
        "probability than this is a parse error.")
    min_difficulty: float = Field(
        default=3.0, ge=SCORE_MIN, le=SCORE_MAX,
        description="Drop rows whose mean vote is below this (1-2: unclear or trivial).")
    min_valid_votes: int = Field(default=1, ge=1,
                                 description="Drop rows with fewer valid votes than this.")
    min_task_prob: float | None = Field(
        default=0.55, ge=0.0, le=1.0, description="logprob: drop requests whose mean P(Yes) to "
        "'is this a concrete programming task?' is below this; null: do not ask.")
    max_tokens: int = Field(default=160, ge=8, description="generative: judge reply budget.")
    temperature: float = Field(default=0.0, ge=0)
    batch_size: int = Field(default=16, ge=1, description="Conversations per backend call.")



def build_conversation(instruction: str, protocol: str = "generative") -> Conversation:
    """The judge conversation for one request under ``protocol``."""
    return PROTOCOLS[protocol].conversation(instruction)


def parse_score(text: str | None) -> tuple[int | None, str | None]:
    """Parse the single ``[[N]]`` rating of a judge reply.

    Returns:
        ``(score, None)`` for exactly one bracketed integer in 1-10, else ``(None, error)``.

    >>> parse_score("Clear and hard. Rating: [[8]]")
    (8, None)
    >>> parse_score("Rating: [[8]] ... Rating: [[9]]")
    (None, 'more than one score: [[8]], [[9]]')
    >>> parse_score("Rating: 8")
    (None, 'no score in the [[N]] format')
    """
    if text is None or not text.strip():
        return None, "empty output"
    found = _BRACKETED.findall(text)
    if not found:
        return None, "no score in the [[N]] format"
    if len(found) > 1:
        return None, "more than one score: " + ", ".join(f"[[{f}]]" for f in found)
    value = found[0].strip()
    if not _INTEGER.fullmatch(value):
        return None, f"score is not an integer: [[{value}]]"
    score = int(value)
    if not SCORE_MIN <= score <= SCORE_MAX:
        return None, f"score out of range {SCORE_MIN}-{SCORE_MAX}: {score}"
    return score, None


def summarize_votes(votes: list[dict]) -> tuple[float | None, int]:
    """Mean of the valid scores (``None`` when none) and how many there are."""
    scores = [v["score"] for v in votes if v["score"] is not None]
    return (sum(scores) / len(scores) if scores else None), len(scores)


def read_logprobs(backend, protocol: DifficultyProtocol, instructions: list[str],
                  cfg: DifficultyConfig, seed: int) -> list:
    """Next-token readings of the protocol's requests, one backend call."""
    convs = [protocol.conversation(t) for t in instructions]
    return judge_logits.next_token_logprobs(backend, convs, protocol.spellings) if convs else []


def read_chat(backend, protocol: DifficultyProtocol, instructions: list[str],
              cfg: DifficultyConfig, seed: int) -> list:
    """Generated replies of the protocol's requests, ``batch_size`` per backend call."""
    from arenaforge.pipeline.backends.base import SamplingParams

    params = SamplingParams(n=1, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                            seed=seed)
    replies = []
    for start in range(0, len(instructions), cfg.batch_size):
        batch = instructions[start:start + cfg.batch_size]
        replies += [r[0] for r in backend.chat([protocol.conversation(t) for t in batch], params)]
    return replies


# How a protocol's requests reach the backend, by the capability it needs.
READERS = {"chat": read_chat, "next_token_logprobs": read_logprobs}


def judge_votes(backend, judge: str, instructions: list[str], cfg: DifficultyConfig,
                seed: int) -> list[dict]:
    """One vote (judge, score, raw, parse_error) per instruction from one judge backend."""
    protocol = PROTOCOLS[cfg.protocol]
    votes = []
    for reply in READERS[protocol.needs](backend, protocol, instructions, cfg, seed):
        score, raw, error = protocol.parse(reply, cfg)
        votes.append({"judge": judge, "score": score, "raw": raw, "parse_error": error})
    return votes


def task_probabilities(backend, protocol: LogprobDifficulty, instructions: list[str],
                       cfg: DifficultyConfig) -> list[float | None]:
    """P(Yes) per instruction to the concrete-task question (``None``: no usable reading)."""
    convs = [protocol.task_conversation(t) for t in instructions]
    readings = (judge_logits.next_token_logprobs(backend, convs, protocol.task_spellings)
                if convs else [])
    return [protocol.parse_task(r, cfg) for r in readings]


def mean_task_probability(per_judge: list[list[float | None]]) -> list[float | None]:
    """Mean over judges of the readings that exist, per instruction.

    >>> mean_task_probability([[0.5, None, None], [0.7, 0.4, None]])
    [0.6, 0.4, None]
    """
    out: list[float | None] = []
    for readings in zip(*per_judge):
        valid = [p for p in readings if p is not None]
        out.append(round(sum(valid) / len(valid), 12) if valid else None)
    return out


def run(table: pa.Table, cfg: DifficultyConfig, ctx) -> StageResult:
    """Collect every judge's vote per request, add the mean, drop unrated and easy rows."""
    judges = cfg.judge_ids()
    if not judges:
        raise ValueError("difficulty.judges: no judge configured")
    instructions = table.column("instruction").to_pylist()
    votes_of = per_model(ctx, judges,
                         lambda j: judge_votes(ctx.backend(j), j, instructions, cfg, ctx.seed))
    per_judge = [votes_of[j] for j in judges]
    votes = [list(row) for row in zip(*per_judge)] if instructions else []
    summaries = [summarize_votes(v) for v in votes]
    protocol = PROTOCOLS[cfg.protocol]
    ask_task = protocol.asks_task and cfg.min_task_prob is not None
    if ask_task:
        task_of = per_model(ctx, judges, lambda j: task_probabilities(ctx.backend(j), protocol,
                                                                      instructions, cfg))
        task = mean_task_probability([task_of[j] for j in judges])
    else:
        task = [None] * len(instructions)
    ctx.advance(len(instructions))

    out = table.append_column("difficulty_votes", pa.array(votes, pa.list_(VOTE_TYPE)))
    out = out.append_column("difficulty", pa.array([m for m, _ in summaries], pa.float64()))
    out = out.append_column("difficulty_n_valid", pa.array([n for _, n in summaries], pa.int64()))
    out = out.append_column("task_prob", pa.array(task, pa.float64()))

    reasons: list[str | None] = []
    for (mean, n_valid), p_task in zip(summaries, task, strict=True):
        if ask_task and p_task is None:
            reasons.append("no_task_reading")
        elif ask_task and p_task < cfg.min_task_prob:
            reasons.append("not_a_task")
        elif n_valid == 0:
            reasons.append("no_valid_vote")
        elif n_valid < cfg.min_valid_votes:
            reasons.append("too_few_valid_votes")
        elif mean < cfg.min_difficulty:
            reasons.append("below_min_difficulty")
        else:
            reasons.append(None)
    keep = pa.array([r is None for r in reasons], pa.bool_())
    dropped = out.filter(pa.array([r is not None for r in reasons], pa.bool_()))
    dropped = dropped.append_column(
        "reason", pa.array([r for r in reasons if r is not None], pa.string()))
    stats = {f"votes_valid.{j}": float(sum(v["score"] is not None for v in pj))
             for j, pj in zip(judges, per_judge)}
    return StageResult(table=out.filter(keep), dropped=dropped, stats=stats)


STAGE = StageSpec(name="difficulty", config=DifficultyConfig, run=run, source="clean",
                  uses_models=True, inputs=("instruction_id", "instruction"),
                  prompts=("difficulty_*.txt",),
                  outputs=("difficulty_votes", "difficulty", "difficulty_n_valid", "task_prob"))
