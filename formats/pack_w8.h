/* 8-bit linears (quantizers/w8.h: INT8 and FP8 E4M3 with per-tensor,
 * per-channel or block scales) as the three folder formats store them, and
 * which scheme each format can express.
 *
 * Sources read: compressed-tensors 0.20.1 compressors/naive_quantized/base.py
 * (NaiveQuantizationCompressor and its int-quantized / float-quantized
 * aliases: parameters weight, weight_scale, weight_zero_point only when
 * asymmetric), quantization/lifecycle/initialize.py (initialize_qparams: scale
 * shapes (1,), (out, 1), (ceil(out/br), ceil(in/bc)); input_scale (1,) only
 * for static activations; k_scale / v_scale on the attention module);
 * vLLM model_executor/layers/quantization/fp8.py (Fp8LinearMethod: a
 * PerTensorScaleParameter per checkpoint matrix unless weight_block_size,
 * then BlockQuantScaleParameter "weight_scale_inv" of ceil grids; fused
 * q/k/v and gate/up shards must be multiples of block_n), fp8_utils.py
 * (per_token_group_quant_fp8 asserts in_features % group == 0);
 * DeepSeek-V3 README_WEIGHTS.md (weight_scale_inv F32, a multiplier, edge
 * blocks padded); NVIDIA Model-Optimizer modelopt/torch/export/quant_utils.py
 * (get_scaling_factor = amax / maxbound as F32 scalars; k_bmm/v_bmm amax ->
 * k_proj.k_scale / v_proj.v_scale) and vLLM quantization/modelopt.py
 * (ModelOptFp8LinearMethod: per-tensor weight_scale and input_scale).
 *
 * Per linear [N = out x K = in], module prefix "<module>.":
 *   compressed-tensors   weight I8 | F8_E4M3 [N, K]
 *                        weight_scale F32 tensor [1] | channel [N, 1] |
 *                                         block [ceil(N/br), ceil(K/bc)]
 *                        input_scale F32 [1]   static activations only
 *   fp8 (vLLM native)    weight F8_E4M3 [N, K]
 *                        weight_scale F32 []   per-tensor weights, or
 *                        weight_scale_inv F32 [ceil(N/br), ceil(K/bc)] blocks
 *                        input_scale F32 []    activation_scheme "static"
 *   modelopt (FP8)       weight F8_E4M3 [N, K], weight_scale F32 [],
 *                        input_scale F32 []
 * KV-cache scales per layer, F32: compressed-tensors
 * model.layers.L.self_attn.{k,v}_scale [1]; fp8 the same names, [];
 * modelopt model.layers.L.self_attn.{k_proj.k_scale, v_proj.v_scale} [].
 *
 * Scales are written as F32 whatever the model dtype: the codes were computed
 * with the F32 scale, vLLM keeps every 8-bit scale as a float32 parameter,
 * and compressed-tensors casts on load; llm-compressor itself stores the
 * model dtype (BF16), which would round the scale away from its codes. The
 * reader takes F32, F16 or BF16 scales and [] or [1] for scalars. */
#ifndef DSQ_FORMATS_PACK_W8_H
#define DSQ_FORMATS_PACK_W8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/int_artifact.h"
#include "formats/pack_common.h"
#include "quantizers/w8.h"

/* Whether format f can express scheme s (no message: a lookup). */
bool dsq_w8_format_can(dsq_int_format f, const dsq_w8_scheme *s);
/* The same as a check: a one-line error naming the formats that can. */
dsq_status dsq_w8_format_check(dsq_int_format f, const dsq_w8_scheme *s);

/* Block tiling where the consumer needs it (vLLM's per-token-group
 * activation quantization needs in % block_cols == 0; vLLM fuses the linears
 * that share an input, whose outputs must then be multiples of block_rows).
 * Partial edge blocks are otherwise written as ceil grids. name: the tensor. */
dsq_status dsq_w8_tiling_check(const dsq_w8_scheme *s, int64_t rows, int64_t cols, bool fused, const char *name);
/* The same question answered yes/no (no message): a driver leaving such linears dense asks this. */
bool dsq_w8_tiling_ok(const dsq_w8_scheme *s, int64_t rows, int64_t cols, bool fused);

/* Name of the weight-scale tensor: "weight_scale", or "weight_scale_inv" for fp8 blocks. */
const char *dsq_w8_scale_suffix(dsq_int_format f, const dsq_w8_scheme *s);

/* The tensors of a [rows x cols] linear under s in format f (no data). */
dsq_status dsq_w8_pack_shape(dsq_int_format f, const dsq_w8_scheme *s, int64_t rows, int64_t cols, dsq_packed *out);
/* The same with q's bytes (q validated here). */
dsq_status dsq_w8_pack(dsq_int_format f, const dsq_w8q *q, dsq_packed *out);

/* Reads a linear back (hostile tensors): weight, its scale tensor and
 * input_scale (NULL when absent; required exactly for static activations)
 * into out under scheme s. Shapes, dtypes, finite positive scales and FP8
 * codes are checked; errors name the tensor. */
/* The same with the codes left in weight's memory (codes_view): the weight
 * must outlive out. Its pages are read once to check the codes. */
dsq_status dsq_w8_unpack_view(const dsq_w8_scheme *s, const dsq_tensor *weight, const dsq_tensor *scale,
                              const dsq_tensor *input_scale, dsq_w8q *out);
dsq_status dsq_w8_unpack(const dsq_w8_scheme *s, const dsq_tensor *weight, const dsq_tensor *scale,
                         const dsq_tensor *input_scale, dsq_w8q *out);

/* KV-cache scale tensor names of layer l in format f ("model.layers.l...."). */
void dsq_w8_kv_names(dsq_int_format f, int64_t layer, char *k, char *v, size_t cap);
/* Their shape: n_dims 1 ([1], compressed-tensors) or 0 (a scalar). */
int dsq_w8_kv_ndims(dsq_int_format f);
/* One positive finite scale from a [] or [1] F32/F16/BF16 tensor. */
dsq_status dsq_w8_read_scalar(const dsq_tensor *t, const char *what, float *out);

#endif
