#!/usr/bin/env bash
# Builds the CUDA test and benchmark binaries here (sm_90) and puts them, with
# the shared libraries a bare GPU machine may lack (cmocka, libgomp, cudart),
# into DIR (default .gpu-bundle, ignored by git), for
# `scripts/gpu-check.sh --prebuilt DIR` on a machine that has the NVIDIA
# driver and cuBLAS but not our build dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.gpu-bundle}"
cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DDSQ_CUDA=ON -DDSQ_CUDA_ARCHS=90 >/dev/null
cmake --build build-cuda -j"$(nproc)" --target test_cuda test_cuda_w4a16 test_cuda_gemm bench_cuda >/dev/null
rm -rf "$dir"
mkdir -p "$dir/lib"
for b in test_cuda test_cuda_w4a16 test_cuda_gemm bench_cuda; do cp build-cuda/$b "$dir/"; done
ldd build-cuda/test_cuda_w4a16 | awk '/libcmocka|libgomp|libcudart/ { print $3 }' | sort -u | xargs -r -I{} cp -L {} "$dir/lib/"
echo "built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes') on $(hostname), sm_90, $(nvcc --version | tail -1)" >"$dir/BUILD_INFO"
du -sh "$dir"
