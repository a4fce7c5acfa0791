/* Tensor names between Hugging Face and GGUF for the Llama family, and the
 * Q/K row permutation llama.cpp's converter applies to Llama q_proj/k_proj
 * (HF rotate-half rope layout -> GGUF interleaved pairs). */
#ifndef DSQ_FORMATS_HF_NAMES_H
#define DSQ_FORMATS_HF_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "formats/hf_config.h"

typedef enum dsq_permute_kind {
    DSQ_PERMUTE_NONE = 0,
    DSQ_PERMUTE_Q, /* rows grouped in n_heads heads */
    DSQ_PERMUTE_K, /* rows grouped in n_kv_heads heads */
} dsq_permute_kind;

/* HF name -> GGUF name. Returns DSQ_ERR_NOT_FOUND (message naming the tensor)
 * for names with no mapping. *perm tells whether rows must be permuted
 * (Llama family only: q_proj/k_proj weight and bias; never for qwen2). */
dsq_status dsq_name_hf_to_gguf(const dsq_arch *a, const char *hf, char *out, size_t cap, dsq_permute_kind *perm);
dsq_status dsq_name_gguf_to_hf(const dsq_arch *a, const char *gguf, char *out, size_t cap, dsq_permute_kind *perm);

/* Lookups: the same mappings, answering false and recording no message when a
 * name has none (or out is too small for it), for callers that probe names. */
bool dsq_name_find_gguf(const dsq_arch *a, const char *hf, char *out, size_t cap, dsq_permute_kind *perm);
bool dsq_name_find_hf(const dsq_arch *a, const char *gguf, char *out, size_t cap, dsq_permute_kind *perm);

/* Tensors the converters drop rather than map: HF rotary_emb.inv_freq
 * buffers (rebuilt at load time) and GGUF rope_freqs.weight (llama3 rope
 * factors, carried in config.json's rope_scaling instead). */
bool dsq_name_hf_is_ignored(const char *hf);
bool dsq_name_gguf_is_ignored(const char *gguf);

/* Permutes the rows of a [rows x row_bytes] matrix (or a bias vector:
 * row_bytes = element size) in place for kind; `to_gguf` picks the direction
 * (false = the inverse, GGUF -> HF). rows must be divisible by 2 * heads.
 * scratch: rows * row_bytes bytes, or NULL to allocate. */
/* Whether rows rows of a q_proj / k_proj can be permuted for a: positive and
 * a whole number of heads of rotary pairs. Convert plans ask before anything
 * is written; dsq_permute_rows asks again. */
dsq_status dsq_permute_check(const dsq_arch *a, dsq_permute_kind kind, int64_t rows);
dsq_status dsq_permute_rows(const dsq_arch *a, dsq_permute_kind kind, bool to_gguf, void *data, int64_t rows,
                            size_t row_bytes, void *scratch);

#endif
