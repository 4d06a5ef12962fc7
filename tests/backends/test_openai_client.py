"""The OpenAI-compatible client against a scripted local HTTP server (retries, errors, limits).

The real-model end of the protocol is in test_openai_llamacpp_server.py.
"""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline.backends.base import BackendError, SamplingParams
from pipeline.backends.openai_server import OpenAIServerBackend, parse_response, request_body


class Script:
    """Answers queued per route; records every request body; tracks requests in flight."""

    def __init__(self):
        self.queue: dict[str, list[tuple[int, dict, str]]] = {}
        self.bodies: list[tuple[str, dict]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay = 0.0
        self.lock = threading.Lock()

    def push(self, route, status=200, body="", headers=None):
        self.queue.setdefault(route, []).append((status, headers or {}, body))


def ok_completion(text, reason="stop"):
    return json.dumps({"choices": [{"text": text, "finish_reason": reason}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 2}})


@pytest.fixture()
def server():
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with script.lock:
                script.bodies.append((self.path, body))
                script.in_flight += 1
                script.max_in_flight = max(script.max_in_flight, script.in_flight)
                queued = script.queue.get(self.path)
                answer = queued.pop(0) if queued else (200, {}, ok_completion(body.get(
                    "prompt", "chat")))
            time.sleep(script.delay)
            status, headers, text = answer
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                self.wfile.write(text.encode())
            except BrokenPipeError:
                pass  # the client gave up (timeout test)
            with script.lock:
                script.in_flight -= 1

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    script.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield script
    httpd.shutdown()


def client(script, **kw):
    kw.setdefault("backoff_s", 0.01)
    kw.setdefault("template_from_server", False)
    return OpenAIServerBackend("m", script.url, "served-name", **kw)


def test_request_body_and_parse():
    body = request_body("x", SamplingParams(max_tokens=7, stop=["\n"], temperature=0.5), 11,
                        prompt="p")
    assert body == {"model": "x", "n": 1, "max_tokens": 7, "temperature": 0.5, "top_p": 1.0,
                    "prompt": "p", "stop": ["\n"], "seed": 11}
    assert "seed" not in request_body("x", SamplingParams(), None, prompt="p")
    chat = parse_response({"choices": [{"message": {"content": "hi"}, "finish_reason": "length"}],
                           "usage": {"prompt_tokens": 4, "completion_tokens": 9}}, chat=True)
    assert (chat.text, chat.finish_reason, chat.prompt_tokens, chat.completion_tokens) == (
        "hi", "length", 4, 9)
    broken = parse_response({"choices": []}, chat=False)
    assert broken.finish_reason == "error" and "malformed" in broken.error


def test_n_samples_are_separate_requests_with_consecutive_seeds(server):
    out = client(server).complete(["a", "b"], SamplingParams(n=2, seed=7, max_tokens=5))
    assert [[c.text for c in row] for row in out] == [["a", "a"], ["b", "b"]]
    seeds = sorted((b["prompt"], b["seed"]) for _, b in server.bodies)
    assert seeds == [("a", 7), ("a", 8), ("b", 7), ("b", 8)]
    assert all(b["model"] == "served-name" and b["n"] == 1 for _, b in server.bodies)


def test_chat_route_and_model_stops(server):
    server.push("/v1/chat/completions", body=json.dumps(
        {"choices": [{"message": {"content": "hey"}, "finish_reason": "stop"}]}))
    backend = client(server, stop=("<|im_end|>",))
    [[reply]] = backend.chat([[{"role": "user", "content": "hi"}]],
                             SamplingParams(stop=["\n\n"]))
    assert reply.text == "hey" and reply.error is None
    route, body = server.bodies[0]
    assert route == "/v1/chat/completions"
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["stop"] == ["\n\n", "<|im_end|>"]


def test_429_and_5xx_are_retried_with_retry_after(server):
    server.push("/v1/completions", 429, "slow down", {"Retry-After": "0.2"})
    server.push("/v1/completions", 503, "busy")
    start = time.monotonic()
    [[c]] = client(server).complete(["x"], SamplingParams())
    assert c.text == "x" and c.error is None
    assert time.monotonic() - start >= 0.2  # Retry-After honoured over the 10 ms backoff
    assert len(server.bodies) == 3


def test_exhausted_retries_and_client_errors_are_values(server):
    for _ in range(3):
        server.push("/v1/completions", 500, "internal")
    server.push("/v1/completions", 400, "context too long")
    backend = client(server, max_retries=2, max_concurrency=1)
    out = backend.complete(["a", "b", "c"], SamplingParams())
    assert out[0][0].finish_reason == "error" and "HTTP 500" in out[0][0].error
    assert "HTTP 400" in out[1][0].error and "context too long" in out[1][0].error
    assert out[2][0].text == "c"  # the batch went on
    assert len(server.bodies) == 5  # 3 tries for a, 1 for b (no retry on 4xx), 1 for c


def test_non_json_answer_is_a_value(server):
    server.push("/v1/completions", 200, "<html>proxy error</html>")
    [[c]] = client(server).complete(["x"], SamplingParams())
    assert c.finish_reason == "error" and "non-JSON" in c.error


def test_concurrency_limit(server):
    server.delay = 0.1
    client(server, max_concurrency=3).complete([str(i) for i in range(9)], SamplingParams())
    assert server.max_in_flight == 3


def test_timeout_is_a_value(server):
    server.delay = 1.0
    [[c]] = client(server, timeout_s=0.2).complete(["x"], SamplingParams())
    assert c.finish_reason == "error" and c.error.startswith("timeout")


def test_server_down_raises_naming_the_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    backend = OpenAIServerBackend("m", f"http://127.0.0.1:{port}/v1", "x", backoff_s=0.01,
                                  max_retries=1, template_from_server=False)
    with pytest.raises(BackendError, match=f"127.0.0.1:{port}.*is it running"):
        backend.complete(["a", "b"], SamplingParams())
