/* F32 -> F16 / BF16 row conversion on the device.
 *
 * The device rounding is integer-only bit manipulation, so it does not depend
 * on the GPU's float modes (FTZ, FMA contraction). It must give exactly what
 * core/fpconv.c gives (quantizers rely on byte-identical f16): the CPU version
 * uses a float addition for f16 subnormals where this one shifts, and
 * tests/test_cuda.c compares the two over many values, every f16/bf16 tie and
 * boundary included. The conversions are __host__ __device__ so that the same
 * code can be checked on a machine without a GPU. */
#include "runtime/cuda/cuda_internal.cuh"

extern "C" {
#include "core/log.h"
}

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

namespace
{

__host__ __device__ inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* m / 2^shift rounded to nearest, ties to even (1 <= shift <= 31). */
__host__ __device__ inline uint32_t rne_shift(uint32_t m, uint32_t shift)
{
    uint32_t half = 1u << (shift - 1), rem = m & ((half << 1) - 1), q = m >> shift;
    return q + ((rem > half) | ((rem == half) & q & 1u));
}

__host__ __device__ inline uint16_t f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    uint32_t h;
    if (a > 0x7f800000u) {
        h = 0x7e00u; /* NaN: sign|0x7E00, like ggml */
    } else if (a >= 0x477ff000u) {
        h = 0x7c00u; /* >= 65520 rounds to Inf */
    } else if (a >= 0x38800000u) {
        h = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13; /* rebias 127 -> 15, round 13 bits */
    } else {
        /* f16 subnormal: units of 2^-24; below 2^-25 the clamped shift gives 0. */
        uint32_t e = a >> 23, shift = e < 101u ? 25u : 126u - e;
        h = rne_shift((a & 0x7fffffu) | 0x800000u, shift);
    }
    return (uint16_t)(sign | h);
}

__host__ __device__ inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet, top payload kept */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__global__ void k_f32_to_f16(const float *__restrict__ src, uint16_t *__restrict__ dst, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = f32_to_f16(src[i]);
}

__global__ void k_f32_to_bf16(const float *__restrict__ src, uint16_t *__restrict__ dst, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = f32_to_bf16(src[i]);
}

/* Elements per round trip: bounds device memory at 384 MiB. */
constexpr size_t k_chunk = size_t(1) << 26;
constexpr int k_threads = 256;
constexpr unsigned k_max_blocks = 4096;

bool probe_device()
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        DSQ_LOGD("CUDA: no usable device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "none visible");
        (void)cudaGetLastError();
        return false;
    }
    /* The device must be able to run the architectures this build carries. */
    cudaFuncAttributes attr;
    e = cudaFuncGetAttributes(&attr, k_f32_to_f16);
    if (e != cudaSuccess) {
        DSQ_LOGD("CUDA: device cannot run this build's kernels (%s)", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return false;
    }
    return true;
}

} // namespace

extern "C" bool dsq_cuda_available(void)
{
    static const bool available = probe_device(); /* C++ makes this initialisation thread-safe */
    return available;
}

extern "C" dsq_status dsq_cuda_convert_f32(const float *src, dsq_type dst_t, void *dst, size_t n)
{
    if (dst_t != DSQ_TYPE_F16 && dst_t != DSQ_TYPE_BF16)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA conversion from f32 to %s is not implemented", dsq_type_name(dst_t));
    if (n == 0) return DSQ_OK;
    if (!dsq_cuda_available()) return dsq_fail(DSQ_ERR_UNSUPPORTED, "no usable CUDA device");
    size_t chunk = n < k_chunk ? n : k_chunk;
    float *d_src = nullptr;
    uint16_t *d_dst = nullptr;
    cudaError_t e = cudaMalloc(&d_src, chunk * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc(&d_dst, chunk * sizeof(uint16_t));
    dsq_status s = e == cudaSuccess ? DSQ_OK : dsq_cuda_fail_(e, "allocation");
    uint16_t *out = static_cast<uint16_t *>(dst);
    for (size_t i = 0; s == DSQ_OK && i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        unsigned blocks = (unsigned)((k + k_threads - 1) / k_threads);
        if (blocks > k_max_blocks) blocks = k_max_blocks;
        e = cudaMemcpy(d_src, src + i, k * sizeof(float), cudaMemcpyHostToDevice);
        if (e != cudaSuccess) {
            s = dsq_cuda_fail_(e, "copy to device");
            break;
        }
        if (dst_t == DSQ_TYPE_F16)
            k_f32_to_f16<<<blocks, k_threads>>>(d_src, d_dst, k);
        else
            k_f32_to_bf16<<<blocks, k_threads>>>(d_src, d_dst, k);
        e = cudaGetLastError();
        if (e == cudaSuccess) e = cudaMemcpy(out + i, d_dst, k * sizeof(uint16_t), cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) s = dsq_cuda_fail_(e, "conversion kernel");
    }
    cudaFree(d_src);
    cudaFree(d_dst);
    return s;
}

extern "C" dsq_status dsq_cuda_convert_f32_dev(const float *d_src, dsq_type dst_t, void *d_dst, size_t n)
{
    if (dst_t != DSQ_TYPE_F16 && dst_t != DSQ_TYPE_BF16)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "CUDA conversion from f32 to %s is not implemented", dsq_type_name(dst_t));
    if (n == 0) return DSQ_OK;
    if (!dsq_cuda_available()) return dsq_fail(DSQ_ERR_UNSUPPORTED, "no usable CUDA device");
    size_t want = (n + k_threads - 1) / k_threads;
    unsigned blocks = want > k_max_blocks ? k_max_blocks : (unsigned)want;
    if (dst_t == DSQ_TYPE_F16)
        k_f32_to_f16<<<blocks, k_threads>>>(d_src, static_cast<uint16_t *>(d_dst), n);
    else
        k_f32_to_bf16<<<blocks, k_threads>>>(d_src, static_cast<uint16_t *>(d_dst), n);
    return dsq_cuda_launched_("conversion kernel");
}
