"""Typed configuration for a whole run: YAML file + ``--set dotted.key=value`` overrides.

Every error is raised before any work starts, as a ``ConfigError`` whose message names the file
and the dotted path of the offending field (``configs/x.yaml: rate.alpha: Input should be a valid
number``). Unknown keys are errors at every level, as in TRL's and open-r1's configs.

Each stage module declares its own config model (``StageSpec.config``); ``RunConfig`` lists one
field per stage, statically, and resolves the run-level defaults (models, limits) into them.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from arenaforge.pipeline.embedder import Precision
from arenaforge.pipeline.sandbox.config import SandboxConfig
from arenaforge.stages import PIPELINE

# Named stage modules, not the registry (``get_stage(name).config``): ``RunConfig`` declares one
# field per stage with its config class statically, so an editor, a type checker and grep
# follow ``cfg.judge.protocol`` to its field (tests/test_config.py checks that each class is
# its stage spec's ``config``).
from arenaforge.stages.arena.answer import AnswerConfig
from arenaforge.stages.arena.judge import JudgeConfig
from arenaforge.stages.arena.rate import RateConfig
from arenaforge.stages.instructions.clean import CleanConfig
from arenaforge.stages.instructions.decontaminate import DecontaminateConfig
from arenaforge.stages.instructions.difficulty import DifficultyConfig
from arenaforge.stages.instructions.mine import MineConfig
from arenaforge.stages.output.audit import AuditConfig
from arenaforge.stages.output.compress import CompressConfig
from arenaforge.stages.output.emit import EmitConfig
from arenaforge.stages.verification.repair import RepairConfig
from arenaforge.stages.verification.tests import TestGenConfig
from arenaforge.stages.verification.verify import VerifyConfig
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """A configuration problem, reported before any work starts (CLI exit code 2)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunnerConfig(_Strict):
    """How stages are executed. Does not enter the config hash: it changes speed, not rows."""

    kind: Literal["ray", "inline"] = "ray"
    ray_address: str | None = Field(
        default=None, description="Ray cluster address; RAY_ADDRESS is used when unset.")
    num_cpus: int | None = Field(default=None, ge=1, description="CPUs for a local Ray.")
    shard_size: int = Field(default=8, ge=1, description="Shard-key values per shard.")
    max_retries: int = Field(default=3, ge=0, description="Ray retries of a shard whose worker died.")
    model_workers: int | None = Field(
        default=None, ge=1, description="Concurrent shard tasks for LLM stages (default: cores): "
        "capped by the cores where a stage's models run here, as many as asked where they are "
        "all served (backend: openai), since those shards wait on the servers.")
    threads_per_worker: int | None = Field(
        default=None, ge=1, description="llama.cpp threads per worker (default: cores / workers).")
    request_cache: bool = Field(default=True, description="Cache model requests in the run dir.")
    request_cache_store: Literal["auto", "sqlite", "files"] = Field(
        default="auto", description="sqlite: one machine; files: one file per request, for "
        "several nodes writing to a shared run directory (NFS, s3://), where SQLite locks are "
        "unsafe; auto: sqlite for a local run directory, files for a remote (URI) one.")
    local_cache_dir: Path | None = Field(
        default=None, description="Local caches (embeddings) of a remote run directory; "
        "default: $ARENAFORGE_CACHE or the user cache dir, runs/<name>-<hash>.")
    gpu_memory_gb: float | None = Field(
        default=None, gt=0, description="Memory of one GPU of the Ray cluster: vLLM engines "
        "are then placed by the plan `arenaforge config plan` prints for the cluster's GPUs "
        "(GPU share, tensor parallel size, gpu_memory_utilization), and a run that cannot fit "
        "stops before any engine loads; null: as each registry entry's resources say.")
    task_gpus: dict[str, float] = Field(
        default_factory=dict, description="GPUs each shard task of a stage asks Ray for, by "
        "stage name (a task that asks for none sees no GPU); for the embedding stages "
        "(decontaminate, compress) the run's embedding service asks for the largest of their "
        "shares and embeds for both, their tasks for none: e.g. {decontaminate: 1}.")

    @field_validator("task_gpus")
    @classmethod
    def _known_stages(cls, task_gpus: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(task_gpus) - set(PIPELINE))
        if unknown:
            raise ValueError(f"unknown stage(s) {unknown}; known: {list(PIPELINE)}")
        bad = {k: v for k, v in task_gpus.items() if not 0 <= v <= 8}
        if bad:
            raise ValueError(f"GPUs per task must be in [0, 8], got {bad}")
        return task_gpus


class _RunBase(_Strict):
    name: str = Field(default="default", pattern=r"^[A-Za-z0-9._-]+$")
    seed: int = 0
    models_file: Path = Field(default=Path("models.yaml"),
                              description="Model registry; relative to the config file.")
    experts: list[str] = Field(min_length=1, description="Model ids that mine, answer and judge.")
    judges: list[str] | None = Field(default=None, description="Judge ids; default: experts.")
    stages: list[str] = Field(default_factory=lambda: list(PIPELINE),
                              description="Stages to run, in pipeline order.")
    artifacts_dir: str = Field(
        default="artifacts/runs", description="Parent of run directories: a path (relative to "
        "the cwd) or a pyarrow filesystem URI such as s3://bucket/runs.")
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    embedding_precision: Precision = Field(
        default="float32", description="sentence-embedding compute type of decontaminate and "
        "compress (one cache between them); bfloat16: ~2-3x faster on CPUs with AVX512-BF16 or "
        "AMX and on GPUs, the same decontamination decisions, but compress can keep another "
        "member of a group of rewordings and order its picks differently after that "
        "(arenaforge.pipeline.embedder); auto: bfloat16 where the processor computes it "
        "natively, else float32")

    @field_validator("stages")
    @classmethod
    def _check_stages(cls, stages: list[str]) -> list[str]:
        unknown = [s for s in stages if s not in PIPELINE]
        if unknown:
            raise ValueError(f"unknown stage(s) {unknown}; known: {list(PIPELINE)}")
        order = [PIPELINE.index(s) for s in stages]
        if order != sorted(order) or len(set(order)) != len(order):
            raise ValueError(f"stages must be unique and in pipeline order {list(PIPELINE)}")
        return stages

    @field_validator("artifacts_dir", mode="before")
    @classmethod
    def _artifacts_dir_text(cls, value: Any) -> Any:
        return str(value) if isinstance(value, Path) else value

    @field_validator("experts")
    @classmethod
    def _unique_experts(cls, experts: list[str]) -> list[str]:
        if len(set(experts)) != len(experts):
            raise ValueError("experts must be unique")
        return experts

    @property
    def judge_ids(self) -> list[str]:
        return list(self.judges) if self.judges is not None else list(self.experts)

    def stage_config(self, name: str) -> Any:
        return getattr(self, name)

    def circular_roles(self) -> list[str]:
        """Models that both judge battles and write the tests that decide the same battles:
        their verdicts and their tests are one opinion twice, so the audit of judge against
        execution would partly compare a judge with itself (``config validate`` and a run
        warn; the audit counts the trusted tests concerned, ``circular_trusted_tests``)."""
        if not {"judge", "tests"} <= set(self.stages):
            return []
        return sorted(set(self.judge.judges or ()) & set(self.tests.authors or ()))

    def role_warnings(self) -> list[str]:
        """What ``config validate`` and a run warn about (never an error: a user may choose it)."""
        return [f"{model} both judges battles (judge.judges) and writes the tests that decide "
                "them (tests.authors): the audit of the judges against execution then compares "
                "a judge with its own tests" for model in self.circular_roles()]

    def config_hash(self) -> str:
        """Hash of everything that decides the rows (not the runner, name or output location)."""
        payload = self.model_dump(mode="json", exclude={"runner", "name", "artifacts_dir"})
        payload["models_file"] = _file_digest(self.models_file)
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return f"missing:{path}"


class RunConfig(_RunBase):
    """The whole run: models, runner, sandbox and one section per stage.

    Declared field by field (as TRL's configs are) so an editor and grep can follow
    ``cfg.judge.protocol``; ``test_config`` checks that every registered stage has its section.
    Run-level defaults are resolved here, once: a stage's section names its models (``miners``,
    ``experts``, ``judges``, ``authors``) and limits explicitly, so a stage never needs the
    run config.
    """

    mine: MineConfig = Field(default_factory=MineConfig)
    clean: CleanConfig = Field(default_factory=CleanConfig)
    difficulty: DifficultyConfig = Field(default_factory=DifficultyConfig)
    decontaminate: DecontaminateConfig = Field(default_factory=DecontaminateConfig)
    compress: CompressConfig = Field(default_factory=CompressConfig)
    answer: AnswerConfig = Field(default_factory=AnswerConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    rate: RateConfig = Field(default_factory=RateConfig)
    tests: TestGenConfig = Field(default_factory=TestGenConfig)
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    repair: RepairConfig = Field(default_factory=RepairConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    emit: EmitConfig = Field(default_factory=EmitConfig)

    @model_validator(mode="after")
    def _resolve_run_defaults(self) -> RunConfig:
        experts, judges = list(self.experts), self.judge_ids
        fill = {"mine": {"miners": experts}, "answer": {"experts": experts},
                "tests": {"authors": experts}, "difficulty": {"judges": judges},
                "judge": {"judges": judges},
                "repair": {"timeout_s": self.verify.timeout_s,
                           "memory_mb": self.verify.memory_mb,
                           "fail_fast": self.verify.fail_fast,
                           "min_pass_fraction": self.verify.min_pass_fraction}}
        fill["compress"] = {"precision": self.embedding_precision}
        # what clean checks mined requests against: the system prompts they were mined under
        fill["clean"] = {"echo_of": tuple(dict.fromkeys(
            prompt for language in self.mine.languages for kind in self.mine.task_kinds
            if (prompt := self.mine.system_for(language, kind))))}
        check = self.decontaminate.embedding
        if check.precision is None:
            object.__setattr__(self, "decontaminate", self.decontaminate.model_copy(update={
                "embedding": check.model_copy(update={"precision": self.embedding_precision})}))
        for section, defaults in fill.items():
            current = getattr(self, section)
            unset = {k: v for k, v in defaults.items() if getattr(current, k) is None}
            if unset:
                # frozen: replace the section with its resolved copy (values already validated)
                object.__setattr__(self, section, current.model_copy(update=unset))
        return self


def _format_validation(err: ValidationError, source: str, text: str | None = None,
                       overridden: tuple[str, ...] = ()) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        # a value's line is the file's only where no --set replaced it
        mine = text is not None and not any(
            f"{loc}.".startswith(f"{o}.") or f"{o}.".startswith(f"{loc}.") for o in overridden)
        line = _yaml_line(text, e["loc"]) if mine else None
        lines.append(f"{source}: {loc}: {msg}" + (f" (line {line})" if line else ""))
    return "\n".join(lines)


def _yaml_line(text: str, loc: tuple) -> int | None:
    """The 1-based line of the YAML value at ``loc`` (keys and list indices), if it is there."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == str(part)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) \
                and part < len(node.value):
            node = node.value[part]
        else:
            return None
        if node is None:
            return None
    return node.start_mark.line + 1 if node is not None else None


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"rate.alpha=0.5"`` -> (["rate", "alpha"], 0.5); the value is parsed as YAML."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected dotted.key=value")
    key, raw = item.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"--set {item!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value is not valid YAML: {exc}") from None
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for i, part in enumerate(path[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {'.'.join(path)}: {'.'.join(path[:i + 1])} is not a section")
            node = child
        node[path[-1]] = value
    return data


def load_yaml_model(path: str | Path, model: type[BaseModel], overrides: list[str] | None = None,
                    what: str = "config") -> Any:
    """Read a YAML mapping, apply ``--set`` overrides and validate it as ``model``.

    Shared by run, train and ablation configs, so every config file fails the same way.

    Raises:
        ConfigError: missing file, bad YAML or bytes, not a mapping, unknown key, wrong type;
            the message names the file and the dotted field.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: {what} file not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    data = apply_overrides(data, list(overrides or []))
    source = str(path) + (" (with --set overrides)" if overrides else "")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        overridden = tuple(".".join(parse_override(o)[0]) for o in overrides or ())
        raise ConfigError(_format_validation(exc, source, path.read_text(encoding="utf-8"),
                                             overridden)) from None


def load_config(path: str | Path, overrides: list[str] | None = None) -> Any:
    """Load, override and validate a run config; relative model paths resolve against the file.

    Raises:
        ConfigError: missing file, bad YAML, unknown key, wrong type, unknown model id.
    """
    path = Path(path)
    cfg = load_yaml_model(path, RunConfig, overrides)
    source = str(path) + (" (with --set overrides)" if overrides else "")
    models_file = cfg.models_file if cfg.models_file.is_absolute() else path.parent / cfg.models_file
    cfg = cfg.model_copy(update={"models_file": models_file.resolve(), **_where_it_lies(
        path, overrides), **_absolute_inputs(cfg)})
    check_models(cfg, source)
    return cfg


def _absolute(path: Any) -> Any:
    """A path relative to the cwd made absolute (``~`` names one place already; ``None`` stays).

    >>> import os
    >>> _absolute("data/seed.jsonl") == os.path.join(os.getcwd(), "data", "seed.jsonl")
    True
    >>> _absolute("~/seed.jsonl"), _absolute(None)
    ('~/seed.jsonl', None)
    """
    if path is None or str(path).startswith("~") or os.path.isabs(path):
        return path
    return type(path)(os.path.abspath(path))


def _absolute_inputs(cfg: Any) -> dict[str, Any]:
    """The sections whose input files are named relative to the cwd, with those names made
    absolute, so that the run directory's ``config.yaml`` (``run_dir_yaml``) resumes from any
    cwd and the rows' fingerprints do not depend on where the run was started from: the
    instruction file, the benchmark files, the embedding models and the local cache."""
    bench = cfg.decontaminate
    return {
        "mine": cfg.mine.model_copy(update={"source": _absolute(cfg.mine.source)}),
        "decontaminate": bench.model_copy(update={
            "benchmarks": [b.model_copy(update={"path": _absolute(b.path)})
                           for b in bench.benchmarks],
            "embedding": bench.embedding.model_copy(
                update={"model": _absolute(bench.embedding.model)})}),
        "compress": cfg.compress.model_copy(update={"model": _absolute(cfg.compress.model)}),
        "runner": cfg.runner.model_copy(
            update={"local_cache_dir": _absolute(cfg.runner.local_cache_dir)}),
    }


def _where_it_lies(path: Path, overrides: list[str] | None) -> dict[str, str]:
    """A run directory's own ``config.yaml`` runs that directory, wherever it lies now (it
    records no location of its own: ``run_dir_yaml``), unless ``--set`` names another."""
    from arenaforge.pipeline import layout

    if path.name != layout.CONFIG or not (path.parent / layout.MANIFEST).is_file():
        return {}
    named = {o.split("=", 1)[0].strip() for o in overrides or ()}
    where = {"artifacts_dir": str(path.parent.parent), "name": path.parent.name}
    return {k: v for k, v in where.items() if k not in named}


def check_models(cfg: Any, source: str) -> None:
    """Every expert and judge id must be in the registry (the registry's own errors name its file)."""
    from arenaforge.pipeline.models import load_registry

    if not Path(cfg.models_file).is_file():
        raise ConfigError(
            f"{source}: models_file: the model registry {cfg.models_file} is not there; name "
            "where it is with --set models_file=/path/to/models.yaml (a relative path is "
            "taken from the config file's folder)")
    try:
        registry = load_registry(cfg.models_file)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for field, ids in (("experts", cfg.experts), ("judges", cfg.judge_ids)):
        for i, model_id in enumerate(ids):
            if model_id not in registry:
                raise ConfigError(
                    f"{source}: {field}.{i}: unknown model id {model_id!r}; "
                    f"{cfg.models_file} defines {sorted(registry)}")


def dump_config(cfg: Any) -> str:
    """The resolved config as YAML (what ``arenaforge config show`` prints)."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def run_dir_yaml(cfg: Any, run_dir: str | Path) -> str:
    """The config as its run directory records it (``config.yaml``), so that the directory
    resumes from it wherever it is copied or moved: without ``artifacts_dir`` (the run lies
    where the file lies; ``load_config`` reads it so), and with every file outside the run
    directory named absolute (``load_config`` made them so; ``models_file`` is resolved), since
    a relative name breaks as soon as the run directory moves and the file does not. The
    registry is named, not copied: it is a project file whose entries name files relative to
    itself (``config_dir``), and the config hash holds its bytes, not its name, so pointing a
    moved run at a copy (``--set models_file=...``) resumes it too."""
    return yaml.safe_dump(cfg.model_dump(mode="json", exclude={"artifacts_dir"}), sort_keys=False)
