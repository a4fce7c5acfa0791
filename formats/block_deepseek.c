/* The DeepSeek-V2/V3/R1 block: multi-head latent attention and a MoE MLP
 * (dense in the first layers). Module paths after transformers'
 * modeling_deepseek_v3 / modeling_deepseek_v2 (and DeepSeek's own
 * checkpoints, which use the same names); GGUF stems after gguf-py's
 * tensor_mapping.py for arch deepseek2. Routed experts are one linear per
 * expert ("%d" in the HF path takes the expert index; GGUF stacks them into
 * one 3-D tensor). The forward is runtime/block_deepseek.c. */
#include "formats/block_deepseek.h"

#include <string.h>

#include "formats/block.h"

enum { NORM_ATTN = DSQ_DS_NORM_ATTN, NORM_FFN = DSQ_DS_NORM_FFN, NORM_QA = DSQ_DS_NORM_QA, NORM_KVA = DSQ_DS_NORM_KVA };

static const dsq_block_norm g_norms[] = {
    [NORM_ATTN] = {"attn_norm", "input_layernorm", "attn_norm", DSQ_DIM_MODEL, DSQ_WHEN_ALWAYS},
    [NORM_FFN] = {"ffn_norm", "post_attention_layernorm", "ffn_norm", DSQ_DIM_MODEL, DSQ_WHEN_ALWAYS},
    [NORM_QA] = {"q_a_norm", "self_attn.q_a_layernorm", "attn_q_a_norm", DSQ_DIM_QLORA, DSQ_WHEN_Q_LORA},
    [NORM_KVA] = {"kv_a_norm", "self_attn.kv_a_layernorm", "attn_kv_a_norm", DSQ_DIM_KVLORA, DSQ_WHEN_ALWAYS},
};

/* AWQ's groups for MLA and MoE: input_layernorm -> q (or q_a) / kv_a (loss:
 * the attention), q_a_layernorm -> q_b, kv_a_layernorm -> kv_b, kv_b's values
 * -> o (each head has its own values, so every o column has one producing
 * row); post_attention_layernorm -> every gate/up and the router (loss: the
 * MLP; the router takes the scales unquantized, so routing is unchanged),
 * each up -> its down. AutoAWQ's deepseek_v2/v3 models list the same groups
 * except v -> o and the router. */
static const dsq_block_group g_groups[] = {
    [DSQ_DS_G_ATTN_IN] = {"attn_in", 0, DSQ_SRC_NORM, NORM_ATTN, true, false},
    [DSQ_DS_G_QB_IN] = {"q_b_in", 0, DSQ_SRC_NORM, NORM_QA, false, false},
    [DSQ_DS_G_KVB_IN] = {"kv_b_in", 0, DSQ_SRC_NORM, NORM_KVA, false, false},
    [DSQ_DS_G_ATTN_OUT] = {"attn_out", 0, DSQ_SRC_MLA_VALUES, DSQ_DS_KV_B, false, true},
    [DSQ_DS_G_MLP_IN] = {"mlp_in", 1, DSQ_SRC_NORM, NORM_FFN, true, false},
    [DSQ_DS_G_EX_OUT] = {"exp_out", 1, DSQ_SRC_LINEAR, DSQ_DS_EX_UP, false, false},
    [DSQ_DS_G_SH_OUT] = {"shexp_out", 1, DSQ_SRC_LINEAR, DSQ_DS_SH_UP, false, false},
    [DSQ_DS_G_MLP_OUT] = {"mlp_out", 1, DSQ_SRC_LINEAR, DSQ_DS_UP, false, true},
};

#define A DSQ_BIAS_ATTENTION
#define NB DSQ_BIAS_NEVER
#define NP DSQ_PERMUTE_NONE

/* role, HF path, GGUF stem, out, in, permutation, bias, group, expert, scores, when, router */
static const dsq_block_linear g_linears[] = {
    [DSQ_DS_Q] = {"q", "self_attn.q_proj", "attn_q", DSQ_DIM_Q, DSQ_DIM_MODEL, NP, NB, DSQ_DS_G_ATTN_IN, false, true,
                  DSQ_WHEN_NO_Q_LORA, false},
    [DSQ_DS_Q_A] = {"q_a", "self_attn.q_a_proj", "attn_q_a", DSQ_DIM_QLORA, DSQ_DIM_MODEL, NP, A, DSQ_DS_G_ATTN_IN,
                    false, false, DSQ_WHEN_Q_LORA, false},
    [DSQ_DS_Q_B] = {"q_b", "self_attn.q_b_proj", "attn_q_b", DSQ_DIM_Q, DSQ_DIM_QLORA, NP, NB, DSQ_DS_G_QB_IN, false,
                    true, DSQ_WHEN_Q_LORA, false},
    [DSQ_DS_KV_A] = {"kv_a", "self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa", DSQ_DIM_KVA, DSQ_DIM_MODEL, NP, A,
                     DSQ_DS_G_ATTN_IN, false, false, DSQ_WHEN_ALWAYS, false},
    [DSQ_DS_KV_B] = {"kv_b", "self_attn.kv_b_proj", "attn_kv_b", DSQ_DIM_KVB, DSQ_DIM_KVLORA, NP, NB, DSQ_DS_G_KVB_IN,
                     false, false, DSQ_WHEN_ALWAYS, false},
    [DSQ_DS_O] = {"o", "self_attn.o_proj", "attn_output", DSQ_DIM_MODEL, DSQ_DIM_ATT, NP, A, DSQ_DS_G_ATTN_OUT, false,
                  false, DSQ_WHEN_ALWAYS, false},
    [DSQ_DS_GATE] = {"gate", "mlp.gate_proj", "ffn_gate", DSQ_DIM_FFN, DSQ_DIM_MODEL, NP, NB, DSQ_DS_G_MLP_IN, false,
                     false, DSQ_WHEN_DENSE, false},
    [DSQ_DS_UP] = {"up", "mlp.up_proj", "ffn_up", DSQ_DIM_FFN, DSQ_DIM_MODEL, NP, NB, DSQ_DS_G_MLP_IN, false, false,
                   DSQ_WHEN_DENSE, false},
    [DSQ_DS_DOWN] = {"down", "mlp.down_proj", "ffn_down", DSQ_DIM_MODEL, DSQ_DIM_FFN, NP, NB, DSQ_DS_G_MLP_OUT, false,
                     false, DSQ_WHEN_DENSE, false},
    [DSQ_DS_SH_GATE] = {"gate_shexp", "mlp.shared_experts.gate_proj", "ffn_gate_shexp", DSQ_DIM_SHEXP, DSQ_DIM_MODEL,
                        NP, NB, DSQ_DS_G_MLP_IN, false, false, DSQ_WHEN_SHARED, false},
    [DSQ_DS_SH_UP] = {"up_shexp", "mlp.shared_experts.up_proj", "ffn_up_shexp", DSQ_DIM_SHEXP, DSQ_DIM_MODEL, NP, NB,
                      DSQ_DS_G_MLP_IN, false, false, DSQ_WHEN_SHARED, false},
    [DSQ_DS_SH_DOWN] = {"down_shexp", "mlp.shared_experts.down_proj", "ffn_down_shexp", DSQ_DIM_MODEL, DSQ_DIM_SHEXP,
                        NP, NB, DSQ_DS_G_SH_OUT, false, false, DSQ_WHEN_SHARED, false},
    [DSQ_DS_EX_GATE] = {"gate_exps", "mlp.experts.%d.gate_proj", "ffn_gate_exps", DSQ_DIM_EXPFFN, DSQ_DIM_MODEL, NP, NB,
                        DSQ_DS_G_MLP_IN, true, false, DSQ_WHEN_MOE, false},
    [DSQ_DS_EX_UP] = {"up_exps", "mlp.experts.%d.up_proj", "ffn_up_exps", DSQ_DIM_EXPFFN, DSQ_DIM_MODEL, NP, NB,
                      DSQ_DS_G_MLP_IN, true, false, DSQ_WHEN_MOE, false},
    [DSQ_DS_EX_DOWN] = {"down_exps", "mlp.experts.%d.down_proj", "ffn_down_exps", DSQ_DIM_MODEL, DSQ_DIM_EXPFFN, NP, NB,
                        DSQ_DS_G_EX_OUT, true, false, DSQ_WHEN_MOE, false},
    [DSQ_DS_ROUTER] = {"router", "mlp.gate", "ffn_gate_inp", DSQ_DIM_EXPERTS, DSQ_DIM_MODEL, NP, NB, DSQ_DS_G_MLP_IN,
                       false, false, DSQ_WHEN_MOE, true},
};

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Calibration: the methods with an expert function (calibration/moe.c).
 * GGUF: HF -> GGUF (formats/convert.c plans experts and kv_b itself) and
 * the runtime reading deepseek2 files. */
const dsq_block_desc dsq_block_deepseek2 = {"deepseek2", N(g_norms), N(g_linears),
                                            N(g_groups), 2,          g_norms,
                                            g_linears,   g_groups,   DSQ_BLOCK_CAN_CALIBRATE | DSQ_BLOCK_CAN_GGUF};

void dsq_ds_kv_b_part(bool keys, int64_t H, int64_t N, int64_t D, int64_t L, const float *kv, float *dst)
{
    const int64_t W = N + D;
    for (int64_t h = 0; h < H; h++) {
        const float *kh = kv + h * W * L; /* rows: N keys, then D values, each of L */
        if (keys)
            for (int64_t c = 0; c < L; c++)
                for (int64_t d = 0; d < N; d++) dst[(h * L + c) * N + d] = kh[d * L + c];
        else
            memcpy(dst + h * D * L, kh + N * L, (size_t)(D * L) * sizeof *dst);
    }
}
