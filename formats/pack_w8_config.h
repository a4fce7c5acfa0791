/* quantization_config of the 8-bit folders (formats/pack_w8.h has their
 * tensors), written as each producer writes it.
 *
 * compressed-tensors, as llm-compressor saves it with compressed-tensors
 * 0.20.1 (compressors/model_compressors/model_compressor.py update_config:
 * version, quant_method, sparsity_config {}, transform_config {}, then
 * QuantizationConfig.model_dump(); quant_args.py's serializer drops
 * actorder / block_structure / scale_dtype when None, observer unless set,
 * observer_kwargs when empty; keys sorted as json.dump(sort_keys=True)):
 *   config_groups.group_0 = {format, input_activations (null when weight-
 *   only), output_activations null, targets ["Linear"], weights}, format
 *   ("int-quantized" for INT8 with activations, "float-quantized" for FP8
 *   with activations, "naive-quantized" for FP8 weight-only: the compressor
 *   compressors/format.py infers for the scheme), global_compression_ratio
 *   null, ignore, kv_cache_scheme (null or the FP8 per-tensor args),
 *   moe_sparsity_config null, quantization_status "compressed".
 *   Weights and activations are the presets of quantization/quant_scheme.py
 *   (W8A8, FP8, FP8_DYNAMIC, FP8_BLOCK; the FP8 preset's static activations
 *   carry observer "static_minmax", which static INT8 activations get too).
 * fp8 (vLLM Fp8Config.from_config; DeepSeek-V3 README_WEIGHTS.md):
 *   {activation_scheme "dynamic"|"static", fmt "e4m3", quant_method "fp8",
 *    weight_block_size [br, bc] for blocks, ignored_layers when a linear
 *    stays dense}.
 * modelopt (Model-Optimizer export/quant_utils.py get_quant_config and
 * convert_hf_config.py convert_hf_quant_config_format):
 *   hf_quant_config.json {producer {name "modelopt", version}, quantization
 *   {quant_algo "FP8", kv_cache_quant_algo "FP8"|null, exclude_modules}},
 *   and config.json quantization_config {config_groups.group_0 {input_
 *   activations and weights {dynamic false, num_bits 8, type "float"},
 *   targets ["Linear"]}, ignore, quant_algo "FP8", kv_cache_scheme (only
 *   with an FP8 KV cache), producer, quant_method "modelopt"}. */
#ifndef DSQ_FORMATS_PACK_W8_CONFIG_H
#define DSQ_FORMATS_PACK_W8_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"
#include "formats/int_artifact.h"
#include "quantizers/w8.h"

struct cJSON;

/* The compressed-tensors version whose layout the writer follows. */
#define DSQ_W8_CT_VERSION "0.20.1"
/* The ModelOpt version whose export layout the writer follows (producer.version). */
#define DSQ_W8_MODELOPT_VERSION "0.46.0"

typedef struct dsq_w8_config {
    dsq_int_format format; /* CT, FP8 or MODELOPT */
    dsq_w8_scheme sch;
    bool kv_fp8;               /* FP8 KV-cache scales are in the folder */
    const char *const *ignore; /* modules left dense, "lm_head" included */
    size_t n_ignore;
} dsq_w8_config;

/* compressed-tensors' format name for s: int-, float- or naive-quantized. */
const char *dsq_w8_ct_format(const dsq_w8_scheme *s);
/* config.json's quantization_config. */
dsq_status dsq_w8_config_json(const dsq_w8_config *c, struct cJSON **out);
/* ModelOpt's hf_quant_config.json. */
dsq_status dsq_w8_hf_quant_config_json(const dsq_w8_config *c, struct cJSON **out);

#endif
