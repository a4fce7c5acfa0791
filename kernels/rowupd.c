/* Dispatch and scalar references of the rank-k row updates (kernels/rowupd.h). */
#include "kernels/rowupd.h"

#include <math.h>

#include "kernels/cpu.h"

/* The AVX-512 condition of the F32 GEMM: AVX2 in use, AVX512F present, AVX2 alone not forced. */
static bool use_avx512(void) { return dsq_cpu_use_avx512_gemm(); }

void dsq_rowupd_f64_scalar(int64_t nr, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                           int64_t cs, const double *X, int64_t ldx, int sign)
{
    for (int64_t r = 0; r < nr; r++)
        for (int64_t k = 0; k < nk; k++) {
            const double a = sign < 0 ? -c[r * ldc + k * cs] : c[r * ldc + k * cs];
            const double *x = X + k * ldx;
            double *yr = y + r * ldy;
            for (int64_t j = 0; j < w; j++) yr[j] = fma(a, x[j], yr[j]);
        }
}

void dsq_rowupd_f32_scalar(int64_t nr, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc,
                           int64_t cs, const float *X, int64_t ldx, int sign)
{
    for (int64_t r = 0; r < nr; r++)
        for (int64_t k = 0; k < nk; k++) {
            const float a = sign < 0 ? -c[r * ldc + k * cs] : c[r * ldc + k * cs];
            const float *x = X + k * ldx;
            float *yr = y + r * ldy;
            for (int64_t j = 0; j < w; j++) yr[j] = fmaf(a, x[j], yr[j]);
        }
}

void dsq_rowupd_f64(int64_t nr, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc, int64_t cs,
                    const double *X, int64_t ldx, int sign)
{
    if (nr <= 0 || nk <= 0 || w <= 0) return;
    const bool v512 = use_avx512(), v2 = !v512 && dsq_cpu_use_avx2();
    if (!v512 && !v2) {
        dsq_rowupd_f64_scalar(nr, nk, w, y, ldy, c, ldc, cs, X, ldx, sign);
        return;
    }
    for (int64_t r = 0; r < nr; r += DSQ_ROWUPD_ROWS) {
        const int64_t g = nr - r < DSQ_ROWUPD_ROWS ? nr - r : DSQ_ROWUPD_ROWS;
        if (v512)
            dsq_rowupd_f64_avx512(g, nk, w, y + r * ldy, ldy, c + r * ldc, ldc, cs, X, ldx, sign);
        else
            dsq_rowupd_f64_avx2(g, nk, w, y + r * ldy, ldy, c + r * ldc, ldc, cs, X, ldx, sign);
    }
}

void dsq_rowupd_f32(int64_t nr, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc, int64_t cs,
                    const float *X, int64_t ldx, int sign)
{
    if (nr <= 0 || nk <= 0 || w <= 0) return;
    const bool v512 = use_avx512(), v2 = !v512 && dsq_cpu_use_avx2();
    if (!v512 && !v2) {
        dsq_rowupd_f32_scalar(nr, nk, w, y, ldy, c, ldc, cs, X, ldx, sign);
        return;
    }
    for (int64_t r = 0; r < nr; r += DSQ_ROWUPD_ROWS) {
        const int64_t g = nr - r < DSQ_ROWUPD_ROWS ? nr - r : DSQ_ROWUPD_ROWS;
        if (v512)
            dsq_rowupd_f32_avx512(g, nk, w, y + r * ldy, ldy, c + r * ldc, ldc, cs, X, ldx, sign);
        else
            dsq_rowupd_f32_avx2(g, nk, w, y + r * ldy, ldy, c + r * ldc, ldc, cs, X, ldx, sign);
    }
}

void dsq_rowupd_sub_f32(int64_t nk, int64_t w, float *y, const float *c, int64_t cs, const float *X, int64_t ldx)
{
    dsq_rowupd_f32(1, nk, w, y, 0, c, 0, cs, X, ldx, -1);
}
