/* Per-layer weight error of a quantized GGUF against its base (a GGUF, or a
 * Hugging Face folder read as the GGUF quantizer reads it: tensors named,
 * ordered and stacked as in the file): for each tensor both hold with the
 * same shape and a quantized type in the second, the relative error
 *   sum_rows sum_j w_j (base_ij - quant_ij)^2 / sum_rows sum_j w_j base_ij^2
 * with w the importance matrix's entry for the tensor (1 without one),
 * summed per layer (blk.N.; the tensors outside any layer under -1). The
 * sweep report draws it as bars (cli/cmd_sweep.c, eval/report.h). */
#ifndef DSQ_EVAL_LAYER_ERROR_H
#define DSQ_EVAL_LAYER_ERROR_H

#include <stddef.h>

#include "core/status.h"
#include "formats/imatrix.h"

typedef struct dsq_layer_error {
    int layer;        /* -1: token_embd, output and the rest outside blk.N. */
    int n_tensors;    /* compared */
    double err, norm; /* weighted sums; err / norm is the relative error */
} dsq_layer_error;

/* *out: n_out entries, layer -1 first then ascending (free with free()). */
dsq_status dsq_layer_errors(const char *base, const char *quant, const dsq_imatrix *im, dsq_layer_error **out,
                            size_t *n_out);

#endif
