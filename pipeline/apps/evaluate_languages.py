"""``arenaforge eval --language``: pass@k on HumanEval in each of the sandbox's languages.

Python is HumanEval itself, run exactly as ``evaluate`` runs it (its prompt, its ``check``
function). Every other language gets HumanEval's translation (``humaneval_translate``): the
docstring as a comment above the function's declaration in the language, and the tests as
call cases, rendered into the language's harness (``stages/verification/harness``) and graded
case by case on the host. A problem that does not translate to a language is skipped there and
counted by reason, so each language's pass@k is over its own ``n_problems``: compare languages
on the problems they share (``problems`` lists them) when the counts differ.

A chat model gets a user turn naming the language (``eval_humaneval_chat_language.txt``) and
answers with the whole function; a base model continues the declaration and stops at the
function's closing brace. A sample's status is ``passed``, ``compile_error`` (the program did
not compile, or for JavaScript and Python did not parse), or the first failing case's:
``wrong_answer``, ``runtime_error``, ``timeout``, ``memory``, ``output_limit``, ``killed``.

``canonical`` is Python only: HumanEval has no reference solutions in other languages. The
translation is checked instead by ``scripts/check_humaneval_translation.py`` (the canonical
solutions against the translated cases in the Python harness, and every harness compiled).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arenaforge.pipeline.apps import eval_core as ev
from arenaforge.pipeline.apps.humaneval_prompts import (
    chat_program,
    completion_program,
    completion_prompt,
    completion_stops,
    language_prompt,
)
from arenaforge.pipeline.apps.humaneval_translate import (
    LANGUAGES,
    Translation,
    language_signature,
    translate_suite,
)
from arenaforge.pipeline.prompts import fill, load_template
from arenaforge.pipeline.statuses import COMPILE_ERROR, PASSED

log = logging.getLogger(__name__)

ALL = "all"
CHAT_TEMPLATE = "eval_humaneval_chat_language.txt"  # in pipeline/apps/prompts
# an eval's own outcomes, besides the sandbox's statuses (``pipeline.statuses``)
SANDBOX_FAULT, HARNESS_ERROR = "sandbox_fault", "harness_error"


def resolve_languages(names: Sequence[str]) -> list[str]:
    """Language ids, in the order given, each once; ``all`` is the eight.

    Raises:
        ValueError: A name that is neither ``all`` nor a language, naming it.
    """
    from arenaforge.pipeline.sandbox.languages.catalog import UnknownLanguage, resolve_language

    if isinstance(names, str):
        names = [names]
    out: list[str] = []
    for name in names:
        try:
            ids = list(LANGUAGES) if name.strip().lower() == ALL else [resolve_language(name)]
        except UnknownLanguage as exc:
            raise ValueError(f"unknown eval language {name!r}; known: "
                             f"{', '.join(LANGUAGES)} or {ALL}") from exc
        out += [i for i in ids if i not in out]
    if not out:
        raise ValueError(f"no eval language given; known: {', '.join(LANGUAGES)} or {ALL}")
    return out


def check_model_languages(model: str, languages: Sequence[str]) -> list[str]:
    """The language ids (``resolve_languages``), checked against the model: ``canonical``
    is Python only (HumanEval has no reference solutions in other languages).

    Raises:
        ValueError: An unknown language, or ``canonical`` with another language than Python.
    """
    langs = resolve_languages(languages)
    others = [lang for lang in langs if lang != "python"]
    if model == ev.CANONICAL and others:
        raise ValueError(
            f"canonical: HumanEval has reference solutions in Python only, not in "
            f"{', '.join(others)}; the translation to them is checked by "
            "scripts/check_humaneval_translation.py (the canonical solutions against the "
            "translated cases, and every harness compiled)")
    return langs


def _prompts(items: list[Any], language: str, style: str) -> list[str]:
    if language == "python":
        if style == "completion":
            return [p["prompt"] for p in items]
        template = load_template(ev.CHAT_TEMPLATE)
        return [fill(template, prompt=p["prompt"]) for p in items]
    if style == "completion":
        return [completion_prompt(tr, language) for tr in items]
    from arenaforge.pipeline.sandbox.languages.catalog import language as language_of

    lang = language_of(language)
    template = load_template(CHAT_TEMPLATE)
    return [fill(template, language=lang.display, fence=lang.fences[0],
                  prompt=language_prompt(tr, language)) for tr in items]


def _program(item: Any, language: str, style: str, text: str) -> str:
    if language == "python":
        return ev.build_program(item, text, style)
    if style == "completion":
        from arenaforge.pipeline.backends.base import truncate_at_stop

        body, _ = truncate_at_stop(text, completion_stops(language))
        return completion_program(item, language, body)
    return chat_program(item, language, text)


def _grade_language(pool: Any, language: str, items: list[Translation], programs: list[str],
                    n_samples: int, timeout_s: float | None, memory_mb: int | None
                    ) -> list[tuple[bool, str]]:
    """``(passed, status)`` per program (``n_samples`` per item, in order)."""
    from arenaforge.stages.verification.harness import function_job

    jobs, where, out = [], [], [(False, HARNESS_ERROR)] * len(programs)
    for i, program in enumerate(programs):
        tr = items[i // n_samples]
        try:
            jobs.append(function_job(language, program, language_signature(tr, language),
                                     tr.cases, timeout_s=timeout_s, memory_mb=memory_mb))
        except ValueError as exc:  # UnsupportedType: a translation bug, never the answer's
            log.warning("eval: %s in %s: no harness: %s", tr.task_id, language, exc)
            continue
        where.append(i)
    for i, result in zip(where, pool.run_programs(jobs) if jobs else []):
        out[i] = case_status(items[i // n_samples].cases, result)
    return out


def case_status(cases: Sequence[Any], result: Any) -> tuple[bool, str]:
    """``(passed, status)`` of a program's sandbox result on its cases (calls or runs):
    ``sandbox_fault``, ``compile_error``, else the first failing case's status or ``passed``."""
    from arenaforge.stages.verification.harness import grade

    if result.sandbox_fault is not None:
        return False, SANDBOX_FAULT
    if not result.compile.ok:
        return False, COMPILE_ERROR
    failed = next((v for v in grade(cases, result) if not v.passed), None)
    return (True, PASSED) if failed is None else (False, failed.status)


def evaluate_languages(model: str, languages: Sequence[str], *, suite: str = "humaneval",
                       limit: int | None = None, n_samples: int = 1, k: Sequence[int] = (1,),
                       temperature: float | None = None, max_new_tokens: int = 512,
                       prompt_style: ev.PromptStyle = "auto", timeout_s: float | None = None,
                       memory_mb: int | None = None, seed: int = 0,
                       models_file: Path = Path("configs/models.yaml"),
                       sandbox_config: Any = None, output_dir: Path | None = None
                       ) -> dict[str, Any]:
    """pass@k of ``model`` in each language (see the module; arguments as ``evaluate``'s).

    Returns:
        ``{"model", "suite", "n_problems", "n_samples", "temperature", "max_new_tokens",
        "prompt_style", "languages": {id: {"n_problems", "skipped": {reason: count},
        "skipped_problems": {task_id: reason}, "pass@1", ..., "statuses": {status: count},
        "problems": [...]}}, "seconds"}``.
    """
    langs = check_model_languages(model, languages)
    temperature = ev.sampling_temperature(n_samples, k, temperature)
    start = time.perf_counter()
    problems = ev.load_problems(suite, limit)
    per_lang: dict[str, tuple[list[Any], dict[str, Any]]] = {}
    for lang in langs:
        if lang == "python":
            per_lang[lang] = (problems, {})
        else:
            kept, skipped = translate_suite(problems, lang)
            per_lang[lang] = (kept, skipped)

    texts: dict[str, list[list[str]]] = {}
    if model == ev.CANONICAL:
        style = "completion"
        texts["python"] = [[p["canonical_solution"]] * n_samples for p in problems]
    else:
        backend = ev._backend_for(model, models_file)
        try:
            style = ev.resolve_style(backend, prompt_style)
            for lang, (items, _) in per_lang.items():
                stops = ev.CODEX_STOPS if lang == "python" else completion_stops(lang)
                texts[lang] = ev.sample(
                    backend, style, _prompts(items, lang, style), [_task_id(i) for i in items],
                    n_samples=n_samples, temperature=temperature,
                    max_new_tokens=max_new_tokens, seed=seed, stops=stops) if items else []
        finally:
            backend.close()

    from arenaforge.pipeline.sandbox import SandboxPool
    from arenaforge.pipeline.sandbox.config import SandboxConfig
    from arenaforge.pipeline.sandbox.result import Job

    results: dict[str, dict[str, Any]] = {}
    samples: list[dict[str, Any]] = []
    pool = SandboxPool.from_config(sandbox_config if sandbox_config is not None
                                   else SandboxConfig())
    try:
        for lang, (items, skipped) in per_lang.items():
            programs = [_program(item, lang, style, t)
                        for item, ts in zip(items, texts[lang]) for t in ts]
            if lang == "python":
                runs = pool.run_many([Job(solution=prog, tests=ev.problem_tests(p),
                                          timeout_s=timeout_s, memory_mb=memory_mb)
                                      for p, prog in zip(
                                          (p for p in items for _ in range(n_samples)),
                                          programs)]) if programs else []
                verdicts = [(bool(r.passed), r.status) for r in runs]
            else:
                verdicts = _grade_language(pool, lang, items, programs, n_samples, timeout_s,
                                           memory_mb)
            results[lang] = _summary(items, skipped, verdicts, n_samples, k)
            samples += [{"language": lang, "task_id": _task_id(item), "completion": t,
                         "passed": ok, "status": status}
                        for (item, t), (ok, status) in zip(
                            ((item, t) for item, ts in zip(items, texts[lang]) for t in ts),
                            verdicts)]
    finally:
        pool.close()
    result: dict[str, Any] = {
        "model": model, "suite": suite, "n_problems": len(problems), "n_samples": n_samples,
        "temperature": temperature, "max_new_tokens": max_new_tokens, "prompt_style": style,
        "languages": results, "seconds": round(time.perf_counter() - start, 2)}
    if output_dir is not None:
        result["output"] = str(ev._write_outputs(Path(output_dir), result, samples))
    return result


def _task_id(item: Any) -> str:
    return item["task_id"] if isinstance(item, dict) else item.task_id


def _summary(items: list[Any], skipped: dict[str, Any], verdicts: list[tuple[bool, str]],
             n_samples: int, k: Sequence[int]) -> dict[str, Any]:
    per_problem, statuses = [], Counter()
    for i, item in enumerate(items):
        mine = verdicts[i * n_samples:(i + 1) * n_samples]
        statuses.update(status for _, status in mine)
        per_problem.append({"task_id": _task_id(item), "n": n_samples,
                            "correct": sum(ok for ok, _ in mine),
                            "statuses": [status for _, status in mine]})
    out: dict[str, Any] = {
        "n_problems": len(items),
        "skipped": dict(sorted(Counter(exc.reason for exc in skipped.values()).items())),
        "skipped_problems": {task_id: exc.reason for task_id, exc in skipped.items()},
    }
    for x in sorted(set(k)):
        out[f"pass@{x}"] = ev.pass_at_k([p["n"] for p in per_problem],
                                        [p["correct"] for p in per_problem], x) \
            if per_problem else 0.0
    out.update(statuses=dict(statuses), problems=per_problem)
    return out
