/* Group-parameter search for INTn groups: instead of a group's min/max,
 * the clip ratio c (the range of quantizers/intq.h's rule shrunk by c) that
 * minimizes the group's reconstruction error
 *
 *     E(c) = sum_i imp_i * |w_i - dequant(quant(w_i; c))|^norm
 *
 * over a grid of ratios c = 1 - k/steps, k = 0 .. n_ratios - 1 (computed in
 * double and rounded once, as the Python references get them),
 * with imp the per-input-channel importance (mean x^2 of the linear's input:
 * llama.cpp's imatrix, GPTQ's Hessian diagonal up to a constant) or 1.
 * Ratio 1 is the min/max grid itself, so the search never does worse than
 * min/max on E.
 *
 * Sources: the MSE option of GPTQ's quantizer (IST-DASLab/gptq quant.py,
 * find_params with mse=True: grid 100, maxshrink 0.8, norm 2.4) as
 * llm-compressor's "mse" observer runs it (maxshrink 0.20: ratios 1.00 ..
 * 0.81), and llm-compressor's "imatrix_mse" observer (observers/imatrix.py
 * and grid_search.py: grid 20, maxshrink 0.95, norm 3, importance E[x^2]
 * normalized by its mean). What we do differently, on purpose: every group
 * tries every ratio (llm-compressor stops the whole tensor once 5 ratios in
 * a row improved no group, an artifact of searching all groups at once), so
 * each group gets the exact minimum over the grid. Shrinking follows the
 * rule: the GPTQ rule scales its zero-including range [xmin, xmax] (as both
 * references do), the AWQ rule clamps to +-c * max|w| (AutoAWQ's clip). */
#ifndef DSQ_QUANTIZERS_INTQ_SEARCH_H
#define DSQ_QUANTIZERS_INTQ_SEARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "quantizers/intq.h"

/* One row per grid, the table everything dispatches through. */
typedef struct dsq_intq_grid_info {
    const char *name; /* as --grid and the artifacts' configs spell it */
    int n_ratios;     /* ratios tried (1: min/max only) */
    int steps;        /* ratio k is 1 - k / steps */
    float norm;       /* error exponent */
    bool weighted;    /* wants the importance of each input channel */
} dsq_intq_grid_info;

/* The row of g; NULL for a value outside the enum. */
const dsq_intq_grid_info *dsq_intq_grid_get(dsq_intq_grid g);
/* The grid named `name` ("minmax", "mse", "imatrix-mse"; "imatrix_mse" as
 * llm-compressor spells it), or -1 (no message: a lookup). */
int dsq_intq_grid_parse(const char *name);

/* The ratio of p->grid's grid minimizing E for one group of n finite values
 * (imp: n weights, NULL for 1 each), applied on top of the group's other
 * clip `clip`; *err (may be NULL) receives E at that ratio. For min/max it
 * is 1 without computing anything. */
float dsq_intq_search_ratio(const float *w, int64_t n, const float *imp, const dsq_intq_params *p, float clip,
                            double *err);

/* What a search minimizes: the weighted elementwise error above, or, with
 * gram set, d^T G d for d the group's dequantization error and G the n x n
 * Gram matrix of the group's input columns over calibration tokens (the
 * mean squared error of the group's output contribution: AWQ's clip
 * objective; quantizers/awq.c batches it over rows, and tests hold the batch
 * to this per-group form). */
typedef struct dsq_intq_objective {
    const float *imp;  /* per-value weights, NULL for 1 (elementwise) */
    float norm;        /* the error exponent (elementwise) */
    const float *gram; /* n x n, row-major; NULL: elementwise */
} dsq_intq_objective;

/* The ratio k of a grid of `steps` steps per unit: 1 - k / steps in double,
 * rounded to float once (llm-compressor's and AutoAWQ's Python floats, cast
 * to the tensor's float32). */
float dsq_intq_grid_ratio(int k, int steps);

/* The search itself, on an explicit grid: ratios dsq_intq_grid_ratio(k,
 * steps) for k = 0 .. n_ratios - 1 on top of `clip`, each giving the rule's params at
 * that ratio; returns the ratio of least E (ties keep the wider range) and
 * E there in *err (may be NULL). scratch: n floats, used by the Gram
 * objective only (NULL otherwise). dsq_intq_search_ratio is this on the
 * --grid table's row; with AutoAWQ's grid (ratios 1 .. 0.55 in 0.05 steps)
 * and the Gram objective it is the reference of AWQ's clip step. */
float dsq_intq_search_grid(const float *w, int64_t n, const dsq_intq_params *p, float clip, int n_ratios, int steps,
                           const dsq_intq_objective *obj, float *scratch, double *err);

/* One group quantized and dequantized under column scales, as AWQ's grid
 * search does it (dsq_awq_fake_quant): v = w * s (s NULL: w), the rule's
 * params from v's min and max, out = dequant(code(v)) / s; on the widest
 * copy this CPU runs, all giving dsq_intq_code's bits. v: n floats of
 * scratch. False when a value is not finite. */
bool dsq_intq_fake_group(const float *w, const float *s, int64_t n, const dsq_intq_params *p, float *v, float *out);

/* d = dequant(code(w)) - w for one group of n values under the rule's
 * params at total clip `clip` from the group's range [mn, mx] (what the
 * search's objectives weigh), on the widest copy this CPU runs. */
void dsq_intq_code_deltas(const float *w, int64_t n, float mn, float mx, const dsq_intq_params *p, float clip,
                          float *d);

/* E at one total clip ratio (the search's objective, for tests and reports). */
double dsq_intq_group_error(const float *w, int64_t n, const float *imp, const dsq_intq_params *p, float clip,
                            float norm);

#endif
