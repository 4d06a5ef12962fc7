"""CLI tables never cut ids, paths or numbers: narrow terminals fold and drop columns, pipes
get whole rows, ``--json`` is machine-readable.

The terminal cases run the real command in a pseudo-terminal 40 columns wide, so rich sees
what a user's shell gives it (``isatty``, the window size, ``COLUMNS``).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from arenaforge.pipeline.cli import app
from arenaforge.pipeline.models import load_registry
from arenaforge.pipeline.progress import Col, fit_table, funnel_table
from arenaforge.pipeline.store import StageStore
from rich.console import Console
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = ROOT / "configs" / "models.yaml"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# ids end where the characters an id may hold end ("qwe" inside "qwen2.5" is not whole)
ID_CHARS = r"[\w.\-]"


def run_cli(args: list[str], columns: int = 40, terminal: bool = True) -> str:
    """stdout of ``arenaforge ARGS`` in a terminal ``columns`` wide, or piped."""
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    cmd = [sys.executable, "-m", "arenaforge.pipeline.cli", *args]
    if not terminal:
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout
    pty, fcntl, termios, struct = (pytest.importorskip(m) for m in
                                   ("pty", "fcntl", "termios", "struct"))
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=slave, stdout=slave,
                            stderr=subprocess.PIPE)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()
    proc.stderr.close()
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def whole(word: str, text: str) -> bool:
    return re.search(rf"(?<!{ID_CHARS}){re.escape(word)}(?!{ID_CHARS})", text) is not None


def assert_fits(text: str, columns: int) -> None:
    """Nothing cut, and every table line within the terminal (free text is soft-wrapped)."""
    assert "…" not in text
    table = [line for line in text.splitlines() if line[:1] in set("┏┃┡│└")]
    assert table and max(len(line) for line in table) <= columns


# -- arenaforge models ----------------------------------------------------------------------------
def test_models_in_a_40_column_terminal_prints_every_id_whole():
    out = run_cli(["models"])
    assert_fits(out, 40)
    for model_id in load_registry(REGISTRY):  # in the id column, on one line
        assert re.search(rf"^│ {re.escape(model_id)} +│", out, re.MULTILINE), (model_id, out)
    assert "path" in out  # the path column is kept (folded), sha256 and the rest dropped
    assert "sha256" not in out


def test_models_piped_prints_each_row_whole_on_one_line():
    out = run_cli(["models"], columns=40, terminal=False)
    rows = json.loads(run_cli(["models", "--json"], terminal=False))
    assert "…" not in out
    for row in rows:
        [line] = [ln for ln in out.splitlines() if whole(row["id"], ln)]  # `| grep ID`
        for key in ("path", "size_bytes", "checksum", "sha256", "source"):
            if row[key] is not None:
                assert str(row[key]) in line, (key, line)


def test_models_json_is_the_only_thing_on_stdout():
    result = CliRunner().invoke(app, ["models", "--json", "--registry", str(REGISTRY)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["id"] for r in rows] == list(load_registry(REGISTRY))
    assert {"id", "path", "size_bytes", "checksum", "sha256"} <= set(rows[0])


# -- arenaforge inspect ---------------------------------------------------------------------------
STAGES = ("mine", "clean", "difficulty", "decontaminate")  # pipeline order


@pytest.fixture
def run_dir(tmp_path):
    stages = {name: {"status": "complete", "rows_in": 123456789, "rows_out": 98765432,
                     "dropped": {"near_duplicate": 24691357}, "model_seconds": 1234.5,
                     "seconds": 2345.6, "wall_seconds_last_attempt": 99.5,
                     "utilization_last_attempt": 0.5, "workers": 2}
              for name in STAGES}
    (tmp_path / "manifest.json").write_text(
        json.dumps({"config_hash": "4c57211d78543f36", "code_version": "0.1.0", "stages": stages}))
    clean = StageStore(tmp_path, "clean")
    kept = pa.table({"instruction_id": ["45a4f3d8d3151bc460f91929c9a29a10fd59fff7964bd47d"],
                     "score": [float("nan")], "n": [7]})
    clean.write_shard(0, kept, pa.table({"reason": pa.array([], pa.string())}), {})
    clean.mark_success({"shards": 1})
    return tmp_path


def test_inspect_in_a_40_column_terminal_keeps_stage_names_and_counts_whole(run_dir):
    out = run_cli(["inspect", str(run_dir)])
    assert_fits(out, 40)
    for word in (*STAGES, "123456789", "98765432", "4c57211d78543f36"):
        assert whole(word, out), (word, out)


def test_inspect_piped_prints_whole_funnel_rows(run_dir):
    out = run_cli(["inspect", str(run_dir)], terminal=False)
    [line] = [ln for ln in out.splitlines() if whole("decontaminate", ln) and "123456789" in ln]
    for cell in ("98765432", "near_duplicate=24691357", "1234.5", "99.5", "50% of 2"):
        assert cell in line
    assert str(run_dir) in out


def test_inspect_stage_in_a_40_column_terminal(run_dir):
    out = run_cli(["inspect", str(run_dir), "clean"])
    assert "…" not in out
    assert whole("45a4f3d8d3151bc460f91929c9a29a10fd59fff7964bd47d", out)
    assert whole("instruction_id", out) and "1 rows, 1 shards" in out


def test_inspect_json(run_dir):
    result = CliRunner().invoke(app, ["inspect", str(run_dir), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert [s["stage"] for s in info["stages"]] == list(STAGES)
    assert info["stages"][0]["rows_in"] == 123456789 and info["config_hash"] == "4c57211d78543f36"
    assert info["run_dir"] == str(run_dir) and info["ratings"] is None

    result = CliRunner().invoke(app, ["inspect", str(run_dir), "clean", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)  # strict JSON: the NaN score is null
    assert (info["stage"], info["rows"], info["shards"]) == ("clean", 1, 1)
    assert [f["name"] for f in info["schema"]] == ["instruction_id", "score", "n"]
    assert info["sample"] == [{"instruction_id": "45a4f3d8d3151bc460f91929c9a29a10fd59fff7964bd47d",
                               "score": None, "n": 7}]


def test_inspect_json_of_an_incomplete_stage_is_an_error_on_stderr(run_dir):
    result = CliRunner().invoke(app, ["inspect", str(run_dir), "judge", "--json"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "not complete" in result.stderr


# -- fit_table ------------------------------------------------------------------------------------
def render(table, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


@pytest.mark.parametrize("width", [30, 40, 60, 100, 400])
def test_fit_table_drops_low_value_columns_before_cutting_a_whole_one(width):
    cols = [Col("id", whole=True), Col("path"), Col("size", True, 3, "right"),
            Col("note", False, 2), Col("sha256", False, 1)]
    rows = [["qwen2.5-coder-1.5b", "/a/very/long/path/" * 4, "1117320768", "a b c", "f" * 64]]
    text = render(fit_table(cols, rows, width), width)
    assert "…" not in text and whole("qwen2.5-coder-1.5b", text)
    headers = [c.header for c in fit_table(cols, rows, width).columns]
    assert headers[:2] == ["id", "path"]
    # dropped in `drop` order: a column is kept only if every later-dropped one is kept too
    order = ["sha256", "note", "size"]
    kept = [h in headers for h in order]
    assert kept == sorted(kept)
    if "size" in headers:
        assert whole("1117320768", text)
    if width >= 400:
        assert headers == [c.header for c in cols]


def test_fit_table_without_width_keeps_every_column():
    cols = [Col("id", whole=True), Col("sha256", drop=1)]
    assert len(fit_table(cols, [["a", "0" * 64]]).columns) == 2


def test_funnel_table_on_a_narrow_terminal_keeps_counts_whole():
    funnel = [{"stage": "decontaminate", "rows_in": 123456789, "rows_out": 98765432,
               "dropped": {"ngram_overlap": 3}, "model_seconds": 1.0, "seconds": 2.0}]
    text = render(funnel_table(funnel, width=40), 40)
    assert "…" not in text
    assert all(whole(w, text) for w in ("decontaminate", "123456789", "98765432"))


LOG_FUNNEL = '''
from arenaforge.pipeline.progress import render_funnel
render_funnel([{"stage": "decontaminate", "rows_in": 123456, "rows_out": 98765,
                "dropped": {"embedding_similarity": 12, "ngram_overlap": 3},
                "model_seconds": 2380.4, "seconds": 2459.9, "wall_seconds_last_attempt": 2461.2,
                "utilization_last_attempt": 0.99, "workers": 16, "cache_hits": 1234,
                "cache_misses": 4444}], seconds=2470.0)
'''


def test_the_funnel_in_a_log_keeps_every_column_whole(tmp_path):
    """``arenaforge run > log 2>&1``: the end-of-run table goes to a file, for which rich
    assumes 80 columns; every cell must still be there whole, each stage on one line."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    log = tmp_path / "log"
    with log.open("w") as out:
        subprocess.run([sys.executable, "-c", LOG_FUNNEL], cwd=ROOT, env=env, stdout=out,
                       stderr=out, timeout=120, check=True)
    text = ANSI.sub("", log.read_text())
    assert "…" not in text
    line = next((ln for ln in text.splitlines() if "decontaminate" in ln), "")
    for cell in ("decontaminate", "123456", "98765", "2380.4", "79.5", "2461.2", "99% of 16",
                 "1234/5678"):
        assert whole(cell, line), (cell, text)
    assert all(whole(reason, text) for reason in ("embedding_similarity=12", "ngram_overlap=3"))
