#!/usr/bin/env bash
# Fails when the library exports a symbol without the dsq_ prefix (one line per
# symbol). Usage: scripts/check-symbols.sh path/to/libdsquant.a
set -euo pipefail
lib="${1:?usage: check-symbols.sh LIBRARY}"
# Defined global symbols only. Compiler-made ones carry our name after their
# own prefix, and it must be dsq_ too: ".gomp_critical_user_<name>" is the lock
# of "#pragma omp critical(<name>)", "__odr_asan.<global>" ASan's ODR marker.
# Not ours to name: weak symbols (V/W: C++ inline functions and COMDAT data
# from headers, such as CUDA's dim3) and nvcc's anonymous namespace
# (_GLOBAL__N_<file hash>, unique per file, so it cannot collide).
bad=$(nm -g --defined-only "$lib" |
    awk 'NF == 3 && $2 !~ /^[VWvw]$/ && $3 !~ /_GLOBAL__N_/ {
             n = $3; sub(/^(\.gomp_critical_user_|__odr_asan\.)/, "", n); if (n !~ /^dsq_/) print $3 }' |
    sort -u)
if [ -n "$bad" ]; then
    printf '%s\n' "$bad" | sed "s|^|$lib: exported without the dsq_ prefix: |"
    exit 1
fi
