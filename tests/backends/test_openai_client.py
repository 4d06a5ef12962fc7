"""The OpenAI-compatible client against a scripted local HTTP server (retries, errors, limits).

The real-model end of the protocol is in test_openai_llamacpp_server.py.
"""

import json
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from arenaforge.pipeline.backends.base import BackendError, SamplingParams
from arenaforge.pipeline.backends.openai_server import (
    OpenAIServerBackend,
    parse_response,
    request_body,
)


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


RESET = "<reset>"


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
            script = self.script
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
            if text == RESET:  # half an answer, then a TCP reset (a server dying mid-reply)
                whole = ok_completion("lost").encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(whole)))
                self.end_headers()
                self.wfile.write(whole[: len(whole) // 2])
                self.wfile.flush()
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True
                with script.lock:
                    script.in_flight -= 1
                return
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

    Handler.script = script
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    script.httpd = httpd
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


def test_a_non_json_answer_is_retried_and_one_that_stays_so_is_a_value(server):
    server.push("/v1/completions", 200, "<html>proxy error</html>")
    server.push("/v1/completions", 200, ok_completion("x")[:20])  # truncated JSON
    [[c]] = client(server).complete(["x"], SamplingParams())
    assert c.text == "x" and c.error is None and len(server.bodies) == 3
    for _ in range(3):
        server.push("/v1/completions", 200, "<html>proxy error</html>")
    [[c]] = client(server, max_retries=2).complete(["y"], SamplingParams())
    assert c.finish_reason == "error" and "non-JSON" in c.error and len(server.bodies) == 6


def test_empty_and_malformed_answers_are_asked_again(server):
    # what chaos runs found: a server that dropped a generation answers 200 with an empty
    # completion or without choices, and the row took it as the model's answer
    server.push("/v1/chat/completions", body=json.dumps(
        {"choices": [{"message": {"content": ""}, "finish_reason": "stop"}]}))
    server.push("/v1/chat/completions", body=json.dumps({"choices": []}))
    server.push("/v1/chat/completions", body=json.dumps(
        {"choices": [{"message": {"content": "hey"}, "finish_reason": "stop"}]}))
    [[reply]] = client(server).chat([[{"role": "user", "content": "hi"}]], SamplingParams())
    assert reply.text == "hey" and reply.error is None and len(server.bodies) == 3


def test_an_empty_completion_every_time_is_the_models_answer(server):
    for _ in range(3):
        server.push("/v1/completions", body=ok_completion(""))
    [[c]] = client(server, max_retries=2).complete(["x"], SamplingParams())
    assert c.text == "" and c.error is None and len(server.bodies) == 3


def test_a_connection_reset_mid_reply_is_sent_again(server):
    server.push("/v1/completions", body=RESET)
    out = client(server, max_concurrency=1).complete(["a", "b"], SamplingParams())
    assert [row[0].text for row in out] == ["a", "b"] and len(server.bodies) == 3


def test_concurrency_limit(server):
    server.delay = 0.2  # each answer long enough for the three slots to overlap on a busy machine
    client(server, max_concurrency=3).complete([str(i) for i in range(9)], SamplingParams())
    assert server.max_in_flight == 3


def test_a_timeout_is_retried_and_one_that_keeps_timing_out_is_a_value(server):
    server.delay = 1.0
    [[c]] = client(server, timeout_s=0.2, max_retries=1).complete(["x"], SamplingParams())
    assert c.finish_reason == "error" and c.error.startswith("timeout")
    assert len(server.bodies) == 2  # it was asked twice
    server.delay = 0.0
    [[c]] = client(server, timeout_s=0.2).complete(["x"], SamplingParams())
    assert c.text == "x"


def test_server_down_raises_naming_the_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    backend = OpenAIServerBackend("m", f"http://127.0.0.1:{port}/v1", "x", backoff_s=0.01,
                                  down_wait_s=0.2, template_from_server=False)
    with pytest.raises(BackendError, match=f"127.0.0.1:{port}.*is it running"):
        backend.complete(["a", "b"], SamplingParams())


# -- next-token logprobs, replicas, servers that go away ---------------------------------------
def logprob_answer(top):
    return json.dumps({"choices": [{"text": "x", "finish_reason": "length",
                                    "logprobs": {"tokens": ["x"], "token_logprobs": [-0.1],
                                                 "top_logprobs": [top]}}]})


def test_logprobs_use_the_completions_route_with_the_client_rendered_prompt(server):
    backend = client(server, chat_template="{% for m in messages %}<{{ m.content }}>{% endfor %}",
                     logprobs_top_k=5)
    # no tokenize route here: every candidate counts as one token
    server.push("/v1/completions", body=logprob_answer({"A": -0.2, "B": -1.9, "C": -9999.0}))
    [(reading, error)] = backend.next_token_logprobs([[{"role": "user", "content": "q"}]],
                                                     ["A", "B", "C", " D"], prefill="Verdict: ")
    assert error is None
    assert reading == {"A": -0.2, "B": -1.9, "C": float("-inf"), " D": float("-inf")}
    body = next(b for route, b in server.bodies if route == "/v1/completions")
    assert body == {"model": "served-name", "prompt": "<q>Verdict: ", "n": 1, "max_tokens": 1,
                    "temperature": 0.0, "top_p": 1.0, "logprobs": 5}


def test_logprobs_in_llama_server_shape_and_missing_logprobs(server):
    # One request in flight, so the queued answers meet the conversations in order (with
    # four in flight the second request could take the first answer).
    backend = client(server, chat_template="{{ messages[0].content }}", max_concurrency=1)
    server.push("/v1/completions", body=json.dumps({"choices": [{"text": "A", "logprobs": {
        "content": [{"id": 1, "token": "A", "logprob": -0.1, "top_logprobs": [
            {"id": 1, "token": "A", "logprob": -0.1}, {"id": 2, "token": "B", "logprob": -2.4}]}]
    }}]}))
    server.push("/v1/completions", body=ok_completion("no logprobs here"))
    conv = [{"role": "user", "content": "q"}]
    (first, err1), (second, err2) = backend.next_token_logprobs([conv, conv], ["A", "B"])
    assert first == {"A": -0.1, "B": -2.4} and err1 is None
    assert second is None and "no logprobs" in err2


def test_a_logprob_answer_without_logprobs_is_asked_again(server):
    backend = client(server, chat_template="{{ messages[0].content }}")
    server.push("/v1/completions", body=ok_completion("A"))  # logprobs dropped
    server.push("/v1/completions", body=logprob_answer({"A": -0.1, "B": -2.0}))
    [(reading, error)] = backend.next_token_logprobs([[{"role": "user", "content": "q"}]],
                                                     ["A", "B"])
    assert error is None and reading == {"A": -0.1, "B": -2.0}


def test_a_failing_tokenize_route_is_retried_and_then_fails_its_readings_not_the_run(server):
    # A 500 from /tokenize was taken for "no tokenize route": the process then read every
    # candidate as one token, so one transient error changed every reading after it.
    backend = client(server, chat_template="{{ messages[0].content }}")
    server.push("/tokenize", 500, "busy")
    server.push("/tokenize", body=json.dumps({"tokens": []}))
    assert backend.tokenize("") == []
    for _ in range(4):
        server.push("/tokenize", 500, "busy")
    conv = [{"role": "user", "content": "q"}]
    readings = backend.next_token_logprobs([conv, conv], ["A"])
    assert [r[0] for r in readings] == [None, None]
    assert all("tokenize failed after 3 retries" in r[1] for r in readings)
    # nothing was concluded from it: the next call asks the route again
    for text in ["", "A"]:
        server.push("/tokenize", body=json.dumps({"tokens": [1] if text else []}))
    server.push("/v1/completions", body=logprob_answer({"A": -0.3}))
    [(reading, error)] = backend.next_token_logprobs([conv], ["A"])
    assert error is None and reading == {"A": -0.3}


def test_single_token_candidates_come_from_the_tokenize_route(server):
    backend = client(server, chat_template="{{ messages[0].content }}")
    tokens = {"": [], "A": [5], " A": [6], "AB": [5, 7]}

    def tokenize_answer(text):
        return json.dumps({"tokens": tokens[text]})

    for text in ["", " A", "A", "AB"]:  # the backend asks "" first, then sorted candidates
        server.push("/tokenize", body=tokenize_answer(text))
    server.push("/v1/completions", body=logprob_answer({"A": -0.5, "AB": -0.7}))
    [(reading, _)] = backend.next_token_logprobs([[{"role": "user", "content": "q"}]],
                                                 ["A", " A", "AB"])
    assert reading == {"A": -0.5, " A": float("-inf")}  # AB is two tokens: never read


def test_replicas_share_requests_and_each_keeps_its_limit(server):
    second = Script()
    # A second scripted server on another port, reusing the fixture's handler class.
    from http.server import ThreadingHTTPServer

    handler = type(server.httpd.RequestHandlerClass.__name__, (server.httpd.RequestHandlerClass,),
                   {"script": second})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        server.delay = second.delay = 0.05
        url2 = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        backend = client(server, replicas=(url2,), max_concurrency=2)
        out = backend.complete([str(i) for i in range(12)], SamplingParams())
        assert [row[0].text for row in out] == [str(i) for i in range(12)]  # order kept
        assert server.max_in_flight <= 2 and second.max_in_flight <= 2
        assert len(server.bodies) + len(second.bodies) == 12
        assert min(len(server.bodies), len(second.bodies)) >= 4  # both did a share
    finally:
        httpd.shutdown()


def test_a_dead_replica_hands_its_requests_to_the_live_one(server):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    backend = client(server, replicas=(dead,), max_concurrency=2, down_wait_s=5)
    out = backend.complete([str(i) for i in range(6)], SamplingParams())
    assert [row[0].text for row in out] == [str(i) for i in range(6)]
    assert len(server.bodies) == 6  # every request answered once, by the live server


def test_calls_from_many_threads_share_one_limit(server):
    server.delay = 0.2  # each answer long enough for the three slots to overlap on a busy machine
    backend = client(server, max_concurrency=3)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda k: backend.complete([f"{k}-{i}" for i in range(3)],
                                                 SamplingParams()), range(4)))
    assert server.max_in_flight == 3 and len(server.bodies) == 12
