"""The Python path gives the rows it gave before the multi-language wiring: the ``tests`` and
``verify`` stages on a fixed Python table (``python_path_world``) write exactly the rows and
counters recorded in ``tests/data/python_path/golden.json`` (made by the code before the
wiring), whether or not the table carries ``language``/``task_kind`` columns. The stated-output
columns came later; no answer of this world states an output, so they must read ``none``."""

from __future__ import annotations

import json

from python_path_world import GOLDEN, rows

LATER_COLUMNS = {"stated_outputs": "none", "stated_output_mismatch": None}


def test_tests_and_verify_rows_are_unchanged(sandbox_pool):
    now = json.loads(json.dumps(rows(sandbox_pool), sort_keys=True))
    for table in now.values():
        for row in table["verify"]:
            for column, value in LATER_COLUMNS.items():
                assert row.pop(column) == value
    golden = json.loads(GOLDEN.read_text())
    for table in golden:
        for part in golden[table]:
            assert now[table][part] == golden[table][part], f"{table}: {part} changed"
