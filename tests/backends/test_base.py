"""SamplingParams, Completion and the stop-string helpers."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from arenaforge.pipeline.backends.base import (
    Completion,
    SamplingParams,
    merged_stop,
    truncate_at_stop,
)


def test_sampling_params_defaults_match_the_contract():
    p = SamplingParams()
    assert (p.n, p.temperature, p.top_p, p.max_tokens, p.stop, p.seed) == (1, 0.0, 1.0, 256, (),
                                                                          None)


def test_to_json_is_canonical_and_round_trips():
    a = SamplingParams(n=2, temperature=0.7, top_p=0.9, max_tokens=64, stop=["\n\n", "```"],
                       seed=5)
    b = SamplingParams(seed=5, stop=("\n\n", "```"), max_tokens=64, top_p=0.9, temperature=0.7,
                       n=2)
    assert a.to_json() == b.to_json()
    assert SamplingParams.from_json(a.to_json()) == a
    # int and float temperature must not give two cache keys for one request
    assert SamplingParams(temperature=1).to_json() == SamplingParams(temperature=1.0).to_json()
    assert a.to_json() != SamplingParams(n=2, temperature=0.7, top_p=0.9, max_tokens=64,
                                         stop=["\n\n"], seed=5).to_json()


def test_sampling_params_is_hashable_and_frozen():
    p = SamplingParams(stop=["x"])
    assert hash(p) == hash(SamplingParams(stop=("x",)))
    with pytest.raises(AttributeError):
        p.n = 3  # type: ignore[misc]


@pytest.mark.parametrize("kwargs, field", [
    ({"n": 0}, "n"), ({"temperature": -0.1}, "temperature"), ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"), ({"max_tokens": 0}, "max_tokens"), ({"stop": [""]}, "stop"),
])
def test_bad_sampling_params_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"SamplingParams.{field}"):
        SamplingParams(**kwargs)


def test_sample_seeds_are_distinct_and_replayable():
    p = SamplingParams(n=3, seed=10)
    assert [p.sample_seed(i) for i in range(3)] == [10, 11, 12]
    assert SamplingParams(n=3).sample_seed(2) is None


@pytest.mark.parametrize("text, stop, expected", [
    ("abc\n\ndef", ["\n\n"], ("abc", True)),
    ("abc```def\n\n", ["\n\n", "```"], ("abc", True)),  # earliest stop wins, not first listed
    ("abc", [], ("abc", False)),
    ("abc", ["zz"], ("abc", False)),
    ("", ["a"], ("", False)),
])
def test_truncate_at_stop(text, stop, expected):
    assert truncate_at_stop(text, stop) == expected


def test_merged_stop_keeps_request_stops_first_without_duplicates():
    assert merged_stop(SamplingParams(stop=["\n\n", "<|im_end|>"]), ["<|im_end|>", "<eos>"]) == [
        "\n\n", "<|im_end|>", "<eos>"]


def test_failed_completion_is_a_value():
    c = Completion.failed("boom")
    assert (c.text, c.finish_reason, c.error) == ("", "error", "boom")
    assert Completion(**c.to_dict()) == c


@pytest.mark.parametrize("preset, expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_openmp_wait_policy_defaults_to_passive_before_llama_cpp_loads(preset, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if preset:
        env["OMP_WAIT_POLICY"] = preset
    code = ("import os; from arenaforge.pipeline.backends import prefer_passive_openmp; "
            "prefer_passive_openmp(); print(os.environ['OMP_WAIT_POLICY'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parents[2])
    assert out.stdout.strip() == expected
