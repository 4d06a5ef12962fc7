"""Programs in every mainstream language, in the same sandbox as Python's tests.

Languages (``LANGUAGE_IDS``): ``python, cpp, c, javascript, typescript, java, go, rust``;
``resolve_language`` maps the names people write (``C++``, ``golang``, ``TS``...) to them.
``toolchains()`` says which are installed here, with versions (``scripts/setup.sh`` installs
them). A ``ProgramJob`` is one program and its tests; ``SandboxPool.run_programs`` compiles it
once and runs all its tests in one sandbox call; ``ProgramResult`` gives the compile step and a
``RunResult`` per test, with the same statuses for every language (``RUN_STATUSES``).

Modules: ``catalog`` (languages, names), ``installed`` (the toolchains here, what the sandbox
binds), ``jobs`` (the contract), ``frames`` (each language's commands and limits),
``classify`` (verdicts to results), ``execute`` (compile cache, the two sandbox calls).
"""

from arenaforge.pipeline.sandbox.languages.catalog import (
    LANGUAGE_IDS,
    LANGUAGES,
    Language,
    UnknownLanguage,
    language,
    resolve_language,
)
from arenaforge.pipeline.sandbox.languages.installed import (
    Toolchain,
    ToolchainUnavailable,
    toolchain,
    toolchains,
)
from arenaforge.pipeline.sandbox.languages.jobs import (
    CALL_RAISED,
    CALL_START,
    CALL_VALUE,
    CALLS_FD,
    COMPILE_ERROR,
    KILLED,
    OK,
    RUN_STATUSES,
    RUNTIME_ERROR,
    CompileResult,
    ProgramJob,
    ProgramResult,
    RunResult,
)

__all__ = [
    "CALLS_FD", "CALL_RAISED", "CALL_START", "CALL_VALUE", "COMPILE_ERROR", "KILLED",
    "LANGUAGES", "LANGUAGE_IDS", "OK", "RUNTIME_ERROR", "RUN_STATUSES", "CompileResult",
    "Language", "ProgramJob", "ProgramResult", "RunResult", "Toolchain", "ToolchainUnavailable",
    "UnknownLanguage", "language", "resolve_language", "toolchain", "toolchains",
]
