"""How much of HumanEval translates to each language, and is the translation right?

For each language: the problems translated (``pipeline/apps/humaneval_translate``), the
others by skip reason, and, for every translated problem, whether its harness compiles (parses,
for JavaScript) around a stub that returns a default value. Before that, the Python round-trip:
HumanEval's canonical solutions against the translated cases in the Python harness (every one
must pass; see ``pipeline/apps/humaneval_selfcheck``). The numbers in docs/EVALUATION.md come
from this script.

Usage::

    python scripts/check_humaneval_translation.py                     # all eight languages
    python scripts/check_humaneval_translation.py --language cpp --language rust --json out.json

Exit status 1 when the round-trip or a compile fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from arenaforge.pipeline.apps.evaluate import load_problems
from arenaforge.pipeline.apps.humaneval_selfcheck import python_roundtrip, stub_compiles
from arenaforge.pipeline.apps.humaneval_translate import LANGUAGES
from arenaforge.pipeline.sandbox import SandboxPool
from arenaforge.pipeline.sandbox.config import SandboxConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--language", action="append", choices=LANGUAGES,
                        help="a language to check (repeatable; default all eight)")
    parser.add_argument("--limit", type=int, default=None, help="the first N problems only")
    parser.add_argument("--json", type=Path, default=None, help="write the report here too")
    args = parser.parse_args(argv)
    problems = load_problems("humaneval", args.limit)
    report: dict = {"n_problems": len(problems), "languages": {}}
    ok = True
    pool = SandboxPool.from_config(SandboxConfig())
    try:
        start = time.perf_counter()
        trip = python_roundtrip(problems, pool)
        report["python_roundtrip"] = {"checked": trip.checked, "passed": trip.passed,
                                      "failures": dict(trip.failures),
                                      "seconds": round(time.perf_counter() - start, 1)}
        print(f"python round-trip: {trip.passed}/{trip.checked} canonical solutions pass "
              "their translated cases", flush=True)
        for task_id, why in trip.failures:
            print(f"  FAIL {task_id}: {why}")
        ok &= trip.passed == trip.checked
        for lang in args.language or LANGUAGES:
            start = time.perf_counter()
            compiled, skipped = stub_compiles(problems, lang, pool)
            reasons = Counter(exc.reason for exc in skipped.values())
            seconds = round(time.perf_counter() - start, 1)
            report["languages"][lang] = {
                "translated": compiled.checked, "harness_compiles": compiled.passed,
                "skipped": dict(sorted(reasons.items())),
                "skipped_problems": {t: str(exc) for t, exc in skipped.items()},
                "compile_failures": dict(compiled.failures), "seconds": seconds}
            print(f"{lang:<11} translated {compiled.checked:>3}  harness compiles "
                  f"{compiled.passed:>3}  skipped {sum(reasons.values()):>3} "
                  f"{dict(sorted(reasons.items()))}  ({seconds} s)", flush=True)
            for task_id, why in compiled.failures:
                print(f"  COMPILE FAIL {task_id}: {why}")
            ok &= compiled.passed == compiled.checked
    finally:
        pool.close()
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
