"""The judge stage's pure logic, with scripted judges standing in for models."""

from __future__ import annotations

import math
import re

import pyarrow as pa
import pytest
from arenaforge.pipeline.backends.base import Completion
from arenaforge.stages.arena import judge as judge_stage
from arenaforge.stages.arena import protocols as jp
from arenaforge.stages.arena.judge import JudgeConfig, enumerate_battles, run


def answers(instructions: dict[str, list[str]], miner: dict[str, str] | None = None) -> pa.Table:
    """Answer rows: instruction id -> models that answered (answer text names the model)."""
    rows = []
    for iid, models in instructions.items():
        for m in models:
            row = {"instruction_id": iid, "instruction": f"task {iid}", "model": m,
                   "response": f"<answer of {m} to {iid}>", "reference": f"ref {iid}"}
            if miner:
                row["miner"] = miner[iid]
            rows.append(row)
    return pa.Table.from_pylist(rows)


def shown_models(conversation) -> list[str]:
    """Models whose answers a judge prompt's last turn shows, in the order shown (a sequential
    pointwise request's last turn shows the second answer)."""
    return re.findall(r"<answer of (\S+) to", conversation[-1]["content"])


class PreferJudge:
    """Generative test double: prefers one model's answer (or the first shown one)."""

    def __init__(self, model_id: str, prefer: str | None = None, text: str | None = None):
        self.model_id, self.prefer, self.text, self.seen = model_id, prefer, text, []

    def chat(self, conversations, params):
        self.seen.extend(conversations)
        out = []
        for conv in conversations:
            shown = shown_models(conv)
            if self.text is not None:
                out.append([Completion(self.text, "stop")])
            elif len(shown) == 1:  # pointwise: the preferred model scores 3, others 1
                out.append([Completion(f"ok\nScore: [[{3 if shown[0] == self.prefer else 1}]]",
                                       "stop")])
            else:
                letter = "A" if self.prefer is None or shown[0] == self.prefer else "B"
                out.append([Completion(f"reasons\nVerdict: [[{letter}]]", "stop")])
        return out


class Ctx:
    def __init__(self, judges: dict[str, object]):
        self.judges = judges
        self.seed = 0
        self.asked: list[str] = []

    def backend(self, model_id):
        self.asked.append(model_id)
        return self.judges[model_id]

    def advance(self, rows):
        pass


def test_pairs_judges_orders_enumerated_and_self_judging_excluded():
    table = answers({"i1": ["m1", "m2", "m3"], "i2": ["m2", "m1"]})
    judges = {m: PreferJudge(m) for m in ("m1", "m2", "m3")}
    out = run(table, JudgeConfig(protocol="pairwise", judges=["m1", "m2", "m3"]), Ctx(judges))
    rows = out.table.to_pylist()
    keys = [(r["instruction_id"], r["model_a"], r["model_b"], r["judge"], r["order"])
            for r in rows]
    assert keys == [
        ("i1", "m1", "m2", "m3", "ab"), ("i1", "m1", "m2", "m3", "ba"),
        ("i1", "m1", "m3", "m2", "ab"), ("i1", "m1", "m3", "m2", "ba"),
        ("i1", "m2", "m3", "m1", "ab"), ("i1", "m2", "m3", "m1", "ba"),
        ("i2", "m1", "m2", "m3", "ab"), ("i2", "m1", "m2", "m3", "ba"),
    ]
    assert all(r["model_a"] < r["model_b"] for r in rows)
    assert all(r["judge"] not in (r["model_a"], r["model_b"]) for r in rows)
    assert out.table.schema == judge_stage.OUTPUT_SCHEMA
    assert out.stats["battles"] == 4


def test_allow_self_judge_and_max_judges():
    table = answers({"i1": ["m1", "m2"]})
    judges = {m: PreferJudge(m) for m in ("m1", "m2", "m3")}
    cfg = JudgeConfig(protocol="pairwise", judges=["m1", "m2", "m3"], allow_self_judge=True,
                      max_judges=2)
    rows = run(table, cfg, Ctx(judges)).table.to_pylist()
    assert sorted({r["judge"] for r in rows}) == ["m1", "m2"]
    rows = run(table, JudgeConfig(protocol="pairwise", judges=["m1", "m2", "m3"], max_judges=1),
               Ctx(judges)).table.to_pylist()
    assert {r["judge"] for r in rows} == {"m3"} and len(rows) == 2


def test_no_eligible_judge_is_a_clear_error():
    table = answers({"i1": ["m1", "m2"]})
    with pytest.raises(ValueError, match=r"no eligible judge for the pair \(m1, m2\).*"
                                         r"allow_self_judge"):
        run(table, JudgeConfig(protocol="pairwise", judges=["m1", "m2"]),
            Ctx({m: PreferJudge(m) for m in ("m1", "m2")}))


def test_a_battle_between_the_judges_is_left_unjudged_and_counted():
    # configs/openai.yaml's arrangement: two of three experts judge, so the battle between
    # those two has no uninvolved judge; the instruction's other battles are judged
    table = answers({"i1": ["m1", "m2", "m3"], "i2": ["m2", "m3"]})
    judges = {m: PreferJudge(m) for m in ("m2", "m3")}
    out = run(table, JudgeConfig(protocol="pairwise", judges=["m2", "m3"]), Ctx(judges))
    rows = out.table.to_pylist()
    assert sorted({(r["instruction_id"], r["model_a"], r["model_b"], r["judge"])
                   for r in rows}) == [("i1", "m1", "m2", "m3"), ("i1", "m1", "m3", "m2")]
    assert out.stats["battles"] == 4 and out.stats["battles_unjudged"] == 2


def test_verdict_maps_back_from_the_shown_position():
    table = answers({"i1": ["m1", "m2"]})
    judge = PreferJudge("j", prefer="m2")
    rows = run(table, JudgeConfig(protocol="pairwise", judges=["j"]),
               Ctx({"j": judge})).table.to_pylist()
    by_order = {r["order"]: r for r in rows}
    # "ab": m1 shown first, the judge says B (= m2); "ba": m2 shown first, the judge says A.
    assert [shown_models(c) for c in judge.seen] == [["m1", "m2"], ["m2", "m1"]]
    assert by_order["ab"]["verdict"] == by_order["ba"]["verdict"] == "b"
    assert by_order["ab"]["position_first_chosen"] is False
    assert by_order["ba"]["position_first_chosen"] is True
    assert by_order["ab"]["rationale"] == "reasons" and by_order["ab"]["parse_error"] is None


def test_position_biased_judge_flips_with_order():
    rows = run(answers({"i1": ["m1", "m2"]}), JudgeConfig(protocol="pairwise", judges=["j"]),
               Ctx({"j": PreferJudge("j", prefer=None)})).table.to_pylist()
    assert [(r["order"], r["verdict"], r["position_first_chosen"]) for r in rows] == [
        ("ab", "a", True), ("ba", "b", True)]


def test_parse_failure_kept_with_raw_text():
    text = "Both look fine to me."
    rows = run(answers({"i1": ["m1", "m2"]}), JudgeConfig(protocol="pairwise", judges=["j"]),
               Ctx({"j": PreferJudge("j", text=text)})).table.to_pylist()
    for r in rows:
        assert r["verdict"] is None and r["position_first_chosen"] is None
        assert r["raw"] == text and r["parse_error"] == "no verdict in the [[...]] format"
        assert r["score_a"] is None


def test_backend_error_is_a_parse_error_not_a_verdict():
    class Failing:
        model_id = "j"

        def chat(self, conversations, params):
            return [[Completion.failed("boom")] for _ in conversations]

    rows = run(answers({"i1": ["m1", "m2"]}), JudgeConfig(protocol="pairwise", judges=["j"]),
               Ctx({"j": Failing()})).table.to_pylist()
    assert all(r["verdict"] is None and r["parse_error"] == "backend error: boom" for r in rows)


def test_pointwise_scores_each_answer_once_and_derives_the_verdict():
    judge = PreferJudge("j", prefer="m3")
    table = answers({"i1": ["m1", "m2", "m3"]})
    rows = run(table, JudgeConfig(protocol="pointwise", judges=["j"]),
               Ctx({"j": judge})).table.to_pylist()
    # each answer scored alone once, each followed by the pairs' second answers it comes before
    assert len(judge.seen) == 3 + 2 * 3
    assert [len(c) for c in judge.seen] == [2, 4, 4] * 3
    second = judge.seen[1]  # order "ab" of (m1, m2): m1's exchange, then m2's answer
    assert second[:2] == judge.seen[0]  # starts with the prompt just read: the prefix is reused
    assert shown_models(second[:2]) == ["m1"] and shown_models(second) == ["m2"]
    assert second[2] == {"role": "assistant", "content": "ok\nScore: [[1]]"}
    got = {(r["model_a"], r["model_b"], r["order"]): (r["verdict"], r["score_a"], r["score_b"],
                                                      r["order_verdict"]) for r in rows}
    assert got[("m1", "m3", "ab")] == got[("m1", "m3", "ba")] == ("b", 1, 3, "b")
    assert got[("m1", "m2", "ab")] == ("tie", 1, 1, "tie")
    assert all(r["protocol"] == "pointwise" for r in rows)


def test_pointwise_parse_error_names_the_model():
    class Half:
        model_id = "j"

        def chat(self, conversations, params):
            return [[Completion("Score: [[2]]" if shown_models(c) == ["m1"] else "meh", "stop")]
                    for c in conversations]

    rows = run(answers({"i1": ["m1", "m2"]}), JudgeConfig(protocol="pointwise", judges=["j"]),
               Ctx({"j": Half()})).table.to_pylist()
    # order ab reads m1 (2) then m2 (unparsed); in "ba" m2 comes first, so m1 is never asked
    assert [(r["verdict"], r["score_a"], r["score_b"]) for r in rows] == [
        (None, 2, None), (None, None, None)]
    assert rows[0]["parse_error"] == ("order ab: m2: no score in the [[...]] format; "
                                      "order ba: m2: no score in the [[...]] format; "
                                      "m1: not read: the first answer has no score")


@pytest.mark.parametrize("p_first_by_model,verdict", [
    ({"m1": 0.9, "m2": 0.7}, "a"),     # first-biased, but m1 shown first gets more
    ({"m1": 0.9, "m2": 0.9}, "tie"),   # pure position bias: exactly 0.5
    ({"m1": 0.2, "m2": 0.6}, "b"),
])
def test_pairwise_logprob_averages_orders(monkeypatch, p_first_by_model, verdict):
    """P(A) depends on which model is shown first; the combined verdict cancels position."""
    def fake_logprobs(backend, convs, spellings, prefill=""):
        out = []
        for conv in convs:
            p = p_first_by_model[shown_models(conv)[0]]
            out.append(({"A": math.log(p), "B": math.log(1 - p)}, None))
        return out

    monkeypatch.setattr("arenaforge.stages.arena.judge_logits.next_token_logprobs", fake_logprobs)
    rows = run(answers({"i1": ["m1", "m2"]}),
               JudgeConfig(protocol="pairwise_logprob", judges=["j"]),
               Ctx({"j": object()})).table.to_pylist()
    assert [r["verdict"] for r in rows] == [verdict, verdict]
    ab, ba = rows
    assert ab["prob_a"] == pytest.approx(p_first_by_model["m1"])
    assert ba["prob_a"] == pytest.approx(1 - p_first_by_model["m2"])
    assert ab["raw"].startswith("P(A)=") and ab["parse_error"] is None


def test_logprob_low_mass_and_errors_are_parse_errors(monkeypatch):
    def fake_logprobs(backend, convs, spellings, prefill=""):
        low = ({"A": math.log(0.001), "B": math.log(0.001)}, None)
        # order ab (m1 shown first) reads too little mass; order ba fails (errors: no retry)
        return [low if shown_models(c)[0] == "m1" else (None, "ValueError: long") for c in convs]

    monkeypatch.setattr("arenaforge.stages.arena.judge_logits.next_token_logprobs", fake_logprobs)
    rows = run(answers({"i1": ["m1", "m2"]}),
               JudgeConfig(protocol="pairwise_logprob", judges=["j"], min_choice_mass=0.05),
               Ctx({"j": object()})).table.to_pylist()
    assert all(r["verdict"] is None for r in rows)
    assert "order ab: choice tokens hold 0.0020" in rows[0]["parse_error"]
    assert "with prefill 'Answer: ': choice tokens hold 0.0020" in rows[0]["parse_error"]
    assert "order ba: backend error: ValueError: long" in rows[0]["parse_error"]


def test_low_mass_readings_are_retried_with_the_reply_started(monkeypatch):
    calls = []

    def fake_logprobs(backend, convs, spellings, prefill=""):
        calls.append((len(convs), prefill))
        mass = {"": 0.05, "Score: ": 0.6}[prefill]
        out = []
        for conv in convs:
            if shown_models(conv)[0] == "m1":  # m1's reading has its mass on the digits at once
                out.append(({"3": math.log(0.9), "0": math.log(0.05)}, None))
            else:
                out.append(({"1": math.log(mass)}, None))
        return out

    monkeypatch.setattr("arenaforge.stages.arena.judge_logits.next_token_logprobs", fake_logprobs)
    rows = run(answers({"i1": ["m1", "m2"]}),
               JudgeConfig(protocol="pointwise_logprob", judges=["j"]),
               Ctx({"j": object()})).table.to_pylist()
    # only the failed reading is read again, right after its first reading
    # m1 alone, then m2 after m1 (and its retry); m2 alone (and retry), then m1 after m2
    assert calls == [(1, ""), (1, ""), (1, "Score: "), (1, ""), (1, "Score: "), (1, "")]
    assert rows[0]["parse_error"] is None and rows[0]["verdict"] == "a"
    assert "with prefill 'Score: ': P(0)=0.0000 P(1)=1.0000" in rows[0]["raw"]
    calls.clear()
    off = run(answers({"i1": ["m1", "m2"]}),
              JudgeConfig(protocol="pointwise_logprob", judges=["j"], retry_prefill=False),
              Ctx({"j": object()})).table.to_pylist()
    assert calls == [(1, ""), (1, ""), (1, "")] and off[0]["verdict"] is None


class Served:
    """What the judge stage sees of an OpenAI-compatible server: requests go out concurrently."""

    prefers_batches = True


@pytest.mark.parametrize("protocol", ["pointwise_logprob", "pairwise_logprob"])
def test_a_server_gets_each_round_as_one_batch_with_the_same_rows(monkeypatch, protocol):
    calls = []

    def fake_logprobs(backend, convs, spellings, prefill=""):
        calls.append((len(convs), prefill))
        out = []
        for conv in convs:
            first = shown_models(conv)[0]
            if protocol == "pairwise_logprob":
                out.append(({"A": math.log(0.7 if first == "m1" else 0.4),
                             "B": math.log(0.3 if first == "m1" else 0.6)}, None))
            elif first == "m2" and not prefill:  # m2's readings open with words, not a digit
                out.append(({"1": math.log(0.05)}, None))
            else:
                out.append(({"3": math.log(0.9 if first == "m1" else 0.2),
                             "0": math.log(0.1 if first == "m1" else 0.8)}, None))
        return out

    monkeypatch.setattr("arenaforge.stages.arena.judge_logits.next_token_logprobs", fake_logprobs)
    table = answers({"i1": ["m1", "m2"], "i2": ["m1", "m2"], "i3": ["m1", "m2"]})
    cfg = JudgeConfig(protocol=protocol, judges=["j"])
    one_context = run(table, cfg, Ctx({"j": object()})).table.to_pylist()
    sequential_calls, calls[:] = list(calls), []
    served = run(table, cfg, Ctx({"j": Served()})).table.to_pylist()
    assert served == one_context
    assert len(sequential_calls) > len(calls)
    if protocol == "pairwise_logprob":  # 3 battles x 2 orders in one request batch
        assert calls == [(6, "")]
    else:  # both orders' first answers, their retries, then every second answer and its retries
        assert calls == [(6, ""), (3, "Score: "), (6, ""), (3, "Score: ")]


def test_pointwise_logprob_expected_scores(monkeypatch):
    dist = {"m1": [0.1, 0.1, 0.4, 0.4], "m2": [0.7, 0.1, 0.1, 0.1]}

    def fake_logprobs(backend, convs, spellings, prefill=""):
        return [({str(k): math.log(p) for k, p in enumerate(dist[shown_models(c)[0]])}, None)
                for c in convs]

    monkeypatch.setattr("arenaforge.stages.arena.judge_logits.next_token_logprobs", fake_logprobs)
    rows = run(answers({"i1": ["m1", "m2"]}),
               JudgeConfig(protocol="pointwise_logprob", judges=["j"]),
               Ctx({"j": object()})).table.to_pylist()
    r = rows[0]
    assert r["expected_score_a"] == pytest.approx(2.1) and r["expected_score_b"] == pytest.approx(0.6)
    assert r["verdict"] == "a" and (r["score_a"], r["score_b"]) == (2, 0)


def test_reference_column_and_with_miner_pairs():
    judge = PreferJudge("j")
    table = answers({"i1": ["m1", "m2", "m3"]}, miner={"i1": "m3"})
    rows = run(table, JudgeConfig(protocol="pairwise", judges=["j"], pairs="with_miner",
                                  reference_column="reference"),
               Ctx({"j": judge})).table.to_pylist()
    assert {(r["model_a"], r["model_b"]) for r in rows} == {("m1", "m3"), ("m2", "m3")}
    assert all("ref i1" in c[1]["content"] for c in judge.seen)
    with pytest.raises(ValueError, match="reference_column: input has no column 'nope'"):
        enumerate_battles(table, JudgeConfig(reference_column="nope"))


def test_duplicate_answer_rows_are_an_error():
    table = pa.concat_tables([answers({"i1": ["m1"]}), answers({"i1": ["m1"]})])
    with pytest.raises(ValueError, match="row 1: duplicate answer of model 'm1'"):
        enumerate_battles(table, JudgeConfig())


def test_empty_input_and_single_answers_give_no_rows():
    judges = {"j": PreferJudge("j")}
    out = run(answers({"i1": ["m1"]}), JudgeConfig(judges=["j"]), Ctx(judges))
    assert out.table.num_rows == 0 and out.table.schema == judge_stage.OUTPUT_SCHEMA
    assert judges["j"].seen == []


def test_default_protocol_is_known():
    assert JudgeConfig().protocol in jp.PROTOCOLS


def test_servers_and_vllm_take_batches_and_llama_cpp_keeps_its_order(tmp_path):
    from arenaforge.pipeline.backends.llamacpp import LlamaCppBackend
    from arenaforge.pipeline.backends.openai_server import OpenAIServerBackend
    from arenaforge.pipeline.backends.request_cache import CachedBackend
    from arenaforge.pipeline.backends.vllm_offline import VllmBackend
    from arenaforge.stages.arena.judge import reads_in_parallel

    server = OpenAIServerBackend("m", "http://127.0.0.1:9/v1", "m", template_from_server=False)
    assert reads_in_parallel(CachedBackend(server, tmp_path, "m"))  # through the cache wrapper
    assert VllmBackend.prefers_batches and not hasattr(LlamaCppBackend, "prefers_batches")
