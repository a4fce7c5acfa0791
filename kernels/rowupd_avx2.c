/* AVX2+FMA rank-k row updates (kernels/rowupd.h): up to four rows of y held
 * in registers, 8 doubles (16 floats) of each in two vectors, masked loads
 * and stores at the end, while the k rows of X stream past. */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx2 -mfma (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/rowupd.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

/* Lanes i < left on (all of them from 4 or 8 on). */
static __m256i mask64(int64_t left)
{
    const __m256i idx = _mm256_setr_epi64x(0, 1, 2, 3);
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(left < 0 ? 0 : left), idx);
}

static __m256i mask32(int64_t left)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left < 0 ? 0 : left > 8 ? 8 : (int)left), idx);
}

INLINE void f64_rows(const int R, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                     int64_t cs, const double *X, int64_t ldx, int sign)
{
    const double s = sign < 0 ? -1.0 : 1.0;
    for (int64_t j0 = 0; j0 < w; j0 += 8) {
        const __m256i m0 = mask64(w - j0), m1 = mask64(w - j0 - 4);
        __m256d v[4][2];
        for (int r = 0; r < R; r++) {
            v[r][0] = _mm256_maskload_pd(y + r * ldy + j0, m0);
            v[r][1] = _mm256_maskload_pd(y + r * ldy + j0 + 4, m1);
        }
        for (int64_t k = 0; k < nk; k++) {
            const double *xk = X + k * ldx + j0;
            const __m256d x0 = _mm256_maskload_pd(xk, m0), x1 = _mm256_maskload_pd(xk + 4, m1);
            for (int r = 0; r < R; r++) {
                const __m256d a = _mm256_set1_pd(s * c[r * ldc + k * cs]); /* exact: a sign */
                v[r][0] = _mm256_fmadd_pd(a, x0, v[r][0]);
                v[r][1] = _mm256_fmadd_pd(a, x1, v[r][1]);
            }
        }
        for (int r = 0; r < R; r++) {
            _mm256_maskstore_pd(y + r * ldy + j0, m0, v[r][0]);
            _mm256_maskstore_pd(y + r * ldy + j0 + 4, m1, v[r][1]);
        }
    }
}

INLINE void f32_rows(const int R, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc, int64_t cs,
                     const float *X, int64_t ldx, int sign)
{
    const float s = sign < 0 ? -1.0f : 1.0f;
    for (int64_t j0 = 0; j0 < w; j0 += 16) {
        const __m256i m0 = mask32(w - j0), m1 = mask32(w - j0 - 8);
        __m256 v[4][2];
        for (int r = 0; r < R; r++) {
            v[r][0] = _mm256_maskload_ps(y + r * ldy + j0, m0);
            v[r][1] = _mm256_maskload_ps(y + r * ldy + j0 + 8, m1);
        }
        for (int64_t k = 0; k < nk; k++) {
            const float *xk = X + k * ldx + j0;
            const __m256 x0 = _mm256_maskload_ps(xk, m0), x1 = _mm256_maskload_ps(xk + 8, m1);
            for (int r = 0; r < R; r++) {
                const __m256 a = _mm256_set1_ps(s * c[r * ldc + k * cs]);
                v[r][0] = _mm256_fmadd_ps(a, x0, v[r][0]);
                v[r][1] = _mm256_fmadd_ps(a, x1, v[r][1]);
            }
        }
        for (int r = 0; r < R; r++) {
            _mm256_maskstore_ps(y + r * ldy + j0, m0, v[r][0]);
            _mm256_maskstore_ps(y + r * ldy + j0 + 8, m1, v[r][1]);
        }
    }
}

void dsq_rowupd_f64_avx2(int64_t nr, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                         int64_t cs, const double *X, int64_t ldx, int sign)
{
    switch (nr) {
    case 1: f64_rows(1, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    case 2: f64_rows(2, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    case 3: f64_rows(3, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    default: f64_rows(4, nk, w, y, ldy, c, ldc, cs, X, ldx, sign); break;
    }
}

void dsq_rowupd_f32_avx2(int64_t nr, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc,
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

void dsq_rowupd_f64_avx2(int64_t nr, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                         int64_t cs, const double *X, int64_t ldx, int sign)
{
    dsq_rowupd_f64_scalar(nr, nk, w, y, ldy, c, ldc, cs, X, ldx, sign);
}

void dsq_rowupd_f32_avx2(int64_t nr, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc,
                         int64_t cs, const float *X, int64_t ldx, int sign)
{
    dsq_rowupd_f32_scalar(nr, nk, w, y, ldy, c, ldc, cs, X, ldx, sign);
}

#endif
