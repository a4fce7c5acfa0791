#!/usr/bin/env bash
# llama.cpp's OpenAI-compatible server (llama-cpp-python's server extra) in the
# test venv, for bench/bench_serve.py. The llama-cpp-python wheel itself comes
# from scripts/install-deps.sh (built once into $DSQ_CACHE/wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
CACHE="${DSQ_CACHE:-$HOME/.cache/dsquant}"
"$CACHE/venv/bin/python" -m pip install -q --disable-pip-version-check --find-links "$CACHE/wheels" \
  "llama-cpp-python[server]==0.3.8"
echo "run: $CACHE/venv/bin/python bench/bench_serve.py" >&2
