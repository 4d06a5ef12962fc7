"""The Hugging Face style dataset card (``dataset/README.md``) written by ``emit``.

The YAML header follows the Hub's dataset card metadata (``license``, ``configs`` with the
split file patterns, ``dataset_info`` with features and split sizes), so the emitted folder
loads with ``datasets.load_dataset(folder)`` as well as with the explicit ``parquet`` builder.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import yaml

# License notes of the model families this project ships or recommends. Matched against a
# model id and its registry entry; first match wins, so narrow patterns come first.
LICENSES: tuple[tuple[str, str, str], ...] = (
    (r"qwen2\.?5[-_ ]?coder[-_ ]?3b", "Qwen Research License",
     "https://huggingface.co/Qwen/Qwen2.5-Coder-3B-Instruct/blob/main/LICENSE"),
    (r"qwen2\.?5[-_ ]?coder|qwen[-_ ]?coder", "Apache-2.0",
     "https://www.apache.org/licenses/LICENSE-2.0"),
    (r"smollm2?", "Apache-2.0", "https://www.apache.org/licenses/LICENSE-2.0"),
    (r"gemma[-_ ]?3|gemma3", "Gemma Terms of Use", "https://ai.google.dev/gemma/terms"),
    (r"all[-_ ]?minilm[-_ ]?l6[-_ ]?v2", "Apache-2.0",
     "https://www.apache.org/licenses/LICENSE-2.0"),
)
UNKNOWN_LICENSE = "unknown: check the model's own card"

_ARROW_TO_HF = {pa.string(): "string", pa.large_string(): "string", pa.bool_(): "bool",
                pa.int64(): "int64", pa.int32(): "int32", pa.float64(): "float64",
                pa.float32(): "float32"}


@dataclasses.dataclass
class CardInfo:
    """What the card reports about one emitted dataset.

    Attributes:
        files: the Parquet file names in the dataset folder (``train-00000-of-00001.parquet``).
        split_sizes: rows per split.
        funnel: per stage ``{"stage", "rows_in", "kept", "dropped": {reason: n}}``, in run
            order.
        models: every model id that shaped the data.
        source_counts: rows per answering model.
        verified: rows whose answer passed its tests, its program gate included.
        schema: the emitted Arrow schema (``arenaforge.stages.output.emit.SFT_SCHEMA``).
        repaired: rows whose answer was rewritten by repair (and then verified).
        replaced_judge_pick: rows whose answer is not the judges' pick.
        without_tests: rows whose instruction had no usable tests (status ``no_tests``).
        admit: the emit stage's admission rule (``EmitConfig.admit``).
        gate: the audit's judge-gate report (``metrics.json["gate"]``), None without one.
    """

    name: str
    license: str
    run_id: str
    config_hash: str
    files: list[str]
    split_sizes: dict[str, int]
    funnel: list[dict[str, Any]]
    models: list[str]
    source_counts: dict[str, int]
    verified: int
    schema: pa.Schema
    system_prompt: str | None = None
    repaired: int = 0
    replaced_judge_pick: int = 0
    without_tests: int = 0
    admit: str = "verified_or_gated"
    gate: dict[str, Any] | None = None


def license_of(model_id: str, spec: Any = None) -> tuple[str, str]:
    """The license name and link of a model, from its registry entry or the known families.

    >>> license_of("gemma-3-270m")[0]
    'Gemma Terms of Use'
    """
    declared = getattr(spec, "license", None)
    if declared:
        return str(declared), ""
    haystack = f"{model_id} {spec!r}".lower()
    for pattern, name, url in LICENSES:
        if re.search(pattern, haystack):
            return name, url
    return UNKNOWN_LICENSE, ""


def hf_features(schema: pa.Schema) -> list[dict[str, Any]]:
    """The ``dataset_info.features`` YAML list of the Hub for an Arrow schema.

    Hand-written because ``datasets`` only exposes this through private methods
    (``Features._to_yaml_list``); a test checks the two agree.
    """
    return [_feature(field.name, field.type) for field in schema]


def _feature(name: str, typ: pa.DataType) -> dict[str, Any]:
    if pa.types.is_list(typ) and pa.types.is_struct(typ.value_type):
        return {"name": name, "list": [_feature(f.name, f.type) for f in typ.value_type]}
    if pa.types.is_list(typ):
        return {"name": name, "list": _ARROW_TO_HF[typ.value_type]}
    if typ not in _ARROW_TO_HF:
        raise ValueError(f"dataset card: column {name!r} has unsupported type {typ}")
    return {"name": name, "dtype": _ARROW_TO_HF[typ]}


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                         (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def card_metadata(info: CardInfo) -> dict[str, Any]:
    """The YAML header of the card as a dict."""
    splits = sorted(info.split_sizes, key=lambda s: (s != "train", s))
    return {
        "license": info.license,
        "pretty_name": info.name,
        "task_categories": ["text-generation"],
        "tags": ["code", "synthetic", "sft", "arenaforge"],
        "size_categories": [_size_category(sum(info.split_sizes.values()))],
        "configs": [{"config_name": "default",
                     "data_files": [{"split": s, "path": f"{s}-*.parquet"} for s in splits]}],
        "dataset_info": {
            "features": hf_features(info.schema),
            "splits": [{"name": s, "num_examples": info.split_sizes[s]} for s in splits],
        },
    }


def render_card(info: CardInfo, model_spec: Callable[[str], Any] | None = None) -> str:
    """The full ``README.md``: YAML header, funnel, models with licenses, usage.

    Args:
        info: what to report.
        model_spec: looks up a model's registry entry (``ctx.model_spec``); a model it does
            not know is still listed, its license found by name.
    """
    header = yaml.safe_dump(card_metadata(info), sort_keys=False, allow_unicode=True)
    total = sum(info.split_sizes.values())
    lines = [f"---\n{header}---", f"# {info.name}", "",
             ("Supervised fine-tuning data for code, distilled from open code LLMs by "
             "arenaforge: instructions were mined, deduplicated, decontaminated, answered by "
             "several experts, judged in pairwise battles and executed against tests; each "
             "instruction keeps one selected answer."), "",
             f"- run: `{info.run_id}`, config hash `{info.config_hash}`",
             f"- rows: {total} ({', '.join(f'{s}: {n}' for s, n in info.split_sizes.items())})",
             (f"- verified (the answer passed every trusted test, the instruction's own "
             f"example included): {info.verified} of {total}"), "", *verification_section(info),
             "",
             "## Funnel", "", "| stage | rows in | kept | dropped (by reason) |",
             "|---|---:|---:|---|"]
    for step in info.funnel:
        reasons = ", ".join(f"{r}: {n}" for r, n in sorted(step.get("dropped", {}).items()))
        lines.append(f"| {step['stage']} | {step.get('rows_in', '')} | {step['kept']} "
                     f"| {reasons or '-'} |")
    lines += ["", "## Models and their licenses", "",
              ("The data contains outputs of these models; their licenses may restrict how "
              "the data and models trained on it can be used."), "",
              "| model | rows contributed | license |", "|---|---:|---|"]
    for model in info.models:
        spec = _lookup(model_spec, model)
        name, url = license_of(model, spec)
        cell = f"[{name}]({url})" if url else name
        lines.append(f"| {model} | {info.source_counts.get(model, 0)} | {cell} |")
    lines += ["", "## Format", "",
              "`messages` is a list of `{role, content}` turns "
              + ("(system, user, assistant)" if info.system_prompt else "(user, assistant)")
              + ", TRL's conversational format. Provenance columns: "
              + ", ".join(f"`{n}`" for n in info.schema.names
                          if n not in ("instruction_id", "messages"))
              + "; null means not measured. `language` and `task_kind` say what the answer "
              "is: its language and a `function` (tested by calls) or a whole `program` "
              "(tested by stdin and stdout). `tests_visible*` are the tests repair may show "
              "(the instruction's example among them), `tests_hidden*` and `tests_augmented*` "
              "(generated inputs on which independent answers agreed) the ones it never shows; "
              "`probe_gate` and `program_gate` are the two gates' verdicts; `admission` is where "
              "execution stopped the answer (`verified` when it did not); `gate_admitted` marks "
              "a row admitted by the judge-score gate without any test; `test_authors` are the "
              "models whose tests the row's suite trusts; `judge_verdicts` holds every judge "
              "reading of the instruction's battles, both orders; `local_share` is the answer's "
              "share of its battles' votes and `margin` its final score minus the runner-up's "
              "(`rate`); `kcenter_rank` is the instruction's order of selection in `compress`.",
              "",
              "```python", "from datasets import load_dataset",
              'ds = load_dataset("parquet", data_files={"train": "train-*.parquet"})["train"]',
              "```", ""]
    return "\n".join(lines)


def verification_section(info: CardInfo) -> list[str]:
    """The card's plain account of what ``verified`` and the judge gate's bound cover."""
    total = sum(info.split_sizes.values())
    untested = (f"{info.without_tests} rows have no usable tests (`status` `no_tests`): no test "
                "ran on them; ")
    untested += {"verified_or_gated": "they were admitted on their judge score alone, by the "
                                      "calibrated gate below.",
                 "selected": "they were admitted without any check (`admit: selected`).",
                 }.get(info.admit, "they are not in this dataset.")
    if not info.without_tests:
        untested = "no row lacks tests: every answer here ran against trusted tests."
    lines = ["## Verification and what it covers", "",
             (f"- `verified` ({info.verified} of {total} rows): the answer passed every test "
              "its instruction's evidence trusts, the instruction's own worked example included, "
              "and no other answer that passed them all returned another value on a generated "
              "input. A test is trusted by what supports it (the example, two authors, an author "
              "independent of the answers, another model's answer), never dropped because the "
              "answers fail it; an instruction whose tests contradict each other decides nothing "
              "and has no verified row. `verified` is not proof: a wrong reading that every "
              "expert and every test author shares passes."),
             (f"- `repaired` ({info.repaired} rows): the answer failed, was rewritten by its "
              "author after seeing only the visible tests' failures, counts as verified only on "
              "the tests it never saw too, and is given as its program alone (nothing of the "
              "repair dialogue)."),
             (f"- `replaced_judge_pick` ({info.replaced_judge_pick} rows): the judges "
              "preferred another answer, which failed its tests."),
             f"- {untested}", ""]
    gate = info.gate
    if not gate:
        return lines + ["The run has no judge-gate report (no audit stage)."]
    splits = gate.get("splits") or {}
    calib, held = splits.get("calibration", {}), splits.get("held_out", {})
    out = gate.get("held_out") or {}
    lines += ["### The judge-score gate", ""]
    if gate.get("threshold") is None:
        lines.append("No threshold met the bound, so the gate admitted no row without tests.")
    else:
        lines.append(
            f"The gate admits an answer without tests when its mean judge score is at least "
            f"{gate['threshold']:g}. The threshold was chosen on a calibration split of answers "
            f"that had tests ({calib.get('instructions', '?')} instructions, "
            f"{calib.get('rows', gate.get('calibration_rows', '?'))} answers) as the lowest whose "
            f"exact upper bound on the failure rate is at most {gate['epsilon']:g}, all bounds "
            f"holding together with probability at least {1 - gate['delta']:g}.")
    if out.get("n"):
        lines.append(
            f"On the held-out split ({held.get('instructions', '?')} instructions, "
            f"{held.get('rows', out.get('rows', '?'))} answers with tests) {out['k']} of the "
            f"{out['n']} admitted answers failed ({100 * out['rate']:.1f}%, exact 95% interval "
            f"{100 * out['ci_low']:.1f}-{100 * out['ci_high']:.1f}%).")
    else:
        lines.append(f"The held-out split ({held.get('rows', out.get('rows', 0))} answers with "
                     "tests) had no admitted answer, so the realised rate is not measured.")
    lines += ["",
              ("**What the bound covers:** answers like the tested ones, i.e. answers to "
               "instructions that had usable tests, scored at or above the threshold."), "",
              (f"**What it does not cover:** the {info.without_tests} rows of this dataset "
               "without tests. Instructions without usable tests differ from those with them "
               "(nothing could run their answers), so the bound does not carry over to them "
               "and nothing here measures how often they are wrong.")]
    return lines


def _lookup(model_spec: Callable[[str], Any] | None, model: str) -> Any:
    if model_spec is None:
        return None
    try:
        return model_spec(model)
    except (KeyError, LookupError, ValueError):
        return None
