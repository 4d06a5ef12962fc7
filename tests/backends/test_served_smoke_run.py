"""configs/smoke.yaml entirely through servers: every expert behind its own llama.cpp server.

The three smoke experts are served by three llama-cpp-python servers on loopback (the same
GGUF files as the embedded run); the registry entries keep the smoke ids, so only
``models_file`` changes. Mining renders its prompts from each entry's ``tokenizer`` (the GGUF),
difficulty and judge run their logprob protocols (``logprob``, ``pointwise_logprob``, the
defaults) over the completions route's ``logprobs``. The run must emit a dataset.
"""

import json
import subprocess
import sys

import pytest
from arenaforge.pipeline.models import ModelNotInstalledError, load_registry, resolve_weights

from tests.backends.served import ROOT, Served, free_port, python_server_command

pytestmark = [pytest.mark.models, pytest.mark.slow]  # a whole real run: minutes
EXPERTS = ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m")


@pytest.fixture()
def servers(tmp_path):
    pytest.importorskip("uvicorn")
    registry = load_registry(ROOT / "configs/models.yaml")
    started = []
    try:
        for model_id in EXPERTS:
            try:
                gguf = resolve_weights(registry[model_id])
            except ModelNotInstalledError as exc:
                pytest.skip(str(exc))
            port = free_port()
            # logits_all (on in llama-cpp-python's server) holds n_ctx x vocab floats: keep
            # n_ctx at what the smoke prompts need.
            server = Served(python_server_command(gguf, port, alias=model_id, n_ctx=2048),
                            port, tmp_path / f"{model_id}.log").start()
            started.append((model_id, gguf, server))
        yield started
    finally:
        for _, _, server in started:
            server.stop()


def test_smoke_run_through_servers_with_logprob_protocols(servers, tmp_path):
    registry = load_registry(ROOT / "configs/models.yaml")
    entries = [{"id": model_id, "backend": "openai", "family": registry[model_id].family,
                "base_url": server.url, "model_name": model_id, "tokenizer": str(gguf),
                "stop": list(registry[model_id].stop), "n_ctx": 2048,
                "options": {"max_concurrency": 2, "timeout_s": 600}}
               for model_id, gguf, server in servers]
    models = tmp_path / "models-served.yaml"
    models.write_text(json.dumps({"models": entries}))  # JSON is YAML
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "arenaforge.pipeline.cli", "run", "configs/smoke.yaml", "--quiet",
           "--set", f"artifacts_dir={runs}", "--set", f"models_file={models}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=3600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    run_dir = runs / "smoke"
    stats = json.loads((run_dir / "stats.json").read_text())
    assert stats["mine"]["rows_out"] > 0
    assert stats["emit"]["rows_out"] > 0, stats
    from arenaforge.pipeline.store import RunStore

    store = RunStore(run_dir)
    votes = [v for r in store.stage("difficulty").read().to_pylist()
             for v in r["difficulty_votes"]]
    assert votes and sum(v["score"] is not None for v in votes) > 0  # logprob votes over HTTP
    battles = store.stage("judge").read().to_pylist()
    assert battles and {b["judge"] for b in battles} == {"smollm2-135m"}
    assert {b["protocol"] for b in battles} == {"pointwise_logprob"}
    assert sum(b["parse_error"] is None for b in battles) > 0  # readings came over HTTP
