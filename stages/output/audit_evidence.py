"""How independent the evidence of a run is: circular tests and the weight of the global rating.

Two figures of ``audit/metrics.json`` (top-level keys):

* ``circular_trusted_tests``: trusted tests written by a model that also judged a battle of the
  same instruction. Such a test and such a verdict are one model's opinion twice, so an audit of
  "judge versus execution" would partly compare the judge with itself; a config that keeps
  ``judge.judges`` and ``tests.authors`` apart has 0 (``config validate`` warns otherwise).
* ``alpha_decisive_share``: the share of instructions with a winner where the global rating
  term, not the instruction's own judge votes, chose it (``rate``'s ``decided_by``; with two
  contestants the ``bt_blend`` rule's global term decides most of them).

Example:
    >>> import pandas as pd
    >>> tests = pd.DataFrame({"instruction_id": ["i", "i"], "author": ["m1", "m2"],
    ...                       "survived": [True, True]})
    >>> judge = pd.DataFrame({"instruction_id": ["i"], "judge": ["m2"]})
    >>> rate = pd.DataFrame({"instruction_id": ["i"], "winner": ["m1"], "decided_by": ["global"]})
    >>> m = evidence_metrics(tests, judge, rate)
    >>> m["circular_trusted_tests"], m["alpha_decisive_share"]
    (1, 1.0)
"""

from __future__ import annotations

import pandas as pd


def evidence_metrics(tests: pd.DataFrame | None, judge: pd.DataFrame,
                     rate: pd.DataFrame) -> dict:
    """``circular_trusted_tests`` (with ``trusted_tests`` and ``circular_by_author``),
    ``alpha_decisive_share`` (with ``decided_by`` counts); null where not measured."""
    out: dict = {"circular_trusted_tests": None, "trusted_tests": None, "circular_by_author": {},
                 "alpha_decisive_share": None, "decided_by": {}}
    if tests is not None and len(tests):
        trusted = tests[tests["survived"].fillna(False).astype(bool)]
        judges = judge.dropna(subset=["judge"]).groupby("instruction_id")["judge"].agg(set)
        circular = trusted[[a in judges.get(i, ()) for i, a in
                            zip(trusted["instruction_id"], trusted["author"])]]
        out.update(circular_trusted_tests=len(circular), trusted_tests=len(trusted),
                   circular_by_author={str(k): int(v) for k, v in
                                       circular["author"].value_counts().items()})
    if "decided_by" in rate.columns:
        per = rate.dropna(subset=["winner"]).drop_duplicates("instruction_id")
        counts = per["decided_by"].value_counts()
        out["decided_by"] = {str(k): int(v) for k, v in counts.items()}
        if len(per):
            out["alpha_decisive_share"] = float(counts.get("global", 0) / len(per))
    return out
