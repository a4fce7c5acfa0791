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
#include "core/status.h"
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
    /* MLA and MoE (DeepSeek) */
    DSQ_DIM_QLORA,   /* q_lora_rank */
    DSQ_DIM_KVA,     /* kv_lora_rank + qk_rope_head_dim: the latent and the shared rope key */
    DSQ_DIM_KVLORA,  /* kv_lora_rank */
    DSQ_DIM_KVB,     /* n_heads x (qk_nope_head_dim + v_head_dim): keys without rope and values */
    DSQ_DIM_SHEXP,   /* n_shared_experts x moe_intermediate_size */
    DSQ_DIM_EXPFFN,  /* moe_intermediate_size */
    DSQ_DIM_EXPERTS, /* n_routed_experts: the router's outputs */
} dsq_dim;

/* In which layers a norm or linear exists (DeepSeek's layers differ). */
typedef enum dsq_block_when {
    DSQ_WHEN_ALWAYS = 0,
    DSQ_WHEN_Q_LORA,    /* q_lora_rank > 0: q_a / q_a_norm / q_b */
    DSQ_WHEN_NO_Q_LORA, /* q_lora_rank == 0: a plain q_proj */
    DSQ_WHEN_DENSE,     /* a dense MLP layer (every layer of a dense model) */
    DSQ_WHEN_MOE,       /* an MoE layer: router and routed experts */
    DSQ_WHEN_SHARED,    /* an MoE layer with shared experts */
} dsq_block_when;

/* What the drivers built on the description can do with a block yet. */
enum {
    DSQ_BLOCK_CAN_CALIBRATE = 1 << 0, /* rtn / awq / gptq / smoothquant / fp8, imatrix */
    DSQ_BLOCK_CAN_GGUF = 1 << 1,      /* HF <-> GGUF conversion and dsquant gguf */
};

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
    /* MLA's kv_b: per head, qk_nope_head_dim key rows, then v_head_dim value
     * rows; the group's input column h * v_head_dim + d is head h's attention
     * output of value row d, a convex mix of that row's outputs, so a scale
     * folds into that row (src = kv_b's index in linears) */
    DSQ_SRC_MLA_VALUES,
} dsq_block_src;

typedef struct dsq_block_norm {
    const char *role; /* "attn_norm" */
    const char *hf;   /* after "model.layers.N.", without ".weight" */
    const char *gguf; /* after "blk.N.", without ".weight" */
    dsq_dim dim;      /* its width (0: hidden_size) */
    dsq_block_when when;
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
    dsq_block_when when;
    /* MoE router: runs in F32 and stays unquantized (no method takes it) */
    bool router;
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
    unsigned caps; /* DSQ_BLOCK_CAN_* */
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
/* Whether norm / linear i exists in layer l of a model with config a. */
bool dsq_block_norm_present(const dsq_block_desc *d, const dsq_arch *a, int64_t l, int i);
bool dsq_block_linear_present(const dsq_block_desc *d, const dsq_arch *a, int64_t l, int i);
/* Norm i's width. */
int64_t dsq_block_norm_dim(const dsq_block_desc *d, const dsq_arch *a, int i);
/* DSQ_ERR_UNSUPPORTED naming the architecture and `what` unless d has every capability in caps. */
dsq_status dsq_block_require(const dsq_block_desc *d, const dsq_arch *a, unsigned caps, const char *what);
/* The row of group g's producing linear (src LINEAR or MLA_VALUES) whose
 * output is the group's input column c. */
int64_t dsq_block_src_row(const dsq_block_desc *d, const dsq_arch *a, int g, int64_t c);
/* The first routed-expert linear in description order, or -1 (a dense block). */
int dsq_block_first_expert(const dsq_block_desc *d);
/* Index of the linear whose role is `role`, or -1. */
int dsq_block_find_linear(const dsq_block_desc *d, const char *role);

/* The architectures' own descriptions (formats/block_<arch>.c). */
extern const dsq_block_desc dsq_block_llama;
extern const dsq_block_desc dsq_block_qwen2;
extern const dsq_block_desc dsq_block_deepseek2;

#endif
