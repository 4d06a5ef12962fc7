"""``scripts/chaos.py`` and its parts: the misbehaving stand-in experts against the real
OpenAI-compatible client, the row-by-row comparison, and the benchmark's small form."""

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from arenaforge.pipeline.backends.base import SamplingParams
from arenaforge.pipeline.backends.openai_server import OpenAIServerBackend

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from chaos_compare import _entries, compare_tables
from fault_server import FAULT_KINDS, ChaosExperts, FaultPlan
from load_server import CHATML

TASKS = [f"Write a Python function `sum_above` that returns the sum of the numbers in a list "
         f"that are greater than {k}." for k in range(12)]


def _first_try(url: str) -> str:
    """What one bare request meets: the status and body start, or the exception."""
    body = {"model": "expert-1", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 32}
    try:
        r = httpx.post(url + "/chat/completions", json=body, timeout=1.0)
    except httpx.HTTPError as exc:
        return type(exc).__name__
    return f"{r.status_code} {r.text[:24]}"


def _answers(url: str) -> list[str]:
    backend = OpenAIServerBackend("expert-1", url, "expert-1", chat_template=CHATML,
                                  timeout_s=1.0, backoff_s=0.01, max_retries=8, down_wait_s=30)
    try:
        out = backend.chat([[{"role": "user", "content": t}] for t in TASKS],
                           SamplingParams(max_tokens=256, seed=3))
    finally:
        backend.close()
    assert all(row[0].error is None for row in out), [row[0].error for row in out]
    return [row[0].text for row in out]


def test_each_fault_kind_is_what_it_says_and_the_client_retries_it_away():
    clean = ChaosExperts({"expert-1": 0.7}, FaultPlan(rate=0.0))
    try:
        expected = _answers(clean.url("expert-1"))
    finally:
        clean.close()
    seen = {}
    for kind in FAULT_KINDS:
        plan = FaultPlan(rate=1.0, kinds=(kind,), hold_s=1.3, slow_s=0.2, seed=1)
        experts = ChaosExperts({"expert-1": 0.7}, plan)
        try:
            seen[kind] = _first_try(experts.url("expert-1"))
            plan.rate = 0.3
            assert _answers(experts.url("expert-1")) == expected, kind
            assert plan.counts()[kind] >= 3
        finally:
            experts.close()
    assert seen["http_500"].startswith("500") and seen["http_503"].startswith("503")
    assert seen["timeout"] == "ReadTimeout"
    assert seen["reset"] in ("ReadError", "RemoteProtocolError")
    assert seen["truncated_json"].startswith("200 {") and seen["invalid_json"].startswith(
        "200 <html>")
    assert seen["empty"].startswith("200 {") and seen["slow"].startswith("200 {")


def test_a_server_down_refuses_and_comes_back_on_its_port():
    experts = ChaosExperts({"expert-1": 0.7}, FaultPlan(rate=0.0))
    try:
        url = experts.url("expert-1")
        assert _first_try(url).startswith("200")
        experts.down("expert-1")
        assert _first_try(url) == "ConnectError"
        experts.up("expert-1")
        assert experts.url("expert-1") == url and _first_try(url).startswith("200")
    finally:
        experts.close()


def test_the_comparison_counts_duplicates_losses_and_changes_apart():
    def drop(row, reason, detail):
        return {"instruction_id": row["instruction_id"], "reason": reason, "detail": detail,
                "row": json.dumps(row)}

    rows = [{"instruction_id": f"i{k}", "model": "m", "response": f"r{k}", "duration_s": 0.1}
            for k in range(5)]
    clean = _entries(rows, [drop({"instruction_id": "d", "model": "m"}, "too_long", None)])
    faulted_rows = [dict(rows[0], duration_s=9.0),  # only a time differs: equal
                    rows[1], rows[1],  # written twice
                    dict(rows[2], response="other")]  # rows[3] lost, rows[4] dropped
    faulted = _entries(faulted_rows + [{"instruction_id": "new", "model": "m"}],
                       [drop(rows[4], "model_error", "HTTP 500 after 3 retries"),
                        drop({"instruction_id": "d", "model": "m"}, "too_long", None)])
    out = compare_tables(clean, faulted)
    assert (out["duplicates"], out["lost"], out["changed"], out["extra"]) == (1, 1, 2, 1)
    whys = sorted(e["why"] for e in out["examples"]["changed"])
    assert whys[0].startswith("dropped in the faulted run (model_error): HTTP 500")
    assert whys[1] == "values differ: response"
    assert out["examples"]["lost"] == [{"key": {"instruction_id": "i3", "model": "m"}}]
    # a row missing after a change to its instruction upstream is that change, not a loss
    upstream = {"i3": "answer: dropped in the faulted run (empty_response)"}
    out = compare_tables(clean, faulted, upstream, "judge")
    assert (out["lost"], out["changed"]) == (0, 3)
    assert any("after a change to its instruction (answer: dropped" in e["why"]
               for e in out["examples"]["changed"])
    assert set(upstream) == {"i3", "i2", "i4", "new"}  # what this stage changed, for the next


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_chaos_small_form_loses_and_duplicates_nothing(tmp_path):
    out = tmp_path / "chaos.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "chaos.py"), "--instructions", "200",
         "--kills", "10", "--server-faults", "0.05", "--disk-full", "--json", str(out),
         "--workdir", str(tmp_path / "work")],
        cwd=ROOT, capture_output=True, text=True, timeout=3500, check=False)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["problems"] == [], report["problems"]
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert report["kills"] == 10 and report["resumes"] >= 12  # kills, disk, server down
    assert report["duplicates"] == 0 and report["lost"] == 0
    assert report["dataset_equal_to_clean"] is True
    kinds = report["faults_by_kind"]
    assert all(kinds[k] > 0 for k in FAULT_KINDS), kinds
    assert kinds["server_down"] == 1
    [down] = [e for e in report["events"] if e["event"] == "server_down"]
    assert down["names_server"] and down["exit_code"] == 1
    if os.geteuid() == 0:  # a tmpfs to fill needs root
        [disk] = [e for e in report["events"] if e["event"] == "disk_full"]
        assert disk["exit_code"] not in (0, None) and kinds["disk_full"] == 1


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_without_retries_a_fault_changes_its_rows_and_loses_none(tmp_path):
    # Per-row isolation: with no retry, the faults a retry would absorb change the rows of
    # their requests, each kept or dropped with its reason; nothing is lost or doubled, no
    # stage fails. The run also loses a node of a local two-node Ray cluster mid-stage.
    out = tmp_path / "chaos.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "chaos.py"), "--instructions", "60",
         "--server-faults", "0.1", "--retries", "0", "--node-loss", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1700, check=False)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["problems"] == [] and proc.returncode == 0, report["problems"]
    assert report["duplicates"] == 0 and report["lost"] == 0
    assert report["changed"] > 0 and report["dataset_equal_to_clean"] is False
    stages = report["comparison"]["stages"]
    assert all(s["complete"] for s in stages.values())
    whys = [e["why"] for s in stages.values() for e in s["examples"].get("changed", [])]
    assert whys and all(whys)
    [loss] = [e for e in report["events"] if e["event"] == "node_loss"]
    assert loss["stage_finished"] is True
