"""emit: SFT rows, splits and shards, the dataset card, and loading with datasets / TRL."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from arenaforge.pipeline.store import RunStore
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.output.card import hf_features, license_of
from arenaforge.stages.output.emit import (
    SFT_SCHEMA,
    EmitConfig,
    build_sft_rows,
    holdout_mask,
    plan_files,
    run,
    write_dataset,
)
from arenaforge.stages.output.emit import (
    STAGE as EMIT,
)


def _selected(n: int = 4, **extra) -> pa.Table:
    texts = [f"Write a function f{i}(x) that returns x + {i}." for i in range(n)]
    cols = {
        "instruction_id": [instruction_id(t) for t in texts],
        "instruction": texts,
        "model": ["qwen2.5-coder-0.5b" if i % 2 else "smollm2-135m" for i in range(n)],
        "response": [f"```python\ndef f{i}(x):\n    return x + {i}\n```" for i in range(n)],
        "status": ["passed" if i % 3 else "failed" for i in range(n)],
        "program_gate": ["pass" if i % 3 else "fail" for i in range(n)],
    }
    cols.update(extra)
    return pa.table(cols)


def test_messages_have_user_then_assistant_and_optional_system():
    t = _selected(2)
    plain = build_sft_rows(t, system_prompt=None, run_id="r1", config_hash="c1")
    assert plain.schema == SFT_SCHEMA
    assert [m["role"] for m in plain.column("messages")[0].as_py()] == ["user", "assistant"]
    assert plain.column("messages")[1].as_py()[1]["content"] == t.column("response")[1].as_py()
    sys = build_sft_rows(t, system_prompt="You write Python.", run_id="r1", config_hash="c1")
    first = sys.column("messages")[0].as_py()
    assert [m["role"] for m in first] == ["system", "user", "assistant"]
    assert first[0]["content"] == "You write Python."


def test_provenance_columns_copied_verified_derived_and_missing_ones_null():
    t = _selected(3, tests_passed=[0, 4, 2], elo=[1010.5, 990.0, 1000.0],
                  tests_hidden=[2, 2, 0], tests_hidden_passed=[0, 2, 0],
                  judges=[["j1"], None, ["j1", "j2"]])
    out = build_sft_rows(t, system_prompt=None, run_id="run-7", config_hash="abc")
    assert out.column("verified").to_pylist() == [False, True, True]
    assert out.column("source_model").to_pylist() == t.column("model").to_pylist()
    assert out.column("tests_passed").to_pylist() == [0, 4, 2]
    assert out.column("tests_hidden_passed").to_pylist() == [0, 2, 0]
    assert out.column("judges").to_pylist() == [["j1"], None, ["j1", "j2"]]
    assert out.column("program_gate").to_pylist() == ["fail", "pass", "pass"]
    assert out.column("elo").to_pylist() == [1010.5, 990.0, 1000.0]
    for absent in ("judge_score", "repaired", "repair_rounds", "miner", "tests_augmented",
                   "probe_gate", "judge_pick"):
        assert out.column(absent).to_pylist() == [None] * 3, absent
    assert set(out.column("run_id").to_pylist()) == {"run-7"}
    assert set(out.column("config_hash").to_pylist()) == {"abc"}


CONTRACT_COLUMNS = {  # the dataset's contract: exactly these names and types
    "repaired": "bool", "repair_rounds": "int64", "replaced_judge_pick": "bool",
    "judge_pick": "string", "selection_rule": "string", "miner": "string",
    "template": "string", "judges": "list<string>", "tests_visible_passed": "int64",
    "tests_hidden_passed": "int64", "tests_augmented_passed": "int64", "tests_visible": "int64",
    "tests_hidden": "int64", "tests_augmented": "int64", "probe_gate": "string",
    "program_gate": "string"}


def test_schema_has_the_contract_provenance_columns():
    types = {f.name: str(f.type).replace("list<item: string>", "list<string>")
             for f in SFT_SCHEMA}
    assert {name: types.get(name) for name in CONTRACT_COLUMNS} == CONTRACT_COLUMNS
    assert all(SFT_SCHEMA.field(name).nullable for name in CONTRACT_COLUMNS)


@pytest.mark.parametrize("status, gate, repaired, verified", [
    ("passed", "pass", False, True),
    ("passed", "pass", True, True),      # repaired, verified on tests it never saw
    ("passed", "no_tests", False, False),  # passed only tests repair may show, none hidden
    ("passed", None, False, False),      # gate not recorded: not verified
    ("failed", "fail", True, False),
    ("no_tests", "no_tests", False, False),
])
def test_verified_needs_the_program_gate(status, gate, repaired, verified):
    t = _selected(1, status=[status], program_gate=pa.array([gate], pa.string()),
                  repaired=[repaired], repair_rounds=[1 if repaired else 0])
    out = build_sft_rows(t, system_prompt=None, run_id="r", config_hash="h")
    assert out.column("verified").to_pylist() == [verified]
    assert out.column("repaired").to_pylist() == [repaired]


def test_bad_input_names_the_column_or_row():
    with pytest.raises(ValueError, match="response"):
        build_sft_rows(_selected(2).drop_columns(["response"]), system_prompt=None,
                       run_id="r", config_hash="h")
    t = _selected(3)
    t = t.set_column(t.schema.get_field_index("response"), "response",
                     pa.array(["ok", "  ", "ok"]))
    with pytest.raises(ValueError, match=r"row 1 .*empty response"):
        build_sft_rows(t, system_prompt=None, run_id="r", config_hash="h")


def test_holdout_is_per_instruction_stable_and_near_the_fraction():
    ids = [instruction_id(f"task {i}") for i in range(2000)]
    mask = holdout_mask(ids, 0.2, seed=3)
    assert 0.17 < sum(mask) / len(mask) < 0.23
    # Order does not matter: each instruction's side depends on itself and the seed only.
    rev = holdout_mask(ids[::-1], 0.2, seed=3)[::-1]
    assert rev == mask
    assert holdout_mask(ids, 0.2, seed=4) != mask
    assert not any(holdout_mask(ids, 0.0, seed=3))


@pytest.mark.parametrize("n,shard_rows,expected", [
    (5, 2, ["train-00000-of-00003.parquet", "train-00001-of-00003.parquet",
            "train-00002-of-00003.parquet"]),
    (4, 4, ["train-00000-of-00001.parquet"]),
    (0, 4, ["train-00000-of-00001.parquet"]),
])
def test_shards_are_named_like_the_hub_and_keep_every_row(n, shard_rows, expected):
    sft = build_sft_rows(_selected(n), system_prompt=None, run_id="r", config_hash="h")
    files = plan_files(sft, shard_rows=shard_rows, holdout_fraction=0.0, seed=0)
    assert list(files) == expected
    assert pa.concat_tables(files.values()).equals(sft)


def test_hf_features_match_datasets_own_conversion():
    from datasets import Features

    assert hf_features(SFT_SCHEMA) == Features.from_arrow_schema(SFT_SCHEMA)._to_yaml_list()


@pytest.mark.parametrize("model,license_name", [
    ("qwen2.5-coder-0.5b", "Apache-2.0"),
    ("Qwen2.5-Coder-3B-Instruct", "Qwen Research License"),
    ("smollm2-135m", "Apache-2.0"),
    ("gemma-3-270m", "Gemma Terms of Use"),
    ("all-MiniLM-L6-v2", "Apache-2.0"),
])
def test_license_notes(model, license_name):
    assert license_of(model)[0] == license_name


def test_unknown_model_license_is_said_unknown_not_guessed():
    assert license_of("some-private-model")[0].startswith("unknown")


def test_written_files_load_with_datasets_and_are_conversational_for_trl(tmp_path):
    from datasets import load_dataset
    from trl.data_utils import is_conversational

    sft = build_sft_rows(_selected(6, tests_passed=list(range(6))),
                         system_prompt="Answer with code.", run_id="r", config_hash="h")
    paths = write_dataset(sft, tmp_path, shard_rows=4, holdout_fraction=0.0, seed=0)
    assert [p.name for p in paths] == ["train-00000-of-00002.parquet",
                                       "train-00001-of-00002.parquet"]
    ds = load_dataset("parquet", data_files={"train": [str(p) for p in paths]}, split="train")
    assert len(ds) == 6
    assert ds[0]["messages"][0] == {"role": "system", "content": "Answer with code."}
    assert all(is_conversational(row) for row in ds)
    assert ds.features["verified"].dtype == "bool"
    assert set(CONTRACT_COLUMNS) <= set(ds.column_names)
    assert ds[0]["judges"] is None and ds[0]["program_gate"] == "fail"


class _Ctx:
    """The parts of the runner's context that ``emit`` uses, over a real run directory.

    Upstream stage outputs are given as tables; artifacts go through the real ``RunStore``.
    """

    def __init__(self, run_dir: Path, tables: dict[str, pa.Table], seed: int = 0):
        self.run_dir, self.tables, self.seed = run_dir, tables, seed
        self.run_id = run_dir.name

    def config_hash(self):
        return "cfg123"

    def funnel(self):
        return RunStore(self.run_dir).funnel()

    def remove_artifacts(self, folder, pattern, keep):
        return RunStore(self.run_dir).remove_artifacts(folder, pattern, keep)

    def read(self, stage, columns=None, instruction_ids=None):
        # what the runner's context serves: the declared columns (those the table has)
        if stage not in self.tables and stage in ("clean", "judge", "compress", "tests"):
            self.tables[stage] = pa.table({c: pa.array([], pa.string())
                                           for c in EMIT.reads[stage]})
        declared = [c for c in EMIT.reads[stage] if c in self.tables[stage].column_names]
        table = self.tables[stage].select(declared)
        if instruction_ids is not None:
            import pyarrow.compute as pc

            table = table.filter(pc.is_in(table.column("instruction_id"),
                                          value_set=pa.array(list(instruction_ids),
                                                             pa.string())))
        return table.select([c for c in columns if c in declared]) if columns else table

    def write_artifact(self, relpath, data):
        return RunStore(self.run_dir).write_artifact(relpath, data)

    def read_artifact(self, relpath):
        assert relpath in EMIT.artifacts, f"undeclared artifact {relpath}"
        return RunStore(self.run_dir).read_artifact(relpath)

    def model_spec(self, model_id):
        raise KeyError(model_id)


def _verify_table() -> pa.Table:
    sel = _selected(4)
    ids = sel.column("instruction_id").to_pylist()
    rows = []
    for i, iid in enumerate(ids):
        for model in ("qwen2.5-coder-0.5b", "smollm2-135m"):
            chosen = model == sel.column("model")[i].as_py()
            rows.append({"instruction_id": iid, "instruction": sel.column("instruction")[i].as_py(),
                         "model": model,
                         "response": sel.column("response")[i].as_py() if chosen else "other",
                         "status": sel.column("status")[i].as_py() if chosen else "failed",
                         "tests_passed": 3 if chosen else 0, "tests_total": 3,
                         "program_gate": "pass" if chosen and i % 3 else "fail",
                         "repaired": chosen and i == 2, "repair_rounds": 1 if i == 2 else 0,
                         "selected": chosen, "judge_score": 7.5, "elo": 1000.0 + i})
    # A selected answer that is blank is dropped, with its reason.
    next(r for r in reversed(rows) if r["selected"])["response"] = "   "
    return pa.Table.from_pylist(rows)


def test_stage_writes_dataset_and_card_and_counts_drops(tmp_path):
    verify = _verify_table()
    ids = sorted(set(verify.column("instruction_id").to_pylist()))
    difficulty = pa.table({
        "instruction_id": ids, "difficulty": [3.0, 5.0, 7.0, 9.0],
        "difficulty_votes": [[{"judge": "gemma-3-270m", "score": 5}]] * 4})
    answer = verify.select(["instruction_id", "model"])
    rate = pa.table({"instruction_id": ids, "final_score": [0.1, 0.2, 0.3, 0.4]})
    orig = list(dict.fromkeys(verify.column("instruction_id").to_pylist()))  # i = 0..3
    clean = pa.table({"instruction_id": orig + orig[:1],  # a repeated row agrees with itself
                      "miner": ["qwen2.5-coder-0.5b"] * 3 + [None, "qwen2.5-coder-0.5b"],
                      "template": ["chat_template/empty_assistant"] * 3 + ["file"]
                      + ["chat_template/empty_assistant"]})
    judge = pa.table({"instruction_id": [orig[0], orig[0], orig[0], orig[2]],
                      "judge": ["smollm2-135m", "gemma-3-270m", "smollm2-135m", "smollm2-135m"]})
    store = RunStore(tmp_path)
    store.stage("mine").mark_success({"rows_in": 10, "rows_out": 8, "dropped": {"empty": 2}})
    store.stage("verify").mark_success({"rows_in": 8, "rows_out": 8, "dropped": {}})
    store.write_artifact("audit/metrics.json", json.dumps({"gate": GATE_REPORT}))
    ctx = _Ctx(tmp_path, {"difficulty": difficulty, "answer": answer, "rate": rate,
                          "audit": _audit_table(verify), "clean": clean, "judge": judge}, seed=1)
    cfg = EmitConfig(system_prompt="Be brief.", extra_models=("all-MiniLM-L6-v2",),
                     admit="selected")

    result = run(verify, cfg, ctx)

    assert result.table.num_rows == 3
    assert result.table.schema == SFT_SCHEMA
    assert result.dropped.column("reason").to_pylist().count("not_selected") == 4
    assert result.dropped.column("reason").to_pylist().count("empty_response") == 1
    by_id = dict(zip(ids, [3.0, 5.0, 7.0, 9.0]))
    out_ids = result.table.column("instruction_id").to_pylist()
    assert [by_id[i] for i in out_ids] == result.table.column("difficulty").to_pylist()
    rows = {r["instruction_id"]: r for r in result.table.to_pylist()}
    assert set(out_ids) == set(orig[:3])  # the fourth selected answer is blank
    assert rows[orig[0]]["judges"] == ["gemma-3-270m", "smollm2-135m"]
    assert rows[orig[1]]["judges"] is None and rows[orig[2]]["judges"] == ["smollm2-135m"]
    assert [rows[i]["miner"] for i in orig[:3]] == ["qwen2.5-coder-0.5b"] * 3
    assert rows[orig[0]]["template"] == "chat_template/empty_assistant"
    assert [rows[i]["repaired"] for i in orig[:3]] == [False, False, True]
    assert [rows[i]["verified"] for i in orig[:3]] == [False, True, True]
    assert set(result.table.column("final_score").to_pylist()) <= {0.1, 0.2, 0.3, 0.4}
    assert set(result.table.column("config_hash").to_pylist()) == {"cfg123"}

    shard = tmp_path / "dataset" / "train-00000-of-00001.parquet"
    assert pq.read_table(shard).equals(result.table)
    card = (tmp_path / "dataset" / "README.md").read_text()
    header = yaml.safe_load(card.split("---\n")[1])
    assert header["dataset_info"]["splits"] == [{"name": "train", "num_examples": 3}]
    assert header["configs"][0]["data_files"] == [{"split": "train", "path": "train-*.parquet"}]
    for expected in ("Gemma Terms of Use", "Apache-2.0", "all-MiniLM-L6-v2", "| mine | 10 | 8 |",
                     "empty_response: 1", "not_selected: 4", "`verified` (2 of 3 rows)",
                     "`repaired` (1 rows)", "no row lacks tests",
                     "mean judge score is at least 2.5",
                     "(40 instructions, 80 answers)", ("3 of the 30 admitted answers failed "
                     "(10.0%, exact 95% interval 2.1-26.5%)"), ("**What it does not cover:** the 0 "
                     "rows of this dataset without tests"), "bound does not carry over"):
        assert expected in card, expected

    # The folder with its card is a dataset the Hub loader understands without arguments.
    from datasets import load_dataset

    ds = load_dataset(str(tmp_path / "dataset"), split="train")
    assert len(ds) == 3 and ds[0]["messages"][0]["role"] == "system"


GATE_REPORT = {"threshold": 2.5, "epsilon": 0.1, "delta": 0.1, "calibration_rows": 80,
               "splits": {"calibration": {"instructions": 40, "rows": 80},
                          "held_out": {"instructions": 41, "rows": 82}},
               "held_out": {"k": 3, "n": 30, "rate": 0.1, "ci_low": 0.0211, "ci_high": 0.2653,
                            "rows": 82},
               "without_tests": {"rows": 12, "admitted": 5}}


def test_card_counts_rows_without_tests_and_says_the_bound_does_not_cover_them(tmp_path):
    texts = {"p": "passed", "g": "no_tests", "h": "no_tests"}
    verify = pa.table({
        "instruction_id": list(texts), "instruction": [f"Task {k} please" for k in texts],
        "model": ["m"] * 3, "response": ["code"] * 3, "status": list(texts.values()),
        "program_gate": ["pass", "no_tests", "no_tests"], "selected": [True] * 3})
    ctx = _plain_ctx(tmp_path, verify)
    ctx.tables["audit"] = _audit_table(verify, {"g": True, "h": True})
    RunStore(tmp_path).write_artifact("audit/metrics.json", json.dumps(
        {"gate": dict(GATE_REPORT, threshold=None)}))
    result = run(verify, EmitConfig(), ctx)
    assert result.stats["without_tests"] == 2.0 and result.stats["verified"] == 1.0
    card = (tmp_path / "dataset" / "README.md").read_text()
    assert "2 rows have no usable tests (`status` `no_tests`)" in card
    assert "admitted on their judge score alone" in card
    assert "the 2 rows of this dataset without tests" in card
    assert "No threshold met the bound" in card


def test_clean_rows_that_disagree_on_the_miner_are_an_error():
    from arenaforge.stages.output.emit_provenance import with_origin

    t = _selected(1)
    iid = t.column("instruction_id")[0].as_py()
    clean = pa.table({"instruction_id": [iid, iid], "miner": ["a", "b"],
                      "template": ["x", "x"]})
    with pytest.raises(ValueError, match=f"instruction_id={iid} disagree"):
        with_origin(t, clean)


def _plain_ctx(tmp_path: Path, verify: pa.Table) -> _Ctx:
    """Upstream outputs with constant difficulty and score and no difficulty votes."""
    ids = sorted(set(verify.column("instruction_id").to_pylist()))
    return _Ctx(tmp_path, {
        "difficulty": pa.table({"instruction_id": ids, "difficulty": [1.0] * len(ids),
                                "difficulty_votes": [[]] * len(ids)}),
        "answer": verify.select(["instruction_id", "model"]),
        "rate": pa.table({"instruction_id": ids, "final_score": [0.0] * len(ids)}),
        "audit": _audit_table(verify)})


def _audit_table(verify: pa.Table, gate: dict | None = None) -> pa.Table:
    """The audit stage's per-answer gate verdicts (null: execution decided)."""
    keys = verify.select(["instruction_id", "model"]).to_pylist()
    return pa.Table.from_pylist([dict(k, gate_admitted=(gate or {}).get(k["instruction_id"]))
                                 for k in keys],
                                schema=pa.schema([("instruction_id", pa.string()),
                                                  ("model", pa.string()),
                                                  ("gate_admitted", pa.bool_())]))


# where execution stopped each answer (verify's ``admission``), its probe verdict and status
ADMISSION = {"p": ("verified", "pass", "passed"), "g": ("no_tests", "pass", "no_tests"),
             "r": ("no_tests", "pass", "no_tests"), "f": ("below_pass_fraction", "pass", "failed"),
             "e": ("no_usable_code", "no_entry_point", "no_entry_point"),
             "v": ("example_failed", "example_failed", "failed"),
             "c": ("contradictory_tests", "pass", "contradictory_tests"),
             "u": ("no_usable_code", "no_code", "error")}


@pytest.mark.parametrize("admit, expected_rows, expected_reasons", [
    ("verified", {"p"}, {"no_tests": 2, "below_pass_fraction": 1, "no_usable_code": 2,
                         "example_failed": 1, "contradictory_tests": 1}),
    ("verified_or_gated", {"p", "g"}, {"gate_rejected": 1, "below_pass_fraction": 1,
                                       "no_usable_code": 2, "example_failed": 1,
                                       "contradictory_tests": 1}),
    # every selected answer, as the paper emitted them, but never one without usable code
    ("selected", {"p", "g", "r", "f", "v", "c"}, {"no_usable_code": 2}),
])
def test_admission_rules(tmp_path, admit, expected_rows, expected_reasons):
    keys = list(ADMISSION)
    verify = pa.table({
        "instruction_id": keys, "instruction": [f"Task {k} please" for k in keys],
        "model": ["m"] * len(keys), "response": ["code"] * len(keys),
        "status": [ADMISSION[k][2] for k in keys], "admission": [ADMISSION[k][0] for k in keys],
        "probe_gate": [ADMISSION[k][1] for k in keys],
        "verified": [ADMISSION[k][0] == "verified" for k in keys],
        "program_gate": ["pass"] * len(keys), "selected": [True] * len(keys)})
    ctx = _plain_ctx(tmp_path, verify)
    # the judge gate admits g and u (u's answer has no code: it is never emitted anyway)
    ctx.tables["audit"] = _audit_table(verify, {"g": True, "r": False, "u": True})
    result = run(verify, EmitConfig(admit=admit), ctx)
    assert set(result.table.column("instruction_id").to_pylist()) == expected_rows
    reasons = result.dropped.column("reason").to_pylist()
    assert {r: reasons.count(r) for r in set(reasons)} == expected_reasons
    assert result.table.column("verified").to_pylist().count(True) == ("p" in expected_rows)
    rows = {r["instruction_id"]: r for r in result.table.to_pylist()}
    # gate_admitted: admitted by the judge gate without execution, and only then
    assert {k: r["gate_admitted"] for k, r in rows.items()} == {
        k: k == "g" and admit == "verified_or_gated" for k in rows}


def test_stage_holdout_split_is_written_and_described(tmp_path):
    verify = _verify_table()
    ctx = _plain_ctx(tmp_path, verify)
    result = run(verify, EmitConfig(holdout_fraction=0.5, admit="selected"), ctx)
    files = sorted(p.name for p in (tmp_path / "dataset").glob("*.parquet"))
    n_test = sum(holdout_mask(result.table.column("instruction_id").to_pylist(), 0.5, 0))
    assert 0 < n_test < 3, "seed 0 splits these ids both ways"
    assert files == ["test-00000-of-00001.parquet", "train-00000-of-00001.parquet"]
    assert result.stats == {"rows_train": 3.0 - n_test, "rows_test": float(n_test),
                            "verified": 2.0, "repaired": 1.0, "replaced_judge_pick": 0.0,
                            "without_tests": 0.0}


def test_rerun_with_fewer_shards_leaves_no_stale_file(tmp_path):
    verify = _verify_table()
    ctx = _plain_ctx(tmp_path, verify)
    run(verify, EmitConfig(shard_rows=1, admit="selected"), ctx)
    assert len(list((tmp_path / "dataset").glob("train-*.parquet"))) == 3
    run(verify, EmitConfig(shard_rows=10, admit="selected"), ctx)
    assert sorted(p.name for p in (tmp_path / "dataset").glob("*.parquet")) == [
        "train-00000-of-00001.parquet"]


def test_two_selected_answers_for_one_instruction_is_an_error(tmp_path):
    verify = _verify_table()
    verify = verify.set_column(verify.schema.get_field_index("selected"), "selected",
                               pa.array([True] * verify.num_rows))
    with pytest.raises(ValueError, match="more than one selected answer, e.g. instruction_id="):
        run(verify, EmitConfig(), _plain_ctx(tmp_path, verify))


def test_provenance_a_user_can_filter_on(tmp_path):
    """test_authors, judge_verdicts (both orders), local_share, margin and kcenter_rank come
    from the stages that made them; gate_admitted says the judge gate admitted a row."""
    keys = ["p", "g"]
    verify = pa.table({
        "instruction_id": keys, "instruction": ["Task p please", "Task g please"],
        "model": ["m1", "m1"], "response": ["code", "code"], "status": ["passed", "no_tests"],
        "admission": ["verified", "no_tests"], "probe_gate": ["pass", "pass"],
        "verified": [True, False], "program_gate": ["pass", "no_tests"],
        "selected": [True, True]})
    ctx = _plain_ctx(tmp_path, verify)
    ctx.tables["audit"] = _audit_table(verify, {"g": True})
    ctx.tables["rate"] = pa.table({"instruction_id": ["p", "p", "g"], "model": ["m1", "m2", "m1"],
                                   "final_score": [0.8, 0.3, 0.5], "elo": [1010.0, 990.0, 1010.0],
                                   "local_share": [1.0, 0.0, 0.5], "margin": [0.5, 0.5, 0.0]})
    ctx.tables["compress"] = pa.table({"instruction_id": ["g", "p"], "kcenter_rank": [0, 3]})
    ctx.tables["tests"] = pa.table({
        "instruction_id": ["p"] * 4, "author": ["m2", "m1", "m3", "instruction"],
        "survived": [True, True, False, True],
        "kind": ["written", "written", "written", "example"],
        "trusted_by": ["written+passer", "written", None, "example"],
        "strength": [2, 1, None, 4],
        "graded_passed_by": [["m1", "m2"], ["m2"], ["m1"], ["m1"]]})
    ctx.tables["judge"] = pa.table({
        "instruction_id": ["p", "p"], "judge": ["j", "j"], "order": ["ba", "ab"],
        "model_a": ["m1", "m1"], "model_b": ["m2", "m2"], "verdict": ["a", "a"],
        "score_a": pa.array([None, None], pa.int64()), "score_b": pa.array([None, None], pa.int64()),
        "expected_score_a": [2.6, 2.4], "expected_score_b": [0.7, 1.1],
        "parse_error": pa.array([None, None], pa.string())})
    result = run(verify, EmitConfig(), ctx)
    rows = {r["instruction_id"]: r for r in result.table.to_pylist()}
    assert rows["p"]["test_authors"] == ["m1", "m2"]  # trusted written tests only
    assert rows["g"]["test_authors"] == []
    assert [(v["order"], v["score_a"], v["score_b"]) for v in rows["p"]["judge_verdicts"]] == [
        ("ab", 2.4, 1.1), ("ba", 2.6, 0.7)]
    assert rows["g"]["judge_verdicts"] is None
    assert (rows["p"]["local_share"], rows["p"]["margin"], rows["p"]["kcenter_rank"]) == \
        (1.0, 0.5, 3)
    assert (rows["p"]["gate_admitted"], rows["g"]["gate_admitted"]) == (False, True)
    assert (rows["p"]["admission"], rows["g"]["admission"]) == ("verified", "no_tests")
    # the evidence a user filters on: m1 passed the example and m2's test, not its own
    # (m3's was not trusted)
    assert (rows["p"]["evidence_passed"], rows["p"]["evidence_strength"],
            rows["p"]["other_authors"]) == (["example", "written+passer"], 4, 1)
    assert (rows["g"]["evidence_passed"], rows["g"]["evidence_strength"],
            rows["g"]["other_authors"]) == ([], None, 0)
