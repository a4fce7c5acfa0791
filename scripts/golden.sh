#!/usr/bin/env bash
# Behaviour-unchanged check: runs a fixed set of dsquant commands on the default
# model and prints, sorted, the sha256 of every artifact file and the JSON
# summaries with their timing/memory fields removed. Two binaries that print the
# same text wrote the same bytes and measured the same perplexities.
#
#   scripts/golden.sh [--check EXPECTED] DSQUANT_BINARY WORKDIR
#
# WORKDIR/golden (artifacts) is replaced on each run; WORKDIR/golden.txt keeps
# the output. With --check the output is diffed against EXPECTED (exit 1 and
# the diff on any difference). tests/golden/README.md says what it is for.
set -euo pipefail

usage() {
  echo "usage: scripts/golden.sh [--check EXPECTED] DSQUANT_BINARY WORKDIR" >&2
  exit 2
}

check=""
if [ "${1:-}" = "--check" ]; then
  [ $# -ge 2 ] || usage
  check=$(realpath "$2")
  shift 2
fi
[ $# -eq 2 ] || usage
command -v jq >/dev/null || { echo "golden: jq not found (scripts/install-deps.sh installs it)" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(realpath "$1")
[ -x "$BIN" ] || { echo "golden: $1 is not an executable" >&2; exit 2; }
mkdir -p "$2"
WORK=$(realpath "$2")
ART="$WORK/golden"
OUT="$WORK/golden.txt"
SHARED="${DSQ_SHARED_DIR:-$(realpath -m "$ROOT/../shared")}"
WIKI="$SHARED/datasets/wiki.test.raw"
[ -f "$WIKI" ] || { echo "golden: $WIKI not found (set DSQ_SHARED_DIR)" >&2; exit 2; }
MODEL=$(bash "$ROOT/scripts/fetch-default-model.sh")

# Same inputs whatever the caller's environment: no downloads, datasets only
# from $SHARED (DSQ_DATA would be searched first), a fixed thread count (the
# reductions split work by team size, so a different count may change bits).
export DSQ_OFFLINE=1 DSQ_SHARED_DIR="$SHARED" OMP_WAIT_POLICY=passive
unset DSQ_DATA OMP_NUM_THREADS
T="--threads 2"
# f32: --compute auto picks BF16 on AVX512-BF16 CPUs only, which would tie the
# expected output to that CPU feature as well.
CALIB="--calib tinyshakespeare --n-samples 4 --seqlen 128 --seed 0 --compute f32 --group 64"

rm -rf "$ART"
mkdir -p "$ART"
cd "$ART"
: >"$WORK/json.txt"
t0=$SECONDS

# Runs "dsquant -q ARGS --json" and keeps its summary as "json NAME {...}".
# Dropped: wall time, throughput and RSS (vary run to run), and the per-tensor
# table of gguf (the file's sha256 covers it). Paths are reduced to their last
# component so the output does not depend on WORKDIR or the cache folder.
run() {
  local name=$1
  shift
  local s=$SECONDS
  "$BIN" -q "$@" --json 2>"$WORK/$name.err" >"$WORK/$name.json" ||
    { echo "golden: dsquant $* failed:" >&2; cat "$WORK/$name.err" >&2; exit 1; }
  jq -c -S 'del(.seconds, .tokens_per_second, .peak_rss_mib, .layer_peak_rss_mib, .tensors)
            | with_entries(if (.value | type) == "string" and (.key | test("^(model|input|output|data|calib)$"))
                           then .value |= (split("/") | last) else . end)' "$WORK/$name.json" |
    sed "s/^/json $name /" >>"$WORK/json.txt"
  echo "golden: $name $((SECONDS - s)) s" >&2
}

# convert prints no JSON; only its files count.
convert() {
  local s=$SECONDS
  "$BIN" -q convert "$1" -o "$2" 2>"$WORK/convert-$2.err" ||
    { echo "golden: dsquant convert $1 failed:" >&2; cat "$WORK/convert-$2.err" >&2; exit 1; }
  echo "golden: convert $2 $((SECONDS - s)) s" >&2
}

PPL="--data $WIKI --ctx 128 --chunks 4 $T"

convert "$MODEL" hf
run gguf-q4km gguf hf -o q4km.gguf --type Q4_K_M $T
run gguf-q6k gguf hf -o q6k.gguf --type Q6_K $T
run rtn rtn hf -o rtn $T --group 64
run gptq gptq hf -o gptq --act-order --desc-act $CALIB $T
run gptq-ct gptq hf -o gptq-ct --format compressed-tensors --act-order --static-groups $CALIB $T
run awq awq hf -o awq $CALIB $T
convert q4km.gguf q4km-hf
run ppl-base ppl "$MODEL" $PPL
run ppl-hf ppl hf $PPL
run ppl-q4km ppl q4km.gguf $PPL
run ppl-rtn ppl rtn $PPL
run ppl-gptq ppl gptq $PPL
run ppl-awq ppl awq $PPL

# Every artifact file, hidden ones included (a leftover temporary would show).
find . -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 sha256sum >"$WORK/sha.txt"
# Files by path, then the summaries by name.
{ cat "$WORK/sha.txt"; LC_ALL=C sort "$WORK/json.txt"; } >"$OUT"
echo "golden: $(wc -l <"$OUT") lines in $((SECONDS - t0)) s -> $OUT" >&2

if [ -n "$check" ]; then
  if diff -u "$check" "$OUT"; then
    echo "golden: identical to $check" >&2
  else
    echo "golden: DIFFERENT from $check" >&2
    exit 1
  fi
else
  cat "$OUT"
fi
