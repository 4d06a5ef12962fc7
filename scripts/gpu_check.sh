#!/usr/bin/env bash
# The GPU paths of arenaforge, checked on a machine with a CUDA GPU in a few minutes, with only
# this repository (no model downloads: the tiny models are built here) and its Python environment:
#
#   cuda     torch sees a CUDA device
#   kcenter  KCenterGreedy's torch path on the GPU picks the same rows as its numpy path
#   sft      one SFT step in bfloat16 through `arenaforge train` (a tiny Llama built here, the
#            base-coder chat template of configs/sft-base.yaml)
#   vllm     if vLLM is importable: one tiny engine through arenaforge's vLLM backend (chat, a
#            next-token reading, the traits a stage reads)
#
# One line per check: NAME: PASS|FAIL|SKIP what. Exit 0 when nothing failed, 1 when a check
# failed, 2 when no CUDA device is visible (nothing to check; each check says SKIP).
#
#   bash scripts/gpu_check.sh [--python PYTHON] [--cpu]
#
# --cpu runs the kcenter and sft checks on the CPU instead (float32), to test this script where
# no GPU is; it proves nothing about a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=python
DEVICE=cuda
while (($#)); do
    case "$1" in
        --python) PY="$2"; shift 2 ;;
        --cpu) DEVICE=cpu; shift ;;
        *) echo "usage: bash scripts/gpu_check.sh [--python PYTHON] [--cpu]" >&2; exit 2 ;;
    esac
done
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export GPU_CHECK_DEVICE=$DEVICE GPU_CHECK_WORK=$WORK PYTHONWARNINGS=ignore
failed=0

# run NAME TIMEOUT_S: the Python on stdin prints the check's line; a crash or a timeout is a FAIL
run() {
    local name=$1 limit=$2 out rc
    out=$(timeout "$limit" "$PY" - 2>"$WORK/$name.err")
    rc=$?
    if ((rc == 124)); then
        echo "$name: FAIL timed out after ${limit} s"
        failed=1
    elif ((rc != 0)); then
        echo "$name: FAIL $(grep -v '^\s*$' "$WORK/$name.err" | tail -n 1)"
        failed=1
    else
        out=$(grep "^$name: " <<<"$out")  # the check's line, not what libraries printed
        echo "${out:-$name: FAIL printed no result}"
        [[ -z $out || $out == *": FAIL"* ]] && failed=1
    fi
}

cuda=$(timeout 120 "$PY" -c '
import torch
if torch.cuda.is_available():
    print(f"PASS {torch.cuda.device_count()} device(s), {torch.cuda.get_device_name(0)}, "
          f"torch {torch.__version__}, CUDA {torch.version.cuda}")
else:
    print(f"FAIL no CUDA device visible to torch {torch.__version__} (CUDA build: "
          f"{torch.version.cuda}): this machine cannot run the GPU checks")
' 2>&1 | tail -n 1)
echo "cuda: $cuda"
if [[ $cuda != PASS* && $DEVICE == cuda ]]; then
    for name in kcenter sft vllm; do echo "$name: SKIP no CUDA device"; done
    exit 2
fi

run kcenter 300 <<'EOF'
import os, time
import numpy as np
import torch
from arenaforge.stages.output.kcenter import kcenter_greedy_with_radii

device = os.environ["GPU_CHECK_DEVICE"]
rng = np.random.default_rng(0)
X = rng.standard_normal((20000, 384)).astype(np.float32)
X /= np.linalg.norm(X, axis=1, keepdims=True)  # MiniLM-like unit vectors
start = time.perf_counter()
ref = kcenter_greedy_with_radii(X, 500, backend="numpy")
numpy_s = time.perf_counter() - start
start = time.perf_counter()
got = kcenter_greedy_with_radii(X, 500, backend="torch", device=device)
if device == "cuda":
    torch.cuda.synchronize()
torch_s = time.perf_counter() - start
same = np.array_equal(ref.indices, got.indices)
diff = float(np.max(np.abs(ref.radii - got.radii)))
ok = same and diff < 1e-5
print(f"kcenter: {'PASS' if ok else 'FAIL'} torch on {device} picks "
      f"{'the same' if same else 'DIFFERENT'} 500 of 20000 x 384 as numpy (radii within "
      f"{diff:.1e}; numpy {numpy_s:.1f} s, torch {torch_s:.1f} s)")
EOF

# a tiny Llama and a word-level tokenizer over the words it will see, saved as a HF directory
cat > "$WORK/tiny_model.py" <<'EOF'
import os
from pathlib import Path

TEMPLATE = Path("configs/chat_templates/base-coder.jinja").read_text()
TASKS = [(f"Write a Python function add{i}(x) that returns x + {i}.",
          f"def add{i}(x):\n    return x + {i}") for i in range(8)]


def build(folder: Path, dtype: str) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    split = pre_tokenizers.Whitespace()
    text = TEMPLATE + " ".join(q + " " + a for q, a in TASKS) + " hello world Answer Score"
    words = sorted({w for w, _ in split.pre_tokenize_str(text)})
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", "<pad>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = split
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>")
    fast.chat_template = TEMPLATE
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=256, intermediate_size=512,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                      pad_token_id=3, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(getattr(torch, dtype))
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder
EOF

run sft 300 <<'EOF'
import json, os, sys, time
from pathlib import Path

import pyarrow as pa
import torch
sys.path.insert(0, os.environ["GPU_CHECK_WORK"])
from tiny_model import TASKS, build
from arenaforge.pipeline.apps.training import train_main
from arenaforge.pipeline.textnorm import instruction_id
from arenaforge.stages.output.emit import build_sft_rows, write_dataset

work, device = Path(os.environ["GPU_CHECK_WORK"]), os.environ["GPU_CHECK_DEVICE"]
bf16 = device == "cuda"
model = build(work / "sft-model", "float32")
table = pa.table({"instruction_id": [instruction_id(q) for q, _ in TASKS],
                  "instruction": [q for q, _ in TASKS],
                  "response": [f"```python\n{a}\n```" for _, a in TASKS],
                  "model": ["tiny"] * len(TASKS), "status": ["passed"] * len(TASKS),
                  "program_gate": ["pass"] * len(TASKS)})
write_dataset(build_sft_rows(table, system_prompt=None, run_id="gpu-check", config_hash="x"),
              work / "run" / "dataset", shard_rows=8, holdout_fraction=0.0, seed=0)
start = time.perf_counter()
out = train_main(Path("configs/sft-base.yaml"), [
    f"model={model}", f"bf16={str(bf16).lower()}", "max_steps=1", "max_length=64",
    "per_device_train_batch_size=4", "gradient_accumulation_steps=1", "logging_steps=1",
    "warmup_steps=0", "eval_on_test_split=false", 'save_strategy="no"',
    "gradient_checkpointing=false", f"output_dir={work / 'sft-out'}"], [str(work / "run")])
seconds = time.perf_counter() - start
metrics = json.loads((out / "train_metrics.json").read_text())
loss = next(r["loss"] for r in metrics["log_history"] if "loss" in r)
saved = json.loads((out / "config.json").read_text()).get("dtype") or json.loads(
    (out / "config.json").read_text()).get("torch_dtype")
ok = metrics["global_step"] == 1 and loss == loss and loss > 0
print(f"sft: {'PASS' if ok else 'FAIL'} one {'bfloat16' if bf16 else 'float32'} step on "
      f"{device} through arenaforge train (loss {loss:.3f}, saved as {saved}, {seconds:.1f} s "
      f"with model load)")
EOF

run vllm 420 <<'EOF'
import os, sys, time
from pathlib import Path

try:
    import vllm
except Exception as exc:  # noqa: BLE001 - not installed here: the extra's own environment
    print(f"vllm: SKIP not importable ({type(exc).__name__}: {exc}); "
          "pip install 'arenaforge[vllm]' in its own environment, then run this again")
    raise SystemExit(0)
if os.environ["GPU_CHECK_DEVICE"] != "cuda":
    print("vllm: SKIP --cpu")
    raise SystemExit(0)
sys.path.insert(0, os.environ["GPU_CHECK_WORK"])
from tiny_model import build
from arenaforge.pipeline.backends import SamplingParams, create_backend
from arenaforge.pipeline.backends.capabilities import traits_of
from arenaforge.pipeline.models import ModelSpec

model = build(Path(os.environ["GPU_CHECK_WORK"]) / "vllm-model", "bfloat16")
spec = ModelSpec(id="tiny", backend="vllm", family="tiny", path=str(model), n_ctx=256,
                 options={"gpu_memory_utilization": 0.2, "enforce_eager": True,
                          "dtype": "bfloat16"})
start = time.perf_counter()
backend = create_backend(spec)
load_s = time.perf_counter() - start
conv = [{"role": "user", "content": "Write a Python function add1(x) that returns x + 1."}]
[[reply]] = backend.chat([conv], SamplingParams(max_tokens=8, seed=0))
[(reading, error)] = backend.next_token_logprobs([conv], ["def", "return"])
traits = traits_of(backend)
backend.close()
ok = (reply.error is None and error is None and reading is not None and set(reading) ==
      {"def", "return"} and traits.prefers_batches and traits.next_token_logprobs)
print(f"vllm: {'PASS' if ok else 'FAIL'} vLLM {vllm.__version__}: a tiny engine through "
      f"arenaforge's backend (loaded in {load_s:.0f} s; chat {reply.finish_reason}, "
      f"{reply.completion_tokens} tokens{'' if reply.error is None else ': ' + reply.error}; "
      f"reading {reading if error is None else error}; traits {traits})")
EOF

exit $failed
