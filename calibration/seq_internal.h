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
    bool has_gguf[DSQ_BLOCK_MAX_LINEARS]; /* handed to o->gguf->put as GGUF blocks */
    /* the layer has the linear and it is copied here (not an absent one, not a routed expert) */
    bool present[DSQ_BLOCK_MAX_LINEARS];
    float k_scale, v_scale; /* FP8 KV-cache scales (w8.kv_fp8) */
    bool installed;         /* the copies are in the model */
    /* MoE: the scales folded into the routed experts' input group, which each
     * expert's gate/up columns take when it is copied (NULL: none) */
    float *expert_in;
    int64_t expert_in_cols;
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
/* Quantizes s->w[id] by rule (and the options' grid, its search weighted by
 * imp [in] when not NULL), then replaces it by its dequantized value. */
dsq_status dsq_seq_quantize_rtn(dsq_seq_layer *s, int id, dsq_intq_rule rule, const float *imp);
/* Whether linear id is one of the layer's copies (the layer has it; routed
 * experts are handled one by one, calibration/moe.c). */
bool dsq_seq_lin_present(const dsq_seq_layer *s, int id);
/* The first linear of group g this layer has (the one a pass stops at to
 * capture the group's input), or -1. */
int dsq_seq_group_first(const dsq_seq_layer *s, int g);
/* Whether any linear of group g may be quantized. */
bool dsq_seq_group_any(const dsq_seq_layer *s, int g);

/* ---- folding per-channel scales (calibration/fold.c) ---- */

/* Whether group g's input (cols wide) has a producer that takes per-channel
 * scales exactly: a norm, a linear with one row per column, MLA's value rows. */
bool dsq_seq_group_foldable(const dsq_seq_layer *s, int g, int64_t cols);
/* Whether group g of this layer has routed-expert members. */
bool dsq_seq_group_has_experts(const dsq_seq_layer *s, int g);
/* Whether every member of group g but the router may be quantized (experts
 * by their shape), and there is one. */
bool dsq_seq_group_quantizable(const dsq_seq_layer *s, int g);
/* The producer of group g's input divides by sc [cols], every member the
 * layer holds (the router too) multiplies its columns; with routed-expert
 * members, sc is kept in s->expert_in for moe.c to apply to each expert. */
dsq_status dsq_seq_fold_scales(dsq_seq_layer *s, int g, const float *sc, int64_t cols);

/* What a pass's linear hook does. */
typedef struct dsq_seq_hooks {
    float *cap[DSQ_BLOCK_MAX_LINEARS];    /* capture buffers [tokens x in] */
    int64_t cap_tokens;                   /* > 0: captures keep only the first cap_tokens tokens */
    float *amax[DSQ_BLOCK_MAX_LINEARS];   /* per-channel running max |x| [in]; a NaN/Inf input is an error */
    double *sumsq[DSQ_BLOCK_MAX_LINEARS]; /* per-channel running sum of x^2 [in] (an imatrix's numerator) */
    int64_t row0;                         /* token offset of the current sample */
    int seqlen;                           /* tokens per sample (set by dsq_seq_run_pass, for messages) */
    const dsq_block_desc *d;              /* set by dsq_seq_run_pass, for messages */
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

/* BF16 passes: the linears of layer l a pass of half would run (h: its
 * stop, or NULL) packed once for the products that follow; a no-op in other
 * modes. Unpack before their weights change. */
dsq_status dsq_seq_pack_linears(dsq_seq_runner *r, int l, int half, const dsq_seq_hooks *h);
void dsq_seq_unpack_linears(dsq_seq_runner *r, int l);

/* GPTQ's true-sequential layer (method_gptq.c) on the layer's current
 * copies: s->q[id] for every ok linear, hout the layer's output. */
dsq_status dsq_seq_gptq_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout,
                              struct dsq_seq_report *rep);
/* GPTQ of linear id into the GGUF blocks s->o->gguf names (calibration/seq_gguf.c):
 * bytes to its put, s->w[id] their dequantized values. */
dsq_status dsq_seq_gguf_linear(dsq_seq_layer *s, int id, const dsq_hessian *H, struct dsq_seq_report *rep);
/* AWQ into GGUF blocks (calibration/seq_gguf.c): linear id's planned type and
 * importance (the imatrix entry, or NULL); whether a type is a block type
 * (else the plan keeps the linear in a float type); s->w[id] written in its
 * planned type with importance imp (any type: a folded float linear must
 * reach the file too) and handed to put, then replaced by what the file holds. */
dsq_status dsq_seq_gguf_target(dsq_seq_layer *s, int id, dsq_type *type, const float **importance);
bool dsq_seq_gguf_is_blocks(dsq_type type);
dsq_status dsq_seq_gguf_put(dsq_seq_layer *s, int id, dsq_type type, const float *imp);
struct dsq_seq_expert;
/* GPTQ of expert x's linear k into the GGUF blocks of its stacked tensor
 * (seq_gguf.c): bytes to put as expert x->e, x->w[k] their dequantized values. */
dsq_status dsq_seq_gguf_expert(struct dsq_seq_expert *x, int k, const dsq_hessian *H, struct dsq_seq_report *rep);
/* AWQ: dsq_seq_gguf_target and dsq_seq_gguf_put for expert x's linear k (its
 * importance: expert x->e's columns of the stacked entry). */
dsq_status dsq_seq_gguf_expert_target(const struct dsq_seq_expert *x, int k, dsq_type *type, const float **importance);
dsq_status dsq_seq_gguf_expert_put(struct dsq_seq_expert *x, int k, dsq_type type, const float *imp);
/* GPTQ of a routed expert: gate and up from its rows, down from the
 * activations of the quantized gate and up (x->q). */
dsq_status dsq_seq_gptq_expert(struct dsq_seq_expert *x, struct dsq_seq_report *rep);

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
    bool has_gguf[DSQ_INT_EXPERT_LINEARS]; /* handed to o->gguf->put as GGUF blocks */
    const float *x; /* [n_tok x dim]: the expert's input rows for statistics (NULL without data) */
    int64_t n_tok;
} dsq_seq_expert;

/* An expert's up -> down scales: up's rows divide, down's columns multiply. */
void dsq_seq_expert_fold_down(dsq_seq_expert *x, const float *sc);

/* The MoE MLP of a layer on n rows of its normed input, for the methods'
 * searches over the experts' input group, with memory bounded by one
 * expert: the rows are routed once by the float router; each run adds the
 * shared experts (the layer's current copies) and every routed expert on
 * its rows, each copied to F32 and passed to edit first (fake quantization
 * under candidate scales; NULL: as stored). */
typedef dsq_status (*dsq_seq_expert_edit_fn)(void *user, dsq_seq_expert *x);
typedef struct dsq_seq_moe_eval {
    dsq_seq_layer *s;
    dsq_seq_runner *r;
    void *b; /* moe.c's buffers */
} dsq_seq_moe_eval;
dsq_status dsq_seq_moe_eval_init(dsq_seq_moe_eval *e, dsq_seq_layer *s, dsq_seq_runner *r, const float *x, int64_t n);
/* y [n x dim] = the MLP's output on the rows. */
dsq_status dsq_seq_moe_eval_run(dsq_seq_moe_eval *e, dsq_seq_expert_edit_fn edit, void *user, float *y);
/* Each routed expert in turn, copied to F32 (its input scales applied),
 * with x->x / x->n_tok its routed rows among the eval's rows. */
dsq_status dsq_seq_moe_each_expert(dsq_seq_moe_eval *e, dsq_seq_expert_edit_fn fn, void *user);
void dsq_seq_moe_eval_free(dsq_seq_moe_eval *e);

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
/* The same for each linear of a routed expert. */
dsq_status dsq_seq_w8_expert_check_finite(const dsq_seq_expert *x);
/* s->w8's scheme by RTN on each linear of a routed expert (finite checks first). */
dsq_status dsq_seq_w8_expert_rtn(dsq_seq_expert *x);
/* s->w[id] -> s->q8[id] under the method's scheme by RTN, then w = its dequantized value. */
dsq_status dsq_seq_w8_rtn(dsq_seq_layer *s, int id);
/* GPTQ's 8-bit symmetric per-channel codes s->q[id] as the INT8 weight s->q8[id]. */
dsq_status dsq_seq_w8_from_gptq(dsq_seq_layer *s, int id);
/* The same for every linear of a routed expert that GPTQ quantized. */
dsq_status dsq_seq_w8_expert_from_gptq(dsq_seq_expert *x);
/* Static input scales of a routed expert from its statistics rows: gate and
 * up from its input, down from the activations of its quantized gate and up. */
dsq_status dsq_seq_w8_expert_act_scales(dsq_seq_expert *x);
/* Runs the layer (as it now is) from hin into hout, collecting what the
 * scheme needs: static input scales (max |x| of each group's input over all
 * tokens) and, with kv_fp8, k_scale / v_scale. */
dsq_status dsq_seq_w8_final_pass(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout);

#endif
