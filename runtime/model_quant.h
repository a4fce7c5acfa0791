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
 *    at the start), as compressed-tensors matches them.
 * Anything else is refused with an error naming the method or the variant. */
#ifndef DSQ_RUNTIME_MODEL_QUANT_H
#define DSQ_RUNTIME_MODEL_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "formats/pack_gptq.h"
#include "formats/safetensors.h"
#include "runtime/linear.h"

typedef enum dsq_hfq_method {
    DSQ_HFQ_NONE = 0, /* no quantization_config: every linear is dense */
    DSQ_HFQ_AWQ,
    DSQ_HFQ_GPTQ,
    DSQ_HFQ_CT,
} dsq_hfq_method;

typedef struct dsq_hfq {
    dsq_hfq_method method;
    int bits, group_size; /* group_size -1: one group per row */
    bool sym;
    dsq_gptq_format gptq_format;
    char **skip; /* modules_to_not_convert / ignore */
    size_t n_skip;
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

#endif
