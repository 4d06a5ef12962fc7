"""MinHash LSH near-dup detection against an exact-Jaccard reference, and its defaults."""

from __future__ import annotations

import random

import pytest
from arenaforge.stages.instructions.dedup import (
    NearDupParams,
    jaccard,
    near_duplicates,
    near_duplicates_exact,
    shingles,
)

BASE = ("Write a Python function that takes a list of dictionaries describing employees, "
        "each with a name, a department and a salary, and returns a dictionary mapping every "
        "department to the average salary of its employees, ignoring entries without a salary.")
SMALL_EDITS = [
    BASE.upper(),                                     # casing
    BASE.replace(", ", " ,\n  "),                     # re-wrapped, punctuation spacing
    BASE.replace("Write", "Please write"),            # one word added
    BASE.replace("average", "mean"),                  # one word swapped
    BASE.replace(" a department and", " a department, and"),  # punctuation
]
# Distinct requests that share boilerplate with each other.
BOILERPLATE = [
    ("Write a Python function that takes a list of integers and returns the sum of all even "
    "numbers in the list."),
    ("Write a Python function that takes a list of integers and returns the product of all odd "
    "numbers in the list."),
    ("Write a Python function that takes a list of integers and returns the second largest "
    "distinct number in the list."),
    ("Write a Python function that takes a list of strings and returns the longest common prefix "
    "of all strings in the list."),
]


def test_shingles():
    assert shingles("", 5) == set()
    assert shingles("Hello, World", 5) == {b"hello world"}
    assert len(shingles(BASE, 5)) == len(BASE.split()) - 4


@pytest.mark.parametrize("edited", SMALL_EDITS)
def test_small_edits_are_near_duplicates(edited):
    dups = near_duplicates([BASE, edited], NearDupParams())
    assert dups[0] is None
    assert dups[1] is not None and dups[1].duplicate_of == 0


def test_distinct_requests_sharing_boilerplate_are_kept():
    assert near_duplicates(BOILERPLATE, NearDupParams()) == [None] * len(BOILERPLATE)


def test_warriorcoder_unigram_setting_merges_boilerplate():
    # Why the default is SelfCodeAlign's 5-gram/0.7 and not the WarriorCoder release's 1-gram/0.5.
    a, b = BOILERPLATE[:2]
    assert jaccard(shingles(a, 1), shingles(b, 1)) > 0.7
    dups = near_duplicates(BOILERPLATE[:2], NearDupParams(ngram=1, num_perm=128, threshold=0.5))
    assert dups[1] is not None


def _corpus(seed: int) -> list[str]:
    """Random requests plus clear-cut near copies (one word changed) and exact copies."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(400)]
    base = [" ".join(rng.choice(vocab) for _ in range(rng.randint(60, 80))) for _ in range(40)]
    texts = list(base)
    for text in rng.sample(base, 15):
        words = text.split()
        words[rng.randrange(len(words))] = rng.choice(vocab)
        texts.append(" ".join(words))
    texts += rng.sample(base, 5)
    rng.shuffle(texts)
    return texts


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ngram,threshold", [(5, 0.7), (3, 0.6), (1, 0.5)])
def test_matches_exact_jaccard_reference(seed, ngram, threshold):
    texts = _corpus(seed)
    params = NearDupParams(ngram=ngram, num_perm=256, threshold=threshold)
    got = [d is None for d in near_duplicates(texts, params)]
    want = [d is None for d in near_duplicates_exact(texts, ngram, threshold)]
    # Random texts are far below the threshold and near copies far above it, so the estimate
    # and the exact value agree on every row.
    assert got == want
    assert 0 < sum(want) < len(texts)


def test_params_are_validated():
    with pytest.raises(ValueError, match="threshold"):
        NearDupParams(threshold=0)
    with pytest.raises(ValueError, match="ngram"):
        NearDupParams(ngram=0)
