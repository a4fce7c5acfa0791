/* The AVX2/FMA 6x16 micro-kernel: 12 accumulators, two panel loads and six
 * broadcasts per step of k. Only called when dsq_cpu_use_avx2() holds. */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx2 -mfma (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/gemm_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define ROW(i)                                                                                     \
    do {                                                                                           \
        __m256 a = _mm256_broadcast_ss(A + (i) * lda + p);                                         \
        c##i##0 = _mm256_fmadd_ps(a, b0, c##i##0);                                                 \
        c##i##1 = _mm256_fmadd_ps(a, b1, c##i##1);                                                 \
    } while (0)

#define STORE(i)                                                                                   \
    do {                                                                                           \
        float *c = C + (i) * ldc;                                                                  \
        if (accumulate) {                                                                          \
            c##i##0 = _mm256_add_ps(c##i##0, _mm256_loadu_ps(c));                                  \
            c##i##1 = _mm256_add_ps(c##i##1, _mm256_loadu_ps(c + 8));                              \
        }                                                                                          \
        _mm256_storeu_ps(c, c##i##0);                                                              \
        _mm256_storeu_ps(c + 8, c##i##1);                                                          \
    } while (0)

void dsq_gemm_kernel_avx2(int64_t kc, const float *A, int64_t lda, const float *Bp, float *C, int64_t ldc,
                          bool accumulate)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t p = 0; p < kc; p++) {
        __m256 b0 = _mm256_load_ps(Bp + p * 16), b1 = _mm256_load_ps(Bp + p * 16 + 8);
        ROW(0);
        ROW(1);
        ROW(2);
        ROW(3);
        ROW(4);
        ROW(5);
    }
    STORE(0);
    STORE(1);
    STORE(2);
    STORE(3);
    STORE(4);
    STORE(5);
}

#else

void dsq_gemm_kernel_avx2(int64_t kc, const float *A, int64_t lda, const float *Bp, float *C, int64_t ldc,
                          bool accumulate)
{
    dsq_gemm_kernel_scalar(kc, A, lda, Bp, C, ldc, accumulate);
}

#endif
