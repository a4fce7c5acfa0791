/* The AVX512-BF16 8x32 micro-kernel of dsq_gemm_bf16: 16 accumulators, two
 * panel loads (16 columns x 2 k each) and eight pair broadcasts per k pair.
 * Only called when dsq_cpu_use_bf16_gemm() holds. */
#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#endif

#include "kernels/gemm_bf16.h"

#include <string.h>

#include "core/dtype.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

static inline __m512bh pair_of(const uint16_t *a)
{
    uint32_t v;
    memcpy(&v, a, sizeof v); /* one k pair of one row of A */
    return (__m512bh)_mm512_set1_epi32((int)v);
}

#define ROW(i)                                                                                     \
    do {                                                                                           \
        __m512bh a = pair_of(A + (i) * lda + 2 * p);                                               \
        c##i##0 = _mm512_dpbf16_ps(c##i##0, a, b0);                                                \
        c##i##1 = _mm512_dpbf16_ps(c##i##1, a, b1);                                                \
    } while (0)

#define STORE(i)                                                                                   \
    do {                                                                                           \
        float *c = C + (i) * ldc;                                                                  \
        if (accumulate) {                                                                          \
            c##i##0 = _mm512_add_ps(c##i##0, _mm512_loadu_ps(c));                                  \
            c##i##1 = _mm512_add_ps(c##i##1, _mm512_loadu_ps(c + 16));                             \
        }                                                                                          \
        _mm512_storeu_ps(c, c##i##0);                                                              \
        _mm512_storeu_ps(c + 16, c##i##1);                                                         \
    } while (0)

void dsq_gemm_bf16_kernel_avx512(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C,
                                 int64_t ldc, bool accumulate)
{
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
    __m512 c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    for (int64_t p = 0; p < np; p++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512(Bp + p * 64), b1 = (__m512bh)_mm512_loadu_si512(Bp + p * 64 + 32);
        ROW(0);
        ROW(1);
        ROW(2);
        ROW(3);
        ROW(4);
        ROW(5);
        ROW(6);
        ROW(7);
    }
    STORE(0);
    STORE(1);
    STORE(2);
    STORE(3);
    STORE(4);
    STORE(5);
    STORE(6);
    STORE(7);
}

/* vcvtne2ps2bf16 rounds to nearest even and keeps NaNs quiet, as to_bf16 does */
void dsq_gemm_bf16_round_rows_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols, uint16_t *dst,
                                     int64_t ld)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *s = src + r * lds;
        uint16_t *d = dst + r * ld;
        int64_t c = 0;
        for (; c + 32 <= cols; c += 32) {
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + c + 16), _mm512_loadu_ps(s + c));
            _mm512_storeu_si512(d + c, (__m512i)v);
        }
        for (; c < cols; c++) {
            __m128bh one = _mm_cvtneps_pbh(_mm_set_ss(s[c]));
            uint16_t h;
            memcpy(&h, &one, sizeof h);
            d[c] = h;
        }
        for (; c < ld; c++) d[c] = 0;
    }
}

#else

void dsq_gemm_bf16_round_rows_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols, uint16_t *dst,
                                     int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++) dst[r * ld + c] = c < cols ? dsq_f32_to_bf16(src[r * lds + c]) : 0;
}

void dsq_gemm_bf16_kernel_avx512(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C,
                                 int64_t ldc, bool accumulate)
{
    dsq_gemm_bf16_kernel_scalar(np, A, lda, Bp, C, ldc, accumulate);
}

#endif
