"""Stage ``clean``: normalise mined requests and drop what is not a usable, new request.

Input columns (from ``mine``): ``instruction_id, instruction, miner, language, task_kind,
sample_params, template, finish_reason, raw``. Output: the same columns, ``instruction``
normalised and ``instruction_id`` recomputed from it (and the row's language and kind,
``arenaforge.pipeline.textnorm.instruction_id``). Unsharded: dedup needs every row at once.
Duplicates are looked for among the tasks of one language and kind: the same request in C++
and in Java, or as a function and as a program, is two tasks.

Drop reasons, in the order they are checked: ``generation_error``, ``truncated`` (the model hit
``max_tokens``: the request is cut), ``empty``, ``non_latin_text``, ``too_short``, ``too_long``,
``code_not_request``, ``answer_not_request``, ``not_a_request``, ``prompt_echo``,
``exact_duplicate``, ``near_duplicate``. Dropped rows carry a ``detail`` (the duplicate's kept
``instruction_id`` and Jaccard estimate, the length, the echoed words, ...).

``prompt_echo``: a mined request that repeats the words of the system prompt it was mined
under (``echo_of``, filled in from ``mine``) restates the miner's instructions instead of
asking for something: "Please provide one Python function that solves a specific problem",
"Can you provide an example of a function that solves a specific problem, such as ..." under
a system prompt about "one Python function that solves a small, self-contained problem". On a
default run's 120 requests that reached ``difficulty``, labelled by hand, the 7 sharing two or
more word 3-grams with the system prompt were all non-tasks, and no task shared more than one
(``a Python function that``); the concrete-task question of ``difficulty`` had let one of
them through to the dataset. Requests read from a file were mined under no prompt and are not
checked.
"""

from __future__ import annotations

import functools
import re
import unicodedata

import pyarrow as pa
from arenaforge.pipeline.stage import StageConfig, StageResult, StageSpec
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.common.task_kinds import row_language, row_task_kind
from arenaforge.stages.instructions.dedup import NearDupParams, near_duplicates
from arenaforge.stages.instructions.sources import FILE_TEMPLATE
from pydantic import Field

MINE_COLUMNS = ("instruction_id", "instruction", "miner", "language", "task_kind",
                "sample_params", "template", "finish_reason", "raw")


class NearDupConfig(StageConfig):
    """MinHash LSH near-dup settings. Defaults: SelfCodeAlign (5-gram, 250 perms, 0.7); the
    WarriorCoder release used word unigrams, 128 perms, 0.5 (see ``arenaforge.stages.instructions.dedup``)."""

    enabled: bool = True
    ngram: int = Field(default=5, ge=1, description="Word n-gram shingle size.")
    num_perm: int = Field(default=250, ge=2, description="MinHash permutations.")
    threshold: float = Field(default=0.7, gt=0, le=1, description="Jaccard threshold.")
    verify: bool = Field(default=True, description="Check LSH candidates' Jaccard estimate.")

    def params(self) -> NearDupParams:
        return NearDupParams(ngram=self.ngram, num_perm=self.num_perm, threshold=self.threshold,
                             verify=self.verify)


class CleanConfig(StageConfig):
    """Filters and dedup of mined requests."""

    min_words: int = Field(default=5, ge=1, description="Fewer words: too_short.")
    min_chars: int = Field(default=20, ge=1, description="Fewer characters: too_short.")
    max_chars: int = Field(default=2000, ge=1, description="More characters: too_long.")
    drop_truncated: bool = Field(default=True,
                                 description="Drop rows whose generation hit max_tokens.")
    require_request: bool = Field(default=True,
                                  description="Drop text that is code or an answer, not a request.")
    max_non_latin: float = Field(default=0.2, ge=0, le=1,
                                 description="Largest share of letters outside Latin script.")
    near_dup: NearDupConfig = Field(default_factory=NearDupConfig)
    echo_of: tuple[str, ...] | None = Field(
        default=None, description="The system prompts requests were mined under (a run fills "
        "them in from mine): a request must not echo them.")
    max_echo_ngrams: int | None = Field(
        default=1, ge=0, description="A mined request sharing more word 3-grams than this with "
        "a system prompt it was mined under is dropped as prompt_echo (null: not checked).")


# A mined request sometimes starts with a role label the model wrote itself.
_LABEL = re.compile(r"^\s*(?:#+\s*)?(?:user|question|instruction|request|query|task|prompt)\s*:\s*",
                    re.IGNORECASE)
_BLANKS = re.compile(r"\n{3,}")
_CODE_START = re.compile(
    r"^(?:```|def |class |import |from \S+ import |#include|function |public |private |package |"
    r"<\?php|<!DOCTYPE|<html|SELECT |CREATE TABLE|fn |func |let |const |var |int main|"
    r"using |@\w+|if __name__)", re.IGNORECASE)
_ANSWER_START = re.compile(
    r"^(?:sure\b|certainly\b|of course\b|absolutely\b|here is\b|here's\b|here are\b|"
    r"great question|i'd be happy|i would be happy|i'm happy to|as an ai\b|thank you\b|"
    r"you're welcome|to (?:solve|achieve|accomplish) this\b|the (?:following|above) code\b|"
    r"this (?:code|function|program|script) )", re.IGNORECASE)
_REQUEST_CUE = re.compile(
    r"\b(?:write|create|implement|build|design|develop|generate|explain|describe|how|what|why|"
    r"which|when|where|can|could|would|should|please|help|fix|debug|refactor|optimi[sz]e|convert|"
    r"translate|find|need|want|trying|given|make|modify|show|provide|suggest|compare|calculate|"
    r"compute|return|returns|sort|parse|add|remove|check|determine|count|is there|are there)\b",
    re.IGNORECASE)


def normalize_instruction(text: str) -> str:
    """NFKC, unify line ends, strip trailing spaces per line, drop a role label, trim blank runs.

    Internal newlines are kept: requests often carry code.

    >>> normalize_instruction("User:  Write a  parser.  \\r\\n\\n\\n\\nIn Go.\\n")
    'Write a  parser.\\n\\nIn Go.'
    """
    text = unicodedata.normalize("NFKC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = _LABEL.sub("", text.strip(), count=1)
    return _BLANKS.sub("\n\n", text).strip()


def non_latin_share(text: str) -> float:
    """Share of letters that are not Latin script (CJK, Cyrillic, ...); 0.0 without letters."""
    if text.isascii():  # the common case, without a per-character loop
        return 0.0
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 0.0
    foreign = sum(1 for c in letters if c > "\u024f" and not unicodedata.name(c, "").startswith("LATIN"))
    return foreign / len(letters)


def request_problem(text: str) -> str | None:
    """Why ``text`` is not a user request (``code_not_request``, ``answer_not_request``,
    ``not_a_request``), or ``None`` when it reads as one.

    >>> request_problem("Write a function that merges two sorted lists.") is None
    True
    >>> request_problem("Sure! Here is the function you asked for.")
    'answer_not_request'
    >>> request_problem("def f(x):\\n    return x")
    'code_not_request'
    """
    head = text.lstrip()
    if _CODE_START.match(head):
        return "code_not_request"
    if _ANSWER_START.match(head):
        return "answer_not_request"
    if "?" not in text and not _REQUEST_CUE.search(text):
        return "not_a_request"
    return None


_WORD = re.compile(r"[a-z0-9]+(?:['-][a-z0-9]+)*")
ECHO_NGRAM = 3


def word_ngrams(text: str, n: int = ECHO_NGRAM) -> set[tuple[str, ...]]:
    """The lower-cased word n-grams of ``text``.

    >>> sorted(word_ngrams("Write ONE function, now.", 2))
    [('function', 'now'), ('one', 'function'), ('write', 'one')]
    """
    words = _WORD.findall(text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


@functools.lru_cache(maxsize=8)
def _prompt_ngrams(prompts: tuple[str, ...]) -> tuple[frozenset[tuple[str, ...]], ...]:
    # once per run's prompts, not per row: the prompts' n-grams were ~95% of the check's cost
    # (85 us a row with polyglot.yaml's 6 prompts)
    return tuple(frozenset(word_ngrams(p)) for p in prompts)


def prompt_echo(text: str, prompts: tuple[str, ...], max_shared: int) -> str | None:
    """The word 3-grams ``text`` shares with the prompt it echoes most, when more than
    ``max_shared``; else ``None``.

    >>> prompt_echo("Please provide one Python function that solves a specific problem.",
    ...             ("Write one Python function that solves a small problem.",), 1)
    "4 word 3-grams of the system prompt: 'function that solves', 'one python function', ..."
    """
    mine = word_ngrams(text)
    shared = max((mine & grams for grams in _prompt_ngrams(prompts)), key=len, default=set())
    if len(shared) <= max_shared:
        return None
    shown = sorted(" ".join(g) for g in shared)
    return (f"{len(shared)} word 3-grams of the system prompt: "
            + ", ".join(repr(g) for g in shown[:2]) + (", ..." if len(shown) > 2 else ""))


def row_problem(text: str, finish_reason: str | None, cfg: CleanConfig,
                mined: bool = True) -> tuple[str, str] | None:
    """The first filter a normalised request fails, as ``(reason, detail)``, or ``None``."""
    if finish_reason == "error":
        return "generation_error", ""
    if cfg.drop_truncated and finish_reason == "length":
        return "truncated", "finish_reason=length"
    if not text:
        return "empty", ""
    # Script first: whitespace word counts mean nothing for CJK text.
    share = non_latin_share(text)
    if share > cfg.max_non_latin:
        return "non_latin_text", f"{share:.2f} of letters outside Latin script"
    words = len(text.split())
    if words < cfg.min_words or len(text) < cfg.min_chars:
        return "too_short", f"{words} words, {len(text)} chars"
    if len(text) > cfg.max_chars:
        return "too_long", f"{len(text)} chars"
    if cfg.require_request:
        problem = request_problem(text)
        if problem:
            return problem, ""
    if mined and cfg.echo_of and cfg.max_echo_ngrams is not None:
        echo = prompt_echo(text, cfg.echo_of, cfg.max_echo_ngrams)
        if echo:
            return "prompt_echo", echo
    return None


def run(table: pa.Table, cfg: CleanConfig, ctx) -> StageResult:
    """Normalise, filter and dedup mined requests (see the module docstring)."""
    rows = table.to_pylist()
    texts = [normalize_instruction(r["instruction"] or "") for r in rows]
    reasons: list[tuple[str, str] | None] = [
        row_problem(t, r.get("finish_reason"), cfg, mined=r.get("template") != FILE_TEMPLATE)
        for t, r in zip(texts, rows)]
    tasks = [(row_language(r.get("language")), row_task_kind(r.get("task_kind"))) for r in rows]
    ids = [instruction_id(t, *task) for t, task in zip(texts, tasks)]

    first_of: dict[str, int] = {}
    for i, problem in enumerate(reasons):
        if problem is None:
            if ids[i] in first_of:
                reasons[i] = ("exact_duplicate", ids[i])
            else:
                first_of[ids[i]] = i

    if cfg.near_dup.enabled:
        for task in dict.fromkeys(tasks):
            alive = [i for i, p in enumerate(reasons) if p is None and tasks[i] == task]
            dups = near_duplicates([texts[i] for i in alive], cfg.near_dup.params())
            for i, dup in zip(alive, dups):
                if dup is not None:
                    kept = alive[dup.duplicate_of]
                    reasons[i] = ("near_duplicate", f"{ids[kept]} jaccard~{dup.jaccard:.2f}")

    out = table.set_column(table.schema.get_field_index("instruction"), "instruction",
                           pa.array(texts, pa.string()))
    out = out.set_column(out.schema.get_field_index("instruction_id"), "instruction_id",
                         pa.array(ids, pa.string()))
    keep = pa.array([p is None for p in reasons])
    dropped = out.filter(pa.array([p is not None for p in reasons]))
    dropped_reasons = [p for p in reasons if p is not None]
    dropped = dropped.append_column("reason", pa.array([p[0] for p in dropped_reasons], pa.string()))
    dropped = dropped.append_column("detail", pa.array([p[1] for p in dropped_reasons], pa.string()))
    return StageResult(table=out.filter(keep), dropped=dropped)


STAGE = StageSpec(name="clean", config=CleanConfig, run=run, source="mine", sharded=False,
                  inputs=MINE_COLUMNS, outputs=MINE_COLUMNS)
