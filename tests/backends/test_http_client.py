"""``pipeline/backends/http_client.py`` against real sockets on loopback: what a failure is,
and the environment's proxy settings."""

import http.server
import socket
import threading
import time
from typing import ClassVar

import pytest
from arenaforge.pipeline.backends.http_client import HttpClient, failure


class _Handler(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []
    delay_s = 0.0

    def do_POST(self):
        type(self).seen.append(self.path)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(type(self).delay_s)
        body = b'{"ok": 1}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # the late answer's client has hung up: expected


@pytest.fixture
def server():
    handler = type("Handler", (_Handler,), {"seen": [], "delay_s": 0.0})
    srv = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv, handler
    srv.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_answer_a_refused_connection_and_a_late_answer(server):
    srv, handler = server
    # a timeout with room for a busy machine's loopback answer (no retry here), and a late
    # answer far past it
    client = HttpClient(timeout_s=1.5)
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1/completions"
    assert client.post(url, json={"prompt": "é"}).json() == {"ok": 1}
    with pytest.raises(Exception) as refused:
        client.post(f"http://127.0.0.1:{_free_port()}/v1/completions", json={})
    assert failure(refused.value) == "down"
    handler.delay_s = 6.0
    with pytest.raises(Exception) as late:
        client.post(url, json={})
    assert failure(late.value) == "timeout"


def test_the_environments_proxy_is_used_unless_no_proxy_names_the_host(server, monkeypatch):
    srv, handler = server
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{srv.server_address[1]}")
    monkeypatch.setenv("NO_PROXY", "localhost")
    client = HttpClient(timeout_s=5)
    # the proxy gets the absolute URL of a host it alone can reach
    assert client.post("http://vllm-node-7.invalid:8000/v1/completions",
                       json={}).json() == {"ok": 1}
    assert handler.seen == ["http://vllm-node-7.invalid:8000/v1/completions"]
    # the environment is read when a client is made, as httpx reads it
    monkeypatch.setenv("NO_PROXY", "vllm-node-7.invalid")
    client = HttpClient(timeout_s=5)
    with pytest.raises(Exception) as direct:
        client.post("http://vllm-node-7.invalid:8000/v1/completions", json={})
    assert failure(direct.value) == "down" and len(handler.seen) == 1
