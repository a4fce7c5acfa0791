/* Scalar versions of the k-quant row functions of quantizers/quants.h.
 *
 * dsq_quantize_row_<t> / dsq_vec_dot_<t>_q8_K pick an AVX2 version at run time
 * when the CPU has AVX2. The quantizers' AVX2 versions give the same bytes as
 * these scalar ones (one SIMD lane per independent sub-block, each lane doing
 * ggml's float operations in ggml's order); the dot products agree within
 * float rounding. Tests compare the two and benches time both through these. */
#ifndef DSQ_QUANTIZERS_KQUANTS_REF_H
#define DSQ_QUANTIZERS_KQUANTS_REF_H

#include <stdbool.h>
#include <stdint.h>

void dsq_quantize_row_q2_K_ref(const float *x, void *y, int64_t n, const float *qw);
void dsq_quantize_row_q3_K_ref(const float *x, void *y, int64_t n, const float *qw);
void dsq_quantize_row_q4_K_ref(const float *x, void *y, int64_t n, const float *qw);
void dsq_quantize_row_q5_K_ref(const float *x, void *y, int64_t n, const float *qw);
void dsq_quantize_row_q6_K_ref(const float *x, void *y, int64_t n, const float *qw);
void dsq_quantize_row_q8_K_ref(const float *x, void *y, int64_t n, const float *qw);

void dsq_vec_dot_q2_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q3_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q4_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q5_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q6_K_q8_K_ref(int64_t n, float *s, const void *x, const void *y);

/* True when the dispatching functions use their AVX2 versions (the CPU has AVX2). */
bool dsq_kquants_simd_active(void);

#endif
