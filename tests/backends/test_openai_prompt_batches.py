"""Logprob readings several to a request (``options.prompts_per_request``), as vLLM takes them.

Against a loopback server that answers a list ``prompt`` the way ``vllm serve`` does (one
choice per prompt, numbered by ``index``), and against the benchmark's load generator.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from arenaforge.pipeline.backends.openai_server import OpenAIServerBackend

ROOT = Path(__file__).resolve().parents[2]


class ListPromptServer:
    """Answers each prompt ``p`` with top logprobs ``{p: -0.5, "z": -2.0}``; the choices come
    back in reverse order (their ``index`` says whose is whose). A list holding ``"short"``
    gets one choice too few; one holding ``"refuse"`` gets HTTP 400."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/completions":  # no tokenize route: candidates are tokens
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with outer.lock:
                    outer.bodies.append(body)
                prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
                status, choices = 200, [
                    {"index": i, "text": p, "finish_reason": "length",
                     "logprobs": {"tokens": [p], "token_logprobs": [-0.5],
                                  "top_logprobs": [{p: -0.5, "z": -2.0}]}}
                    for i, p in enumerate(prompts)][::-1]
                if "short" in prompts:
                    choices = choices[1:]
                if "refuse" in prompts:
                    status = 400
                data = json.dumps({"choices": choices} if status == 200
                                  else {"error": {"message": "refused"}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture()
def server():
    s = ListPromptServer()
    yield s
    s.httpd.shutdown()


def backend(url, **options):
    return OpenAIServerBackend("m", url, "served", chat_template="{{ messages[0].content }}",
                               max_concurrency=2, backoff_s=0.01, **options)


def conversations(texts):
    return [[{"role": "user", "content": t}] for t in texts]


def test_readings_travel_several_to_a_request_and_meet_their_prompts(server):
    texts = [f"p{i}" for i in range(10)]
    readings = backend(server.url, prompts_per_request=4).next_token_logprobs(
        conversations(texts), ["z", *texts])
    assert [r[1] for r in readings] == [None] * 10
    # each reading is its own prompt's, though the server listed the choices backwards
    assert [max(r[0], key=r[0].get) for r in readings] == texts
    assert sorted(len(b["prompt"]) for b in server.bodies) == [2, 4, 4]
    assert sorted(p for b in server.bodies for p in b["prompt"]) == sorted(texts)


def test_one_prompt_per_request_by_default(server):
    readings = backend(server.url).next_token_logprobs(conversations(["a", "b", "c"]), ["a", "z"])
    assert [r[0]["z"] for r in readings] == [-2.0] * 3
    assert sorted(b["prompt"] for b in server.bodies) == ["a", "b", "c"]  # strings, not lists


def test_a_failed_or_miscounted_request_fails_only_its_own_prompts(server):
    texts = ["a", "b", "refuse", "c", "d", "short", "e", "f", "g"]
    readings = backend(server.url, prompts_per_request=3).next_token_logprobs(
        conversations(texts), ["z"])
    errors = {t: r[1] for t, r in zip(texts, readings)}
    assert [t for t, e in errors.items() if e is None] == ["e", "f", "g"]
    assert all("HTTP 400" in errors[t] for t in ("a", "b", "refuse"))
    for t in ("c", "d", "short"):
        assert "2 choices for a request of 3 prompts" in errors[t]
        assert "prompts_per_request: 1" in errors[t]
    assert [r[0] for r in readings if r[1] is not None] == [None] * 6
    # a miscounted answer is asked again (3 retries), a refused request is not
    sent = [tuple(b["prompt"]) for b in server.bodies]
    assert sent.count(("c", "d", "short")) == 4 and sent.count(("a", "b", "refuse")) == 1


def test_a_small_call_still_reaches_every_replica():
    servers = [ListPromptServer(), ListPromptServer()]
    try:
        b = OpenAIServerBackend("m", servers[0].url, "served", replicas=(servers[1].url,),
                                chat_template="{{ messages[0].content }}", max_concurrency=1,
                                prompts_per_request=32)
        readings = b.next_token_logprobs(conversations(["a", "b", "c", "d"]), ["z"])
        assert [r[0] for r in readings] == [{"z": -2.0}] * 4
        assert [len(s.bodies) for s in servers] == [1, 1]  # two requests of two, one each
    finally:
        for s in servers:
            s.httpd.shutdown()


def test_prompts_per_request_below_one_is_refused():
    with pytest.raises(ValueError, match="prompts_per_request"):
        OpenAIServerBackend("m", "http://127.0.0.1:9/v1", "served", prompts_per_request=0)


def test_the_load_generator_reads_alike_one_or_many_to_a_request():
    sys.path.insert(0, str(ROOT / "scripts"))
    import load_server

    servers = load_server.serve({"expert-1": 0.8}, ms_per_token=0.0, ms_per_prompt_token=0.0)
    url = f"http://127.0.0.1:{servers['expert-1'].server_address[1]}/v1"
    try:
        prompts = conversations([f"Rate the difficulty of task {i}. Score:" for i in range(12)])
        digits = [str(d) for d in range(10)]
        singly = OpenAIServerBackend("expert-1", url, "expert-1", chat_template=load_server.CHATML,
                                     max_concurrency=4).next_token_logprobs(prompts, digits)
        many = OpenAIServerBackend("expert-1", url, "expert-1", chat_template=load_server.CHATML,
                                   max_concurrency=4, prompts_per_request=6
                                   ).next_token_logprobs(prompts, digits)
        assert many == singly and all(error is None for _, error in many)
        served = httpx.get(f"{url.removesuffix('/v1')}/stats").json()
        assert served["http_requests"] == 12 + 2 and sum(served["requests"].values()) == 24
    finally:
        for s in servers.values():
            s.shutdown()
            s.server_close()
