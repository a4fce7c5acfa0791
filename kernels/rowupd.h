/* Rank-k row updates, the inner loops of GPTQ's factorization and lazy
 * batch updates (quantizers/gptq.c): y[j] -= sum_k c[k] * X[k][j] (or +=),
 * k in order, each step one multiply and one subtract, so every path gives
 * the scalar loop's bits (nothing fused: the build has -ffp-contract=off and
 * the SIMD path uses separate multiply and add instructions). The AVX512
 * path keeps y in registers across k; it runs when the CPU has AVX512F and
 * the scalar reference is not forced (dsq_cpu_set_isa). */
#ifndef DSQ_KERNELS_ROWUPD_H
#define DSQ_KERNELS_ROWUPD_H

#include <stdint.h>

/* y[j] -= c[k * cs] * X[k * ldx + j] for k = 0 .. nk-1, then the next k; j < w. */
void dsq_rowupd_sub_f64(int64_t nk, int64_t w, double *y, const double *c, int64_t cs, const double *X, int64_t ldx);
/* The same with +=. */
void dsq_rowupd_add_f64(int64_t nk, int64_t w, double *y, const double *c, int64_t cs, const double *X, int64_t ldx);
/* The F32 -= form. */
void dsq_rowupd_sub_f32(int64_t nk, int64_t w, float *y, const float *c, int64_t cs, const float *X, int64_t ldx);

/* The scalar references and the AVX512 paths (internal). */
void dsq_rowupd_f64_scalar(int64_t nk, int64_t w, double *y, const double *c, int64_t cs, const double *X, int64_t ldx,
                           int sign);
void dsq_rowupd_f64_avx512(int64_t nk, int64_t w, double *y, const double *c, int64_t cs, const double *X, int64_t ldx,
                           int sign);
void dsq_rowupd_sub_f32_scalar(int64_t nk, int64_t w, float *y, const float *c, int64_t cs, const float *X,
                               int64_t ldx);
void dsq_rowupd_sub_f32_avx512(int64_t nk, int64_t w, float *y, const float *c, int64_t cs, const float *X,
                               int64_t ldx);

#endif
