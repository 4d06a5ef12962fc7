"""System messages folded into the first user turn, for models whose template refuses them.

Gemma's chat template (CodeGemma, Gemma 1 and 2) raises ``System role not supported`` on a
conversation that starts with a system message; Google's model cards say to put such
instructions in the first user turn instead, and llama.cpp's built-in ``gemma`` format does the
same (system text, a blank line, then the user's text). A registry entry with ``fold_system:
true`` gets that treatment from every backend: :class:`SystemFolded` wraps the backend (outside
the request cache, so cache keys hold what the model was really sent), and
``arenaforge config validate --render`` renders the stages' conversations the same way.

Example::

    >>> fold_system([{"role": "system", "content": "Be terse."},
    ...              {"role": "user", "content": "Sort a list."}])
    [{'role': 'user', 'content': 'Be terse.\\n\\nSort a list.'}]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arenaforge.pipeline.backends.base import Conversation, LogprobUnsupportedError, Message

SEPARATOR = "\n\n"  # between the system text and the user's (Gemma's own Gemma 3 template)


def fold_system(messages: Sequence[Message]) -> Conversation:
    """``messages`` with every system message moved into the first user turn after it.

    A system message with no user turn after it becomes a user turn of its own (a Magpie
    pre-query renders the system prompt before an open user turn: the folded text is then the
    start of that turn).
    """
    out: Conversation = []
    pending: list[str] = []
    for message in messages:
        if message.get("role") == "system":
            pending.append(str(message.get("content", "")))
            continue
        if pending and message.get("role") == "user":
            message = {**message, "content": SEPARATOR.join([*pending, message["content"]])}
            pending = []
        elif pending:  # an assistant turn before any user turn: the system text goes first
            out.append({"role": "user", "content": SEPARATOR.join(pending)})
            pending = []
        out.append(dict(message))
    if pending:
        out.append({"role": "user", "content": SEPARATOR.join(pending)})
    return out


class SystemFolded:
    """A backend whose conversations are sent with :func:`fold_system` applied.

    Everything else (``complete``, ``tokenize``, ``cache_stats``, ``prefers_batches``...)
    passes through to the wrapped backend.
    """

    def __init__(self, inner: Any):
        self.inner = inner
        self.model_id = inner.model_id

    def chat(self, conversations: list[Conversation], params: Any) -> Any:
        return self.inner.chat([fold_system(c) for c in conversations], params)

    def next_token_logprobs(self, conversations: list[Conversation], candidates: Sequence[str],
                            prefill: str = "") -> Any:
        read = getattr(self.inner, "next_token_logprobs", None)
        if read is None:
            raise LogprobUnsupportedError(f"model {self.model_id!r}: this backend gives no "
                                          "next-token probabilities")
        return read([fold_system(c) for c in conversations], candidates, prefill)

    def apply_chat_template(self, messages: Conversation,
                            add_generation_prompt: bool = True) -> str:
        return self.inner.apply_chat_template(fold_system(messages), add_generation_prompt)

    def traits(self) -> Any:
        from arenaforge.pipeline.backends.capabilities import traits_of

        return traits_of(self.inner)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet: no recursion during a failed __init__
            raise AttributeError(name)
        return getattr(self.inner, name)
