"""``scripts/chaos.py`` and its parts: the misbehaving stand-in experts against the real
OpenAI-compatible client (chat and mining's raw completions), the row-by-row comparison, the
exit code, and the benchmark's small form."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import yaml
from arenaforge.pipeline.backends.base import SamplingParams
from arenaforge.pipeline.backends.openai_server import OpenAIServerBackend
from arenaforge.stages.instructions.mine import DEFAULT_SYSTEM, extract_request
from arenaforge.stages.instructions.pre_query import build_pre_query

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from chaos import healthy, parse_args, write_files
from chaos_compare import _entries, compare_tables
from fault_server import FAULT_KINDS, ChaosExperts, FaultPlan
from load_server import CHATML
from synth_arena import task_of

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


def _backend(url: str) -> OpenAIServerBackend:
    return OpenAIServerBackend("expert-1", url, "expert-1", chat_template=CHATML,
                               timeout_s=1.0, backoff_s=0.01, max_retries=8, down_wait_s=30)


def _answers(url: str) -> list[str]:
    backend = _backend(url)
    try:
        out = backend.chat([[{"role": "user", "content": t}] for t in TASKS],
                           SamplingParams(max_tokens=256, seed=3))
    finally:
        backend.close()
    assert all(row[0].error is None for row in out), [row[0].error for row in out]
    return [row[0].text for row in out]


def _mined(url: str, samples: int = 12) -> list[str]:
    """What ``mine`` sends: the Magpie pre-query prompt of the template, ``samples`` seeded raw
    completions of it; the requests, cut as mine cuts them."""
    backend = _backend(url)
    try:
        pre = build_pre_query(
            lambda messages, add: backend.apply_chat_template(messages, add_generation_prompt=add),
            "chatml", "auto", DEFAULT_SYSTEM.replace("{language}", "Python"))
        [out] = backend.complete([pre.prompt], SamplingParams(n=samples, max_tokens=192,
                                                               temperature=1.0, seed=11))
    finally:
        backend.close()
    assert all(c.error is None for c in out), [c.error for c in out]
    return [extract_request(c.text, ["\n\n\n"]) for c in out]


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


def test_mining_meets_the_faults_and_mines_what_a_clean_server_mines():
    # The stand-ins answer a pre-query prompt with a request of some task family, a function of
    # the prompt and the seed: a faulted run (retried) mines the clean run's requests.
    clean = ChaosExperts({"expert-1": 0.7}, FaultPlan(rate=0.0))
    try:
        expected = _mined(clean.url("expert-1"))
        assert _mined(clean.url("expert-1")) == expected  # deterministic
        assert clean.plan.by_stage() == {"mine": {"requests": 24}}
    finally:
        clean.close()
    assert len(set(expected)) == len(expected)  # each seed its own request
    assert all(task_of(text) is not None for text in expected), expected
    plan = FaultPlan(rate=0.4, seed=2, hold_s=1.3, slow_s=0.2)
    experts = ChaosExperts({"expert-1": 0.7}, plan)
    try:
        assert _mined(experts.url("expert-1")) == expected
        assert _answers(experts.url("expert-1"))
    finally:
        experts.close()
    stages = plan.by_stage()
    assert set(stages) == {"mine", "answer"}
    faults = {k: v for k, v in stages["mine"].items() if k != "requests"}
    assert sum(faults.values()) >= 3 and stages["mine"]["requests"] > 12, stages
    plan.restart(0.0)
    assert plan.requests == 0 and plan.by_stage() == {} and not any(plan.counts().values())


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


def test_a_mined_row_whose_text_changed_is_changed_not_lost():
    # An emptied completion gives a mined row another instruction_id; its task_id still names
    # it, and the rows of its old instruction downstream follow from that change.
    mined = [{"instruction_id": f"i{k}", "task_id": f"e|Python|{k:06d}", "instruction": f"t{k}"}
             for k in range(3)]
    touched: dict = {}
    out = compare_tables(_entries(mined, []), _entries(
        mined[:2] + [dict(mined[2], instruction_id="empty", instruction="")], []),
        touched, "mine")
    assert (out["duplicates"], out["lost"], out["changed"], out["extra"]) == (0, 0, 1, 0)
    assert out["examples"]["changed"][0]["why"] == "values differ: instruction, instruction_id"
    assert set(touched) == {"i2", "empty"}
    answers = [{"instruction_id": f"i{k}", "model": "m", "response": "r"} for k in range(3)]
    out = compare_tables(_entries(answers, []), _entries(answers[:2], []), touched, "answer")
    assert (out["lost"], out["changed"]) == (0, 1)


@pytest.mark.parametrize(("report", "allow_changes", "ok"), [
    ({}, False, True),
    ({"dataset_equal_to_clean": False}, False, False),  # exit 1 when the dataset differs
    ({"dataset_equal_to_clean": False}, True, True),  # unless changes are allowed
    ({"lost": 1}, True, False),
    ({"duplicates": 2}, True, False),
    ({"problems": ["attempt 3 hung"]}, True, False),
])
def test_the_exit_code_says_whether_the_run_kept_its_dataset(report, allow_changes, ok):
    full = {"duplicates": 0, "lost": 0, "problems": [], "dataset_equal_to_clean": True, **report}
    assert healthy(full, allow_changes) is ok


def test_the_benchmark_mines_from_its_servers_by_default(tmp_path):
    ports = SimpleNamespace(ports={f"expert-{k}": 40000 + k for k in range(1, 6)})
    assert parse_args(["--instructions", "10"]).mine == "served"
    config, stages, calls = write_files(tmp_path / "served", ports, 12, 0, 3, [])
    run = yaml.safe_load(config.read_text())
    assert run["mine"] == {"languages": ["Python"], "samples_per_language": 3}  # 15 >= 12
    assert stages[0] == "mine" and calls[0] == "mine" and "answer" in calls
    config, _, calls = write_files(tmp_path / "file", ports, 12, 0, 3, [], mine="file")
    assert "source" in yaml.safe_load(config.read_text())["mine"] and "mine" not in calls


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
    # mining is served: it meets kills and server faults like every later stage
    assert report["mine"] == "served" and report["kills_by_stage"].get("mine", 0) > 0
    mine = report["faults_by_stage"]["mine"]
    assert sum(v for k, v in mine.items() if k != "requests") > 0, mine
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
         "--server-faults", "0.1", "--retries", "0", "--node-loss", "--allow-changes",
         "--json", str(out)],
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
