/* Scalar references of the row functions in quantizers/quants.h.
 *
 * The public functions in quants.h use AVX2/FMA code when the CPU has it; the
 * functions here are the plain C versions they must agree with: identical
 * bytes for quantizers and dequantizers, dot products within float rounding
 * (the SIMD sums run in another order). Tests and benches call both.
 *
 * Naming: the reference of dsq_<fn> is dsq_<fn>_ref, except for
 * dsq_quantize_row_iq4_nl, whose reference is dsq_quantize_row_iq4_nl_scalar
 * because dsq_quantize_row_iq4_nl_ref is already ggml's quantize_row_iq4_nl_ref
 * (ntry = -1, see quants.h). */
#ifndef DSQ_QUANTIZERS_QUANTS_REF_H
#define DSQ_QUANTIZERS_QUANTS_REF_H

#include <stdbool.h>
#include <stdint.h>

#define DSQ_DECLARE_QTYPE_REF(t)                                                                   \
    void dsq_quantize_row_##t##_ref(const float *x, void *y, int64_t n, const float *qw);          \
    void dsq_dequantize_row_##t##_ref(const void *x, float *y, int64_t n);

/* legacy types: quantizers/legacy.c */
DSQ_DECLARE_QTYPE_REF(q4_0)
DSQ_DECLARE_QTYPE_REF(q4_1)
DSQ_DECLARE_QTYPE_REF(q5_0)
DSQ_DECLARE_QTYPE_REF(q5_1)
DSQ_DECLARE_QTYPE_REF(q8_0)
DSQ_DECLARE_QTYPE_REF(q8_1)
void dsq_vec_dot_q4_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q4_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q5_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q5_1_q8_1_ref(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q8_0_q8_0_ref(int64_t n, float *s, const void *x, const void *y);

/* iq4 types: quantizers/iq4.c */
void dsq_quantize_row_iq4_nl_scalar(const float *x, void *y, int64_t n, const float *qw);
void dsq_dequantize_row_iq4_nl_ref(const void *x, float *y, int64_t n);
DSQ_DECLARE_QTYPE_REF(iq4_xs)
void dsq_vec_dot_iq4_nl_q8_0_ref(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_iq4_xs_q8_K_ref(int64_t n, float *s, const void *x, const void *y);


/* True when the dispatching legacy and iq4 functions use their AVX2 versions. */
bool dsq_legacy_simd_active(void);

#endif
