"""Configuration of a sandbox pool."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class SandboxConfig(BaseModel):
    """How untrusted code is executed.

    ``mode``: ``auto`` picks ``forkserver`` when every isolation layer is available and fails
    with a message naming what is missing otherwise; ``degraded`` (no namespaces, no uid drop)
    runs only when chosen here explicitly, and every result records the mode that produced it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("workers")
    @classmethod
    def _workers_in_range(cls, value):
        if value != "auto" and not 1 <= value <= 256:
            raise ValueError("workers: expected 'auto' or 1-256")
        return value

    mode: Literal["auto", "forkserver", "per_exec", "degraded"] = "auto"
    workers: int | Literal["auto"] = Field(
        "auto", description="sandbox slots of this process's pool; auto: the CPUs Ray assigned "
        "to this worker (a shard task holds one, so a node runs one slot per core it gives to "
        "shards), else the cores this process may use")
    timeout_s: float = Field(5.0, gt=0)
    memory_mb: int = Field(1024, ge=32)
    output_limit_bytes: int = Field(1 << 20, ge=1024)
    recycle_after: int = Field(500, ge=1, description="fork-server jobs before a fresh sandbox")
    uid_base: int = Field(64000, ge=1000, description="worker slot N runs as uid uid_base + N")
    max_procs: int = Field(64, ge=4, description="processes a job may have at once")
    max_open_files: int = Field(256, ge=16)
    work_dir_mb: int = Field(64, ge=1, description="size of each tmpfs (/work, /tmp) of a job")
    tail_bytes: int = Field(4096, ge=0, description="stdout/stderr kept on the result")
    site_packages: bool = Field(True, description="let jobs import the host's site-packages")
    start_timeout_s: float = Field(15.0, gt=0)


def pool_size(workers: int | Literal["auto"]) -> int:
    """Slots for a pool: ``workers``, or for ``auto`` the CPUs Ray assigned to this worker
    process (rounded up) when it runs in one, else the cores this process may use."""
    if workers != "auto":
        return workers
    import math
    import os

    try:
        import ray

        context = ray.get_runtime_context() if ray.is_initialized() else None
        if context is not None and context.worker.mode == ray.WORKER_MODE:  # not the driver
            cpus = context.get_assigned_resources().get("CPU")
            if cpus:
                return max(1, math.ceil(cpus))
    except ImportError:
        pass
    return max(1, len(os.sched_getaffinity(0)))
