/* The layer-by-layer quantization driver over a dsq_model, for any method
 * of the table in calibration/method.h.
 *
 * The hidden states of every calibration sample (n_samples x seqlen x dim,
 * F32) are carried from one decoder layer to the next; only the current
 * layer's norms and linears are held as F32 copies (the model's own storage
 * stays in its mmap). Per layer the method's function runs on the block
 * description's groups (formats/block.h; for a Llama block):
 *   RTN   quantize each linear (AWQ rule: min/max per group).
 *   GPTQ  true-sequential groups {q,k,v} -> {o} -> {gate,up} -> {down}
 *         (IST-DASLab/gptq llama.py): the samples run through the layer with
 *         the earlier groups already quantized, the group's Hessian is
 *         collected from the hook and GPTQ quantizes it; at the end the layer
 *         runs once more with all quantized weights to give the next inputs.
 *   AWQ   AutoAWQ's order: the float layer runs once capturing every
 *         group's input (its output is the next layer's input: AutoAWQ
 *         propagates float outputs); the scales of every group are searched
 *         on the unmodified layer, then all are folded in, then the clip
 *         search, then quantization.
 * After a layer the emit callback receives what must be written; then the F32
 * copies are freed (or, with keep_fake_quant, the dequantized weights stay in
 * the model so that it can be evaluated in memory).
 *
 * Progress (layer k/N, seconds, ETA) and the peak RSS go to the log at INFO. */
#ifndef DSQ_CALIBRATION_SEQUENTIAL_H
#define DSQ_CALIBRATION_SEQUENTIAL_H

#include <stdbool.h>
#include <stdint.h>

#include "calibration/dataset.h"
#include "calibration/method.h"
#include "formats/int_writer.h"
#include "core/status.h"
#include "quantizers/awq.h"
#include "quantizers/intq.h"
#include "runtime/model.h"

/* What one finished layer leaves to write, all in the model's row order and
 * indexed as the block description (formats/block.h): the INT writer's
 * layer (formats/int_writer.h). AWQ has folded its scales into the norms. */
typedef dsq_int_layer dsq_seq_layer_out;

typedef dsq_status (*dsq_seq_emit_fn)(void *user, const dsq_seq_layer_out *l);

typedef struct dsq_seq_opts {
    const dsq_method *method;
    dsq_intq_params q;     /* bits, group size, sym; the rule is the method's */
    bool skip_indivisible; /* linears whose input width the group does not divide stay unquantized */
    /* GPTQ */
    double damp;
    bool act_order, static_groups;
    /* AWQ (q above overrides awq.q) */
    dsq_awq_opts awq;
    int awq_loss_samples; /* samples the scale-search loss runs on; <= 0: all (AutoAWQ) */
    bool bf16;            /* forward passes and AWQ losses in BF16 products (F32 sums); GPTQ Hessians stay F32 */
    int threads;          /* <= 0: default */
    int max_layers;       /* > 0: only layers [0, max_layers) are quantized and emitted (tests, quick looks) */
    bool keep_fake_quant;
    dsq_seq_emit_fn emit; /* may be NULL */
    void *user;
} dsq_seq_opts;

/* Defaults: RTN, 4 bits, group 128, zero point, damp 0.01, AutoAWQ's AWQ options. */
dsq_seq_opts dsq_seq_default_opts(void);

typedef struct dsq_seq_report {
    double seconds;
    long peak_rss_kb;
    int64_t n_quantized, n_skipped;
    double gptq_loss;       /* sum of GPTQ losses */
    double awq_loss_r0;     /* sums over groups of the scale-search loss at ratio 0 ... */
    double awq_loss_best;   /* ... and at the chosen ratio */
    bool bf16;              /* the arithmetic the calibration passes used */
} dsq_seq_report;

/* Memory the driver leaves in the model with keep_fake_quant; free it after
 * the model is closed (or never used again). */
typedef struct dsq_seq_keep dsq_seq_keep;
void dsq_seq_keep_free(dsq_seq_keep *k);

/* Linears of m whose input width the group size does not divide: a clear
 * error naming them and the valid sizes, unless skip is set (then OK; *n_bad
 * counts them). */
dsq_status dsq_seq_check_groups(const dsq_model *m, const dsq_intq_params *q, bool skip, int64_t *n_bad);

/* calib may be NULL for RTN. keep receives the kept memory (NULL unless
 * keep_fake_quant). On failure the layers already done may point into freed
 * memory when keep_fake_quant was set: the model may then only be closed. */
dsq_status dsq_seq_quantize(dsq_model *m, const dsq_calib_set *calib, const dsq_seq_opts *o, dsq_seq_report *r,
                            dsq_seq_keep **keep);

#endif
