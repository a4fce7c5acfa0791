/* Indices into the DeepSeek-V2/V3 block description (formats/block_deepseek.c),
 * for the block's own forward (runtime/block_deepseek.c) and the loader's
 * router bias; every other walker iterates the description. */
#ifndef DSQ_FORMATS_BLOCK_DEEPSEEK_H
#define DSQ_FORMATS_BLOCK_DEEPSEEK_H

#include <stdbool.h>
#include <stdint.h>

enum { DSQ_DS_NORM_ATTN = 0, DSQ_DS_NORM_FFN, DSQ_DS_NORM_QA, DSQ_DS_NORM_KVA };
enum {
    DSQ_DS_Q = 0, /* plain q_proj (q_lora_rank 0) */
    DSQ_DS_Q_A,
    DSQ_DS_Q_B,
    DSQ_DS_KV_A, /* kv_a_proj_with_mqa: the latent, then the shared rope key */
    DSQ_DS_KV_B, /* per head: keys without rope, then values */
    DSQ_DS_O,
    DSQ_DS_GATE, /* dense layers */
    DSQ_DS_UP,
    DSQ_DS_DOWN,
    DSQ_DS_SH_GATE, /* shared experts */
    DSQ_DS_SH_UP,
    DSQ_DS_SH_DOWN,
    DSQ_DS_EX_GATE, /* routed experts */
    DSQ_DS_EX_UP,
    DSQ_DS_EX_DOWN,
    DSQ_DS_ROUTER,
    DSQ_DS_N_LINEARS
};
enum {
    DSQ_DS_G_ATTN_IN = 0,
    DSQ_DS_G_QB_IN,
    DSQ_DS_G_KVB_IN,
    DSQ_DS_G_ATTN_OUT,
    DSQ_DS_G_MLP_IN,
    DSQ_DS_G_EX_OUT,
    DSQ_DS_G_SH_OUT,
    DSQ_DS_G_MLP_OUT
};

/* llama.cpp's split of kv_b_proj [H (N + D), L] (per head N key rows, then D
 * value rows, each of the L latent columns): keys = true gives attn_k_b
 * [H, L, N] (each head's key rows transposed), false attn_v_b [H, D, L] (its
 * value rows as they are). dst holds H * L * N or H * D * L floats. */
void dsq_ds_kv_b_part(bool keys, int64_t H, int64_t N, int64_t D, int64_t L, const float *kv, float *dst);

/* The router's selection bias (noaux_tc): after "model.layers.N." / "blk.N.". */
#define DSQ_DS_ROUTER_BIAS_HF "mlp.gate.e_score_correction_bias"
#define DSQ_DS_ROUTER_BIAS_GGUF "exp_probs_b.bias"
#define DSQ_DS_ROUTER_BIAS_HF_LEAF "e_score_correction_bias"

#endif
