#!/usr/bin/env bash
# llama.cpp of the MLA split era as a real consumer of our deepseek2 GGUFs:
# llama-cpp-python 0.3.36 (PyPI, sdist only) bundles llama.cpp 0c1e57098bba
# (2026-10-01), which reads attn_k_b / attn_v_b. It shares its package name
# with the 0.3.8 of the main test venv, so it gets a venv of its own,
# $DSQ_CACHE/llama-mla-venv. The wheel is built once (about 10 minutes on 2
# cores; the multimodal library is left out) and kept in $DSQ_CACHE/wheels.
set -euo pipefail
CACHE="${DSQ_CACHE:-$HOME/.cache/dsquant}"
VENV="$CACHE/llama-mla-venv"
PKG="llama-cpp-python==0.3.36"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import llama_cpp; assert llama_cpp.__version__ == '0.3.36'" \
  >/dev/null 2>&1; then
  exit 0
fi
mkdir -p "$CACHE/wheels"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
if ! ls "$CACHE"/wheels/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1; then
  echo "dsquant: building $PKG once into $CACHE/wheels (about 10 minutes)" >&2
  CMAKE_ARGS="-DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$VENV/bin/python" -m pip wheel -q \
    --disable-pip-version-check --no-deps "$PKG" -w "$CACHE/wheels" >&2
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --find-links "$CACHE/wheels" "$PKG" numpy \
  diskcache jinja2 >&2
