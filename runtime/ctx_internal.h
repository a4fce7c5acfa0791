/* Private to runtime/forward.c and runtime/block_*.c: the context's fields
 * and the helpers a block implementation runs its ops with. */
#ifndef DSQ_RUNTIME_CTX_INTERNAL_H
#define DSQ_RUNTIME_CTX_INTERNAL_H

#include "runtime/backend.h"
#include "runtime/block.h"
#include "runtime/forward.h"

struct dsq_ctx {
    const dsq_model *m;
    const dsq_backend *be;
    const dsq_block_impl *impl;
    dsq_exec ex;
    int n_ctx;
    int n_seq; /* sequences, each with n_ctx cache positions */
    /* the batch dsq_forward_batch is running, or NULL: one segment of sequence 0 */
    const dsq_seg *segs;
    int n_segs;
    dsq_seg one;
    dsq_rope rope;
    void *state; /* the block implementation's (KV cache, scratch) */
    /* the residual stream of dsq_forward for up to cap rows */
    int cap;
    float *h;
    /* the final norm's output, for up to hcap rows (the head runs every decode step) */
    int hcap;
    float *hn;
    dsq_linear_hook_fn on_linear;
    dsq_layer_hook_fn on_layer;
    void *user;
    int hooks_off; /* while a NaN is being traced */
};

/* The segments of the rows a half runs: the batch's, or one segment of
 * sequence 0 (n rows at pos0) outside dsq_forward_batch. */
const dsq_seg *dsq_ctx_segs(dsq_ctx *c, int n, int pos0, int *n_segs);

/* y = x W^T + b for linear `id` of `layer` (n rows), after the linear hook;
 * failures name the layer and the linear. */
dsq_status dsq_ctx_linear(dsq_ctx *c, int layer, int id, const float *x, float *y, int n);
/* The same for expert e of expert linear `id` (formats/block.h). */
dsq_status dsq_ctx_expert_linear(dsq_ctx *c, int layer, int id, int e, const float *x, float *y, int n);
/* The same in F32 whatever the context's arithmetic (MoE routers). */
dsq_status dsq_ctx_linear_f32(dsq_ctx *c, int layer, int id, const float *x, float *y, int n);
/* Only the linear hook, for a product the block runs on more rows than it
 * feeds (MLA expands cached latents too): x, n are the new rows. */
dsq_status dsq_ctx_hook(dsq_ctx *c, int layer, int id, int expert, const float *x, int n);

#endif
