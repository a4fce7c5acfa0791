/* AutoAWQ "GEMM" checkpoint layout (quantization_config.version "gemm").
 *
 * Sources read: casper-hansen/AutoAWQ awq/modules/linear/gemm.py
 * (WQLinear_GEMM.__init__ / from_linear), awq/utils/packing_utils.py
 * (unpack_awq, reverse_awq_order, dequantize_gemm), awq/models/_config.py
 * (to_transformers_dict); vLLM quantization/awq.py; transformers AwqConfig.
 *
 * Per linear, K = in_features, N = out_features, G = group size (K for -1):
 *   qweight I32 [K, N/8]    word (k, j) holds output columns 8j..8j+7 of input k;
 *                           nibble i (bits 4i..4i+3) holds column 8j + AWQ_ORDER[i],
 *                           AWQ_ORDER = {0, 2, 4, 6, 1, 3, 5, 7}
 *                           (so column 8j + m is nibble {0, 4, 1, 5, 2, 6, 3, 7}[m])
 *   qzeros  I32 [K/G, N/8]  zero points packed the same way, stored as they are
 *                           (no -1: only AutoAWQ's exllama conversion subtracts one)
 *   scales  F16 [K/G, N]
 *   dequant: W[n, k] = (q - zeros[k/G, n]) * scales[k/G, n]
 * Constraints: 4-bit only (WQLinear_GEMM raises for other widths; vLLM's
 * AWQConfig accepts only 4), N % 8 == 0, K % G == 0, and no act-order g_idx
 * (the format has none). Symmetric codes are stored with their midpoint zero
 * 8, which is what the GEMM kernels expect (they always read qzeros). */
#ifndef DSQ_FORMATS_PACK_AWQ_H
#define DSQ_FORMATS_PACK_AWQ_H

#include <stddef.h>

#include "core/status.h"
#include "core/tensor.h"
#include "formats/pack_common.h"
#include "quantizers/intq.h"

struct cJSON;

/* Tensors "qweight", "qzeros", "scales" (F16) of one linear. */
dsq_status dsq_awq_pack(const dsq_intq *q, dsq_packed *out);
/* The tensors dsq_awq_pack makes for a weight of shape s (names, types,
 * shapes, byte counts; no data), with the same checks. */
dsq_status dsq_awq_pack_shape(const dsq_intq_shape *s, dsq_packed *out);

/* Reads them back (any of them from a hostile file): shapes and types are
 * checked; group_size from the config (-1 = K). Scales become F32. */
dsq_status dsq_awq_unpack(const dsq_tensor *qweight, const dsq_tensor *qzeros, const dsq_tensor *scales, int group_size,
                          dsq_intq *out);

/* config.json quantization_config as AutoAWQ's to_transformers_dict writes it:
 * {"quant_method": "awq", "zero_point": true, "group_size": G, "bits": 4,
 *  "version": "gemm", "modules_to_not_convert": [...] or null}. */
dsq_status dsq_awq_config_json(int group_size, const char *const *modules_to_not_convert, size_t n_modules,
                               struct cJSON **out);

#endif
