/* GPTQ checkpoint layout (AutoGPTQ / GPTQModel, checkpoint_format "gptq" = v1,
 * or "gptq_v2").
 *
 * Sources read: AutoGPTQ auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py
 * (QuantLinear.__init__, pack, the 2/3/4/8-bit unpack in forward),
 * auto_gptq/quantization/config.py (BaseQuantizeConfig.to_dict); GPTQModel's
 * v1 <-> v2 zero conversion ("GPTQ v1 stores qzeros with a per-field -1
 * offset"); vLLM quantization/gptq.py; transformers GPTQConfig.
 *
 * Per linear, K = in_features, N = out_features, b = bits, G = ceil(K / group):
 *   qweight I32 [K*b/32, N]  column n is the dense bit stream (pack_common.h) of
 *                            codes q[n, 0..K) down the input dimension: for
 *                            2/4/8 bits input k sits in word k/(32/b) at shift
 *                            b*(k % (32/b)); 3 bits: 32 inputs per 3 words
 *   qzeros  I32 [G, N*b/32]  row g is the bit stream of the zeros of group g
 *                            along the output dimension; v1 stores (z - 1) mod 2^b
 *                            per field, v2 stores z
 *   scales  F16 [G, N]       (the model dtype; vLLM's GPTQ kernels want F16)
 *   g_idx   I32 [K]          group of each input column (c / group without act-order)
 *   dequant: W[n, k] = (q - z[g_idx[k], n]) * scales[g_idx[k], n]
 * With desc_act the columns are NOT permuted in the file; g_idx carries the order.
 * Constraints: K*b and N*b multiples of 32 (K, N multiples of 32 for 3-bit).
 * A v1 zero of 0 (asymmetric only) is stored as 2^b - 1: GPTQModel and
 * transformers read it back as 0 (they wrap per field), older kernels that add
 * 1 without wrapping (vLLM's gptq_gemm) read 2^b; the pack reports how many. */
#ifndef DSQ_FORMATS_PACK_GPTQ_H
#define DSQ_FORMATS_PACK_GPTQ_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/pack_common.h"
#include "quantizers/intq.h"

struct cJSON;

typedef enum dsq_gptq_format {
    DSQ_GPTQ_FORMAT_V1 = 0, /* "gptq": zeros stored minus one */
    DSQ_GPTQ_FORMAT_V2 = 1, /* "gptq_v2": zeros stored as they are */
} dsq_gptq_format;

/* Tensors "qweight", "qzeros", "scales" (scale_type: F16, BF16 or F32) and
 * "g_idx". n_zero_wrapped (may be NULL) receives the number of v1 zeros that
 * were 0 (see above). */
dsq_status dsq_gptq_pack(const dsq_intq *q, dsq_gptq_format fmt, dsq_type scale_type, dsq_packed *out,
                         int64_t *n_zero_wrapped);
/* The tensors dsq_gptq_pack makes for a weight of shape s (no data). */
dsq_status dsq_gptq_pack_shape(const dsq_intq_shape *s, dsq_gptq_format fmt, dsq_type scale_type, dsq_packed *out);

/* Reads them back (hostile input): bits and group_size from the config,
 * g_idx may be NULL (then c / group). A g_idx equal to c / group comes back
 * as NULL. sym = the config's "sym": zeros must then be the midpoint. */
dsq_status dsq_gptq_unpack(const dsq_tensor *qweight, const dsq_tensor *qzeros, const dsq_tensor *scales,
                           const dsq_tensor *g_idx, int bits, int group_size, bool sym, dsq_gptq_format fmt,
                           dsq_intq *out);

typedef struct dsq_gptq_config {
    int bits, group_size;
    double damp_percent;
    bool desc_act, static_groups, sym, true_sequential;
    dsq_gptq_format format;
    const char *grid; /* a searched group grid ("mse", ...), recorded under "meta" as GPTQModel keeps its own
                         settings; NULL: none (min/max) */
} dsq_gptq_config;

/* quantize_config.json as AutoGPTQ's BaseQuantizeConfig.to_dict writes it
 * (bits, group_size, damp_percent, desc_act, static_groups, sym,
 * true_sequential, model_name_or_path, model_file_base_name, quant_method,
 * checkpoint_format); the same object is config.json's quantization_config. */
dsq_status dsq_gptq_config_json(const dsq_gptq_config *c, struct cJSON **out);

#endif
