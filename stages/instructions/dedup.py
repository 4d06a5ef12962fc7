"""Near-duplicate detection with MinHash LSH over word n-gram shingles (``datasketch``).

Defaults and where they come from:

- SelfCodeAlign (our default): word 5-gram shingles, 250 permutations, threshold 0.7.
- WarriorCoder's release: word unigrams, 128 permutations, threshold 0.5.

We default to SelfCodeAlign's settings because unigram sets at 0.5 merge distinct requests that
share boilerplate ("Write a Python function that takes a list of integers and returns the sum /
the product ...": unigram Jaccard ~0.8), which ``tests/stages/instructions/test_clean_dedup.py`` checks.

Rows are processed in order; a row whose estimated Jaccard with an earlier *kept* row reaches the
threshold is a duplicate of that row. LSH gives candidates; with ``verify`` each candidate's
estimated Jaccard is checked, because LSH banding also returns some pairs below the threshold.

Example::

    >>> dups = near_duplicates(["write a function that reverses a string in python please",
    ...                         "Write a function that reverses a string in Python, please!",
    ...                         "explain how the python garbage collector handles cycles"],
    ...                        NearDupParams(ngram=3, num_perm=128, threshold=0.7))
    >>> [d.duplicate_of if d else None for d in dups]
    [None, 0, None]
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

_WORD = re.compile(r"\w+")


@dataclasses.dataclass(frozen=True)
class NearDupParams:
    """MinHash LSH settings (see the module docstring for the defaults' sources)."""

    ngram: int = 5
    num_perm: int = 250
    threshold: float = 0.7
    verify: bool = True
    seed: int = 1

    def __post_init__(self) -> None:
        if self.ngram < 1:
            raise ValueError(f"ngram must be >= 1, got {self.ngram}")
        if self.num_perm < 2:
            raise ValueError(f"num_perm must be >= 2, got {self.num_perm}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")


@dataclasses.dataclass(frozen=True)
class NearDuplicate:
    """Row ``i`` duplicates earlier kept row ``duplicate_of`` with estimated Jaccard ``jaccard``."""

    duplicate_of: int
    jaccard: float


def shingles(text: str, n: int) -> set[bytes]:
    """Word n-gram shingles of lower-cased ``\\w+`` tokens (the whole text when shorter than n).

    >>> sorted(shingles("Sort a list, fast!", 2))
    [b'a list', b'list fast', b'sort a']
    """
    words = _WORD.findall(text.lower())
    if len(words) <= n:
        return {" ".join(words).encode("utf-8")} if words else set()
    return {" ".join(words[i:i + n]).encode("utf-8") for i in range(len(words) - n + 1)}


def jaccard(a: set, b: set) -> float:
    """Exact Jaccard similarity of two sets (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def near_duplicates(texts: Sequence[str], params: NearDupParams) -> list[NearDuplicate | None]:
    """For each text, the earlier kept text it near-duplicates, or ``None`` when it is kept.

    Args:
        texts: texts in priority order (earlier rows win).
        params: shingle size, permutations, threshold.

    Returns:
        One entry per text: ``None`` (kept) or a :class:`NearDuplicate`.
    """
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=params.threshold, num_perm=params.num_perm)
    # One permutation set reused for every row: MinHash.bulk avoids re-drawing it per row and
    # hashes each row's shingles in one vectorised update.
    sets = [sorted(shingles(t, params.ngram)) for t in texts]
    hashes = MinHash.bulk(sets, num_perm=params.num_perm, seed=params.seed)
    out: list[NearDuplicate | None] = []
    for i, (shingle_set, mh) in enumerate(zip(sets, hashes)):
        if not shingle_set:  # nothing to compare: empty texts are the length filter's business
            out.append(None)
            continue
        best: NearDuplicate | None = None
        for key in lsh.query(mh):
            score = float(mh.jaccard(hashes[key]))
            if params.verify and score < params.threshold:
                continue
            if best is None or score > best.jaccard or (score == best.jaccard and key < best.duplicate_of):
                best = NearDuplicate(duplicate_of=key, jaccard=score)
        if best is None:
            lsh.insert(i, mh)
        out.append(best)
    return out


def near_duplicates_exact(texts: Sequence[str], ngram: int,
                          threshold: float) -> list[NearDuplicate | None]:
    """Brute-force reference of :func:`near_duplicates` with exact Jaccard (O(n^2); for tests)."""
    sets = [shingles(t, ngram) for t in texts]
    kept: list[int] = []
    out: list[NearDuplicate | None] = []
    for i, s in enumerate(sets):
        if not s:
            out.append(None)
            continue
        scores = [(jaccard(s, sets[k]), -k) for k in kept]
        top = max(scores, default=None)
        if top is not None and top[0] >= threshold:
            out.append(NearDuplicate(duplicate_of=-top[1], jaccard=top[0]))
        else:
            kept.append(i)
            out.append(None)
    return out
