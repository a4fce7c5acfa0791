/* A decoder block described as data: its norms, its linears (role, HF module
 * path, GGUF tensor stem, shape, GGUF row permutation, when a bias exists)
 * and the groups of linears that read the same input, with the operation
 * that produces that input (the norm or the linear that AWQ and SmoothQuant
 * fold per-channel scales into).
 *
 * Everything that walks a block iterates this description: the tensor name
 * maps (formats/hf_names.c), the model loader, the calibration driver's
 * subsets and scale groups, the artifact writers. Only an architecture's own
 * file (formats/block_<arch>.c) spells out its linears; the runtime's block
 * forward for it lives in runtime/block_<arch>.c. docs/extending.md says how
 * to add one.
 *
 * A block runs in halves (attention, then MLP), each one residual update:
 * hidden += f(norm(hidden)). Linears carry an expert flag for MoE layers
 * (hooks name a linear by layer, linear index and expert). */
#ifndef DSQ_FORMATS_BLOCK_H
#define DSQ_FORMATS_BLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "formats/hf_config.h"
#include "formats/hf_names.h"

/* Bounds every description keeps (test_block checks), so per-layer arrays can be fixed. */
#define DSQ_BLOCK_MAX_NORMS 4
#define DSQ_BLOCK_MAX_LINEARS 16
#define DSQ_BLOCK_MAX_GROUPS 8

/* The widths a linear's shape is made of, resolved against a dsq_arch. */
typedef enum dsq_dim {
    DSQ_DIM_MODEL = 0, /* hidden_size */
    DSQ_DIM_Q,         /* n_heads x query/key head dim */
    DSQ_DIM_K,         /* n_kv_heads x query/key head dim */
    DSQ_DIM_V,         /* n_kv_heads x value head dim */
    DSQ_DIM_ATT,       /* n_heads x value head dim: the attention output */
    DSQ_DIM_FFN,       /* intermediate_size */
} dsq_dim;

/* When a linear carries a bias tensor. */
typedef enum dsq_bias_rule {
    DSQ_BIAS_NEVER = 0,
    DSQ_BIAS_ALWAYS,    /* Qwen2's q/k/v */
    DSQ_BIAS_ATTENTION, /* config attention_bias */
    DSQ_BIAS_MLP,       /* config mlp_bias */
} dsq_bias_rule;

/* What produces a group's input. */
typedef enum dsq_block_src {
    DSQ_SRC_NORM = 0, /* a norm of the residual stream (src = its index in norms) */
    /* another linear's output through an op that keeps per-channel scales
     * (attention's value path when heads map one to one; SwiGLU's up):
     * scales fold into that linear's rows (src = its index in linears) */
    DSQ_SRC_LINEAR,
} dsq_block_src;

typedef struct dsq_block_norm {
    const char *role; /* "attn_norm" */
    const char *hf;   /* after "model.layers.N.", without ".weight" */
    const char *gguf; /* after "blk.N.", without ".weight" */
} dsq_block_norm;

typedef struct dsq_block_linear {
    const char *role; /* "q": short name in logs and hooks */
    const char *hf;   /* after "model.layers.N.": "self_attn.q_proj" */
    const char *gguf; /* after "blk.N.": "attn_q" */
    dsq_dim out, in;
    dsq_permute_kind perm; /* llama.cpp's converter permutes these rows for GGUF */
    dsq_bias_rule bias;
    int group;   /* index in groups */
    bool expert; /* one per routed expert (MoE) */
    /* its output only feeds attention scores (q, k): its own output error
     * says little, so AWQ's clip search leaves it alone (AutoAWQ's avoid_clipping) */
    bool scores;
} dsq_block_linear;

typedef struct dsq_block_group {
    const char *name; /* "attn_in" */
    int half;         /* the half that runs it: 0 attention, 1 MLP */
    dsq_block_src src;
    int src_index;
    /* AWQ's loss for the group's scales: the output of the whole half
     * (AutoAWQ's module2inspect = self_attn / mlp) or of the group's one
     * linear alone (o_proj, down_proj) */
    bool loss_half;
    /* the half's last product (hidden += linear(x)): a driver holding x can
     * finish the half with one product */
    bool tail;
} dsq_block_group;

typedef struct dsq_block_desc {
    const char *name; /* "llama" */
    int n_norms, n_linears, n_groups, n_halves;
    const dsq_block_norm *norms;
    const dsq_block_linear *linears;
    const dsq_block_group *groups;
} dsq_block_desc;

/* The description of the architecture's block (every family dsq_arch knows has one). */
const dsq_block_desc *dsq_block_desc_of(const dsq_arch *a);
/* The width d resolved for a. */
int64_t dsq_block_dim(const dsq_arch *a, dsq_dim d);
/* Linear i's [out x in]. */
void dsq_block_linear_shape(const dsq_block_desc *d, const dsq_arch *a, int i, int64_t *out, int64_t *in);
/* Whether linear i of a model with config a has a bias tensor. */
bool dsq_block_linear_has_bias(const dsq_block_linear *l, const dsq_arch *a);
/* The first linear of group g in description order (the one a pass stops at
 * to capture the group's input), or -1 for an empty group. */
int dsq_block_group_first(const dsq_block_desc *d, int g);
/* The linears of group g in description order: writes up to cap indices into
 * ids and returns how many the group has. */
int dsq_block_group_members(const dsq_block_desc *d, int g, int *ids, int cap);
/* Index of the linear whose role is `role`, or -1. */
int dsq_block_find_linear(const dsq_block_desc *d, const char *role);

/* The architectures' own descriptions (formats/block_<arch>.c). */
extern const dsq_block_desc dsq_block_llama;
extern const dsq_block_desc dsq_block_qwen2;

#endif
