/* AVX512F rank-k row updates (kernels/rowupd.h): up to four rows of y held
 * in registers, 32 doubles (64 floats) of each, masked at the end, while the
 * k rows of X stream past; each loaded vector of X serves every row. */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx512f (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/rowupd.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

static __mmask8 mask8(int64_t left) { return left >= 8 ? (__mmask8)0xff : (__mmask8)((1u << left) - 1u); }
static __mmask16 mask16(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1u); }

INLINE void f64_rows(const int R, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                     int64_t cs, const double *X, int64_t ldx, int sign)
{
    const __m512d neg = _mm512_set1_pd(sign < 0 ? -1.0 : 1.0);
    for (int64_t j0 = 0; j0 < w; j0 += 32) {
        __mmask8 m[4];
        __m512d v[4][4];
        for (int q = 0; q < 4; q++) {
            int64_t left = w - j0 - 8 * q;
            m[q] = left > 0 ? mask8(left) : 0;
        }
        for (int r = 0; r < R; r++)
            for (int q = 0; q < 4; q++) v[r][q] = _mm512_maskz_loadu_pd(m[q], y + r * ldy + j0 + 8 * q);
        for (int64_t k = 0; k < nk; k++) {
            const double *xk = X + k * ldx + j0;
            __m512d x[4];
            for (int q = 0; q < 4; q++) x[q] = _mm512_maskz_loadu_pd(m[q], xk + 8 * q);
            for (int r = 0; r < R; r++) {
                const __m512d a = _mm512_mul_pd(neg, _mm512_set1_pd(c[r * ldc + k * cs])); /* exact: a sign */
                for (int q = 0; q < 4; q++) v[r][q] = _mm512_fmadd_pd(a, x[q], v[r][q]);
            }
        }
        for (int r = 0; r < R; r++)
            for (int q = 0; q < 4; q++) _mm512_mask_storeu_pd(y + r * ldy + j0 + 8 * q, m[q], v[r][q]);
    }
}

INLINE void f32_rows(const int R, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc, int64_t cs,
                     const float *X, int64_t ldx, int sign)
{
    const __m512 neg = _mm512_set1_ps(sign < 0 ? -1.0f : 1.0f);
    for (int64_t j0 = 0; j0 < w; j0 += 64) {
        __mmask16 m[4];
        __m512 v[4][4];
        for (int q = 0; q < 4; q++) {
            int64_t left = w - j0 - 16 * q;
            m[q] = left > 0 ? mask16(left) : 0;
        }
        for (int r = 0; r < R; r++)
            for (int q = 0; q < 4; q++) v[r][q] = _mm512_maskz_loadu_ps(m[q], y + r * ldy + j0 + 16 * q);
        for (int64_t k = 0; k < nk; k++) {
            const float *xk = X + k * ldx + j0;
            __m512 x[4];
            for (int q = 0; q < 4; q++) x[q] = _mm512_maskz_loadu_ps(m[q], xk + 16 * q);
            for (int r = 0; r < R; r++) {
                const __m512 a = _mm512_mul_ps(neg, _mm512_set1_ps(c[r * ldc + k * cs]));
                for (int q = 0; q < 4; q++) v[r][q] = _mm512_fmadd_ps(a, x[q], v[r][q]);
            }
        }
        for (int r = 0; r < R; r++)
            for (int q = 0; q < 4; q++) _mm512_mask_storeu_ps(y + r * ldy + j0 + 16 * q, m[q], v[r][q]);
    }
}

void dsq_rowupd_f64_avx512(int64_t nr, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                           int64_t cs, const double *X, int64_t ldx, int sign)
{
    switch (nr) {
    case 1: f64_rows(1, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    case 2: f64_rows(2, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    case 3: f64_rows(3, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    default: f64_rows(4, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    }
}

void dsq_rowupd_f32_avx512(int64_t nr, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc,
                           int64_t cs, const float *X, int64_t ldx, int sign)
{
    switch (nr) {
    case 1: f32_rows(1, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    case 2: f32_rows(2, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    case 3: f32_rows(3, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    default: f32_rows(4, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    }
}

#else

void dsq_rowupd_f64_avx512(int64_t nr, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                           int64_t cs, const double *X, int64_t ldx, int sign)
{
    dsq_rowupd_f64_scalar(nr, nk, w, y, ldy, c, ldc, cs, X, ldx, sign);
}

void dsq_rowupd_f32_avx512(int64_t nr, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc,
                           int64_t cs, const float *X, int64_t ldx, int sign)
{
    dsq_rowupd_f32_scalar(nr, nk, w, y, ldy, c, ldc, cs, X, ldx, sign);
}

#endif
