/* A block's forward: one table row per block description (formats/block.h),
 * the way ggml keeps one row per quant type. The model loop
 * (runtime/forward.c) knows only this interface; runtime/block_<arch>.c
 * implements it on the context's backend ops (runtime/backend.h).
 *
 * A block runs in halves, each a residual update of hidden. The tail of a
 * half is its last product (hidden += W x, W the first linear of the half's
 * tail group); drivers that captured x can finish a half with it, and
 * tail_input computes x from the half's normed input (what AWQ's loss needs).
 * The state (KV cache, scratch) is the implementation's: a latent MLA cache or
 * device memory changes nothing outside its file. */
#ifndef DSQ_RUNTIME_BLOCK_H
#define DSQ_RUNTIME_BLOCK_H

#include <stdint.h>

#include "core/status.h"
#include "formats/block.h"

typedef struct dsq_ctx dsq_ctx;

typedef struct dsq_block_impl {
    const dsq_block_desc *desc;
    /* per-context state for n_ctx positions (KV cache) and its release */
    dsq_status (*state_new)(dsq_ctx *c, void **state);
    void (*state_free)(dsq_ctx *c, void *state);
    /* half h of layer l in place on hidden: n rows at positions pos0.. */
    dsq_status (*half)(dsq_ctx *c, int layer, int h, float *hidden, int n, int pos0);
    /* hidden += tail(x), x: n rows of the tail linear's input */
    dsq_status (*tail)(dsq_ctx *c, int layer, int h, const float *x, float *hidden, int n);
    /* tx = the tail linear's input for xn, the half's normed input, n_seq
     * sequences of seqlen rows each at positions 0..; work: tail_work floats */
    dsq_status (*tail_input)(dsq_ctx *c, int layer, int h, const float *xn, float *tx, float *work, int n_seq,
                             int seqlen);
    int64_t (*tail_work)(const dsq_ctx *c, int h, int64_t n_tok);
} dsq_block_impl;

/* The row for a description (every description has one; test_block checks). */
const dsq_block_impl *dsq_block_impl_of(const dsq_block_desc *d);

extern const dsq_block_impl dsq_block_impl_llama;
extern const dsq_block_impl dsq_block_impl_qwen2;
extern const dsq_block_impl dsq_block_impl_deepseek2;

#endif
