/* Per-tensor type choice of llama-quantize ("quantization mixes").
 *
 * Reproduces llama.cpp's llama_model_quantize_impl / llama_tensor_get_type
 * (src/llama-quant.cpp, reference commit c392e5094deaf2d1a7c18683214f007fad3fe42b;
 * notes in shared/design/algorithms-notes.md section 1): which tensors are
 * quantized at all, the ftype's default type, the per-tensor bumps driven by
 * stateful counters (attn_v / ffn_down layer positions, use_more_bits), the
 * output / token-embedding rules, and the fallback for rows whose length is not
 * a multiple of the chosen type's block size.
 *
 * Pure logic: no tensor data is read. The counters depend on the order in which
 * llama.cpp visits tensors (layer number, then name), so dsq_mix_plan takes the
 * whole tensor list and visits it in that order itself; the caller may pass the
 * tensors in any order. */
#ifndef DSQ_QUANTIZERS_MIXES_H
#define DSQ_QUANTIZERS_MIXES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

/* llama.cpp's llama_ftype: the value stored in general.file_type. Only the
 * members with a name in dsq_ftype_from_name can be planned; the others are
 * listed so a file's general.file_type can be named. */
typedef enum dsq_ftype {
    DSQ_FTYPE_ALL_F32 = 0,
    DSQ_FTYPE_F16 = 1,
    DSQ_FTYPE_Q4_0 = 2,
    DSQ_FTYPE_Q4_1 = 3,
    DSQ_FTYPE_Q8_0 = 7,
    DSQ_FTYPE_Q5_0 = 8,
    DSQ_FTYPE_Q5_1 = 9,
    DSQ_FTYPE_Q2_K = 10,
    DSQ_FTYPE_Q3_K_S = 11,
    DSQ_FTYPE_Q3_K_M = 12,
    DSQ_FTYPE_Q3_K_L = 13,
    DSQ_FTYPE_Q4_K_S = 14,
    DSQ_FTYPE_Q4_K_M = 15,
    DSQ_FTYPE_Q5_K_S = 16,
    DSQ_FTYPE_Q5_K_M = 17,
    DSQ_FTYPE_Q6_K = 18,
    DSQ_FTYPE_IQ2_XXS = 19,
    DSQ_FTYPE_IQ2_XS = 20,
    DSQ_FTYPE_Q2_K_S = 21,
    DSQ_FTYPE_IQ3_XS = 22,
    DSQ_FTYPE_IQ3_XXS = 23,
    DSQ_FTYPE_IQ1_S = 24,
    DSQ_FTYPE_IQ4_NL = 25,
    DSQ_FTYPE_IQ3_S = 26,
    DSQ_FTYPE_IQ3_M = 27,
    DSQ_FTYPE_IQ2_S = 28,
    DSQ_FTYPE_IQ2_M = 29,
    DSQ_FTYPE_IQ4_XS = 30,
    DSQ_FTYPE_IQ1_M = 31,
    DSQ_FTYPE_BF16 = 32,
    DSQ_FTYPE_TQ1_0 = 36,
    DSQ_FTYPE_TQ2_0 = 37,
} dsq_ftype;

/* Case-insensitive llama-quantize name ("Q4_K_M", "q8_0", aliases "Q3_K",
 * "Q4_K", "Q5_K"). Unknown names fail with DSQ_ERR_ARG and a message listing
 * the valid names. */
dsq_status dsq_ftype_from_name(const char *name, dsq_ftype *out);
/* Canonical name ("Q4_K_M"), or NULL for an ftype we cannot plan. */
const char *dsq_ftype_name(dsq_ftype f);
/* The ftype's default tensor type (llama_model_quantize_impl's switch). */
dsq_status dsq_ftype_default_type(dsq_ftype f, dsq_type *out);
/* Comma-separated list of the plannable names, for usage text. */
const char *dsq_ftype_names(void);

/* Model facts llama.cpp reads from the hyperparameters. */
typedef struct dsq_mix_model {
    const char *arch;  /* general.architecture: "llama", "falcon", ... (NULL = unknown) */
    int n_layer;       /* {arch}.block_count */
    int n_head;        /* layer 0 {arch}.attention.head_count */
    int n_head_kv;     /* layer 0 head_count_kv (= n_head when the key is absent) */
    int n_expert;      /* {arch}.expert_count, 0 for dense models */
    int n_attn_layer;  /* layers with n_head_kv != 0 (x3 for encoder-decoder); 0 = n_layer */
    bool is_70b;       /* llama.cpp's LLM_TYPE_70B: see dsq_mix_guess_70b */
} dsq_mix_model;

/* llama.cpp's model-type guess for the 70B attn_v bump (src/llama-model.cpp):
 * true for "llama" with 80 layers, n_expert != 8 and n_head != n_head_kv, and
 * for "deci" / "qwen2" with 80 layers. Other architectures: false. */
bool dsq_mix_guess_70b(const char *arch, int n_layer, int n_head, int n_head_kv, int n_expert);

/* "Not given" for the type overrides below. */
#define DSQ_MIX_NO_TYPE DSQ_TYPE_COUNT

typedef struct dsq_mix_options {
    dsq_ftype ftype;
    bool pure;                 /* --pure: skip the mix, every quantized tensor gets the default type */
    bool leave_output;         /* --leave-output-tensor: output.weight is not quantized */
    dsq_type output_type;      /* --output-tensor-type, or DSQ_MIX_NO_TYPE */
    dsq_type token_embd_type;  /* --token-embedding-type, or DSQ_MIX_NO_TYPE */
    bool has_imatrix;          /* an importance matrix was given (global flag in llama.cpp) */
    bool allow_requantize;     /* --allow-requantize: quantized sources may be requantized */
    bool quiet;                /* no fallback warnings (a plan made twice says them once) */
} dsq_mix_options;

/* ftype with every option off and no overrides. */
dsq_mix_options dsq_mix_options_default(dsq_ftype ftype);

/* One source tensor, as the GGUF file describes it. */
typedef struct dsq_mix_tensor {
    const char *name; /* GGUF name, e.g. "blk.3.ffn_down.weight" */
    dsq_type type;    /* source type */
    int n_dims;       /* dims stored in the file (1..4) */
    int64_t ne[4];    /* ggml order: ne[0] = row length; ne[2] = experts for 3-D MoE tensors */
} dsq_mix_tensor;

typedef struct dsq_mix_choice {
    bool quantize;   /* false: data copied unchanged (kept type, or chosen type == source type) */
    dsq_type type;   /* output type (the source type when !quantize) */
    bool fallback;   /* the block-size fallback replaced the mix's type */
    char reason[128];/* one line for logs: "attn_v use_more_bits(3,30) -> q6_K" */
} dsq_mix_choice;

typedef struct dsq_mix_stats {
    int n_attention_wv; /* tensors containing attn_v.weight / attn_qkv.weight / attn_kv_b.weight */
    bool has_output;    /* a tensor named exactly output.weight exists */
    int n_k_quantized;  /* tensors through the mix whose row length fitted the chosen type */
    int n_fallback;     /* tensors through the mix that needed the fallback */
    int n_quantize;     /* choices with quantize == true */
    int n_copy;         /* choices with quantize == false */
} dsq_mix_stats;

/* Chooses every tensor's output type. out[i] belongs to tensors[i]; stats may
 * be NULL. Fallbacks are logged (warning) like llama-quantize's "tensor cols
 * X x Y are not divisible by 256, required for q4_K - using fallback
 * quantization q5_0", plus the closing "N of M tensor(s) required fallback
 * quantization". Fails (naming the tensor) on: an ftype that cannot be planned,
 * an expert ffn tensor without a valid blk.N. layer, a row length no fallback
 * fits ("Unsupported tensor size"), an override type whose block size does not
 * divide the row (llama.cpp asserts there), a quantized source without
 * allow_requantize, and an attn_v count that disagrees with the layer count. */
dsq_status dsq_mix_plan(const dsq_mix_model *model, const dsq_mix_options *opt, const dsq_mix_tensor *tensors,
                        size_t n, dsq_mix_choice *out, dsq_mix_stats *stats);

/* llama.cpp's tensor visiting order (also the order llama-quantize writes the
 * output tensors in): by layer number parsed from "blk.%d." (-1 without it),
 * then by strcmp. order[k] = index into tensors of the k-th visited tensor. */
dsq_status dsq_mix_order(const dsq_mix_tensor *tensors, size_t n, size_t *order);

/* True when llama-quantize would quantize a tensor of this name and ggml
 * dimension count at all (rules of algorithms-notes 1.2); reason gets why not. */
bool dsq_mix_is_quantizable(const char *name, int ggml_n_dims, const dsq_mix_options *opt, const char **why_not);

/* ggml_n_dims: 1 + index of the last ne[] above 1 (trailing 1s do not count). */
int dsq_mix_ggml_n_dims(const int64_t ne[4]);

/* llama.cpp's use_more_bits(i, n) schedule. */
bool dsq_mix_use_more_bits(int i_layer, int n_layers);

#endif
