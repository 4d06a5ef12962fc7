"""Serve a GGUF over HTTP: llama-cpp-python's OpenAI-compatible server, or llama.cpp's own.

``python -m arenaforge.pipeline.backends.llamacpp_serve`` takes the arguments of
``python -m llama_cpp.server``; the difference is that the model loads with the same
extra-buffer rule as :class:`arenaforge.pipeline.backends.llamacpp.LlamaCppBackend` (off on a llama.cpp
build with AMX kernels, which crash on some hosts). Needs the server dependencies (``fastapi``,
``uvicorn``, ``sse-starlette``, ``starlette-context``, ``pydantic-settings``). It answers one
request at a time; llama.cpp's ``llama-server`` (a C++ binary, not shipped by any package here)
batches ``--parallel`` requests continuously, as ``vllm serve`` and SGLang do.

:class:`Served` starts either on a loopback port and waits until it answers (the server tests
and ``scripts/bench_backends.py --server`` use it).

Example::

    python -m arenaforge.pipeline.backends.llamacpp_serve --model model.gguf --host 127.0.0.1 --port 8081
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port that nothing listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llama_server_binary() -> str | None:
    """llama.cpp's ``llama-server``: ``$LLAMA_SERVER``, else the one on ``PATH``."""
    found = os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")
    return found if found and os.access(found, os.X_OK) else None


def python_server_command(gguf: Path, port: int, alias: str = "smol", n_ctx: int = 1024,
                          threads: int = 1) -> list[str]:
    """llama-cpp-python's server (``logits_all`` is on by default: it can give logprobs)."""
    return [sys.executable, "-m", "arenaforge.pipeline.backends.llamacpp_serve", "--model", str(gguf),
            "--model_alias", alias, "--host", "127.0.0.1", "--port", str(port),
            "--n_threads", str(threads), "--n_ctx", str(n_ctx), "--seed", "0",
            "--verbose", "false"]


def llama_server_command(binary: str, gguf: Path, port: int, alias: str = "smol",
                         parallel: int = 4, n_ctx_per_slot: int = 1024, threads: int = 1,
                         flash_attn: str = "auto") -> list[str]:
    """llama.cpp's server with ``parallel`` slots of ``n_ctx_per_slot`` tokens each.

    ``flash_attn``: llama-server's default (``auto``) turns flash attention on for CPU, which
    moves next-token logprobs by up to 0.19 from the embedded backend (no flash attention) on
    SmolLM2; ``off`` keeps them within 0.024 (other prompt splits; see tests/backends).
    """
    return [binary, "-m", str(gguf), "--alias", alias, "--host", "127.0.0.1",
            "--port", str(port), "--parallel", str(parallel),
            "--ctx-size", str(parallel * n_ctx_per_slot), "--threads", str(threads),
            "--threads-batch", str(threads), "--flash-attn", flash_attn, "--no-webui",
            "--log-disable"]


class Served:
    """One server process; ``url`` is its API root (``.../v1``). Restartable on its port."""

    def __init__(self, command: list[str], port: int, log_path: Path) -> None:
        self.command, self.port, self.log_path = command, port, log_path
        self.url = f"http://127.0.0.1:{port}/v1"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> Served:
        import httpx

        log = open(self.log_path, "ab")  # noqa: SIM115 - a pipe would fill and block the server
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(self.command, cwd=ROOT, env=env, stdout=log,
                                     stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/models", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.kill()
        raise RuntimeError(f"server did not come up within {timeout:g} s")

    def kill(self) -> None:
        """SIGKILL (a dying server mid-request, not a graceful stop)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(20)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def main() -> None:
    """Run ``llama_cpp.server`` (reads ``sys.argv``)."""
    from arenaforge.pipeline.backends.llamacpp import build_has_amx, model_params_override
    from llama_cpp.server.__main__ import main as server_main

    with model_params_override(use_extra_bufts=not build_has_amx()):
        server_main()


if __name__ == "__main__":
    main()
