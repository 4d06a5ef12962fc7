"""`arenaforge eval --language`: the translation checked through the sandbox, and the whole path
with hand-written answers in every language (a stand-in model), right ones passing and wrong
ones failing with their status."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from arenaforge.pipeline.apps import eval_core as ev
from arenaforge.pipeline.apps.evaluate import evaluate, load_problems
from arenaforge.pipeline.backends.base import Completion

ROUNDTRIP_TRANSLATED = 154  # HumanEval problems that translate (docs/EVALUATION.md)


def _sandbox_config():
    from arenaforge.pipeline.sandbox import SandboxConfig, self_check

    missing = self_check()
    if missing:
        pytest.skip(f"sandbox isolation unavailable here: {missing}")
    return SandboxConfig()


@pytest.fixture(scope="module")
def pool():
    from arenaforge.pipeline.sandbox import SandboxPool

    pool = SandboxPool.from_config(_sandbox_config())
    yield pool
    pool.close()


def test_canonical_solutions_pass_every_translated_problem_in_the_python_harness(pool):
    from arenaforge.pipeline.apps.humaneval_selfcheck import python_roundtrip

    result = python_roundtrip(load_problems("humaneval"), pool)
    assert result.failures == ()
    assert result.checked == result.passed == ROUNDTRIP_TRANSLATED


def test_a_wrong_translation_is_caught_by_the_roundtrip(pool):
    from arenaforge.pipeline.apps.humaneval_selfcheck import python_roundtrip

    problem = dict(load_problems("humaneval", limit=3)[2])  # truncate_number
    problem["test"] = problem["test"].replace("== 0.5", "== 0.25")
    (failure,) = python_roundtrip([problem], pool).failures
    assert failure[0] == "HumanEval/2" and "wrong_answer" in failure[1]
    # a value of the wrong type: the return is declared int, the solution gives 2.0
    typed = dict(load_problems("humaneval", limit=3)[2])
    typed["prompt"] = typed["prompt"].replace("-> float", "-> int")
    typed["test"] = ("def check(candidate):\n    assert candidate(3.0) == 0\n")
    (failure,) = python_roundtrip([typed], pool).failures
    assert "type" in failure[1]


# Right answers to HumanEval/0 (floats in a list), /2 (a float) and /7 (strings in a list;
# C cannot return a list, so /27, a string, there), and a wrong one to /0, per language.
RIGHT = {
    "cpp": {
        0: "#include <cmath>\n#include <vector>\nbool has_close_elements(std::vector<double> "
           "numbers, double threshold) {\n  for (size_t i = 0; i < numbers.size(); i++)\n"
           "    for (size_t j = i + 1; j < numbers.size(); j++)\n"
           "      if (std::abs(numbers[i] - numbers[j]) < threshold) return true;\n"
           "  return false;\n}\n",
        2: "#include <cmath>\ndouble truncate_number(double number) { return number - "
           "std::floor(number); }\n",
        7: "#include <string>\n#include <vector>\nstd::vector<std::string> filter_by_substring("
           "std::vector<std::string> strings, std::string substring) {\n"
           "  std::vector<std::string> out;\n  for (auto& s : strings)\n"
           "    if (s.find(substring) != std::string::npos) out.push_back(s);\n  return out;\n}\n",
    },
    "c": {
        0: "#include <math.h>\n#include <stdbool.h>\nbool has_close_elements(const double* "
           "numbers, int numbers_len, double threshold) {\n"
           "  for (int i = 0; i < numbers_len; i++)\n    for (int j = i + 1; j < numbers_len; j++)\n"
           "      if (fabs(numbers[i] - numbers[j]) < threshold) return true;\n  return false;\n}\n",
        2: "#include <math.h>\ndouble truncate_number(double number) { return number - "
           "floor(number); }\n",
        27: "#include <ctype.h>\n#include <stdlib.h>\n#include <string.h>\n"
            "char* flip_case(const char* string) {\n  size_t n = strlen(string);\n"
            "  char* out = malloc(n + 1);\n  for (size_t i = 0; i < n; i++) {\n"
            "    unsigned char c = string[i];\n"
            "    out[i] = islower(c) ? toupper(c) : isupper(c) ? tolower(c) : c;\n  }\n"
            "  out[n] = 0;\n  return out;\n}\n",
    },
    "javascript": {
        0: "function has_close_elements(numbers, threshold) {\n"
           "  for (let i = 0; i < numbers.length; i++)\n"
           "    for (let j = i + 1; j < numbers.length; j++)\n"
           "      if (Math.abs(numbers[i] - numbers[j]) < threshold) return true;\n"
           "  return false;\n}\n",
        2: "function truncate_number(number) {\n  return number - Math.floor(number);\n}\n",
        7: "function filter_by_substring(strings, substring) {\n"
           "  return strings.filter((s) => s.includes(substring));\n}\n",
    },
    "typescript": {
        0: "function has_close_elements(numbers: number[], threshold: number): boolean {\n"
           "  for (let i = 0; i < numbers.length; i++)\n"
           "    for (let j = i + 1; j < numbers.length; j++)\n"
           "      if (Math.abs(numbers[i] - numbers[j]) < threshold) return true;\n"
           "  return false;\n}\n",
        2: "function truncate_number(number: number): number {\n"
           "  return number - Math.floor(number);\n}\n",
        7: "function filter_by_substring(strings: string[], substring: string): string[] {\n"
           "  return strings.filter((s) => s.includes(substring));\n}\n",
    },
    "java": {
        0: "import java.util.*;\n\nclass Problem {\n"
           "    public static boolean has_close_elements(List<Double> numbers, double threshold) {\n"
           "        for (int i = 0; i < numbers.size(); i++)\n"
           "            for (int j = i + 1; j < numbers.size(); j++)\n"
           "                if (Math.abs(numbers.get(i) - numbers.get(j)) < threshold) "
           "return true;\n        return false;\n    }\n}\n",
        2: "public static double truncate_number(double number) {\n"
           "    return number - Math.floor(number);\n}\n",  # a bare method, no class
        7: "import java.util.*;\n\nclass Solution {\n"
           "    public List<String> filter_by_substring(List<String> strings, String substring) {\n"
           "        List<String> out = new ArrayList<>();\n"
           "        for (String s : strings) if (s.contains(substring)) out.add(s);\n"
           "        return out;\n    }\n}\n",  # an instance method
    },
    "go": {
        0: "package main\n\nimport \"math\"\n\n"
           "func has_close_elements(numbers []float64, threshold float64) bool {\n"
           "\tfor i := range numbers {\n\t\tfor j := i + 1; j < len(numbers); j++ {\n"
           "\t\t\tif math.Abs(numbers[i]-numbers[j]) < threshold {\n\t\t\t\treturn true\n"
           "\t\t\t}\n\t\t}\n\t}\n\treturn false\n}\n",
        2: "import \"math\"\n\nfunc truncate_number(number float64) float64 {\n"
           "\treturn number - math.Floor(number)\n}\n",
        7: "package main\n\nimport \"strings\"\n\n"
           "func filter_by_substring(strings_ []string, substring string) []string {\n"
           "\tout := []string{}\n\tfor _, s := range strings_ {\n"
           "\t\tif strings.Contains(s, substring) {\n\t\t\tout = append(out, s)\n\t\t}\n\t}\n"
           "\treturn out\n}\n",
    },
    "rust": {
        0: "fn has_close_elements(numbers: Vec<f64>, threshold: f64) -> bool {\n"
           "    for i in 0..numbers.len() {\n        for j in i + 1..numbers.len() {\n"
           "            if (numbers[i] - numbers[j]).abs() < threshold {\n"
           "                return true;\n            }\n        }\n    }\n    false\n}\n",
        2: "fn truncate_number(number: f64) -> f64 {\n    number.fract()\n}\n\n"
           "fn main() {\n    println!(\"{}\", truncate_number(3.5));\n}\n",  # its own main
        7: "fn filter_by_substring(strings: Vec<String>, substring: String) -> Vec<String> {\n"
           "    strings.into_iter().filter(|s| s.contains(&substring)).collect()\n}\n",
    },
}
WRONG = {  # HumanEval/0 answered False always: compiles, returns the wrong value
    "cpp": "#include <vector>\nbool has_close_elements(std::vector<double> numbers, double t) "
           "{ return false; }\n",
    "c": "#include <stdbool.h>\nbool has_close_elements(const double* xs, int n, double t) "
         "{ return false; }\n",
    "javascript": "function has_close_elements(numbers, threshold) { return false; }\n",
    "typescript": "function has_close_elements(numbers: number[], t: number): boolean "
                  "{ return false; }\n",
    "java": "public static boolean has_close_elements(List<Double> xs, double t) "
            "{ return false; }\n",
    "go": "func has_close_elements(numbers []float64, threshold float64) bool { return false }\n",
    "rust": "fn has_close_elements(numbers: Vec<f64>, threshold: f64) -> bool { false }\n",
}
BROKEN = {  # HumanEval/2: does not compile (or parse) / throws
    "compile_error": "double truncate_number(double number) { return number - ; }\n",
    "runtime_error": "function truncate_number(number) { throw new Error('no'); }\n",
}


class _StandIn:
    """A chat model answering from a table: the first sample of a problem is its right answer,
    the second the wrong one where there is one (else the right one again)."""

    def __init__(self, language: str, answers: dict[int, tuple[str, str]]):
        self.language, self.answers, self.prompts = language, answers, []

    def chat_template(self) -> str:
        return "{{ messages }}"

    def chat(self, conversations, params):
        out = []
        for conv in conversations:
            prompt = conv[-1]["content"]
            self.prompts.append(prompt)
            number = next(n for n, pair in self.answers.items()
                          if re.search(rf"\b{_ENTRY[n]}\b", prompt))
            texts = self.answers[number]
            out.append([Completion(text=f"Here it is:\n```{self.language}\n{texts[i]}```\n",
                                   finish_reason="stop") for i in range(params.n)])
        return out

    def close(self) -> None:
        pass


_ENTRY = {0: "has_close_elements", 2: "truncate_number", 7: "filter_by_substring",
          27: "flip_case"}


def _run(monkeypatch, language: str, answers: dict[int, tuple[str, str]], tmp_path: Path):
    stand_in = _StandIn(language, answers)
    chosen = [p for p in load_problems("humaneval")
              if int(p["task_id"].split("/")[1]) in answers]
    monkeypatch.setattr(ev, "_backend_for", lambda model, models_file: stand_in)
    monkeypatch.setattr(ev, "load_problems", lambda suite, limit=None: chosen)
    result = evaluate("stand-in", n_samples=2, k=[1, 2], languages=[language],
                      sandbox_config=_sandbox_config(), output_dir=tmp_path)
    return result, stand_in


@pytest.mark.parametrize("language", sorted(RIGHT))
def test_right_answers_pass_and_a_wrong_one_fails_in_each_language(monkeypatch, tmp_path,
                                                                   language):
    answers = {n: (code, WRONG[language] if n == 0 else code)
               for n, code in RIGHT[language].items()}
    result, stand_in = _run(monkeypatch, language, answers, tmp_path)
    mine = result["languages"][language]
    assert mine["n_problems"] == 3 and mine["skipped"] == {}
    correct = {p["task_id"]: p["correct"] for p in mine["problems"]}
    assert correct == {f"HumanEval/{n}": 1 if n == 0 else 2 for n in RIGHT[language]}, \
        mine["problems"]
    assert mine["statuses"] == {"passed": 5, "wrong_answer": 1}
    assert mine["pass@1"] == pytest.approx(5 / 6) and mine["pass@2"] == 1.0
    # the user turn names the language and shows its declaration under the docstring
    display = {"cpp": "C++", "javascript": "JavaScript", "typescript": "TypeScript"}.get(
        language, language.capitalize())
    assert all(p.startswith(f"Complete the following {display} function") for p in
               stand_in.prompts)
    samples = Path(result["output"].replace(".json", ".samples.jsonl")).read_text().splitlines()
    assert {json.loads(s)["language"] for s in samples} == {language}


def test_compile_and_runtime_errors_are_counted_apart(monkeypatch, tmp_path):
    result, _ = _run(monkeypatch, "cpp", {2: (BROKEN["compile_error"],) * 2}, tmp_path)
    assert result["languages"]["cpp"]["statuses"] == {"compile_error": 2}
    result, _ = _run(monkeypatch, "javascript", {2: (BROKEN["runtime_error"],) * 2}, tmp_path)
    assert result["languages"]["javascript"]["statuses"] == {"runtime_error": 2}


def test_skipped_problems_are_counted_by_reason(monkeypatch, tmp_path):
    # HumanEval/7 returns a list, which C cannot: skipped there, with its reason
    result, _ = _run(monkeypatch, "c", {7: ("int x;",) * 2, 2: (RIGHT["c"][2],) * 2}, tmp_path)
    mine = result["languages"]["c"]
    assert mine["n_problems"] == 1 and mine["skipped"] == {"type_in_language": 1}
    assert mine["skipped_problems"] == {"HumanEval/7": "type_in_language"}
    assert mine["pass@1"] == 1.0


def test_python_alone_keeps_the_result_of_before(tmp_path):
    result = evaluate("canonical", limit=2, languages=["python"],
                      sandbox_config=_sandbox_config(), output_dir=tmp_path)
    assert "languages" not in result
    assert list(result) == ["model", "suite", "n_problems", "n_samples", "temperature",
                            "max_new_tokens", "prompt_style", "pass@1", "statuses", "problems",
                            "seconds", "output"]


@pytest.mark.slow
@pytest.mark.parametrize("language", ["cpp", "c", "javascript", "typescript", "java", "go",
                                      "rust"])
def test_every_translated_harness_compiles_around_a_stub(pool, language):
    from arenaforge.pipeline.apps.humaneval_selfcheck import stub_compiles

    compiled, _ = stub_compiles(load_problems("humaneval"), language, pool)
    assert compiled.failures == ()
    assert compiled.checked == compiled.passed > 90


@pytest.mark.slow
@pytest.mark.models
def test_the_smallest_embedded_model_answers_in_cpp(tmp_path):
    result = evaluate("qwen2.5-coder-0.5b", limit=3, languages=["cpp"], max_new_tokens=256,
                      sandbox_config=_sandbox_config(), output_dir=tmp_path)
    mine = result["languages"]["cpp"]
    assert mine["n_problems"] == 3 and sum(mine["statuses"].values()) == 3
