/* The AVX2 8x32 micro-kernel of dsq_gemm_bf16, for CPUs without AVX512-BF16:
 * the scalar kernel's arithmetic (per k pair, the odd product added first,
 * then the even one, each product exact in F32, no fused multiply-add) eight
 * columns at a time, so it gives the scalar kernel's bits. BF16 widens to F32
 * by a shift: the panel's 32-bit words hold a pair [even | odd << 16]. */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx2 (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/gemm_bf16.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

/* Eight rows times columns [j0, j0 + 8) of the panel over np pairs. */
static void cols8(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, int j0, float *C, int64_t ldc,
                  bool accumulate)
{
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
    __m256 acc[DSQ_GEMM_BF16_MR];
    for (int i = 0; i < DSQ_GEMM_BF16_MR; i++) acc[i] = _mm256_setzero_ps();
    for (int64_t p = 0; p < np; p++) {
        __m256i w = _mm256_loadu_si256((const __m256i *)(Bp + p * DSQ_GEMM_BF16_NR * 2 + j0 * 2));
        __m256 b1 = _mm256_castsi256_ps(_mm256_and_si256(w, hi)), b0 = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
        for (int i = 0; i < DSQ_GEMM_BF16_MR; i++) {
            uint32_t v;
            memcpy(&v, A + i * lda + 2 * p, sizeof v);
            __m256i a = _mm256_set1_epi32((int)v);
            __m256 a1 = _mm256_castsi256_ps(_mm256_and_si256(a, hi)),
                   a0 = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
            acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(a1, b1));
            acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(a0, b0));
        }
    }
    for (int i = 0; i < DSQ_GEMM_BF16_MR; i++) {
        float *c = C + i * ldc + j0;
        _mm256_storeu_ps(c, accumulate ? _mm256_add_ps(_mm256_loadu_ps(c), acc[i]) : acc[i]);
    }
}

void dsq_gemm_bf16_kernel_avx2(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C, int64_t ldc,
                               bool accumulate)
{
    for (int j0 = 0; j0 < DSQ_GEMM_BF16_NR; j0 += 8) cols8(np, A, lda, Bp, j0, C, ldc, accumulate);
}

#else

void dsq_gemm_bf16_kernel_avx2(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C, int64_t ldc,
                               bool accumulate)
{
    dsq_gemm_bf16_kernel_scalar(np, A, lda, Bp, C, ldc, accumulate);
}

#endif
