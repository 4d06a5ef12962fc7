"""The provenance columns of an emitted SFT row: where its instruction came from, who judged it,
how its answer was chosen, repaired and tested, and what ``verified`` means.

Each column comes from the stage that makes it: ``miner, template`` from ``clean`` (the mined
instruction's rows), ``judges`` from ``judge`` (every judge with a row on the instruction's
battles), the rest from the repair rows (verify's columns, replaced by the repaired answer's
where a repair succeeded). A column a run does not have (no tests, no repair, an older run) is
null: null means "not measured", never a made-up value.

``verified`` is verify's (or, for a repaired answer, repair's) ``verified``: the instruction's
tests decide (not ``contradictory_tests``), the answer has usable code, keeps the instruction's
own example, and passes at least ``verify.min_pass_fraction`` of the trusted tests
(``admission`` says where an answer that is not verified stopped). A repaired answer that gets
through is verified and flagged ``repaired``. ``gate_admitted``: admitted by the audit's
calibrated judge gate without execution (its instruction has no usable test); ``test_authors``:
the models whose tests the suite trusts; ``judge_verdicts``: every judge reading of the
instruction's battles, both orders; ``local_share`` and ``margin`` (the winner's final score
minus the runner-up's) from ``rate``; ``kcenter_rank``: the instruction's order of selection in
``compress``.

The evidence columns let a user pick their own precision/yield point: ``pass_fraction`` (the
trusted tests passed over those run: visible, hidden and augmented), ``evidence_passed`` (the
kinds of evidence, ``trusted_by``, of the trusted tests the answer passed, strongest first),
``evidence_strength`` (the strength of the strongest of them; ``evidence.STRENGTH``) and
``other_authors`` (how many test authors other than the answer's own model wrote tests the
suite trusts). The last three are null for a repaired answer (its per-test results live in the
repair rounds, not in the tests stage).

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
from arenaforge.stages.verification.suites import WRITTEN

# In emitted column order; the names are a contract (users select them by name), pinned
# by tests/stages/output/test_emit.py.
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
    ("admission", pa.string()),
    ("gate_admitted", pa.bool_()),
    ("test_authors", pa.list_(pa.string())),
    ("judge_verdicts", pa.list_(pa.struct([
        ("judge", pa.string()), ("order", pa.string()), ("model_a", pa.string()),
        ("model_b", pa.string()), ("verdict", pa.string()), ("score_a", pa.float64()),
        ("score_b", pa.float64()), ("parse_error", pa.string())]))),
    ("local_share", pa.float64()),
    ("margin", pa.float64()),
    ("kcenter_rank", pa.int64()),
    ("pass_fraction", pa.float64()),
    ("evidence_passed", pa.list_(pa.string())),
    ("evidence_strength", pa.int64()),
    ("other_authors", pa.int64()),
])
ORIGIN_COLUMNS = ("instruction_id", "miner", "template")  # read from clean
JUDGE_COLUMNS = ("instruction_id", "judge", "order", "model_a", "model_b", "verdict", "score_a",
                 "score_b", "expected_score_a", "expected_score_b", "parse_error")  # from judge
# read from tests: who wrote the trusted tests, on what evidence, and whose answers passed them
AUTHOR_COLUMNS = ("instruction_id", "author", "survived", "kind", "trusted_by", "strength",
                  "graded_passed_by", "passed_by")
# made by emit or joined from the stages that made them (the rest ride on the repair rows)
JOINED = ("miner", "template", "judges", "gate_admitted", "test_authors", "judge_verdicts",
          "local_share", "margin", "kcenter_rank", "pass_fraction", "evidence_passed",
          "evidence_strength", "other_authors")
# carried by the repair rows (verify's grading and selection columns, repair's own)
CARRIED = tuple(n for n in PROVENANCE_SCHEMA.names if n not in JOINED)


def verified_mask(table: pa.Table) -> pa.ChunkedArray:
    """The answers execution accepted: verify's (or repair's) ``verified`` column; for a run
    made before that column, ``status`` passed and ``program_gate`` pass (a missing gate:
    False)."""
    if "verified" in table.column_names:
        return pc.fill_null(table.column("verified"), False)
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
    """``table`` with ``judges`` (the sorted judge ids with a row on the instruction's battles)
    and ``judge_verdicts`` (every reading of those battles, both orders, in the judge's own
    terms: ``score_a``/``score_b`` the protocol's scores, an expected score for the logprob
    protocols); null when no judge saw the instruction."""
    judges: dict[str, set[str]] = {}
    readings: dict[str, list[dict]] = {}
    for row in judge.to_pylist():
        if not row["judge"]:
            continue
        judges.setdefault(row["instruction_id"], set()).add(row["judge"])
        score = {side: row.get(f"expected_score_{side}") if row.get(f"expected_score_{side}")
                 is not None else row.get(f"score_{side}") for side in ("a", "b")}
        readings.setdefault(row["instruction_id"], []).append(
            {"judge": row["judge"], "order": row.get("order"), "model_a": row.get("model_a"),
             "model_b": row.get("model_b"), "verdict": row.get("verdict"), "score_a": score["a"],
             "score_b": score["b"], "parse_error": row.get("parse_error")})
    ids = table.column("instruction_id").to_pylist()
    table = _replace(table, "judges", [sorted(judges[i]) if i in judges else None for i in ids])
    order = ("judge", "model_a", "model_b", "order")
    return _replace(table, "judge_verdicts",
                    [sorted(readings[i], key=lambda r: tuple(r[k] or "" for k in order))
                     if i in readings else None for i in ids])


def with_test_authors(table: pa.Table, tests: pa.Table) -> pa.Table:
    """``table`` with ``test_authors``: the models whose written tests the instruction's suite
    trusts (sorted; empty when none; the instruction's own example is not a model's)."""
    authors: dict[str, set[str]] = {}
    for row in tests.select(["instruction_id", "author", "survived", "kind"]).to_pylist():
        if row["survived"] and row["kind"] == WRITTEN:
            authors.setdefault(row["instruction_id"], set()).add(row["author"])
    ids = table.column("instruction_id").to_pylist()
    return _replace(table, "test_authors", [sorted(authors.get(i, ())) for i in ids])


def with_evidence(table: pa.Table, tests: pa.Table) -> pa.Table:
    """``table`` (with its ``test_authors``: ``with_test_authors``) with the evidence columns
    of each answer (see the module docstring).

    >>> tests = pa.table({"instruction_id": ["i", "i", "i"], "author": ["a", "b", "instruction"],
    ...     "survived": [True, True, True], "kind": ["written", "written", "example"],
    ...     "trusted_by": ["written+passer", "written", "example"], "strength": [2, 1, 4],
    ...     "graded_passed_by": [["a", "b"], ["b"], ["a", "b"]], "passed_by": [[], [], []]})
    >>> answers = pa.table({"instruction_id": ["i"], "model": ["a"], "repaired": [False],
    ...     "tests_visible_passed": [2], "tests_visible": [3]})
    >>> row = with_evidence(with_test_authors(answers, tests), tests).to_pylist()[0]
    >>> row["evidence_passed"], row["evidence_strength"], row["other_authors"], row["pass_fraction"]
    (['example', 'written+passer'], 4, 1, 0.6666666666666666)
    """
    trusted: dict[str, list[dict]] = {}
    for row in tests.select([c for c in AUTHOR_COLUMNS if c in tests.column_names]).to_pylist():
        if row["survived"] and row.get("trusted_by"):
            trusted.setdefault(row["instruction_id"], []).append(row)
    ids = table.column("instruction_id").to_pylist()
    models = table.column("model").to_pylist()
    repaired = (table.column("repaired").to_pylist() if "repaired" in table.column_names
                else [False] * table.num_rows)
    others = [len(set(authors or ()) - {model})
              for authors, model in zip(table.column("test_authors").to_pylist(), models)]
    passed, strongest = [], []
    for iid, model, fixed in zip(ids, models, repaired):
        rows = trusted.get(iid, [])
        if fixed:
            passed.append(None)
            strongest.append(None)
            continue
        mine = [r for r in rows if model in (r.get("graded_passed_by") or r.get("passed_by") or ())]
        mine.sort(key=lambda r: -(r.get("strength") or 0))
        passed.append(list(dict.fromkeys(r["trusted_by"] for r in mine)))
        strongest.append(mine[0].get("strength") if mine else None)
    table = _replace(table, "evidence_passed", passed)
    table = _replace(table, "evidence_strength", strongest)
    table = _replace(table, "other_authors", others)
    return _replace(table, "pass_fraction", _pass_fraction(table))


def _pass_fraction(table: pa.Table) -> list[float | None]:
    """Trusted tests passed over those run (visible, hidden, augmented); None: none run."""
    def column(name: str) -> list:
        return (table.column(name).to_pylist() if name in table.column_names
                else [None] * table.num_rows)

    splits = ("visible", "hidden", "augmented")
    done = [column(f"tests_{s}_passed") for s in splits]
    total = [column(f"tests_{s}") for s in splits]
    out = []
    for i in range(table.num_rows):
        ran = sum(t[i] or 0 for t in total)
        out.append(sum(d[i] or 0 for d in done) / ran if ran else None)
    return out


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
