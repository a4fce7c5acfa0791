/* AVX512F rank-k row updates (kernels/rowupd.h): y in up to four registers
 * per 32 doubles (64 floats) of the row, masked at the end, while the k rows
 * of X stream past. Multiply and subtract stay two instructions. */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx512f (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/rowupd.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

static __mmask8 mask8(int64_t left) { return left >= 8 ? (__mmask8)0xff : (__mmask8)((1u << left) - 1u); }
static __mmask16 mask16(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u); }

void dsq_rowupd_f64_avx512(int64_t nk, int64_t w, double *y, const double *c, int64_t cs, const double *X, int64_t ldx,
                           int sign)
{
    for (int64_t j0 = 0; j0 < w; j0 += 32) {
        __mmask8 m[4];
        __m512d v[4];
        for (int q = 0; q < 4; q++) {
            int64_t left = w - j0 - 8 * q;
            m[q] = left > 0 ? mask8(left) : 0;
            v[q] = _mm512_maskz_loadu_pd(m[q], y + j0 + 8 * q);
        }
        for (int64_t k = 0; k < nk; k++) {
            const __m512d a = _mm512_set1_pd(c[k * cs]);
            const double *x = X + k * ldx + j0;
            for (int q = 0; q < 4; q++) {
                __m512d p = _mm512_mul_pd(a, _mm512_maskz_loadu_pd(m[q], x + 8 * q));
                v[q] = sign < 0 ? _mm512_sub_pd(v[q], p) : _mm512_add_pd(v[q], p);
            }
        }
        for (int q = 0; q < 4; q++) _mm512_mask_storeu_pd(y + j0 + 8 * q, m[q], v[q]);
    }
}

void dsq_rowupd_sub_f32_avx512(int64_t nk, int64_t w, float *y, const float *c, int64_t cs, const float *X,
                               int64_t ldx)
{
    for (int64_t j0 = 0; j0 < w; j0 += 64) {
        __mmask16 m[4];
        __m512 v[4];
        for (int q = 0; q < 4; q++) {
            int64_t left = w - j0 - 16 * q;
            m[q] = left > 0 ? mask16(left) : 0;
            v[q] = _mm512_maskz_loadu_ps(m[q], y + j0 + 16 * q);
        }
        for (int64_t k = 0; k < nk; k++) {
            const __m512 a = _mm512_set1_ps(c[k * cs]);
            const float *x = X + k * ldx + j0;
            for (int q = 0; q < 4; q++) v[q] = _mm512_sub_ps(v[q], _mm512_mul_ps(a, _mm512_maskz_loadu_ps(m[q], x + 16 * q)));
        }
        for (int q = 0; q < 4; q++) _mm512_mask_storeu_ps(y + j0 + 16 * q, m[q], v[q]);
    }
}

#else

void dsq_rowupd_f64_avx512(int64_t nk, int64_t w, double *y, const double *c, int64_t cs, const double *X, int64_t ldx,
                           int sign)
{
    dsq_rowupd_f64_scalar(nk, w, y, c, cs, X, ldx, sign);
}

void dsq_rowupd_sub_f32_avx512(int64_t nk, int64_t w, float *y, const float *c, int64_t cs, const float *X,
                               int64_t ldx)
{
    dsq_rowupd_sub_f32_scalar(nk, w, y, c, cs, X, ldx);
}

#endif
