#!/usr/bin/env bash
# Installs everything dsquant needs to build and test, from Debian and PyPI only.
# Idempotent: a second run installs nothing. Used by README.md and .ci/run.
#
# Python serves only the integration tests that drive real outside consumers
# (safetensors, gguf, tokenizers, transformers + torch on CPU). They live in a
# virtual environment under $DSQ_CACHE (default ~/.cache/dsquant/venv), so the
# system Python is left alone; DSQ_NO_PYTHON=1 skips it.
set -euo pipefail

DEB_PKGS=(build-essential cmake pkg-config libcjson-dev libzstd-dev libcmocka-dev
          libpcre2-dev libcurl4-openssl-dev libmicrohttpd-dev zlib1g-dev zstd python3 python3-venv python3-pip
          jq   # jq: scripts/golden.sh and scripts/bench-ab.sh read the --json summaries
          clang libclang-rt-dev llvm ccache time  # the fuzz build (scripts/fuzz.sh): libFuzzer, its symbolizer, CPU time; ccache for warm CI builds
          chromium)  # renders `dsquant report`'s page headless in tests/test_sweep.c

missing=()
for p in "${DEB_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

if [ "${DSQ_NO_PYTHON:-0}" != "1" ]; then
  CACHE="${DSQ_CACHE:-$HOME/.cache/dsquant}"
  VENV="$CACHE/venv"
  req="$(cd "$(dirname "$0")/.." && pwd)/tests/integration/requirements.txt"
  stamp="$VENV/.requirements.sha256"
  want=$(sha256sum "$req" | cut -d' ' -f1)
  if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    mkdir -p "$CACHE"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    echo "dsquant: installing Python test consumers into $VENV (first run takes a few minutes)" >&2
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$req" >&2
    echo "$want" > "$stamp"
  fi
  # llama.cpp itself, as a real consumer of our GGUF files: llama-cpp-python 0.3.8
  # bundles llama.cpp 7841fc72 (2025-03-12), three weeks after the reference
  # revision of our quantizers. It compiles from source (about 5 minutes on 2
  # cores), so the built wheel is kept in $CACHE/wheels and re-used.
  LLAMA_PKG="llama-cpp-python==0.3.8"
  if ! "$VENV/bin/python" -c "import llama_cpp" >/dev/null 2>&1; then
    mkdir -p "$CACHE/wheels"
    if ! ls "$CACHE"/wheels/llama_cpp_python-0.3.8-*.whl >/dev/null 2>&1; then
      echo "dsquant: building $LLAMA_PKG once into $CACHE/wheels (several minutes)" >&2
      CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$VENV/bin/python" -m pip wheel -q --disable-pip-version-check \
        --no-deps "$LLAMA_PKG" -w "$CACHE/wheels" >&2
    fi
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --find-links "$CACHE/wheels" \
      "$LLAMA_PKG" diskcache jinja2 >&2
  fi
fi
