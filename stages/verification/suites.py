"""An instruction's trusted tests as the execution stages use them: visible, hidden, augmented.

``trusted_suites(tests_table)`` turns the ``tests`` stage's rows into one ``Suite`` per
instruction: its entry point (and whether the instruction named it), the names the authors
called, the call arities (every written or generated call, so that each stage binds a
candidate the same way), the instruction's example, the surviving tests by split (the example's
own row is a visible test, first) and whether the evidence decided (``status``: ``decided``,
``contradictory_tests`` or ``answers_disagree``, ``arenaforge.stages.verification.evidence``). Rows from before the split
existed (``kind``/``split`` null) count as written and hidden: nothing unknown is ever shown to
repair.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pyarrow as pa
from arenaforge.pipeline.statuses import CONTRADICTORY_TESTS
from arenaforge.stages.verification.entry_points import Binding, bind, call_arities
from arenaforge.stages.verification.test_split import HIDDEN, VISIBLE

WRITTEN, AUGMENTED, EXAMPLE_KIND = "written", "augmented", "example"
INSTRUCTION_AUTHOR = "instruction"  # the author of an example row: the instruction itself
SUITE_COLUMNS = ("instruction_id", "author", "test_idx", "test_code", "survived", "kind",
                 "split", "entry_point", "entry_source", "signature", "author_name", "example", "call",
                 "suite_status", "suite_detail")
DECIDED = "decided"  # the instruction's evidence decides (``arenaforge.stages.verification.evidence``)
_KIND_ORDER = {EXAMPLE_KIND: 0, WRITTEN: 1, AUGMENTED: 2}


@dataclasses.dataclass(frozen=True)
class Suite:
    """The trusted tests of one instruction and what binding a candidate to them needs."""

    instruction_id: str
    entry_point: str | None
    from_instruction: bool = False
    signature: str | None = None
    author_names: tuple[str, ...] = ()
    arities: tuple[int, ...] = ()
    example: str | None = None
    visible: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()
    augmented: tuple[str, ...] = ()
    status: str = DECIDED
    detail: str | None = None

    @property
    def contradictory(self) -> bool:
        """The tests contradict each other: none of them accepts or rejects an answer."""
        return self.status == CONTRADICTORY_TESTS

    @property
    def graded(self) -> tuple[str, ...]:
        """Every trusted test, in split order (what an original answer is graded on)."""
        return (*self.visible, *self.hidden, *self.augmented)

    @property
    def example_only(self) -> bool:
        """The one trusted test is the instruction's own example: one call, not a suite. It
        still rejects an answer that fails it; it alone verifies none (evidence rule 7)."""
        return bool(self.example) and self.graded == (self.example,)

    @property
    def certifying(self) -> tuple[str, ...]:
        """The tests repair never shows (what certifies a repaired answer)."""
        return (*self.hidden, *self.augmented)

    def bind(self, code: str | None) -> Binding | None:
        """The candidate's binding (``None`` when the instruction has no entry point)."""
        if self.entry_point is None:
            return None
        return bind(code, self.entry_point, from_instruction=self.from_instruction,
                    arities=self.arities, author_names=self.author_names)


def trusted_suites(tests: pa.Table) -> dict[str, Suite]:
    """One ``Suite`` per instruction of a ``tests`` table (any subset of ``SUITE_COLUMNS``
    beyond the first five; missing ones are taken as null)."""
    names = [c for c in SUITE_COLUMNS if c in tests.column_names]
    return suites_of_rows(tests.select(names).to_pylist())


def suites_of_rows(rows: list[dict]) -> dict[str, Suite]:
    """``trusted_suites`` on rows as dicts (the tests stage binds with it before it writes)."""
    rows = list(rows)
    rows.sort(key=lambda r: (r["instruction_id"], _KIND_ORDER.get(r.get("kind"), 1),
                             r["author"] or "", r["test_idx"]))
    by_iid: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_iid[r["instruction_id"]].append(r)
    return {iid: _suite(iid, rs) for iid, rs in by_iid.items()}


def _suite(iid: str, rows: list[dict]) -> Suite:
    entry = next((r["entry_point"] for r in rows if r.get("entry_point")), None)
    if entry is None:
        return Suite(iid, None)
    split: dict[str, list[str]] = {VISIBLE: [], HIDDEN: [], AUGMENTED: []}
    for r in rows:
        if r["survived"] and r["test_code"]:
            key = AUGMENTED if r.get("kind") == AUGMENTED else (r.get("split") or HIDDEN)
            split[key].append(r["test_code"])
    codes = [c for r in rows for c in (r["test_code"], r.get("call")) if c]
    return Suite(
        iid, entry,
        from_instruction=any(r.get("entry_source") == "instruction" for r in rows),
        signature=next((r["signature"] for r in rows if r.get("signature")), None),
        author_names=tuple(dict.fromkeys(r["author_name"] for r in rows
                                         if r.get("author_name"))),
        arities=call_arities(codes, entry),
        example=next((r["example"] for r in rows if r.get("example")), None),
        visible=tuple(split[VISIBLE]), hidden=tuple(split[HIDDEN]),
        augmented=tuple(split[AUGMENTED]),
        status=next((r["suite_status"] for r in rows if r.get("suite_status")), DECIDED),
        detail=next((r["suite_detail"] for r in rows if r.get("suite_detail")), None))
