"""Check a run's emitted rows against references written by hand from each instruction's text.

A reference says what a right answer to one instruction must do, as ``assert`` lines a person
wrote after reading the instruction alone (never the answers), or that the instruction is no
task (``"non_task": true``) or too ambiguous to judge (``"ambiguous": "why"``). Each emitted
row's program runs against its reference in the real sandbox (the program bound to the entry
point the way verify binds it), and the row is ``right``, ``wrong``, ``non_task``,
``ambiguous`` or ``unchecked`` (no reference).

Usage::

    python scripts/check_rows.py artifacts/runs/default --references docs/checks/default-run.json
    python scripts/check_rows.py RUN --references FILE --json out.json

Exit status 1 when a row with ``verified: true`` is wrong, a non-task, or unchecked.
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
    from arenaforge.pipeline.sandbox import SandboxConfig, SandboxPool
    from arenaforge.stages.common.code_extract import function_code
    from arenaforge.stages.verification.entry_points import bind, bound_code
    from arenaforge.stages.verification.execution import execute

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
        code = function_code(row["messages"][-1]["content"], ref["entry_point"])
        binding = bind(code, ref["entry_point"], from_instruction=True)
        program = bound_code(code, binding) if binding.bound_function else code
        jobs.append((program, ref["asserts"]))
        where.append(len(out))
        out.append(dict(verdict, verdict=None, detail=None))
    if jobs:
        with SandboxPool.from_config(SandboxConfig(workers=2)) as pool:
            results = execute(pool, jobs, timeout_s=5.0, fail_fast=False)
        for i, res in zip(where, results):
            ok = res.status == "passed"
            out[i].update(verdict="right" if ok else "wrong",
                          detail=None if ok else f"{res.failed_test}: {res.error_message}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--references", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    references = {r["instruction_id"]: r for r in json.loads(args.references.read_text())}
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
