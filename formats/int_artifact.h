/* INTn weight-only artifacts: the Hugging Face folders AutoAWQ (GEMM), GPTQ
 * (v1) and compressed-tensors (pack-quantized) write, which transformers and
 * vLLM load. The reader is runtime/model_quant.c; the writer is
 * formats/int_writer.h. */
#ifndef DSQ_FORMATS_INT_ARTIFACT_H
#define DSQ_FORMATS_INT_ARTIFACT_H

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

#endif
