#!/usr/bin/env bash
# The fuzz harnesses of tests/fuzz (docs/fuzzing.md).
#
#   scripts/fuzz.sh --replay BUILD_DIR
#       Runs every harness built in BUILD_DIR (any compiler; replay.c's main)
#       once over its seeds (made here by fuzz_seeds_make) and its kept
#       regression inputs (tests/fuzz/regress/<harness>/). The ctest case
#       fuzz_replay; a finding aborts the harness and fails the run.
#   scripts/fuzz.sh --smoke [SECONDS]
#       The CI run: the clang libFuzzer build in build-fuzz (ASan + UBSan),
#       the regression inputs, then each harness for SECONDS (default 10),
#       two at a time. A crash, leak, timeout or sanitizer report fails it.
#   scripts/fuzz.sh --long SECONDS [HARNESS...]
#       A campaign: each harness (default all) for SECONDS on one core, its
#       corpus kept and grown in $DSQ_CACHE/fuzz/corpus/<harness>; a summary
#       line per harness (executions, coverage, corpus) is appended to
#       $DSQ_CACHE/fuzz/campaign.log. -j N runs N harnesses at once.
#   scripts/fuzz.sh --report [LOG]
#       The campaign log summed per harness as a Markdown table (CPU minutes,
#       executions, runs, runs that ended in a finding, the last coverage).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE="${DSQ_CACHE:-$HOME/.cache/dsquant}"
# The libFuzzer build's folder (another one keeps a running campaign's binaries).
FB="${DSQ_FUZZ_BUILD:-build-fuzz}"

die() { echo "fuzz.sh: $*" >&2; exit 1; }

# The dictionary of each harness (tests/fuzz/dict/).
dict_of() {
  case "$1" in
    fuzz_safetensors|fuzz_st_index) echo safetensors ;;
    fuzz_gguf|fuzz_gguf_tokenizer) echo gguf ;;
    fuzz_config|fuzz_quant_config) echo config ;;
    fuzz_hf_tokenizer) echo tokenizer ;;
    fuzz_tokenize) echo text ;;
    fuzz_chat) echo chat ;;
    fuzz_imatrix) echo gguf ;;
    fuzz_zip) echo zip ;;
    fuzz_http|fuzz_api) echo http ;;
    *) echo "" ;;
  esac
}

harnesses() { ls "$ROOT"/tests/fuzz/fuzz_*.c | xargs -n1 basename | sed 's/\.c$//'; }

# Seeds into $1: our writers' files, plus artifact folders the CLI writes
# when a dsquant binary is at hand ($DSQ_BINARY or build/dsquant).
make_seeds() {
  local bdir=$1 out=$2
  rm -rf "$out"
  "$bdir/fuzz_seeds_make" "$out"
  local bin="${DSQ_BINARY:-$ROOT/build/dsquant}"
  if [ -x "$bin" ]; then
    artifact_seeds "$bin" "$out"
  else
    echo "fuzz.sh: no dsquant binary at $bin: fuzz_quant_config gets config-only seeds" >&2
  fi
}

# One seed per artifact format: config.json, hf_quant_config.json and the
# tensors of a quantized tiny model, joined by the harness's separator.
artifact_seeds() {
  local bin=$1 out=$2 tmp
  tmp=$(mktemp -d)
  local sep=$'\n--8<--\n'
  local i=0
  # quantized from a Hugging Face folder, as users do (GGUF's permuted q/k
  # rows cannot take FP8 blocks)
  "$bin" convert "$out/tiny.gguf" -o "$tmp/hf" >/dev/null 2>"$tmp/err" ||
    { echo "fuzz.sh: convert of the tiny model failed: $(head -c 300 "$tmp/err")" >&2; rm -rf "$tmp"; return; }
  while read -r kind args; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    if OMP_NUM_THREADS=1 "$bin" $kind "$tmp/hf" $args -o "$tmp/a$i" >/dev/null 2>"$tmp/err$i"; then
      local st="$tmp/a$i/model.safetensors"
      [ -f "$st" ] || continue
      {
        cat "$tmp/a$i/config.json"; printf '%s' "$sep"
        [ -f "$tmp/a$i/hf_quant_config.json" ] && cat "$tmp/a$i/hf_quant_config.json"; printf '%s' "$sep"
        cat "$st"
      } > "$out/fuzz_quant_config/artifact-$i"
    else
      echo "fuzz.sh: '$kind $args' on the tiny model failed: $(head -c 300 "$tmp/err$i")" >&2
    fi
  done <<'ROWS'
rtn --format awq --w-bit 4 --group 32 --zero-point
rtn --format gptq --w-bit 4 --group 32
rtn --format compressed-tensors --w-bit 4 --group 32
fp8 --scheme dynamic --format compressed-tensors
fp8 --scheme block --format fp8 --partial-blocks
fp8 --scheme weight-only --format compressed-tensors
fp8 --scheme static --format modelopt --n-samples 1 --seqlen 16
smoothquant --n-samples 1 --seqlen 16
ROWS
  rm -rf "$tmp"
}

replay() {
  local bdir=$1 seeds="$1/fuzz-seeds" fail=0
  [ -x "$bdir/fuzz_seeds_make" ] || die "$bdir/fuzz_seeds_make is not built"
  make_seeds "$bdir" "$seeds"
  for h in $(harnesses); do
    local dirs=()
    [ -d "$seeds/$h" ] && dirs+=("$seeds/$h")
    [ -d "$ROOT/tests/fuzz/regress/$h" ] && dirs+=("$ROOT/tests/fuzz/regress/$h")
    [ ${#dirs[@]} -gt 0 ] || { echo "fuzz.sh: $h has neither seeds nor regression inputs" >&2; fail=1; continue; }
    if "$bdir/$h" "${dirs[@]}" 2>"$bdir/$h.replay.log"; then
      echo "fuzz.sh: $h: $(tail -1 "$bdir/$h.replay.log")"
    else
      echo "fuzz.sh: $h FAILED:" >&2
      tail -30 "$bdir/$h.replay.log" >&2
      fail=1
    fi
  done
  return $fail
}

build_fuzz() {
  command -v clang >/dev/null || die "clang is not installed (scripts/install-deps.sh installs it)"
  local launcher=()
  if command -v ccache >/dev/null; then
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
    export CCACHE_DIR="${CCACHE_DIR:-$CACHE/ccache}" CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
  fi
  CC=clang cmake -S . -B "$FB" -DCMAKE_BUILD_TYPE=Debug -DDSQ_FUZZ=ON -DDSQ_CUDA=OFF "${launcher[@]}" >/dev/null
  cmake --build "$FB" -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
}

# run_one HARNESS SECONDS CORPUS_DIR ARTIFACT_DIR LOG
run_one() {
  local h=$1 secs=$2 corpus=$3 art=$4 log=$5 d
  d=$(dict_of "$h")
  local args=(-max_total_time="$secs" -timeout=30 -rss_limit_mb=3072 -print_final_stats=1
              -artifact_prefix="$art/" -max_len=65536)
  [ -n "$d" ] && args+=(-dict="$ROOT/tests/fuzz/dict/$d.dict")
  mkdir -p "$corpus" "$art"
  # CPU seconds (user + system) beside the log: the campaign's figures count CPU time
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive \
    /usr/bin/time -f "%U %S" -o "$log.cpu" "$ROOT/$FB/$h" "${args[@]}" "$corpus" >"$log" 2>&1
}

summary() {
  local h=$1 log=$2
  local execs cov ft corp
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
  corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
  cpu=$(awk '/^[0-9.]+ [0-9.]+$/ {printf "%.0f", $1 + $2}' "$log.cpu" 2>/dev/null || echo "?")
  verdict=ok
  grep -a -q -E 'ERROR: |FINDING|SUMMARY: ' "$log" && verdict=FINDING
  printf '%-22s cpu_s %-6s execs %-10s cov %-6s ft %-7s corpus %-6s %s\n' "$h" "$cpu" "$execs" "$cov" "$ft" "$corp" "$verdict"
}

# campaign SECONDS JOBS CORPUS_ROOT WORK HARNESS...
# Keeps JOBS harnesses running; whenever one ends (wait -n), the next starts.
campaign() {
  local secs=$1 jobs=$2 croot=$3 work=$4; shift 4
  local fail=0 pid done_pid
  declare -A name_of=()
  finish() { # the harness that ended: its summary line, its verdict
    local h=${name_of[$1]} rc=$2
    unset "name_of[$1]"
    [ "$rc" = 0 ] || { echo "fuzz.sh: $h FAILED (log: $work/$h.log)" >&2; fail=1; }
    summary "$h" "$work/$h.log"
  }
  for h in "$@"; do
    local corpus="$croot/$h"
    mkdir -p "$corpus"
    # seeds join the corpus (libFuzzer keeps only what adds coverage)
    [ -d "$work/seeds/$h" ] && cp -n "$work/seeds/$h"/* "$corpus"/ 2>/dev/null || true
    run_one "$h" "$secs" "$corpus" "$work/artifacts/$h" "$work/$h.log" &
    name_of[$!]=$h
    if [ "${#name_of[@]}" -ge "$jobs" ]; then
      local rc=0
      wait -n -p done_pid || rc=$?
      finish "$done_pid" "$rc"
    fi
  done
  while [ "${#name_of[@]}" -gt 0 ]; do
    local rc=0
    wait -n -p done_pid || rc=$?
    finish "$done_pid" "$rc"
  done
  if [ "$fail" != 0 ]; then
    for h in "$@"; do
      grep -a -q -E 'ERROR: |FINDING|SUMMARY: ' "$work/$h.log" 2>/dev/null &&
        { echo "--- $h" >&2; grep -a -E -B2 -A25 'ERROR: |FINDING|runtime error' "$work/$h.log" | head -60 >&2; }
    done
  fi
  return $fail
}

mode=${1:-}
case "$mode" in
  --replay)
    [ $# -ge 2 ] || die "usage: scripts/fuzz.sh --replay BUILD_DIR"
    replay "$2" ;;
  --smoke)
    secs=${2:-10}
    build_fuzz
    work="$ROOT/$FB/smoke"
    rm -rf "$work"; mkdir -p "$work"
    make_seeds "$FB" "$work/seeds"
    # the regression inputs first, through the libFuzzer binaries themselves
    for h in $(harnesses); do
      if [ -d "tests/fuzz/regress/$h" ]; then
        ASAN_OPTIONS=detect_leaks=1 OMP_NUM_THREADS=1 "$FB/$h" -runs=0 "tests/fuzz/regress/$h" \
          >"$work/$h.regress.log" 2>&1 || { tail -40 "$work/$h.regress.log" >&2; die "$h fails on a regression input"; }
      fi
    done
    # a fresh corpus from the seeds each time, so that CI runs the same work
    campaign "$secs" 2 "$work/corpus" "$work" $(harnesses) ;;
  --long)
    [ $# -ge 2 ] || die "usage: scripts/fuzz.sh --long SECONDS [-j N] [HARNESS...]"
    secs=$2; shift 2
    jobs=1
    if [ "${1:-}" = "-j" ]; then jobs=$2; shift 2; fi
    list=("$@"); [ ${#list[@]} -gt 0 ] || mapfile -t list < <(harnesses)
    build_fuzz
    work="$CACHE/fuzz/run-$(date +%Y%m%d-%H%M%S)"
    mkdir -p "$work"
    make_seeds "$FB" "$work/seeds"
    start=$(date +%s)
    rc=0
    campaign "$secs" "$jobs" "$CACHE/fuzz/corpus" "$work" "${list[@]}" | tee -a "$CACHE/fuzz/campaign.log" || rc=$?
    echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) ${secs}s each, $(( $(date +%s) - start ))s wall, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
      >> "$CACHE/fuzz/campaign.log"
    exit $rc ;;
  --report)
    log=${2:-$CACHE/fuzz/campaign.log}
    [ -f "$log" ] || die "$log: no campaign log"
    echo "| harness | CPU min | executions | runs | runs ending in a finding | coverage (edges) | features | corpus |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    awk '$2 == "cpu_s" {
           h = $1; cpu[h] += $3; ex[h] += $5; runs[h]++; if ($12 == "FINDING") bad[h]++
           cov[h] = $7; ft[h] = $9; corp[h] = $11; tc += $3; te += $5
         }
         END {
           for (h in cpu)
             printf "| %s | %.1f | %d | %d | %d | %s | %s | %s |\n", h, cpu[h] / 60, ex[h], runs[h], bad[h] + 0, cov[h], ft[h], corp[h] | "sort"
           close("sort")
           printf "| all | %.1f (%.2f CPU-h) | %d | | | | | |\n", tc / 60, tc / 3600, te
         }' "$log" ;;
  *) die "usage: scripts/fuzz.sh --replay BUILD_DIR | --smoke [SECONDS] | --long SECONDS [-j N] [HARNESS...] | --report [LOG]" ;;
esac
