"""Stand-in experts that misbehave: the load generator's servers with faults injected.

The experts of ``scripts/load_server.py`` (deterministic answers keyed by the request, so two
runs against them make the same dataset), served from threads of the calling process, with:

* a share ``rate`` of POST requests answered with a fault, drawn evenly from
  :data:`FAULT_KINDS`: HTTP 500, HTTP 503, a timeout (no answer until the client gave up, then
  the connection closed), a connection reset mid-reply (half the body, then a TCP RST), a
  truncated JSON body, a body that is not JSON (a proxy's HTML page), an empty completion
  (``200`` with ``""``, what a server that dropped the generation sends) and a reply far slower
  than the rest (answered in full after ``slow_s``);
* :meth:`ChaosExperts.down` / :meth:`ChaosExperts.up`: one expert's server stops (connections
  refused, open ones reset) and comes back on the same port: a fault that does not go away.

The tokenize route gets every fault but the empty completion (a tokenizer has no empty
answer to give). Each request is put down to the stage that sends it (:func:`stage_of`: mine's
raw completions of a pre-query prompt, the answers, tests, repairs, and the difficulty and judge
prompts), so the faults can be counted per stage. Bounded: loopback only, and nothing outlives
the calling process.

Example::

    experts = ChaosExperts({"expert-1": 0.8}, FaultPlan(rate=0.05, seed=0))
    experts.ports   # {"expert-1": 41234}
    experts.plan.counts()  # {"http_500": 3, ...} injected so far
    experts.plan.by_stage()  # {"mine": {"requests": 412, "http_500": 2, ...}, ...}
"""

from __future__ import annotations

import copy
import json
import random
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load_replies import Expert, Prompts
from load_server import Meter, _Server, make_handler

FAULT_KINDS = ("http_500", "http_503", "timeout", "reset", "truncated_json", "invalid_json",
               "empty", "slow")
PROXY_PAGE = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
# the stage that sends each kind of request (``load_replies.Prompts``' chat and logprob kinds)
STAGE_OF_KIND = {"answer": "answer", "testgen": "tests", "repair": "repair", "judge": "judge",
                 "difficulty": "difficulty", "task": "difficulty", "pointwise": "judge",
                 "pairwise": "judge"}


def stage_of(prompts: Prompts, route: str, body: dict[str, Any]) -> str:
    """The stage that sent a request: a raw completion without log probabilities is mining (a
    Magpie pre-query prompt), the others are told apart by their prompts; ``tokenize`` is the
    logprob protocols' check of their candidate tokens (difficulty's and judge's).

    >>> stage_of(Prompts(), "/v1/completions", {"prompt": "<|im_start|>user\\n", "seed": 7})
    'mine'
    >>> stage_of(Prompts(), "/v1/chat/completions", {"messages": [{"role": "user",
    ...                                                            "content": "Sort a list."}]})
    'answer'
    """
    if route == "/tokenize":
        return "tokenize"
    if "messages" in body:
        return STAGE_OF_KIND[prompts.chat_kind(body["messages"])]
    if not body.get("logprobs"):
        return "mine"
    prompt = body.get("prompt") or ""
    first = (prompt[0] if prompt else "") if isinstance(prompt, list) else prompt
    return STAGE_OF_KIND.get(prompts.logprob_kind(first) or "", "other")


class FaultPlan:
    """Which requests get which fault (thread-safe; seeded, so a plan is replayable in order).

    Args:
        rate: share of requests answered with a fault (0 to 1).
        seed: seed of the draws.
        hold_s: how long a ``timeout`` fault holds the request (longer than the client waits).
        slow_s: how long a ``slow`` reply takes.
        kinds: the kinds drawn from.
    """

    def __init__(self, rate: float = 0.0, seed: int = 0, hold_s: float = 6.0,
                 slow_s: float = 2.0, kinds: tuple[str, ...] = FAULT_KINDS) -> None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown or not 0 <= rate <= 1:
            raise ValueError(f"fault plan: rate {rate} (0 to 1), kinds {sorted(unknown)} unknown")
        self.rate, self.kinds, self.hold_s, self.slow_s = rate, tuple(kinds), hold_s, slow_s
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(FAULT_KINDS, 0)
        self._stages: dict[str, dict[str, int]] = {}
        self.requests = 0

    def draw(self, route: str, stage: str = "") -> str | None:
        """The fault for the next request to ``route``, sent by ``stage`` (None: answer it
        well)."""
        kinds = self.kinds if route != "/tokenize" else tuple(k for k in self.kinds
                                                               if k != "empty")
        with self._lock:
            self.requests += 1
            counts = self._stages.setdefault(stage, {"requests": 0})
            counts["requests"] += 1
            if not kinds or self._rng.random() >= self.rate:
                return None
            kind = self._rng.choice(kinds)
            self._counts[kind] += 1
            counts[kind] = counts.get(kind, 0) + 1
            return kind

    def counts(self) -> dict[str, int]:
        """Faults injected so far, by kind."""
        with self._lock:
            return dict(self._counts)

    def by_stage(self) -> dict[str, dict[str, int]]:
        """Per stage that sent them (:func:`stage_of`): its requests and the faults they met,
        by kind."""
        with self._lock:
            return {stage: dict(counts) for stage, counts in self._stages.items()}

    def restart(self, rate: float) -> None:
        """Inject at ``rate`` from now on, the counts started afresh (a clean run's requests
        are not the faulted run's)."""
        with self._lock:
            self.rate, self.requests, self._stages = rate, 0, {}
            self._counts = dict.fromkeys(FAULT_KINDS, 0)


def emptied(payload: dict[str, Any]) -> dict[str, Any]:
    """A completions answer with every choice's text emptied (and its log probabilities gone).

    >>> emptied({"choices": [{"text": "x", "logprobs": {}}]})["choices"]
    [{'text': ''}]
    """
    out = copy.deepcopy(payload)
    for choice in out.get("choices", []):
        if "message" in choice:
            choice["message"]["content"] = ""
        else:
            choice["text"] = ""
            choice.pop("logprobs", None)
    if "usage" in out:
        out["usage"]["completion_tokens"] = 0
    return out


class _Down:
    """Whether an expert's server is down (its handlers reset open connections)."""

    def __init__(self) -> None:
        self.flag = False


def make_faulty_handler(expert: Expert, plan: FaultPlan, down: _Down, ms_token: float,
                        ms_prompt: float) -> type:
    """The load generator's handler for ``expert`` with ``plan``'s faults injected."""
    base = make_handler(expert, Meter(), ms_token, ms_prompt)

    class Faulty(base):  # type: ignore[misc, valid-type]
        fault: str | None = None

        def do_POST(self) -> None:
            body = self.read_json()
            if down.flag:
                self._reset(b"")
                return
            self.fault = plan.draw(self.path, stage_of(expert.prompts, self.path, body))
            if self.fault in ("http_500", "http_503", "timeout", "invalid_json"):
                if self.fault == "timeout":  # the client gives up first; then the line drops
                    time.sleep(plan.hold_s)
                    self.close_connection = True
                elif self.fault == "invalid_json":
                    self._raw(200, PROXY_PAGE, "text/html")
                else:
                    message = {"error": {"message": f"injected {self.fault}"}}
                    self._raw(500 if self.fault == "http_500" else 503,
                              json.dumps(message).encode(), "application/json")
                return
            if self.fault == "slow":
                time.sleep(plan.slow_s)
            self.post(body)

        def _send(self, status: int, payload: dict) -> None:
            if status != 200 or self.fault not in ("reset", "truncated_json", "empty"):
                super()._send(status, payload)
            elif self.fault == "empty":
                super()._send(status, emptied(payload))
            else:
                data = json.dumps(payload).encode()
                if self.fault == "truncated_json":
                    self._raw(200, data[: len(data) // 2], "application/json")
                else:
                    self._reset(data)

        def _raw(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _reset(self, data: bytes) -> None:
            """Half of ``data`` under headers announcing all of it, then a TCP reset."""
            if data:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
            # linger 0: close() sends RST at once instead of an orderly FIN
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True

    return Faulty


class _QuietServer(_Server):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client killed mid-request (the run was SIGKILLed) is what a chaos run does
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ChaosExperts:
    """One misbehaving server per expert on 127.0.0.1, served from daemon threads.

    Args:
        experts: ``{name: skill}`` as ``load_server.py --expert`` takes them.
        plan: the faults to inject (its ``rate`` may be changed while serving).
        ms_per_token, ms_per_prompt_token: the servers' simulated latency.
    """

    def __init__(self, experts: dict[str, float], plan: FaultPlan, ms_per_token: float = 0.2,
                 ms_per_prompt_token: float = 0.02) -> None:
        self.plan = plan
        prompts = Prompts()
        self._handlers: dict[str, type] = {}
        self._down: dict[str, _Down] = {}
        self._servers: dict[str, _Server] = {}
        self.ports: dict[str, int] = {}
        for name, skill in experts.items():
            self._down[name] = _Down()
            self._handlers[name] = make_faulty_handler(Expert(name, skill, prompts), plan,
                                                       self._down[name], ms_per_token,
                                                       ms_per_prompt_token)
            self._serve(name, 0)

    def _serve(self, name: str, port: int) -> None:
        server = _QuietServer(("127.0.0.1", port), self._handlers[name])
        threading.Thread(target=server.serve_forever, daemon=True, name=f"chaos-{name}").start()
        self._servers[name] = server
        self.ports[name] = server.server_address[1]

    def url(self, name: str) -> str:
        """The API root of ``name``'s server, as the registry names it."""
        return f"http://127.0.0.1:{self.ports[name]}/v1"

    def down(self, name: str) -> None:
        """Stop ``name``'s server: new connections are refused, open ones reset."""
        self._down[name].flag = True
        server = self._servers.pop(name)
        server.shutdown()
        server.server_close()

    def up(self, name: str) -> None:
        """Serve ``name`` again, on the port it had."""
        self._serve(name, self.ports[name])
        self._down[name].flag = False

    def close(self) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()
        self._servers.clear()
