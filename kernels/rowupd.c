/* Dispatch and scalar references of the rank-k row updates (kernels/rowupd.h). */
#include "kernels/rowupd.h"

#include "kernels/cpu.h"

static bool use_avx512(void) { return dsq_cpu_use_avx2() && dsq_cpu_has(DSQ_CPU_AVX512F); }

void dsq_rowupd_f64_scalar(int64_t nk, int64_t w, double *y, const double *c, int64_t cs, const double *X, int64_t ldx,
                           int sign)
{
    for (int64_t k = 0; k < nk; k++) {
        const double a = c[k * cs], *x = X + k * ldx;
        if (sign < 0)
            for (int64_t j = 0; j < w; j++) y[j] -= a * x[j];
        else
            for (int64_t j = 0; j < w; j++) y[j] += a * x[j];
    }
}

void dsq_rowupd_sub_f32_scalar(int64_t nk, int64_t w, float *y, const float *c, int64_t cs, const float *X,
                               int64_t ldx)
{
    for (int64_t k = 0; k < nk; k++) {
        const float a = c[k * cs], *x = X + k * ldx;
        for (int64_t j = 0; j < w; j++) y[j] -= a * x[j];
    }
}

void dsq_rowupd_sub_f64(int64_t nk, int64_t w, double *y, const double *c, int64_t cs, const double *X, int64_t ldx)
{
    if (use_avx512()) dsq_rowupd_f64_avx512(nk, w, y, c, cs, X, ldx, -1);
    else dsq_rowupd_f64_scalar(nk, w, y, c, cs, X, ldx, -1);
}

void dsq_rowupd_add_f64(int64_t nk, int64_t w, double *y, const double *c, int64_t cs, const double *X, int64_t ldx)
{
    if (use_avx512()) dsq_rowupd_f64_avx512(nk, w, y, c, cs, X, ldx, 1);
    else dsq_rowupd_f64_scalar(nk, w, y, c, cs, X, ldx, 1);
}

void dsq_rowupd_sub_f32(int64_t nk, int64_t w, float *y, const float *c, int64_t cs, const float *X, int64_t ldx)
{
    if (use_avx512()) dsq_rowupd_sub_f32_avx512(nk, w, y, c, cs, X, ldx);
    else dsq_rowupd_sub_f32_scalar(nk, w, y, c, cs, X, ldx);
}
