/* Vector helpers of the CPU backend: dot products of an F32 vector with an
 * F32/F16/BF16 row (the decode path of dense linears, attention scores) and
 * y += a*x (attention values). AVX2/FMA paths chosen at run time. */
#ifndef DSQ_KERNELS_VEC_H
#define DSQ_KERNELS_VEC_H

#include <stdint.h>

float dsq_vec_dot_f32(int64_t n, const float *a, const float *b);
float dsq_vec_dot_f16_f32(int64_t n, const uint16_t *a, const float *b);
float dsq_vec_dot_bf16_f32(int64_t n, const uint16_t *a, const float *b);
/* y[i] += a * x[i] */
void dsq_vec_axpy(int64_t n, float a, const float *x, float *y);
/* y[i] *= a */
void dsq_vec_scale(int64_t n, float a, float *y);
/* sum (a[i] - b[i])^2 in double, in 8 lanes (lane i % 8, summed pairwise
 * at the end): the same bits on every path (no FMA). */
double dsq_vec_sq_diff(int64_t n, const float *a, const float *b);
/* sum a[i] * b[i] in double, in the same 8 lanes: the same bits on every path. */
double dsq_vec_dot_f64(int64_t n, const float *a, const float *b);
/* The largest x[i] (NaNs skipped; -inf for n 0): the same value on every path. */
float dsq_vec_max(int64_t n, const float *x);

/* x[i] = exp(x[i] - shift), returning the sum (softmax numerators). AVX2:
 * a polynomial exp (Cephes expf's range reduction and minimax coefficients,
 * relative error below 3e-7; inputs below -87 give about 1e-38 instead of
 * less); scalar: expf. The BF16 passes use it; the F32 path keeps expf. */
float dsq_vec_exp_sum(int64_t n, float *x, float shift);

/* out[i] = silu(gate[i]) * up[i] with the same polynomial exp (out may alias
 * either input); scalar: expf. */
void dsq_vec_swiglu(int64_t n, const float *gate, const float *up, float *out);

/* The AVX2 versions (internal; callers use the dispatching ones above). */
float dsq_vec_dot_f32_avx2(int64_t n, const float *a, const float *b);
float dsq_vec_dot_f16_f32_avx2(int64_t n, const uint16_t *a, const float *b);
float dsq_vec_dot_bf16_f32_avx2(int64_t n, const uint16_t *a, const float *b);
void dsq_vec_axpy_avx2(int64_t n, float a, const float *x, float *y);
float dsq_vec_exp_sum_avx2(int64_t n, float *x, float shift);
float dsq_vec_max_avx2(int64_t n, const float *x);
double dsq_vec_sq_diff_avx2(int64_t n, const float *a, const float *b);
double dsq_vec_dot_f64_avx2(int64_t n, const float *a, const float *b);
void dsq_vec_swiglu_avx2(int64_t n, const float *gate, const float *up, float *out);

#endif
