"""The persistent request cache (pure logic: a counting double stands in for the model; the
``files`` store also on a real S3 server on loopback)."""

import multiprocessing

import pytest
from arenaforge.pipeline.backends.base import Completion, SamplingParams
from arenaforge.pipeline.backends.request_cache import CachedBackend, request_key


class CountingBackend:
    """Echoes prompts; fails any prompt containing 'FAIL'; counts what reaches it."""

    model_id = "echo"

    def __init__(self):
        self.calls: list[str] = []

    def _answer(self, prompt: str, params: SamplingParams) -> list[Completion]:
        self.calls.append(prompt)
        if "FAIL" in prompt:
            return [Completion.failed("boom")] * params.n
        return [Completion(text=f"{prompt}#{i}", finish_reason="stop", prompt_tokens=1,
                           completion_tokens=2) for i in range(params.n)]

    def complete(self, prompts, params):
        return [self._answer(p, params) for p in prompts]

    def chat(self, conversations, params):
        return [self._answer(c[-1]["content"], params) for c in conversations]

    def chat_template(self):
        return "T"

    def apply_chat_template(self, messages, add_generation_prompt=True):
        return "rendered"

    def tokenize(self, text):
        return [len(text)]

    def close(self):
        pass


def test_second_run_is_served_from_disk_and_counted(tmp_path):
    params = SamplingParams(n=2, max_tokens=8, seed=1)
    first = CachedBackend(CountingBackend(), tmp_path, "sha-a")
    out1 = first.complete(["a", "b"], params)
    assert first.cache_stats() == {"hits": 0, "misses": 2}
    first.close()

    inner = CountingBackend()
    second = CachedBackend(inner, tmp_path, "sha-a")
    out2 = second.complete(["b", "c", "a"], params)
    assert inner.calls == ["c"]  # only the new prompt reached the model
    assert second.cache_stats() == {"hits": 2, "misses": 1}
    assert out2[0] == out1[1] and out2[2] == out1[0]
    assert out2[1][1].text == "c#1"


def test_a_request_repeated_in_one_batch_reaches_the_model_once(tmp_path):
    inner = CountingBackend()
    cached = CachedBackend(inner, tmp_path, "sha-a")
    params = SamplingParams(n=1, max_tokens=8, seed=1)
    out = cached.chat([[{"role": "user", "content": t}] for t in ("a", "b", "a", "FAIL", "FAIL")],
                      params)
    assert inner.calls == ["a", "b", "FAIL"]
    assert out[0] == out[2] and out[0][0].text == "a#0" and out[1][0].text == "b#0"
    assert out[3][0].error == out[4][0].error == "boom"
    assert cached.cache_stats() == {"hits": 2, "misses": 3}
    conv = [{"role": "user", "content": "rate this"}]
    logprobs = CachedBackend(LogprobBackend(), tmp_path / "lp", "sha")
    assert logprobs.next_token_logprobs([conv, conv], ["1"]) == [({"1": -1.0}, None)] * 2
    assert logprobs.inner.calls == ["rate this"]


def test_key_depends_on_every_part_of_the_request():
    p = SamplingParams(max_tokens=8)
    base = request_key("m", "w", "complete", "x", p)
    assert base == request_key("m", "w", "complete", "x", SamplingParams(max_tokens=8))
    variants = [request_key("m2", "w", "complete", "x", p),
                request_key("m", "w2", "complete", "x", p),
                request_key("m", "w", "chat", "x", p),
                request_key("m", "w", "complete", "y", p),
                request_key("m", "w", "complete", "x", SamplingParams(max_tokens=9)),
                request_key("m", "w", "chat", [{"role": "user", "content": "x"}], p)]
    assert len({base, *variants}) == 7


def test_chat_and_complete_do_not_share_entries(tmp_path):
    inner = CountingBackend()
    cached = CachedBackend(inner, tmp_path, "w")
    params = SamplingParams()
    cached.complete(["hi"], params)
    cached.chat([[{"role": "user", "content": "hi"}]], params)
    assert inner.calls == ["hi", "hi"]


def test_failures_are_returned_but_never_cached(tmp_path):
    inner = CountingBackend()
    cached = CachedBackend(inner, tmp_path, "w")
    params = SamplingParams()
    out = cached.complete(["ok", "FAIL me"], params)
    assert out[1][0].error == "boom" and out[0][0].error is None
    cached.complete(["ok", "FAIL me"], params)
    assert inner.calls == ["ok", "FAIL me", "FAIL me"]  # the failure is retried


def test_delegates_prompt_methods(tmp_path):
    cached = CachedBackend(CountingBackend(), tmp_path, "w")
    assert cached.chat_template() == "T"
    assert cached.apply_chat_template([]) == "rendered"
    assert cached.tokenize("abcd") == [4]
    assert cached.calls == []  # attribute pass-through to the wrapped backend


def _fill(cache_dir, prompts):
    cached = CachedBackend(CountingBackend(), cache_dir, "w")
    cached.complete(prompts, SamplingParams())
    cached.close()


def test_processes_share_one_cache_directory(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_fill, args=(tmp_path, [f"p{i}-{k}" for k in range(20)]))
             for i in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    inner = CountingBackend()
    cached = CachedBackend(inner, tmp_path, "w")
    cached.complete([f"p{i}-{k}" for i in range(2) for k in range(20)], SamplingParams())
    assert inner.calls == [] and cached.cache_stats() == {"hits": 40, "misses": 0}


class LogprobBackend(CountingBackend):
    """Adds next-token readings: log P(candidate) = -len(candidate); 'FAIL' requests fail."""

    def next_token_logprobs(self, conversations, candidates, prefill=""):
        out = []
        for conv in conversations:
            self.calls.append(conv[-1]["content"])
            if "FAIL" in conv[-1]["content"]:
                out.append((None, "boom"))
            else:
                out.append(({c: -float(len(c)) for c in candidates}, None))
        return out


def test_logprob_readings_are_cached_per_conversation_and_candidates(tmp_path):
    conv = [{"role": "user", "content": "rate this"}]
    bad = [{"role": "user", "content": "FAIL"}]
    first = CachedBackend(LogprobBackend(), tmp_path, "sha")
    assert first.next_token_logprobs([conv, bad], ["1", " 1"]) == [
        ({"1": -1.0, " 1": -2.0}, None), (None, "boom")]
    first.close()

    inner = LogprobBackend()
    second = CachedBackend(inner, tmp_path, "sha")
    assert second.next_token_logprobs([conv, bad], [" 1", "1"])[0] == ({"1": -1.0, " 1": -2.0},
                                                                       None)
    assert inner.calls == ["FAIL"]  # the failure was not stored; the reading was
    second.next_token_logprobs([conv], ["A"])
    assert inner.calls == ["FAIL", "rate this"]  # other candidates: another entry
    assert second.cache_stats() == {"hits": 1, "misses": 2}


def test_a_backend_without_readings_says_so(tmp_path):
    import pytest
    from arenaforge.pipeline.backends.base import LogprobUnsupportedError
    from arenaforge.stages.arena.judge_logits import next_token_logprobs

    cached = CachedBackend(CountingBackend(), tmp_path, "sha")
    with pytest.raises(LogprobUnsupportedError, match="'echo'"):
        cached.next_token_logprobs([[{"role": "user", "content": "x"}]], ["1"])
    with pytest.raises(LogprobUnsupportedError, match="generative protocol"):
        next_token_logprobs(CountingBackend(), [[{"role": "user", "content": "x"}]], {"1": ("1",)})


def _fill_files(cache_dir, prompts):
    from arenaforge.pipeline.backends.request_cache import CachedBackend

    cached = CachedBackend(CountingBackend(), cache_dir, "w", store="files")
    cached.complete(prompts, SamplingParams())


@pytest.mark.parametrize("where", ["local", "s3"])
def test_file_store_lets_processes_write_one_shared_cache_at_once(where, tmp_path, request):
    """The ``files`` store (a shared mount, or S3 on a real server on loopback): concurrent
    writers, one file per request, overlapping requests written twice are still one whole
    entry, and no temp file is left."""
    import pyarrow.fs as pafs
    from arenaforge.pipeline import filesystem

    root = tmp_path if where == "local" else request.getfixturevalue("s3_server").uri("cache")
    ctx = multiprocessing.get_context("spawn")
    shared = [f"both-{k}" for k in range(10)]
    procs = [ctx.Process(target=_fill_files,
                         args=(root, shared + [f"p{i}-{k}" for k in range(20)]))
             for i in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    inner = CountingBackend()
    cached = CachedBackend(inner, root, "w", store="files")
    wanted = shared + [f"p{i}-{k}" for i in range(3) for k in range(20)]
    out = cached.complete(wanted, SamplingParams())
    assert inner.calls == [] and cached.cache_stats() == {"hits": 70, "misses": 0}
    assert [c[0].text for c in out] == [f"{p}#0" for p in wanted]
    fs, path = filesystem.resolve(root)
    files = [i.path for i in fs.get_file_info(pafs.FileSelector(path, recursive=True))
             if i.type == pafs.FileType.File]
    assert len(files) == 70 and all(f.endswith(".json") and "/files/" in f for f in files)
