/* INTn weight-only artifacts: the Hugging Face folders AutoAWQ (GEMM), GPTQ
 * (v1) and compressed-tensors (pack-quantized) write, which transformers and
 * vLLM load. The reader is runtime/model_quant.c; the writer is
 * formats/int_writer.h. */
#ifndef DSQ_FORMATS_INT_ARTIFACT_H
#define DSQ_FORMATS_INT_ARTIFACT_H

#include <stdbool.h>
#include <stddef.h>

#include "quantizers/w8.h"

typedef enum dsq_int_format {
    DSQ_INT_FORMAT_AWQ = 0,
    DSQ_INT_FORMAT_GPTQ,
    DSQ_INT_FORMAT_CT,       /* pack-quantized (INTn), int-quantized (W8A8), float-quantized (FP8) */
    DSQ_INT_FORMAT_FP8,      /* vLLM's native "fp8" quantization_config (DeepSeek-V3's layout) */
    DSQ_INT_FORMAT_MODELOPT, /* NVIDIA ModelOpt unified HF export (hf_quant_config.json), TensorRT-LLM */
} dsq_int_format;

/* "awq", "gptq", "compressed-tensors", "fp8", "modelopt". */
const char *dsq_int_format_name(dsq_int_format f);
/* From that name; -1 when unknown (no message: a lookup). */
int dsq_int_format_parse(const char *name);

/* Whether format f can store the 8-bit scheme s (a yes/no lookup, no message):
 *   compressed-tensors  every scheme (int-quantized / float-quantized)
 *   fp8 (vLLM native)   FP8 with per-tensor weight scales and static or dynamic
 *                       per-token activations, or FP8 128x128 weight blocks with
 *                       dynamic per-token-group-128 activations (weight_block_size)
 *   modelopt            FP8 per-tensor weights with static per-tensor activations
 *   awq, gptq           none (INTn weight-only). */
bool dsq_int_format_expresses(dsq_int_format f, const dsq_w8_scheme *s);
/* The names of the formats that express s, ", "-separated, into buf (empty when none). */
void dsq_int_formats_expressing(const dsq_w8_scheme *s, char *buf, size_t cap);

#endif
