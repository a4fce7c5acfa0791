#!/usr/bin/env bash
# The README's first command: installs what dsquant needs, builds it, fetches
# the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) and takes it
#   GGUF (Q4_1) -> HF folder (F32) -> GGUF (F32) -> HF folder (F32)
# showing `dsquant info` at each step. F32 -> GGUF F32 -> F32 is lossless, so
# the two HF folders must hold byte-identical safetensors files: checked with cmp.
# Outputs go to out/demo/ (git-ignored); re-running replaces them.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc 2>/dev/null || echo 2)

step() { printf '\n==> %s\n' "$*"; }

step "installing dependencies"
bash scripts/install-deps.sh

step "building (Release) into build/"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$JOBS" --target dsquant
DSQ=build/dsquant

step "fetching the default model"
MODEL=$(bash scripts/fetch-default-model.sh)
echo "$MODEL"

OUT=out/demo
mkdir -p "$OUT"

step "dsquant info (source GGUF, tensors left out)"
"$DSQ" info "$MODEL" --no-tensors

step "GGUF (Q4_1) -> HF folder (F32, dequantized)"
"$DSQ" -q convert "$MODEL" -o "$OUT/hf-f32" --dtype f32 --force
"$DSQ" info "$OUT/hf-f32" --no-tensors

step "HF folder (F32) -> GGUF (F32)"
"$DSQ" -q convert "$OUT/hf-f32" -o "$OUT/model-f32.gguf" --dtype f32 --force
"$DSQ" info "$OUT/model-f32.gguf" --no-tensors

step "GGUF (F32) -> HF folder (F32)"
"$DSQ" -q convert "$OUT/model-f32.gguf" -o "$OUT/hf-f32-again" --dtype f32 --force

step "sizes"
du -sh "$MODEL" "$OUT/hf-f32" "$OUT/model-f32.gguf" "$OUT/hf-f32-again"

step "lossless check: the two HF folders must be byte-identical"
status=0
for f in "$OUT/hf-f32"/*.safetensors "$OUT/hf-f32"/*.json; do
  name=$(basename "$f")
  if cmp -s "$f" "$OUT/hf-f32-again/$name"; then
    echo "identical: $name"
  else
    echo "DIFFERENT: $name"; status=1
  fi
done
if [ "$status" -ne 0 ]; then
  echo "dsquant demo: FAILED: the round trip changed bytes" >&2
  exit 1
fi
echo
echo "dsquant demo: OK (outputs in $OUT/)"
