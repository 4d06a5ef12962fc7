"""What the load generator's simulated experts write (``scripts/load_server.py`` serves it).

Replies are deterministic, keyed by the expert, the request's text and its seed, and plausible
for each prompt the stages send (their templates, ``arenaforge.pipeline.prompts``); which prompt a request is comes from its
system turn (chat) or the last line of the logprob templates (raw prompts). The task of a
request is recognised with ``synth_arena.task_of``.

Example:
    >>> expert = Expert("e", 1.0, Prompts())
    >>> "def sum_above(xs)" in expert.answer(
    ...     "Write a Python function `sum_above` that returns the sum of the numbers in a "
    ...     "list that are greater than 3.", seed=0)
    True
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from arenaforge.pipeline.prompts import load_template
from scale_instructions import reference, task_request
from synth_arena import Family, _answer, _source, task_of

_TOKEN = re.compile(r" ?[A-Za-z]+| ?\d| ?[^\sA-Za-z\d]|\s+")
_FENCED = re.compile(r"<<<\n(.*?)\n>>>", re.DOTALL)
JUDGE_ERROR_RATE = 0.1
TEST_SLIP_RATE = 1 / 12
REPAIR_SUCCESS = 0.5


def _prompt(name: str) -> str:
    return load_template(name)


def _last_line(name: str) -> str:
    return _prompt(name).splitlines()[-1].strip()


class Prompts:
    """How to tell the stages' requests apart: their system turns and their last lines."""

    def __init__(self) -> None:
        self.system = {kind: _prompt(f"{kind}_system.txt")
                       for kind in ("testgen", "repair", "judge", "difficulty")}
        self.logprob = {"difficulty": _last_line("difficulty_logprob_user.txt"),
                        "task": _last_line("difficulty_task_user.txt"),
                        "pointwise": _last_line("judge_pointwise_logprob.txt"),
                        "pairwise": _last_line("judge_pairwise_logprob.txt")}

    def chat_kind(self, messages: list[dict]) -> str:
        system = next((m["content"].strip() for m in messages if m.get("role") == "system"), "")
        for kind, text in self.system.items():
            if system == text:
                return kind
        return "answer"

    def logprob_kind(self, prompt: str) -> str | None:
        return next((k for k, line in self.logprob.items() if line in prompt), None)


def tokens(text: str) -> list[str]:
    """A crude tokenizer: words and single digits (with their leading space), symbols.

    >>> tokens(" Yes"), tokens("12"), len(tokens("Yes sir"))
    ([' Yes'], ['1', '2'], 2)
    """
    return _TOKEN.findall(text)


def n_tokens(text: str) -> int:
    return max(1, len(text) // 4)


def rng_for(*parts: object) -> random.Random:
    blob = "\x1f".join(map(str, parts)).encode()
    return random.Random(int.from_bytes(hashlib.sha256(blob).digest()[:8], "big"))


def is_correct(answer: str, task: tuple[Family, int] | None) -> bool:
    """Does an answer hold the family's reference code (what this server writes when right)?"""
    if task is None:
        return False
    fam, p = task
    return _source(fam, p, fam.correct) in answer


def _fenced(text: str, k: int = 0) -> str:
    found = _FENCED.findall(text)
    return found[k] if len(found) > k else ""


def _softmax(weights: dict[str, float]) -> dict[str, float]:
    total = sum(weights.values())
    return {k: v / total for k, v in weights.items()}


def _around(center: float, choices: range, width: float = 1.0) -> dict[str, float]:
    return _softmax({str(k): math.exp(-((k - center) / width) ** 2 / 2) for k in choices})


def top_logprobs(probs: dict[str, float], spellings: int, k: int) -> dict[str, float]:
    """``{token: logprob}`` of the top ``k``: each choice as itself, with a leading space and
    (``spellings`` 3) lower-cased, 2% of the mass left to other tokens."""
    out: dict[str, float] = {}
    shares = (0.9, 0.06, 0.02)[:spellings]
    for choice, p in probs.items():
        forms = (choice, f" {choice}", choice.lower())[:spellings]
        for form, share in zip(forms, shares):
            if form not in out and p * share > 0:
                out[form] = math.log(p * share)
    out.setdefault("The", math.log(0.02))
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:k])


class Expert:
    """One simulated engine: its skill and what it writes for each kind of request."""

    def __init__(self, name: str, skill: float, prompts: Prompts):
        self.name, self.skill, self.prompts = name, skill, prompts

    # -- chat ----------------------------------------------------------------------------
    def chat(self, messages: list[dict], seed: object) -> str:
        kind = self.prompts.chat_kind(messages)
        user = next((m["content"] for m in messages if m.get("role") == "user"), "")
        if kind == "testgen":
            return self.tests(user, seed)
        if kind == "repair":
            return self.repair(user, seed)
        if kind == "judge":
            return self.judge_text(messages[-1]["content"], seed)
        if kind == "difficulty":
            return f"A clear request. Rating: [[{round(self.difficulty(user))}]]"
        return self.answer(messages[-1]["content"], seed)

    def answer(self, instruction: str, seed: object) -> str:
        task = task_of(instruction)
        if task is None:
            return ("Here is a minimal version:\n```python\ndef solve(x):\n    return x\n```\n")
        fam, p = task
        code = _answer(fam, p, self.skill, rng_for(self.name, "answer", instruction, seed))
        return f"Here is `{fam.fn}`:\n\n```python\n{code}```\n\nIt runs in linear time."

    def tests(self, user: str, seed: object) -> str:
        instruction = _fenced(user)
        if "def generate_inputs" in user:
            return self.generator(instruction, user, seed)
        n = int(m.group(1)) if (m := re.search(r"Write (\d+) independent", user)) else 3
        task = task_of(instruction)
        if task is None:
            entry = m.group(1) if (m := re.search(r"assert (\w+)\(", user)) else "solve"
            return f"```python\nassert {entry}(1) == 1\n```"
        fam, p = task
        rng = rng_for(self.name, "tests", instruction, seed)
        ref = reference(fam, p)
        lines = []
        for _ in range(n):
            args = fam.inputs(rng, p)
            want = ref(*args)
            if rng.random() < TEST_SLIP_RATE:
                want = [want] if not isinstance(want, int) else want + 1
            lines.append(f"assert {fam.fn}({', '.join(map(repr, args))}) == {want!r}")
        return "```python\n" + "\n".join(lines) + "\n```"

    def generator(self, instruction: str, user: str, seed: object) -> str:
        """The tests stage's second request: an input generator (literal argument tuples)."""
        k = int(m.group(1)) if (m := re.search(r"a list of (\d+) new", user)) else 5
        task = task_of(instruction)
        if task is None:
            return "```python\ndef generate_inputs():\n    return [(1,), (2,)]\n```"
        fam, p = task
        rng = rng_for(self.name, "inputs", instruction, seed)
        inputs = ", ".join(repr(tuple(fam.inputs(rng, p))) for _ in range(k))
        return f"```python\ndef generate_inputs():\n    return [{inputs}]\n```"

    def repair(self, instruction: str, seed: object) -> str:
        task = task_of(instruction)
        if task is None:
            return "```python\ndef solve(x):\n    return x\n```"
        fam, p = task
        rng = rng_for(self.name, "repair", instruction, seed)
        body = fam.correct if rng.random() < REPAIR_SUCCESS else fam.wrong
        return f"The bug is fixed:\n```python\n{_source(fam, p, body)}```"

    # -- judging -------------------------------------------------------------------------
    def _judged_correct(self, instruction: str, answer: str, key: str) -> bool:
        truth = is_correct(answer, task_of(instruction))
        return truth != (rng_for(self.name, "judge", key).random() < JUDGE_ERROR_RATE)

    def score_probs(self, prompt: str) -> dict[str, float]:
        """0-3 score probabilities for a pointwise judge prompt."""
        good = self._judged_correct(_fenced(prompt, 0), _fenced(prompt, 1), prompt)
        return _around(2.6 if good else 0.6, range(4), 0.7)

    def pair_probs(self, prompt: str) -> dict[str, float]:
        """P(A), P(B) for a pairwise judge prompt."""
        question, a, b = (_fenced(prompt, k) for k in range(3))
        good_a = self._judged_correct(question, a, prompt + "a")
        good_b = self._judged_correct(question, b, prompt + "b")
        p_a = 0.5 + 0.35 * (good_a - good_b) + 0.05  # a slight first-position preference
        return {"A": p_a, "B": 1 - p_a}

    def judge_text(self, user: str, seed: object) -> str:
        if "[Answer A]" in user:
            probs = self.pair_probs(user)
            verdict = "C" if abs(probs["A"] - probs["B"]) < 0.2 else max(probs, key=probs.get)
            return f"Both answers were checked against the question.\nVerdict: [[{verdict}]]"
        probs = self.score_probs(user)
        return f"The code was checked.\nScore: [[{max(probs, key=probs.get)}]]"

    def difficulty(self, text: str) -> float:
        if task_of(text) is None:
            return 2.0
        return 4 + rng_for("difficulty", text).random() * 3

    def logprobs(self, prompt: str, k: int) -> dict[str, float]:
        kind = self.prompts.logprob_kind(prompt)
        if kind == "difficulty":
            return top_logprobs(_around(self.difficulty(_fenced(prompt)), range(1, 10)), 2, k)
        if kind == "task":
            known = task_of(_fenced(prompt)) is not None
            p_yes = 0.85 + 0.1 * rng_for("task", prompt).random() if known else 0.15
            return top_logprobs({"Yes": p_yes, "No": 1 - p_yes}, 3, k)
        if kind == "pointwise":
            return top_logprobs(self.score_probs(prompt), 2, k)
        if kind == "pairwise":
            return top_logprobs(self.pair_probs(prompt), 2, k)
        return top_logprobs({"The": 0.6, "A": 0.4}, 1, k)

    def raw(self, prompt: str, seed: object) -> str:
        """A raw completion (Magpie mining): a request of some family."""
        return task_request(rng_for(self.name, "mine", prompt, seed))
