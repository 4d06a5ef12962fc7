"""Configuration of a sandbox pool."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SandboxConfig(BaseModel):
    """How untrusted code is executed.

    ``mode``: ``auto`` picks ``forkserver`` when every isolation layer is available and fails
    with a message naming what is missing otherwise; ``degraded`` (no namespaces, no uid drop)
    runs only when chosen here explicitly, and every result records the mode that produced it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["auto", "forkserver", "per_exec", "degraded"] = "auto"
    workers: int = Field(2, ge=1, le=256)
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
