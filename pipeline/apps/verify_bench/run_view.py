"""What a finished run did with each instruction, read through its run store.

Keyed by ``instruction_id`` (the bench computes a problem's as ``clean`` does, from its
instruction text, language and task kind): the drops before the arena (``clean``,
``difficulty``, ``decontaminate``, ``compress``), every answer (``answer``), the judges' winner
(``rate``), each answer's final admission (``repair``'s rows, else ``verify``'s), the emitted
row (``emit``) and why emit dropped the others.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from arenaforge.pipeline.store import RunStore

BEFORE_ARENA = ("clean", "difficulty", "decontaminate", "compress")
# the emitted row's evidence a user can filter on (emit_provenance; a run made before a
# column existed reads it as null)
EVIDENCE = ("tests_passed", "pass_fraction", "evidence_strength", "other_authors", "judge_score")


@dataclasses.dataclass
class RunView:
    """One run's rows by instruction_id.

    Attributes:
        dropped: ``(stage, reason)`` of an instruction dropped before the arena.
        answers: model -> its answer's text.
        winners: the judges' winner (``rate``'s ``winner``), where there was a battle.
        outcomes: model -> ``{"admission", "selected", "verified", "status"}`` (final).
        emitted: the emitted row: ``model, verified, text, admission, gate_admitted`` and
            ``EVIDENCE``.
        emit_dropped: model -> emit's drop reason (``not_selected``, ``gate_rejected``, ...).
    """

    dropped: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    answers: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    winners: dict[str, str] = dataclasses.field(default_factory=dict)
    outcomes: dict[str, dict[str, dict[str, Any]]] = dataclasses.field(default_factory=dict)
    emitted: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    emit_dropped: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)


def _rows(store: RunStore, stage: str, columns: list[str], which: str = "kept") -> list[dict]:
    if store.stage(stage).success() is None:
        return []
    return store.stage(stage).read(which, columns=columns).to_pylist()


def assistant_text(messages: list[dict] | None) -> str:
    """The last assistant turn of an emitted row's ``messages`` ('' without one).

    >>> assistant_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    'a'
    """
    turns = [m.get("content") or "" for m in messages or () if m.get("role") == "assistant"]
    return turns[-1] if turns else ""


def read_run(run_dir: str | Path) -> RunView:
    """The rows of a complete run directory (see the module)."""
    store = RunStore(run_dir)
    view = RunView()
    for stage in BEFORE_ARENA:
        for r in _rows(store, stage, ["instruction_id", "reason"], "dropped"):
            view.dropped.setdefault(r["instruction_id"], (stage, r["reason"]))
    for r in _rows(store, "answer", ["instruction_id", "model", "response"]):
        view.answers.setdefault(r["instruction_id"], {})[r["model"]] = r["response"] or ""
    for r in _rows(store, "rate", ["instruction_id", "winner"]):
        if r["winner"]:
            view.winners[r["instruction_id"]] = r["winner"]
    final = "repair" if store.stage("repair").success() is not None else "verify"
    for r in _rows(store, final, ["instruction_id", "model", "admission", "selected",
                                  "verified", "status"]):
        view.outcomes.setdefault(r["instruction_id"], {})[r["model"]] = {
            k: r.get(k) for k in ("admission", "selected", "verified", "status")}
    for r in _rows(store, "emit", ["instruction_id", "source_model", "verified", "messages",
                                   "admission", "gate_admitted", *EVIDENCE]):
        view.emitted[r["instruction_id"]] = {
            "model": r["source_model"], "verified": bool(r["verified"]),
            "text": assistant_text(r["messages"]), "admission": r.get("admission"),
            "gate_admitted": bool(r.get("gate_admitted")), **{k: r.get(k) for k in EVIDENCE}}
    for r in _rows(store, "emit", ["instruction_id", "reason", "row"], "dropped"):
        model = json.loads(r["row"]).get("model") if r.get("row") else None
        if model:
            view.emit_dropped.setdefault(r["instruction_id"], {})[model] = r["reason"]
    return view
