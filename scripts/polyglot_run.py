"""A whole run in many languages and both task kinds: does ``verified`` hold in each of them?

The real CLI (``arenaforge run``, the real sandbox; inline by default, ``--ray`` for a local Ray)
reads an instruction file that mixes languages and task kinds (``function`` and ``program``),
and four stand-in models answer over OpenAI-compatible HTTP on 127.0.0.1 (the load generator's
handler, ``load_server``): ``expert-a`` and ``expert-b`` answer each task with its right version
from the per-language corpus (``tests/data/polyglot``; ``expert-b`` adds a comment line, so
that the two are different programs, as two models' answers are), ``expert-c`` with a wrong
version, and all three write the corpus's test cases: a function's as asserts (what the tests
stage asks for in every language), a program's as data (``testgen_cases_program.txt``). ``judge`` rates the tasks
and judges the battles. (A repair request would get the right version back; none is sent, as
every instruction has a verified answer.)

Stand-ins, not the embedded models: the embedded 0.5B and 1.5B models are too weak to answer
(and to write test cases) in five languages, so a run of them would say little about whether
the language-neutral path verifies right answers and only those.

Checked: the dataset has verified rows in at least ``--min-languages`` languages and in both
task kinds, every verified row's code is a right version, and no wrong version is verified; and
in the verify stage (every answer, before the selection), each right version is verified and
no wrong one. The corpus's ``sum_evens`` is left out of the mix: the decontaminate stage drops
its Python and C requests as neighbours of HumanEval's tasks.
Printed (and written with ``--json``): verified rows per language and kind, and the checks.

Usage::

    python scripts/polyglot_run.py                       # six languages, 11 instructions
    python scripts/polyglot_run.py --keep /tmp/polyglot --json /tmp/polyglot.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from arenaforge.pipeline.sandbox.languages import LANGUAGES
from arenaforge.stages.verification.test_split import normalised_call
from load_replies import JUDGE_ERROR_RATE, Expert, Prompts, rng_for
from load_server import CHATML, Meter, _Server, make_handler

CORPUS = ROOT / "tests" / "data" / "polyglot"
CASES = {t["id"]: t for t in json.loads((CORPUS / "tasks.json").read_text())}
EXPERTS = ("expert-a", "expert-b", "expert-c")  # a and b right, c wrong
JUDGE = "judge"

# What each corpus task asks, in any language (the corpus's cases decide what is right).
TEXTS = {
    "sum_evens": ("Write a {language} function `sum_evens(xs)` that returns the sum of the even "
                  "integers in a list of integers (0 for an empty list)."),
    "reverse_words": ("Write a {language} function `reverse_words(s)` that returns the words "
                      "of a string in reverse order, joined by single spaces (words are "
                      "separated by one or more spaces; leading and trailing spaces are "
                      "dropped)."),
    "word_counts": ("Write a {language} function `word_counts(text)` that returns how many "
                    "times each space-separated word occurs in a text, as a map from word to "
                    "count (case-sensitive)."),
    "sum_numbers": ("Write a {language} program that reads a count n and then n integers from "
                    "standard input and prints their sum on one line.\nExample input:\n```\n3\n"
                    "1 2 3\n```\nOutput:\n```\n6\n```"),
    "sort_words": ("Write a {language} program that reads a count n and then n words, one per "
                   "line, from standard input and prints them in byte order (upper case "
                   "before lower case), one per line."),
}
# (language, task): six languages, both kinds, 11 instructions (no sum_evens: see above).
MIX = (("python", "word_counts"), ("python", "sum_numbers"), ("cpp", "reverse_words"),
       ("cpp", "sort_words"), ("c", "reverse_words"), ("c", "sum_numbers"),
       ("javascript", "word_counts"), ("javascript", "sum_numbers"),
       ("typescript", "reverse_words"), ("go", "word_counts"), ("go", "sort_words"))


def instruction(lang: str, task: str) -> str:
    return TEXTS[task].format(language=LANGUAGES[lang].display)


def version(lang: str, task: str, which: str) -> str:
    """The corpus's ``correct``, ``wrong1`` or ``wrong2`` source of a task in a language."""
    ext = LANGUAGES[lang].source_name.rsplit(".", 1)[1]
    return (CORPUS / lang / task / f"{which}.{ext}").read_text()


def _comment(lang: str) -> str:
    return "# " if lang == "python" else "// "


def right_versions(lang: str, task: str) -> tuple[str, str]:
    """What ``expert-a`` and ``expert-b`` answer: the right version, and it with a comment."""
    code = version(lang, task, "correct")
    return code, f"{_comment(lang)}expert-b's version\n{code}"


class PolyglotExpert(Expert):
    """A stand-in model that knows the corpus: which task and language a request is about
    (the instruction's text is in every request), its right and wrong versions, its cases."""

    def __init__(self, name: str):
        super().__init__(name, 1.0 if name != "expert-c" else 0.0, Prompts())

    def task_of(self, text: str) -> tuple[str, str] | None:
        """The (language, task) whose instruction ``text`` holds."""
        return _key(text)

    def chat(self, messages: list[dict], seed: object) -> str:
        system = next((m["content"] for m in messages if m.get("role") == "system"), "")
        every = "\n".join(m["content"] for m in messages)
        found = self.task_of(every)
        if found is None:  # a request about no task of this world
            return "I cannot help with that."
        lang, task = found
        if "as data, not as code" in messages[-1]["content"]:
            return self.cases(lang, task)
        if "You fix bugs" in system:
            return self.fenced(lang, right_versions(lang, task)[0])
        kind = self.prompts.chat_kind(messages)
        if kind == "testgen":  # a Python function: asserts
            return "```python\n" + "\n".join(
                f"assert {normalised_call(task, c['args'])} == {c['expected']!r}"
                for c in CASES[task]["cases"]) + "\n```"
        if kind == "judge":
            return self.judge_text(messages[-1]["content"], seed)
        if kind == "difficulty":
            return "A clear request. Rating: [[5]]"
        return self.fenced(lang, self.answer_code(lang, task))

    def answer_code(self, lang: str, task: str) -> str:
        if self.name == "expert-c":
            return version(lang, task, "wrong1")
        return right_versions(lang, task)[self.name == "expert-b"]

    @staticmethod
    def fenced(lang: str, code: str) -> str:
        return f"Here it is:\n\n```{LANGUAGES[lang].fences[0]}\n{code}```\n"

    @staticmethod
    def cases(lang: str, task: str) -> str:
        data = {"cases": CASES[task]["cases"], "inputs": []}
        if CASES[task]["kind"] == "function":
            data["signature"] = CASES[task]["signature"]
        return "```json\n" + json.dumps(data) + "\n```"

    # the judges of difficulty and battles know which answers are right, and err sometimes
    def difficulty(self, text: str) -> float:
        return 5.0 if self.task_of(text) else 2.0

    def logprobs(self, prompt: str, k: int) -> dict[str, float]:
        from load_replies import top_logprobs

        if self.prompts.logprob_kind(prompt) == "task":
            p_yes = 0.9 if self.task_of(prompt) else 0.1
            return top_logprobs({"Yes": p_yes, "No": 1 - p_yes}, 3, k)
        return super().logprobs(prompt, k)

    def _judged_correct(self, instruction: str, answer: str, key: str) -> bool:
        found = self.task_of(instruction)
        truth = found is not None and version(*found, "correct").strip() in answer
        return truth != (rng_for(self.name, "judge", key).random() < JUDGE_ERROR_RATE)


def serve() -> dict[str, _Server]:
    servers = {}
    for name in (*EXPERTS, JUDGE):
        server = _Server(("127.0.0.1", 0), make_handler(PolyglotExpert(name), Meter(), 0.0, 0.0))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers[name] = server
    return servers


def write_run_files(workdir: Path, ports: dict[str, int], ray: bool) -> Path:
    """The instruction file, the served models' registry and the run config."""
    source = workdir / "instructions.jsonl"
    source.write_text("".join(json.dumps({"instruction": instruction(lang, task),
                                          "language": LANGUAGES[lang].display,
                                          "task_kind": CASES[task]["kind"]}) + "\n"
                              for lang, task in MIX))
    models = [{"id": name, "backend": "openai", "family": f"polyglot-{i}", "role": "expert",
               "base_url": f"http://127.0.0.1:{port}/v1", "model_name": name,
               "chat_template_source": "registry", "chat_template": CHATML,
               "stop": ["<|im_end|>"], "n_ctx": 8192,
               "options": {"max_concurrency": 8, "timeout_s": 120, "prompts_per_request": 16}}
              for i, (name, port) in enumerate(ports.items())]
    registry = workdir / "models.yaml"
    registry.write_text(yaml.safe_dump({"models": models}, sort_keys=False))
    runner = ({"kind": "ray", "ray_address": "local", "shard_size": 64} if ray
              else {"kind": "inline", "shard_size": 64})
    config = {
        "name": "polyglot", "seed": 0, "models_file": str(registry), "experts": list(EXPERTS),
        "artifacts_dir": str(workdir / "runs"), "runner": runner,
        "mine": {"source": str(source)},
        "difficulty": {"protocol": "logprob", "judges": [JUDGE]},
        "compress": {"budget": 1.0, "min_distance": None},  # every instruction is a task here
        "judge": {"protocol": "pointwise_logprob", "judges": [JUDGE]},
        "tests": {"authors": list(EXPERTS), "tests_per_author": 5, "augment": False},
        "repair": {"max_rounds": 1},
    }
    path = workdir / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def read_dataset(run_dir: Path) -> list[dict]:
    files = glob.glob(str(run_dir / "dataset" / "*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pylist() if files else []


def read_stage(run_dir: Path, stage: str) -> list[dict]:
    files = sorted(f for f in glob.glob(str(run_dir / "stages" / stage / "part-*.parquet"))
                   if not f.endswith(".dropped.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files],
                            promote_options="default").to_pylist() if files else []


def _key(text: str) -> tuple[str, str] | None:
    return next((key for key in MIX if instruction(*key) in text), None)


def check_answers(answers: list[dict]) -> dict:
    """The verify stage's verdict on every answer (before repair): a right version verified,
    a wrong one not, per language."""
    right_unverified, wrong_verified = [], []
    for row in answers:
        key = _key(row["instruction"])
        if key is None:
            continue
        code = (row["code"] or "").strip()
        right = any(v.strip() == code for v in right_versions(*key))
        if right and not row["verified"]:
            right_unverified.append(f"{'/'.join(key)} {row['model']}: {row['admission']}")
        if not right and row["verified"]:
            wrong_verified.append(f"{'/'.join(key)} {row['model']}")
    return {"answers": len(answers), "right_answers_unverified": right_unverified,
            "wrong_answers_verified": wrong_verified}


def check(rows: list[dict], min_languages: int) -> dict:
    """Verified dataset rows per language and kind, and whether each is a right version."""
    by_text = {instruction(*key): key for key in MIX}
    per: dict[str, int] = {}
    wrong_verified, unknown = [], []
    for row in rows:
        if not row["verified"]:
            continue
        key = next((by_text[t] for t in by_text
                    if any(t in (m.get("content") or "") for m in row["messages"])), None)
        if key is None:
            unknown.append(row["instruction_id"])
            continue
        lang, task = key
        reply = row["messages"][-1]["content"]
        right = any(v.strip() in reply for v in right_versions(lang, task))
        wrong = any(version(lang, task, w).strip() in reply for w in ("wrong1", "wrong2"))
        if wrong or not right:
            wrong_verified.append(f"{lang}/{task}")
        name = f"{row['language']}.{row['task_kind']}"
        per[name] = per.get(name, 0) + 1
    languages = sorted({name.split(".")[0] for name in per})
    kinds = sorted({name.split(".")[1] for name in per})
    return {"emitted": len(rows), "verified": sum(per.values()), "verified_by": per,
            "languages": languages, "task_kinds": kinds, "wrong_verified": wrong_verified,
            "unmatched_verified": unknown,
            "ok": (len(languages) >= min_languages and kinds == ["function", "program"]
                   and not wrong_verified and not unknown)}


def run(workdir: Path, ray: bool = False, cli: str | None = None,
        min_languages: int = 5) -> dict:
    """Serve the stand-ins, run ``arenaforge run`` in ``workdir`` and check its dataset."""
    servers = serve()
    try:
        ports = {name: s.server_address[1] for name, s in servers.items()}
        config = write_run_files(workdir, ports, ray)
        cmd = [*(cli or f"{sys.executable} -m arenaforge.pipeline.cli").split(), "run",
               str(config), "--fresh", "--quiet"]
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        start = time.perf_counter()
        with (workdir / "run.log").open("w") as log:
            rc = subprocess.run(cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, env=env,
                                check=False).returncode
        wall = round(time.perf_counter() - start, 1)
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()
    if rc != 0:
        return {"rc": rc, "ok": False, "wall_s": wall, "log": str(workdir / "run.log")}
    run_dir = workdir / "runs" / "polyglot"
    found = {"rc": 0, "wall_s": wall, "instructions": len(MIX),
             **check(read_dataset(run_dir), min_languages),
             **check_answers(read_stage(run_dir, "verify"))}
    found["ok"] = (found["ok"] and not found["wrong_answers_verified"]
                   and not found["right_answers_unverified"])
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ray", action="store_true", help="a local Ray (default: inline)")
    parser.add_argument("--min-languages", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="keep the run directory here")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="polyglot-run-"))
    workdir.mkdir(parents=True, exist_ok=True)
    result = run(workdir, ray=args.ray, min_languages=args.min_languages)
    if result["rc"] != 0:
        print(f"arenaforge run failed (exit {result['rc']}); see {result['log']}",
              file=sys.stderr)
        return result["rc"]
    for name, count in sorted(result["verified_by"].items()):
        print(f"{name:24} {count} verified")
    for key in ("emitted", "verified", "languages", "wrong_verified", "answers",
                "right_answers_unverified", "wrong_answers_verified", "ok", "wall_s"):
        print(f"{key:24} {result[key]}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
