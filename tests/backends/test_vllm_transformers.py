"""vLLM (not installable here) and transformers backends: translation, parsing, and a real run
of the transformers backend on a tiny randomly initialised GPT-2 saved to a temp directory."""

import sys
from types import SimpleNamespace

import pytest
from arenaforge.pipeline.backends import BackendError, SamplingParams, create_backend
from arenaforge.pipeline.backends.transformers_local import generate_kwargs, parse_generation
from arenaforge.pipeline.backends.vllm_offline import parse_request_output, vllm_sampling_kwargs
from arenaforge.pipeline.models import ModelSpec


# -- vLLM -----------------------------------------------------------------------------------------
def test_vllm_sampling_kwargs_one_sample_openai_semantics():
    kwargs = vllm_sampling_kwargs(SamplingParams(n=4, temperature=0.6, top_p=0.8, max_tokens=32),
                                  9, ["\n\n", "<|im_end|>"])
    assert kwargs == {"n": 1, "temperature": 0.6, "top_p": 0.8, "max_tokens": 32,
                      "stop": ["\n\n", "<|im_end|>"], "seed": 9, "top_k": -1, "min_p": 0.0}
    assert vllm_sampling_kwargs(SamplingParams(), None, [])["stop"] is None


def _request_output(text, reason, n_prompt=5, n_out=3):
    sample = SimpleNamespace(text=text, token_ids=list(range(n_out)), finish_reason=reason)
    return SimpleNamespace(prompt_token_ids=list(range(n_prompt)), outputs=[sample])


@pytest.mark.parametrize("reason, expected", [("stop", "stop"), ("length", "length"),
                                              ("abort", "error")])
def test_parse_vllm_request_output(reason, expected):
    c = parse_request_output(_request_output("def f(): pass", reason))
    assert (c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens) == (
        "def f(): pass", expected, 5, 3)
    assert (c.error is None) == (expected != "error")


def test_vllm_missing_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # make `import vllm` fail even if installed
    spec = ModelSpec(id="big", backend="vllm", family="qwen2", path=str(tmp_path))
    with pytest.raises(BackendError, match="'big'.*vllm"):
        create_backend(spec)


class _FakeTokenizer:
    bos_token, eos_token = "<s>", "</s>"
    chat_template = "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}"

    def encode(self, text, add_special_tokens=True):
        return ([1] if add_special_tokens else []) + [ord(ch) for ch in text]


class _FakeLLM:
    """Stands in for ``vllm.LLM`` (pure request-building logic; vLLM itself needs a GPU)."""

    def __init__(self, model, max_model_len, seed):
        self.requests = []

    def get_tokenizer(self):
        return _FakeTokenizer()

    def generate(self, requests, sampling, use_tqdm):
        self.requests += list(zip(requests, sampling, strict=True))
        return [_request_output(f"seed={s['seed']}", "stop", len(r["prompt_token_ids"]))
                for r, s in zip(requests, sampling, strict=True)]


def test_vllm_backend_builds_one_request_per_sample(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(LLM=_FakeLLM, SamplingParams=dict))
    spec = ModelSpec(id="big", backend="vllm", family="x", path=str(tmp_path))
    backend = create_backend(spec)
    out = backend.complete(["ab", "c"], SamplingParams(n=2, seed=4))
    assert [[c.text for c in row] for row in out] == [["seed=4", "seed=5"], ["seed=4", "seed=5"]]
    assert out[0][0].prompt_tokens == 3  # BOS + 2 characters
    [[reply], [bad]] = backend.chat([[{"role": "user", "content": "hi"}], [{"role": "user"}]],
                                    SamplingParams())
    request, _ = backend.llm.requests[-1]
    assert request["prompt_token_ids"][0] != 1  # the template wrote <s>: no second BOS
    assert bad.finish_reason == "error" and "messages[0]" in bad.error
    assert reply.error is None


# -- transformers ---------------------------------------------------------------------------------
def test_generate_kwargs():
    assert generate_kwargs(SamplingParams(max_tokens=3)) == {"max_new_tokens": 3,
                                                             "do_sample": False}
    assert generate_kwargs(SamplingParams(temperature=0.5, top_p=0.9, max_tokens=3)) == {
        "max_new_tokens": 3, "do_sample": True, "temperature": 0.5, "top_p": 0.9, "top_k": 0}


@pytest.mark.parametrize("text, ids, expected_text, reason", [
    ("a\n\nb", [5, 6, 7], "a", "stop"),        # stop string, even at max_tokens
    ("abc", [5, 6, 0], "abc", "stop"),         # ended on EOS
    ("abc", [5, 6, 7], "abc", "length"),       # ran out of tokens
    ("ab", [5, 6], "ab", "stop"),              # fewer than max_tokens: the engine stopped it
])
def test_parse_generation(text, ids, expected_text, reason):
    c = parse_generation(text, ids, [0], ["\n\n"], 3, 11)
    assert (c.text, c.finish_reason, c.completion_tokens, c.prompt_tokens) == (
        expected_text, reason, len(ids), 11)


@pytest.fixture(scope="module")
def tiny_hf_dir(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    from arenaforge.pipeline.models import ModelNotInstalledError, load_registry, resolve_weights

    try:
        tok_dir = resolve_weights(load_registry("configs/models.yaml")["minilm-l6"])
    except ModelNotInstalledError as exc:
        pytest.skip(str(exc))
    out = tmp_path_factory.mktemp("tiny-gpt2")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tok_dir))
    tokenizer.chat_template = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n"
                               "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
    tokenizer.save_pretrained(out)
    config = transformers.GPT2Config(vocab_size=tokenizer.vocab_size, n_positions=128, n_embd=32,
                                     n_layer=2, n_head=2, eos_token_id=tokenizer.sep_token_id,
                                     bos_token_id=tokenizer.cls_token_id)
    transformers.set_seed(0)
    transformers.GPT2LMHeadModel(config).save_pretrained(out)
    return out


@pytest.mark.slow  # importing torch + transformers dominates (10 s idle, a minute under load)
def test_transformers_backend_runs_a_local_directory(tiny_hf_dir):
    spec = ModelSpec(id="tiny", backend="transformers", family="gpt2", path=str(tiny_hf_dir))
    backend = create_backend(spec, n_threads=1)
    assert backend.apply_chat_template([{"role": "user", "content": "hi"}]) == (
        "user: hi\nassistant:")
    params = SamplingParams(n=2, temperature=1.0, max_tokens=6, seed=5)
    [[a, b]] = backend.complete(["hello world"], params)
    [[a2, b2]] = backend.complete(["hello world"], params)
    assert (a.text, b.text) == (a2.text, b2.text)  # seeded
    assert a.prompt_tokens > 0 and 0 < a.completion_tokens <= 6
    assert a.finish_reason in ("stop", "length")
    [[greedy]] = backend.chat([[{"role": "user", "content": "hi"}]], SamplingParams(max_tokens=4))
    assert greedy.error is None and greedy.completion_tokens <= 4
    assert len(backend.tokenize("hello world")) == 2
