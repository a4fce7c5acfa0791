/* AVX512F rank-k row updates (kernels/rowupd.h): up to four rows of y held
 * in registers, 32 doubles (64 floats) of each in four vectors (one vector
 * at a time for the rest, the last masked), while the k rows of X stream
 * past. */
#if defined(__x86_64__) && defined(__GNUC__)
/* Built with -mavx512f (its row of DSQ_SIMD_SOURCES in CMakeLists.txt), called only
 * behind the run-time dispatch of kernels/cpu.h. */
#endif

#include "kernels/rowupd.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>
#include <stdbool.h>

#define INLINE static inline __attribute__((always_inline))

static __mmask8 mask8(int64_t left)
{
    return left >= 8 ? (__mmask8)0xff : left <= 0 ? (__mmask8)0 : (__mmask8)((1u << left) - 1u);
}
static __mmask16 mask16(int64_t left)
{
    return left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1u);
}

/* One column block of R rows by NV vectors (4, or 1 for the last few): y's vectors stay in registers
 * while the k rows of X stream past, every loaded vector of X serving each
 * row. Whole blocks load plainly, the last partial vector with a mask. The coefficient
 * is broadcast from memory (folded into the multiply-add as an embedded
 * broadcast) and the sign is chosen outside the k loop: fnmadd(c, x, y) =
 * round(y - c x), the bits of fma(-c, x, y), with no multiply by -1 per
 * coefficient taking a slot of the FMA ports. */
#define ROWS_BODY(LOAD, BCAST, FMADD, FNMADD)                                                                          \
    for (int r = 0; r < R; r++)                                                                                        \
        for (int q = 0; q < NV; q++) v[r][q] = LOAD(y + r * ldy, q);                                                   \
    if (sign < 0)                                                                                                      \
        for (int64_t k = 0; k < nk; k++) {                                                                             \
            for (int q = 0; q < NV; q++) x[q] = LOAD(X + k * ldx, q);                                                  \
            for (int r = 0; r < R; r++) {                                                                              \
                const __typeof__(v[0][0]) a = BCAST(c[r * ldc + k * cs]);                                              \
                for (int q = 0; q < NV; q++) v[r][q] = FNMADD(a, x[q], v[r][q]);                                       \
            }                                                                                                          \
        }                                                                                                              \
    else                                                                                                               \
        for (int64_t k = 0; k < nk; k++) {                                                                             \
            for (int q = 0; q < NV; q++) x[q] = LOAD(X + k * ldx, q);                                                  \
            for (int r = 0; r < R; r++) {                                                                              \
                const __typeof__(v[0][0]) a = BCAST(c[r * ldc + k * cs]);                                              \
                for (int q = 0; q < NV; q++) v[r][q] = FMADD(a, x[q], v[r][q]);                                        \
            }                                                                                                          \
        }

INLINE void f64_block(const int R, const int NV, bool whole, __mmask8 m, int64_t nk, double *y, int64_t ldy,
                      const double *c, int64_t ldc, int64_t cs, const double *X, int64_t ldx, int sign)
{
    __m512d v[4][4], x[4];
#define LD64(p, q) (whole ? _mm512_loadu_pd((p) + 8 * (q)) : _mm512_maskz_loadu_pd(m, (p) + 8 * (q)))
    ROWS_BODY(LD64, _mm512_set1_pd, _mm512_fmadd_pd, _mm512_fnmadd_pd)
#undef LD64
    for (int r = 0; r < R; r++)
        for (int q = 0; q < NV; q++) {
            if (whole)
                _mm512_storeu_pd(y + r * ldy + 8 * q, v[r][q]);
            else
                _mm512_mask_storeu_pd(y + r * ldy + 8 * q, m, v[r][q]);
        }
}

INLINE void f64_rows(const int R, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                     int64_t cs, const double *X, int64_t ldx, int sign)
{
    int64_t j0 = 0;
    for (; j0 + 32 <= w; j0 += 32) f64_block(R, 4, true, 0, nk, y + j0, ldy, c, ldc, cs, X + j0, ldx, sign);
    for (; j0 + 8 <= w; j0 += 8) f64_block(R, 1, true, 0, nk, y + j0, ldy, c, ldc, cs, X + j0, ldx, sign);
    if (j0 < w) f64_block(R, 1, false, mask8(w - j0), nk, y + j0, ldy, c, ldc, cs, X + j0, ldx, sign);
}

INLINE void f32_block(const int R, const int NV, bool whole, __mmask16 m, int64_t nk, float *y, int64_t ldy,
                      const float *c, int64_t ldc, int64_t cs, const float *X, int64_t ldx, int sign)
{
    __m512 v[4][4], x[4];
#define LD32(p, q) (whole ? _mm512_loadu_ps((p) + 16 * (q)) : _mm512_maskz_loadu_ps(m, (p) + 16 * (q)))
    ROWS_BODY(LD32, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_fnmadd_ps)
#undef LD32
    for (int r = 0; r < R; r++)
        for (int q = 0; q < NV; q++) {
            if (whole)
                _mm512_storeu_ps(y + r * ldy + 16 * q, v[r][q]);
            else
                _mm512_mask_storeu_ps(y + r * ldy + 16 * q, m, v[r][q]);
        }
}

INLINE void f32_rows(const int R, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc, int64_t cs,
                     const float *X, int64_t ldx, int sign)
{
    int64_t j0 = 0;
    for (; j0 + 64 <= w; j0 += 64) f32_block(R, 4, true, 0, nk, y + j0, ldy, c, ldc, cs, X + j0, ldx, sign);
    for (; j0 + 16 <= w; j0 += 16) f32_block(R, 1, true, 0, nk, y + j0, ldy, c, ldc, cs, X + j0, ldx, sign);
    if (j0 < w) f32_block(R, 1, false, mask16(w - j0), nk, y + j0, ldy, c, ldc, cs, X + j0, ldx, sign);
}

#undef ROWS_BODY

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
