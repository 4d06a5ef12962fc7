"""Declared stage inputs and code/prompt fingerprints, on the real stage specs and a toy pipeline."""

from __future__ import annotations

import dataclasses
import sys
import textwrap

import pyarrow as pa
import pytest
from arenaforge.pipeline.context import UndeclaredReadError
from arenaforge.pipeline.executors import InlineExecutor
from arenaforge.pipeline.layout import EMBEDDINGS
from arenaforge.pipeline.runner import ContractChainError, check_chain, run_stages
from arenaforge.pipeline.stage import StageConfig, StageSpec
from arenaforge.pipeline.store import RunStore
from arenaforge.stages import PIPELINE, get_stage

from tests.toy_pipeline import GEN, GenConfig, toy_ctx


def test_every_stage_declares_what_the_pipeline_provides():
    check_chain([get_stage(n) for n in PIPELINE])


def test_a_column_emit_reads_renamed_upstream_fails_before_any_stage_runs(tmp_path):
    specs = [get_stage(n) for n in PIPELINE]
    i = PIPELINE.index("difficulty")
    renamed = tuple("votes" if c == "difficulty_votes" else c for c in specs[i].outputs)
    specs[i] = dataclasses.replace(specs[i], outputs=renamed)
    with pytest.raises(ContractChainError,
                       match=r"stage 'emit' reads columns \['difficulty_votes'\] that stage "
                             r"'difficulty'"):
        check_chain(specs)
    store = RunStore(tmp_path)
    store.open("x", "x: 1\n")
    with pytest.raises(ContractChainError, match="'emit'.*difficulty_votes"):
        # the real mine stage would call a model first: nothing may run at all
        run_stages(specs, {}, toy_ctx(tmp_path), store, InlineExecutor(1), 8, show_progress=False)
    assert not (tmp_path / "stages").exists()


def test_a_stage_complete_on_disk_is_checked_against_its_stored_columns(tmp_path):
    store = RunStore(tmp_path)
    store.open("x", "x: 1\n")
    run_stages([GEN], {"gen": GenConfig(n=4)}, toy_ctx(tmp_path), store, InlineExecutor(1), 8,
               show_progress=False)
    reader = StageSpec(name="reader", config=GenConfig, run=lambda t, c, x: t, source="gen",
                       reads={"gen": ("instruction_id", "nope")})
    with pytest.raises(ContractChainError, match=r"'reader' reads columns \['nope'\].*'gen'"):
        check_chain([reader], store.completed(), store)


class _Cfg(StageConfig):
    pass


def _reading_stage(name, reads, wanted):
    def run(table, cfg, ctx):
        ctx.read(*wanted)
        return table

    return StageSpec(name=name, config=_Cfg, run=run, source="gen", reads=reads)


@pytest.mark.parametrize("reads, wanted, message", [
    ({}, ("gen",), "reads stage 'gen' without declaring it"),
    ({"gen": ("i",)}, ("gen", ["instruction"]), r"reads columns \['instruction'\] of stage 'gen'"),
])
def test_an_undeclared_read_fails_loudly(tmp_path, reads, wanted, message):
    store = RunStore(tmp_path)
    store.open("x", "x: 1\n")
    spec = _reading_stage("reader", reads, wanted)
    with pytest.raises(UndeclaredReadError, match=message):
        run_stages([GEN, spec], {"gen": GenConfig(n=2), "reader": _Cfg()}, toy_ctx(tmp_path),
                   store, InlineExecutor(1), 8, show_progress=False)


def test_a_declared_read_gets_only_the_declared_columns(tmp_path):
    seen = {}

    def run(table, cfg, ctx):
        seen["columns"] = ctx.read("gen").column_names
        return table

    spec = StageSpec(name="reader", config=_Cfg, run=run, source="gen", reads={"gen": ("i",)})
    store = RunStore(tmp_path)
    store.open("x", "x: 1\n")
    run_stages([GEN, spec], {"gen": GenConfig(n=2), "reader": _Cfg()}, toy_ctx(tmp_path), store,
               InlineExecutor(1), 8, show_progress=False)
    assert seen["columns"] == ["i"]


# -- resume that knows the code and the prompts ---------------------------------------------

TOY_STAGES = '''
import pyarrow as pa
from arenaforge.pipeline.stage import StageConfig, StageSpec
from {pkg}.helper import SUFFIX


class Cfg(StageConfig):
    pass


def fill(table, cfg, ctx):
    template = open({prompt!r}).read().strip()
    texts = [template.format(x=t) for t in table.column("instruction").to_pylist()]
    return table.append_column("filled", pa.array(texts))


def after(table, cfg, ctx):
    return table.append_column("after", pa.array([t + SUFFIX for t in
                                                  table.column("filled").to_pylist()]))


def side(table, cfg, ctx):
    return table.append_column("side", pa.array([1] * table.num_rows))


FILL = StageSpec(name="fill", config=Cfg, run=fill, source="gen", prompts=({prompt!r},),
                 outputs=("filled",))
AFTER = StageSpec(name="after", config=Cfg, run=after, source="fill", outputs=("after",))
SIDE = StageSpec(name="side", config=Cfg, run=side, source="gen", outputs=("side",))
'''


@pytest.fixture
def toy_package(tmp_path, monkeypatch):
    """A package of three toy stages (``fill`` fills a prompt file; ``after`` follows it and
    imports a helper module; ``side`` reads only ``gen``), importable from tmp_path."""
    pkg = tmp_path / "code" / "toystages"
    pkg.mkdir(parents=True)
    prompt = tmp_path / "prompts" / "toy_fill.txt"
    prompt.parent.mkdir()
    prompt.write_text("Do: {x}\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("SUFFIX = '!'\n")
    (pkg / "specs.py").write_text(TOY_STAGES.format(pkg="toystages", prompt=str(prompt)))
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    yield pkg, prompt
    for name in [m for m in sys.modules if m.startswith("toystages")]:
        del sys.modules[name]


def _run_toys(run_dir):
    import importlib

    from arenaforge.pipeline import fingerprint

    fingerprint.code_digests.cache_clear()  # a new process would read the files afresh
    specs = importlib.import_module("toystages.specs")
    store = RunStore(run_dir)
    store.open("toy", "toy: 1\n")
    cfg = specs.Cfg()
    funnel = run_stages([GEN, specs.FILL, specs.AFTER, specs.SIDE],
                        {"gen": GenConfig(n=4), "fill": cfg, "after": cfg, "side": cfg},
                        toy_ctx(run_dir), store, InlineExecutor(1), 2, show_progress=False)
    return {s.stage: s.recomputed for s in funnel}, store


def test_changing_a_prompt_recomputes_its_stage_and_what_follows_only(tmp_path, toy_package):
    _, prompt = toy_package
    first, _ = _run_toys(tmp_path / "run")
    assert first == dict.fromkeys(["gen", "fill", "after", "side"], "not complete")
    again, _ = _run_toys(tmp_path / "run")
    assert again == dict.fromkeys(["gen", "fill", "after", "side"])  # all skipped

    prompt.write_text("Please do: {x}\n")
    changed, store = _run_toys(tmp_path / "run")
    assert changed["gen"] is None and changed["side"] is None
    assert changed["fill"] == "prompt changed: " + str(prompt)
    assert changed["after"] == "input changed: fill"
    assert store.stage("after").read().column("after").to_pylist()[0].startswith("Please do: ")


def test_changing_imported_code_recomputes_the_stage_that_imports_it(tmp_path, toy_package):
    pkg, _ = toy_package
    _run_toys(tmp_path / "run")
    (pkg / "helper.py").write_text("SUFFIX = '?'\n")
    for name in [m for m in sys.modules if m.startswith("toystages")]:
        del sys.modules[name]
    changed, store = _run_toys(tmp_path / "run")
    # every toy stage lives in specs.py, which imports helper.py: all three recompute; gen
    # (tests/toy_pipeline.py) does not
    assert changed["gen"] is None
    assert changed["fill"] == changed["side"] == f"code changed: {pkg / 'helper.py'}"
    assert changed["after"].startswith(f"code changed: {pkg / 'helper.py'}")
    assert store.stage("after").read().column("after").to_pylist()[0].endswith("?")


def test_real_stages_hash_the_prompts_they_fill():
    from arenaforge.pipeline.fingerprint import prompt_digests

    assert "judge_pointwise_logprob.txt" in prompt_digests(get_stage("judge").prompts)
    assert set(prompt_digests(get_stage("repair").prompts)) == {
        "repair_feedback.txt", "repair_feedback_hidden.txt", "repair_hidden_line.txt",
        "repair_no_code.txt", "repair_no_entry_point.txt", "repair_system.txt",
        "repair_task_compile_error.txt", "repair_task_feedback.txt",
        "repair_task_feedback_hidden.txt", "repair_task_no_code.txt", "repair_task_system.txt"}
    assert {"testgen_user.txt", "testgen_user_augment.txt"} <= set(
        prompt_digests(get_stage("tests").prompts))


def test_code_digests_follow_imports_but_not_the_runner():
    from arenaforge.pipeline.fingerprint import code_digests

    judge = code_digests("arenaforge.stages.arena.judge")
    assert "stages/arena/judge.py" in judge and "stages/arena/protocols.py" in judge
    assert not any(p in judge for p in ("pipeline/runner.py", "pipeline/store.py",
                                        "pipeline/stage.py"))
    assert "stages/arena/judge.py" not in code_digests("arenaforge.stages.instructions.clean")


def test_missing_prompt_template_is_an_error():
    from arenaforge.pipeline.fingerprint import prompt_digests

    with pytest.raises(FileNotFoundError, match="nope_"):
        prompt_digests(["nope_*.txt"])


def test_table_hash_does_not_depend_on_chunking():
    from arenaforge.pipeline.store import table_hash

    one = pa.table({"a": list(range(10_000)), "b": [str(i) for i in range(10_000)]})
    chunked = pa.concat_tables([one.slice(0, 3), one.slice(3, 5000), one.slice(5003)])
    assert table_hash(one) == table_hash(chunked)
    assert table_hash(one) != table_hash(one.slice(1))


def test_toy_package_text_is_valid():
    compile(textwrap.dedent(TOY_STAGES.format(pkg="p", prompt="/x")), "<toy>", "exec")


def test_a_run_logged_to_a_file_prints_a_line_per_shard(tmp_path):
    """``arenaforge run > run.log``: not a terminal, so progress comes as lines, one a shard."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = textwrap.dedent(f"""
        from pathlib import Path
        from arenaforge.pipeline.executors import InlineExecutor
        from arenaforge.pipeline.runner import run_stages
        from arenaforge.pipeline.store import RunStore
        from tests.toy_pipeline import SPECS, GenConfig, SquareConfig, FilterConfig, toy_ctx
        run = Path({str(tmp_path / "run")!r})
        store = RunStore(run)
        store.open("toy", "toy: 1\\n")
        cfgs = {{"gen": GenConfig(n=12), "square": SquareConfig(), "filter": FilterConfig()}}
        run_stages(SPECS, cfgs, toy_ctx(run), store, InlineExecutor(1), 4)
    """)
    log = tmp_path / "run.log"
    with open(log, "w") as out:
        subprocess.run([sys.executable, "-c", code], cwd=root, stdout=out,
                       stderr=subprocess.DEVNULL, check=True, timeout=120)
    lines = log.read_text().splitlines()
    shard_lines = [ln for ln in lines if "square: shard" in ln]
    assert len(shard_lines) == 3, lines
    assert "shard 3/3 done, rows 12/12" in shard_lines[-1] and "rows/s" in shard_lines[-1]
    assert any("filter: complete in" in ln for ln in lines)


def test_graph_command_prints_every_stage_and_its_reads():
    import json

    from arenaforge.pipeline.cli import app
    from typer.testing import CliRunner

    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    result = CliRunner().invoke(app, ["graph", str(root / "configs" / "smoke.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    nodes = {n["stage"]: n for n in json.loads(result.output)}
    assert list(nodes) == list(PIPELINE)
    assert nodes["emit"]["reads"]["difficulty"] == ["instruction_id", "difficulty",
                                                    "difficulty_votes"]
    # emit reads the audit's metrics and the instructions' embeddings (task dedup)
    assert nodes["emit"]["artifacts"] == ["audit/metrics.json", EMBEDDINGS]
    text = CliRunner().invoke(app, ["graph", str(root / "configs" / "smoke.yaml")]).output
    assert "reads rate: instruction_id, model, final_score, elo" in text


class MappedConfig(StageConfig):
    items: int = 3
    sleep_s: float = 0.0


def square_item(item, ctx):
    """One ``ctx.map`` item: its rows squared, where it ran, and a map of its own context."""
    import os
    import time

    ids, sleep_s = item
    time.sleep(sleep_s)
    return {"squares": [i * i for i in ids], "pid": os.getpid(), "run_id": ctx.run_id,
            "nested": ctx.map(square_item, [(ids[:1], 0.0)] if len(ids) > 1 else [])}


def mapped_run(table, cfg, ctx):
    ids = table.column("i").to_pylist()
    parts = [ids[k::cfg.items] for k in range(cfg.items)]
    results = ctx.map(square_item, [(part, cfg.sleep_s) for part in parts])
    assert all(r["run_id"] == ctx.run_id and [n["pid"] for n in r["nested"]] == [r["pid"]]
               for r in results)  # an item's context reads the run and maps in its process
    by_row = {i: (sq, r["pid"]) for part, r in zip(parts, results, strict=True)
              for i, sq in zip(part, r["squares"], strict=True)}
    return (table.append_column("square", pa.array([by_row[i][0] for i in ids]))
            .append_column("pid", pa.array([by_row[i][1] for i in ids]))
            .append_column("map_workers", pa.array([ctx.map_workers()] * len(ids))))


# a whole-table stage that spreads its rows over ctx.map (tests/test_ray_executor.py runs it on Ray)
MAPPED = StageSpec(name="mapped", config=MappedConfig, run=mapped_run, source="gen",
                   inputs=("i",), outputs=("square", "pid"), sharded=False)


def test_map_runs_items_in_order_one_after_another_inline(tmp_path):
    import os

    from tests.toy_pipeline import run_toy

    run_toy(tmp_path, InlineExecutor(1), {"gen": GenConfig(n=10), "mapped": MappedConfig()},
            specs=[GEN, MAPPED])
    out = RunStore(tmp_path).stage("mapped").read()
    assert out.column("square").to_pylist() == [i * i for i in out.column("i").to_pylist()]
    assert set(out.column("pid").to_pylist()) == {os.getpid()}
    assert set(out.column("map_workers").to_pylist()) == {1}
