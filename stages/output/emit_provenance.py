"""The provenance columns of an emitted SFT row: where its instruction came from, who judged it,
how its answer was chosen, repaired and tested, and what ``verified`` means.

Each column comes from the stage that makes it: ``miner, template`` from ``clean`` (the mined
instruction's rows), ``judges`` from ``judge`` (every judge with a row on the instruction's
battles), the rest from the repair rows (verify's columns, replaced by the repaired answer's
where a repair succeeded). A column a run does not have (no tests, no repair, an older run) is
null: null means "not measured", never a made-up value.

``verified`` is true only when the answer passed (status ``passed``) *and* its program gate
(the hidden and augmented tests, which repair never shows) passed; a repaired answer that
passes them is verified and flagged ``repaired``.

Example::

    >>> verified_mask(pa.table({"status": ["passed", "passed", "failed"],
    ...                         "program_gate": ["pass", None, "fail"]})).to_pylist()
    [True, False, False]
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from arenaforge.pipeline.stage import StageContext
from arenaforge.pipeline.statuses import NO_TESTS, PASSED
from arenaforge.stages.verification.probe_gate import PROGRAM_PASS

# In emitted column order; names are checked from outside (issue #22's contract).
PROVENANCE_SCHEMA = pa.schema([
    ("repaired", pa.bool_()),
    ("repair_rounds", pa.int64()),
    ("replaced_judge_pick", pa.bool_()),
    ("judge_pick", pa.string()),
    ("selection_rule", pa.string()),
    ("miner", pa.string()),
    ("template", pa.string()),
    ("judges", pa.list_(pa.string())),
    ("tests_visible_passed", pa.int64()),
    ("tests_hidden_passed", pa.int64()),
    ("tests_augmented_passed", pa.int64()),
    ("tests_visible", pa.int64()),
    ("tests_hidden", pa.int64()),
    ("tests_augmented", pa.int64()),
    ("probe_gate", pa.string()),
    ("program_gate", pa.string()),
])
ORIGIN_COLUMNS = ("instruction_id", "miner", "template")  # read from clean
# carried by the repair rows (verify's grading and selection columns, repair's own)
CARRIED = tuple(n for n in PROVENANCE_SCHEMA.names if n not in ("miner", "template", "judges"))
JUDGE_COLUMNS = ("instruction_id", "judge")  # read from judge


def verified_mask(table: pa.Table) -> pa.ChunkedArray:
    """True where ``status`` is passed and ``program_gate`` is pass (a missing gate: False)."""
    if "program_gate" not in table.column_names:
        return pa.chunked_array([pa.array([False] * table.num_rows, pa.bool_())])
    status = pc.equal(table.column("status").cast(pa.string()), PASSED)
    gate = pc.equal(table.column("program_gate").cast(pa.string()), PROGRAM_PASS)
    return pc.fill_null(pc.and_(status, gate), False)


def provenance_columns(selected: pa.Table) -> dict[str, pa.Array | pa.ChunkedArray]:
    """The provenance columns of ``selected`` cast to their emitted types, null when absent."""
    n = selected.num_rows
    return {f.name: (selected.column(f.name).cast(f.type) if f.name in selected.column_names
                     else pa.nulls(n, f.type)) for f in PROVENANCE_SCHEMA}


def fill_from(table: pa.Table, ctx: StageContext, stage: str, column: str) -> pa.Table:
    """Left-join ``column`` from an earlier stage's output when ``table`` lacks it.

    Joins on (instruction_id, model) when the other stage has one row per answer, so a
    per-answer value (a rating, a judge score) never fans out over the other models' rows.
    """
    if column in table.column_names:
        return table
    other = ctx.read(stage, instruction_ids=table.column("instruction_id").to_pylist())
    if column not in other.column_names:
        return table
    keys = [k for k in ("instruction_id", "model") if k in other.column_names]
    # A dict lookup rather than Table.join: Arrow's hash join refuses list columns (the
    # difficulty votes) riding along in the left table.
    values: dict[tuple, object] = {}
    for row in other.select(keys + [column]).to_pylist():
        values.setdefault(tuple(row[k] for k in keys), row[column])
    lookup = zip(*(table.column(k).to_pylist() for k in keys))
    filled = pa.array([values.get(key) for key in lookup], other.schema.field(column).type)
    return table.append_column(column, filled)


def with_origin(table: pa.Table, clean: pa.Table) -> pa.Table:
    """``table`` with ``miner, template`` of each row's instruction from the clean rows.

    Raises:
        ValueError: an instruction has clean rows that disagree on its miner or template.
    """
    origin: dict[str, tuple] = {}
    for row in clean.select(list(ORIGIN_COLUMNS)).to_pylist():
        value = (row["miner"], row["template"])
        seen = origin.setdefault(row["instruction_id"], value)
        if seen != value:
            raise ValueError(f"emit: clean rows of instruction_id={row['instruction_id']} "
                             f"disagree on (miner, template): {seen} vs {value}")
    ids = table.column("instruction_id").to_pylist()
    found = [origin.get(i, (None, None)) for i in ids]
    return _replace(_replace(table, "miner", [m for m, _ in found]),
                    "template", [t for _, t in found])


def with_judges(table: pa.Table, judge: pa.Table) -> pa.Table:
    """``table`` with ``judges``: the sorted judge ids with a row on the instruction's battles
    (null when no judge saw the instruction)."""
    judges: dict[str, set[str]] = {}
    for iid, name in zip(judge.column("instruction_id").to_pylist(),
                         judge.column("judge").to_pylist(), strict=True):
        if name:
            judges.setdefault(iid, set()).add(name)
    ids = table.column("instruction_id").to_pylist()
    return _replace(table, "judges", [sorted(judges[i]) if i in judges else None for i in ids])


def provenance_counts(sft: pa.Table) -> dict[str, int]:
    """Counts the card reports: verified, repaired, replaced judge picks, rows without tests."""
    def count(mask) -> int:
        return int(pc.sum(pc.fill_null(mask, False)).as_py() or 0)

    return {"verified": count(sft.column("verified")),
            "repaired": count(sft.column("repaired")),
            "replaced_judge_pick": count(sft.column("replaced_judge_pick")),
            "without_tests": count(pc.equal(sft.column("status"), NO_TESTS))}


def _replace(table: pa.Table, name: str, values: Sequence) -> pa.Table:
    array = pa.array(values, PROVENANCE_SCHEMA.field(name).type)
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, array)
    return table.append_column(name, array)
