"""The one LLM backend Protocol and the value types every backend speaks.

A backend turns prompts (raw text, for Magpie mining) or conversations (chat) into completions.
Both methods take a batch and return, per input, ``params.n`` completions. A request that fails
is a value (``finish_reason="error"`` with ``error`` set), so one bad prompt never kills a batch;
only a backend that cannot serve anything at all (server down, weights missing) raises.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

FinishReason = Literal["stop", "length", "error"]
Message = dict[str, str]
Conversation = list[Message]


class BackendError(RuntimeError):
    """A backend cannot serve requests at all (server unreachable, model cannot load)."""


class LogprobUnsupportedError(BackendError):
    """The backend cannot give next-token probabilities (llama.cpp, OpenAI-compatible servers
    and vLLM can; transformers cannot)."""


# Per conversation: ({token text: log probability} for the candidates that are one token, None),
# or (None, error) when the prompt could not be evaluated.
LogprobReading = tuple[dict[str, float] | None, str | None]


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """Sampling settings shared by every backend (OpenAI semantics: no top-k, no min-p).

    ``seed`` makes sampling reproducible; with ``n > 1`` sample ``i`` uses ``seed + i`` so the
    samples differ from each other yet every one can be replayed alone.

    >>> SamplingParams(max_tokens=8, stop=["\\n\\n"]).to_json()
    '{"max_tokens":8,"n":1,"seed":null,"stop":["\\\\n\\\\n"],"temperature":0.0,"top_p":1.0}'
    """

    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None
    # A hint to an embedded batched engine (llama.cpp's ``BatchedDecoder``): reuse the KV of a
    # prompt prefix another request of the call shares, as llama-cpp-python's own prompt cache
    # does between consecutive calls. It changes results only as much as llama.cpp's prompt
    # chunking does, not the request, so it is no part of the cache key (``to_json``).
    reuse_prefix: bool = False

    def __post_init__(self) -> None:
        # Lists are accepted for convenience but stored as a tuple so the value stays hashable.
        object.__setattr__(self, "stop", tuple(self.stop))
        if self.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"SamplingParams.stop must hold non-empty strings, got {self.stop!r}")

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces): used in cache keys and recorded on rows."""
        return _params_json(self)

    @classmethod
    def from_json(cls, text: str) -> SamplingParams:
        """Inverse of :meth:`to_json`."""
        return cls(**json.loads(text))

    def sample_seed(self, i: int) -> int | None:
        """The seed of the ``i``-th of ``n`` samples (``None`` when unseeded)."""
        return None if self.seed is None else self.seed + i


@functools.lru_cache(maxsize=256)
def _params_json(params: SamplingParams) -> str:
    """:meth:`SamplingParams.to_json`, once per distinct params: every request's cache key
    holds it, and ``dataclasses.asdict`` was ~8% of a served difficulty shard's CPU."""
    data = dataclasses.asdict(params)
    del data["reuse_prefix"]
    data["stop"] = list(params.stop)
    data["temperature"] = float(params.temperature)
    data["top_p"] = float(params.top_p)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclasses.dataclass(frozen=True)
class Completion:
    """One generated text. ``error`` is set (and ``finish_reason == "error"``) on failure."""

    text: str
    finish_reason: FinishReason
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None

    @classmethod
    def failed(cls, error: str) -> Completion:
        """A failed request as a value."""
        return cls(text="", finish_reason="error", error=error)

    def to_dict(self) -> dict:
        """Plain dict (for the request cache and for rows)."""
        return dataclasses.asdict(self)


@runtime_checkable
class Backend(Protocol):
    """What every LLM backend provides. See :func:`arenaforge.pipeline.backends.create_backend`."""

    model_id: str

    def complete(self, prompts: list[str], params: SamplingParams) -> list[list[Completion]]:
        """Raw text completion: per prompt, ``params.n`` completions."""

    def chat(self, conversations: list[Conversation],
             params: SamplingParams) -> list[list[Completion]]:
        """Chat completion: per conversation, ``params.n`` assistant replies."""

    def chat_template(self) -> str | None:
        """The Jinja chat template in use, or ``None`` when the model has none (base models)."""

    def apply_chat_template(self, messages: Conversation,
                            add_generation_prompt: bool = True) -> str:
        """Render messages to the exact prompt text the model sees."""

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` (raises ``NotImplementedError`` where not cheap)."""

    def close(self) -> None:
        """Release the model / connections."""


@runtime_checkable
class LogprobBackend(Backend, Protocol):
    """A backend that also reads next-token probabilities (the logprob judge protocols)."""

    def next_token_logprobs(self, conversations: list[Conversation], candidates: Sequence[str],
                            prefill: str = "") -> list[LogprobReading]:
        """Log probabilities of ``candidates`` as the next token of the assistant's reply.

        Each conversation is rendered with the generation prompt, followed by ``prefill`` (the
        start of the reply, e.g. ``"Score: "``); only candidates that are a single token of
        this model appear in a reading.
        """


def truncate_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` at the earliest stop string; say whether one was found.

    Backends whose engine cannot stop on strings (transformers) or that may overshoot use this.

    >>> truncate_at_stop("def f():\\n    pass\\n\\nprint(1)", ["\\n\\n"])
    ('def f():\\n    pass', True)
    >>> truncate_at_stop("abc", ["x"])
    ('abc', False)
    """
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def merged_stop(params: SamplingParams, model_stop: Sequence[str]) -> list[str]:
    """The request's stop strings followed by the model's own (de-duplicated, order kept)."""
    return list(dict.fromkeys([*params.stop, *model_stop]))
