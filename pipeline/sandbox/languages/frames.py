"""The frames a worker sends its sandbox for a program job: one compile step, one run step.

Each language's commands live here: compiler flags, the run command, the syntax check of an
interpreted language, the environment, and the limits a run gets (see ``inside/programs.py``
for what the driver does with them). Why two sandbox calls for a compiled program and not one:
the compile step and the runs have different memory limits (a compiler needs gigabytes, a
test's run a few hundred megabytes), and the memory cgroup's limit is set per call; the
compiled program comes back to the host (zlib, a few hundred KiB), where it is cached by
source and toolchain, so a program verified twice is compiled once.
"""

from __future__ import annotations

import math

from arenaforge.pipeline.sandbox.languages.catalog import Language, java_classes
from arenaforge.pipeline.sandbox.languages.installed import Toolchain
from arenaforge.pipeline.sandbox.languages.jobs import (
    CALL_RAISED,
    CALL_START,
    CALL_VALUE,
    CALLS_FD,
    ProgramJob,
)

_PATH = "/usr/local/bin:/usr/bin:/bin"
# Runtimes size their thread pools by the machine's cores; every thread counts against the
# job's process limit (RLIMIT_NPROC, the pids cgroup), so pools are capped at this.
_THREADS = 2
_COMPILE_WORK_MB = 512  # tmpfs of a compile step (object files, Go's build cache)
_SLACK_MB = 64  # RLIMIT_AS over the memory limit: shared libraries, stacks
# CPU seconds per wall second a process may use (a JVM's GC and JIT threads): RLIMIT_CPU is a
# backstop behind the wall-clock deadline, never the limit that decides.
_CPU_PER_WALL = 4


def _jvm_flags(memory_mb: int, prefix: str = "") -> list[str]:
    flags = [f"-Xmx{max(16, memory_mb * 3 // 4)}m", "-Xss64m", "-XX:+UseSerialGC",
             "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Xshare:auto",
             f"-XX:ActiveProcessorCount={_THREADS}"]
    return [prefix + f for f in flags]


def _node_flags(memory_mb: int) -> list[str]:
    return [f"--max-old-space-size={max(16, memory_mb * 3 // 4)}", f"--v8-pool-size={_THREADS}"]


def environment(lang: Language) -> dict[str, str]:
    """The environment of every process of a job (the driver adds ``HOME``: the work dir)."""
    env = {"PATH": _PATH, "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    if lang.id == "go":
        # GOPATH mode (no go.mod: files build as they are), caches in the job's /tmp, never
        # a download (GOTOOLCHAIN, GOPROXY), no cgo.
        env.update(GOCACHE="/tmp/go-build", GOPATH="/tmp/go", GO111MODULE="off",
                   CGO_ENABLED="0", GOTOOLCHAIN="local", GOPROXY="off", GOFLAGS=f"-p={_THREADS}",
                   GOMAXPROCS=str(_THREADS))
    elif lang.id in ("javascript", "typescript"):
        env["UV_THREADPOOL_SIZE"] = str(_THREADS)
    return env


def source_files(lang: Language, job: ProgramJob) -> list[tuple[str, bytes]]:
    """The files of a job's sources (Java: named after its public class)."""
    name = lang.source_name
    if lang.id == "java":
        public, _ = java_classes(job.source)
        name = f"{public or 'Main'}.java"
    files = [(name, job.source.encode())]
    if job.harness:
        if lang.harness_name is None:
            raise ValueError(f"{lang.display} takes its harness appended to the source, "
                             "not as a unit of its own")
        files.append((lang.harness_name, job.harness.encode()))
    return files


def compile_argv(lang: Language, tc: Toolchain, names: list[str], memory_mb: int) -> list[str]:
    """The compile command of a compiled language, run in the work dir."""
    tool = tc.tools
    if lang.id in ("c", "cpp"):
        std = "-std=gnu17" if lang.id == "c" else "-std=gnu++17"
        return [tool["compiler"], std, "-O2", "-pipe", "-fdiagnostics-color=never",
                "-fmax-errors=20", "-o", "prog", *names, *(["-lm"] if lang.id == "c" else [])]
    if lang.id == "rust":
        return [tool["compiler"], "--edition", "2021", "-C", "opt-level=2", "-C", "debuginfo=0",
                "-C", "strip=symbols", "-C", f"codegen-units={_THREADS}",
                "-C", f"linker={tool['linker']}", "--color", "never",
                "-o", "prog", names[0]]
    if lang.id == "go":
        return [tool["compiler"], "build", "-o", "prog", *names]
    if lang.id == "java":
        return [tool["compiler"], *_jvm_flags(memory_mb, "-J"), "-encoding", "UTF-8",
                "-Xmaxerrs", "20", "-nowarn", "-d", ".", *names]
    if lang.id == "typescript":
        # Not strict (a solution is not failed for an implicit any), but a type error does
        # fail it (noEmitOnError): what runs is what type-checked.
        options = ["--target", "es2022", "--module", "commonjs", "--strict", "false",
                   "--noEmitOnError", "--skipLibCheck", "--pretty", "false"]
        if "type_roots" in tool:
            options += ["--types", "node", "--typeRoots", tool["type_roots"]]
        if "compiler" in tool:
            return [tool["compiler"], *options, *names]
        return [tool["runtime"], *_node_flags(memory_mb), tool["compiler_js"], *options, *names]
    raise ValueError(f"{lang.display} is not compiled")


def run_argv(lang: Language, tc: Toolchain, main: str, memory_mb: int) -> list[str]:
    """The command of one run (``main``: the source file, or the class Java runs)."""
    tool = tc.tools
    if lang.id == "python":
        # The standard library only (-S): the base interpreter's site-packages are not part
        # of the language, and their .pth files cost ~150 ms per start.
        return [tool["runtime"], "-I", "-S", "-B", main]
    if lang.id in ("javascript", "typescript"):
        return [tool["runtime"], *_node_flags(memory_mb), main]
    if lang.id == "java":
        return [tool["runtime"], *_jvm_flags(memory_mb), "-cp", ".", main]
    return ["./prog"]


def check_argv(lang: Language, tc: Toolchain, names: list[str]) -> list[str] | None:
    """An interpreted language's syntax check (its failure is the program's compile error)."""
    if lang.id == "python":
        return [tc.tools["runtime"], "-I", "-S", "-c",
                "import sys\nfor f in sys.argv[1:]: compile(open(f, 'rb').read(), f, 'exec')",
                *names]
    if lang.id == "javascript":
        return [tc.tools["runtime"], "--check", names[0]]
    return None


def _cpu_s(wall_s: float) -> int:
    return math.ceil(wall_s * _CPU_PER_WALL) + 1


def address_space(lang: Language, memory_mb: int, cgroup: bool) -> int:
    """``RLIMIT_AS`` of a run or compile step, bytes (0: none).

    With the memory cgroup, none: the cgroup bounds the whole job and its OOM kill is the one
    ``memory`` verdict every language shares (under ``RLIMIT_AS`` a C program's failed malloc
    would crash it instead). Without it, native code gets the limit plus slack; runtimes that
    reserve far more address space than they use (JVM, V8, Go) only their heap flags.
    """
    if cgroup or not lang.native_memory:
        return 0
    return (memory_mb + _SLACK_MB) << 20


def compile_frame(lang: Language, tc: Toolchain, job: ProgramJob, output_limit: int,
                  cgroup: bool = True) -> dict:
    """The frame of a compile step (``cgroup``: the memory cgroup bounds the job)."""
    files = source_files(lang, job)
    names = [n for n, _ in files if n != lang.harness_name] + \
        [n for n, _ in files if n == lang.harness_name]
    memory_mb = job.compile_memory_mb
    spec = {
        "step": "compile", "files": [(n, d, False) for n, d in files],
        "argv": compile_argv(lang, tc, names, memory_mb), "env": environment(lang),
        "collect": list(lang.artifacts), "timeout_s": float(job.compile_timeout_s),
        "startup_s": 0.0, "cpu_s": _cpu_s(job.compile_timeout_s),
        # gcc and rustc fail cleanly at RLIMIT_AS; go, javac and tsc reserve more than they use
        "as_bytes": address_space(lang, memory_mb, cgroup or lang.id not in ("c", "cpp", "rust")),
        "output_limit": output_limit, "work_bytes": _COMPILE_WORK_MB << 20,
    }
    return {"exec": spec, "timeout_s": job.compile_timeout_s + 5.0, "memory_mb": memory_mb}


def run_frame(lang: Language, tc: Toolchain, job: ProgramJob,
              files: list[tuple[str, bytes, bool]], *, timeout_s: float, memory_mb: int,
              output_limit: int, work_mb: int, cgroup: bool = True) -> dict:
    """The frame of a run step: the syntax check (interpreted languages), then every test."""
    if lang.id == "java":
        _, main = java_classes(job.source)
        main = main or "Main"
    elif lang.compiled:
        main = lang.artifacts[0]
    else:
        main = files[-1][0]  # the harness, where there is one
    check = None if lang.compiled else check_argv(lang, tc, [n for n, _, _ in files])
    tests = job.tests
    per_test = timeout_s + lang.startup_s + 0.5
    size = sum(len(d) for _, d, _ in files)
    spec = {
        "step": "run", "mode": "calls" if job.calls else "stdin", "files": files,
        "argv": run_argv(lang, tc, main, memory_mb), "env": environment(lang),
        "check": check, "check_timeout_s": float(job.compile_timeout_s),
        "stdins": [s.encode() for s in job.stdins], "calls": job.calls,
        "calls_fd": CALLS_FD,
        "calls_marker": (CALL_START.encode(), CALL_VALUE.encode(), CALL_RAISED.encode()),
        "timeout_s": float(timeout_s), "startup_s": lang.startup_s,
        # a calls process runs every call: its CPU backstop covers them all
        "cpu_s": _cpu_s(lang.startup_s + timeout_s * (job.calls or 1)),
        "as_bytes": address_space(lang, memory_mb, cgroup),
        "output_limit": output_limit, "work_bytes": (work_mb << 20) + size,
        "fail_fast": job.fail_fast,
    }
    budget = (job.compile_timeout_s if check else 0.0) + tests * per_test + 2.0
    return {"exec": spec, "timeout_s": budget, "memory_mb": memory_mb}
