"""How far execution itself can be trusted: Refine@k and the two gates (pure functions).

The audit stage adds two sections to ``audit/metrics.json`` from these:

* ``refine_at_k``: among selected answers that had trusted tests, the share that passes after
  at most k repair rounds, k = 0..R (k = 0: the original answer passed), each with an exact
  (Clopper-Pearson) 95% interval. Computed from the ``repair`` stage's rows: a row passes
  within k when it passed without repair (k >= 0) or was repaired in at most k rounds.
* ``gates``: the probe gate (the answer defines the requested function, imports, runs the
  instruction's own example) against the program gate (the hidden + augmented suite), on
  every verified answer (one row per instruction and model, before repair): how many rows
  each rejects, the 2x2 table on rows both judged, the share where they agree and Cohen's
  kappa.
* ``languages`` (only when some verify row is not a Python function: its ``language`` and
  ``task_kind``): per ``<language>.<task_kind>``, the answers, those with trusted tests, the
  ones that do not compile (an answer's failure, apart from the others) and the verified share
  of the tested with its exact interval.

Example::

    >>> rows = pd.DataFrame({"selected": [True, True, True], "status": ["passed"] * 3,
    ...                      "repaired": [False, True, False], "repair_rounds": [0, 1, 0]})
    >>> [(r["k"], r["passed"], r["n"]) for r in refine_at_k(rows, rounds=1)]
    [(0, 2, 3), (1, 3, 3)]
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import pandas as pd
from arenaforge.pipeline.statuses import NO_TESTS, PASSED
from arenaforge.stages.common.intervals import proportion
from arenaforge.stages.output.audit_stats import cohen_kappa, jsonable
from arenaforge.stages.verification.probe_gate import PASS as PROBE_PASS
from arenaforge.stages.verification.probe_gate import PROGRAM_FAIL, PROGRAM_PASS

REFINE_COLUMNS = ("instruction_id", "model", "selected", "status", "repaired", "repair_rounds",
                  "verified", "tests_total")
GATE_COLUMNS = ("probe_gate", "program_gate")
_ROUND_KEY = re.compile(r"^(?:refine\.passed_within|repaired_within)\.(\d+)$")


def repair_rounds_limit(stats: Mapping[str, float], rows: pd.DataFrame | None = None) -> int:
    """R, the most repair rounds the run allowed.

    Read from the repair stage's stats (``refine.passed_within.<k>`` / ``repaired_within.<k>``
    for k up to R), so Refine@R is reported even when every repair succeeded early; without
    them, the most rounds any row took.
    """
    ks = [int(m.group(1)) for key in stats if (m := _ROUND_KEY.match(key))]
    if ks:
        return max(ks)
    if rows is not None and "repair_rounds" in rows and len(rows):
        return int(pd.to_numeric(rows["repair_rounds"]).fillna(0).max())
    return 0


def refine_at_k(rows: pd.DataFrame, rounds: int) -> list[dict]:
    """Pass rate of the selected, tested answers after at most k repair rounds, k = 0..rounds.

    Args:
        rows: the repair stage's rows (``selected, status, repaired, repair_rounds``; status
            is the repaired answer's where a repair succeeded).
        rounds: R.

    Returns:
        ``[{k, passed, n, rate, ci_low, ci_high}]``; ``n`` is the same for every k (selected
        answers whose instruction had trusted tests that decide: ``tests_total`` above 0, or,
        for rows from before that column, a status other than ``no_tests``). An answer counts
        as passed when verify (or repair) verified it (``verified``; before that column:
        status ``passed``).
    """
    missing = [c for c in ("selected", "status", "repaired", "repair_rounds")
               if c not in rows.columns]
    if missing:
        raise ValueError(f"refine_at_k: repair rows lack column(s) {missing}")
    selected = rows["selected"].fillna(False).astype(bool).to_numpy()
    status = rows["status"].to_numpy(dtype=object)
    if "tests_total" in rows.columns:
        tested = selected & (pd.to_numeric(rows["tests_total"]).fillna(0).to_numpy() > 0)
    else:
        tested = selected & (status != NO_TESTS) & pd.notna(status)
    repaired = rows["repaired"].fillna(False).astype(bool).to_numpy()
    used = pd.to_numeric(rows["repair_rounds"]).fillna(0).to_numpy()
    passed = (rows["verified"].fillna(False).astype(bool).to_numpy()
              if "verified" in rows.columns else status == PASSED)
    original = passed & ~repaired
    out = []
    for k in range(rounds + 1):
        within = original | (repaired & passed & (used <= k))
        stat = proportion(int((within & tested).sum()), int(tested.sum()))
        out.append({"k": k, "passed": stat["k"], "n": stat["n"], "rate": stat["rate"],
                    "ci_low": stat["ci_low"], "ci_high": stat["ci_high"]})
    return out


def repair_outcome(rows: pd.DataFrame) -> dict:
    """Repaired over attempted (an answer went back to its author at least once), with its
    exact interval: ``{k, n, rate, ci_low, ci_high}``."""
    attempted = pd.to_numeric(rows["repair_rounds"]).fillna(0).to_numpy() > 0
    repaired = rows["repaired"].fillna(False).astype(bool).to_numpy()
    return proportion(int((repaired & attempted).sum()), int(attempted.sum()))


def gate_agreement(rows: pd.DataFrame) -> dict:
    """The probe gate against the program gate, per answer.

    Args:
        rows: one row per answer with ``probe_gate`` (``pass`` or the rejection reason) and
            ``program_gate`` (``pass`` | ``fail`` | ``no_tests``); null: not recorded.

    Returns:
        ``{rows, probe: {reason: n}, program: {verdict: n}, probe_rejected, program_rejected,
        table: {probe_pass|probe_reject: {program_pass, program_fail}}, agreement: {k, n, rate,
        ci_low, ci_high}, kappa}``; the table, agreement and kappa cover the rows where the
        program gate ran (``pass`` or ``fail``) and the probe gate was recorded.
    """
    missing = [c for c in GATE_COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"gate_agreement: rows lack column(s) {missing}")
    probe = rows["probe_gate"].to_numpy(dtype=object)
    program = rows["program_gate"].to_numpy(dtype=object)
    both = pd.notna(probe) & np.isin(program, (PROGRAM_PASS, PROGRAM_FAIL))
    probe_ok = probe[both] == PROBE_PASS
    program_ok = program[both] == PROGRAM_PASS
    table = {f"probe_{p}": {f"program_{q}": int(((probe_ok == (p == "pass"))
                                                   & (program_ok == (q == "pass"))).sum())
                            for q in ("pass", "fail")} for p in ("pass", "reject")}
    return {
        "rows": len(rows),
        "probe": _counts(probe), "program": _counts(program),
        "probe_rejected": int((pd.notna(probe) & (probe != PROBE_PASS)).sum()),
        "program_rejected": int((program == PROGRAM_FAIL).sum()),
        "table": table,
        "agreement": proportion(int((probe_ok == program_ok).sum()), int(both.sum())),
        "kappa": cohen_kappa(probe_ok, program_ok),
    }


def _counts(values: np.ndarray) -> dict[str, int]:
    return {str(k): int(v) for k, v in
            pd.Series(values, dtype=object).fillna("not recorded").value_counts().items()}


def verification_metrics(verify: pd.DataFrame, repair: pd.DataFrame | None,
                         repair_stats: Mapping[str, float]) -> dict:
    """The ``refine_at_k`` and ``gates`` sections of metrics.json (each when its data exists).

    Args:
        verify: the verify rows (the audit's input); ``gates`` needs ``probe_gate`` and
            ``program_gate``.
        repair: the repair rows, None when the run had no repair stage.
        repair_stats: the repair stage's stats (for R).
    """
    out: dict = {}
    if repair is not None:
        out["refine_at_k"] = refine_at_k(repair, repair_rounds_limit(repair_stats, repair))
        out["repair"] = repair_outcome(repair)
    if all(c in verify.columns for c in GATE_COLUMNS):
        out["gates"] = gate_agreement(verify)
    languages = language_metrics(verify)
    if languages:
        out["languages"] = languages
    return jsonable(out)


def language_metrics(verify: pd.DataFrame) -> dict:
    """Per ``<language>.<task_kind>`` (every task present, once any is not a Python function):
    ``answers``, ``tested`` (trusted tests), ``compile_errors`` and ``verified`` (of the
    tested, with its exact interval); ``{}`` for a run of Python functions alone."""
    from arenaforge.stages.common.task_kinds import row_language, row_task_kind, uses_python_path

    if "language" not in verify.columns and "task_kind" not in verify.columns:
        return {}
    n = len(verify)
    langs = verify["language"] if "language" in verify.columns else [None] * n
    kinds = verify["task_kind"] if "task_kind" in verify.columns else [None] * n
    tasks = [(row_language(a), row_task_kind(b)) for a, b in zip(langs, kinds)]
    if all(uses_python_path(*t) for t in tasks):
        return {}
    column = (lambda name: verify[name].tolist() if name in verify.columns else [None] * n)
    statuses, classes, verified = column("status"), column("error_class"), column("verified")
    out: dict = {}
    for key in sorted(set(tasks)):
        rows = [i for i, t in enumerate(tasks) if t == key]
        tested = [i for i in rows if statuses[i] != NO_TESTS]
        out[".".join(key)] = {
            "answers": len(rows), "tested": len(tested),
            "compile_errors": sum(classes[i] == "compile_error" for i in tested),
            "verified": proportion(sum(bool(verified[i]) for i in tested), len(tested))}
    return out
