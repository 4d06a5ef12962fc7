"""The tests stage's runs of each candidate, kept so that verify does not run a passing answer again.

The ``tests`` stage already runs every bound candidate, once, in the sandbox: on every written
test, every generated input and the two probe tests (the bound name is callable; the
instruction's example). Once trust is decided, those runs say for each trusted test whether the
candidate passed that very test. Verify grades the same answers on the same tests, so for an
answer whose recorded run passed every trusted test, running it again would only repeat what
is known; at 50k instructions that repetition was a quarter of the sandbox's time.

What the ``tests`` stage records (``EVIDENCE_COLUMNS``):

* ``graded_passed_by`` on each trusted test row: the models whose run passed the test **as
  verify grades it**. A written test counts only when its text is the one that ran (a test
  trusted on float agreement is rewritten with ``isclose`` afterwards: it runs again in
  verify). An augmented test counts only for a run that printed exactly the expected literal
  as a value built from exact builtin types (``arenaforge.stages.verification.augment.Outcome.is_exactly``): such a
  value passes both forms of the assertion, ``==`` and ``_close``.
* ``candidate_runs`` on every row of the instruction: per model, the sha256 of the exact program
  that ran (the answer bound to the entry point), the probe results where the run decided them
  (``None`` where a limit may have: a timeout, the memory or output cap, the sandbox), the
  limits it ran under and its duration.

Verify reuses a run (``RecordedRun.covers``) only when the program is the same to the byte,
every trusted test is recorded as passed, every probe the suite has was decided, and the run's
limits were no looser than verify's (its timeout not longer, the same memory limit): a pass
under tighter limits is a pass under verify's. Anything else, every failing answer among them,
is run again, so failures keep verify's own error messages, fail-fast and first failing test.
One difference remains and is accepted: the recorded run took the tests in another order
(written tests, inputs, probes), so a solution whose result depends on what earlier tests did to
its own state may have passed there and fail here, or the reverse; either run is an honest
sample of such a solution.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
from arenaforge.pipeline.sandbox.result import ERR_SANDBOX, ExecResult
from arenaforge.pipeline.statuses import ERROR, FAILED, PASSED

EVIDENCE_COLUMNS = ("graded_passed_by", "candidate_runs")
CANDIDATE_RUN = pa.struct([
    ("model", pa.string()), ("solution_sha256", pa.string()),
    ("callable_ok", pa.bool_()), ("example_ok", pa.bool_()),
    ("timeout_s", pa.float64()), ("memory_mb", pa.int64()), ("duration_s", pa.float64()),
])


def solution_digest(solution: str) -> str:
    """What identifies the program that ran (the answer as bound to the entry point)."""
    return hashlib.sha256(solution.encode("utf-8", "surrogatepass")).hexdigest()


def probe_decided(result: Any) -> bool | None:
    """A probe's result where the program decided it (passed, an assertion, an exception),
    ``None`` where a limit or the sandbox may have (timeout, memory, output cap, skipped)."""
    if result is None:
        return None
    if result.status == PASSED:
        return True
    if result.status == FAILED or (result.status == ERROR and result.error_type != ERR_SANDBOX):
        return False
    return None


def candidate_run(model: str, solution: str, probes: Sequence[Any], results: Iterable[Any], *,
                  timeout_s: float, memory_mb: int | None) -> dict:
    """A ``candidate_runs`` entry: ``probes`` are the results of ``arenaforge.stages.verification.grading.probes``
    (callable, then the example when the suite has one); ``results`` every result of the run."""
    return {"model": model, "solution_sha256": solution_digest(solution),
            "callable_ok": probe_decided(probes[0]) if probes else None,
            "example_ok": probe_decided(probes[1]) if len(probes) > 1 else None,
            "timeout_s": float(timeout_s), "memory_mb": memory_mb,
            "duration_s": float(sum(r.duration_s for r in results if r is not None))}


@dataclasses.dataclass(frozen=True)
class RecordedRun:
    """One candidate's recorded run: the program's digest, the tests (texts) it passed as
    graded, the decided probes, the limits and the duration."""

    solution_sha256: str
    passed: frozenset[str]
    callable_ok: bool | None
    example_ok: bool | None
    timeout_s: float
    memory_mb: int | None
    duration_s: float

    def covers(self, suite: Any, solution: str, *, timeout_s: float,
               memory_mb: int | None) -> bool:
        """Whether verify, running ``solution`` on ``suite`` under these limits, would only
        repeat this run: the same program, every trusted test passed, every probe decided."""
        return (bool(suite.graded) and self.timeout_s <= timeout_s
                and self.memory_mb == memory_mb and self.callable_ok is not None
                and (suite.example is None or self.example_ok is not None)
                and self.passed.issuperset(suite.graded)
                and solution_digest(solution) == self.solution_sha256)

    def results(self, suite: Any) -> list[ExecResult]:
        """The per-test results verify would have collected: every graded test passed, then
        the probes as recorded (the layout ``arenaforge.stages.verification.grading`` folds)."""
        probes = [self.callable_ok, *([self.example_ok] if suite.example else [])]
        return [*(ExecResult(PASSED) for _ in suite.graded),
                *(ExecResult(PASSED if ok else FAILED) for ok in probes)]


def recorded_runs(rows: Iterable[dict]) -> dict[tuple[str, str], RecordedRun]:
    """``(instruction_id, model) -> RecordedRun`` from ``tests`` rows (``SUITE_COLUMNS`` plus
    ``EVIDENCE_COLUMNS``). A model recorded twice for one instruction is left out (ambiguous)."""
    passed: dict[tuple[str, str], set[str]] = {}
    lists: dict[str, list[dict]] = {}  # every row of an instruction carries the same list
    for r in rows:
        iid = r["instruction_id"]
        if r.get("survived") and r.get("test_code"):
            for model in r.get("graded_passed_by") or ():
                passed.setdefault((iid, model), set()).add(r["test_code"])
        lists.setdefault(iid, r.get("candidate_runs") or [])
    out = {}
    for iid, entries in lists.items():
        times = Counter(e["model"] for e in entries)
        for e in entries:
            if times[e["model"]] == 1:
                key = (iid, e["model"])
                out[key] = RecordedRun(e["solution_sha256"], frozenset(passed.get(key, ())),
                                       e["callable_ok"], e["example_ok"], e["timeout_s"],
                                       e["memory_mb"], e["duration_s"] or 0.0)
    return out
