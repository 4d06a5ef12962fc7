"""The model registry (``configs/models.yaml``): one typed entry per model.

A user adds a model by adding an entry; nothing else changes. An entry names its backend and
where its weights come from: installed pip packages (``packages`` + a ``files`` glob over what
they install), a local ``path`` (GGUF file or Hugging Face directory), or a server
(``base_url`` + ``model_name``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

BackendName = Literal["llamacpp", "openai", "vllm", "transformers", "sentence_transformers"]
_LOCAL_BACKENDS = ("llamacpp", "vllm", "transformers", "sentence_transformers")


class EngineResources(BaseModel):
    """What one model's engine needs on a Ray cluster (``arenaforge.pipeline.engines`` places it).

    Attributes:
        num_gpus: GPUs of one replica when ``tensor_parallel_size`` is 1 (fractions share a
            GPU); with tensor parallelism each of its workers gets one GPU in a placement
            group of ``tensor_parallel_size`` bundles, packed on as few nodes as possible.
        tensor_parallel_size: GPUs one replica spans (passed to vLLM as its TP size).
        replicas: engine actors of the model (default: one per model worker of the runner).
        threads: CPU threads of one replica (default: the runner's threads per model worker).
        num_cpus: Ray CPUs a replica reserves. 0 by default: a run uses one model stage at a
            time, so an idle engine must not hold cores the running stage's engines need.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_gpus: float = Field(default=0, ge=0)
    tensor_parallel_size: int = Field(default=1, ge=1)
    replicas: int | None = Field(default=None, ge=1)
    threads: int | None = Field(default=None, ge=1)
    num_cpus: float = Field(default=0, ge=0)


class ModelSpec(BaseModel):
    """One registry entry.

    Attributes:
        id: stable name used in configs and on rows (``qwen2.5-coder-0.5b``).
        backend: which backend serves it.
        family: model family (``qwen2``, ``smollm2``, ``gemma3``, ``minilm``): self-preference
            audits and Magpie pre-query templates key on it.
        role: ``expert`` (answers and judges), ``embedding``, or ``base`` (fine-tuning only).
        packages: pip distributions that ship the weights, in concatenation order.
        files: glob over the packages' installed files (paths as in ``pip show -f``).
        layout: ``file`` (one matched file, used in place), ``concat`` (matched parts joined
            into the cache directory), ``dir`` (the matched files' directory, used in place).
        filename: name of the assembled file (``concat``); defaults to ``<id>.gguf``.
        path: a local GGUF file or model directory (``~`` and ``$VARS`` expanded).
        sha256: expected sha256 of the weights file; verified when set.
        base_url: OpenAI-compatible server root (``http://127.0.0.1:8000/v1``).
        model_name: the name the server (or vLLM) knows the model by.
        tokenizer: a served model's GGUF file or Hugging Face tokenizer directory, from which
            the client reads the chat template (and BOS/EOS texts) to render raw prompts for
            Magpie mining and the logprob protocols; no weights are loaded.
        replica_urls: API roots of more servers of the same model (``base_url`` is the
            first); each request goes to the least busy, ``options.max_concurrency`` in flight
            on each.
        chat_template: inline Jinja template; overrides what the weights carry.
        chat_template_source: where the template comes from: ``weights`` (GGUF metadata or
            ``tokenizer_config.json``: of ``path``, or for a served model of ``tokenizer``),
            ``registry`` (``chat_template``), ``server`` (llama.cpp's ``/props``), ``none``.
        fold_system: the chat template refuses a system message (Gemma's raises "System role
            not supported"): every backend moves system text into the first user turn, as the
            model's documentation says (``arenaforge.pipeline.backends.role_folding``).
        config_dir: a directory holding the model's Hugging Face ``config.json`` and
            ``tokenizer_config.json`` (no weights), relative to the registry file: where
            ``arenaforge config validate --render`` reads the chat template and ``arenaforge
            config plan`` the model's shape when the weights (``path``) are not on this
            machine; the files of ``path`` win when they are.
        stop: extra stop strings for chat (end-of-turn markers the engine might not stop on).
        n_ctx: context length to allocate.
        options: backend-specific keyword options (e.g. ``timeout_s`` for ``openai``).
        resources: what an engine of a local backend needs on Ray (GPUs, tensor parallel
            size, replicas, threads); served models (``openai``) run no engine actor.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    backend: BackendName
    family: str
    role: Literal["expert", "embedding", "base"] = "expert"
    description: str = ""
    packages: tuple[str, ...] = ()
    files: str | None = None
    layout: Literal["file", "concat", "dir"] = "file"
    filename: str | None = None
    path: str | None = None
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    base_url: str | None = None
    model_name: str | None = None
    tokenizer: str | None = None
    replica_urls: tuple[str, ...] = ()
    chat_template: str | None = None
    chat_template_source: Literal["weights", "registry", "server", "none"] = "weights"
    fold_system: bool = False
    config_dir: str | None = None
    stop: tuple[str, ...] = ()
    n_ctx: int = Field(default=4096, ge=64)
    options: dict[str, Any] = Field(default_factory=dict)
    resources: EngineResources = Field(default_factory=EngineResources)

    @model_validator(mode="after")
    def _check_source(self) -> ModelSpec:
        has_pkg, has_path = bool(self.packages), self.path is not None
        if self.backend == "openai":
            if not (self.base_url and self.model_name):
                raise ValueError("backend 'openai' needs base_url and model_name")
        elif self.replica_urls or self.tokenizer:
            raise ValueError("tokenizer and replica_urls are for served models (backend 'openai')")
        elif self.backend in _LOCAL_BACKENDS and has_pkg == has_path:
            raise ValueError(f"backend {self.backend!r} needs exactly one of packages or path")
        if has_pkg and not self.files:
            raise ValueError("packages needs files: a glob over the files they install")
        if self.chat_template_source == "registry" and not self.chat_template:
            raise ValueError("chat_template_source 'registry' needs chat_template")
        if self.chat_template and self.chat_template_source != "registry":
            raise ValueError("chat_template is set: set chat_template_source to 'registry'")
        return self

    def __hash__(self) -> int:
        # pydantic's frozen hash would fail on the ``options`` dict; specs key caches.
        return hash(self.model_dump_json())

    @property
    def served(self) -> bool:
        """Served over HTTP (``backend: openai``): a call waits on a server, and no engine runs
        here or on the cluster for it."""
        return self.backend == "openai"

    @property
    def pip_command(self) -> str:
        """The command that installs this model's weight packages."""
        return "pip install " + " ".join(self.packages)


class _RegistryFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    models: list[ModelSpec]


def _format_errors(path: Path, raw: Any, exc: ValidationError) -> str:
    lines = [f"{path}: invalid model registry"]
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        where = ".".join(loc)
        # Name the entry by id too: "models.2" alone makes a user count list items.
        if len(loc) >= 2 and loc[0] == "models" and loc[1].isdigit():
            entries = raw.get("models") if isinstance(raw, dict) else None
            entry = entries[int(loc[1])] if isinstance(entries, list) else None
            if isinstance(entry, dict) and "id" in entry:
                where += f" (id {entry['id']!r})"
        lines.append(f"  {where}: {err['msg']}")
    return "\n".join(lines)


def load_registry(path: str | Path) -> dict[str, ModelSpec]:
    """Read a model registry YAML file.

    Returns:
        The entries keyed by id, in file order.

    Raises:
        ValueError: the file is not valid YAML, an entry is invalid (the message names the file
            and the dotted field path, e.g. ``models.1.n_ctx``) or two entries share an id.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from exc
    except UnicodeDecodeError as exc:  # a ValueError whose text would not name the file
        raise ValueError(f"{path}: not UTF-8 text: {exc}") from None
    try:
        parsed = _RegistryFile.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(_format_errors(path, raw, exc)) from None
    registry: dict[str, ModelSpec] = {}
    for i, spec in enumerate(parsed.models):
        if spec.id in registry:
            raise ValueError(f"{path}: models.{i}.id: duplicate model id {spec.id!r}")
        if spec.config_dir is not None and not Path(spec.config_dir).is_absolute():
            # relative to the registry file, like a run config's models_file
            spec = spec.model_copy(update={"config_dir": str((path.parent / spec.config_dir)
                                                             .resolve())})
        registry[spec.id] = spec
    return registry


def natural_key(text: str) -> list:
    """Sort key that orders ``part2`` before ``part10``.

    >>> sorted(["p10.bin", "p2.bin", "p1.bin"], key=natural_key)
    ['p1.bin', 'p2.bin', 'p10.bin']
    """
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", text)]


def _model_ids(value: Any, known: set[str]) -> set[str]:
    if isinstance(value, str):
        return {value} & known
    if isinstance(value, dict):
        return set().union(*(_model_ids(v, known) for v in value.values()))
    if isinstance(value, (list, tuple)):
        return set().union(*(_model_ids(v, known) for v in value))
    return set()


def stage_models(section: Any, known: set[str]) -> set[str]:
    """The registry models a stage's config section names (what its shards will call)."""
    if callable(getattr(section, "models_used", None)):  # the section knows (mine.source)
        return set(section.models_used()) & known
    return _model_ids(section.model_dump(mode="json"), known)
