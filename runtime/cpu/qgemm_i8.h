/* Batched products of the GGUF block types that pair with Q8_0 activations
 * (Q8_0, Q4_0, Q5_0, IQ4_NL): each token's activation row is rounded to Q8_0
 * exactly as the decode path and llama.cpp round it, each tile of weight rows
 * is unpacked into int8 codes and block scales and packed for the
 * block-scaled int8 GEMM (kernels/gemm_q8.h), and the products run there: the
 * decode path's arithmetic (the same integer sum and scale product per block)
 * at prefill speed. OpenMP over tiles of rows x blocks of tokens. */
#ifndef DSQ_RUNTIME_CPU_QGEMM_I8_H
#define DSQ_RUNTIME_CPU_QGEMM_I8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

/* Whether weights of type t take this path at all (a type it unpacks). */
bool dsq_qgemm_i8_type(dsq_type t);

/* y[t * out + r] = row r of w (out rows of `in` values, row_bytes apart) times
 * x[t] rounded to Q8_0, for n_tok tokens; no bias. */
dsq_status dsq_qgemm_i8(dsq_type t, const void *w, size_t row_bytes, int64_t out, int64_t in, const float *x, float *y,
                        int n_tok);

/* A copy of all out rows packed once for the kernel (Q8_0: 1152 bytes per
 * 32 x 32 block against the file's 1088), so that decode steps and batches
 * skip the unpacking: P holds dsq_qgemm_i8_packed_bytes(out, in) bytes. */
size_t dsq_qgemm_i8_packed_bytes(int64_t out, int64_t in);
dsq_status dsq_qgemm_i8_pack(dsq_type t, const void *w, size_t row_bytes, int64_t out, int64_t in, void *P);
/* dsq_qgemm_i8 on such a copy, any n_tok (a decode step included). */
dsq_status dsq_qgemm_i8_packed(const void *P, int64_t out, int64_t in, const float *x, float *y, int n_tok);

#endif
