#!/usr/bin/env bash
# Fails when the library exports a symbol without the dsq_ prefix (one line per
# symbol). Usage: scripts/check-symbols.sh path/to/libdsquant.a
set -euo pipefail
lib="${1:?usage: check-symbols.sh LIBRARY}"
# Defined global symbols only. ".gomp_critical_user_<name>" is the lock GCC
# makes for "#pragma omp critical(<name>)"; ours are named dsq_* too; clang's
# libomp codegen adds ".gomp_critical_user_.reduction.var" for reductions. nvcc
# (a CUDA build) exports what C++ gives internal linkage: names in an
# anonymous namespace (_GLOBAL__N_, their __device_stub__ launchers too) and
# the exception-personality reference; those cannot clash with anyone's.
bad=$(nm -g --defined-only "$lib" |
    awk 'NF == 3 && $3 !~ /^dsq_/ && $3 !~ /^\.gomp_critical_user_dsq_/ &&
         $3 != ".gomp_critical_user_.reduction.var" && $3 !~ /_GLOBAL__N_/ &&
         $3 != "DW.ref.__gxx_personality_v0" { print $3 }' | sort -u)
if [ -n "$bad" ]; then
    printf '%s\n' "$bad" | sed "s|^|$lib: exported without the dsq_ prefix: |"
    exit 1
fi
