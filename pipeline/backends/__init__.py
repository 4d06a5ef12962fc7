"""LLM backends behind one Protocol, built from registry entries.

Example::

    from arenaforge.pipeline.backends import SamplingParams, create_backend
    from arenaforge.pipeline.models import load_registry

    spec = load_registry("configs/models.yaml")["qwen2.5-coder-0.5b"]
    backend = create_backend(spec, n_threads=2, cache_dir=Path("/tmp/req-cache"))
    [[reply]] = backend.chat([[{"role": "user", "content": "Reverse a list in Python"}]],
                             SamplingParams(max_tokens=64, seed=0))
    print(reply.text, reply.finish_reason, backend.cache_stats())
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arenaforge.pipeline.backends.base import (
    Backend,
    BackendError,
    Completion,
    Conversation,
    SamplingParams,
    truncate_at_stop,
)
from arenaforge.pipeline.backends.chat_template import ChatTemplateError, render_chat_template
from arenaforge.pipeline.backends.request_cache import CachedBackend

if TYPE_CHECKING:
    from arenaforge.pipeline.backends.template_source import TemplateInfo
    from arenaforge.pipeline.models import ModelSpec

__all__ = [
    "Backend",
    "BackendError",
    "CachedBackend",
    "ChatTemplateError",
    "Completion",
    "Conversation",
    "SamplingParams",
    "create_backend",
    "prefer_passive_openmp",
    "render_chat_template",
    "truncate_at_stop",
]


log = logging.getLogger(__name__)


def prefer_passive_openmp() -> None:
    """Make llama.cpp's OpenMP threads sleep, not spin, while they wait for each other.

    llama.cpp (built with OpenMP) synchronises its threads several times per layer. With the
    default active wait, a process whose threads share cores with other busy processes (Ray
    workers, sandboxes) loses whole time slices at each barrier: measured here under load,
    SmolLM2 with 2 threads fell from 14 to 1.2 tokens/s; with ``OMP_WAIT_POLICY=PASSIVE`` it
    kept 14. libgomp reads the variable once, when llama.cpp's library loads, so this only
    acts before the first ``import llama_cpp``; an explicit user setting is kept.
    """
    if "llama_cpp" in sys.modules:
        if "OMP_WAIT_POLICY" not in os.environ:
            log.debug("llama_cpp already imported: OMP_WAIT_POLICY can no longer be set")
        return
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _template_override(spec: ModelSpec) -> str | None:
    """``None``: take the template from the weights/server; ``""``: the model has none."""
    if spec.chat_template_source == "registry":
        return spec.chat_template
    return "" if spec.chat_template_source == "none" else None


def _served_template(spec: ModelSpec) -> TemplateInfo | None:
    """A served model's template on the client; ``None``: ask the server (``/props``)."""
    from arenaforge.pipeline.backends.template_source import TemplateInfo, load_template

    if spec.chat_template_source == "server":
        return None
    if spec.chat_template_source == "none":
        return TemplateInfo(None)
    source = spec.tokenizer or spec.path
    files = load_template(source) if source else None
    if spec.chat_template_source == "registry":
        return TemplateInfo(spec.chat_template, *((files.bos, files.eos, files.add_bos)
                                                  if files else ()))
    return files  # None: nothing local names it, so ask the server (the old llama.cpp way)


def create_backend(spec: ModelSpec, *, n_threads: int | None = None,
                   cache_dir: Path | None = None, cache_store: str = "sqlite",
                   **options: Any) -> Backend:
    """Build the backend a registry entry names, loading its weights.

    Args:
        spec: the registry entry.
        n_threads: CPU threads for this backend (llama.cpp, transformers).
        cache_dir: when given, wrap the backend in a persistent request cache there
            (``backend.cache_stats()`` counts hits and misses).
        cache_store: the cache's store, ``sqlite`` or ``files`` (shared filesystems).
        **options: backend keyword options; they override the entry's ``options``.

    Raises:
        arenaforge.pipeline.models.ModelNotInstalledError: weight packages missing (with the pip command).
        ValueError: the entry cannot serve text generation (an embedding model).
    """
    from arenaforge.pipeline.models import resolve_weights, weights_fingerprint

    opts = {**spec.options, **options}
    template = _template_override(spec)
    backend: Backend
    if spec.backend == "llamacpp":
        prefer_passive_openmp()
        from arenaforge.pipeline.backends.llamacpp import LlamaCppBackend

        backend = LlamaCppBackend(spec.id, resolve_weights(spec), n_ctx=spec.n_ctx,
                                  stop=spec.stop, chat_template=template, n_threads=n_threads,
                                  **opts)
    elif spec.backend == "openai":
        from arenaforge.pipeline.backends.openai_server import OpenAIServerBackend

        info = _served_template(spec)
        template_kwargs = {"template_from_server": info is None}
        if info is not None:
            template_kwargs.update(chat_template=info.template, bos_token=info.bos,
                                   eos_token=info.eos, strip_bos=bool(info.add_bos))
        backend = OpenAIServerBackend(spec.id, spec.base_url or "", spec.model_name or "",
                                      replicas=spec.replica_urls, stop=spec.stop,
                                      **template_kwargs, **opts)
    elif spec.backend == "vllm":
        from arenaforge.pipeline.backends.vllm_offline import VllmBackend

        backend = VllmBackend(spec.id, str(resolve_weights(spec)), n_ctx=spec.n_ctx,
                              stop=spec.stop, chat_template=template or None, **opts)
    elif spec.backend == "transformers":
        from arenaforge.pipeline.backends.transformers_local import TransformersBackend

        backend = TransformersBackend(spec.id, resolve_weights(spec), stop=spec.stop,
                                      chat_template=template or None, n_threads=n_threads,
                                      **opts)
    else:
        raise ValueError(f"model {spec.id!r} uses backend {spec.backend!r}, which does not "
                         "generate text; load it with arenaforge.pipeline.backends.embeddings.create_embedder")
    if cache_dir is not None:
        backend = CachedBackend(backend, cache_dir, weights_fingerprint(spec), store=cache_store)
    if spec.fold_system:
        # outside the cache: its keys hold the conversations the model was really sent
        from arenaforge.pipeline.backends.role_folding import SystemFolded

        backend = SystemFolded(backend)
    return backend
