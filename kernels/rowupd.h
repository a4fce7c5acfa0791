/* Rank-k row updates, the inner loops of GPTQ's factorization and lazy
 * batch updates (quantizers/gptq.c): rows r < nr of y each take their own
 * coefficients, y[r][j] = fma(-/+c[r][k], X[k][j], y[r][j]) for k in order.
 * Each element sees the same fused operations in the same order on every
 * path and for every grouping of rows, so every path gives the scalar loop's
 * bits (the build has -ffp-contract=off; the fusing here is explicit, as in
 * the references' F32 updates on GPUs, and it halves the instructions).
 * Rows are taken DSQ_ROWUPD_ROWS at a time so each streamed row of X serves
 * them all from registers. Paths: AVX512F, AVX2+FMA, scalar (kernels/cpu.h
 * picks; dsq_cpu_set_isa forces one for tests). */
#ifndef DSQ_KERNELS_ROWUPD_H
#define DSQ_KERNELS_ROWUPD_H

#include <stdint.h>

#define DSQ_ROWUPD_ROWS 4

/* Row r of y at y + r * ldy, its coefficient k at c[r * ldc + k * cs], row k
 * of X at X + k * ldx; sign < 0 subtracts, else adds; j < w. */
void dsq_rowupd_f64(int64_t nr, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc, int64_t cs,
                    const double *X, int64_t ldx, int sign);
void dsq_rowupd_f32(int64_t nr, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc, int64_t cs,
                    const float *X, int64_t ldx, int sign);

/* The one-row form GPTQ's column loop takes: y[j] -= c[k * cs] * X[k * ldx + j]. */
void dsq_rowupd_sub_f32(int64_t nk, int64_t w, float *y, const float *c, int64_t cs, const float *X, int64_t ldx);

/* The paths (internal; nr <= DSQ_ROWUPD_ROWS for the SIMD ones). */
void dsq_rowupd_f64_scalar(int64_t nr, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                           int64_t cs, const double *X, int64_t ldx, int sign);
void dsq_rowupd_f32_scalar(int64_t nr, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc,
                           int64_t cs, const float *X, int64_t ldx, int sign);
void dsq_rowupd_f64_avx512(int64_t nr, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                           int64_t cs, const double *X, int64_t ldx, int sign);
void dsq_rowupd_f32_avx512(int64_t nr, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc,
                           int64_t cs, const float *X, int64_t ldx, int sign);
void dsq_rowupd_f64_avx2(int64_t nr, int64_t nk, int64_t w, double *y, int64_t ldy, const double *c, int64_t ldc,
                         int64_t cs, const double *X, int64_t ldx, int sign);
void dsq_rowupd_f32_avx2(int64_t nr, int64_t nk, int64_t w, float *y, int64_t ldy, const float *c, int64_t ldc,
                         int64_t cs, const float *X, int64_t ldx, int sign);

#endif
