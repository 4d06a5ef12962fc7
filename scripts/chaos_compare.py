"""Compare a faulted run directory with a clean one, row by row by key (``scripts/chaos.py``).

A row's key is the values of its identity columns (:data:`KEY_COLUMNS` that its stage has:
``instruction_id``, ``task_id`` (a mined source repeats some instructions) and, where a
stage makes several rows per instruction, ``model``, ``judge``, ``order``, ``author``,
``test_idx``, ...); a dropped row's key comes from the row it carries. Per stage, over its kept and dropped rows together:

* ``duplicates``: rows of the faulted run beyond the number of rows the clean run has under
  their key (at least one): a row written twice;
* ``lost``: keys of the clean run with no row at all, kept or dropped, in the faulted run,
  whose instruction nothing else changed: a row that went missing;
* ``changed``: keys in both runs whose rows differ: other values, or kept in one run and
  dropped in the other (a row a fault dropped after its retries); and the keys missing after
  such a change to their instruction (a battle of an answer a fault dropped is never judged).
  Each is listed with why (the drop's reason and detail, the columns that differ, or the
  change it follows), and none counts as lost; ``changed_instructions`` counts the
  instructions any change touched;
* ``extra``: keys only the faulted run has (rows that follow from a changed one).

A row whose text a fault changed (a mined request emptied after its retries) has another
``instruction_id``; where a stage has ``task_id`` (``mine``, ``clean``, ``decontaminate``: the
planned sample or the file row) a clean key and a faulted key that differ in
``instruction_id`` alone are that one row, changed, and both instructions count as touched.

Fields that measure time (:data:`VOLATILE_COLUMNS`, at any depth: ``tests`` records each
candidate run's ``duration_s``) are left out of the comparison. The
dataset (every Parquet file under ``dataset/``) is compared whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

KEY_COLUMNS = ("instruction_id", "task_id", "model", "model_a", "model_b", "judge", "order",
               "author", "test_idx", "kind")
# wall-clock measurements: a faulted run on a busier machine takes other times
VOLATILE_COLUMNS = frozenset({"duration_s"})
EXAMPLES = 5  # rows listed per stage and problem


def _steady(value: Any) -> Any:
    """``value`` without the volatile columns, at any depth (a test's runs record theirs).

    >>> _steady({"a": 1, "duration_s": 2.0, "runs": [{"duration_s": 3.0, "ok": True}]})
    {'a': 1, 'runs': [{'ok': True}]}
    """
    if isinstance(value, dict):
        return {k: _steady(v) for k, v in value.items() if k not in VOLATILE_COLUMNS}
    if isinstance(value, list):
        return [_steady(v) for v in value]
    return value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def row_key(row: dict[str, Any]) -> tuple:
    """The identity of a row: its key columns' values.

    >>> row_key({"instruction_id": "a", "model": "m", "response": "x"})
    (('instruction_id', 'a'), ('model', 'm'))
    """
    return tuple((c, row[c]) for c in KEY_COLUMNS if c in row)


def _entries(kept: Iterable[dict], dropped: Iterable[dict]) -> dict[tuple, list[dict]]:
    """``{key: [entry]}``; an entry is ``{"where", "content", "row", "reason", "detail"}``."""
    out: dict[tuple, list[dict]] = {}
    for row in kept:
        content = _steady(row)
        out.setdefault(row_key(row), []).append(
            {"where": "kept", "content": _canonical(content), "row": content})
    for drop in dropped:
        row = json.loads(drop["row"]) if drop.get("row") else {}
        row.setdefault("instruction_id", drop.get("instruction_id"))
        content = _steady(row)
        out.setdefault(row_key(row), []).append(
            {"where": "dropped", "content": _canonical([drop["reason"], content]), "row": content,
             "reason": drop["reason"], "detail": drop.get("detail")})
    return out


def _why(clean: list[dict], faulted: list[dict]) -> str:
    """Why the rows of one key differ, in words."""
    gone = [e for e in faulted if e["where"] == "dropped"]
    if gone and all(e["where"] == "kept" for e in clean):
        detail = (gone[0].get("detail") or "")[:300]
        return f"dropped in the faulted run ({gone[0]['reason']}): {detail}"
    if any(e["where"] == "dropped" for e in clean) and all(e["where"] == "kept" for e in faulted):
        return f"kept in the faulted run, dropped in the clean one ({clean[0].get('reason')})"
    a, b = clean[0]["row"], faulted[0]["row"]
    differ = sorted(k for k in set(a) | set(b) if _canonical(a.get(k)) != _canonical(b.get(k)))
    return "values differ: " + ", ".join(differ)


def compare_tables(clean: dict[tuple, list[dict]], faulted: dict[tuple, list[dict]],
                   touched: dict[str, str] | None = None, stage: str = "") -> dict[str, Any]:
    """The counts and examples of one stage (module docstring) from :func:`_entries`.

    ``touched``: ``{instruction_id: what changed}`` of the stages before, updated with this
    one's changes. A clean row missing from the faulted run is a consequence, counted as
    changed, when its instruction changed before or has other rows here that changed.
    """
    touched = {} if touched is None else touched
    out: dict[str, Any] = {"rows_clean": sum(map(len, clean.values())),
                           "rows_faulted": sum(map(len, faulted.values())),
                           "duplicates": 0, "lost": 0, "changed": 0, "extra": 0, "examples": {}}

    def note(kind: str, key: tuple, why: str | None = None) -> None:
        examples = out["examples"].setdefault(kind, [])
        if len(examples) < EXAMPLES:
            examples.append({"key": dict(key), **({"why": why} if why else {})})

    renamed = _renamed([k for k in clean if k not in faulted],
                       [k for k in faulted if k not in clean])
    for old, new in renamed.items():
        out["changed"] += 1
        why = _why(clean[old], faulted[new])
        note("changed", old, why)
        for key in (old, new):
            touched.setdefault(dict(key).get("instruction_id"), f"{stage}: {why}"[:300])
    paired = set(renamed) | set(renamed.values())
    missing = []
    for key in (clean.keys() | faulted.keys()) - paired:
        c, f = clean.get(key, []), faulted.get(key, [])
        iid = dict(key).get("instruction_id")
        if len(f) > max(len(c), 1):
            out["duplicates"] += len(f) - max(len(c), 1)
            note("duplicates", key, f"{len(f)} rows, clean run {len(c)}")
        if not f:
            missing.append(key)
        elif not c:
            out["extra"] += len(f)
            note("extra", key)
            touched.setdefault(iid, f"{stage}: a row the clean run has not")
        elif {e["content"] for e in c} != {e["content"] for e in f}:
            out["changed"] += 1
            why = _why(c, f)
            note("changed", key, why)
            touched.setdefault(iid, f"{stage}: {why}"[:300])
    for key in missing:
        iid = dict(key).get("instruction_id")
        if iid in touched:
            out["changed"] += len(clean[key])
            note("changed", key, f"missing, after a change to its instruction ({touched[iid]})")
        else:
            out["lost"] += len(clean[key])
            note("lost", key)
    return out


def _renamed(only_clean: list[tuple], only_faulted: list[tuple]) -> dict[tuple, tuple]:
    """``{clean key: faulted key}`` of keys with a ``task_id`` that differ in
    ``instruction_id`` alone (one row whose text changed).

    >>> _renamed([(("instruction_id", "a"), ("task_id", "t1"))],
    ...          [(("instruction_id", "b"), ("task_id", "t1")), (("instruction_id", "c"),)])
    {(('instruction_id', 'a'), ('task_id', 't1')): (('instruction_id', 'b'), ('task_id', 't1'))}
    """
    def rest(key: tuple) -> tuple | None:
        named = dict(key)
        if "task_id" not in named:
            return None
        return tuple(item for item in key if item[0] != "instruction_id")

    faulted = {r: key for key in only_faulted if (r := rest(key)) is not None}
    return {key: faulted[r] for key in only_clean if (r := rest(key)) in faulted}


def read_stage(run_dir: Path, stage: str) -> dict[tuple, list[dict]] | None:
    """A complete stage's kept and dropped rows as :func:`_entries` (None: not complete)."""
    from arenaforge.pipeline.store import RunStore

    store = RunStore(run_dir).stage(stage)
    if store.success() is None:
        return None
    return _entries(store.read().to_pylist(), store.read("dropped").to_pylist())


def dataset_rows(run_dir: Path) -> list[str] | None:
    """Every emitted row (all splits), canonical and sorted; None when nothing was emitted."""
    files = sorted((run_dir / "dataset").glob("*.parquet"))
    if not files:
        return None
    return sorted(_canonical({"file": f.name, **row})
                  for f in files for row in pq.read_table(f).to_pylist())


def compare_runs(clean_dir: Path, faulted_dir: Path, stages: list[str]) -> dict[str, Any]:
    """Per stage and in total: duplicates, lost, changed, extra; and whether the datasets are
    equal. A stage incomplete in either run counts all its clean rows as lost."""
    per_stage: dict[str, Any] = {}
    touched: dict[str, str] = {}
    for stage in stages:
        clean, faulted = read_stage(clean_dir, stage), read_stage(faulted_dir, stage)
        if clean is None:
            raise ValueError(f"{clean_dir}: stage {stage!r} is not complete in the clean run")
        per_stage[stage] = compare_tables(clean, faulted or {}, touched, stage)
        per_stage[stage]["complete"] = faulted is not None
    totals = {k: sum(s[k] for s in per_stage.values())
              for k in ("duplicates", "lost", "changed", "extra")}
    totals["changed_instructions"] = len(touched)
    clean_rows, faulted_rows = dataset_rows(clean_dir), dataset_rows(faulted_dir)
    return {**totals,
            "dataset_rows_clean": len(clean_rows or []),
            "dataset_rows_faulted": len(faulted_rows or []),
            "dataset_equal_to_clean": clean_rows is not None and clean_rows == faulted_rows,
            "stages": per_stage}
