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
#include <stdbool.h>

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

/* One column block of R rows: y's vectors stay in registers while the k rows
 * of X stream past. Whole blocks load plainly (a masked load costs several
 * times a plain one on AMD cores, and the k loop is load-bound); the
 * coefficient is broadcast from memory, a load rather than a shuffle.
 * Subtraction is fnmadd(c, x, y) = round(y - c x), the same bits as fma(-c, x, y). */
#define ROWS_BODY(LOAD, BCAST, FMADD, FNMADD)                                                                          \
    for (int r = 0; r < R; r++) v[r][0] = LOAD(y + r * ldy, 0), v[r][1] = LOAD(y + r * ldy, 1);                        \
    if (sign < 0)                                                                                                      \
        for (int64_t k = 0; k < nk; k++) {                                                                             \
            const __typeof__(v[0][0]) x0 = LOAD(X + k * ldx, 0), x1 = LOAD(X + k * ldx, 1);                            \
            for (int r = 0; r < R; r++) {                                                                              \
                const __typeof__(v[0][0]) a = BCAST(c + r * ldc + k * cs);                                             \
                v[r][0] = FNMADD(a, x0, v[r][0]);                                                                      \
                v[r][1] = FNMADD(a, x1, v[r][1]);                                                                      \
            }                                                                                                          \
        }                                                                                                              \
    else                                                                                                               \
        for (int64_t k = 0; k < nk; k++) {                                                                             \
            const __typeof__(v[0][0]) x0 = LOAD(X + k * ldx, 0), x1 = LOAD(X + k * ldx, 1);                            \
            for (int r = 0; r < R; r++) {                                                                              \
                const __typeof__(v[0][0]) a = BCAST(c + r * ldc + k * cs);                                             \
                v[r][0] = FMADD(a, x0, v[r][0]);                                                                       \
                v[r][1] = FMADD(a, x1, v[r][1]);                                                                       \
            }                                                                                                          \
        }

INLINE void f64_block(const int R, bool whole, __m256i m0, __m256i m1, int64_t nk, double *y, int64_t ldy,
                      const double *c, int64_t ldc, int64_t cs, const double *X, int64_t ldx, int sign)
{
    __m256d v[4][2];
#define LD64(p, h) (whole ? _mm256_loadu_pd((p) + 4 * (h)) : _mm256_maskload_pd((p) + 4 * (h), (h) ? m1 : m0))
    ROWS_BODY(LD64, _mm256_broadcast_sd, _mm256_fmadd_pd, _mm256_fnmadd_pd)
#undef LD64
    for (int r = 0; r < R; r++) {
        if (whole) {
            _mm256_storeu_pd(y + r * ldy, v[r][0]);
            _mm256_storeu_pd(y + r * ldy + 4, v[r][1]);
        } else {
            _mm256_maskstore_pd(y + r * ldy, m0, v[r][0]);
            _mm256_maskstore_pd(y + r * ldy + 4, m1, v[r][1]);
        }
    }
}

INLINE void f64_rows(const int R, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                     int64_t cs, const double *X, int64_t ldx, int sign)
{
    const __m256i none = _mm256_setzero_si256();
    int64_t j0 = 0;
    for (; j0 + 8 <= w; j0 += 8) f64_block(R, true, none, none, nk, y + j0, ldy, c, ldc, cs, X + j0, ldx, sign);
    if (j0 < w) f64_block(R, false, mask64(w - j0), mask64(w - j0 - 4), nk, y + j0, ldy, c, ldc, cs, X + j0, ldx, sign);
}

INLINE void f32_block(const int R, bool whole, __m256i m0, __m256i m1, int64_t nk, float *y, int64_t ldy,
                      const float *c, int64_t ldc, int64_t cs, const float *X, int64_t ldx, int sign)
{
    __m256 v[4][2];
#define LD32(p, h) (whole ? _mm256_loadu_ps((p) + 8 * (h)) : _mm256_maskload_ps((p) + 8 * (h), (h) ? m1 : m0))
    ROWS_BODY(LD32, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_fnmadd_ps)
#undef LD32
    for (int r = 0; r < R; r++) {
        if (whole) {
            _mm256_storeu_ps(y + r * ldy, v[r][0]);
            _mm256_storeu_ps(y + r * ldy + 8, v[r][1]);
        } else {
            _mm256_maskstore_ps(y + r * ldy, m0, v[r][0]);
            _mm256_maskstore_ps(y + r * ldy + 8, m1, v[r][1]);
        }
    }
}

INLINE void f32_rows(const int R, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc, int64_t cs,
                     const float *X, int64_t ldx, int sign)
{
    const __m256i none = _mm256_setzero_si256();
    int64_t j0 = 0;
    for (; j0 + 16 <= w; j0 += 16) f32_block(R, true, none, none, nk, y + j0, ldy, c, ldc, cs, X + j0, ldx, sign);
    if (j0 < w) f32_block(R, false, mask32(w - j0), mask32(w - j0 - 8), nk, y + j0, ldy, c, ldc, cs, X + j0, ldx, sign);
}

#undef ROWS_BODY

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
