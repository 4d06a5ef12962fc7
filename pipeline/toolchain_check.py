"""Run-start check: every language the run will compile or run has its toolchain here.

A stage that runs answers in the sandbox gives its config a ``sandbox_languages(run_cfg) ->
{language id: where it comes from}`` method (the ``tests`` stage does: the languages of the
run's rows, from ``mine.languages`` or the instruction file's ``language`` column).
:func:`check_toolchains` asks every stage of the run and looks each language up in
``arenaforge.pipeline.sandbox.languages.toolchain`` (what ``arenaforge sandbox languages``
lists). ``run_pipeline`` calls it before the run directory is opened (so ``arenaforge run`` and a run from Python both do): without it a missing
compiler surfaces as ``ToolchainUnavailable`` inside the tests stage, after every model of the
mine, answer and judge stages has run.

Example::

    >>> check_toolchains(load_config("configs/polyglot.yaml"))  # doctest: +SKIP
    ToolchainUnavailable: ... Rust (from mine.languages): `rustc` not found; install ...
"""

from __future__ import annotations

from typing import Any

from arenaforge.pipeline.sandbox.languages import LANGUAGES, ToolchainUnavailable, toolchain


def sandbox_languages(cfg: Any) -> dict[str, str]:
    """The languages the run's stages will compile and run, ``{id: where it comes from}``
    (stages that run no program declare none)."""
    found: dict[str, str] = {}
    for name in cfg.stages:
        declare = getattr(cfg.stage_config(name), "sandbox_languages", None)
        if declare is not None:
            for lang, origin in declare(cfg).items():
                found.setdefault(lang, origin)
    return found


def toolchain_problems(cfg: Any) -> list[str]:
    """One message per language the run needs whose toolchain is not installed here."""
    problems = []
    for lang, origin in sandbox_languages(cfg).items():
        found = toolchain(lang)
        if not found.available:
            why = found.problem or "toolchain unavailable"
            prefix = f"{LANGUAGES[lang].display}: "
            problems.append(f"{LANGUAGES[lang].display} (from {origin}): "
                            f"{why.removeprefix(prefix)}")
    return problems


def check_toolchains(cfg: Any) -> None:
    """Fail before any model runs when a language of the run has no toolchain here.

    Raises:
        ToolchainUnavailable: the message names each such language, where the run takes it
            from, what is missing and how to install it.
    """
    problems = toolchain_problems(cfg)
    if problems:
        raise ToolchainUnavailable(
            f"the run compiles and runs answers in {len(problems)} language(s) whose toolchain "
            "is not installed here (`arenaforge sandbox languages` lists what is): "
            + "; ".join(problems))
