/* Lossless conversion between a Hugging Face checkpoint (config.json +
 * safetensors + tokenizer files) and a GGUF file, both ways, streamed tensor
 * by tensor: peak memory is about the largest Q/K projection (the only
 * tensors that must be whole to permute their rows) plus a few MB of chunks.
 *
 * HF -> GGUF follows llama.cpp's convert_hf_to_gguf.py: names mapped, Llama
 * Q/K rows permuted, 1-D tensors, norms and non-".weight" tensors in F32, the
 * other tensors in the requested type; lm_head dropped when the embeddings
 * are tied; rope_freqs.weight added for llama3 rope scaling.
 * GGUF -> HF inverts it: names and permutation reversed, quantized tensors
 * dequantized, config.json / generation_config.json / tokenizer files written,
 * safetensors sharded like transformers' save_pretrained.
 *
 * NaN/Inf values are carried over unchanged with a warning naming the tensor:
 * conversion does not judge weights (the quantizers refuse them). */
#ifndef DSQ_FORMATS_CONVERT_H
#define DSQ_FORMATS_CONVERT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"

typedef enum dsq_convert_dtype {
    /* HF -> GGUF: like convert_hf_to_gguf.py --outtype auto, f16 when the
     * first source tensor is F16, else bf16.
     * GGUF -> HF: f32 when any tensor is quantized, else the float type the
     * 2-D tensors share (f32 when they differ). */
    DSQ_CONVERT_AUTO = 0,
    DSQ_CONVERT_F32,
    DSQ_CONVERT_F16,
    DSQ_CONVERT_BF16,
} dsq_convert_dtype;

/* transformers' save_pretrained default max_shard_size "5GB" (decimal). */
#define DSQ_CONVERT_DEFAULT_SHARD_BYTES 5000000000ull

/* "auto", "f32", "f16", "bf16" (case-insensitive). */
dsq_status dsq_convert_dtype_parse(const char *s, dsq_convert_dtype *out);
const char *dsq_convert_dtype_name(dsq_convert_dtype d);

/* in_dir: a folder with config.json and model.safetensors or a sharded index.
 * out_path is written atomically; an existing file is refused unless overwrite. */
dsq_status dsq_convert_hf_to_gguf(const char *in_dir, const char *out_path, dsq_convert_dtype dtype, bool overwrite);

/* out_dir is built in a temporary folder and renamed into place at the end;
 * an existing folder is refused unless overwrite (then replaced only once the
 * new one is complete). max_shard_bytes 0 means the default. */
dsq_status dsq_convert_gguf_to_hf(const char *in_gguf, const char *out_dir, dsq_convert_dtype dtype, bool overwrite,
                                  uint64_t max_shard_bytes);

/* ---- the HF -> GGUF source ----
 * A Hugging Face folder seen as the GGUF file `dsquant convert` would make
 * of it, without writing that file: the planned tensors (GGUF names, shapes,
 * the rope_freqs table it generates), the KVs, and each tensor's values on
 * demand in GGUF layout (Llama Q/K rows permuted). dsq_convert_hf_to_gguf
 * streams it into a file; `dsquant gguf` quantizes straight from it. */
typedef struct dsq_hf_source dsq_hf_source;

typedef struct dsq_hf_source_tensor {
    const char *name;  /* GGUF name (valid while the source is open) */
    dsq_type src_type; /* type in the safetensors file (F32 for a generated tensor) */
    dsq_type type;     /* type dsquant convert writes for the source's dtype */
    bool keep_f32;     /* 1-D, a norm or not ".weight": F32 whatever the dtype */
    bool generated;    /* made from config.json (rope_freqs.weight), not read */
    int n_dims;
    int64_t shape[DSQ_MAX_DIMS]; /* outermost first; shape[n_dims-1] is the row length */
} dsq_hf_source_tensor;

/* Opens in_dir (config.json required, architecture known) and plans every
 * tensor. dtype picks the `type` of the 2-D weights as dsq_convert_hf_to_gguf does. */
dsq_status dsq_hf_source_open(const char *in_dir, dsq_convert_dtype dtype, dsq_hf_source **out);
void dsq_hf_source_close(dsq_hf_source *s);
size_t dsq_hf_source_count(const dsq_hf_source *s);
/* i < dsq_hf_source_count(s). */
const dsq_hf_source_tensor *dsq_hf_source_tensor_at(const dsq_hf_source *s, size_t i);
const dsq_arch *dsq_hf_source_arch(const dsq_hf_source *s);
/* The resolved dtype (auto already decided). */
dsq_type dsq_hf_source_dtype(const dsq_hf_source *s);
/* Every KV dsquant convert writes, in its order (general.file_type for the dtype). */
dsq_status dsq_hf_source_write_kvs(const dsq_hf_source *s, dsq_gguf_writer *w);
/* Tensor i as F32 in GGUF layout into dst (elements = product of shape).
 * NaN/Inf values are passed on unchanged and unreported. */
dsq_status dsq_hf_source_fetch_f32(dsq_hf_source *s, size_t i, float *dst);

/* Picks the direction from what `in` and `out` are: a GGUF file -> HF
 * folder; a folder -> a GGUF file when out ends in ".gguf", else -> a HF
 * folder with float weights (formats/hf_cast.h: FP8 block-scaled checkpoints
 * such as DeepSeek-V3's dequantized). A lone .safetensors file (no config)
 * is refused. */
dsq_status dsq_convert(const char *in, const char *out, dsq_convert_dtype dtype, bool overwrite,
                       uint64_t max_shard_bytes);

#endif
