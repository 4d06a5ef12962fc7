"""The verify-bench card of the served config (``configs/openai.yaml``) against stand-in experts.

Three OpenAI-compatible servers on 127.0.0.1 (``load_server``'s handler, one port per model as
one ``vllm serve`` each) stand in for the config's three models; the real ``arenaforge
verify-bench configs/openai.yaml --problems N --out DIR`` runs against them, with one override,
``--set models_file=DIR/standins/models.yaml``: a copy of the config's registry whose served
entries point at the stand-ins' ports (their chat templates, ``fold_system`` and options as
shipped). The card is verify-bench's own (``DIR/card.md``, ``DIR/card.json``); the stand-in
world is written beside it (``DIR/standins/world.json``).

What the stand-ins know of a problem is what a model that read HumanEval's prompt might write:
the prompt and the canonical solution (``prompt + canonical_solution``), the entry point and
inputs read from the prompt. The hidden tests (``test``) are dropped when the problems are read
(``world_problems``) and reach no stand-in: ``tests/test_verify_bench_served.py`` records every
request the servers receive and searches them for the hidden tests' lines.

The world (``HumanEvalExpert``, a ``trust_world.BeliefExpert`` on HumanEval):

* **Skill.** Per problem an expert holds one belief (``BeliefExpert.belief``, keyed by expert and
  task id): right with its ``skill`` (default ``--skills 0.85,0.6,0.6`` for the config's experts
  in order: the test author ``qwen2.5-coder-7b`` 0.85, the two judges 0.6 each, as
  ``bench_verified``), otherwise a misreading (80%), a stub that raises (10%) or a syntax error
  (10%). Beliefs are independent across experts and problems.
* **Programs.** A right answer is the canonical solution (unparsed) with a ``_style`` line of
  the expert's own (two right experts are two programs). A misreading is an AST mutant of it
  (``ast_mutants``) that differs from it on some input of the problem's input pool (below); each
  wrong expert gets a different mutant (a seeded order of the problem's telling mutants, one
  step apart per expert: two wrong experts are two independent votes, never agreeing by
  construction), with ``--shared-wrong-program`` one mutant to the byte for all of them (the
  evidence rules count it once). A problem with no telling mutant gives its wrong experts stubs.
  With ``--subtle`` a misreading is drawn among the mutants that return the canonical values
  on the docstring's examples, where there are any (the probe gate's example cannot catch it:
  the misreadings models make that their prompt's examples do not expose).
* **Tests.** An author writes asserts ``assert entry(args) == value`` (the tests stage's
  prompt) whose values come from running its OWN believed program (canonical or its mutant; a
  stub or syntax believer believes the canonical: its code failed, not its reading) on inputs
  of the input pool: the example inputs first (about half of the tests, as models copy the
  docstring's examples), then perturbations of them. An input where its program raises or
  loops gets no test. Independently, one expected value in ``trust_world.TEST_SLIP_RATE`` is
  slipped (off by one, or wrapped in a list). The generator request gets argument tuples from
  the pool.
* **Input pool.** The prompt's example calls of the entry point (literal arguments only), else
  its stated inputs (``For s = "ab", c = "a" ...``, ``Input: [4,2,3]``), else one input from
  the parameters' annotations; then one-argument perturbations of those (ints +-1, 0, doubled;
  strings reversed, shortened, extended, upper-cased, empty; lists shortened, reversed,
  extended, sorted, empty; bools flipped); kept where the canonical solution returns a literal
  within 1 s. A problem with an empty pool (6 of HumanEval's 164) gets no test from its authors
  and stubs from its wrong experts (``world.json``: ``no_inputs``).
* **Judges** read an answer as right when its code is the canonical solution up to the style
  line (``load_replies.Expert``'s judge: pointwise score or pair preference), and err on each
  reading with probability ``--judge-error`` (0.1).
* **Repair** writes the canonical solution with ``load_replies.REPAIR_SUCCESS`` (0.5), else the
  repairer's own belief (a misreader keeps its mutant).
* Difficulty and the concrete-task question: a plausible spread (verify-bench filters on neither).

What the world assumes, each in the rules' favour unless said:

* Beliefs are independent across experts and problems: no problem is hard for every model, so
  nearly every problem is solvable by someone (real models' failures concentrate on the same
  hard problems).
* Wrong programs are independent: two wrong experts hold two different mutants, never the same
  misreading in two spellings (``--shared-wrong-program``: one misreading to the byte, which the
  evidence rules count once; ``bench_verified``'s world has the same misreading in two
  programs, the case against the rules).
* A misreading is one AST edit of the canonical solution that shows on the pool: no
  example-free misreading (one only inputs far from the examples expose), no rewrite that
  differs everywhere. By default it is any telling mutant, and most break a docstring example,
  which the probe gate catches; ``--subtle`` keeps the examples' values (against the rules).
* Authors err the way their answers err: a misreading author expects its misreading on every
  input, the docstring's own examples included (it does not copy their stated outputs), and
  invents no input outside the pool; a right author errs only by slips.
* Judges err independently of the answer, the problem, and their own belief.
* A right belief is HumanEval's canonical solution, which passes the hidden tests; a mutant may
  pass them too (it differs from the canonical only off the hidden tests' inputs).

Usage::

    python scripts/verify_bench_served.py --problems 40 --out /tmp/vbs40
    python scripts/verify_bench_served.py --problems 164 --out /tmp/vbs --requests /tmp/req.jsonl
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import json
import multiprocessing
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import yaml
from arenaforge.stages.verification.probe_gate import _balanced_call, _leading_literal
from ast_mutants import mutants
from load_replies import JUDGE_ERROR_RATE, REPAIR_SUCCESS, _fenced, rng_for, top_logprobs
from load_server import Meter, _Server, make_handler
from trust_world import SYNTAX, TEST_SLIP_RATE, BeliefExpert

CALL_TIMEOUT_S = 1.0  # the canonical solution on one input
MUTANT_TIMEOUT_S = 0.25  # a mutant: most that run past this loop forever
MAX_TIMEOUTS = 2
MUTANT_CAP = 24
KNOWN_FIELDS = ("task_id", "prompt", "canonical_solution", "entry_point")  # never "test"


# -- the world: what the stand-ins know of each problem ------------------------------------------

@dataclasses.dataclass(frozen=True)
class Task:
    """One problem as the stand-ins know it (no hidden test).

    Attributes:
        calls: the input pool, each input as its argument list's source (``"[1, 2], 3"``).
        examples: how many of ``calls`` (the first ones) the author starts from: the
            docstring's examples (``example_inputs``), the rest are their perturbations.
        canonical: the canonical program's value on each input (source of a literal).
        mutants: telling mutants: ``(source, values)``, ``None`` where the mutant raises.
    """

    task_id: str
    entry_point: str
    source: str
    calls: tuple[str, ...]
    examples: int
    canonical: tuple[str, ...]
    mutants: tuple[tuple[str, tuple[str | None, ...]], ...]


def world_problems(n: int | None, seed: int = 0) -> list[dict[str, str]]:
    """verify-bench's HumanEval sample (``selection_order``), only the fields the stand-ins may
    know: task id, prompt, canonical solution and entry point (never ``test``)."""
    from arenaforge.pipeline.apps.eval_core import load_problems
    from arenaforge.pipeline.apps.verify_bench.problems import selection_order

    suite = {p["task_id"]: p for p in load_problems("humaneval")}
    chosen = set(selection_order(list(suite), seed)[:n or len(suite)])
    return [{k: p[k] for k in KNOWN_FIELDS} for t, p in suite.items() if t in chosen]


def example_calls(prompt: str, entry: str) -> list[tuple]:
    """The argument tuples of the prompt's example calls of ``entry`` (literal arguments only).

    >>> example_calls("def f(x):\\n    '>>> f([1, 2])\\n    3\\n    f(4) ==> 5'", "f")
    [([1, 2],), (4,)]
    """
    body = prompt[prompt.find(f"def {entry}("):]
    found: list[tuple] = []
    # the def line itself matches too: its parameters are no literals, so it is skipped
    for m in re.finditer(rf"(?<![\w.]){re.escape(entry)}\(", body):
        end = _balanced_call(body, m.end() - 1)
        if end is None:
            continue
        try:
            call = ast.parse(body[m.start():end], mode="eval").body
            args = tuple(ast.literal_eval(a) for a in call.args)  # type: ignore[attr-defined]
        except (SyntaxError, ValueError, TypeError, AttributeError):
            continue
        if not call.keywords and args not in found:  # type: ignore[attr-defined]
            found.append(args)
    return found


def _parameters(prompt: str, entry: str) -> list[ast.arg]:
    for node in ast.parse(prompt).body:
        if isinstance(node, ast.FunctionDef) and node.name == entry:
            return node.args.args
    return []


def stated_inputs(prompt: str, entry: str) -> list[tuple]:
    """Examples stated without a call: one line naming every parameter (``For s = "ab", c =
    "a" the result...``), or ``Input: <literal>`` for a one-parameter function.

    >>> stated_inputs("def f(s, c):\\n    'For s = \\"ab\\", c = \\"a\\" the output is 1.'", "f")
    [('ab', 'a')]
    """
    names = [a.arg for a in _parameters(prompt, entry)]
    docstring = prompt[prompt.find(f"def {entry}("):]
    found: list[tuple] = []
    for line in docstring.splitlines():
        values = []
        for name in names:
            m = re.search(rf"\b{re.escape(name)}\s*[=:]\s*", line)
            if m is None and len(names) == 1:
                m = re.search(r"\bInput:\s*", line)
            text = _leading_literal(line[m.end():]) if m else None
            if text is None:
                break
            values.append(ast.literal_eval(text))
        if names and len(values) == len(names) and tuple(values) not in found:
            found.append(tuple(values))
    return found


_SEEDS = {"int": (3,), "float": (2.5,), "str": ("hello",), "list": ([1, 2, 3],),
          "List": ([1, 2, 3],), "bool": (True,)}


def seed_inputs(prompt: str, entry: str) -> list[tuple]:
    """One input from the annotations, when every parameter has one ``_SEEDS`` knows (an author
    with no example to start from writes one of its own).

    >>> seed_inputs("def f(n: int, xs: List[int]):\\n    pass", "f")
    [(3, [1, 2, 3])]
    """
    args = []
    for a in _parameters(prompt, entry):
        head = ast.unparse(a.annotation).split("[")[0] if a.annotation else ""
        if head not in _SEEDS:
            return []
        args.append(_SEEDS[head][0])
    return [tuple(args)] if args else []


def example_inputs(prompt: str, entry: str) -> list[tuple]:
    """The inputs an author starts from: the prompt's example calls, else its stated inputs,
    else one from the annotations."""
    return (example_calls(prompt, entry) or stated_inputs(prompt, entry)
            or seed_inputs(prompt, entry))


def _variants(value: object) -> list[object]:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1, 0, 2 * value]
    if isinstance(value, float):
        return [value + 0.5, -value, 0.0]
    if isinstance(value, str):
        return [value[::-1], value[:-1], value + value[:1], value.upper(), ""]
    if isinstance(value, (list, tuple)):
        kind = type(value)
        out = [value[:-1], value[::-1], value + value[:1], kind()]
        try:
            out.append(kind(sorted(value)))
        except TypeError:
            pass
        return out
    return []


def perturbations(examples: list[tuple]) -> list[tuple]:
    """Each example with one argument changed (``_variants``), new ones only, in order.

    >>> perturbations([(3, "ab")])[:3]
    [(4, 'ab'), (2, 'ab'), (0, 'ab')]
    """
    seen, out = {repr(e) for e in examples}, []
    for args in examples:
        for i, value in enumerate(args):
            for new in _variants(value):
                cand = (*args[:i], new, *args[i + 1:])
                if repr(cand) not in seen:
                    seen.add(repr(cand))
                    out.append(cand)
    return out


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


def _timed(fn, args: tuple, timeout_s: float):
    """``fn(*args)`` under a one-shot alarm: a ``_Timeout`` leaves this call (or its caller's
    handler, if it fires while being disarmed), never a later line."""
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _load(source: str, entry: str, timeout_s: float):
    namespace: dict = {}
    _timed(exec, (source, namespace), timeout_s)  # HumanEval's canonical code and its mutants
    return namespace[entry]


def _values(source: str, entry: str, inputs: list[tuple], timeout_s: float = CALL_TIMEOUT_S
            ) -> list[str | None]:
    """``source``'s ``entry`` on each input: the value's source when it is a literal, else None
    (raised, ran past ``timeout_s``, or returned something no assert can spell). After
    ``MAX_TIMEOUTS`` timeouts the program is not called again (None on the rest)."""
    try:
        fn = _load(source, entry, timeout_s)
    except BaseException:  # noqa: BLE001 - a program that does not load has no values
        return [None] * len(inputs)
    out: list[str | None] = []
    timeouts = 0
    for args in inputs:
        value, text = None, None
        try:
            if timeouts < MAX_TIMEOUTS:
                value = _timed(fn, copy.deepcopy(args), timeout_s)
                text = repr(value)
                text = text if ast.literal_eval(text) == value else None
        except _Timeout:
            timeouts += 1
            text = None
        except BaseException:  # noqa: BLE001 - raised, or not a literal
            text = None
        out.append(text)
    return out


def build_task(problem: dict[str, str]) -> Task:
    """One problem's world: its input pool, the canonical values there, its telling mutants."""
    entry = problem["entry_point"]
    source = ast.unparse(ast.parse(problem["prompt"] + problem["canonical_solution"])) + "\n"
    examples = example_inputs(problem["prompt"], entry)
    pool = examples + perturbations(examples)
    values = _values(source, entry, pool)
    keep = [i for i, v in enumerate(values) if v is not None]
    inputs = [pool[i] for i in keep]
    canonical = tuple(values[i] for i in keep)
    telling = []
    for m in mutants(source, entry, cap=MUTANT_CAP, seed=0) if inputs else []:
        got = tuple(_values(m.source, entry, inputs, MUTANT_TIMEOUT_S))
        if got != canonical:
            telling.append((m.source, got))
    return Task(problem["task_id"], entry, source,
                tuple(", ".join(map(repr, args)) for args in inputs),
                sum(1 for i in keep if i < len(examples)), canonical, tuple(telling))


def _limit_worker() -> None:
    signal.signal(signal.SIGALRM, _alarm)
    # a mutant that grows forever: 2 GiB more than the forked worker starts with (it inherits
    # its parent's address space, several GiB inside a test process that has loaded torch)
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + (2 << 30), size + (2 << 30)))


def build_world(problems: list[dict[str, str]], workers: int = 2) -> dict[str, Task]:
    """Every problem's ``Task``, built in worker processes (mutants may loop or grow)."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers, initializer=_limit_worker, maxtasksperchild=8) as pool:
        tasks = pool.map(build_task, problems, chunksize=1)
    return {t.task_id: t for t in tasks}


def _key(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())


class World:
    """The stand-ins' problems, found in any request by their prompt's text."""

    def __init__(self, tasks: dict[str, Task], prompts: dict[str, str]):
        self.tasks = tasks
        # longest first: a prompt that holds another's text is matched before it
        self._keys = sorted(((_key(prompts[t]), t) for t in tasks), key=lambda kv: -len(kv[0]))
        self._canonical = {t: _without_style(task.source) for t, task in tasks.items()}

    def find(self, text: str) -> Task | None:
        """The problem whose prompt the text quotes (NFKC, whitespace collapsed), if any."""
        text = _key(text)
        return next((self.tasks[t] for key, t in self._keys if key in text), None)

    def is_canonical(self, task: Task, answer: str) -> bool:
        """Whether an answer's code is the canonical solution up to the style line."""
        from arenaforge.stages.common.code_extract import extract_code

        return _without_style(extract_code(answer, "python") or answer) == \
            self._canonical[task.task_id]


def _entry_def(tree: ast.Module, entry: str) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry)


def _docstring_len(fn: ast.FunctionDef) -> int:
    first = fn.body[0] if fn.body else None
    return int(isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
               and isinstance(first.value.value, str))


def _without_style(code: str) -> str | None:
    """The code unparsed without ``_style = ...`` statements (None: it does not parse)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            node.body = [s for s in node.body if not (
                isinstance(s, ast.Assign) and [ast.unparse(t) for t in s.targets] == ["_style"])
            ] or [ast.Pass()]
    return ast.unparse(tree)


def styled(source: str, entry: str, name: str) -> str:
    """``source`` with ``_style = name`` first in ``entry``'s body, after its docstring: the
    expert's own program (two experts' right answers are two programs, as models' are).

    >>> print(styled("def f(x):\\n    return x\\n", "f", "a"), end="")
    def f(x):
        _style = 'a'
        return x
    """
    tree = ast.parse(source)
    fn = _entry_def(tree, entry)
    fn.body.insert(_docstring_len(fn), ast.parse(f"_style = {name!r}").body[0])
    return ast.unparse(tree) + "\n"


def stub(source: str, entry: str) -> str:
    """``entry`` with its body after the docstring replaced by ``raise NotImplementedError``."""
    tree = ast.parse(source)
    fn = _entry_def(tree, entry)
    fn.body = fn.body[:_docstring_len(fn)] + ast.parse("raise NotImplementedError('todo')").body
    return ast.unparse(tree) + "\n"


def broken(source: str, entry: str) -> str:
    """``source`` with the colon of ``entry``'s def line dropped (a syntax error)."""
    lines = source.split("\n")
    i = next(k for k, line in enumerate(lines) if line.startswith(f"def {entry}("))
    lines[i] = lines[i].rstrip().removesuffix(":")
    return "\n".join(lines)


# -- the stand-in experts ------------------------------------------------------------------------

class HumanEvalExpert(BeliefExpert):
    """A ``BeliefExpert`` on HumanEval: its answer, tests, repairs follow one belief per problem.

    ``index``: the expert's place among the served ones (which telling mutant it holds).
    """

    def __init__(self, name: str, skill: float, world: World, index: int, *,
                 own_programs: bool = True, judge_error: float = JUDGE_ERROR_RATE,
                 subtle: bool = False):
        super().__init__(name, skill, own_programs)
        self.world, self.index, self.judge_error, self.subtle = world, index, judge_error, subtle

    def chat(self, messages: list[dict], seed: object) -> str:
        """As ``Expert.chat``; a system turn folded into the user's (``fold_system``) is read
        as the system turn it was."""
        from arenaforge.pipeline.backends.role_folding import SEPARATOR

        if messages and messages[0].get("role") == "user":
            for system in self.prompts.system.values():
                head = system.strip() + SEPARATOR
                if messages[0]["content"].startswith(head):
                    rest = messages[0]["content"][len(head):]
                    messages = [{"role": "system", "content": system},
                                {"role": "user", "content": rest}, *messages[1:]]
                    break
        return super().chat(messages, seed)

    def _mutant(self, task: Task) -> tuple[str, tuple[str | None, ...]] | None:
        """The expert's misreading: the problem's telling mutants in a seeded order, one step
        apart per expert (``subtle``: those that return the canonical values on the examples,
        when there are any)."""
        pool = list(task.mutants)
        if self.subtle:
            k = task.examples
            pool = [m for m in pool if m[1][:k] == task.canonical[:k]] or pool
        if not pool:
            return None
        start = rng_for("mutant", task.task_id).randrange(len(pool))
        return pool[(start + self.index * self.own_programs) % len(pool)]

    def program(self, task: Task) -> str:
        """The code this expert answers with."""
        kind, mutant = self.belief(task.task_id), self._mutant(task)
        if kind == "wrong" and mutant is not None:
            return styled(mutant[0], task.entry_point, self.name) if self.own_programs \
                else mutant[0]
        if kind == "correct":
            return styled(task.source, task.entry_point, self.name)
        if kind == SYNTAX:
            return broken(styled(task.source, task.entry_point, self.name), task.entry_point)
        return stub(task.source, task.entry_point)  # STUB, or a misreading with no mutant

    def believed_values(self, task: Task) -> tuple[str | None, ...]:
        """What the expert expects on each input: its mutant's values when it misreads the
        problem, else the canonical's (a stub or syntax error is a failed program, not a
        misreading)."""
        mutant = self._mutant(task)
        if self.belief(task.task_id) == "wrong" and mutant is not None:
            return mutant[1]
        return task.canonical

    def answer(self, instruction: str, seed: object) -> str:
        task = self.world.find(instruction)
        if task is None:
            return super().answer(instruction, seed)
        return (f"Here is `{task.entry_point}`:\n\n```python\n{self.program(task)}```\n\n"
                "It follows the docstring.")

    def tests(self, user: str, seed: object) -> str:
        task = self.world.find(_fenced(user))
        n = re.search(r"Write (\d+) independent", user)
        if task is None or n is None:  # no problem of the world, or the generator request
            return super().tests(user, seed)
        rng = rng_for(self.name, "tests", task.task_id, seed)
        examples, others = list(range(task.examples)), list(range(task.examples, len(task.calls)))
        rng.shuffle(others)
        half = (int(n.group(1)) + 1) // 2  # the docstring's examples first, as models copy them
        order = examples[:half] + others + examples[half:]
        believed, lines = self.believed_values(task), []
        for i in order:
            if len(lines) == int(n.group(1)):
                break
            if believed[i] is None:  # its program raises or loops there: it writes no test
                continue
            want = ast.literal_eval(believed[i])
            if rng.random() < TEST_SLIP_RATE:
                want = [want] if not isinstance(want, int) or isinstance(want, bool) else want + 1
            lines.append(f"assert {task.entry_point}({task.calls[i]}) == {want!r}")
        if "then a generator" in user:  # the generator asked in the same reply
            lines.append(self._generator(task, user, seed))
        return "```python\n" + "\n".join(lines) + "\n```"

    def generator(self, instruction: str, user: str, seed: object) -> str:
        task = self.world.find(instruction)
        if task is None:
            return super().generator(instruction, user, seed)
        return f"```python\n{self._generator(task, user, seed)}\n```"

    def _generator(self, task: Task, user: str, seed: object) -> str:
        k = int(m.group(1)) if (m := re.search(r"a list of (\d+) new", user)) else 5
        rng = rng_for(self.name, "inputs", task.task_id, seed)
        calls = rng.sample(task.calls, min(k, len(task.calls)))
        return f"def generate_inputs():\n    return [{', '.join(f'({c},)' for c in calls)}]"

    def repair(self, instruction: str, seed: object) -> str:
        task = self.world.find(instruction)
        if task is None:
            return super().repair(instruction, seed)
        fixed = rng_for(self.name, "repair", task.task_id, seed).random() < REPAIR_SUCCESS
        code = styled(task.source, task.entry_point, self.name) \
            if fixed or self.belief(task.task_id) != "wrong" else self.program(task)
        return f"The bug is fixed:\n```python\n{code}```"

    def _judged_correct(self, instruction: str, answer: str, key: str) -> bool:
        task = self.world.find(instruction)
        truth = task is not None and self.world.is_canonical(task, answer)
        return truth != (rng_for(self.name, "judge", key).random() < self.judge_error)

    def difficulty(self, text: str) -> float:
        if self.world.find(text) is None:
            return 2.0
        return 4 + rng_for("difficulty", text).random() * 3

    def logprobs(self, prompt: str, k: int) -> dict[str, float]:
        if self.prompts.logprob_kind(prompt) == "task" and self.world.find(_fenced(prompt)):
            p_yes = 0.85 + 0.1 * rng_for("task", prompt).random()
            return top_logprobs({"Yes": p_yes, "No": 1 - p_yes}, 3, k)
        return super().logprobs(prompt, k)


# -- serving and running -------------------------------------------------------------------------

def make_experts(world: World, skills: dict[str, float], **options) -> dict[str, HumanEvalExpert]:
    """One ``HumanEvalExpert`` per model, in order (``options``: theirs)."""
    return {name: HumanEvalExpert(name, skill, world, i, **options)
            for i, (name, skill) in enumerate(skills.items())}


def serve(experts: dict[str, HumanEvalExpert], record: Path | None = None
          ) -> dict[str, _Server]:
    """One server per model on 127.0.0.1 (free ports), each in a daemon thread; with ``record``
    every request body is appended to that JSONL file as it arrives."""
    lock = threading.Lock()
    servers = {}
    for name, expert in experts.items():
        base = make_handler(expert, Meter(), 0.0, 0.0)

        class Recording(base):  # type: ignore[misc, valid-type]
            def post(self, body: dict) -> None:
                if record is not None:
                    with lock, record.open("a") as fh:
                        fh.write(json.dumps({"path": self.path, "body": body}) + "\n")
                super().post(body)

        server = _Server(("127.0.0.1", 0), Recording)
        threading.Thread(target=server.serve_forever, daemon=True, name=f"serve-{name}").start()
        servers[name] = server
    return servers


def standin_registry(config: Path, ports: dict[str, int], path: Path) -> Path:
    """A copy of the config's registry whose entries for ``ports`` point at the stand-ins: the
    same ids, templates (``tokenizer``: the entry's ``config_dir``) and options, one server
    each; relative files made absolute."""
    data = yaml.safe_load(config.read_text())
    models_file = (config.parent / data.get("models_file", "models.yaml")).resolve()
    registry = yaml.safe_load(models_file.read_text())
    for entry in registry["models"]:
        if entry.get("config_dir"):
            entry["config_dir"] = str((models_file.parent / entry["config_dir"]).resolve())
        if entry["id"] in ports:
            entry.update(base_url=f"http://127.0.0.1:{ports[entry['id']]}/v1",
                         model_name=entry["id"])
            entry.pop("replica_urls", None)
            if entry.get("config_dir"):
                entry["tokenizer"] = entry["config_dir"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(registry, sort_keys=False))
    return path


def served_models(config: Path) -> list[str]:
    """The config's experts, then its judges and test authors not among them."""
    from arenaforge.pipeline.config import load_config

    cfg = load_config(config)
    return list(dict.fromkeys([*cfg.experts, *cfg.judge_ids, *(cfg.tests.authors or ())]))


def world_report(world: World, experts: dict[str, HumanEvalExpert]) -> dict:
    """What the world holds per problem (``standins/world.json``): no hidden test."""
    rows = {t: {"inputs": len(task.calls), "examples": task.examples,
                "telling_mutants": len(task.mutants),
                "example_consistent_mutants": sum(
                    m[1][:task.examples] == task.canonical[:task.examples] for m in task.mutants),
                "beliefs": {n: e.belief(t) for n, e in experts.items()}}
            for t, task in world.tasks.items()}
    beliefs: dict[str, dict[str, int]] = {}
    for row in rows.values():
        for n, b in row["beliefs"].items():
            beliefs.setdefault(n, {}).setdefault(b, 0)
            beliefs[n][b] += 1
    return {"problems": len(rows), "no_inputs": sorted(t for t, r in rows.items()
                                                       if not r["inputs"]),
            "beliefs": beliefs, "per_problem": rows}


def headline(card: dict) -> dict:
    """The card's numbers this script reports."""
    keys = ("problems", "reached_arena", "solvable", "verified_rows", "emitted_rows",
            "verified_precision", "yield_of_solvable", "judge_winner_precision",
            "lost_by_admission", "verified_rows_unsolvable", "experts", "wall_s")
    return {k: card.get(k) for k in keys}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "openai.yaml")
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0, help="verify-bench's problem sample")
    parser.add_argument("--skills", default="0.85,0.6,0.6",
                        help="each served model's probability of a right belief, in the order "
                             "experts, judges, test authors (a shorter list repeats its last)")
    parser.add_argument("--judge-error", type=float, default=JUDGE_ERROR_RATE)
    parser.add_argument("--shared-wrong-program", action="store_true",
                        help="wrong experts answer one mutant to the byte (one vote)")
    parser.add_argument("--subtle", action="store_true",
                        help="misreadings agree with the docstring's examples where some mutant "
                             "does (the probe gate cannot catch them)")
    parser.add_argument("--requests", type=Path, help="record every request (JSONL)")
    parser.add_argument("--cli", default=f"{sys.executable} -m arenaforge.pipeline.cli")
    parser.add_argument("--set", action="append", default=[], help="more verify-bench overrides")
    parser.add_argument("--workers", type=int, default=2, help="processes building the world")
    args = parser.parse_args(argv)

    began = time.perf_counter()
    names = served_models(args.config)
    skills = [float(s) for s in args.skills.split(",")]
    skills = {n: skills[min(i, len(skills) - 1)] for i, n in enumerate(names)}
    problems = world_problems(args.problems, args.seed)
    world = World(build_world(problems, args.workers), {p["task_id"]: p["prompt"]
                                                        for p in problems})
    world_s = time.perf_counter() - began
    experts = make_experts(world, skills, own_programs=not args.shared_wrong_program,
                           judge_error=args.judge_error, subtle=args.subtle)
    servers = serve(experts, record=args.requests)
    standins = args.out / "standins"
    registry = standin_registry(args.config, {n: s.server_address[1]
                                              for n, s in servers.items()},
                                standins / "models.yaml")
    report = {"skills": skills, "judge_error": args.judge_error,
              "own_programs": not args.shared_wrong_program, "subtle": args.subtle,
              "world_s": round(world_s, 1),
              **world_report(world, experts)}
    (standins / "world.json").write_text(json.dumps(report, indent=2))
    cmd = [*args.cli.split(), "verify-bench", str(args.config), "--problems",
           str(args.problems), "--out", str(args.out), "--seed", str(args.seed), "--fresh",
           "--quiet", "--set", f"models_file={registry}"]
    for item in args.set:
        cmd += ["--set", item]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    print(" ".join(cmd), flush=True)
    with (standins / "verify_bench.log").open("w") as log:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                            check=False).returncode
    for server in servers.values():
        server.shutdown()
    if rc != 0:
        print(f"verify-bench failed (exit {rc}); see {standins / 'verify_bench.log'}",
              file=sys.stderr)
        return rc
    card = json.loads((args.out / "card.json").read_text())
    result = {**headline(card), "world_s": round(world_s, 1),
              "total_wall_s": round(time.perf_counter() - began, 1),
              "beliefs": report["beliefs"], "no_inputs": report["no_inputs"]}
    (standins / "summary.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
