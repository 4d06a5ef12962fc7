"""Stage ``judge``: judges compare the experts' answers, pair by pair, in both orders.

Input (source ``answer``): one row per ``(instruction_id, model)`` with ``instruction`` and
``response`` (and ``language``, ``task_kind``: a task that is not a Python function is shown
to the judges with a note of what the answers had to be, ``judge_task_<kind>.txt``). For each instruction and each pair of models that answered it, every configured
judge that is not one of the two contestants (unless ``allow_self_judge``), at most
``max_judges`` of them in config order, judges the pair in both orders.

Output: one row per ``(instruction_id, model_a, model_b, judge, order)`` with ``model_a <
model_b``; ``order`` is ``"ab"`` when model_a's answer was shown first, ``"ba"`` reversed.

- ``verdict``: ``"a"``, ``"b"``, ``"tie"`` or null, always about model_a / model_b (mapped back
  from the position shown); null comes with ``parse_error`` and the judge's ``raw`` text.
- ``score_a``, ``score_b``: 0-3 (pointwise protocols), else null.
- ``rationale``: the judge's reasoning before its verdict (generative protocols).
- ``order_verdict``: this order's own reading ("a" / "b" / "tie" / null), before the two
  orders are combined; ``position_first_chosen``: did it pick the answer shown first (null for
  tie/null). The audit measures position bias and order consistency from these.
- ``protocol``; this order's reading: ``prob_a`` (P(model_a better), ``pairwise_logprob``),
  ``score_a``/``score_b`` and ``expected_score_a``/``_b`` (the pointwise protocols).

How each protocol fills a row (see ``arenaforge.stages.arena.protocols``): ``pairwise`` gives each order
its own verdict (``verdict == order_verdict``), and ``rate`` turns a verdict that flips with
the order into a tie. The other protocols combine both orders into ``verdict`` (both rows carry
it) so that position bias cancels: ``pairwise_logprob`` averages the two orders'
probabilities; the pointwise protocols score the two answers one after the other in one
conversation, model_a's first in order "ab" and model_b's first in "ba", and compare each
answer's score summed over both orders.
"""

from __future__ import annotations

import dataclasses
import logging
from itertools import combinations
from typing import ClassVar, Literal

import pyarrow as pa
from arenaforge.pipeline.backends.capabilities import JudgedSection
from arenaforge.pipeline.stage import StageConfig, StageResult, StageSpec, per_model
from arenaforge.stages.arena import judge_logits
from arenaforge.stages.arena import protocols as jp
from arenaforge.stages.arena.judge_logits import BACKEND_ERROR
from arenaforge.stages.arena.protocols import Battle
from arenaforge.stages.common.task_kinds import row_language, row_task_kind, with_task_note
from pydantic import Field

log = logging.getLogger(__name__)

# Chosen by measurement (`arenaforge judge-bench`, artifacts/judge_bench/card.md, HumanEval pairs
# that execution separates): judged by Qwen2.5-Coder-1.5B, pointwise_logprob named the passing
# answer in 137 of 150 pairs (exact 95% CI 86-95%, kappa 0.69; 36 of 47 same-model pairs) with
# no first-position preference in its single-order readings (0.52); pairwise_logprob 122 of
# 150 (74-87%), every single-order reading choosing the answer shown first. The 0.5B and SmolLM2
# judges were at chance under pointwise_logprob (kappa -0.04 and -0.02).
DEFAULT_PROTOCOL = jp.PointwiseLogprob.name
OUTPUT_SCHEMA = pa.schema([
    ("instruction_id", pa.string()), ("model_a", pa.string()), ("model_b", pa.string()),
    ("judge", pa.string()), ("order", pa.string()), ("verdict", pa.string()),
    ("score_a", pa.int64()), ("score_b", pa.int64()), ("rationale", pa.string()),
    ("raw", pa.string()), ("parse_error", pa.string()), ("protocol", pa.string()),
    ("position_first_chosen", pa.bool_()), ("prob_a", pa.float64()),
    ("expected_score_a", pa.float64()), ("expected_score_b", pa.float64()),
    ("order_verdict", pa.string()),
])


class JudgeConfig(JudgedSection, StageConfig):
    """Which judges, which protocol, and their budget."""

    capability_stage: ClassVar[str] = "judge"
    protocol_registry: ClassVar[dict] = jp.PROTOCOLS

    protocol: jp.ProtocolName = Field(default=DEFAULT_PROTOCOL,
                                      description=" | ".join(jp.PROTOCOLS)
                                      + " (see stages/arena/protocols.py)")
    judges: list[str] | None = Field(default=None,
                                     description="Judge model ids; default: the run's judges.")
    max_judges: int | None = Field(default=None, ge=1,
                                   description="At most this many judges per pair (config order).")
    allow_self_judge: bool = Field(default=False,
                                   description="Let a contestant judge its own battle.")
    pairs: Literal["all", "with_miner"] = Field(
        default="all", description="all pairs of answers, or only pairs that include the "
                                   "instruction's miner (WarriorCoder; needs a 'miner' column)")
    max_tokens: int = Field(default=384, ge=16, description="Judge reply budget (generative).")
    temperature: float = Field(default=0.0, ge=0.0)
    reference_column: str | None = Field(
        default=None, description="Input column holding a reference answer shown to the judge.")
    prob_tie_margin: float = Field(
        default=0.0, ge=0.0, lt=0.5, description="pairwise_logprob: tie when |P(a) - 0.5| <= this.")
    score_tie_margin: float = Field(
        default=0.0, ge=0.0, le=3.0, description="pointwise_logprob: tie when the expected "
                                                 "scores differ by <= this.")
    min_choice_mass: float = Field(
        default=0.5, ge=0.0, lt=1.0, description="logprob protocols: a reading whose choice "
        "tokens hold less probability than this is a parse error (the judge meant to say "
        "something else).")
    retry_prefill: bool = Field(
        default=True, description="logprob protocols: re-read a reading under min_choice_mass "
        "with the reply started for the judge ('Score: ' / 'Answer: '); SmolLM2-135M's digit "
        "mass went from 0.03-0.15 to 0.55-0.70 on 12 answers of a default run.")


def enumerate_battles(table: pa.Table, cfg: JudgeConfig) -> list[Battle]:
    """All battles of the answer rows, instruction-major in input order, pairs sorted.

    Raises:
        ValueError: duplicate (instruction_id, model) rows, or a missing column the config needs.
    """
    for col, why in ((cfg.reference_column, "judge.reference_column"),
                     ("miner" if cfg.pairs == "with_miner" else None, "judge.pairs=with_miner")):
        if col is not None and col not in table.column_names:
            raise ValueError(f"{why}: input has no column {col!r}")
    by_instruction: dict[str, dict[str, dict]] = {}
    for i, row in enumerate(table.to_pylist()):
        answers = by_instruction.setdefault(row["instruction_id"], {})
        if row["model"] in answers:
            raise ValueError(f"judge input row {i}: duplicate answer of model {row['model']!r} "
                             f"for instruction {row['instruction_id']}")
        answers[row["model"]] = row
    battles = []
    for iid, answers in by_instruction.items():
        for a, b in combinations(sorted(answers), 2):
            first = answers[a]
            if cfg.pairs == "with_miner" and first.get("miner") not in (a, b):
                continue
            ref = first.get(cfg.reference_column) if cfg.reference_column else None
            # a judge reads what the answers had to be (a Python function: the request alone)
            question = with_task_note(first["instruction"], row_language(first.get("language")),
                                      row_task_kind(first.get("task_kind")), "judge")
            battles.append(Battle(iid, question, a, b, answers[a]["response"],
                                  answers[b]["response"], ref))
    return battles


def eligible_judges(battle: Battle, judges: list[str], allow_self: bool,
                    max_judges: int | None) -> list[str]:
    """The judges of one battle: config order, contestants excluded unless allowed."""
    chosen = [j for j in judges if allow_self or j not in (battle.model_a, battle.model_b)]
    return chosen[:max_judges] if max_judges is not None else chosen


def _row(b: Battle, judge: str, order: str, protocol: str, j: jp.Judgement) -> dict:
    return {"instruction_id": b.instruction_id, "model_a": b.model_a, "model_b": b.model_b,
            "judge": judge, "order": order, "protocol": protocol,
            "position_first_chosen": jp.first_chosen(j.order_verdict, order),
            **dataclasses.asdict(j)}


def read_chat(backend, protocol: jp.JudgeProtocol, convs: list, cfg: JudgeConfig,
              seed: int) -> list[jp.Reply]:
    """Generated replies, one batch, each parsed by the protocol."""
    from arenaforge.pipeline.backends.base import SamplingParams

    # a pair's two orders share the instruction and the system prompt: an embedded engine
    # reuses that prefix (as a plain llama-cpp-python loop does between consecutive calls)
    params = SamplingParams(n=1, temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=seed,
                            reuse_prefix=True)
    replies = backend.chat(convs, params) if convs else []
    return [protocol.parse(reply[0], cfg) for reply in replies]


def reads_in_parallel(backend) -> bool:
    """Whether ``backend`` serves a batch at once and caches prompt prefixes itself (an
    OpenAI-compatible server, vLLM: ``prefers_batches``), so its readings go out as whole
    batches. An embedded llama.cpp context reuses the prompt it evaluated last, and restores a
    few earlier ones within its ``prefix_cache_bytes`` (a copy of their KV): reading each
    answer's round 2 right after its round 1 evaluates the fewest tokens there without a copy
    (``scripts/bench_peer.py`` counts them), and the saved states cover what comes between
    (another shard's readings on the same engine)."""
    return bool(getattr(backend, "prefers_batches", False))


def _with_retry(first: jp.Reply, again: jp.Reply, prefill: str) -> jp.Reply:
    return jp.Reply(again.value, f"{first.raw}; with prefill {prefill!r}: {again.raw}",
                    None if again.error is None
                    else f"{first.error}; with prefill {prefill!r}: {again.error}")


def read_logprobs(backend, protocol: jp.JudgeProtocol, convs: list, cfg: JudgeConfig,
                  seed: int) -> list[jp.Reply]:
    """Next-token readings, each parsed by the protocol.

    With ``retry_prefill``, a reading under ``min_choice_mass`` is read once more with the
    reply started (``raw`` then says so): small judges often open with "The score is" rather
    than the digit. On a llama.cpp context the retry follows its first reading at once, so the
    context still holds the whole prompt and evaluates only the few prefill tokens; a server
    (:func:`reads_in_parallel`) gets all first readings as one batch, then all retries.
    """
    prefill = protocol.retry_prefill if cfg.retry_prefill else None

    def needs_retry(reply: jp.Reply) -> bool:
        return bool(prefill) and reply.value is None and not reply.error.startswith(BACKEND_ERROR)

    def read(batch: list, start: str = "") -> list[jp.Reply]:
        return [protocol.parse(r, cfg) for r in
                judge_logits.next_token_logprobs(backend, batch, protocol.spellings, start)]

    if reads_in_parallel(backend):
        out = read(convs)
        retry = [i for i, reply in enumerate(out) if needs_retry(reply)]
        if retry:
            for i, again in zip(retry, read([convs[i] for i in retry], prefill), strict=True):
                out[i] = _with_retry(out[i], again, prefill)
        return out
    out = []
    for conv in convs:
        first = read([conv])[0]
        out.append(_with_retry(first, read([conv], prefill)[0], prefill)
                   if needs_retry(first) else first)
    return out


# How a protocol's requests reach the backend, by the capability it needs.
READERS = {"chat": read_chat, "next_token_logprobs": read_logprobs}


def _read_sequential(protocol: jp.SequentialScoring, read, backend, battles: list[Battle],
                     requests: dict, cfg: JudgeConfig, seed: int) -> dict:
    """Both rounds of a sequential pointwise protocol. On a llama.cpp context each answer's
    second-round requests follow its own first-round reading at once: they start with that
    reading's prompt, so llama.cpp evaluates only the new turn (the evaluated prefix is reused).
    A server (:func:`reads_in_parallel`) gets each round as one batch: one request at a time
    left a server idle between round trips (the judge stage of ``scripts/bench_scale.py``)."""
    after: dict[tuple, list[tuple[Battle, str]]] = {}
    for b in battles:
        for order in jp.ORDERS:
            after.setdefault(protocol.first_key(b, order), []).append((b, order))

    def second_round(keys) -> dict:
        return {(*b.key, order): c for key in keys for b, order in after.get(key, ())
                if (c := protocol.followup(b, order, parsed[key])) is not None}

    if reads_in_parallel(backend):  # a server: each round as one batch
        parsed = dict(zip(requests, read(backend, protocol, list(requests.values()), cfg, seed),
                          strict=True))
        second = second_round(requests)
        parsed.update(zip(second, read(backend, protocol, list(second.values()), cfg, seed),
                          strict=True))
        return parsed
    parsed = {}
    for key, conv in requests.items():
        parsed[key] = read(backend, protocol, [conv], cfg, seed)[0]
        second = second_round([key])
        parsed.update(zip(second, read(backend, protocol, list(second.values()), cfg, seed),
                          strict=True))
    return parsed


def judge_with(protocol: jp.JudgeProtocol, backend, judge: str, battles: list[Battle],
               cfg: JudgeConfig, seed: int) -> list[dict]:
    """One judge's rows for ``battles`` under ``protocol``: its requests in one pass (the
    sequential pointwise protocols: see :func:`_read_sequential`)."""
    read = READERS[protocol.needs]
    requests = protocol.requests(battles)
    if isinstance(protocol, jp.SequentialScoring):
        parsed = _read_sequential(protocol, read, backend, battles, requests, cfg, seed)
    else:
        parsed = dict(zip(requests, read(backend, protocol, list(requests.values()), cfg, seed),
                          strict=True))
    return [_row(b, judge, order, protocol.name, j)
            for b in battles for order, j in protocol.judge(b, parsed, cfg).items()]


def judge_battles(battles: list[Battle], judges: list[str], cfg: JudgeConfig, backend_for,
                  seed: int, fan_out=None) -> tuple[list[dict], int]:
    """Judge rows for ``battles`` (each judge's battles in one batch, rows in battle order),
    and how many battles were left unjudged.

    Args:
        battles: from :func:`enumerate_battles`.
        judges: judge ids in config order.
        cfg: the stage config (protocol, budget, self-judging, max_judges).
        backend_for: ``model_id -> backend`` (``ctx.backend``).
        seed: the sampling seed.
        fan_out: ``(judges, judge -> rows) -> {judge: rows}`` (``model_fanout.per_model``: at
            once for served judges); None: one judge after another.

    A battle between two of the judges, with no judge left who is not in it, is not judged
    (its instruction is decided by its other battles; ``run`` reports the count as
    ``battles_unjudged``).

    Raises:
        ValueError: no battle has an eligible judge (say how to fix the config).
    """
    per_judge: dict[str, list[Battle]] = {j: [] for j in judges}
    unjudged = 0
    for b in battles:
        chosen = eligible_judges(b, judges, cfg.allow_self_judge, cfg.max_judges)
        unjudged += not chosen
        for j in chosen:
            per_judge[j].append(b)
    if battles and unjudged == len(battles):
        b = battles[0]
        raise ValueError(
            f"judge: no eligible judge for the pair ({b.model_a}, {b.model_b}): judges are "
            f"{judges} and a contestant may not judge itself; add a judge model "
            "(judges: [...]) or set judge.allow_self_judge=true")
    protocol = jp.PROTOCOLS[cfg.protocol]
    busy = [j for j in judges if per_judge[j]]

    def judge_all(j: str) -> list[dict]:
        return judge_with(protocol, backend_for(j), j, per_judge[j], cfg, seed)

    by_judge = fan_out(busy, judge_all) if fan_out else {j: judge_all(j) for j in busy}
    rows = [r for j in busy for r in by_judge[j]]
    position = {(b.instruction_id, b.model_a, b.model_b): i for i, b in enumerate(battles)}
    judge_rank = {j: i for i, j in enumerate(judges)}
    rows.sort(key=lambda r: (position[(r["instruction_id"], r["model_a"], r["model_b"])],
                             judge_rank[r["judge"]], r["order"]))
    return rows, unjudged


def run(table: pa.Table, cfg: JudgeConfig, ctx) -> StageResult:
    """Judge every battle of the shard; one row per (battle, judge, order)."""
    judges = cfg.judge_ids()
    if not judges:
        raise ValueError("judge.judges: no judge configured")
    battles = enumerate_battles(table, cfg)
    rows, unjudged = judge_battles(battles, judges, cfg, ctx.backend, ctx.seed,
                                   fan_out=lambda models, call: per_model(ctx, models, call))
    ctx.advance(table.num_rows)
    stats: dict[str, float] = {"battles": float(len(battles)),
                               "battles_unjudged": float(unjudged)}
    for r in rows:
        key = "judgements_parsed" if r["verdict"] is not None else "judgements_unparsed"
        stats[f"{key}.{r['judge']}"] = stats.get(f"{key}.{r['judge']}", 0.0) + 1
    return StageResult(table=pa.Table.from_pylist(rows, schema=OUTPUT_SCHEMA), stats=stats)


STAGE = StageSpec(name="judge", config=JudgeConfig, run=run, source="answer", uses_models=True,
                  inputs=("instruction_id", "instruction", "model", "response"),
                  prompts=("judge_*.txt",),
                  outputs=tuple(OUTPUT_SCHEMA.names))
