/* GPTQ on one linear layer (Frantar et al.; IST-DASLab/gptq gptq.py
 * fasterquant, with AutoGPTQ's static groups and g_idx).
 *
 * Input: the F32 weight [rows = out x cols = in] and the layer's Hessian
 * H = 2/n * sum(x^T x) over the n calibration input rows x [cols] (accumulate
 * it with dsq_hessian_*; double precision). Output: codes, scales and zeros in
 * the intq layout (quantizers/intq.h) with g_idx when act-order reordered groups.
 *
 * Steps, in the reference's order:
 *  1. per-channel (group_size -1): each row's scale/zero from the original row.
 *  2. dead columns: diag(H) == 0 -> H[i,i] = 1 and W[:, i] = 0.
 *  3. static groups: each original group's params from the (dead-zeroed) weight.
 *  4. act-order: columns processed by descending diag(H) (ties: lower index first).
 *  5. dampening: H += percdamp * mean(diag(H)) * I. A Hessian that still does not
 *     factor is retried with percdamp doubled (at least 0.01) up to 1; after that
 *     the error names the layer, the size and the dampening tried.
 *  6. Hinv = the upper Cholesky factor U of H^-1 (H^-1 = U^T U). The reference
 *     computes cholesky(H) -> cholesky_inverse -> cholesky(upper); we get the same
 *     unique factor with one Cholesky of the index-reversed H and one triangular
 *     inverse (H = R R^T with R upper, and U = R^-1), half the arithmetic.
 *  7. columns in blocks of block_size (128): within a block each column is
 *     quantized, err = (w - q) / U[i,i] and the rest of the block gets
 *     W[:, j] -= err * U[i, j]; after the block, the later columns get the
 *     batched update W[:, i2:] -= Err * U[i1:i2, i2:] (a GEMM).
 *     Non-static group params are computed when a group starts, from the weight
 *     as it stands after the previous blocks' updates (the reference's quirk:
 *     the current block's own updates are not yet in it).
 *  8. g_idx[c] = (position of c in processing order) / group_size with act-order
 *     and no static groups; otherwise c / group_size (left NULL).
 *
 * The loss reported is the reference's sum of Losses: sum over all weights of
 * (w - dequant(q))^2 / U[i,i]^2 / 2. Work is split across rows with OpenMP
 * (GPTQ's rows are independent given H). */
#ifndef DSQ_QUANTIZERS_GPTQ_H
#define DSQ_QUANTIZERS_GPTQ_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "quantizers/intq.h"

/* ---- Hessian accumulation ---- */
typedef struct dsq_hessian {
    int64_t cols;
    double *h;  /* [cols x cols]; running sum of x^T x, then 2/n * sum after finalize */
    uint64_t n; /* input rows (tokens) added */
    bool final;
    bool bf16; /* set after init: x rounded to BF16 in the products (F32 sums), as x^T x of a BF16 model */
    /* work buffers of dsq_hessian_add, kept from call to call (one call per sample) */
    float *xt, *c, *xr;
    uint16_t *xtb;
    int64_t pend;  /* rows waiting in xt (and, F32, xr) for the next product (finalize adds them) */
    int c_threads; /* bf16: threads c has a band for */
} dsq_hessian;

dsq_status dsq_hessian_init(dsq_hessian *h, int64_t cols);
/* Adds x^T x for n_rows input rows x [n_rows x cols] (F32). */
dsq_status dsq_hessian_add(dsq_hessian *h, const float *x, int64_t n_rows);
/* h = 2/n * sum, full symmetric matrix. Counting tokens (as GPTQModel does;
 * IST counts sequences) changes only the overall scale, which dampening is
 * relative to. No rows added -> error. */
dsq_status dsq_hessian_finalize(dsq_hessian *h);
void dsq_hessian_free(dsq_hessian *h);

/* ---- GPTQ ---- */
typedef struct dsq_gptq_opts {
    dsq_intq_params q; /* bits, group_size, sym, rule (DSQ_INTQ_RULE_GPTQ is the reference's), clip */
    double percdamp;   /* dampening as a fraction of mean diag(H); reference default 0.01 */
    int block_size;    /* lazy-batch width; 0 means 128 */
    bool act_order;    /* desc_act */
    bool static_groups;
    bool refit;       /* after the columns: each row's scales re-solved for its codes (dsq_gptq_refit_scales) */
    const char *name; /* layer name for messages; may be NULL */
} dsq_gptq_opts;

/* Reference defaults: 4 bits, group 128, symmetric, GPTQ rule, percdamp 0.01, blocks of 128. */
dsq_gptq_opts dsq_gptq_default_opts(void);

typedef struct dsq_gptq_report {
    double loss;     /* sum of GPTQ's Losses (see above) */
    double percdamp; /* dampening that factored */
    double damp;     /* the same as the value added to the diagonal: percdamp * mean diag(H) */
    int damp_tries;  /* 1 when the first dampening worked */
    int64_t n_dead;  /* columns with diag(H) == 0 */
    int64_t n_refit; /* scales the refit changed */
} dsq_gptq_report;

/* Quantizes w [rows x cols] given H [cols x cols] (symmetric, double; an
 * asymmetric one is refused; only read). out is allocated here (free with
 * dsq_intq_free); report may be NULL. */
dsq_status dsq_gptq_quantize(const float *w, int64_t rows, int64_t cols, const double *H, const dsq_gptq_opts *o,
                             dsq_intq *out, dsq_gptq_report *report);

/* Replaces q's scales by the least-squares scales for its codes under the
 * layer loss tr((W - Q)(H + damp I)(W - Q)^T) (gptq_refit.c): codes, zeros and
 * g_idx stay. w is the weight GPTQ started from; *n_changed (may be NULL)
 * receives the number of scales that moved. */
dsq_status dsq_gptq_refit_scales(const float *w, const double *H, double damp, dsq_intq *q, const char *name,
                                 int64_t *n_changed);

/* The upper Cholesky factor U of (H + damp*I)^-1, double [n x n] (lower part
 * zero). Returns DSQ_ERR_NUMERIC when H + damp*I is not positive definite.
 * Exposed for tests and for callers that reuse the factor. */
dsq_status dsq_gptq_hinv_upper(const double *H, int64_t n, double damp, double *U);

/* The same factor computed in float, as GPTQ computes it (gptq_factor.c),
 * formed in U itself [n x n]: for benches and tests of the float path. */
dsq_status dsq_gptq_hinv_upper_f32(const double *H, int64_t n, double damp, float *U);

#endif
