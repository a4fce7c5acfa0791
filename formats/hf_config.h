/* The architecture description of a Llama-family model, read from a Hugging
 * Face config.json or from GGUF metadata, and written back to either.
 *
 * HF -> GGUF -> HF keeps every field except what GGUF has no place for:
 * MistralForCausalLM comes back as LlamaForCausalLM (GGUF "llama") without
 * its sliding_window; eos_token_id lists keep their first id only (from
 * config.json on); torch_dtype comes from token_embd.weight's type (empty
 * when quantized); attention_bias/mlp_bias from blk.0 bias tensors. llama3
 * rope parameters travel only as the rope_freqs.weight table: factor is its
 * last value, original_max_position_embeddings 8192 (the converter's
 * default) unless rope.scaling.original_context_length says otherwise,
 * low/high_freq_factor are fitted to the blended part of the table (two
 * points give both) and the whole table is recomputed to check them; a table
 * that does not fit is refused. Qwen2 GGUFs have no vocab_size key: the token
 * list's length is used. */
#ifndef DSQ_FORMATS_HF_CONFIG_H
#define DSQ_FORMATS_HF_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "formats/gguf.h"

typedef enum dsq_arch_family {
    DSQ_ARCH_LLAMA = 0, /* LlamaForCausalLM, MistralForCausalLM (GGUF "llama") */
    DSQ_ARCH_QWEN2 = 1, /* Qwen2ForCausalLM (GGUF "qwen2"; q/k/v bias; NEOX rope) */
    /* DeepseekV2ForCausalLM, DeepseekV3ForCausalLM (GGUF "deepseek2"): MLA
     * attention, MoE with shared experts after dense first layers */
    DSQ_ARCH_DEEPSEEK2 = 2,
} dsq_arch_family;

/* How a DeepSeek router picks its experts (config topk_method). */
typedef enum dsq_topk_method {
    DSQ_TOPK_GREEDY = 0,       /* the top_k scores */
    DSQ_TOPK_GROUP_LIMITED,    /* V2: groups ranked by their best score, top_k within topk_group groups */
    DSQ_TOPK_NOAUX_TC,         /* V3: groups ranked by their two best biased scores; the bias only selects */
} dsq_topk_method;

typedef enum dsq_scoring {
    DSQ_SCORING_SOFTMAX = 0,
    DSQ_SCORING_SIGMOID,
} dsq_scoring;

/* Multi-head latent attention (DeepSeek-V2/V3): q through a low-rank
 * q_a -> norm -> q_b (or a plain q_proj when q_lora_rank is 0), keys and
 * values from a kv_lora_rank latent plus one shared rope key per token. */
typedef struct dsq_arch_mla {
    int64_t q_lora_rank; /* 0: plain q_proj (V2-Lite) */
    int64_t kv_lora_rank;
    int64_t qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    bool rope_interleave; /* rope on interleaved pairs (DeepSeek's layout); false: rotate-half */
    /* yarn's mscale and mscale_all_dim (0 when absent): cos/sin and the softmax scale */
    double yarn_mscale, yarn_mscale_all_dim;
} dsq_arch_mla;

/* The MoE layout: layers from first_dense on with index % layer_freq == 0
 * route each token to top_k of n_routed experts (of ffn width each) and
 * run n_shared shared experts (one MLP of n_shared x ffn) on every token. */
typedef struct dsq_arch_moe {
    int64_t n_routed, n_shared, top_k, ffn;
    int64_t n_group, topk_group;
    int64_t first_dense, layer_freq;
    dsq_topk_method topk_method;
    dsq_scoring scoring;
    bool norm_topk_prob;
    double routed_scaling;
} dsq_arch_moe;

typedef enum dsq_rope_scaling {
    DSQ_ROPE_SCALING_NONE = 0,
    DSQ_ROPE_SCALING_LINEAR,
    DSQ_ROPE_SCALING_LLAMA3,
    DSQ_ROPE_SCALING_YARN,
} dsq_rope_scaling;

typedef struct dsq_arch {
    dsq_arch_family family;
    char hf_architecture[64]; /* "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM" */
    char model_type[32];      /* config.json model_type: "llama", "mistral", "qwen2" */
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t n_layers;
    int64_t n_heads;
    int64_t n_kv_heads;
    int64_t head_dim; /* hidden_size / n_heads unless config says otherwise */
    int64_t vocab_size;
    int64_t max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    dsq_rope_scaling rope_scaling;
    double rope_factor;                /* linear/llama3/yarn factor */
    double rope_low_freq_factor;       /* llama3 */
    double rope_high_freq_factor;      /* llama3 */
    int64_t rope_original_max_pos;     /* llama3 / yarn original_max_position_embeddings */
    /* yarn; 0 when config.json does not give them (then not written to GGUF) */
    double yarn_beta_fast, yarn_beta_slow, yarn_attn_factor;
    bool tie_word_embeddings;
    bool attention_bias; /* q/k/v (and o for llama when set) carry biases; always true for qwen2 q/k/v */
    bool mlp_bias;
    int64_t bos_token_id, eos_token_id; /* -1 when absent */
    char torch_dtype[16];               /* "bfloat16", "float16", "float32" or "" */
    int64_t sliding_window;             /* mistral; 0 when absent/null */
    /* Fields added after the first version: */
    bool has_head_dim; /* config.json / GGUF stated head_dim (GGUF: attention.key_length) explicitly */
    /* DeepSeek (family DSQ_ARCH_DEEPSEEK2; zero otherwise). head_dim is then
     * the query/key head (qk_nope + qk_rope), n_kv_heads equals n_heads. */
    dsq_arch_mla mla;
    dsq_arch_moe moe;
    int64_t n_mtp_layers; /* num_nextn_predict_layers: multi-token-prediction layers after the last, not run */
} dsq_arch;

/* Whether layer l of a is an MoE layer (DeepSeek: l >= first_dense and l % layer_freq == 0). */
bool dsq_arch_layer_is_moe(const dsq_arch *a, int64_t l);

/* Parses config.json text; unknown architectures are refused by name
 * (DSQ_ERR_UNSUPPORTED), missing required fields name the field. `path` is
 * only used in messages. */
dsq_status dsq_arch_from_hf_json(const char *json, const char *path, dsq_arch *out);
/* Reads <dir>/config.json. */
dsq_status dsq_arch_from_hf_dir(const char *dir, dsq_arch *out);
/* Serialises to a config.json text (malloc'd, pretty-printed) as transformers writes it. */
dsq_status dsq_arch_to_hf_json(const dsq_arch *a, char **out_json);

/* From GGUF metadata (general.architecture "llama" or "qwen2" and its keys). */
dsq_status dsq_arch_from_gguf(const dsq_gguf *g, dsq_arch *out);
/* GGUF architecture name for the family: "llama" / "qwen2". */
const char *dsq_arch_gguf_name(const dsq_arch *a);
/* Writes general.architecture and every <arch>.* key llama.cpp's converter writes. */
dsq_status dsq_arch_to_gguf(const dsq_arch *a, dsq_gguf_writer *w);

/* Checks sizes and ratios (positive sizes, n_heads divisible by n_kv_heads,
 * even head_dim, finite positive eps/theta, rope parameters). */
dsq_status dsq_arch_validate(const dsq_arch *a, const char *what);

/* The F32 rope_freqs.weight tensor llama.cpp's converter adds for llama3 rope
 * scaling (LlamaModel.generate_extra_tensors): n must be head_dim / 2. Each
 * step is done in float32 in the converter's order (torch float32 maths). */
dsq_status dsq_arch_llama3_rope_freqs(const dsq_arch *a, float *out, int64_t n);

#endif
