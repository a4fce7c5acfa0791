/* Hugging Face folder -> Hugging Face folder with float weights: the CPU
 * replacement for DeepSeek-V3's inference/fp8_cast_bf16.py.
 *
 * Every F8_E4M3 `X.weight` with its `X.weight_scale_inv` (block scales, a
 * multiplier despite the name: [ceil(rows/br), ceil(cols/bc)], partial edge
 * blocks included, br x bc from quantization_config.weight_block_size,
 * 128 x 128 by default) becomes `X.weight` in the output type:
 * round-to-nearest-even of the F32 product e4m3(w) * scale, as the
 * reference's Triton kernel stores it. The scales are dropped. Other
 * tensors are copied byte for byte, except that with an explicit f32 / f16 /
 * bf16 dtype other float tensors of two or more dims are converted too.
 * config.json loses quantization_config (torch_dtype becomes the output
 * type); every other file of the folder (tokenizer, generation config, remote
 * code) is copied. Streamed tensor by tensor, a block row at a time: memory
 * stays near one block row of one tensor whatever the model's size, and the
 * input's pages are released as they are read. The output folder appears
 * only when complete (formats/safetensors.h shards it like save_pretrained).
 *
 * Refused with the tensor named: an FP8 weight without scales, scales
 * without an FP8 weight, scales of the wrong shape or type, FP8 tensors that
 * are not 2-D. */
#ifndef DSQ_FORMATS_HF_CAST_H
#define DSQ_FORMATS_HF_CAST_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "formats/convert.h"

/* The rows x cols of an FP8 checkpoint's scale blocks: config.json's
 * quantization_config.weight_block_size, 128 x 128 when it says nothing. */
dsq_status dsq_hf_fp8_block(const char *dir, int block[2]);

/* dtype AUTO: BF16 for the FP8 weights, everything else as it is. */
dsq_status dsq_convert_hf_to_hf(const char *in_dir, const char *out_dir, dsq_convert_dtype dtype, bool overwrite,
                                uint64_t max_shard_bytes);

#endif
