/* The AVX-512 12x32 micro-kernel of dsq_gemm_f32: 24 accumulators over two
 * adjacent 16-wide panels, twelve broadcasts and two panel loads per step of
 * k. Each element of C gets the same sequence of fused multiply-adds in the
 * same order of k as in the AVX2 6x16 kernel (and the same final add of C
 * when accumulating), so the two give identical bits; only the register
 * width and the tile differ. Built with -mavx512f (its row of
 * DSQ_SIMD_SOURCES in CMakeLists.txt) and called only when
 * dsq_cpu_use_avx512_gemm() holds. */
#include "kernels/gemm_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define ROW(i)                                                                                                         \
    do {                                                                                                               \
        __m512 a = _mm512_set1_ps(A[(i)*lda + p]);                                                                     \
        c##i##a = _mm512_fmadd_ps(a, b0, c##i##a);                                                                     \
        c##i##b = _mm512_fmadd_ps(a, b1, c##i##b);                                                                     \
    } while (0)

#define STORE(i)                                                                                                       \
    do {                                                                                                               \
        float *c = C + (i)*ldc;                                                                                        \
        if (accumulate) {                                                                                              \
            c##i##a = _mm512_add_ps(c##i##a, _mm512_loadu_ps(c));                                                      \
            c##i##b = _mm512_add_ps(c##i##b, _mm512_loadu_ps(c + 16));                                                 \
        }                                                                                                              \
        _mm512_storeu_ps(c, c##i##a);                                                                                  \
        _mm512_storeu_ps(c + 16, c##i##b);                                                                             \
    } while (0)

void dsq_gemm_kernel_avx512(int64_t kc, const float *A, int64_t lda, const float *Bp, float *C, int64_t ldc,
                            bool accumulate)
{
    const float *Bq = Bp + 16 * kc; /* the next panel */
    __m512 c0a = _mm512_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a;
    __m512 c3a = c0a, c3b = c0a, c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a;
    __m512 c6a = c0a, c6b = c0a, c7a = c0a, c7b = c0a, c8a = c0a, c8b = c0a;
    __m512 c9a = c0a, c9b = c0a, c10a = c0a, c10b = c0a, c11a = c0a, c11b = c0a;
    for (int64_t p = 0; p < kc; p++) {
        __m512 b0 = _mm512_loadu_ps(Bp + p * 16), b1 = _mm512_loadu_ps(Bq + p * 16);
        ROW(0);
        ROW(1);
        ROW(2);
        ROW(3);
        ROW(4);
        ROW(5);
        ROW(6);
        ROW(7);
        ROW(8);
        ROW(9);
        ROW(10);
        ROW(11);
    }
    STORE(0);
    STORE(1);
    STORE(2);
    STORE(3);
    STORE(4);
    STORE(5);
    STORE(6);
    STORE(7);
    STORE(8);
    STORE(9);
    STORE(10);
    STORE(11);
}

#else

/* Never dispatched off x86-64 (dsq_cpu_use_avx512_gemm() is false there). */
void dsq_gemm_kernel_avx512(int64_t kc, const float *A, int64_t lda, const float *Bp, float *C, int64_t ldc,
                            bool accumulate)
{
    (void)kc, (void)A, (void)lda, (void)Bp, (void)C, (void)ldc, (void)accumulate;
}

#endif
