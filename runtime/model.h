/* A model ready to run: embedding, decoder layers laid out by the
 * architecture's block description (formats/block.h: Llama 2/3, Mistral,
 * SmolLM, DeepSeek-R1-Distill-Llama; Qwen2 and R1-Distill-Qwen with q/k/v
 * biases), final norm and head, from a GGUF file or a Hugging Face folder
 * (formats/checkpoint.h). Weights stay in the checkpoint's mmap; only
 * small tensors that must change type (norm weights, biases to F32) or that
 * sit misaligned in a safetensors file are copied.
 *
 * RoPE layout follows the source: GGUF "llama" Q/K rows were permuted by
 * llama.cpp's converter for interleaved pairs (NORM); GGUF "qwen2" and every
 * HF checkpoint keep rotate-half (NEOX). */
#ifndef DSQ_RUNTIME_MODEL_H
#define DSQ_RUNTIME_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/block.h"
#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "runtime/cpu/ops.h"
#include "runtime/linear.h"

/* One decoder layer, laid out as the model's block description says
 * (formats/block.h): norm[i] is description norm i, lin[i] linear i. */
typedef struct dsq_layer {
    const float *norm[DSQ_BLOCK_MAX_NORMS]; /* [dim] each */
    /* Any storage; callers may swap one for a quantized version (release the
     * old one first or keep it: the model releases what is here at close). */
    dsq_linear lin[DSQ_BLOCK_MAX_LINEARS];
    /* FP8 KV-cache scales of an 8-bit checkpoint (runtime/model_quant.h), 0 when it has none */
    float k_scale, v_scale;
    /* MoE layers: for each expert linear i (formats/block.h `expert`), its
     * n_routed storages (lin[i] stays empty); the router's selection bias
     * (e_score_correction_bias, noaux_tc) or NULL. Linears and norms the
     * layer does not have (dsq_block_*_present) stay empty / NULL. */
    dsq_linear *experts[DSQ_BLOCK_MAX_LINEARS];
    const float *router_bias;
    /* MLA from a GGUF file: kv_b_proj comes split as llama.cpp writes it,
     * attn_k_b [H x kv_lora x nope] and attn_v_b [H x v_head x kv_lora] (as
     * [H*kv_lora x nope] and [H*v_head x kv_lora] storages); kv_b's lin entry
     * is then empty and attention runs in the absorbed form */
    dsq_linear k_b, v_b;
} dsq_layer;

typedef struct dsq_model {
    dsq_checkpoint *ckpt; /* owns the mmaps every view points into */
    dsq_arch arch;
    const dsq_block_desc *block; /* the layers' layout */
    dsq_rope_layout rope_layout;
    const float *rope_freq_factors; /* GGUF rope_freqs.weight (head_dim/2) or NULL */
    int64_t dim, q_dim, kv_dim, ffn_dim, vocab;
    dsq_tensor tok_embd; /* [vocab x dim], any storage type */
    const float *output_norm;
    dsq_linear output; /* lm_head, or a view of tok_embd when tied */
    bool tied;
    dsq_layer *layers; /* arch.n_layers */
    void **owned;      /* copies made at load time */
    size_t n_owned, cap_owned;
} dsq_model;

/* path: a .gguf file or a Hugging Face folder (config.json + safetensors). */
dsq_status dsq_model_open(const char *path, dsq_model **out);

typedef struct dsq_model_opts {
    /* 8-bit checkpoints run weight-only (W8A16: activations stay F32), as
     * transformers does on the CPU and vLLM's Marlin FP8 path on GPUs
     * without FP8 units; default false: the activation scheme the config
     * names (vLLM's FP8 / INT8 kernels) */
    bool w8_weight_only;
} dsq_model_opts;

/* dsq_model_open with options (NULL: the defaults). */
dsq_status dsq_model_open_with(const char *path, const dsq_model_opts *o, dsq_model **out);
void dsq_model_close(dsq_model *m);
/* Packs every Q8_0 linear once for the int8 kernel (dsq_linear_q8_pack),
 * which decode steps and int8 batches then read instead of the file's blocks,
 * and drops the blocks' mapped pages from the resident set (the page cache
 * keeps them; the F32-activation paths read them back): generate, serve and
 * bench_forward call it. A no-op on CPUs without the kernel. */
dsq_status dsq_model_pack_int8(dsq_model *m);

/* Linear i of the block: its role ("q") and GGUF stem ("attn_q"); "?" out of range. */
const char *dsq_model_linear_role(const dsq_model *m, int i);
const char *dsq_model_linear_gguf(const dsq_model *m, int i);

#endif
