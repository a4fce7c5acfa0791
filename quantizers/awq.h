/* AWQ: activation-aware weight scaling and clipping (Lin et al.), as
 * casper-hansen/AutoAWQ awq/quantize/quantizer.py does it
 * (_search_best_scale / _compute_best_scale, _search_best_clip /
 * _compute_best_clip) and awq/quantize/scale.py applies it. The pieces here
 * work on F32 arrays; calibration/sequential.c wires them to a model layer
 * (which groups, which block output defines the loss). docs/algorithms.md.
 *
 * Scale search, for linears sharing one input x (W_j [rows_j x cols]):
 *   w_mean[c]: |W| of the concatenated rows, each value divided by the max |w|
 *              of its (row, group) + 1e-6, averaged over all rows;
 *   x_mean[c]: mean over tokens of |x[:, c]|;
 *   for r = k / n_grid, k = 0 .. n_grid-1:
 *     s = max(x_mean^r / (w_mean^(1-r) + 1e-4), 1e-4)   (duo scaling, AutoAWQ's default)
 *     s /= sqrt(max(s) * min(s)); non-finite entries -> 1
 *     loss(s) = MSE of the block output with every W_j replaced by
 *               Q(W_j diag(s)) diag(s)^-1  (the caller's loss function)
 *   best: the first s with the smallest loss (strictly smaller wins);
 *   screened (dsq_awq_search_scale below): the same among the finalists.
 * Clip search, per (row, group) of one linear: shrink t = amax * (1 - i/n_grid)
 * for i < max_shrink * n_grid, error = mean over sampled tokens of
 * (x_g . Q(clamp(w_g, -t, t)) - x_g . w_g)^2; tokens sampled with stride
 * max(1, n_tok / n_sample_token). The error is d^T G d with the group's
 * Gram matrix, for 64 rows at a time through one F32 GEMM per candidate; the
 * group search that RTN and GPTQ use (dsq_intq_search_grid) with the same
 * grid and the Gram objective is its per-group reference (tests/test_awq.c). */
#ifndef DSQ_QUANTIZERS_AWQ_H
#define DSQ_QUANTIZERS_AWQ_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"
#include "quantizers/intq.h"

typedef struct dsq_awq_opts {
    dsq_intq_params q;  /* bits, group size, sym (zero_point = !sym), rule AWQ */
    int n_grid;         /* 20 */
    double max_shrink;  /* 0.5 */
    int n_sample_token; /* 512: tokens the clip search looks at */
    bool duo_scaling;   /* true: divide by w_mean^(1-r) */
    bool clip;          /* apply_clip, true */
    int finalists;      /* 4: grid points run on every part after screening (0: all) */
} dsq_awq_opts;

/* AutoAWQ's defaults: 4 bits, group 128, zero point, n_grid 20, max_shrink
 * 0.5, 512 clip tokens, duo scaling, clipping on; 4 finalists. */
dsq_awq_opts dsq_awq_default_opts(void);

/* x_mean[c] = mean_t |x[t, c]| (double sums). */
void dsq_awq_x_mean(const float *x, int64_t n_tok, int64_t cols, float *x_mean);
/* The same streamed: acc [cols] (zeroed) takes each batch of rows in token
 * order; finish divides by the n_tok rows added (the same bits as one call). */
void dsq_awq_x_mean_add(double *acc, const float *x, int64_t n_tok, int64_t cols);
void dsq_awq_x_mean_finish(const double *acc, int64_t n_tok, int64_t cols, float *x_mean);

/* w_mean over n linears sharing cols inputs (w[j] is rows[j] x cols). */
dsq_status dsq_awq_w_mean(const float *const *w, const int64_t *rows, int n, int64_t cols, int group_size,
                          float *w_mean);

/* The same in parts, for linears that are not in memory together (MoE
 * experts): acc [cols] (zeroed) and *total (0) take one linear at a time,
 * then finish writes w_mean. */
dsq_status dsq_awq_w_mean_add(double *acc, int64_t *total, const float *w, int64_t rows, int64_t cols, int group_size);
void dsq_awq_w_mean_finish(const double *acc, int64_t total, int64_t cols, float *w_mean);

/* The scales of grid ratio r (see above), normalised. */
void dsq_awq_ratio_scales(const float *x_mean, const float *w_mean, int64_t cols, double r, bool duo, float *s);

/* out = Q(w diag(s)) diag(s)^-1 (s NULL: plain Q(w)); out may equal w. */
dsq_status dsq_awq_fake_quant(const float *w, int64_t rows, int64_t cols, const float *s, const dsq_intq_params *p,
                              float *out);

/* The same with a GGUF block type's own quantizer in place of INT groups
 * (`dsquant gguf --method awq`): each row of w diag(s) is quantized to type
 * with importance imp[c] / s[c]^2 (the importance of the scaled columns,
 * whose inputs are x / s; imp NULL: the type's own weighting), then
 * dequantized and divided by s. out may equal w. */
dsq_status dsq_awq_fake_quant_blocks(const float *w, int64_t rows, int64_t cols, const float *s, dsq_type type,
                                     const float *imp, float *out);
/* imp[c] / s[c]^2 into dst (s NULL: imp copied); NULL when imp is. */
const float *dsq_awq_scaled_importance(const float *imp, const float *s, int64_t cols, float *dst);

/* The loss of a group that is one linear, without the tokens: with G =
 * x^T x / n_tok [cols x cols] (symmetric), the mean over tokens and rows of
 * (x wq^T - x w^T)^2 is sum_r d_r^T G d_r / rows, d = wq - w. Equal to the
 * direct loss up to rounding, at a cost of rows x cols^2 instead of
 * n_tok x rows x cols per grid point. Gp (from dsq_awq_pack_gram): d G in
 * BF16 products on G packed once (F32 sums; a relative error near 1e-5 on
 * the loss, far below the steps of the grid); NULL: F32 products. */
dsq_status dsq_awq_quad_loss(const float *w, const float *wq, int64_t rows, int64_t cols, const float *G,
                             const uint16_t *Gp, double *loss);
/* G [cols x cols] packed for the BF16 products of dsq_awq_quad_loss (free()
 * it); NULL when out of memory. */
uint16_t *dsq_awq_pack_gram(const float *G, int64_t cols);

/* The same loss from the tokens themselves, x [n_tok x cols]: cheaper than
 * the quadratic form when n_tok < cols (a 16384-wide o_proj on 2048 tokens,
 * a routed expert's down on the few tokens routed to it). F32 products. */
dsq_status dsq_awq_direct_loss(const float *w, const float *wq, int64_t rows, int64_t cols, const float *x,
                               int64_t n_tok, double *loss);

/* The loss of the block output when the group's linears use scales s, as
 * a sum over n_parts parts of the calibration set (each part's share of the
 * mean): adds parts [p0, p1) to *acc. It may stop after any part once *acc
 * > bound (the sum only grows), leaving *acc above bound. */
typedef dsq_status (*dsq_awq_loss_fn)(void *user, const float *s, int p0, int p1, double bound, double *acc);

typedef struct dsq_awq_search {
    /* loss of the chosen scales; at ratio 0 (NAN when ratio 0 was screened
     * out and not run on every part) */
    double best_loss, loss_r0;
    double best_ratio;
} dsq_awq_search;

/* Parts every grid point runs on before the finalists are chosen. */
int dsq_awq_screen_parts(int n_parts);

/* The grid search; best_s [cols] receives the chosen scales. Exhaustive
 * (o->finalists 0, or too few parts to screen): every grid point, in grid
 * order, each stopped once its partial loss exceeds the best whole loss so
 * far; the same choice as running every point on every part. Screened: every
 * point on the first half of the dsq_awq_screen_parts parts, the 2 x
 * o->finalists lowest of them on the rest of those parts, then the
 * o->finalists lowest on all parts, in that order, bounded the same way; the
 * smallest whole loss among the finalists wins (ties: the lower ratio). An
 * all-non-finite grid is an error (AutoAWQ raises too). */
dsq_status dsq_awq_search_scale(const float *x_mean, const float *w_mean, int64_t cols, const dsq_awq_opts *o,
                                int n_parts, dsq_awq_loss_fn loss, void *user, float *best_s, dsq_awq_search *info);

/* Folding the scales (AutoAWQ scale.py): the operation before the group gets
 * divided, the group's columns multiplied, so the float function is unchanged. */
void dsq_awq_div_vec(float *v, const float *s, int64_t n);                     /* RMSNorm weight or bias /= s */
void dsq_awq_scale_cols(float *w, int64_t rows, int64_t cols, const float *s); /* W[:, c] *= s[c] */
/* The last n_s rows of the previous linear (w_prev rows x cols) and its bias /= s. */
void dsq_awq_div_rows(float *w_prev, int64_t rows, int64_t cols, float *bias, const float *s, int64_t n_s);
/* The cached inputs of the scaled linears: x[:, c] /= s[c]. */
void dsq_awq_div_cols(float *x, int64_t n_tok, int64_t cols, const float *s);

/* Clip search for w [rows x cols] with inputs x [n_tok x cols]: max_val
 * [rows x n_groups] receives the chosen threshold of each (row, group). */
dsq_status dsq_awq_search_clip(const float *w, int64_t rows, int64_t cols, const float *x, int64_t n_tok,
                               const dsq_awq_opts *o, float *max_val);
/* The sampling stride of the clip search over n_tok rows: it looks at rows
 * 0, step, 2 step, ... (ceil(n_tok / step) of them). */
int64_t dsq_awq_clip_step(int64_t n_tok, const dsq_awq_opts *o);
/* The clip search on rows already sampled by that stride (xs [n_rows x
 * cols]): the same result as dsq_awq_search_clip on all the rows, with
 * memory for the sampled rows only. */
dsq_status dsq_awq_search_clip_sampled(const float *w, int64_t rows, int64_t cols, const float *xs, int64_t n_rows,
                                       const dsq_awq_opts *o, float *max_val);
/* w[r, group g] clamped to [-max_val[r, g], max_val[r, g]]. */
void dsq_awq_apply_clip(float *w, int64_t rows, int64_t cols, int group_size, const float *max_val);

#endif
