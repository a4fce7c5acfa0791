/* How a context multiplies: one mode at a time, set with dsq_ctx_set_matmul
 * (runtime/forward.h) and carried to the backend in its exec settings
 * (runtime/backend.h). Every mode computes decode steps (<= 7 tokens) on the
 * decode path, activations rounded to the weight type's vec_dot type; they
 * differ in batches. */
#ifndef DSQ_RUNTIME_MATMUL_MODE_H
#define DSQ_RUNTIME_MATMUL_MODE_H

typedef enum dsq_matmul_mode {
    /* Batches in F32 (transformers' arithmetic; more accurate than llama.cpp's):
     * ppl, kld and calibration unless asked otherwise. */
    DSQ_MATMUL_DEFAULT = 0,
    /* The decode path at any batch size: activations rounded to the vec_dot
     * type (Q8_K, Q8_0/Q8_1, F16), what llama.cpp's CPU backend does in
     * prefill too (ppl/kld --llamacpp-act). */
    DSQ_MATMUL_LLAMACPP,
    /* Batches with activations and weights rounded to BF16, F32 sums
     * (dsq_linear_forward_bf16), attention's products too and a polynomial
     * exp: a BF16 model's arithmetic in torch; calibration passes, for speed. */
    DSQ_MATMUL_BF16,
    /* DEFAULT, except that the types paired with Q8_0 activations (Q8_0, Q4_0,
     * Q5_0, IQ4_NL) keep the decode path's rounding in batches and multiply in
     * int8 (dsq_linear_forward_int8act): prompt and decode alike, as llama.cpp,
     * at the int8 kernel's speed; generate, serve and bench_forward. */
    DSQ_MATMUL_INT8ACT,
} dsq_matmul_mode;

#endif
