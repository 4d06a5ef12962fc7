"""A load generator that stands in for the experts' engines: OpenAI-compatible HTTP on 127.0.0.1.

One ``ThreadingHTTPServer`` per expert (one port each, as one ``vllm serve`` per model would be),
speaking what :mod:`arenaforge.pipeline.backends.openai_server` sends: ``POST /v1/chat/completions``,
``POST /v1/completions`` (with ``logprobs: k``: the top-k next-token log probabilities in the
legacy completions shape, of each prompt when ``prompt`` is a list, as vLLM answers it),
``POST /tokenize`` (which candidates are single tokens),
``GET /v1/models``, ``GET /props`` (a ChatML template) and ``GET /health``; ``GET /stats`` says
what was served. Every reply waits ``ms_per_request``, plus ``ms_per_token`` per generated token
and ``ms_per_prompt_token`` per prompt token (4 characters make a token), so the pipeline, not
the engines, sets the pace once they are fast.

Replies are deterministic, keyed by the expert, the request's text and its seed, and plausible
for each prompt the stages send (their templates; written by ``scripts/load_replies.py``):
the task of a request is recognised with ``synth_arena.task_of``, and

* an answer is the family's reference code with the expert's ``skill`` probability, otherwise a
  wrong variant, a stub that raises or a syntax error (``synth_arena._answer``);
* a test-writing request gets the asked number of ``assert`` lines whose expected values come
  from the reference (1 in 12 deliberately wrong);
* a repair request gets the reference code with probability one half;
* a judge sees whether an answer holds the reference code and says so (in 10% of readings it
  errs), as a generative verdict/score or as next-token probabilities of the score digits or
  letters; a difficulty judge gives a digit spread around 4-7 (2 for requests that are no task)
  and a high P(Yes) for concrete tasks.

Bounded: it listens on loopback only, and exits when its stdin closes (the parent ended) or
after ``--max-seconds``.

Usage (what ``bench_scale.py`` does)::

    python scripts/load_server.py --expert expert-1=0.85 --expert expert-2=0.6 \\
        --ms-per-token 0.2   # prints {"expert-1": PORT, ...} on one line, then serves
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load_replies import Expert, Prompts, n_tokens, tokens

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


class Meter:
    """What one server did: requests by kind, simulated seconds, wall with a request in flight."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: dict[str, int] = {}  # prompts served, by kind
        self.http_requests = 0  # a list-prompt request carries several
        self.simulated_s = 0.0
        self.busy_s = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self._since = 0.0

    def enter(self) -> None:
        with self.lock:
            if self.in_flight == 0:
                self._since = time.perf_counter()
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def leave(self, kinds: list[str], simulated: float) -> None:
        """One HTTP request done; ``kinds``: the kind of each prompt it carried."""
        with self.lock:
            self.in_flight -= 1
            if self.in_flight == 0:
                self.busy_s += time.perf_counter() - self._since
            for kind in kinds:
                self.requests[kind] = self.requests.get(kind, 0) + 1
            self.http_requests += 1
            self.simulated_s += simulated

    def as_dict(self) -> dict:
        with self.lock:
            return {"requests": dict(self.requests), "http_requests": self.http_requests,
                    "simulated_s": self.simulated_s,
                    "busy_s": self.busy_s, "max_in_flight": self.max_in_flight}


class Engine:
    """An engine of bounded capacity, as a served model has (vLLM's ``max_num_seqs``): at most
    ``slots`` sequences run at once, each for its simulated time, the rest wait for a slot.
    Every sequence is recorded (kind, start, end), so how busy the engine was over any window
    is exact: ``occupancy``."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._free = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        self.records: list[tuple[str, float, float]] = []

    def _one(self, kind: str, seconds: float) -> None:
        with self._free:
            start = time.perf_counter()
            time.sleep(seconds)
            end = time.perf_counter()
        with self._lock:
            self.records.append((kind, start, end))

    def run(self, kinds: list[str], seconds: list[float]) -> None:
        """Run a request's sequences (one per prompt) and return when the last is done."""
        if not kinds:
            return
        threads = [threading.Thread(target=self._one, args=(k, s))
                   for k, s in zip(kinds[1:], seconds[1:])]
        for t in threads:
            t.start()
        self._one(kinds[0], seconds[0])
        for t in threads:
            t.join()

    def occupancy(self, start: float, end: float) -> float:
        """Busy slot-seconds within ``[start, end]`` over all the slot-seconds there were."""
        with self._lock:
            busy = sum(max(0.0, min(e, end) - max(s, start)) for _, s, e in self.records)
        return busy / (self.slots * (end - start)) if end > start else 0.0


def make_handler(expert: Expert, meter: Meter, ms_token: float, ms_prompt: float,
                 engine: Engine | None = None, ms_request: float = 0.0):
    """The request handler class of one expert's server (``engine``: of bounded capacity;
    None: every request runs at once, however many; ``ms_request``: a fixed latency of every
    sequence, as an engine's scheduling and first token cost)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the client holds its connections
        # headers and body are two writes: with Nagle on, the body waits for the client's
        # delayed ACK (40 ms on Linux) and every serial request would take that long
        disable_nagle_algorithm = True

        def log_message(self, *args) -> None:
            pass

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(200, {"object": "list", "data": [{"id": expert.name,
                                                             "object": "model"}]})
            elif self.path == "/props":
                self._send(200, {"chat_template": CHATML})
            elif self.path == "/health":
                self._send(200, {"status": "ok"})
            elif self.path == "/stats":
                self._send(200, {"model": expert.name, **meter.as_dict(),
                                 "cpu_s": sum(resource.getrusage(resource.RUSAGE_SELF)[:2])})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            self.post(self.read_json())

        def read_json(self) -> dict:
            """The request's JSON body."""
            return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def post(self, body: dict) -> None:
            """Answer a POST whose body is read already."""
            if self.path == "/tokenize":
                text = body.get("prompt", body.get("content", ""))
                ids = [int(hashlib.md5(t.encode()).hexdigest()[:6], 16) for t in tokens(text)]
                self._send(200, {"tokens": ids, "count": len(ids)})
                return
            if self.path not in ("/v1/chat/completions", "/v1/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            if body.get("model") != expert.name:
                self._send(404, {"error": {"message": f"model {body.get('model')!r} is not "
                                                      f"served here ({expert.name})"}})
                return
            meter.enter()
            kinds, simulated = ["error"], 0.0
            try:
                if body.get("logprobs") and isinstance(body.get("prompt"), list):
                    kinds, payload, each, prompt_tokens, completion_tokens = \
                        self._logprob_batch(body)
                    simulated = max(each, default=0.0)
                else:
                    kind, payload, prompt_tokens, completion_tokens = self._answer(body)
                    kinds = [kind]
                    simulated = (ms_request + prompt_tokens * ms_prompt
                                 + completion_tokens * ms_token) / 1000
                    each = [simulated]
                if engine is None:
                    time.sleep(simulated)
                else:
                    engine.run(kinds, each)
                payload["usage"] = {"prompt_tokens": prompt_tokens,
                                    "completion_tokens": completion_tokens,
                                    "total_tokens": prompt_tokens + completion_tokens}
                self._send(200, payload)
            finally:
                meter.leave(kinds, simulated)

        def _logprob_batch(self, body: dict) -> tuple[list[str], dict, list[float], int, int]:
            """A list ``prompt`` (vLLM's shape): one choice per prompt, in order, and each
            prompt's simulated seconds. The engine runs the prompts as concurrent sequences, so
            the request takes as long as its longest prompt would alone: the simulated engine
            is as fast whether the client sends the prompts one to a request or many."""
            kinds, choices, each, prompt_tokens = [], [], [], 0
            for i, prompt in enumerate(body["prompt"]):
                kind, payload, tokens_in, tokens_out = self._answer(dict(body, prompt=prompt))
                choices.append(dict(payload["choices"][0], index=i))
                kinds.append(kind)
                prompt_tokens += tokens_in
                each.append((ms_request + tokens_in * ms_prompt + tokens_out * ms_token) / 1000)
            return kinds, {"object": "text_completion", "model": expert.name,
                           "choices": choices}, each, prompt_tokens, len(choices)

        def _answer(self, body: dict) -> tuple[str, dict, int, int]:
            seed = body.get("seed")
            limit = int(body.get("max_tokens") or 256)
            if "messages" in body:
                messages = body["messages"]
                text = expert.chat(messages, seed)
                prompt = "".join(m.get("content") or "" for m in messages)
                kind = expert.prompts.chat_kind(messages)
            elif body.get("logprobs"):
                prompt = body.get("prompt") or ""
                top = expert.logprobs(prompt, int(body["logprobs"]))
                first = next(iter(top))
                choice = {"index": 0, "text": first, "finish_reason": "length",
                          "logprobs": {"tokens": [first], "token_logprobs": [top[first]],
                                       "top_logprobs": [top], "text_offset": [0]}}
                kind = f"logprob_{expert.prompts.logprob_kind(prompt)}"
                return kind, {"object": "text_completion", "model": expert.name,
                              "choices": [choice]}, n_tokens(prompt), 1
            else:
                prompt = body.get("prompt") or ""
                text = expert.raw(prompt, seed)
                kind = "raw"
            reason = "stop"
            if n_tokens(text) > limit:
                text, reason = text[:4 * limit], "length"
            if "messages" in body:
                choice = {"index": 0, "message": {"role": "assistant", "content": text},
                          "finish_reason": reason}
                return kind, {"object": "chat.completion", "model": expert.name,
                              "choices": [choice]}, n_tokens(prompt), n_tokens(text)
            return kind, {"object": "text_completion", "model": expert.name,
                          "choices": [{"index": 0, "text": text, "finish_reason": reason}]}, \
                n_tokens(prompt), n_tokens(text)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # bursts of new connections from every worker at once


def serve(experts: dict[str, float], ms_per_token: float, ms_per_prompt_token: float,
          port: int = 0, ms_per_request: float = 0.0) -> dict[str, _Server]:
    """Start one server per expert on 127.0.0.1 (consecutive ports from ``port``, or free
    ones when 0), each in a daemon thread; returns them by expert name."""
    prompts = Prompts()
    servers = {}
    for i, (name, skill) in enumerate(experts.items()):
        expert = Expert(name, skill, prompts)
        handler = make_handler(expert, Meter(), ms_per_token, ms_per_prompt_token,
                               ms_request=ms_per_request)
        server = _Server(("127.0.0.1", port + i if port else 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True,
                         name=f"serve-{name}").start()
        servers[name] = server
    return servers


def _expert_arg(text: str) -> tuple[str, float]:
    name, _, skill = text.partition("=")
    if not name or not skill:
        raise argparse.ArgumentTypeError(f"--expert {text!r}: expected NAME=SKILL")
    return name, float(skill)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expert", type=_expert_arg, action="append", required=True,
                        help="NAME=SKILL: an expert and the probability its answer is right")
    parser.add_argument("--ms-per-token", type=float, default=0.2,
                        help="latency per generated token (ms)")
    parser.add_argument("--ms-per-prompt-token", type=float, default=0.02,
                        help="latency per prompt token (ms)")
    parser.add_argument("--ms-per-request", type=float, default=0.0,
                        help="fixed latency of every request (ms), on top of the tokens'")
    parser.add_argument("--port", type=int, default=0,
                        help="first port (experts get consecutive ports); 0: free ports")
    parser.add_argument("--max-seconds", type=float, default=4 * 3600,
                        help="exit after this long whatever happens")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    servers = serve(dict(args.expert), args.ms_per_token, args.ms_per_prompt_token, args.port,
                    args.ms_per_request)
    print(json.dumps({name: s.server_address[1] for name, s in servers.items()}), flush=True)
    done = threading.Event()

    def watch_stdin() -> None:  # EOF: the parent closed the pipe or ended
        try:
            while sys.stdin.read(4096):
                pass
        finally:
            done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    done.wait(args.max_seconds)
    for server in servers.values():
        server.shutdown()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
