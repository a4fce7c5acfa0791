/* `dsquant gguf --method gptq|awq`: a GGUF file whose linears are quantized
 * by GPTQ or AWQ into the very block types llama-quantize's mix gives them
 * (quantizers/gptq_blocks.h), so llama.cpp, Ollama and LM Studio load it
 * unchanged, at the same size as the plain file.
 *
 * 1. The plan of dsq_gguf_quantize_plan fixes every tensor's type (the same
 *    mix, overrides and imatrix rules as without a method).
 * 2. The model runs layer by layer over the calibration windows
 *    (calibration/sequential.h, GPTQ's true-sequential groups); each decoder
 *    linear the plan quantizes is quantized by GPTQ into its planned type,
 *    with importance weights from the imatrix when one is given (the entry
 *    llama-quantize would use), else from the Hessian's diagonal. AWQ instead
 *    searches each group's scales with the planned types' own quantizers
 *    (calibration/method_awq.c), folds them into the norms (written to the
 *    spill too) and the producing linears, and writes every linear in its
 *    planned type with the importance of its scaled columns. Its bytes go
 *    to a spill file (unlinked at creation, next to the output), in GGUF row
 *    order; memory stays near one layer plus the activations.
 * 3. dsq_gguf_quantize writes the file as usual, taking those tensors' bytes
 *    from the spill (formats/gguf_quantize.h's provider); the embedding,
 *    output.weight and every other tensor are quantized as llama-quantize
 *    would (with the imatrix when given).
 *
 * Refused, before anything is written: MoE models (experts are not handled
 * yet), a calibration set with fewer tokens than the widest linear input
 * (the Hessian would be rank-deficient everywhere), a method other than gptq
 * and awq. */
#ifndef DSQ_CALIBRATION_GGUF_CALIB_H
#define DSQ_CALIBRATION_GGUF_CALIB_H

#include <stdbool.h>

#include "calibration/dataset.h"
#include "calibration/method.h"
#include "calibration/sequential.h"
#include "core/status.h"
#include "formats/gguf_quantize.h"

typedef struct dsq_gguf_calib_opts {
    const dsq_method *method; /* &dsq_method_gptq or &dsq_method_awq */
    dsq_calib_opts calib;     /* source, windows, seqlen, seed */
    double damp;              /* GPTQ dampening (0.01) */
    bool act_order;           /* GPTQ: blocks by descending Hessian diagonal */
    bool bf16;                /* calibration passes in BF16 products */
    int threads;              /* <= 0: all */
    int max_layers;           /* > 0: only layers [0, max_layers) by the method, the rest plain (tests, quick looks) */
    int loss_samples;         /* AWQ: windows its scale-search loss runs on (<= 0: all, as AutoAWQ) */
    int finalists;            /* AWQ: grid points run whole after screening (0: the default; < 0: all) */
} dsq_gguf_calib_opts;

typedef struct dsq_gguf_calib_report {
    dsq_seq_report seq;             /* the calibration run */
    dsq_calib_set calib;            /* the windows used (free with dsq_calib_free) */
    dsq_gguf_quantize_report *gguf; /* the file (free with dsq_gguf_quantize_report_free) */
} dsq_gguf_calib_report;

/* in: a GGUF file or HF folder; out, gopt: as for dsq_gguf_quantize (gopt->provider must be NULL). */
dsq_status dsq_gguf_calib_quantize(const char *in, const char *out, const dsq_gguf_quantize_options *gopt,
                                   const dsq_gguf_calib_opts *co, dsq_gguf_calib_report *rep);

void dsq_gguf_calib_report_free(dsq_gguf_calib_report *rep);

#endif
