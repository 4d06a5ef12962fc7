"""``arenaforge sandbox``: the languages the sandbox runs here, and one program run in it.

``arenaforge sandbox languages [--json]`` lists every language with ``language``,
``available``, ``version`` and ``compiled``. ``arenaforge sandbox run FILE --language ID
[--stdin FILE] [--timeout S] [--memory-mb N] [--json]`` compiles FILE when its language is
compiled, runs it once on the stdin given (none: empty) under the sandbox's full isolation, and
prints ``status``, ``exit_code``, ``stdout``, ``stderr``, ``wall_s`` and ``isolation``; a
program that does not compile is ``compile_error`` with the compiler's exit code and output.
Exit code: 0 once a verdict was printed (whatever it is), 2 for bad arguments, 1 when the
sandbox or the language's toolchain is not available here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="The sandbox: its languages, and running one program in it.",
                  no_args_is_help=True)


def _fail(message: str, code: int) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@app.command("languages")
def languages(json_: Annotated[bool, typer.Option("--json", help="One JSON list.")] = False
              ) -> None:
    """The languages the sandbox runs, whether their toolchain is here, and its version."""
    from arenaforge.pipeline.sandbox.languages.installed import toolchains

    rows = [{"language": tc.language, "available": tc.available, "version": tc.version,
             "compiled": tc.compiled} for tc in toolchains()]
    if json_:
        typer.echo(json.dumps(rows))
        return
    for tc, row in zip(toolchains(), rows):
        state = row["version"] if tc.available else f"missing ({tc.problem})"
        kind = "compiled" if row["compiled"] else "interpreted"
        typer.echo(f"{row['language']:<11} {kind:<12} {state}")


def _describe(result, stdout: str) -> dict:
    """The JSON object of one run (``ProgramResult`` of a single-test job)."""
    compiled = result.compile
    run = result.runs[0]
    isolation = f"{result.isolation} ({', '.join(result.limits)})" if result.limits else \
        result.isolation
    row = {"language": result.language, "status": result.status}
    if not compiled.ok:
        row.update(exit_code=compiled.exit_code, stdout=compiled.stdout, stderr=compiled.stderr,
                   wall_s=round(compiled.wall_s, 6), message=compiled.message)
    else:
        row.update(exit_code=run.exit_code, stdout=stdout, stderr=run.stderr,
                   wall_s=round(run.wall_s, 6), message=run.message)
    row.update(isolation=isolation, compile_wall_s=round(compiled.wall_s, 6),
               sandbox_fault=result.sandbox_fault)
    return row


@app.command("run")
def run(file: Annotated[Path, typer.Argument(help="The program's source file.")],
        language: Annotated[str, typer.Option("--language", help=(
            "Language id or name: python, cpp, c, javascript, typescript, java, go, rust "
            "(C++, golang... too)."))],
        stdin: Annotated[Path | None, typer.Option("--stdin", help="File given as stdin.")] = None,
        timeout: Annotated[float, typer.Option("--timeout", help="Wall-clock limit of the run, "
                                                "seconds (compiling has its own).")] = 5.0,
        memory_mb: Annotated[int, typer.Option("--memory-mb", help=(
            "Memory of the run, all its processes together (MiB)."))] = 1024,
        json_: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False) -> None:
    """Run a whole program once in the sandbox (compiled first when its language is)."""
    from arenaforge.pipeline.sandbox import SandboxConfig, SandboxPool, SandboxUnavailable
    from arenaforge.pipeline.sandbox.languages import (
        ProgramJob,
        ToolchainUnavailable,
        UnknownLanguage,
        resolve_language,
    )

    try:
        lang = resolve_language(language)
    except UnknownLanguage as exc:
        _fail(f"--language: {exc}", 2)
    for path, what in ((file, "FILE"), (stdin, "--stdin")):
        if path is not None and not path.is_file():
            _fail(f"{what}: {path} is not a file", 2)
    if not timeout > 0 or memory_mb < 32:
        _fail("--timeout must be > 0 and --memory-mb >= 32", 2)
    texts = []
    for path, what in ((file, "FILE"), (stdin, "--stdin")):
        try:
            texts.append(path.read_text(encoding="utf-8") if path is not None else "")
        except UnicodeDecodeError as exc:
            _fail(f"{what}: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})", 2)
    source, data = texts
    job = ProgramJob(lang, source, stdins=(data,), timeout_s=timeout, memory_mb=memory_mb)
    try:
        with SandboxPool.from_config(SandboxConfig(workers=1)) as pool:
            result = pool.run_programs([job])[0]
    except (SandboxUnavailable, ToolchainUnavailable) as exc:
        _fail(str(exc), 1)
    row = _describe(result, result.runs[0].stdout)
    if json_:
        typer.echo(json.dumps(row, ensure_ascii=False))
        return
    typer.echo(f"{row['status']}  exit {row['exit_code']}  {row['wall_s']:.3f}s  "
               f"[{row['isolation']}]")
    if row.get("message"):
        typer.echo(row["message"])
    for name in ("stdout", "stderr"):
        if row[name]:
            typer.echo(f"--- {name}\n{row[name]}", nl=not row[name].endswith("\n"))
