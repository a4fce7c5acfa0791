/* Vector helpers of the CPU backend: dot products of an F32 vector with an
 * F32/F16/BF16 row (the decode path of dense linears, attention scores) and
 * y += a*x (attention values). AVX2/FMA paths chosen at run time. */
#ifndef DSQ_RUNTIME_CPU_VEC_H
#define DSQ_RUNTIME_CPU_VEC_H

#include <stdint.h>

float dsq_vec_dot_f32(int64_t n, const float *a, const float *b);
float dsq_vec_dot_f16_f32(int64_t n, const uint16_t *a, const float *b);
float dsq_vec_dot_bf16_f32(int64_t n, const uint16_t *a, const float *b);
/* y[i] += a * x[i] */
void dsq_vec_axpy(int64_t n, float a, const float *x, float *y);
/* y[i] *= a */
void dsq_vec_scale(int64_t n, float a, float *y);

/* The AVX2 versions (internal; callers use the dispatching ones above). */
float dsq_vec_dot_f32_avx2(int64_t n, const float *a, const float *b);
float dsq_vec_dot_f16_f32_avx2(int64_t n, const uint16_t *a, const float *b);
float dsq_vec_dot_bf16_f32_avx2(int64_t n, const uint16_t *a, const float *b);
void dsq_vec_axpy_avx2(int64_t n, float a, const float *x, float *y);

#endif
