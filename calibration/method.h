/* Quantization methods from one table, the way zstd picks its block
 * compressors: each method is one file (calibration/method_<name>.c) and one
 * row here, with its name, the statistics of the linear inputs it needs, its
 * per-layer function and its default output format. The driver
 * (calibration/sequential.h) collects nothing a method does not ask for and
 * calls its layer function once per decoder layer. docs/extending.md says how
 * to add one. */
#ifndef DSQ_CALIBRATION_METHOD_H
#define DSQ_CALIBRATION_METHOD_H

#include <stdbool.h>

#include "core/status.h"
#include "formats/int_artifact.h"
#include "quantizers/intq.h"

typedef struct dsq_seq_layer dsq_seq_layer;
typedef struct dsq_seq_runner dsq_seq_runner;
struct dsq_seq_opts;
struct dsq_seq_report;
struct dsq_seq_expert;

/* Statistics of a linear's input a method needs (bit set). None: the method
 * looks at no data (no calibration samples are loaded or run). */
enum {
    DSQ_STAT_MEAN_ABS = 1 << 0, /* per-channel mean |x| (AWQ's activation scale) */
    DSQ_STAT_MAX_ABS = 1 << 1,  /* per-channel max |x| (SmoothQuant) */
    DSQ_STAT_XTX = 1 << 2,      /* X^T X (GPTQ's Hessian, AWQ's quadratic-form loss) */
    DSQ_STAT_IMATRIX = 1 << 3,  /* llama.cpp's importance matrix (mean x^2) */
    DSQ_STAT_INPUTS = 1 << 4,   /* the captured inputs themselves (AWQ's search and clip) */
};

typedef struct dsq_method {
    const char *name;
    unsigned stats;
    dsq_int_format default_format;
    int default_seqlen; /* calibration window length its reference uses (0: no data) */
    /* the method's own option checks (NULL: none) */
    dsq_status (*check)(const struct dsq_seq_opts *o);
    /* quantizes layer s: hin holds the samples' hidden states entering the
     * layer, hout receives the states leaving it (the next layer's input);
     * unused when stats is 0 */
    dsq_status (*layer)(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout, struct dsq_seq_report *rep);
    /* the statistics under options o, when they depend on them (NULL: stats);
     * FP8 dynamic needs no data, FP8 static does */
    unsigned (*stats_for)(const struct dsq_seq_opts *o);
    /* one routed expert of an MoE layer (calibration/moe.c; NULL: the method
     * does not handle MoE models yet, and the driver refuses them) */
    dsq_status (*expert)(struct dsq_seq_expert *x, struct dsq_seq_report *rep);
    /* each INT group's range when --grid is not given (docs/algorithms.md
     * "Group grids": the best measured of the grids the method takes) */
    dsq_intq_grid default_grid;
    /* layer may be given hout == hin (it reads hin only until it starts
     * writing hout): the driver then keeps one hidden-state buffer resident,
     * not two, on layers without routed experts (moe.c rebuilds hout from hin) */
    bool in_place;
} dsq_method;

/* The row named `name`, or NULL (no message: a lookup). */
const dsq_method *dsq_method_find(const char *name);
/* Row i of the table, NULL past its end (for listings). */
const dsq_method *dsq_method_at(int i);
/* Whether the method runs calibration samples through the model. */
static inline bool dsq_method_needs_data(const dsq_method *m) { return m->stats != 0; }
/* The statistics m collects under o, and whether that takes data. */
static inline unsigned dsq_method_stats(const dsq_method *m, const struct dsq_seq_opts *o)
{
    return m->stats_for ? m->stats_for(o) : m->stats;
}
static inline bool dsq_method_needs_data_for(const dsq_method *m, const struct dsq_seq_opts *o)
{
    return dsq_method_stats(m, o) != 0;
}

extern const dsq_method dsq_method_rtn;
extern const dsq_method dsq_method_awq;
extern const dsq_method dsq_method_gptq;
extern const dsq_method dsq_method_smoothquant; /* W8A8 INT8 after smoothing (calibration/method_smoothquant.c) */
extern const dsq_method dsq_method_fp8;         /* FP8 E4M3 schemes by RTN (calibration/method_fp8.c) */

#endif
