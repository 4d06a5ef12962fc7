"""A world of experts whose right and wrong answers are known, for ``bench_verified.py``.

Built on ``synth_arena``'s task families (each has a reference body and one wrong body) and the
load generator's simulated engines (``load_replies.Expert``), with two changes that make the
experts behave like models that misunderstand a task, not like an oracle with noise:

* **Beliefs.** Per instruction an expert believes the reference (with its ``skill``
  probability) or the family's wrong body, and both its answer and its tests follow that belief:
  an expert that misreads a task writes tests that expect the misreading (authors err the way
  their answers err). Experts that misread a task misread it the same way (the family has one
  wrong body): two wrong experts form a majority that agrees with itself, on answers and on
  tests. Experts write their own code (``own_programs``, the default): right or wrong, each
  expert's program differs from the others' (a ``_style`` line), as real models' do, so two
  wrong experts are two independent votes for the misreading, the world where a wrong
  majority can outvote the one right author. With ``own_programs=False`` every wrong expert
  emits the one wrong program to the byte, which the evidence rules count as one vote: a
  world that assumes the independence rule's premise.
* **Edges.** Each author's first test calls an input on which the right and the wrong reading
  differ (an author probes the task's edge first, expecting what it believes there).
* **Slips.** Independently of its belief, an author gets one expected value in
  ``TEST_SLIP_RATE`` wrong (off by one, or wrapped in a list), as small models do.

Instructions (``instruction_rows``) are ``scale_instructions``' distinct requests; a share of
them (``example_share``) states a worked example computed by the reference, the rest state none.

Ground truth (``correct_code``): an answer is right when it returns the reference's value on
every input of a fixed sample (inputs drawn from the family's own generator, plus the example's).

Example:
    >>> expert = BeliefExpert("e", 1.0)
    >>> text = instruction_rows(3, seed=1)[0]["instruction"]
    >>> correct_code(text, expert.answer(text, seed=0))
    True
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load_replies import Expert, Prompts, _fenced, rng_for
from scale_instructions import CONTEXTS, DOMAINS, THINGS, reference
from synth_arena import ENDINGS, FAMILIES, OPENINGS, Family, _fill, _source, task_of

TEST_SLIP_RATE = 1 / 20
STUB, SYNTAX = "stub", "syntax"
_PROMPTS: Prompts | None = None


def _prompts() -> Prompts:
    global _PROMPTS
    if _PROMPTS is None:
        _PROMPTS = Prompts()
    return _PROMPTS


def wrong(fam: Family, p: int):
    """The family's wrong implementation (what every wrong expert believes)."""
    namespace: dict = {}
    exec(_source(fam, p, fam.wrong), namespace)  # noqa: S102 - synth_arena's own code
    return namespace[fam.fn]


class BeliefExpert(Expert):
    """A simulated expert whose answer and tests follow one belief per instruction."""

    def __init__(self, name: str, skill: float, own_programs: bool = True):
        super().__init__(name, skill, _prompts())
        self.own_programs = own_programs

    def belief(self, instruction: str) -> str:
        """``correct``, ``wrong`` (the shared wrong body), ``stub`` or ``syntax``."""
        roll = rng_for(self.name, "belief", instruction).random()
        if roll < self.skill:
            return "correct"
        rest = (roll - self.skill) / max(1 - self.skill, 1e-9)
        return "wrong" if rest < 0.8 else STUB if rest < 0.9 else SYNTAX

    def answer(self, instruction: str, seed: object) -> str:
        task = task_of(instruction)
        if task is None:
            return "Here is a minimal version:\n```python\ndef solve(x):\n    return x\n```\n"
        fam, p = task
        kind = self.belief(instruction)
        body = {"correct": fam.correct, "wrong": fam.wrong,
                STUB: "raise NotImplementedError('todo')"}.get(kind, fam.correct)
        code = _source(fam, p, body)
        if kind == "correct" or (kind == "wrong" and self.own_programs):
            # each expert writes its own program; without own_programs the wrong ones share
            # one program to the byte
            code = code.replace("):\n", f"):\n    _style = {self.name!r}\n", 1)
        if kind == SYNTAX:
            code = code.replace("):\n", ")\n", 1)
        return f"Here is `{fam.fn}`:\n\n```python\n{code}```\n\nIt runs in linear time."

    def tests(self, user: str, seed: object) -> str:
        instruction = _fenced(user)
        if "def generate_inputs" in user:
            return self.generator(instruction, user, seed)
        task = task_of(instruction)
        if task is None:
            return super().tests(user, seed)
        n = int(m.group(1)) if (m := re.search(r"Write (\d+) independent", user)) else 3
        fam, p = task
        believed = wrong(fam, p) if self.belief(instruction) == "wrong" else reference(fam, p)
        rng = rng_for(self.name, "tests", instruction, seed)
        lines = []
        telling = _telling_input(fam, p, rng)
        for k in range(n):
            args = telling if k == 0 and telling is not None else fam.inputs(rng, p)
            try:
                want = believed(*args)
            except Exception:  # noqa: BLE001, S112 - its belief raises there: it writes no test
                continue
            if rng.random() < TEST_SLIP_RATE:
                want = [want] if not isinstance(want, int) or isinstance(want, bool) else want + 1
            lines.append(f"assert {fam.fn}({', '.join(map(repr, args))}) == {want!r}")
        return "```python\n" + "\n".join(lines) + "\n```"


def _telling_input(fam: Family, p: int, rng: random.Random) -> tuple | None:
    """An input on which the reference and the wrong body differ (a test author who knows the
    task probes its edge first; one who misreads it probes the same edge, expecting the
    misreading), or None when 200 draws find none."""
    right, bad = reference(fam, p), wrong(fam, p)
    for _ in range(200):
        args = fam.inputs(rng, p)
        try:
            want = right(*args)
        except Exception:  # noqa: BLE001, S112 - an input the task does not define: no edge
            continue
        try:
            if bad(*args) != want:
                return args
        except Exception:  # noqa: BLE001 - the wrong body raises there: also a difference
            return args
    return None


def instruction_rows(n: int, seed: int = 0, example_share: float = 0.65) -> list[dict[str, str]]:
    """``n`` distinct task requests (the ``mine.source`` format); ``example_share`` of them
    state a worked example."""
    rng = random.Random(seed)
    rows = []
    while len(rows) < n:
        fam = rng.choice(FAMILIES)
        p = rng.choice(fam.params)
        context = rng.choice(CONTEXTS).format(domain=rng.choice(DOMAINS), thing=rng.choice(THINGS))
        text = (f"{context} {_fill(rng.choice(OPENINGS), fam, p)} "
                f"{_fill(rng.choice(fam.descriptions), fam, p)}{rng.choice(ENDINGS) or '.'}")
        if rng.random() < example_share:
            args = fam.inputs(rng, p)
            call = f"{fam.fn}({', '.join(map(repr, args))})"
            text += f" For example, {call} should return {reference(fam, p)(*args)!r}."
        else:
            text += f" Context id {rng.randrange(10 ** 6)}."  # distinct without an example
        rows.append({"instruction": text})
    return rows


def _sample_inputs(fam: Family, p: int, instruction: str, k: int = 40) -> list[tuple]:
    rng = random.Random(f"truth:{instruction}")
    return [fam.inputs(rng, p) for _ in range(k)]


def correct_code(instruction: str, code: str | None) -> bool | None:
    """Whether ``code`` computes the reference on the instruction's sample of inputs (``None``:
    the instruction is no task of the world). Runs only code this world wrote."""
    task = task_of(instruction)
    if task is None:
        return None
    if not code:
        return False
    fam, p = task
    namespace: dict = {}
    try:
        exec(code, namespace)  # noqa: S102 - code from this world's own experts
        fn = namespace[fam.fn]
        ref = reference(fam, p)
        return all(fn(*args) == ref(*args) for args in _sample_inputs(fam, p, instruction))
    except Exception:  # noqa: BLE001 - any failure is a wrong answer
        return False


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
