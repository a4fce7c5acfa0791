/* The Llama block (Llama 2/3, Mistral, SmolLM, DeepSeek-R1-Distill-Llama)
 * and its Qwen2 variant (q/k/v biases, no GGUF row permutation): the only
 * place that names their linears. Module paths after transformers'
 * modeling_llama / modeling_qwen2, GGUF stems after gguf-py's
 * tensor_mapping.py. The forward is runtime/block_llama.c. */
#include "formats/block_llama.h"

#include "formats/block.h"

enum { NORM_ATTN = DSQ_LLAMA_NORM_ATTN, NORM_FFN = DSQ_LLAMA_NORM_FFN };
enum { LIN_Q = DSQ_LLAMA_Q, LIN_K = DSQ_LLAMA_K, LIN_V = DSQ_LLAMA_V, LIN_O = DSQ_LLAMA_O, LIN_GATE = DSQ_LLAMA_GATE,
       LIN_UP = DSQ_LLAMA_UP, LIN_DOWN = DSQ_LLAMA_DOWN };
enum { G_ATTN_IN = DSQ_LLAMA_G_ATTN_IN, G_ATTN_OUT = DSQ_LLAMA_G_ATTN_OUT, G_MLP_IN = DSQ_LLAMA_G_MLP_IN,
       G_MLP_OUT = DSQ_LLAMA_G_MLP_OUT };

static const dsq_block_norm g_norms[] = {
    [NORM_ATTN] = {"attn_norm", "input_layernorm", "attn_norm"},
    [NORM_FFN] = {"ffn_norm", "post_attention_layernorm", "ffn_norm"},
};

/* AutoAWQ's llama scaling groups: norm -> q/k/v (loss: self_attn), v -> o
 * (loss: o_proj; only when v and o are square to each other, checked by the
 * driver), norm -> gate/up (loss: mlp), up -> down (loss: down_proj). The same
 * four are GPTQ's true-sequential subsets. */
static const dsq_block_group g_groups[] = {
    [G_ATTN_IN] = {"attn_in", 0, DSQ_SRC_NORM, NORM_ATTN, true, false},
    [G_ATTN_OUT] = {"attn_out", 0, DSQ_SRC_LINEAR, LIN_V, false, true},
    [G_MLP_IN] = {"mlp_in", 1, DSQ_SRC_NORM, NORM_FFN, true, false},
    [G_MLP_OUT] = {"mlp_out", 1, DSQ_SRC_LINEAR, LIN_UP, false, true},
};

#define LINEARS(qkv_bias, qk_perm_q, qk_perm_k, o_bias)                                                            \
    {                                                                                                              \
        [LIN_Q] = {"q", "self_attn.q_proj", "attn_q", DSQ_DIM_Q, DSQ_DIM_MODEL, qk_perm_q, qkv_bias, G_ATTN_IN,    \
                   false, true},                                                                                         \
        [LIN_K] = {"k", "self_attn.k_proj", "attn_k", DSQ_DIM_K, DSQ_DIM_MODEL, qk_perm_k, qkv_bias, G_ATTN_IN,    \
                   false, true},                                                                                         \
        [LIN_V] = {"v", "self_attn.v_proj", "attn_v", DSQ_DIM_V, DSQ_DIM_MODEL, DSQ_PERMUTE_NONE, qkv_bias,        \
                   G_ATTN_IN, false},                                                                              \
        [LIN_O] = {"o", "self_attn.o_proj", "attn_output", DSQ_DIM_MODEL, DSQ_DIM_ATT, DSQ_PERMUTE_NONE, o_bias,   \
                   G_ATTN_OUT, false},                                                                             \
        [LIN_GATE] = {"gate", "mlp.gate_proj", "ffn_gate", DSQ_DIM_FFN, DSQ_DIM_MODEL, DSQ_PERMUTE_NONE,           \
                      DSQ_BIAS_MLP, G_MLP_IN, false},                                                              \
        [LIN_UP] = {"up", "mlp.up_proj", "ffn_up", DSQ_DIM_FFN, DSQ_DIM_MODEL, DSQ_PERMUTE_NONE, DSQ_BIAS_MLP,     \
                    G_MLP_IN, false},                                                                              \
        [LIN_DOWN] = {"down", "mlp.down_proj", "ffn_down", DSQ_DIM_MODEL, DSQ_DIM_FFN, DSQ_PERMUTE_NONE,           \
                      DSQ_BIAS_MLP, G_MLP_OUT, false},                                                             \
    }

/* LlamaModel: attention_bias adds q/k/v/o biases; GGUF q/k rows permuted. */
static const dsq_block_linear g_llama[] = LINEARS(DSQ_BIAS_ATTENTION, DSQ_PERMUTE_Q, DSQ_PERMUTE_K, DSQ_BIAS_ATTENTION);
/* Qwen2: q/k/v always biased, o never; NEOX rope in GGUF too, so no permutation. */
static const dsq_block_linear g_qwen2[] = LINEARS(DSQ_BIAS_ALWAYS, DSQ_PERMUTE_NONE, DSQ_PERMUTE_NONE, DSQ_BIAS_NEVER);

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

#define CAPS (DSQ_BLOCK_CAN_CALIBRATE | DSQ_BLOCK_CAN_GGUF)

const dsq_block_desc dsq_block_llama = {"llama",  N(g_norms), N(g_llama), N(g_groups), 2,
                                        g_norms, g_llama,     g_groups,   CAPS};
const dsq_block_desc dsq_block_qwen2 = {"qwen2",  N(g_norms), N(g_qwen2), N(g_groups), 2,
                                        g_norms, g_qwen2,     g_groups,   CAPS};
