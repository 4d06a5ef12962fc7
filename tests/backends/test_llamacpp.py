"""The embedded llama.cpp backend generating real text with every embedded GGUF model."""

from pathlib import Path

import pytest
from arenaforge.pipeline.backends import ChatTemplateError, SamplingParams, create_backend
from arenaforge.pipeline.backends.llamacpp import llama_sampling_kwargs, parse_llama_output
from arenaforge.pipeline.models import ModelNotInstalledError, load_registry

ROOT = Path(__file__).resolve().parents[2]
CHAT_MODELS = ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"]
ASK = [{"role": "system", "content": "You are a Python expert."},
       {"role": "user", "content": "Write a one-line Python expression that reverses list xs."}]


def test_sampling_translation_switches_off_llama_defaults():
    kwargs = llama_sampling_kwargs(SamplingParams(temperature=0.7, top_p=0.9, max_tokens=5), 4)
    assert kwargs == {"max_tokens": 5, "temperature": 0.7, "top_p": 0.9, "top_k": 0,
                      "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0, "seed": 4}
    assert "seed" not in llama_sampling_kwargs(SamplingParams(), None)


def test_parse_llama_output():
    out = {"choices": [{"text": "x", "finish_reason": "length"}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    c = parse_llama_output(out)
    assert (c.text, c.finish_reason, c.prompt_tokens, c.completion_tokens) == ("x", "length", 3, 1)
    out["choices"][0]["finish_reason"] = None
    assert parse_llama_output(out).finish_reason == "stop"


_LOADED: dict = {}


def load(model_id: str, n_threads: int = 2):
    """One backend per model for the whole module (loading the 1.5B model takes seconds)."""
    if model_id not in _LOADED:
        spec = load_registry(ROOT / "configs/models.yaml")[model_id]
        try:
            _LOADED[model_id] = create_backend(spec, n_threads=n_threads)
        except ModelNotInstalledError as exc:
            pytest.skip(str(exc))
    return _LOADED[model_id]


@pytest.fixture(scope="module", autouse=True)
def _close_models():
    yield
    for backend in _LOADED.values():
        backend.close()
    _LOADED.clear()


@pytest.mark.models
@pytest.mark.parametrize("model_id", CHAT_MODELS)
def test_chat_model_generates_text(model_id):
    backend = load(model_id)
    assert backend.llm.context_params.n_threads == 2  # the runner's thread budget is honoured
    assert backend.llm.context_params.n_threads_batch == 2
    [[reply]] = backend.chat([ASK], SamplingParams(max_tokens=16))
    assert reply.error is None, reply.error
    assert reply.text.strip() and reply.finish_reason in ("stop", "length")
    assert 0 < reply.completion_tokens <= 16 and reply.prompt_tokens > 10
    [[raw]] = backend.complete(["def reverse_list(xs):\n"], SamplingParams(max_tokens=8))
    assert raw.error is None and raw.text and raw.completion_tokens > 0


@pytest.mark.models
def test_base_model_completes_but_has_no_chat():
    backend = load("gemma3-270m-base")
    assert backend.chat_template() is None
    [[raw]] = backend.complete(["The capital of France is"], SamplingParams(max_tokens=8))
    assert raw.error is None and raw.text.strip() and raw.completion_tokens > 0
    [[failed, also]] = backend.chat([ASK], SamplingParams(max_tokens=4, n=2))
    assert failed.finish_reason == "error" and "no chat template" in failed.error
    assert also.finish_reason == "error"
    with pytest.raises(ChatTemplateError):
        backend.apply_chat_template(ASK)


@pytest.mark.models
def test_seeded_sampling_replays_and_samples_differ():
    backend = load("smollm2-135m")
    params = SamplingParams(n=3, temperature=1.0, max_tokens=12, seed=1234)
    prompt = ["def parse_csv_line(line):"]
    [first] = backend.complete(prompt, params)
    backend.complete(["something else entirely"], SamplingParams(max_tokens=4, temperature=1.0))
    [again] = backend.complete(prompt, params)
    assert [c.text for c in again] == [c.text for c in first]
    assert len({c.text for c in first}) >= 2  # n samples are not copies of one
    [[third]] = backend.complete(prompt, SamplingParams(temperature=1.0, max_tokens=12,
                                                        seed=1236))
    assert third.text == first[2].text  # sample i of n replays alone with seed + i


@pytest.mark.models
def test_stop_strings_end_generation():
    backend = load("qwen2.5-coder-0.5b")
    [[c]] = backend.complete(["# Python\nimport os\nimport sys\nimport"],
                             SamplingParams(max_tokens=32, stop=["\n"]))
    assert c.error is None and "\n" not in c.text and c.finish_reason == "stop"


@pytest.mark.models
def test_template_matches_llama_cpp_python_renderer():
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    backend = load("qwen2.5-coder-0.5b")
    reference = Jinja2ChatFormatter(backend.chat_template(), eos_token="<|im_end|>",
                                    bos_token="<|endoftext|>")(messages=ASK).prompt
    assert backend.apply_chat_template(ASK) == reference
    assert backend.apply_chat_template(ASK).endswith("<|im_start|>assistant\n")
    # special-token text maps to the single special id (what Magpie pre-query prompts rely on)
    assert len(backend.tokenize("<|im_start|>")) == 1


@pytest.mark.models
def test_prompt_over_the_context_fails_alone():
    backend = load("smollm2-135m")
    too_long = "word " * 3000  # n_ctx is 2048 for this entry
    out = backend.complete([too_long, "def f():"], SamplingParams(max_tokens=4))
    assert out[0][0].finish_reason == "error" and "context" in out[0][0].error
    assert out[1][0].error is None and out[1][0].text
