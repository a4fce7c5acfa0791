#!/usr/bin/env bash
# Speed A/B of two builds in one run: the benchmark programs of bench/ and the
# whole-process wall time of `dsquant gguf`, `gptq` and `awq` on the default
# model, old and new interleaved round by round (the one that goes first
# alternating), so that a busy spell on a shared machine hits both alike.
#
#   scripts/bench-ab.sh [--quick] [--rounds N] [--workdir DIR] OLD_BUILD_DIR NEW_BUILD_DIR
#
# Each figure is the median over rounds of each side, and "new/old" is the
# median of the per-round ratios, oriented so that > 1 means the new build is
# faster (or smaller, for memory). Full: 3 rounds, about 10 minutes on 2 cores;
# --quick: 2 rounds, smaller sizes, no awq, no conversion: about 3 minutes.
# The bench/*.py wrappers compare against llama.cpp and are not run here:
# llama.cpp is the same on both sides, so its column adds time and no A/B.
set -euo pipefail

usage() {
  echo "usage: scripts/bench-ab.sh [--quick] [--rounds N] [--workdir DIR] OLD_BUILD_DIR NEW_BUILD_DIR" >&2
  exit 2
}

quick=0
rounds=""
work="${TMPDIR:-/tmp}/dsq-bench-ab"
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --rounds) [ $# -ge 2 ] || usage; rounds=$2; shift 2 ;;
    --workdir) [ $# -ge 2 ] || usage; work=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || usage
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OLD=$(realpath "$1")
NEW=$(realpath "$2")
for b in "$OLD" "$NEW"; do
  for p in dsquant bench_forward bench_gemv bench_gemv_intq bench_vecdot bench_convert; do
    [ -x "$b/$p" ] || { echo "bench-ab: $b/$p not built" >&2; exit 2; }
  done
done
[ -n "$rounds" ] || rounds=$((quick ? 2 : 3))
command -v jq >/dev/null || { echo "bench-ab: jq not found (scripts/install-deps.sh installs it)" >&2; exit 2; }

MODEL=$(bash "$ROOT/scripts/fetch-default-model.sh")
# Multi-thread runs collapse when OpenMP threads spin on a core another
# process holds (bench/bench_runtime.py says why); passive waiting is fairer.
export DSQ_OFFLINE=1 OMP_WAIT_POLICY=passive
[ -n "${DSQ_SHARED_DIR:-}" ] || export DSQ_SHARED_DIR="$(realpath -m "$ROOT/../shared")"
unset DSQ_DATA OMP_NUM_THREADS

mkdir -p "$work"
W=$(realpath "$work")
rm -rf "$W/raw" "$W/m" "$W/out"
mkdir -p "$W/raw" "$W/m" "$W/out"
t0=$SECONDS

# Inputs made once, by the old build, so both sides read the same bytes.
if [ ! -f "$W/q4km.gguf" ]; then
  echo "bench-ab: preparing inputs in $W" >&2
  "$OLD/dsquant" -q convert "$MODEL" -o "$W/hf" --force
  "$OLD/dsquant" -q gguf "$W/hf" -o "$W/q4km.gguf" --type Q4_K_M --threads 2 --force 2>/dev/null
fi

# ---- parsers: stdin = one run's output, stdout = "metric<TAB>value<TAB>dir",
# dir + when larger is better, - when smaller is better.

p_forward() {
  jq -r '"pp\(.pp.tokens) tok/s\t\(.pp.tokens_per_second)\t+", "tg\(.tg.tokens) tok/s\t\(.tg.tokens_per_second)\t+"'
}

# | 1 | 7.93 | 15.90 |  (memcpy table) and | f32 | 15.04 | 190% | 8.39 | 100% |
p_gemv() {
  awk -F'|' '
    /^\| threads \|/ { mode = "mem"; next }
    /^\| type \|/ { mode = "type"; n = 0
      for (i = 3; i <= NF; i++) if ($i ~ /thr GB\/s/) { split($i, a, " "); thr[++n] = a[1] }
      next }
    /^\|---/ || !/^\|/ { next }
    mode == "mem" { gsub(/ /, "", $2); printf "memcpy %st GB/s\t%s\t+\n", $2, $3 + 0 }
    mode == "type" { gsub(/ /, "", $2)
      for (k = 1; k <= n; k++) printf "%s %st GB/s\t%s\t+\n", $2, thr[k], $(1 + 2 * k) + 0 }'
}

# "small (in L2) working set: ..." then | q4_0 | 4.50 | 3.64 | ...
p_vecdot() {
  awk -F'|' '
    /working set:/ { set = $0; sub(/ .*/, "", set); next }
    /^\| [a-z]/ && $2 !~ /type/ { gsub(/ /, "", $2); printf "%s %s GB/s\t%s\t+\n", set, $2, $4 + 0 }'
}

# threads memcpy int4-ms int4-GB/s int4/mcpy f16-ms ...
p_intq() {
  awk '$1 ~ /^[0-9]+$/ && NF >= 10 { printf "int4 %st ms\t%s\t-\nf16 %st ms\t%s\t-\n", $1, $3, $1, $6 }'
}

# | SmolLM2-135M HF F32 -> GGUF F32  | 538 | 2.20 | 245 | 2.61 | ...
p_convert() {
  awk -F'|' '/^\| SmolLM2|^\| synthetic/ { c = $2; gsub(/^ +| +$/, "", c); gsub(/ /, "_", c)
                                           printf "%s s\t%s\t-\n", c, $4 + 0 }'
}

# The --json summary of a quantize command: peak memory (wall time is added by run_side).
p_quant() {
  jq -r '"peak RSS MiB\t\(.peak_rss_mib // empty)\t-"' 2>/dev/null || true
}

# ---- one case: "case NAME PARSER CMD..." with @B@ standing for the build
# folder and @S@ for the side (old/new), run $rounds times per side.

run_side() {
  local name=$1 parser=$2 side=$3 r=$4 dir
  shift 4
  [ "$side" = old ] && dir=$OLD || dir=$NEW
  local args=() a
  for a in "$@"; do a=${a//@B@/$dir}; args+=("${a//@S@/$side}"); done
  local raw="$W/raw/$name.$side.$r" s e
  local rc=0
  s=$EPOCHREALTIME
  "${args[@]}" >"$raw" 2>"$raw.err" || rc=$?
  e=$EPOCHREALTIME
  # bench_gemv and bench_vecdot exit 1 when a figure misses its target; only
  # a run that printed nothing to measure, or a failed dsquant, is an error.
  "$parser" <"$raw" >"$raw.tsv"
  if [ "$rc" -ne 0 ] && { [ "$parser" = true ] || [ "$parser" = p_quant ] || [ ! -s "$raw.tsv" ]; }; then
    echo "bench-ab: $name ($side) failed with status $rc:" >&2
    tail -5 "$raw.err" >&2
    exit 1
  fi
  {
    cat "$raw.tsv"
    printf 'process wall s\t%s\t-\n' "$(awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }')"
  } | sed "s|^|$name: |" >"$W/m/$name.$side.$r"
}

case_ab() {
  local name=$1 r
  echo "bench-ab: $name" >&2
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then
      run_side "$name" "$2" old "$r" "${@:3}"
      run_side "$name" "$2" new "$r" "${@:3}"
    else
      run_side "$name" "$2" new "$r" "${@:3}"
      run_side "$name" "$2" old "$r" "${@:3}"
    fi
  done
}

# The bench programs time their own loops; their process wall time is noise.
drop_wall() { grep -v 'process wall s' || true; }

CALIB="--calib tinyshakespeare --seed 0 --compute f32 --group 64 --threads 2 --json --force"
if ((quick)); then
  case_ab vecdot p_vecdot @B@/bench_vecdot --reps 1 --min-ms 30 --large-mb 32
  case_ab gemv p_gemv @B@/bench_gemv --threads 1,2 --types F32,BF16,Q8_0,Q4_K,Q6_K --mib 64 --reps 2
  case_ab gemv_intq p_intq @B@/bench_gemv_intq --reps 2 --min-ms 100
  case_ab forward_q4km p_forward @B@/bench_forward "$W/q4km.gguf" --threads 2 --pp 64 --tg 8 --reps 1
  case_ab gguf_q4km true @B@/dsquant -q gguf "$W/hf" -o "$W/out/q4km-@S@.gguf" --type Q4_K_M --threads 2 --force
  case_ab gptq p_quant @B@/dsquant -q gptq "$W/hf" -o "$W/out/gptq-@S@" --act-order --n-samples 4 --seqlen 128 $CALIB
else
  case_ab vecdot p_vecdot @B@/bench_vecdot --reps 2 --min-ms 50
  case_ab gemv p_gemv @B@/bench_gemv --threads 1,2 --mib 128 --reps 3
  case_ab gemv_intq p_intq @B@/bench_gemv_intq --reps 3 --min-ms 150
  case_ab forward_q4_1 p_forward @B@/bench_forward "$MODEL" --threads 2 --pp 128 --tg 16 --reps 2
  case_ab forward_q4km p_forward @B@/bench_forward "$W/q4km.gguf" --threads 2 --pp 128 --tg 16 --reps 2
  case_ab convert p_convert @B@/bench_convert --no-synthetic --reps 1 --workdir "$W/out"
  case_ab gguf_q4km true @B@/dsquant -q gguf "$W/hf" -o "$W/out/q4km-@S@.gguf" --type Q4_K_M --threads 2 --force
  case_ab gguf_q6k true @B@/dsquant -q gguf "$W/hf" -o "$W/out/q6k-@S@.gguf" --type Q6_K --threads 2 --force
  case_ab gptq p_quant @B@/dsquant -q gptq "$W/hf" -o "$W/out/gptq-@S@" --act-order --n-samples 4 --seqlen 128 $CALIB
  case_ab awq p_quant @B@/dsquant -q awq "$W/hf" -o "$W/out/awq-@S@" --n-samples 2 --seqlen 128 $CALIB
fi

# ---- report: per metric the median of each side and of the paired ratios.
report() {
  local f
  for f in "$W"/m/*; do
    local base=${f##*/}
    local cname=${base%%.*} rest=${base#*.}
    local side=${rest%%.*} r=${rest#*.}
    case "$cname" in gguf_*|gptq|awq) cat "$f" ;; *) drop_wall <"$f" ;; esac |
      awk -F'\t' -v side="$side" -v r="$r" '{ print $1 "\t" side "\t" r "\t" $2 "\t" $3 }'
  done | awk -F'\t' -v rounds="$rounds" '
    function median(arr, n,   i, j, t) {
      for (i = 2; i <= n; i++) { t = arr[i]; for (j = i - 1; j >= 1 && arr[j] > t; j--) arr[j + 1] = arr[j]; arr[j + 1] = t }
      return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
    }
    { key = $1; if (!(key in dir)) order[++nk] = key; dir[key] = $5; v[key, $2, $3] = $4; if ($3 > maxr) maxr = $3 }
    function ratios(key,   r, o, n) {
      np = 0
      for (r = 1; r <= maxr; r++) {
        o = v[key, "old", r]; n = v[key, "new", r]
        if (o != "" && n != "" && o > 0 && n > 0) c[++np] = dir[key] == "+" ? n / o : o / n
      }
      lo = hi = c[1]
      for (r = 2; r <= np; r++) { if (c[r] < lo) lo = c[r]; if (c[r] > hi) hi = c[r] }
    }
    END {
      # memcpy is the same code on both sides: its spread is machine noise, and
      # a verdict must clear it as well as 5%.
      zlo = 0.95; zhi = 1.05
      for (k = 1; k <= nk; k++)
        if (order[k] ~ /memcpy/) { ratios(order[k]); if (np) { if (lo < zlo) zlo = lo; if (hi > zhi) zhi = hi }; delete c }
      printf "%-44s %11s %11s %9s  %s\n", "metric", "old", "new", "new/old", "per-round range"
      for (k = 1; k <= nk; k++) {
        key = order[k]; no = nn = 0
        for (r = 1; r <= maxr; r++) {
          if (v[key, "old", r] != "") a[++no] = v[key, "old", r]
          if (v[key, "new", r] != "") b[++nn] = v[key, "new", r]
        }
        if (!no || !nn) continue
        ratios(key)
        mo = median(a, no); mn = median(b, nn); mr = np ? median(c, np) : 0
        # A verdict only with 3 or more rounds that all agree beyond the noise.
        flag = rounds < 3 ? "" : hi < zlo ? "  slower" : lo > zhi ? "  faster" : ""
        printf "%-44s %11.3f %11.3f %8.3fx  %.2f-%.2f%s\n", key, mo, mn, mr, lo, hi, flag
        delete a; delete b; delete c
      }
      printf "\nnoise floor (memcpy, the same code on both sides, and 5%%): per-round ratios %.2f-%.2f\n", zlo, zhi
    }'
}

echo
echo "old: $OLD"
echo "new: $NEW"
echo "$rounds rounds, interleaved; medians; new/old > 1: new faster (time and memory inverted);"
echo "slower/faster only with 3+ rounds all beyond the noise floor (memcpy spread, at least 5%)"
echo "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
report
echo
echo "bench-ab: $((SECONDS - t0)) s; raw outputs in $W/raw" >&2
