#!/usr/bin/env bash
# The main job on a fresh Debian machine: set up, fetch the default model
# (SmolLM2-135M-Instruct), quantize it with AWQ and GPTQ (INT4), SmoothQuant
# W8A8 and FP8 to folders vLLM and transformers load and to a Q4_K_M GGUF
# llama.cpp loads, evaluate each
# against the base (WikiText-2 perplexity and KL-divergence), and print one
# table with sizes and times.
#
#   bash scripts/main-job.sh [OUTDIR]      (default: ./dsquant-main-job)
#
# Environment: DSQ_JOB_SAMPLES / DSQ_JOB_AWQ_SAMPLES (GPTQ / AWQ calibration windows
# of 512 tokens, default 32 / 16, as in docs/benchmarks.md), DSQ_JOB_CHUNKS
# (evaluation chunks of 512 tokens, default 40), DSQ_THREADS (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=$(realpath -m "${1:-dsquant-main-job}")
SAMPLES=${DSQ_JOB_SAMPLES:-32}             # GPTQ windows
AWQ_SAMPLES=${DSQ_JOB_AWQ_SAMPLES:-16}     # AWQ windows
CHUNKS=${DSQ_JOB_CHUNKS:-40}
JOBS=$(nproc 2>/dev/null || echo 2)
T=()
[ -n "${DSQ_THREADS:-}" ] && T=(--threads "$DSQ_THREADS")

# Set up: Debian packages only (the job needs no Python), the release build.
DSQ_NO_PYTHON=1 bash scripts/install-deps.sh
MODEL=$(bash scripts/fetch-default-model.sh)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDSQ_CUDA=AUTO >/dev/null
cmake --build build -j"$JOBS" --target dsquant >/dev/null
DSQ="$ROOT/build/dsquant"

mkdir -p "$OUT"
LOG="$OUT/log"
: >"$LOG"
say() { echo "main-job: $*" >&2; }
# Runs a step, timing it; its stdout (JSON) goes to $OUT/NAME.json.
step() {
  local name=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >"$OUT/$name.json" 2>>"$LOG" || { say "$name failed; see $LOG"; tail -n 5 "$LOG" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v n="$name" -v a="$t0" -v b="$t1" 'BEGIN { printf "%s %.3f\n", n, b - a }' >>"$OUT/times"
  say "$name done in $(awk -v n="$name" '$1 == n { printf "%.1f", $2 }' "$OUT/times") s"
}
: >"$OUT/times"

# The base: the GGUF as an F32 Hugging Face folder (every artifact below is made from it).
step base "$DSQ" convert "$MODEL" -o "$OUT/base-hf" --dtype f32 --force
# Group 64: 128 does not divide SmolLM2's 576 columns. AWQ's scale search runs its block
# loss on 2 of the windows (statistics and clipping use all): 5x faster than on all, at the
# same perplexity on this model (docs/benchmarks.md).
CAL=(--calib tinyshakespeare --seqlen 512 --group 64 "${T[@]}")
step awq "$DSQ" awq "$OUT/base-hf" -o "$OUT/awq-w4g64" "${CAL[@]}" --n-samples "$AWQ_SAMPLES" --loss-samples 2 \
  --force --json
step gptq "$DSQ" gptq "$OUT/base-hf" -o "$OUT/gptq-w4g64" "${CAL[@]}" --n-samples "$SAMPLES" --force --json
step q4km "$DSQ" gguf "$OUT/base-hf" -o "$OUT/q4_k_m.gguf" --type Q4_K_M "${T[@]}" --force --json
# The same Q4_K_M file layout with the decoder linears by GPTQ into their blocks.
step q4km-gptq "$DSQ" gguf "$OUT/base-hf" -o "$OUT/q4_k_m-gptq.gguf" --type Q4_K_M --method gptq \
  --calib tinyshakespeare --seqlen 512 --n-samples "$SAMPLES" "${T[@]}" --force --json
# 8-bit: SmoothQuant W8A8 (family alpha, RTN weights, per-token INT8 activations) and FP8
# dynamic (no data), both compressed-tensors folders vLLM serves.
step w8a8 "$DSQ" smoothquant "$OUT/base-hf" -o "$OUT/w8a8-sq" --calib tinyshakespeare --seqlen 512 \
  --n-samples "$AWQ_SAMPLES" "${T[@]}" --force --json
step fp8 "$DSQ" fp8 "$OUT/base-hf" -o "$OUT/fp8-dynamic" --scheme dynamic "${T[@]}" --force --json

# Evaluation: llama-perplexity's protocol on WikiText-2, base logits saved once.
EV=(--data wikitext2 --ctx 512 --chunks "$CHUNKS" "${T[@]}")
step ppl-base "$DSQ" ppl "$OUT/base-hf" "${EV[@]}" --json
step logits "$DSQ" kld "$OUT/base-hf" "${EV[@]}" --save-logits "$OUT/base.logits" --force --json
for a in awq-w4g64 gptq-w4g64 q4_k_m.gguf q4_k_m-gptq.gguf w8a8-sq fp8-dynamic; do
  step "kld-$a" "$DSQ" kld --logits "$OUT/base.logits" "$OUT/$a" "${EV[@]}" --json
done

# The table.
# A number of a step's JSON: a plain field ("ppl": 12.3) or a value with an
# error bar ("kld": {"value": ..., "error": ...}).
num() {
  local f="$OUT/$1.json" sp='[[:space:]]*'
  if grep -q "\"$2\":$sp{" "$f"; then
    grep -A2 "\"$2\":$sp{" "$f" | grep -o "\"value\":$sp[-0-9.e+]*" | head -n 1 | sed 's/.*:[[:space:]]*//'
  else
    grep -o "\"$2\":$sp[-0-9.e+]*" "$f" | head -n 1 | sed 's/.*:[[:space:]]*//'
  fi
}
secs() { awk -v n="$1" '$1 == n { printf "%.1f", $2 }' "$OUT/times"; }
mib() { du -sm "$1" | cut -f1; }
base_ppl=$(num ppl-base ppl)
printf '\n%-22s %9s %10s %10s %9s %10s\n' artifact "size MiB" "quant s" "PPL" "dPPL %" "mean KLD"
printf '%-22s %9s %10s %10s %9s %10s\n' "base (F32 HF)" "$(mib "$OUT/base-hf")" - "$(printf %.4f "$base_ppl")" - -
for row in "awq-w4g64 awq" "gptq-w4g64 gptq" "q4_k_m.gguf q4km" "q4_k_m-gptq.gguf q4km-gptq" "w8a8-sq w8a8" \
  "fp8-dynamic fp8"; do
  set -- $row
  ppl=$(num "kld-$1" ppl)
  kld=$(num "kld-$1" kld)
  d=$(awk -v p="$ppl" -v b="$base_ppl" 'BEGIN { printf "%.4f", (p / b - 1) * 100 }')
  printf '%-22s %9s %10s %10s %9s %10s\n' "$1" "$(mib "$OUT/$1")" "$(secs "$2")" "$(printf %.4f "$ppl")" \
    "$(printf %+.2f "$d")" "$(printf %.5f "$kld")"
done
echo
echo "WikiText-2 (wiki.test.raw), $CHUNKS chunks of 512 tokens, llama-perplexity's protocol;"
echo "calibration: tinyshakespeare, AWQ $AWQ_SAMPLES x 512 tokens (loss on 2), GPTQ (INT4 and Q4_K_M) $SAMPLES x 512,"
echo "SmoothQuant $AWQ_SAMPLES x 512; FP8 dynamic needs none."
echo "Artifacts, JSON summaries and the log in $OUT."
