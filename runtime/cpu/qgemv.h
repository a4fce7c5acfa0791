/* Decode-path kernels for GGUF block weights (runtime/linear.c): nr
 * consecutive rows of a matrix, row_bytes apart, each dotted with one
 * activation row already quantized to the type's vec_dot_type (Q8_0, Q8_1 or
 * Q8_K, as the quant-type table says).
 *
 * Why not the quant-type table's vec_dot: those are one row per call, written
 * to be checked against the scalar references, and convert every fp16 scale
 * through a library call; the decode path is memory-bound only if the
 * per-block work is a handful of instructions. These kernels do the same
 * integer sums per block (exact) with the F16C scale conversion inlined and
 * the k-quant scales unpacked with vector shuffles. Results equal the scalar
 * vec_dot within float rounding (only the summation order of the per-block
 * float terms differs).
 *
 * Types: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_XS. */
#ifndef DSQ_RUNTIME_CPU_QGEMV_H
#define DSQ_RUNTIME_CPU_QGEMV_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

/* y[r] = row r . act for r in [0, nr); n: the row length in elements. */
typedef void (*dsq_qgemv_fn)(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);

/* The kernel for weights of type t, or NULL when there is none for t, when
 * the CPU lacks AVX2/FMA/F16C or when the scalar ISA is forced
 * (dsq_cpu_set_isa): callers then use the quant-type table's vec_dot. */
dsq_qgemv_fn dsq_qgemv_kernel(dsq_type t);

/* Several tokens at once: y[t * ldy + r] = row r . act_t for r in [0, nr),
 * t in [0, nt), nt <= DSQ_QGEMM_TOKENS, act_t at act + t * act_stride. Each
 * weight block is unpacked once for the nt tokens; every result is
 * bit-identical to the one-token kernel's (prefill with activations rounded
 * as llama.cpp rounds them, `--llamacpp-act`). */
enum { DSQ_QGEMM_TOKENS = 4 };
typedef void (*dsq_qgemm_fn)(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, size_t act_stride,
                             int nt, float *y, int64_t ldy);

/* The multi-token kernel for type t, or NULL (then the one-token kernel per
 * token): Q4_0, Q5_0, Q8_0, IQ4_NL and Q4_K today, under the same conditions
 * as dsq_qgemv_kernel. */
dsq_qgemm_fn dsq_qgemm_kernel(dsq_type t);

/* The AVX2 kernels (internal; callers go through dsq_qgemv_kernel). */
void dsq_qgemv_q4_0_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemv_q4_1_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemv_q5_0_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemv_q5_1_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemv_q8_0_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemv_iq4_nl_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemv_q2_K_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemv_q3_K_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemv_q4_K_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemv_q5_K_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemv_q6_K_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemv_iq4_xs_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, float *y);
void dsq_qgemm_q4_0_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, size_t act_stride,
                         int nt, float *y, int64_t ldy);
void dsq_qgemm_q5_0_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, size_t act_stride,
                         int nt, float *y, int64_t ldy);
void dsq_qgemm_iq4_nl_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, size_t act_stride,
                           int nt, float *y, int64_t ldy);
void dsq_qgemm_q8_0_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, size_t act_stride,
                         int nt, float *y, int64_t ldy);
void dsq_qgemm_q4_K_avx2(int64_t n, const void *w, size_t row_bytes, int64_t nr, const void *act, size_t act_stride,
                         int nt, float *y, int64_t ldy);

#endif
