/* The AVX512-BF16 8x32 micro-kernel of dsq_gemm_bf16: 16 accumulators, two
 * panel loads (16 columns x 2 k each) and eight pair broadcasts per k pair.
 * Only called when dsq_cpu_use_bf16_gemm() holds. */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/gemm_bf16.h"

#include <string.h>

#include "core/dtype.h"
#include "kernels/transpose_avx512.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

static inline __m512bh pair_of(const uint16_t *a)
{
    uint32_t v;
    memcpy(&v, a, sizeof v); /* one k pair of one row of A */
    return (__m512bh)_mm512_set1_epi32((int)v);
}

#define ROW(i)                                                                                                         \
    do {                                                                                                               \
        __m512bh a = pair_of(A + (i)*lda + 2 * p);                                                                     \
        c##i##0 = _mm512_dpbf16_ps(c##i##0, a, b0);                                                                    \
        c##i##1 = _mm512_dpbf16_ps(c##i##1, a, b1);                                                                    \
    } while (0)

#define STORE(i)                                                                                                       \
    do {                                                                                                               \
        float *c = C + (i)*ldc;                                                                                        \
        if (accumulate) {                                                                                              \
            c##i##0 = _mm512_add_ps(c##i##0, _mm512_loadu_ps(c));                                                      \
            c##i##1 = _mm512_add_ps(c##i##1, _mm512_loadu_ps(c + 16));                                                 \
        }                                                                                                              \
        _mm512_storeu_ps(c, c##i##0);                                                                                  \
        _mm512_storeu_ps(c + 16, c##i##1);                                                                             \
    } while (0)

void dsq_gemm_bf16_kernel_avx512(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C, int64_t ldc,
                                 bool accumulate)
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

void dsq_gemm_bf16_pack_bt_avx512(const float *B, int64_t ldb, int64_t nc, int64_t kc, uint16_t *dst, int64_t nr)
{
    int64_t np = (kc + 1) / 2;
    for (int64_t c0 = 0; c0 < nc; c0 += 16) {
        int64_t cn = nc - c0 < 16 ? nc - c0 : 16;
        for (int64_t k0 = 0; k0 < kc; k0 += 32) {
            int64_t kn = kc - k0 < 32 ? kc - k0 : 32;
            __mmask16 lo = (__mmask16)(kn >= 16 ? 0xffffu : (1u << kn) - 1u);
            __mmask16 hi = (__mmask16)(kn >= 32 ? 0xffffu : kn <= 16 ? 0u : (1u << (kn - 16)) - 1u);
            __m512i r[16];
            for (int i = 0; i < 16; i++) {
                if (i >= cn) {
                    r[i] = _mm512_setzero_si512();
                    continue;
                }
                const float *s = B + (c0 + i) * ldb + k0;
                r[i] = (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, s + 16), _mm512_maskz_loadu_ps(lo, s));
            }
            dsq_transpose16_epi32(r);
            int64_t pn = (kn + 1) / 2, p0 = k0 / 2;
            for (int64_t j = 0; j < pn && p0 + j < np; j++) {
                uint16_t *d = dst + ((p0 + j) * nr + c0) * 2;
                if (cn == 16)
                    _mm512_storeu_si512(d, r[j]);
                else
                    _mm512_mask_storeu_epi32(d, (__mmask16)((1u << cn) - 1u), r[j]);
            }
        }
    }
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

void dsq_gemm_bf16_pack_bt_avx512(const float *B, int64_t ldb, int64_t nc, int64_t kc, uint16_t *dst, int64_t nr)
{
    int64_t np = (kc + 1) / 2;
    for (int64_t c = 0; c < nc; c++)
        for (int64_t p = 0; p < np; p++)
            for (int h = 0; h < 2; h++)
                dst[(p * nr + c) * 2 + h] = 2 * p + h < kc ? dsq_f32_to_bf16(B[c * ldb + 2 * p + h]) : 0;
}

void dsq_gemm_bf16_round_rows_avx512(const float *src, int64_t lds, int64_t rows, int64_t cols, uint16_t *dst,
                                     int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++) dst[r * ld + c] = c < cols ? dsq_f32_to_bf16(src[r * lds + c]) : 0;
}

void dsq_gemm_bf16_kernel_avx512(int64_t np, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C, int64_t ldc,
                                 bool accumulate)
{
    dsq_gemm_bf16_kernel_scalar(np, A, lda, Bp, C, ldc, accumulate);
}

#endif
