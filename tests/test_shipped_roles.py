"""The shipped configs give each model the role the evidence supports.

* The default and smoke runs judge with what the committed judge card chose
  (``docs/judge-card.json``, reproduced by its ``command``).
* No shipped run config lets a model both judge a battle and write the tests that decide it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from arenaforge.pipeline.config import load_config

ROOT = Path(__file__).resolve().parents[1]
CARD = ROOT / "docs" / "judge-card.json"
RUN_CONFIGS = sorted(p for p in (ROOT / "configs").glob("*.yaml")
                     if not p.name.startswith(("models", "sft-", "judge-bench", "ablate")))


def chosen_variant(card: dict) -> dict:
    """The card's choice rule: among variants without a reference and with at least 100 pairs,
    the highest lower bound of the accuracy interval."""
    eligible = [v for v in card["variants"] if v["reference"] == "none" and v["pairs"] >= 100]
    return max(eligible, key=lambda v: v["ci_low"])


def test_the_card_states_its_command_and_rule():
    card = json.loads(CARD.read_text())
    assert card["command"].startswith("arenaforge judge-bench ")
    assert "highest lower bound" in card["choice_rule"]
    for v in card["variants"]:  # each interval holds its own point estimate
        assert v["ci_low"] <= v["correct"] / v["pairs"] <= v["ci_high"]


@pytest.mark.parametrize("name", ["default.yaml", "smoke.yaml"])
def test_the_shipped_default_judges_with_what_the_card_chose(name):
    best = chosen_variant(json.loads(CARD.read_text()))
    cfg = load_config(ROOT / "configs" / name)
    assert cfg.judge.judges == [best["judge"]]
    assert cfg.judge.protocol == best["protocol"]
    # the judge is no contestant: it would never judge its own battles
    assert best["judge"] not in cfg.answer.experts


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_no_shipped_config_has_a_judge_that_writes_tests(path):
    cfg = load_config(path)
    assert cfg.circular_roles() == [], (path.name, cfg.judge.judges, cfg.tests.authors)
    assert cfg.role_warnings() == []


def test_a_config_that_mixes_the_roles_is_warned_about():
    cfg = load_config(ROOT / "configs" / "default.yaml",
                      ["tests.authors=[qwen2.5-coder-0.5b, qwen2.5-coder-1.5b]"])
    assert cfg.circular_roles() == ["qwen2.5-coder-1.5b"]
    [warning] = cfg.role_warnings()
    assert "qwen2.5-coder-1.5b" in warning and "tests.authors" in warning
