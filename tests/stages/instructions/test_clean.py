"""The clean stage: normalisation, filters with reasons, exact and near dedup."""

from __future__ import annotations

import pyarrow as pa
import pytest
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.instructions.clean import (
    CleanConfig,
    NearDupConfig,
    non_latin_share,
    normalize_instruction,
    request_problem,
    row_problem,
    run,
)
from arenaforge.stages.instructions.mine import MINE_SCHEMA


def mined(texts, finish=None):
    n = len(texts)
    finish = finish or ["stop"] * n
    return pa.Table.from_pylist([
        {"instruction_id": instruction_id(t), "instruction": t, "miner": "m", "language": "Python",
         "sample_params": "{}", "template": "chatml/empty_assistant", "finish_reason": f,
         "raw": t, "task_id": f"m|Python|{i:06d}", "sample_index": i}
        for i, (t, f) in enumerate(zip(texts, finish))], schema=MINE_SCHEMA)


def test_normalize():
    assert normalize_instruction("  Question: How do I sort a dict by value?  ") == \
        "How do I sort a dict by value?"
    assert normalize_instruction("Fix this:\r\n\r\n\r\n\r\ndef f():  \n    pass\n") == \
        "Fix this:\n\ndef f():\n    pass"
    assert normalize_instruction("ｆｕｌｌ width") == "full width"  # NFKC


@pytest.mark.parametrize("text,problem", [
    ("Write a function that merges two sorted lists into one sorted list.", None),
    ("How can I read a large CSV file in chunks with pandas?", None),
    ("I'm trying to parse dates like 2024-01-05 but strptime fails with a ValueError.", None),
    ("```python\nprint('hi')\n```", "code_not_request"),
    ("def merge(a, b):\n    return sorted(a + b)", "code_not_request"),
    ("import os\nprint(os.getcwd())", "code_not_request"),
    ("Sure! Here's a function that merges two lists.", "answer_not_request"),
    ("Here is the corrected code with comments.", "answer_not_request"),
    ("Certainly. The bug is in the loop bound.", "answer_not_request"),
    ("The weather in Paris was lovely this spring.", "not_a_request"),
])
def test_request_problem(text, problem):
    assert request_problem(text) == problem


def test_non_latin_share():
    assert non_latin_share("Write a parser") == 0.0
    assert non_latin_share("写一个函数 that sorts") == pytest.approx(5 / 14)
    assert non_latin_share("Écris une fonction en Python") == 0.0
    assert non_latin_share("1234") == 0.0


def test_row_problem_order_and_details():
    cfg = CleanConfig(min_words=4, min_chars=10, max_chars=60)
    assert row_problem("Write a sorter in Go please", "error", cfg) == ("generation_error", "")
    assert row_problem("Write a sorter in Go please", "length", cfg)[0] == "truncated"
    assert row_problem("Write a sorter in Go please", "length",
                       CleanConfig(drop_truncated=False)) is None
    assert row_problem("", "stop", cfg) == ("empty", "")
    assert row_problem("Sort it", "stop", cfg) == ("too_short", "2 words, 7 chars")
    assert row_problem("Write " + "a " * 40, "stop", cfg)[0] == "too_long"
    assert row_problem("请写一个排序函数 write sort", "stop", cfg)[0] == "non_latin_text"


def test_stage_drops_with_reasons_and_dedups():
    base = ("Write a Python function that takes a list of dictionaries describing employees and "
            "returns a dictionary mapping every department to the average salary of its employees.")
    texts = [
        base,
        "  " + base.replace(" ", "  ") + "\n",          # exact duplicate after normalisation
        base.replace("Write", "Please write"),        # near duplicate
        ("Write a Python function that takes a list of integers and returns the sum of all even "
        "numbers in the list."),
        ("Write a Python function that takes a list of integers and returns the product of all odd "
        "numbers in the list."),                        # shares boilerplate: kept
        "Sure, here is how you do it.",
        "Write a quicksort",                          # too short
        "Write a function that parses ISO dates and explain each step of the parsing.",
    ]
    finish = ["stop"] * 7 + ["length"]
    res = run(mined(texts, finish), CleanConfig(), None)
    kept = res.table.column("instruction").to_pylist()
    assert kept == [texts[0], texts[3], texts[4]]
    assert res.table.column("instruction_id").to_pylist() == [instruction_id(t) for t in kept]
    reasons = dict(zip(res.dropped.column("task_id").to_pylist(),
                       res.dropped.column("reason").to_pylist()))
    assert reasons == {"m|Python|000001": "exact_duplicate", "m|Python|000002": "near_duplicate",
                       "m|Python|000005": "answer_not_request", "m|Python|000006": "too_short",
                       "m|Python|000007": "truncated"}
    near = res.dropped.filter(pa.compute.equal(res.dropped.column("reason"), "near_duplicate"))
    assert near.column("detail")[0].as_py().startswith(instruction_id(texts[0]))
    assert res.table.schema == MINE_SCHEMA


def test_near_dup_can_be_disabled():
    base = "Write a Python function that reverses the words of a sentence but keeps punctuation."
    texts = [base, base.replace("Write", "Please write")]
    res = run(mined(texts), CleanConfig(near_dup=NearDupConfig(enabled=False)), None)
    assert res.table.num_rows == 2


def test_unknown_config_key_is_an_error():
    with pytest.raises(Exception, match="extra"):
        CleanConfig(min_word=3)


SYSTEM = ("You are an AI assistant designed to help with Python programming tasks. The user asks "
          "you to write one Python function that solves a small, self-contained, well-specified "
          "problem: the request names the function, describes its inputs and the expected "
          "output, and gives an example.")


def test_a_request_that_echoes_its_system_prompt_is_dropped():
    # from a default run: the first two restate the miner's instructions; the third is a task
    # and shares only "a python function that"
    texts = ["Please provide me with one Python function that solves a specific problem: the "
             "function does not need external packages.",
             "Can you provide an example of a function that solves a specific problem, such as "
             "calculating the factorial of a number or finding the largest number in a list?",
             "Could you provide a Python function that calculates the average of numbers in a "
             "list?"]
    res = run(mined(texts), CleanConfig(echo_of=(SYSTEM,)), None)
    assert res.table.column("instruction").to_pylist() == [texts[2]]
    assert res.dropped.column("reason").to_pylist() == ["prompt_echo", "prompt_echo"]
    assert res.dropped.column("detail")[1].as_py().startswith(
        "2 word 3-grams of the system prompt: 'function that solves', 'that solves a'")
    # a request read from a file was mined under no prompt; and the check can be turned off
    from_file = mined(texts).to_pylist()
    for row in from_file:
        row["template"] = "file"
    assert run(pa.Table.from_pylist(from_file, schema=MINE_SCHEMA),
               CleanConfig(echo_of=(SYSTEM,)), None).table.num_rows == 3
    assert run(mined(texts), CleanConfig(echo_of=(SYSTEM,), max_echo_ngrams=None),
               None).table.num_rows == 3


def test_a_run_fills_in_the_prompts_its_requests_were_mined_under():
    from pathlib import Path

    from arenaforge.pipeline.config import load_config

    cfg = load_config(Path(__file__).parents[3] / "configs" / "default.yaml")
    assert cfg.clean.echo_of == (cfg.mine.system_for("python"),)
