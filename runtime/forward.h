/* The forward pass: embedding, decoder layers (each the block
 * implementation of the model's architecture, runtime/block.h), final norm
 * and head, every op through the context's backend (runtime/backend.h; the
 * CPU by default). Activations are F32; the block's state (the KV cache) is
 * sized when the context is created.
 *
 * Hooks let calibration watch the pass: one receives the input of every
 * linear layer, named by layer, linear index in the block description
 * (formats/block.h) and expert (-1 for dense linears; linears of one group
 * see the same matrix), one the hidden state after every decoder layer. A
 * hook returning DSQ_STOP ends the pass there (the call returns DSQ_STOP, no
 * message); any other failure stops it with that error.
 *
 * A context is used by one thread at a time; the ops inside run OpenMP with
 * the context's own thread count. */
#ifndef DSQ_RUNTIME_FORWARD_H
#define DSQ_RUNTIME_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/backend.h"
#include "runtime/model.h"

typedef struct dsq_ctx dsq_ctx;

/* x: n_tok x in, the rows linear `linear` (of expert `expert`, -1: not an
 * expert) of `layer` is about to multiply. */
typedef dsq_status (*dsq_linear_hook_fn)(void *user, int layer, int linear, int expert, const float *x, int n_tok,
                                         int64_t in);
/* hidden: n_tok x dim, the residual stream after decoder layer `layer`. */
typedef dsq_status (*dsq_layer_hook_fn)(void *user, int layer, const float *hidden, int n_tok, int64_t dim);

/* n_ctx: positions the KV cache holds (per sequence). n_threads <= 0: the backend's default
 * (for the CPU, dsq_cpu_threads()'s). dsq_ctx_new runs on the CPU backend. */
dsq_status dsq_ctx_new(const dsq_model *m, int n_ctx, int n_threads, dsq_ctx **out);
dsq_status dsq_ctx_new_on(const dsq_model *m, const dsq_backend *be, int n_ctx, int n_threads, dsq_ctx **out);
/* A context holding n_seq independent sequences (slots), each with a KV
 * cache of n_ctx positions, for dsq_forward_batch. */
dsq_status dsq_ctx_new_seqs(const dsq_model *m, const dsq_backend *be, int n_ctx, int n_seq, int n_threads,
                            dsq_ctx **out);
int dsq_ctx_n_seq(const dsq_ctx *c);
const dsq_backend *dsq_ctx_backend(const dsq_ctx *c);
void dsq_ctx_free(dsq_ctx *c);
const dsq_model *dsq_ctx_model(const dsq_ctx *c);
int dsq_ctx_n_ctx(const dsq_ctx *c);
/* How batched products are computed (runtime/matmul_mode.h); the default is
 * DSQ_MATMUL_DEFAULT. */
void dsq_ctx_set_matmul(dsq_ctx *c, dsq_matmul_mode mode);
dsq_matmul_mode dsq_ctx_matmul_mode(const dsq_ctx *c);
/* y = x W^T + b for any linear, with the context's backend, threads and
 * arithmetic (calibration's own products: losses on modified weights). */
dsq_status dsq_ctx_matmul(dsq_ctx *c, const dsq_linear *W, const float *x, float *y, int n);
/* The same in F32 whatever the context's arithmetic (MoE routers). */
dsq_status dsq_ctx_matmul_f32(dsq_ctx *c, const dsq_linear *W, const float *x, float *y, int n);
/* The backend's element-wise ops with the context's settings, for drivers
 * that run part of a block themselves (calibration of MoE experts). */
void dsq_ctx_rmsnorm(dsq_ctx *c, const float *x, const float *w, float *y, int n, int64_t dim);
void dsq_ctx_swiglu(dsq_ctx *c, const float *gate, const float *up, float *out, size_t n);
/* DeepSeek's routing of n tokens from F32 router logits (runtime/cpu/ops.h dsq_cpu_moe_route). */
dsq_status dsq_ctx_moe_route(dsq_ctx *c, const dsq_arch_moe *m, const float *logits, const float *bias, int32_t *idx,
                             float *wt, int n);
/* Either hook may be NULL. */
void dsq_ctx_set_hooks(dsq_ctx *c, dsq_linear_hook_fn on_linear, dsq_layer_hook_fn on_layer, void *user);

/* Runs tokens[0..n) at positions pos0.. (the cache keeps what earlier calls
 * stored at positions below pos0) and writes logits for every row: n x vocab. */
dsq_status dsq_forward(dsq_ctx *c, const int32_t *tokens, int n, int pos0, float *logits);
/* The same, writing only rows first_out..n-1 ((n - first_out) x vocab): with
 * first_out = n - 1 only the last. logits NULL skips the head entirely.
 * Non-finite logits stop the pass with an error naming the first decoder
 * layer whose output was not finite (found by re-running the layers with
 * checks, so the check costs nothing while all is well). */
dsq_status dsq_forward_range(dsq_ctx *c, const int32_t *tokens, int n, int pos0, int first_out, float *logits);

/* A run of consecutive rows of a batch: n tokens of sequence seq at
 * positions pos0.. (the cache of seq keeps what earlier calls stored below
 * pos0). */
typedef struct dsq_seg {
    int seq, pos0, n;
} dsq_seg;

/* Continuous batching: the rows of n_segs segments (in order, each sequence
 * at most once) go through every product together, each segment attending
 * over its own sequence's cache. Logits are written for the n_out rows
 * out_rows[] (increasing batch row indices): n_out x vocab. The
 * single-sequence calls are a batch of one segment of sequence 0. */
dsq_status dsq_forward_batch(dsq_ctx *c, const int32_t *tokens, const dsq_seg *segs, int n_segs, const int *out_rows,
                             int n_out, float *logits);

/* The pieces, for layer-by-layer drivers (calibration): hidden is n x dim. */
dsq_status dsq_forward_embed(dsq_ctx *c, const int32_t *tokens, int n, float *hidden);
/* Runs decoder layer `layer` in place on hidden (n rows at positions pos0..),
 * storing its keys and values in the cache. */
dsq_status dsq_forward_layer(dsq_ctx *c, int layer, float *hidden, int n, int pos0);
/* One half of dsq_forward_layer (formats/block.h: 0 the attention, 1 the
 * MLP of a Llama block), in place on hidden, so a driver can resume a layer
 * in the middle. Hooks fire as in dsq_forward_layer (the layer hook does not). */
dsq_status dsq_forward_half(dsq_ctx *c, int layer, int half, float *hidden, int n, int pos0);
/* The tail of a half alone: hidden += W x, W the first linear of the half's
 * tail group and x its input (n rows) as a hook captured it. */
dsq_status dsq_forward_tail(dsq_ctx *c, int layer, int half, const float *x, float *hidden, int n);
/* The tail linear's input computed from xn, the half's normed input (the
 * input of its first group), for n_seq sequences of seqlen rows each at
 * positions 0..: AWQ's loss runs the half without its residual this way.
 * work: dsq_forward_tail_work(c, half, n_seq * seqlen) floats. */
dsq_status dsq_forward_tail_input(dsq_ctx *c, int layer, int half, const float *xn, float *tx, float *work, int n_seq,
                                  int seqlen);
int64_t dsq_forward_tail_work(const dsq_ctx *c, int half, int64_t n_tok);
/* Final norm and head: logits n x vocab. */
dsq_status dsq_forward_head(dsq_ctx *c, const float *hidden, int n, float *logits);

#endif
