/* compressed-tensors "pack-quantized" layout (W4A16 / W8A16 ... as
 * llm-compressor writes it; read by vLLM's CompressedTensorsWNA16 and by
 * transformers through the compressed-tensors library).
 *
 * Sources read: compressed-tensors 0.20.1 compressors/pack_quantized/{base,
 * helpers}.py (PackedQuantizationCompressor, pack_to_int32, unpack_from_int32),
 * quantization/{quant_args,quant_config,quant_scheme}.py, quantization/utils/
 * helpers.py (calculate_qparams); vLLM compressed_tensors_wNa16.py.
 *
 * Per linear, N = out_features, K = in_features, b = bits, G = K / group
 * (1 for the channel strategy):
 *   weight_packed     I32 [N, ceil(K*b/32)]  row n is the dense bit stream
 *                     (pack_common.h) of q[n, 0..K), the tail padded with zeros
 *   weight_scale      F16/BF16 (model dtype) [N, G]
 *   weight_zero_point I32 [ceil(N*b/32), G]  asymmetric only: column g is the
 *                     bit stream of the zeros of group g along the output dim
 *   weight_shape      I64 [2] = {N, K}
 *   weight_g_idx      I32 [K]  only for actorder "group" (non-trivial g_idx)
 * compressed-tensors quantizes to signed q_s in [-2^(b-1), 2^(b-1)) and packs
 * q_s + 2^(b-1); its zero point is signed too and packed with the same offset,
 * so the stored fields are exactly our unsigned codes q and zeros z, and
 * W[n, k] = (q - z) * s. Symmetric means zero point 0 (our z = 2^(b-1)).
 * compressed-tensors packs 1..8 bits this way; vLLM's WNA16 loads 4 and 8. */
#ifndef DSQ_FORMATS_PACK_CT_H
#define DSQ_FORMATS_PACK_CT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/pack_common.h"
#include "quantizers/intq.h"

struct cJSON;

/* Tensors "weight_packed", "weight_scale" (scale_type), "weight_shape",
 * "weight_zero_point" (asymmetric) and "weight_g_idx" (when q->g_idx). */
dsq_status dsq_ct_pack(const dsq_intq *q, dsq_type scale_type, dsq_packed *out);
/* The tensors dsq_ct_pack makes for a weight of shape s (no data). */
dsq_status dsq_ct_pack_shape(const dsq_intq_shape *s, dsq_type scale_type, dsq_packed *out);

/* Reads them back (hostile input); zero_point must be given exactly when
 * !sym, g_idx may be NULL. bits, group_size (-1 = channel) and sym from the
 * config group. */
dsq_status dsq_ct_unpack(const dsq_tensor *weight_packed, const dsq_tensor *weight_scale,
                         const dsq_tensor *weight_zero_point, const dsq_tensor *weight_shape,
                         const dsq_tensor *weight_g_idx, int bits, int group_size, bool sym, dsq_intq *out);

typedef struct dsq_ct_config {
    int bits;
    int group_size; /* > 0: strategy "group"; -1: strategy "channel" */
    bool sym;
    const char *actorder;      /* NULL, "weight" (static groups: no g_idx) or "group" (g_idx; refused by
                                  compressed-tensors >= 0.1x, which removed it) */
    const char *const *ignore; /* module names left unquantized, e.g. "lm_head" */
    size_t n_ignore;
    const char *observer; /* the weights' observer as llm-compressor names it ("mse", ...); NULL: "minmax" */
} dsq_ct_config;

/* config.json quantization_config with one config group targeting "Linear",
 * format "pack-quantized", quantization_status "compressed", as llm-compressor
 * writes it (only keys every compressed-tensors version accepts). */
dsq_status dsq_ct_config_json(const dsq_ct_config *c, struct cJSON **out);

#endif
