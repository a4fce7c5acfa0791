/* Row functions of the GGUF block types, each reproducing ggml's reference
 * (ggml/src/ggml-quants.c at llama.cpp c392e509) bit for bit; see
 * docs/quantization.md. quantizers/qtypes.c gathers them into the type table.
 *
 * quantize_row_<t>(x, y, n, qw): n is a multiple of the block size; qw is the
 * importance vector (n values) or NULL. With qw == NULL the output equals
 * ggml_quantize_chunk(type, ..., imatrix=NULL) for one row (for iq4_nl that is
 * the ntry=7 search, not quantize_row_iq4_nl_ref); with qw it equals
 * ggml_quantize_chunk with that imatrix. q8_0 ignores qw as ggml does.
 * dequantize_row_<t>: ggml's to_float.
 * vec_dot_<t>_<a>(n, s, x, y): *s = dot of a row of <t> with a row of the
 * activation type <a> (ggml's vec_dot_type pairing). */
#ifndef DSQ_QUANTIZERS_QUANTS_H
#define DSQ_QUANTIZERS_QUANTS_H

#include <stdint.h>

#define DSQ_DECLARE_QTYPE(t)                                                                       \
    void dsq_quantize_row_##t(const float *x, void *y, int64_t n, const float *qw);                \
    void dsq_dequantize_row_##t(const void *x, float *y, int64_t n);

/* legacy 32-element blocks: quantizers/legacy.c */
DSQ_DECLARE_QTYPE(q4_0)
DSQ_DECLARE_QTYPE(q4_1)
DSQ_DECLARE_QTYPE(q5_0)
DSQ_DECLARE_QTYPE(q5_1)
DSQ_DECLARE_QTYPE(q8_0)
/* The importance-weighted path of q4_0/q4_1/q5_0/q5_1 with the row's mean
 * square sigma2 given (ggml computes it over the whole row; qw non-NULL). */
void dsq_quantize_row_q4_0_sigma(const float *x, void *y, int64_t n, const float *qw, float sigma2);
void dsq_quantize_row_q4_1_sigma(const float *x, void *y, int64_t n, const float *qw, float sigma2);
void dsq_quantize_row_q5_0_sigma(const float *x, void *y, int64_t n, const float *qw, float sigma2);
void dsq_quantize_row_q5_1_sigma(const float *x, void *y, int64_t n, const float *qw, float sigma2);
/* That sigma2: sum x^2 / n in ggml's order. */
float dsq_quantize_row_sigma2(const float *x, int64_t n);
DSQ_DECLARE_QTYPE(q8_1)
/* non-linear 4-bit: quantizers/iq4.c */
DSQ_DECLARE_QTYPE(iq4_nl)
DSQ_DECLARE_QTYPE(iq4_xs)
/* quantize_row_iq4_nl_ref (ntry = -1), the type-traits from_float_ref. */
void dsq_quantize_row_iq4_nl_ref(const float *x, void *y, int64_t n);
/* k-quants, 256-element super-blocks: quantizers/kquants.c */
DSQ_DECLARE_QTYPE(q2_K)
DSQ_DECLARE_QTYPE(q3_K)
DSQ_DECLARE_QTYPE(q4_K)
DSQ_DECLARE_QTYPE(q5_K)
DSQ_DECLARE_QTYPE(q6_K)
DSQ_DECLARE_QTYPE(q8_K)

/* dot products with the paired activation type */
void dsq_vec_dot_q4_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q4_1_q8_1(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q5_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q5_1_q8_1(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q8_0_q8_0(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_iq4_nl_q8_0(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_iq4_xs_q8_K(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q2_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q3_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *x, const void *y);
void dsq_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *x, const void *y);

#endif
