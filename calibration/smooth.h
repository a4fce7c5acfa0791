/* SmoothQuant's smoothing (Xiao et al., ICML 2023, arXiv 2211.10438) and the
 * W8A8 output error its alpha search minimizes.
 *
 * For a group of linears reading one input X [tokens x cols] (q/k/v behind
 * the attention norm, gate/up behind the MLP norm, o behind v, down behind
 * up), per input channel j:
 *   s_j = max(xmax_j, 1e-5)^alpha / max(wmax_j, 1e-5)^(1 - alpha), then s_j >= 1e-5
 *   xmax_j = max |X_tj| over the calibration tokens
 *   wmax_j = max |W_rj| over the rows of every linear of the group
 * X / s goes into the producer of X (the RMSNorm weight, or the rows of the
 * producing linear and its bias) and s multiplies the group's columns, so
 * the float model computes the same function. Clamps and order after
 * mit-han-lab/smoothquant smoothquant/smooth.py (smooth_ln_fcs_llama_like:
 * weight max clamped at 1e-5, the ratio clamped at 1e-5); the activation max
 * is clamped too so that a dead channel does not give s = 0.
 * llm-compressor's SmoothQuantModifier (modifiers/smoothquant/base.py) differs:
 * it uses the channel's range max - min for xmax and 2 max|W| for wmax.
 *
 * Family defaults of alpha (migration strength) come from the table of
 * mit-han-lab/smoothquant's README ("Perplexity Results on Llama-1/2/3,
 * Falcon, Mistral, and Mixtral") and examples/ppl_eval.sh: Llama-2/3 0.85,
 * Mistral 0.8; families not in the table take the paper's 0.5 (also
 * llm-compressor's default smoothing_strength). */
#ifndef DSQ_CALIBRATION_SMOOTH_H
#define DSQ_CALIBRATION_SMOOTH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "formats/block.h"
#include "formats/hf_config.h"
#include "quantizers/w8.h"

#define DSQ_SQ_MIN 1e-5f

/* The grid alpha auto searches: 0, 0.05, ..., 1. */
#define DSQ_SQ_GRID_STEPS 20
/* Its candidates: the start alpha, then the grid. */
#define DSQ_SQ_GRID_N (DSQ_SQ_GRID_STEPS + 2)

/* The default alpha for a (see above). */
double dsq_sq_default_alpha(const dsq_arch *a);

/* Whether SmoothQuant can run on the block d of a: offset norms ((1 + w)
 * RMSNorm, Gemma) are refused by name. */
dsq_status dsq_sq_check_model(const dsq_arch *a, const dsq_block_desc *d);

/* amax[c] = max(amax[c], |x[t][c]|) over n rows of cols. Returns the flat
 * index of the first non-finite element (amax then partly updated), or -1. */
int64_t dsq_sq_amax_update(float *amax, const float *x, int64_t n, int64_t cols);

/* wmax[c] = max |W_k[r][c]| over the n weights w[k] of rows[k] x cols. */
void dsq_sq_weight_amax(const float *const *w, const int64_t *rows, int n, int64_t cols, float *wmax);

/* s from xmax and wmax at alpha (formula above). */
void dsq_sq_scales(const float *xmax, const float *wmax, int64_t cols, double alpha, float *s);

/* x [n x cols] replaced by what the 8-bit activation scheme of sch feeds the
 * product: quantized with its scale and dequantized (per token, per token
 * and group, or per tensor from the max over these n rows; ACT_NONE: left). */
dsq_status dsq_sq_fake_act(const dsq_w8_scheme *sch, float *x, int64_t n, int64_t cols);

/* A group's W8A8 error at candidate scales: with X [n x cols] and the group's
 * float weights W_k, err = sum_k ||fq_a(X / s) fq_w(W_k diag(s))^T - X W_k^T||^2
 * / (n sum_k rows_k), fq_w the weight scheme of sch (RTN), fq_a its
 * activation scheme. Biases cancel and are left out. */
typedef struct dsq_sq_eval {
    const float *x;
    int64_t n, cols;
    int nw;
    const float *w[DSQ_BLOCK_MAX_LINEARS];
    int64_t rows[DSQ_BLOCK_MAX_LINEARS];
    dsq_w8_scheme sch;
    float *yref[DSQ_BLOCK_MAX_LINEARS]; /* X W_k^T */
    float *xs, *ws, *y;                 /* work */
} dsq_sq_eval;

dsq_status dsq_sq_eval_init(dsq_sq_eval *e, const float *x, int64_t n, int64_t cols, const float *const *w,
                            const int64_t *rows, int nw, const dsq_w8_scheme *sch);
/* s NULL: no smoothing (plain W8A8). */
dsq_status dsq_sq_eval_error(dsq_sq_eval *e, const float *s, double *err);
void dsq_sq_eval_free(dsq_sq_eval *e);

/* alpha auto: the alpha of the grid (and start_alpha, tried first so that the
 * result is never worse than it) with the smallest error. */
typedef struct dsq_sq_search {
    double alpha, err; /* the chosen one */
    double start_err;  /* at start_alpha */
} dsq_sq_search;
dsq_status dsq_sq_search_alpha(dsq_sq_eval *e, const float *xmax, const float *wmax, double start_alpha,
                               dsq_sq_search *out);
/* The search in parts, for groups whose linears are not in memory together
 * (MoE experts, each on its own rows): err[DSQ_SQ_GRID_N] (zeroed) takes
 * weight x e's error at every candidate, then pick chooses as above. */
dsq_status dsq_sq_grid_errors(dsq_sq_eval *e, const float *xmax, const float *wmax, double start_alpha, double weight,
                              double *err);
void dsq_sq_grid_pick(const double *err, double start_alpha, dsq_sq_search *out);

#endif
