"""A recording stand-in for ``vllm`` (``LLM``, ``SamplingParams``), importable only where
``tests/standins`` is on the path (a test's own Ray workers); vLLM itself needs a GPU.

It answers like vLLM's offline engine in the shapes ``VllmBackend`` reads
(``RequestOutput.outputs[0]`` with ``text``, ``token_ids``, ``finish_reason`` and, for
``SamplingParams(logprobs=k)``, ``logprobs[0] = {token id: Logprob}``), and appends one JSON
line per event to ``record_file`` (an engine option): ``start`` (with ``gpu_gib``, the memory
the test says the engine holds), ``generate`` (how many prompts one call carried) and ``stop``
(when ``VllmBackend.close`` drops the engine). ``STANDIN_VLLM_DELAYS`` (seconds, comma-separated)
makes an engine's successive ``generate`` calls take that long, the last figure for every call
after it: ``0.3,0.3,20`` is two quick calls, then slow ones (a run to stop mid-call).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from types import SimpleNamespace

ANSWER = "```python\ndef add(a, b):\n    return a + b\n```"
# The score a reading leans to: "2" of the judges' 0-3 and difficulty's 1-9.
LEANING = {"2": math.log(0.6), " 2": math.log(0.1), "3": math.log(0.1)}


class SamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)
        self.logprobs = kwargs.get("logprobs")


class _Tokenizer:
    """Short strings (the choice spellings a reading asks about) are one token each."""

    bos_token, eos_token = "<s>", "</s>"
    chat_template = ("{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}\n"
                     "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")

    def __init__(self):
        self.vocab: dict[str, int] = {}

    def encode(self, text, add_special_tokens=True):
        if 0 < len(text) <= 4:
            return [self.vocab.setdefault(text, 1000 + len(self.vocab))]
        return ([1] if add_special_tokens else []) + [100 + ord(c) % 500 for c in text]


class LLM:
    def __init__(self, model, max_model_len, seed, record_file, gpu_gib=0.0, **kwargs):
        self.model, self.record_file = os.path.basename(model), record_file
        self.tokenizer = _Tokenizer()
        self.delays = [float(x) for x in os.environ.get("STANDIN_VLLM_DELAYS", "0").split(",")]
        self._record("start", gpu_gib=gpu_gib, max_model_len=max_model_len)

    def _record(self, event, **fields):
        with open(self.record_file, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"event": event, "model": self.model, "pid": os.getpid(),
                                 "time": time.time(), **fields}) + "\n")

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, requests, sampling, use_tqdm=False):
        first = sampling[0] if isinstance(sampling, list) else sampling
        reading = first.logprobs is not None
        self._record("generate", prompts=len(requests), kind="logprobs" if reading else "text")
        time.sleep(self.delays.pop(0) if len(self.delays) > 1 else self.delays[0])
        out = []
        for request in requests:
            if reading:
                top = {i: SimpleNamespace(logprob=LEANING.get(t, math.log(0.001)))
                       for t, i in self.tokenizer.vocab.items()}
                sample = SimpleNamespace(text="2", token_ids=[0], finish_reason="length",
                                         logprobs=[top])
            else:
                sample = SimpleNamespace(text=ANSWER, token_ids=list(range(12)),
                                         finish_reason="stop", logprobs=None)
            out.append(SimpleNamespace(prompt_token_ids=request["prompt_token_ids"],
                                       outputs=[sample]))
        return out

    def __del__(self):  # VllmBackend.close() drops its only reference
        with contextlib.suppress(OSError):  # the test's folder may be gone at exit
            self._record("stop")
