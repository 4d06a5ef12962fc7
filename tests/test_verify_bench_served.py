"""``scripts/verify_bench_served.py``: stand-in experts on HumanEval behind served ports, and the
real ``arenaforge verify-bench configs/openai.yaml`` against them."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import verify_bench_served as vbs

CARD_KEYS = ("verified_precision", "yield_of_solvable", "judge_winner_precision",
             "lost_by_admission", "experts")


def _one(task_id: str = "HumanEval/0") -> tuple[vbs.World, str]:
    problem = next(p for p in vbs.world_problems(None) if p["task_id"] == task_id)
    assert "test" not in problem  # the world is built without the hidden tests
    world = vbs.World(vbs.build_world([problem], workers=1), {task_id: problem["prompt"]})
    return world, problem["prompt"]


def _run(source: str, entry: str, call: str) -> object:
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - HumanEval's canonical code and its mutants
    try:
        return eval(f"{entry}({call})", namespace)
    except Exception as exc:  # noqa: BLE001 - a mutant may raise where the canonical does not
        return type(exc).__name__


def test_wrong_experts_answer_and_test_by_their_own_mutant():
    world, prompt = _one()
    task = world.tasks["HumanEval/0"]
    assert task.examples >= 2 and task.mutants
    experts = vbs.make_experts(world, {"a": 1.0, "b": 0.0, "c": 0.0})
    for name in ("b", "c"):
        experts[name].belief = lambda _t: "wrong"
    right, wrong_b, wrong_c = (experts[n].program(task) for n in "abc")
    assert world.is_canonical(task, right) and not world.is_canonical(task, wrong_b)
    assert wrong_b != wrong_c  # two misreadings, two programs
    # the mutant differs from the canonical solution on some input of the pool
    assert any(_run(wrong_b, task.entry_point, c) != _run(right, task.entry_point, c)
               for c in task.calls)
    # the author's asserts expect what its own program returns
    user = f"Write 6 independent test cases for a correct solution.\n<<<\n{prompt}\n>>>"
    for name, program in (("a", right), ("b", wrong_b)):
        lines = [line for line in experts[name].tests(user, seed=0).splitlines()
                 if line.startswith("assert")]
        assert len(lines) == 6
        for line in lines:
            test = ast.parse(line).body[0].test
            call = ast.unparse(test.left)[len(task.entry_point) + 1:-1]
            want = ast.literal_eval(test.comparators[0])
            got = _run(program, task.entry_point, call)
            slip = want == [got] or isinstance(got, int) and want == got + 1  # TEST_SLIP_RATE
            assert want == got or slip, line
    shared = vbs.make_experts(world, {"b": 0.0, "c": 0.0}, own_programs=False)
    for expert in shared.values():
        expert.belief = lambda _t: "wrong"
    assert shared["b"].program(task) == shared["c"].program(task)  # one vote


@pytest.mark.timeout(600)
def test_the_script_writes_the_card_and_no_hidden_test_reaches_a_stand_in(tmp_path):
    from arenaforge.pipeline.apps.eval_core import load_problems

    requests = tmp_path / "requests.jsonl"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "verify_bench_served.py"), "--problems", "3",
         "--out", str(tmp_path / "out"), "--requests", str(requests),
         "--set", "runner.kind=inline"],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    card = json.loads((tmp_path / "out" / "card.json").read_text())
    assert all(k in card for k in CARD_KEYS), sorted(card)
    assert card["problems"] == 3 and card["reached_arena"] == 3
    assert card["config"].endswith("configs/openai.yaml")
    # every role was asked: answers, tests, judges (logprob readings)
    bodies = [json.loads(line) for line in requests.read_text().splitlines()]
    text = "\n".join(json.dumps(b["body"], ensure_ascii=False) for b in bodies)
    assert "Write 5 independent test cases" in text and "Rate one answer" in text
    # canaries: every hidden-test line of the sampled problems that is not in its prompt
    asked = {b["body"].get("model") for b in bodies}
    assert asked >= {"qwen2.5-coder-7b", "deepseek-coder-6.7b", "starcoder2-15b-instruct"}
    sample = {p["task_id"] for p in vbs.world_problems(3)}
    strings = "\n".join(_strings([b["body"] for b in bodies]))
    for problem in load_problems("humaneval"):
        if problem["task_id"] not in sample:
            continue
        canaries = [line.strip() for line in problem["test"].splitlines()
                    if len(line.strip()) >= 20 and line.strip() not in problem["prompt"]]
        assert canaries
        leaked = [c for c in canaries if c in strings]
        assert not leaked, (problem["task_id"], leaked[:3])
    assert "def check(candidate)" not in strings


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
