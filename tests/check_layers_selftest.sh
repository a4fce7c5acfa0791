#!/usr/bin/env bash
# scripts/check-layers.sh on a small made-up tree: it must name each bad edge
# (upward, relative "../", unknown folder, private header, CPU probe) and stay
# quiet about the allowed ones. Usage: tests/check_layers_selftest.sh SOURCE_ROOT
set -euo pipefail
src="${1:?usage: check_layers_selftest.sh SOURCE_ROOT}"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/docs" "$t/core" "$t/kernels" "$t/quantizers" "$t/runtime/cpu" "$t/calibration"
cp "$src/docs/architecture.md" "$t/docs/"
echo '/* Private to quantizers/ (a.c) */' > "$t/quantizers/p.h"
echo '/* public */' > "$t/calibration/seq.h"
echo '/* public */' > "$t/runtime/cpu/y.h"
printf '#include "p.h"\n#include "core/x.h"\n' > "$t/quantizers/a.c"
printf '#include "cpu/y.h"\n#include "quantizers/a.h"\n' > "$t/runtime/w.c"
printf '#include "calibration/seq.h"\n' > "$t/runtime/x.c"
printf '#include "../../calibration/seq.h"\n#include "quantizers/p.h"\n # include "tests/t.h"\n' > "$t/runtime/cpu/y.c"
printf 'int f(void) { return __builtin_cpu_supports("avx2"); }\n' > "$t/core/z.c"
printf 'int g(void) { return __builtin_cpu_supports("avx2"); }\n' > "$t/kernels/cpu_features.c"

want="core/z.c:1: asks the CPU directly (only kernels/cpu_features.c may; use kernels/cpu.h)
runtime/cpu/y.c:1: runtime/cpu/y.c includes calibration/seq.h (runtime may not include calibration)
runtime/cpu/y.c:2: runtime/cpu/y.c includes quantizers/p.h (private to quantizers/)
runtime/cpu/y.c:3: runtime/cpu/y.c includes tests/t.h (tests is not a layer of docs/architecture.md)
runtime/x.c:1: runtime/x.c includes calibration/seq.h (runtime may not include calibration)"
rc=0
got=$(bash "$src/scripts/check-layers.sh" "$t") || rc=$?
if [ "$rc" != 1 ] || [ "$got" != "$want" ]; then
    printf 'check-layers.sh: exit %s, output:\n%s\nwanted exit 1 and:\n%s\n' "$rc" "$got" "$want"
    exit 1
fi
echo "check-layers.sh selftest: ok"
