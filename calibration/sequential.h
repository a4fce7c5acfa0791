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
#include "core/dtype.h"
#include "core/status.h"
#include "formats/int_writer.h"
#include "quantizers/awq.h"
#include "quantizers/intq.h"
#include "quantizers/w8.h"
#include "runtime/model.h"

/* What one finished layer leaves to write, all in the model's row order and
 * indexed as the block description (formats/block.h): the INT writer's
 * layer (formats/int_writer.h). AWQ has folded its scales into the norms. */
typedef dsq_int_layer dsq_seq_layer_out;

typedef dsq_status (*dsq_seq_emit_fn)(void *user, const dsq_seq_layer_out *l);

/* A finished routed expert (MoE layers), emitted after its layer's other linears, in expert order. */
typedef dsq_int_expert dsq_seq_expert_out;
typedef dsq_status (*dsq_seq_emit_expert_fn)(void *user, const dsq_seq_expert_out *x);

/* Which calibration tokens give a routed expert its statistics. */
typedef enum dsq_expert_calib {
    /* the tokens the router sends it; an expert with fewer than
     * expert_min_tokens of them takes every token instead (reported) */
    DSQ_EXPERT_CALIB_ROUTED = 0,
    /* every token, for statistics only (llm-compressor's moe_calibrate_all_experts) */
    DSQ_EXPERT_CALIB_ALL,
} dsq_expert_calib;

#define DSQ_EXPERT_MIN_TOKENS_DEFAULT 32

/* alpha values with a meaning of their own */
#define DSQ_SQ_ALPHA_FAMILY (-1.0) /* the model family's default (calibration/smooth.h) */
#define DSQ_SQ_ALPHA_AUTO (-2.0)   /* searched per layer and group on the calibration tokens */

/* The 8-bit methods (SmoothQuant W8A8, FP8): o->q must say 8 bits, per
 * channel (group -1), symmetric (dsq_seq_w8_default_opts sets it). */
typedef struct dsq_seq_w8_opts {
    dsq_w8_scheme scheme;
    /* SmoothQuant */
    bool smooth;       /* fold smoothing scales before quantizing (false: plain W8A8, the baseline) */
    bool smooth_all;   /* also the groups fed by a linear (v -> o without GQA, up -> down) */
    bool smooth_only;  /* fold the scales and leave the weights in float (checks the fold; nothing quantized) */
    double alpha;      /* in [0, 1], or DSQ_SQ_ALPHA_FAMILY / DSQ_SQ_ALPHA_AUTO */
    bool gptq;         /* weights by GPTQ (8 bits, per channel, sym) instead of RTN */
    int search_tokens; /* alpha auto: calibration tokens the error is measured on (<= 0: 2048) */
    /* [n_layers x DSQ_BLOCK_MAX_GROUPS]: the alpha each group got (NAN: not smoothed); may be NULL */
    float *alpha_out;
    /* both methods */
    bool kv_fp8; /* k_scale / v_scale per layer: max |K| (after RoPE) and max |V| / 448 */
} dsq_seq_w8_opts;

/* GGUF blocks instead of INT groups (`dsquant gguf --method gptq`,
 * calibration/gguf_calib.h): GPTQ quantizes each linear to the GGUF type
 * target names (quantizers/gptq_blocks.h) and hands the bytes, in the
 * model's row order, to put; the layer then runs on their dequantized
 * values. A target type that is not a block type leaves the linear in float.
 * expert: a routed expert's index (its part of the stacked tensor; its own
 * importance), -1 for a plain linear. */
typedef struct dsq_seq_gguf {
    dsq_status (*target)(void *user, int layer, int id, int expert, dsq_type *type, const float **importance);
    dsq_status (*put)(void *user, int layer, int id, int expert, dsq_type type, const void *bytes, uint64_t nbytes);
    void *user;
} dsq_seq_gguf;

typedef struct dsq_seq_opts {
    const dsq_method *method;
    dsq_intq_params q;     /* bits, group size, sym; the rule is the method's */
    bool skip_indivisible; /* linears whose input width the group does not divide stay unquantized */
    /* GPTQ */
    double damp;
    bool act_order, static_groups;
    bool refit; /* each row's scales re-solved for GPTQ's codes (dsq_gptq_refit_scales) */
    /* AWQ (q above overrides awq.q) */
    dsq_awq_opts awq;
    int awq_loss_samples; /* samples the scale-search loss runs on; <= 0: all (AutoAWQ) */
    int awq_part_tokens;  /* tokens per part of that loss (whole samples); <= 0: 512 */
    bool bf16;            /* forward passes and AWQ losses in BF16 products (F32 sums); GPTQ Hessians stay F32 */
    int threads;          /* <= 0: default */
    dsq_seq_w8_opts w8;   /* smoothquant, fp8 */
    int max_layers;       /* > 0: only layers [0, max_layers) are quantized and emitted (tests, quick looks) */
    /* [n_layers]: the process's peak RSS in KiB when each layer was done
     * (layers not reached keep their value); may be NULL */
    long *layer_rss_kb;
    bool keep_fake_quant;
    const dsq_seq_gguf *gguf;           /* gptq and awq: GGUF blocks (NULL: INT groups) */
    dsq_seq_emit_fn emit;               /* may be NULL */
    dsq_seq_emit_expert_fn emit_expert; /* may be NULL */
    void *user;
    /* MoE layers (calibration/moe.c): the layer outputs always come from the routed tokens */
    dsq_expert_calib expert_calib;
    int expert_min_tokens; /* <= 0: DSQ_EXPERT_MIN_TOKENS_DEFAULT */
} dsq_seq_opts;

/* Defaults: RTN, 4 bits, group 128, zero point, damp 0.01, AutoAWQ's AWQ options. */
dsq_seq_opts dsq_seq_default_opts(void);
/* Defaults of an 8-bit method: 8 bits per channel symmetric; smoothquant:
 * smoothing at the family's alpha, W8A8 with dynamic per-token activations,
 * RTN weights; fp8: FP8 dynamic. */
dsq_seq_opts dsq_seq_w8_default_opts(const dsq_method *m);

typedef struct dsq_seq_report {
    double seconds;
    long peak_rss_kb;
    int64_t n_quantized, n_skipped;
    double gptq_loss;     /* sum of GPTQ losses */
    double awq_loss_r0;   /* sums over groups whose ratio 0 ran on every part of the search loss there ... */
    double awq_loss_best; /* ... and at the chosen ratio */
    bool bf16;            /* the arithmetic the calibration passes used */
    /* smoothquant alpha auto: sums over the searched groups of the W8A8
     * error at the family's alpha and at the chosen ones */
    double sq_err_default, sq_err_best;
    int64_t n_smoothed; /* groups smoothed */
    /* MoE coverage: calibration tokens routed to each expert of every MoE layer */
    int64_t moe_layers, moe_experts;
    int64_t moe_tok_min, moe_tok_median, moe_tok_max;
    int64_t moe_below; /* experts under expert_min_tokens (ROUTED: they took every token) */
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
