/* The forward pass of a Llama-family model on the CPU backend's op set
 * (runtime/cpu/ops.h): embedding, decoder layers (RMSNorm, RoPE, causal GQA
 * over a KV cache, SwiGLU), final norm and head. Activations are F32; the KV
 * cache is F32, sized when the context is created.
 *
 * Hooks let calibration watch the pass: one receives the input of every
 * linear layer (q, k and v see the same matrix), one the hidden state after
 * every decoder layer. A hook returning an error stops the pass with it.
 *
 * A context is used by one thread at a time; the ops inside run OpenMP. */
#ifndef DSQ_RUNTIME_FORWARD_H
#define DSQ_RUNTIME_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "runtime/model.h"

typedef struct dsq_ctx dsq_ctx;

/* x: n_tok x in, the rows the linear `which` of `layer` is about to multiply. */
typedef dsq_status (*dsq_linear_hook_fn)(void *user, int layer, dsq_linear_id which, const float *x, int n_tok,
                                         int64_t in);
/* hidden: n_tok x dim, the residual stream after decoder layer `layer`. */
typedef dsq_status (*dsq_layer_hook_fn)(void *user, int layer, const float *hidden, int n_tok, int64_t dim);

/* n_ctx: positions the KV cache holds. n_threads <= 0: dsq_cpu_threads()'s default. */
dsq_status dsq_ctx_new(const dsq_model *m, int n_ctx, int n_threads, dsq_ctx **out);
void dsq_ctx_free(dsq_ctx *c);
const dsq_model *dsq_ctx_model(const dsq_ctx *c);
int dsq_ctx_n_ctx(const dsq_ctx *c);
/* llamacpp = true: every product rounds its activations to the weight type's
 * vec_dot type (Q8_K for k-quants, Q8_0/Q8_1 for legacy types, F16 for F16
 * rows) at any batch size, which is what llama.cpp's CPU backend does in
 * prefill too. Default false: batched products keep F32 activations (more
 * accurate; transformers' arithmetic), and only decode (<= 7 tokens) rounds. */
void dsq_ctx_set_llamacpp_act(dsq_ctx *c, bool llamacpp);
/* bf16 = true: batched products round activations and weights to BF16 and
 * accumulate in F32 (dsq_linear_forward_bf16), the arithmetic of a BF16 model
 * in torch; calibration passes use it for speed. Attention's two products
 * too, with a polynomial exp in its softmax. Replaces the llamacpp mode (one
 * mode at a time). */
void dsq_ctx_set_bf16(dsq_ctx *c, bool bf16);
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

/* The pieces, for layer-by-layer drivers (calibration): hidden is n x dim. */
dsq_status dsq_forward_embed(dsq_ctx *c, const int32_t *tokens, int n, float *hidden);
/* Runs decoder layer `layer` in place on hidden (n rows at positions pos0..),
 * storing its keys and values in the cache. */
dsq_status dsq_forward_layer(dsq_ctx *c, int layer, float *hidden, int n, int pos0);
/* The two halves of dsq_forward_layer, so a driver can resume a layer in the
 * middle: the attention block (norm, q/k/v, RoPE, attention, o_proj, residual
 * add) and the MLP block (norm, gate/up, SwiGLU, down, residual add), each in
 * place on hidden. Hooks fire as in dsq_forward_layer (the layer hook does not). */
dsq_status dsq_forward_attn(dsq_ctx *c, int layer, float *hidden, int n, int pos0);
dsq_status dsq_forward_mlp(dsq_ctx *c, int layer, float *hidden, int n);
/* The tail of the attention block alone: hidden += o_proj(att), att being the
 * attention output (n x q_dim) a hook captured at o_proj's input. */
dsq_status dsq_forward_attn_output(dsq_ctx *c, int layer, const float *att, float *hidden, int n);
/* Final norm and head: logits n x vocab. */
dsq_status dsq_forward_head(dsq_ctx *c, const float *hidden, int n, float *logits);

#endif
