"""What a registry entry's backend can serve, known without loading the model.

A stage protocol (a judge protocol, a difficulty protocol) names the one capability it needs;
its stage config lists, per model it will ask, a :class:`CapabilityNeed`
(:func:`protocol_needs`), and ``arenaforge config validate`` and ``arenaforge run`` compare each
with :func:`capabilities_of` before any model loads (:mod:`arenaforge.pipeline.capability_check`).

Example::

    >>> from arenaforge.pipeline.models.registry import ModelSpec
    >>> spec = ModelSpec(id="m", backend="transformers", family="qwen2", path="/models/m")
    >>> caps = capabilities_of(spec)
    >>> caps.chat, caps.next_token_logprobs, caps.max_batch_size
    (True, False, 1)
    >>> caps.lacking("next_token_logprobs")
    True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

if TYPE_CHECKING:
    from arenaforge.pipeline.models import ModelSpec

Capability = Literal["raw_completion", "chat", "next_token_logprobs"]
CAPABILITIES: tuple[Capability, ...] = get_args(Capability)

# The backends' own defaults for the batch they serve at once (their constructors' keyword
# defaults; tests/backends/test_capabilities.py checks they still agree).
LLAMACPP_BATCH_SIZE = 16
OPENAI_MAX_CONCURRENCY = 4


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What one model's backend serves.

    Attributes:
        raw_completion: ``complete`` on raw prompt text (Magpie mining).
        chat: ``chat`` on conversations.
        next_token_logprobs: ``next_token_logprobs`` (``LogprobBackend``: the logprob protocols).
        max_batch_size: requests one backend serves at once (llama.cpp's batch, a server's
            concurrency times its replicas); ``None``: the engine schedules its own (vLLM).
    """

    raw_completion: bool
    chat: bool
    next_token_logprobs: bool
    max_batch_size: int | None = None

    def lacking(self, need: Capability) -> bool:
        """Whether this backend cannot serve ``need``."""
        if need not in CAPABILITIES:
            raise ValueError(f"unknown capability {need!r}; known: {list(CAPABILITIES)}")
        return not getattr(self, need)


NOTHING = Capabilities(raw_completion=False, chat=False, next_token_logprobs=False)


def capabilities_of(spec: ModelSpec) -> Capabilities:
    """The capabilities of a registry entry, from its ``backend`` kind and template source.

    A local engine without a chat template (``chat_template_source: none``, a base model)
    cannot chat, and cannot read logprobs either: those are read after a rendered conversation.
    A server applies its own template for ``chat``; its logprobs are read on a prompt rendered
    on the client, which ``none`` rules out too.
    """
    templated = spec.chat_template_source != "none"
    if spec.backend == "llamacpp":
        batch = int(spec.options.get("batch_size", LLAMACPP_BATCH_SIZE))
        return Capabilities(True, templated, templated, batch)
    if spec.backend == "openai":
        per_server = int(spec.options.get("max_concurrency", OPENAI_MAX_CONCURRENCY))
        return Capabilities(True, True, templated, per_server * (1 + len(spec.replica_urls)))
    if spec.backend == "vllm":
        return Capabilities(True, templated, templated, None)
    if spec.backend == "transformers":
        # TransformersBackend completes and chats one prompt at a time; it reads no logprobs.
        return Capabilities(True, templated, False, 1)
    if spec.backend == "sentence_transformers":
        return NOTHING  # embeddings only
    raise ValueError(f"model {spec.id!r}: no capabilities known for backend {spec.backend!r}")


@dataclasses.dataclass(frozen=True)
class EngineTraits:
    """What a loaded backend tells the stages that call it, wherever it runs.

    A stage reads these off the backend ``ctx.backend`` hands it: in this process that is the
    engine itself behind the request cache, on Ray a ``RemoteBackend`` that reports what its
    engine actor reported when it loaded, so both give the same answers.

    Attributes:
        prefers_batches: the engine serves a whole batch at once and caches prompt prefixes
            itself (vLLM, servers): a stage sends its readings as one call, not one by one.
        next_token_logprobs: it reads next-token probabilities (the logprob protocols).
        context_length: tokens of prompt and reply it holds (``None``: not known).
    """

    prefers_batches: bool
    next_token_logprobs: bool
    context_length: int | None = None


def traits_of(backend: Any) -> EngineTraits:
    """The :class:`EngineTraits` of a backend; a wrapper (request cache, timer, remote client)
    answers for the engine it wraps through its own ``traits()``."""
    own = getattr(type(backend), "traits", None)
    if callable(own):
        return backend.traits()
    length = getattr(backend, "context_length", None)
    return EngineTraits(prefers_batches=bool(getattr(backend, "prefers_batches", False)),
                        next_token_logprobs=callable(getattr(backend, "next_token_logprobs",
                                                             None)),
                        context_length=int(length) if length is not None else None)


@dataclasses.dataclass(frozen=True)
class CapabilityNeed:
    """One model that one stage's protocol will ask for one capability.

    Attributes:
        stage: the stage name (``judge``).
        protocol: the configured protocol (``pointwise_logprob``).
        model_id: the registry id the stage will ask.
        needs: the capability the protocol needs.
        alternatives: every protocol of the stage and what it needs (to suggest one that fits).
    """

    stage: str
    protocol: str
    model_id: str
    needs: Capability
    alternatives: tuple[tuple[str, Capability], ...] = ()


def protocol_needs(stage: str, protocols: Mapping[str, Any], chosen: str,
                   model_ids: Sequence[str]) -> list[CapabilityNeed]:
    """The needs of a stage whose models all serve one protocol of ``protocols``.

    Args:
        stage: the stage name.
        protocols: the stage's protocol registry (name -> object with a ``needs`` attribute).
        chosen: the configured protocol name.
        model_ids: the models the stage will ask, in config order.
    """
    alternatives = tuple((name, p.needs) for name, p in protocols.items())
    return [CapabilityNeed(stage, chosen, m, protocols[chosen].needs, alternatives)
            for m in model_ids]


class JudgedSection:
    """A stage section whose ``judges`` all serve its one ``protocol`` (judge, difficulty).

    Subclasses (pydantic stage configs with ``judges`` and ``protocol`` fields) set
    ``capability_stage`` and ``protocol_registry``; the capability check and the stage read
    the judges through here.
    """

    capability_stage: ClassVar[str]
    protocol_registry: ClassVar[Mapping[str, Any]]

    def judge_ids(self, run_cfg: Any = None) -> list[str]:
        """The judges this stage asks: its own ``judges`` (a run fills them in), else those
        of ``run_cfg`` when given."""
        if self.judges is not None:  # type: ignore[attr-defined]
            return list(self.judges)  # type: ignore[attr-defined]
        return list(run_cfg.judge_ids) if run_cfg is not None else []

    def capability_needs(self, run_cfg: Any) -> list[CapabilityNeed]:
        """What each judge's backend must serve for ``protocol`` (checked at config time)."""
        return protocol_needs(self.capability_stage, self.protocol_registry,
                              self.protocol, self.judge_ids(run_cfg))  # type: ignore[attr-defined]
