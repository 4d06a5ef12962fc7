"""A completion's text grown token by token with llama-cpp-python's stop rules.

The batched llama.cpp path (:mod:`arenaforge.pipeline.backends.llamacpp_batch`) must return the text and
``finish_reason`` the sequential path (``Llama.create_completion``) returns for the same tokens;
this replays that function's stop-string, multibyte and ``max_tokens`` checks.
"""

from __future__ import annotations


class CompletionText:
    """The text of one completion, grown token by token with ``Llama._create_completion``'s rules.

    Stop strings are searched in the bytes generated so far and the first one *in list order*
    that occurs cuts the text (as llama-cpp-python does); no check happens while the last
    bytes are an incomplete UTF-8 character, which also delays the ``max_tokens`` check.

    >>> t = CompletionText(stop=["\\n\\n"], max_tokens=10)
    >>> [t.push(p) for p in (b"def", b" f", b"():\\n", b"\\n")]
    [None, None, None, 'stop']
    >>> t.text
    'def f():'
    """

    def __init__(self, stop: list[str], max_tokens: int, bos_piece_strip: bool = False) -> None:
        self._stop = [s.encode("utf-8") for s in stop]
        self.max_tokens = max_tokens
        self.n_tokens = 0
        self._raw = b""
        self._cut: bytes | None = None
        self._multibyte_fix = 0
        # Llama.detokenize drops a leading space when the first token is BOS.
        self._strip_first_space = bos_piece_strip

    def _all_text(self) -> bytes:
        if self._strip_first_space and self._raw[:1] == b" ":
            return self._raw[1:]
        return self._raw

    def push(self, piece: bytes) -> str | None:
        """Add one generated (non end-of-generation) token's bytes; the finish reason or None."""
        self.n_tokens += 1
        self._raw += piece
        all_text = self._all_text()
        # Same loop as llama-cpp-python: how many more tokens an open UTF-8 character needs.
        for k, char in enumerate(all_text[-3:]):
            k = 3 - k
            for num, pattern in ((2, 192), (3, 224), (4, 240)):
                if num > k and pattern & char == pattern:
                    self._multibyte_fix = num - k
        if self._multibyte_fix > 0:
            self._multibyte_fix -= 1
            return None
        found = [s for s in self._stop if s in all_text]
        if found:
            self._cut = all_text[:all_text.index(found[0])]
            return "stop"
        if self.n_tokens >= self.max_tokens:
            return "length"
        return None

    @property
    def text(self) -> str:
        """The completion text (cut at the stop string if one ended it)."""
        data = self._cut if self._cut is not None else self._all_text()
        return data.decode("utf-8", errors="ignore")
