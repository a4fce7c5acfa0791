/* A Llama-family model ready to run: Llama 2/3, Mistral, Qwen2 (q/k/v bias),
 * SmolLM, DeepSeek-R1-Distill-Llama/Qwen, from a GGUF file or a Hugging Face
 * folder (formats/checkpoint.h). Weights stay in the checkpoint's mmap; only
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
#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "runtime/cpu/ops.h"
#include "runtime/linear.h"

typedef enum dsq_linear_id {
    DSQ_LIN_Q = 0,
    DSQ_LIN_K,
    DSQ_LIN_V,
    DSQ_LIN_O,
    DSQ_LIN_GATE,
    DSQ_LIN_UP,
    DSQ_LIN_DOWN,
    DSQ_LIN_COUNT
} dsq_linear_id;

typedef struct dsq_layer {
    const float *attn_norm; /* [dim] */
    const float *ffn_norm;  /* [dim] */
    /* Any storage; callers may swap one for a quantized version (release the
     * old one first or keep it: the model releases what is here at close). */
    dsq_linear lin[DSQ_LIN_COUNT];
} dsq_layer;

typedef struct dsq_model {
    dsq_checkpoint *ckpt; /* owns the mmaps every view points into */
    dsq_arch arch;
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
void dsq_model_close(dsq_model *m);

/* "q", "k", "v", "o", "gate", "up", "down". */
const char *dsq_linear_id_name(dsq_linear_id id);
/* GGUF stem: "attn_q", ..., "ffn_down". */
const char *dsq_linear_id_gguf(dsq_linear_id id);

#endif
