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
mean is below ``min_difficulty`` as ``below_min_difficulty``. The prompt lives in
``pipeline/prompts/difficulty_*.txt``. Two protocols:

- ``logprob`` (default, embedded llama.cpp judges): the judge is asked for one digit 1-9 and the
  vote is the expected digit under its next-token probabilities. It costs one prompt evaluation
  and no generated tokens, and the rubric comes before the request so that llama.cpp reuses the
  evaluated rubric across requests. A vote whose digits hold less than ``min_choice_mass`` of the
  probability is a parse error. In the smoke run the 0.5B judge missed the generative format on
  4 of 11 requests; this reading cannot miss a format.
- ``generative``: the judge writes a justification and ``[[N]]`` (1-10, the strict bracketed
  format of MT-Bench-style judges); anything else is a parse error, never a number. For judges
  behind servers that expose no next-token probabilities.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Literal

import pyarrow as pa
from pydantic import Field

from pipeline.stage import StageConfig, StageResult, StageSpec

PROMPTS = Path(__file__).resolve().parent.parent / "pipeline" / "prompts"
SCORE_MIN, SCORE_MAX = 1, 10
_BRACKETED = re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
_INTEGER = re.compile(r"[+-]?\d+")

LOGPROB_MAX = 9  # one digit: "10" would be two tokens, and P("1") would mean both 1 and 10
DIGIT_SPELLINGS = {str(k): (str(k), f" {k}") for k in range(SCORE_MIN, LOGPROB_MAX + 1)}
YES_NO_SPELLINGS = {"yes": ("Yes", " Yes", "yes"), "no": ("No", " No", "no")}

# score is a float: the logprob protocol's vote is an expected digit, the generative one an integer.
VOTE_TYPE = pa.struct([("judge", pa.string()), ("score", pa.float64()), ("raw", pa.string()),
                       ("parse_error", pa.string())])


class DifficultyConfig(StageConfig):
    """Judges, sampling and the filter of the difficulty stage."""

    judges: list[str] | None = Field(default=None,
                                     description="Judge model ids; default: the run's judges.")
    protocol: Literal["logprob", "generative"] = Field(
        default="logprob", description="logprob: expected 1-9 digit from next-token "
        "probabilities (llama.cpp judges); generative: written [[N]] rating 1-10.")
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


@cache
def load_prompt(name: str) -> str:
    """A prompt template from ``pipeline/prompts`` (``difficulty_system`` / ``difficulty_user``)."""
    return (PROMPTS / f"{name}.txt").read_text(encoding="utf-8").strip()


def build_conversation(instruction: str, protocol: str = "generative") -> list[dict[str, str]]:
    """The judge conversation for one request under ``protocol`` (or ``"task"``: the yes/no
    concrete-task question)."""
    name = {"logprob": "difficulty_logprob_user", "task": "difficulty_task_user"}.get(
        protocol, "difficulty_user")
    # str.replace, not str.format: requests contain braces (code) that format would parse.
    user = load_prompt(name).replace("{instruction}", instruction)
    return [{"role": "system", "content": load_prompt("difficulty_system")},
            {"role": "user", "content": user}]


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


def logprob_votes(backend, judge: str, instructions: list[str],
                  cfg: DifficultyConfig) -> list[dict]:
    """One vote per instruction: the expected 1-9 digit under the judge's next-token probabilities."""
    from stages.judge_logits import next_token_logprobs
    from stages.judge_protocols import choice_probabilities, describe_probabilities

    convs = [build_conversation(t, "logprob") for t in instructions]
    votes: list[dict] = []
    for logprobs, error in next_token_logprobs(backend, convs, DIGIT_SPELLINGS) if convs else []:
        score, raw = None, ""
        if error is not None:
            error = f"backend error: {error}"
        else:
            probs, mass = choice_probabilities(logprobs, DIGIT_SPELLINGS)
            raw = describe_probabilities(probs, mass)
            if not probs or mass < cfg.min_choice_mass:
                error = (f"digit tokens hold {mass:.4f} of the probability, "
                         f"below min_choice_mass {cfg.min_choice_mass}")
            else:
                score = sum(int(d) * p for d, p in probs.items())
        votes.append({"judge": judge, "score": score, "raw": raw, "parse_error": error})
    return votes


def task_probabilities(backend, instructions: list[str],
                       cfg: DifficultyConfig) -> list[float | None]:
    """P(Yes) per instruction to the concrete-task question (``None``: no usable reading)."""
    from stages.judge_logits import next_token_logprobs
    from stages.judge_protocols import choice_probabilities

    convs = [build_conversation(t, "task") for t in instructions]
    out: list[float | None] = []
    for logprobs, error in next_token_logprobs(backend, convs, YES_NO_SPELLINGS) if convs else []:
        probs, mass = choice_probabilities(logprobs or {}, YES_NO_SPELLINGS)
        out.append(probs["yes"] if error is None and probs and mass >= cfg.min_choice_mass
                   else None)
    return out


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


def judge_votes(backend, judge: str, instructions: list[str], cfg: DifficultyConfig,
                seed: int) -> list[dict]:
    """One vote (judge, score, raw, parse_error) per instruction from one judge backend."""
    from pipeline.backends.base import SamplingParams

    if cfg.protocol == "logprob":
        return logprob_votes(backend, judge, instructions, cfg)
    params = SamplingParams(n=1, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                            seed=seed)
    votes: list[dict] = []
    for start in range(0, len(instructions), cfg.batch_size):
        batch = instructions[start:start + cfg.batch_size]
        replies = backend.chat([build_conversation(t, "generative") for t in batch], params)
        for reply in replies:
            completion = reply[0]
            if completion.finish_reason == "error":
                score, error = None, f"backend error: {completion.error}"
            else:
                score, error = parse_score(completion.text)
            votes.append({"judge": judge, "score": score, "raw": completion.text,
                          "parse_error": error})
    return votes


def run(table: pa.Table, cfg: DifficultyConfig, ctx) -> StageResult:
    """Collect every judge's vote per request, add the mean, drop unrated and easy rows."""
    judges = list(cfg.judges) if cfg.judges is not None else list(ctx.config.judge_ids)
    if not judges:
        raise ValueError("difficulty.judges: no judge configured")
    instructions = table.column("instruction").to_pylist()
    per_judge = [judge_votes(ctx.backend(j), j, instructions, cfg, ctx.seed) for j in judges]
    votes = [list(row) for row in zip(*per_judge)] if instructions else []
    summaries = [summarize_votes(v) for v in votes]
    ask_task = cfg.protocol == "logprob" and cfg.min_task_prob is not None
    task = (mean_task_probability([task_probabilities(ctx.backend(j), instructions, cfg)
                                   for j in judges]) if ask_task else [None] * len(instructions))
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
