"""Check a run's emitted rows against references written by hand from each instruction's text.

A reference says what a right answer to one instruction must do, as ``assert`` lines a person
wrote after reading the instruction alone (never the answers), or that the instruction is no
task (``"non_task": true``) or too ambiguous to judge (``"ambiguous": "why"``). Each emitted
row's program runs against its reference in the real sandbox (the program bound to the entry
point the way verify binds it), and the row is ``right``, ``wrong``, ``non_task``,
``ambiguous`` or ``unchecked`` (no reference). A response a person read and judged on what the
asserts cannot check (prose that contradicts its code, an algorithm asked for and not given) is
listed under ``read_by_hand``: ``{"response_contains": TEXT, "verdict": ..., "why": ...}``.

A reference may also hold a ``reference`` program (a right implementation written by hand); it
must pass the reference's own asserts (``--self-check``), and with ``--tests`` every test the
run's ``tests`` stage wrote for a referenced instruction is run against it: a test the reference
fails is a wrong test. Counted per ``reason`` (null: trusted), that says how many of the tests a
trust rule dropped were right, and how many it trusted were wrong.

Usage::

    python scripts/check_rows.py artifacts/runs/default --references docs/checks/default-run.json
    python scripts/check_rows.py RUN --references FILE --json out.json
    python scripts/check_rows.py RUN --references FILE --tests     # grade the run's tests
    python scripts/check_rows.py --references FILE --self-check    # the references themselves

Exit status 1 when a row with ``verified: true`` is wrong, a non-task, or unchecked (or, with
``--self-check``, when a reference program fails its own asserts).
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def load_rows(run_dir: Path) -> list[dict]:
    files = sorted(glob.glob(str(run_dir / "dataset" / "*.parquet")))
    if not files:
        raise SystemExit(f"{run_dir}: no dataset/*.parquet (has the run emitted?)")
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pylist()


def check(rows: list[dict], references: dict[str, dict]) -> list[dict]:
    """One verdict per row: ``instruction_id, verified, verdict, detail``."""
    from arenaforge.stages.common.code_extract import function_code
    from arenaforge.stages.verification.entry_points import bind, bound_code

    out, jobs, where = [], [], []
    for row in rows:
        ref = references.get(row["instruction_id"])
        verdict = {"instruction_id": row["instruction_id"], "verified": row["verified"],
                   "source_model": row["source_model"],
                   "instruction": row["messages"][-2]["content"][:120]}
        if ref is None:
            out.append(dict(verdict, verdict="unchecked", detail="no reference"))
            continue
        if ref.get("non_task"):
            out.append(dict(verdict, verdict="non_task", detail=ref.get("note")))
            continue
        if ref.get("ambiguous"):
            out.append(dict(verdict, verdict="ambiguous", detail=ref["ambiguous"]))
            continue
        read = next((h for h in ref.get("read_by_hand", ())
                     if h["response_contains"] in row["messages"][-1]["content"]), None)
        if read is not None:  # a person read this very response: the asserts cannot say it
            out.append(dict(verdict, verdict=read["verdict"], detail=read["why"]))
            continue
        code = function_code(row["messages"][-1]["content"], ref["entry_point"])
        binding = bind(code, ref["entry_point"], from_instruction=True)
        program = bound_code(code, binding) if binding.bound_function else code
        jobs.append((program, ref["asserts"]))
        where.append(len(out))
        out.append(dict(verdict, verdict=None, detail=None))
    if jobs:
        for i, res in zip(where, _run(jobs)):
            ok = res.status == "passed"
            out[i].update(verdict="right" if ok else "wrong",
                          detail=None if ok else f"{res.failed_test}: {res.error_message}")
    return out


def _run(jobs: list[tuple[str, list[str]]]) -> list:
    from arenaforge.pipeline.sandbox import SandboxConfig, SandboxPool
    from arenaforge.stages.verification.execution import execute

    with SandboxPool.from_config(SandboxConfig(workers=2)) as pool:
        return execute(pool, jobs, timeout_s=5.0, fail_fast=False)


def self_check(references: dict[str, dict]) -> int:
    """Every reference program against its own asserts; the number that fail."""
    refs = [r for r in references.values() if r.get("reference")]
    bad = 0
    for ref, res in zip(refs, _run([(r["reference"], r["asserts"]) for r in refs])):
        if res.status != "passed":
            bad += 1
            print(f"reference fails: {ref['instruction_id'][:8]} {res.failed_test}: "
                  f"{res.error_message}")
    print(f"{len(refs) - bad} of {len(refs)} reference programs pass their asserts")
    return bad


def grade_tests(run_dir: Path, references: dict[str, dict]) -> dict[str, dict[str, int]]:
    """Each written test of a referenced instruction against the reference program:
    ``{reason or 'trusted': {right, wrong}}`` (the example's row counts as ``example``)."""
    tables = [pq.read_table(f) for f in sorted(glob.glob(str(run_dir / "stages" / "tests" /
                                                          "part-*[0-9].parquet")))]
    rows = [r for r in pa.concat_tables(tables, promote_options="default").to_pylist()
            if r["test_code"] and references.get(r["instruction_id"], {}).get("reference")
            and r["kind"] != "augmented"]
    from arenaforge.stages.verification.entry_points import bind, bound_code

    jobs = []
    for r in rows:
        ref = references[r["instruction_id"]]["reference"]
        b = bind(ref, r["entry_point"], from_instruction=True)
        jobs.append((bound_code(ref, b) if b.bound_function else ref, [r["test_code"]]))
    counts: dict[str, dict[str, int]] = {}
    for r, res in zip(rows, _run(jobs)):
        key = "example" if r["kind"] == "example" else (r["reason"] or "trusted")
        slot = counts.setdefault(key, {"right": 0, "wrong": 0})
        slot["right" if res.status == "passed" else "wrong"] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, nargs="?")
    parser.add_argument("--references", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tests", action="store_true", help="grade the run's tests instead")
    parser.add_argument("--self-check", action="store_true")
    args = parser.parse_args(argv)
    references = {r["instruction_id"]: r for r in json.loads(args.references.read_text())}
    if args.self_check:
        return 1 if self_check(references) else 0
    if args.run_dir is None:
        parser.error("give a run directory")
    if args.tests:
        counts = grade_tests(args.run_dir, references)
        for key, c in sorted(counts.items()):
            print(f"{key:28} right {c['right']:4}  wrong {c['wrong']:4}")
        if args.json:
            args.json.write_text(json.dumps(counts, indent=2))
        return 0
    verdicts = check(load_rows(args.run_dir), references)
    counts: dict[str, int] = {}
    for v in verdicts:
        key = f"{'verified' if v['verified'] else 'unverified'} {v['verdict']}"
        counts[key] = counts.get(key, 0) + 1
        print(f"{v['verdict']:10} {'V' if v['verified'] else '-'} {v['instruction_id'][:8]} "
              f"{v['source_model']:20} {v['instruction'][:70]!r}"
              + (f"\n           {v['detail'][:160]}" if v["detail"] and v["verdict"] != "right"
                 else ""))
    print(json.dumps(counts, sort_keys=True))
    if args.json:
        args.json.write_text(json.dumps({"counts": counts, "rows": verdicts}, indent=2))
    bad = [v for v in verdicts if v["verified"] and v["verdict"] in ("wrong", "non_task",
                                                                      "unchecked")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
