"""Real OpenAI-compatible llama.cpp servers on 127.0.0.1 for the backend tests.

The launchers live in :mod:`arenaforge.pipeline.backends.llamacpp_serve` (the benchmark uses them too).
"""

from __future__ import annotations

import json
from pathlib import Path

from arenaforge.pipeline.backends.llamacpp_serve import (  # noqa: F401 - re-exported for the tests
    ROOT,
    Served,
    free_port,
    llama_server_binary,
    llama_server_command,
    python_server_command,
)


def served_run_config(tmp_path: Path, url: str, gguf: Path, **options) -> Path:
    """A run config (inline, no request cache) whose only expert is ``smol-served`` at ``url``,
    its chat template read from ``gguf`` by the registry's ``tokenizer`` field."""
    entry = {"id": "smol-served", "backend": "openai", "family": "smollm2", "base_url": url,
             "model_name": "smol", "tokenizer": str(gguf), "stop": ["<|im_end|>"],
             "n_ctx": 1024, "options": options}
    models = tmp_path / "models.yaml"
    models.write_text(json.dumps({"models": [entry]}))  # JSON is YAML
    config = tmp_path / "served.yaml"
    config.write_text(f"name: served\nmodels_file: {models}\nexperts: [smol-served]\n"
                      "runner: {kind: inline, request_cache: false}\n")
    return config
