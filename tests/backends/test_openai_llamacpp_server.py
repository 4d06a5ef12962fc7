"""The ``openai`` backend against a real OpenAI-compatible server on 127.0.0.1.

The server is llama-cpp-python's (``llama_cpp.server``), launched through
``pipeline.backends.llamacpp_serve`` so that it loads the model with the same AMX workaround
as the embedded backend, serving the embedded SmolLM2 weights.
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.backends import BackendError, ChatTemplateError, SamplingParams, create_backend
from pipeline.models import ModelNotInstalledError, ModelSpec, load_registry, resolve_weights

pytestmark = pytest.mark.models
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    pytest.importorskip("uvicorn")
    pytest.importorskip("sse_starlette")
    pytest.importorskip("starlette_context")
    httpx = pytest.importorskip("httpx")
    try:
        gguf = resolve_weights(load_registry(ROOT / "configs/models.yaml")["smollm2-135m"])
    except ModelNotInstalledError as exc:
        pytest.skip(str(exc))
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    log = open(log_path, "wb")  # noqa: SIM115 - a pipe would fill with the load log and block
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.backends.llamacpp_serve", "--model", str(gguf),
         "--model_alias", "smol", "--host", "127.0.0.1", "--port", str(port),
         "--n_threads", "1", "--n_ctx", "1024", "--seed", "0", "--verbose", "false"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/models", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("server did not come up within 90 s")
    yield proc, url
    proc.terminate()
    proc.wait(20)
    log.close()


def spec_for(url: str, **extra) -> ModelSpec:
    return ModelSpec(id="smol-served", backend="openai", family="smollm2", base_url=url,
                     model_name="smol", stop=("<|im_end|>",), n_ctx=1024, **extra)


def test_complete_and_chat_generate_real_text(served, tmp_path):
    _, url = served
    backend = create_backend(spec_for(url), cache_dir=tmp_path)
    params = SamplingParams(n=2, max_tokens=8, temperature=0.8, seed=3)
    [[a, b]] = backend.complete(["def add(a, b):"], params)
    assert a.error is None and a.text.strip() and a.completion_tokens > 0 and a.prompt_tokens > 0
    assert a.finish_reason in ("stop", "length")
    [[reply]] = backend.chat([[{"role": "user", "content": "Say hello."}]],
                             SamplingParams(max_tokens=8))
    assert reply.error is None and reply.text.strip()
    # seeded sampling replays on the server too (the request cache is bypassed by a new dir)
    fresh = create_backend(spec_for(url))
    [[a2, b2]] = fresh.complete(["def add(a, b):"], params)
    assert (a2.text, b2.text) == (a.text, b.text)
    backend.complete(["def add(a, b):"], params)
    assert backend.cache_stats() == {"hits": 1, "misses": 2}  # complete + chat, then a hit


def test_template_comes_from_the_registry_when_the_server_has_none(served):
    _, url = served
    with pytest.raises(ChatTemplateError, match="does not report a chat template"):
        create_backend(spec_for(url)).apply_chat_template([{"role": "user", "content": "x"}])
    backend = create_backend(spec_for(url, chat_template_source="registry",
                                      chat_template="{% for m in messages %}[{{ m.content }}]"
                                                    "{% endfor %}"))
    assert backend.apply_chat_template([{"role": "user", "content": "x"}]) == "[x]"
    assert len(backend.tokenize("hello world")) >= 2


def test_request_timing_out_is_a_value(served):
    _, url = served
    backend = create_backend(spec_for(url), timeout_s=0.05)
    [[c]] = backend.complete(["Write a long story."], SamplingParams(max_tokens=200))
    assert c.finish_reason == "error" and c.error.startswith("timeout")


def test_server_down_is_a_clear_error(served):
    proc, url = served
    proc.kill()  # not terminate: uvicorn would first finish the timed-out generation
    proc.wait(20)
    backend = create_backend(spec_for(url), backoff_s=0.05, max_retries=1)
    with pytest.raises(BackendError, match="cannot reach .* at http://127.0.0.1"):
        backend.chat([[{"role": "user", "content": "hi"}]], SamplingParams(max_tokens=4))
