/* Private to calibration/: what the layer-by-layer driver (sequential.c)
 * shares with the methods (method_*.c): one layer's F32 working copies, the
 * hooks that capture linear inputs, and the passes over the samples. */
#ifndef DSQ_CALIBRATION_SEQ_INTERNAL_H
#define DSQ_CALIBRATION_SEQ_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "calibration/sequential.h"
#include "quantizers/gptq.h"
#include "runtime/forward.h"

/* One layer under quantization: the model runs on F32 copies of its norms
 * and linears (installed by dsq_seq_layer_begin), so every change a method
 * makes is what the forward pass sees. */
struct dsq_seq_layer {
    dsq_model *m;
    const dsq_block_desc *d;
    int l;
    const dsq_seq_opts *o;
    dsq_linear orig[DSQ_BLOCK_MAX_LINEARS];
    const float *orig_norm[DSQ_BLOCK_MAX_NORMS];
    float *w[DSQ_BLOCK_MAX_LINEARS], *bias[DSQ_BLOCK_MAX_LINEARS];
    float *norm[DSQ_BLOCK_MAX_NORMS];
    dsq_intq q[DSQ_BLOCK_MAX_LINEARS];
    bool has_q[DSQ_BLOCK_MAX_LINEARS], ok[DSQ_BLOCK_MAX_LINEARS];
    dsq_w8q q8[DSQ_BLOCK_MAX_LINEARS]; /* the 8-bit methods' weights (has_q8) */
    bool has_q8[DSQ_BLOCK_MAX_LINEARS];
    /* the layer has the linear and it is copied here (not an absent one, not a routed expert) */
    bool present[DSQ_BLOCK_MAX_LINEARS];
    float k_scale, v_scale; /* FP8 KV-cache scales (w8.kv_fp8) */
    bool installed;         /* the copies are in the model */
};

/* The kept memory: add one block, or take back everything added since a mark
 * (the blocks stay the caller's). */
dsq_status dsq_seq_keep_add(dsq_seq_keep *k, void *p);
size_t dsq_seq_keep_mark(const dsq_seq_keep *k);
void dsq_seq_keep_rewind(dsq_seq_keep *k, size_t mark);

/* Copies layer l and installs the copies in the model. On failure nothing
 * of the model has changed and nothing is left allocated. */
dsq_status dsq_seq_layer_begin(dsq_seq_layer *s, dsq_model *m, int l, const dsq_seq_opts *o);
/* Puts the model back (keep NULL) or leaves the copies in it, kept alive by
 * keep; safe after a failed begin. */
dsq_status dsq_seq_layer_end(dsq_seq_layer *s, dsq_seq_keep *keep);

int64_t dsq_seq_lin_out(const dsq_seq_layer *s, int id);
int64_t dsq_seq_lin_in(const dsq_seq_layer *s, int id);
/* "model.layers.N.<hf module path>" of linear id, for messages. */
void dsq_seq_lin_name(const dsq_seq_layer *s, int id, char *buf, size_t cap);
/* Quantizes s->w[id] by rule, then replaces it by its dequantized value. */
dsq_status dsq_seq_quantize_rtn(dsq_seq_layer *s, int id, dsq_intq_rule rule);
/* Whether linear id is one of the layer's copies (the layer has it; routed
 * experts are handled one by one, calibration/moe.c). */
bool dsq_seq_lin_present(const dsq_seq_layer *s, int id);
/* The first linear of group g this layer has (the one a pass stops at to
 * capture the group's input), or -1. */
int dsq_seq_group_first(const dsq_seq_layer *s, int g);
/* Whether any linear of group g may be quantized. */
bool dsq_seq_group_any(const dsq_seq_layer *s, int g);

/* What a pass's linear hook does. */
typedef struct dsq_seq_hooks {
    float *cap[DSQ_BLOCK_MAX_LINEARS];  /* capture buffers [tokens x in] */
    int64_t cap_tokens;                 /* > 0: captures keep only the first cap_tokens tokens */
    float *amax[DSQ_BLOCK_MAX_LINEARS]; /* per-channel running max |x| [in]; a NaN/Inf input is an error */
    int64_t row0;                       /* token offset of the current sample */
    int seqlen;                         /* tokens per sample (set by dsq_seq_run_pass, for messages) */
    const dsq_block_desc *d;            /* set by dsq_seq_run_pass, for messages */
    /* called after the above for every linear (NULL: none) */
    dsq_linear_hook_fn extra;
    void *extra_user;
    dsq_hessian *H[DSQ_BLOCK_MAX_LINEARS];
    int stop_after; /* a linear index, or -1: the pass ends (DSQ_STOP) after its hook */
} dsq_seq_hooks;

/* An empty hook set (no captures, no stop). */
void dsq_seq_hooks_init(dsq_seq_hooks *h);

typedef struct dsq_seq_runner {
    dsq_ctx *ctx;
    int n_samples, seqlen;
    int64_t dim;
    float *scratch; /* [seqlen x dim] */
    /* GPTQ's kept tail inputs, reused from layer to layer (a fresh buffer of
     * that size would be zeroed by the kernel page by page every layer) */
    float *tail;
    size_t tail_bytes;
} dsq_seq_runner;

/* r->tail with at least bytes, grown when needed; NULL when out of memory. */
float *dsq_seq_tail_buffer(dsq_seq_runner *r, size_t bytes);

#define DSQ_SEQ_WHOLE_LAYER (-1)

/* Runs samples [0, n) of layer l, or of its half `half`, from in; out NULL:
 * results dropped; out == in: in place. A stop asked by h ends each sample's
 * pass early and is not an error. */
dsq_status dsq_seq_run_pass(dsq_seq_runner *r, int l, int half, const float *in, float *out, int n, dsq_seq_hooks *h);

/* GPTQ's true-sequential layer (method_gptq.c) on the layer's current
 * copies: s->q[id] for every ok linear, hout the layer's output. */
dsq_status dsq_seq_gptq_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout,
                              struct dsq_seq_report *rep);

/* ---- MoE layers (calibration/moe.c) ---- */

/* One routed expert under quantization: F32 copies of its linears (gate,
 * up, down as the description orders them), the rows its statistics come
 * from, and what the method makes of it. The method quantizes w in place
 * (dequantized values after) and fills q. */
typedef struct dsq_seq_expert {
    dsq_seq_layer *s;
    dsq_seq_runner *r; /* r->ctx is NULL for methods that look at no data */
    int e;
    int id[DSQ_INT_EXPERT_LINEARS];
    float *w[DSQ_INT_EXPERT_LINEARS];
    int64_t out[DSQ_INT_EXPERT_LINEARS], in[DSQ_INT_EXPERT_LINEARS];
    bool ok[DSQ_INT_EXPERT_LINEARS];
    dsq_intq q[DSQ_INT_EXPERT_LINEARS];
    bool has_q[DSQ_INT_EXPERT_LINEARS];
    dsq_w8q q8[DSQ_INT_EXPERT_LINEARS]; /* the 8-bit methods' weights (has_q8) */
    bool has_q8[DSQ_INT_EXPERT_LINEARS];
    const float *x; /* [n_tok x dim]: the expert's input rows for statistics (NULL without data) */
    int64_t n_tok;
} dsq_seq_expert;

/* "model.layers.N.mlp.experts.E.<proj>" of expert linear k, for messages. */
void dsq_seq_expert_name(const dsq_seq_expert *x, int k, char *buf, size_t cap);
/* y = silu(gate x) * up x for the expert's current (quantized) gate and up:
 * n x ffn; tmp n x ffn floats. */
dsq_status dsq_seq_expert_act(const dsq_seq_expert *x, const float *in, int64_t n, float *y, float *tmp);
/* After the method's layer function on an MoE layer: every routed expert,
 * one at a time (copied, quantized by the method, emitted, freed or kept),
 * and hout recomputed from hin with every quantized weight. counts receives
 * the calibration tokens routed to each expert. */
dsq_status dsq_seq_moe_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout,
                             struct dsq_seq_report *rep, dsq_seq_keep *keep, int64_t *counts);

/* ---- the 8-bit methods' shared steps (calibration/w8_layer.c) ---- */

/* Every weight, bias and norm of the copies finite, else an error naming the tensor. */
dsq_status dsq_seq_w8_check_finite(const dsq_seq_layer *s);
/* The same for each linear of a routed expert (finite checks first). */
dsq_status dsq_seq_w8_expert_rtn(dsq_seq_expert *x);
/* s->w[id] -> s->q8[id] under the method's scheme by RTN, then w = its dequantized value. */
dsq_status dsq_seq_w8_rtn(dsq_seq_layer *s, int id);
/* GPTQ's 8-bit symmetric per-channel codes s->q[id] as the INT8 weight s->q8[id]. */
dsq_status dsq_seq_w8_from_gptq(dsq_seq_layer *s, int id);
/* Runs the layer (as it now is) from hin into hout, collecting what the
 * scheme needs: static input scales (max |x| of each group's input over all
 * tokens) and, with kv_fp8, k_scale / v_scale. */
dsq_status dsq_seq_w8_final_pass(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout);

#endif
