"""``arenaforge judge-bench`` end to end with stand-in models: real HumanEval problems, real
sandbox execution, the real judge stage code, the card files the interface promises, and a
rerun that asks the models nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from arenaforge.pipeline.apps.evaluate import load_problems
from arenaforge.pipeline.backends.base import Completion
from arenaforge.pipeline.cli import app
from typer.testing import CliRunner

PROBLEMS = load_problems("humaneval", 2)
CALLS: list[str] = []


class StandIn:
    """Contestant: even samples are the canonical solution, odd ones are wrong. Judge: prefers
    the answer shown first (logprob protocols)."""

    def __init__(self, model_id: str):
        self.model_id = model_id

    def chat(self, conversations, params):
        CALLS.append("chat")
        out = []
        for conv in conversations:
            problem = next(p for p in PROBLEMS if p["prompt"] in conv[-1]["content"])
            good = f"```python\n{problem['prompt']}{problem['canonical_solution']}```"
            bad = f"```python\n{problem['prompt']}    return None\n```"
            out.append([Completion(good if i % 2 == 0 else bad, "stop")
                        for i in range(params.n)])
        return out

    def next_token_logprobs(self, conversations, candidates, prefill=""):
        CALLS.append("logprobs")
        out = []
        for conv in conversations:
            first = len(conv) == 2  # a pair prompt, or the answer scored first
            probs = {"A": 0.7, "B": 0.3, "0": 0.1, "1": 0.1, "2": 0.2 if first else 0.6,
                     "3": 0.6 if first else 0.2}
            out.append(({t: math.log(probs[t.strip()]) for t in candidates}, None))
        return out

    def close(self):
        pass


@pytest.fixture
def stand_ins(monkeypatch):
    monkeypatch.setattr("arenaforge.pipeline.backends.create_backend",
                        lambda spec, **kw: StandIn(spec.id))
    CALLS.clear()


def test_judge_bench_writes_the_card_and_resumes_for_free(tmp_path, stand_ins):
    config = tmp_path / "bench.yaml"
    config.write_text(
        f"models_file: {Path('configs/models.yaml').resolve()}"
        + "\ncontestants: [qwen2.5-coder-0.5b, smollm2-135m]\nsamples: 2\n"
        "variants:\n  - {judge: qwen2.5-coder-1.5b, protocol: pairwise_logprob}\n"
        "  - {judge: qwen2.5-coder-1.5b, protocol: pointwise_logprob, reference: canonical}\n")
    out = tmp_path / "bench"
    args = ["judge-bench", str(config), "--problems", "2", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    card = json.loads((out / "card.json").read_text())
    assert (out / "card.md").read_text().startswith("# Judge card")
    # per problem: 2 passing (one per model) and 2 failing answers -> 2 same-model pairs and
    # 2 cross-model pairs
    assert card["pairs"] == {**card["pairs"], "count": 8, "same_model": 4, "cross_model": 4}
    assert [(r["protocol"], r["reference"]) for r in card["results"]] == [
        ("pairwise_logprob", False), ("pointwise_logprob", True)]
    for r in card["results"]:
        assert r["judge"] == "qwen2.5-coder-1.5b" and r["n"] == 8
        assert r["first_position"] == 1.0 and r["order_consistency"] == 0.0
        assert 0.0 <= r["ci_low"] <= r["ci_high"] <= 1.0 and r["correct"] <= r["n"]
        assert "kappa" in r
    assert (out / "accuracy.png").stat().st_size > 0
    CALLS.clear()
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert CALLS == []  # samples, executions and verdicts were all kept
    assert json.loads((out / "card.json").read_text())["results"] == card["results"]


def test_judge_bench_bad_config_is_a_clear_error(tmp_path):
    config = tmp_path / "bench.yaml"
    config.write_text("contestants: [a]\nvariants: [{judge: j, protocol: nope}]\n")
    result = CliRunner().invoke(app, ["judge-bench", str(config), "--out", str(tmp_path)])
    assert result.exit_code == 2 and "protocol" in result.output


def test_judge_bench_given_a_run_config_names_it_and_the_command_that_takes_it():
    root = Path(__file__).resolve().parents[2]
    run_config = root / "configs" / "smoke.yaml"
    result = CliRunner().invoke(app, ["judge-bench", str(run_config), "--out", "unused"])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1, result.output
    assert "is a run config, not a judge-bench config" in lines[0]
    assert f"arenaforge run {run_config}" in lines[0]
    assert "extra_forbidden" not in result.output
