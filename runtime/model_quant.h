/* Loading the INTn linears of a quantized Hugging Face checkpoint into the
 * INT group storage (runtime/linear.h), as config.json's quantization_config
 * describes them (internal to runtime/model.c):
 *  - "awq", version "gemm" (AutoAWQ WQLinear_GEMM; formats/pack_awq.h),
 *    modules_to_not_convert: a module whose name contains one stays dense
 *    (transformers' replace_with_awq_linear matches by substring);
 *  - "gptq", checkpoint_format (or GPTQModel's "format") "gptq" or "gptq_v2",
 *    desc_act through g_idx (formats/pack_gptq.h);
 *  - "compressed-tensors", format "pack-quantized", one config group whose
 *    targets include "Linear", integer weight-only (formats/pack_ct.h);
 *    ignore: exact module names or "re:" patterns (Python's re.match: anchored
 *    at the start), as compressed-tensors matches them;
 *  - 8-bit linears into the 8-bit storage (formats/pack_w8.h): compressed-
 *    tensors formats "int-quantized", "float-quantized" and "naive-quantized"
 *    (llm-compressor's W8A8, FP8, FP8_DYNAMIC, FP8_BLOCK and FP8 weight-only),
 *    vLLM's "fp8" (per-tensor scales, or weight_block_size with DeepSeek-V3's
 *    weight_scale_inv), and "modelopt" FP8 (config.json's quantization_config
 *    or, without one, hf_quant_config.json); FP8 KV-cache scales per layer.
 * Anything else is refused with an error naming the method or the variant. */
#ifndef DSQ_RUNTIME_MODEL_QUANT_H
#define DSQ_RUNTIME_MODEL_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "formats/int_artifact.h"
#include "formats/pack_gptq.h"
#include "formats/safetensors.h"
#include "quantizers/w8.h"
#include "runtime/linear.h"

typedef enum dsq_hfq_method {
    DSQ_HFQ_NONE = 0, /* no quantization_config: every linear is dense */
    DSQ_HFQ_AWQ,
    DSQ_HFQ_GPTQ,
    DSQ_HFQ_CT,
    DSQ_HFQ_W8, /* 8-bit linears; w8_format says whose convention */
} dsq_hfq_method;

typedef struct dsq_hfq {
    dsq_hfq_method method;
    int bits, group_size; /* group_size -1: one group per row */
    bool sym;
    dsq_gptq_format gptq_format;
    char **skip; /* modules_to_not_convert / ignore */
    size_t n_skip;
    /* DSQ_HFQ_W8 */
    dsq_int_format w8_format; /* CT, FP8 or MODELOPT: tensor names and skip-list matching */
    dsq_w8_scheme w8;
    bool kv_fp8;      /* FP8 KV-cache scales must be there (fp8: read when present) */
    char *dir;        /* the folder, for messages */
} dsq_hfq;

/* Reads dir/config.json's quantization_config (method NONE when absent). */
dsq_status dsq_hfq_from_dir(const char *dir, dsq_hfq *out);
void dsq_hfq_free(dsq_hfq *q);

/* True when `module` (e.g. "model.layers.0.self_attn.q_proj") is to stay dense. */
bool dsq_hfq_skips(const dsq_hfq *q, const char *module);

/* Loads `module` as an INT linear of [out x in] when its packed tensors are
 * in st and the config does not leave it dense; *loaded = false (and W
 * untouched) when it is a dense module. */
dsq_status dsq_hfq_load_linear(const dsq_hfq *q, const dsq_st_model *st, const char *module, int64_t out, int64_t in,
                               dsq_linear *W, bool *loaded);

/* The 8-bit weight of `module` as stored (DSQ_HFQ_W8): *found false when the
 * module's weight is not 8-bit (a dense module). out is owned by the caller. */
dsq_status dsq_hfq_read_w8(const dsq_hfq *q, const dsq_st_model *st, const char *module, dsq_w8q *out, bool *found);

/* FP8 KV-cache scales of layer l: 0 and 0 when the folder has none. */
dsq_status dsq_hfq_load_kv(const dsq_hfq *q, const dsq_st_model *st, int64_t layer, float *k_scale, float *v_scale);

#endif
