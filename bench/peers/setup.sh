#!/usr/bin/env bash
# Creates the peer-comparison environment (not used by CI): a venv under
# $DSQ_CACHE/peers-venv with llm-compressor from PyPI, which pins its own torch,
# transformers and compressed-tensors (so it cannot share the test venv).
# Usage: bash bench/peers/setup.sh   (idempotent)
set -euo pipefail
cache=${DSQ_CACHE:-$HOME/.cache/dsquant}
venv=$cache/peers-venv
version=${LLMCOMPRESSOR_VERSION:-0.14.0.1}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import llmcompressor, sys; sys.exit(llmcompressor.__version__ != '$version')" 2>/dev/null; then
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet "llmcompressor==$version"
fi
"$venv/bin/python" -c "import llmcompressor, torch, transformers; print('llmcompressor', llmcompressor.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
