/* AWQ scale and clip search (quantizers/awq.h); AutoAWQ awq/quantize/quantizer.py
 * and scale.py are the reference for every step and constant. */
#include "quantizers/awq.h"

#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"             /* d G in the quadratic-form loss */
#include "kernels/gemm_bf16.h"        /* the same in BF16 passes */
#include "kernels/vec.h"              /* its double sum */
#include "quantizers/intq_internal.h" /* a group's min and max */
#include "quantizers/intq_search.h"
#include "quantizers/qtypes.h"

dsq_awq_opts dsq_awq_default_opts(void)
{
    dsq_awq_opts o;
    memset(&o, 0, sizeof o);
    o.q.bits = 4;
    o.q.group_size = 128;
    o.q.sym = false;
    o.q.rule = DSQ_INTQ_RULE_AWQ;
    o.n_grid = 20;
    o.max_shrink = 0.5;
    o.n_sample_token = 512;
    o.duo_scaling = true;
    o.clip = true;
    o.finalists = 4;
    return o;
}

void dsq_awq_x_mean_add(double *acc, const float *x, int64_t n_tok, int64_t cols)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t c = 0; c < cols; c++) acc[c] += fabsf(x[t * cols + c]);
}

void dsq_awq_x_mean_finish(const double *acc, int64_t n_tok, int64_t cols, float *x_mean)
{
    for (int64_t c = 0; c < cols; c++) x_mean[c] = n_tok ? (float)(acc[c] / (double)n_tok) : 0.0f;
}

void dsq_awq_x_mean(const float *x, int64_t n_tok, int64_t cols, float *x_mean)
{
    double *acc = calloc((size_t)cols, sizeof *acc);
    if (!acc) { /* tiny allocation; fall back to a slower column walk */
        for (int64_t c = 0; c < cols; c++) {
            double a = 0;
            for (int64_t t = 0; t < n_tok; t++) a += fabsf(x[t * cols + c]);
            x_mean[c] = n_tok ? (float)(a / (double)n_tok) : 0.0f;
        }
        return;
    }
    dsq_awq_x_mean_add(acc, x, n_tok, cols);
    dsq_awq_x_mean_finish(acc, n_tok, cols, x_mean);
    free(acc);
}

dsq_status dsq_awq_w_mean_add(double *acc, int64_t *total, const float *w, int64_t rows, int64_t cols, int group_size)
{
    int64_t gs = group_size > 0 ? group_size : cols;
    if (cols % gs)
        return dsq_fail(DSQ_ERR_ARG, "awq: group size %lld does not divide %lld", (long long)gs, (long long)cols);
    for (int64_t r = 0; r < rows; r++) {
        const float *row = w + r * cols;
        for (int64_t g0 = 0; g0 < cols; g0 += gs) {
            float mx = 0.0f;
            for (int64_t k = 0; k < gs; k++) mx = fmaxf(mx, fabsf(row[g0 + k]));
            for (int64_t k = 0; k < gs; k++) acc[g0 + k] += fabsf(row[g0 + k]) / (mx + 1e-6f);
        }
    }
    *total += rows;
    return DSQ_OK;
}

void dsq_awq_w_mean_finish(const double *acc, int64_t total, int64_t cols, float *w_mean)
{
    for (int64_t c = 0; c < cols; c++) w_mean[c] = total ? (float)(acc[c] / (double)total) : 0.0f;
}

dsq_status dsq_awq_w_mean(const float *const *w, const int64_t *rows, int n, int64_t cols, int group_size,
                          float *w_mean)
{
    int64_t gs = group_size > 0 ? group_size : cols, total = 0;
    if (cols % gs)
        return dsq_fail(DSQ_ERR_ARG, "awq: group size %lld does not divide %lld", (long long)gs, (long long)cols);
    double *acc = calloc((size_t)cols, sizeof *acc);
    if (!acc) return dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
    dsq_status st = DSQ_OK;
    for (int j = 0; j < n && st == DSQ_OK; j++) st = dsq_awq_w_mean_add(acc, &total, w[j], rows[j], cols, group_size);
    if (st == DSQ_OK) dsq_awq_w_mean_finish(acc, total, cols, w_mean);
    free(acc);
    return st;
}

void dsq_awq_ratio_scales(const float *x_mean, const float *w_mean, int64_t cols, double r, bool duo, float *s)
{
    float mx = -INFINITY, mn = INFINITY;
    for (int64_t c = 0; c < cols; c++) {
        float v = powf(x_mean[c], (float)r);
        if (duo) v = v / (powf(w_mean[c], (float)(1.0 - r)) + 1e-4f);
        s[c] = fmaxf(v, 1e-4f);
        mx = fmaxf(mx, s[c]);
        mn = fminf(mn, s[c]);
    }
    float norm = sqrtf(mx * mn);
    for (int64_t c = 0; c < cols; c++) {
        s[c] = s[c] / norm;
        if (!isfinite(s[c])) s[c] = 1.0f;
    }
}

dsq_status dsq_awq_fake_quant(const float *w, int64_t rows, int64_t cols, const float *s, const dsq_intq_params *p,
                              float *out)
{
    DSQ_TRY(dsq_intq_check(p, cols));
    int64_t gs = p->group_size > 0 ? p->group_size : cols;
    int failed = 0;
#pragma omp parallel
    {
        float *v = malloc((size_t)gs * sizeof *v);
        if (!v) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t g0 = 0; v && g0 < cols; g0 += gs)
                if (!dsq_intq_fake_group(w + r * cols + g0, s ? s + g0 : NULL, gs, p, v, out + r * cols + g0)) {
#pragma omp atomic write
                    failed = 2;
                }
        free(v);
    }
    if (failed == 1) return dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
    if (failed == 2)
        return dsq_fail(DSQ_ERR_NUMERIC, "awq: non-finite weight in a %lld x %lld linear", (long long)rows,
                        (long long)cols);
    return DSQ_OK;
}

const float *dsq_awq_scaled_importance(const float *imp, const float *s, int64_t cols, float *dst)
{
    if (!imp) return NULL;
    for (int64_t c = 0; c < cols; c++) dst[c] = s ? imp[c] / (s[c] * s[c]) : imp[c];
    return dst;
}

dsq_status dsq_awq_fake_quant_blocks(const float *w, int64_t rows, int64_t cols, const float *s, dsq_type type,
                                     const float *imp, float *out)
{
    uint64_t row_bytes = 0;
    DSQ_TRY(dsq_type_nbytes(type, (uint64_t)cols, &row_bytes));
    float *qw = imp ? malloc((size_t)cols * sizeof *qw) : NULL;
    if (imp && !qw) return dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
    const float *wimp = dsq_awq_scaled_importance(imp, s, cols, qw);
    int failed = 0;
    char msg[256] = "";
#pragma omp parallel
    {
        float *buf = malloc((size_t)cols * sizeof *buf);
        uint8_t *q = malloc((size_t)row_bytes);
        if (!buf || !q) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            if (!buf || !q) continue;
            const float *src = w + r * cols;
            for (int64_t c = 0; c < cols; c++) buf[c] = s ? src[c] * s[c] : src[c];
            if (dsq_quantize(type, buf, q, 1, cols, wimp) != DSQ_OK ||
                dsq_dequantize(type, q, buf, 1, cols) != DSQ_OK) {
#pragma omp critical(dsq_awq_blocks_error)
                if (!failed) {
                    failed = 2;
                    snprintf(msg, sizeof msg, "row %lld: %s", (long long)r, dsq_errmsg());
                }
                continue;
            }
            for (int64_t c = 0; c < cols; c++) out[r * cols + c] = s ? buf[c] / s[c] : buf[c];
        }
        free(buf);
        free(q);
    }
    free(qw);
    if (failed == 1) return dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
    if (failed == 2) return dsq_fail(DSQ_ERR_NUMERIC, "awq into %s blocks: %s", dsq_type_name(type), msg);
    return DSQ_OK;
}

static int loss_threads(int64_t rows)
{
    int threads = dsq_cpu_threads();
    return threads > rows ? (rows > 0 ? (int)rows : 1) : threads;
}

/* The calling team member's contiguous share of rows, split by the team we
 * got (OpenMP may give fewer threads than asked): its first row and count. */
static int64_t row_share(int64_t rows, int64_t *r0)
{
    int team = omp_get_num_threads();
    int64_t per = (rows + team - 1) / team;
    *r0 = (int64_t)omp_get_thread_num() * per;
    return *r0 >= rows ? 0 : rows - *r0 < per ? rows - *r0 : per;
}

uint16_t *dsq_awq_pack_gram(const float *G, int64_t cols)
{
    uint16_t *P = aligned_alloc(64, (dsq_gemm_bf16_packed_bytes(cols, cols) + 63) & ~(size_t)63);
    /* G is symmetric: its rows are op(B)'s columns */
    if (P) dsq_gemm_bf16_pack_all(cols, cols, G, cols, 0, cols, P);
    return P;
}

dsq_status dsq_awq_quad_loss(const float *w, const float *wq, int64_t rows, int64_t cols, const float *G,
                             const uint16_t *Gp, double *loss)
{
    double total = 0;
    int failed = 0;
#pragma omp parallel num_threads(loss_threads(rows)) reduction(+ : total)
    {
        int64_t r0, nr = row_share(rows, &r0);
        int64_t ld = dsq_gemm_bf16_lda(cols);
        float *d = nr > 0 ? malloc((size_t)(nr * cols) * sizeof *d) : NULL, *t = NULL;
        uint16_t *db = NULL;
        void *gs = NULL;
        if (nr > 0) {
            t = malloc((size_t)(nr * cols) * sizeof *t);
            size_t gb = Gp ? dsq_gemm_bf16_scratch_bytes(0, cols) : dsq_gemm_scratch_floats(cols, cols) * sizeof(float);
            gs = aligned_alloc(64, (gb + 63) & ~(size_t)63);
            if (Gp) db = malloc((size_t)(nr * ld) * sizeof *db);
            if (!d || !t || !gs || (Gp && !db)) {
#pragma omp atomic write
                failed = 1;
            } else {
                for (int64_t i = 0; i < nr * cols; i++) d[i] = wq[r0 * cols + i] - w[r0 * cols + i];
                if (Gp) {
                    dsq_gemm_bf16_round_rows(d, cols, nr, cols, db, ld);
                    dsq_gemm_bf16_packed(nr, cols, 0, cols, cols, db, ld, Gp, t, cols, false, gs);
                } else {
                    dsq_gemm_f32(DSQ_GEMM_BN, nr, cols, cols, d, cols, G, cols, t, cols, false, gs);
                }
                total += dsq_vec_dot_f64(nr * cols, t, d);
            }
        }
        free(d);
        free(t);
        free(db);
        free(gs);
    }
    if (failed)
        return dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory for the loss of a %lld x %lld linear", (long long)rows,
                        (long long)cols);
    *loss = rows > 0 ? total / (double)rows : 0.0;
    return DSQ_OK;
}

dsq_status dsq_awq_direct_loss(const float *w, const float *wq, int64_t rows, int64_t cols, const float *x,
                               int64_t n_tok, double *loss)
{
    double total = 0;
    int failed = 0;
#pragma omp parallel num_threads(loss_threads(rows)) reduction(+ : total)
    {
        int64_t r0, nr = row_share(rows, &r0);
        float *d = NULL, *t = NULL, *gs = NULL;
        if (nr > 0 && n_tok > 0) {
            d = malloc((size_t)(nr * cols) * sizeof *d);
            t = malloc((size_t)(nr * n_tok) * sizeof *t);
            gs = aligned_alloc(64, (dsq_gemm_scratch_floats(n_tok, cols) * sizeof(float) + 63) & ~(size_t)63);
            if (!d || !t || !gs) {
#pragma omp atomic write
                failed = 1;
            } else {
                for (int64_t i = 0; i < nr * cols; i++) d[i] = wq[r0 * cols + i] - w[r0 * cols + i];
                dsq_gemm_f32(DSQ_GEMM_BT, nr, n_tok, cols, d, cols, x, cols, t, n_tok, false, gs);
                for (int64_t i = 0; i < nr * n_tok; i++) total += (double)t[i] * (double)t[i];
            }
        }
        free(d);
        free(t);
        free(gs);
    }
    if (failed)
        return dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory for the loss of a %lld x %lld linear", (long long)rows,
                        (long long)cols);
    *loss = rows > 0 && n_tok > 0 ? total / ((double)rows * (double)n_tok) : 0.0;
    return DSQ_OK;
}

int dsq_awq_screen_parts(int n_parts)
{
    int m = (n_parts + 7) / 8;
    return m < 2 ? 2 : m;
}

typedef struct grid_point {
    double acc; /* loss so far */
    int k;
} grid_point;

/* Screened points by their loss on the screening parts, non-finite last,
 * ties by ratio. */
static int by_loss(const void *pa, const void *pb)
{
    const grid_point *a = pa, *b = pb;
    bool fa = isfinite(a->acc), fb = isfinite(b->acc);
    if (fa != fb) return fa ? -1 : 1;
    if (fa && a->acc != b->acc) return a->acc < b->acc ? -1 : 1;
    return a->k - b->k;
}

dsq_status dsq_awq_search_scale(const float *x_mean, const float *w_mean, int64_t cols, const dsq_awq_opts *o,
                                int n_parts, dsq_awq_loss_fn loss, void *user, float *best_s, dsq_awq_search *info)
{
    const int n_grid = o->n_grid > 0 ? o->n_grid : 20, m = dsq_awq_screen_parts(n_parts);
    const bool screen = o->finalists > 0 && o->finalists < n_grid && n_parts > m;
    float *s = malloc((size_t)cols * sizeof *s);
    grid_point *pt = malloc((size_t)n_grid * sizeof *pt);
    if (!s || !pt) {
        free(s);
        free(pt);
        return dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
    }
    dsq_status st = DSQ_OK;
    for (int k = 0; k < n_grid; k++) pt[k] = (grid_point){0.0, k};
    /* screening in two rounds: every point on the first half of the
     * screening parts, the best 2 x finalists on the rest of them */
    const int m1 = m / 2, keep = 2 * o->finalists < n_grid ? 2 * o->finalists : n_grid;
    const int round_parts[2][2] = {{0, m1}, {m1, m}}, round_points[2] = {n_grid, keep};
    for (int round = 0; screen && round < 2; round++) {
        for (int i = 0; i < round_points[round] && st == DSQ_OK; i++) {
            dsq_awq_ratio_scales(x_mean, w_mean, cols, (double)pt[i].k / n_grid, o->duo_scaling, s);
            st = loss(user, s, round_parts[round][0], round_parts[round][1], INFINITY, &pt[i].acc);
        }
        qsort(pt, (size_t)round_points[round], sizeof *pt, by_loss);
    }
    double best = INFINITY;
    int best_k = -1;
    info->loss_r0 = NAN;
    for (int i = 0; i < (screen ? o->finalists : n_grid) && st == DSQ_OK; i++) {
        const int k = pt[i].k;
        double l = pt[i].acc;
        dsq_awq_ratio_scales(x_mean, w_mean, cols, (double)k / n_grid, o->duo_scaling, s);
        /* ratio 0 runs whole: its loss is reported */
        st = loss(user, s, screen ? m : 0, n_parts, k == 0 ? INFINITY : best, &l);
        if (st != DSQ_OK) break;
        if (k == 0) info->loss_r0 = l;
        if (l < best || (l == best && k < best_k)) {
            best = l;
            best_k = k;
            memcpy(best_s, s, (size_t)cols * sizeof *s);
        }
    }
    free(s);
    free(pt);
    if (st != DSQ_OK) return st;
    info->best_loss = best;
    info->best_ratio = best_k < 0 ? -1.0 : (double)best_k / n_grid;
    if (best_k < 0) return dsq_fail(DSQ_ERR_NUMERIC, "awq: every scale of the grid gave a non-finite loss");
    return DSQ_OK;
}

void dsq_awq_div_vec(float *v, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) v[i] /= s[i];
}

void dsq_awq_scale_cols(float *w, int64_t rows, int64_t cols, const float *s)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) w[r * cols + c] *= s[c];
}

void dsq_awq_div_rows(float *w_prev, int64_t rows, int64_t cols, float *bias, const float *s, int64_t n_s)
{
    int64_t r0 = rows - n_s;
    for (int64_t i = 0; i < n_s; i++) {
        for (int64_t c = 0; c < cols; c++) w_prev[(r0 + i) * cols + c] /= s[i];
        if (bias) bias[r0 + i] /= s[i];
    }
}

void dsq_awq_div_cols(float *x, int64_t n_tok, int64_t cols, const float *s)
{
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t c = 0; c < cols; c++) x[t * cols + c] /= s[c];
}

#define CLIP_TILE 64 /* rows per work item of the clip search */

/* A clip-search tile's buffers: code errors D and T = D G [rows x gs], the
 * rows' ranges and their best so far, GEMM scratch. */
typedef struct clip_buf {
    float *D, *T, *mn, *mx, *amax, *best_r, *scratch;
    double *best_e;
} clip_buf;

static bool clip_buf_alloc(clip_buf *b, int64_t gs)
{
    b->D = malloc((size_t)(CLIP_TILE * gs) * sizeof(float));
    b->T = malloc((size_t)(CLIP_TILE * gs) * sizeof(float));
    b->mn = malloc(4 * CLIP_TILE * sizeof(float));
    b->best_e = malloc(CLIP_TILE * sizeof(double));
    b->scratch = dsq_gemm_scratch_alloc(dsq_gemm_scratch_floats(gs, gs));
    if (b->mn) b->mx = b->mn + CLIP_TILE, b->amax = b->mx + CLIP_TILE, b->best_r = b->amax + CLIP_TILE;
    return b->D && b->T && b->mn && b->best_e && b->scratch;
}

static void clip_buf_free(clip_buf *b) { free(b->D), free(b->T), free(b->mn), free(b->best_e), free(b->scratch); }

/* The clip thresholds of rows [0, nr) of w (row stride cols) for group g:
 * AutoAWQ's grid t = amax * (1 - i / n_grid), i < max_shrink * n_grid, the
 * least d^T G d winning (ties: the earlier, wider range), d the row group's
 * code error under the AWQ rule's params of the clamped range, G the group's
 * Gram matrix: the same number as AutoAWQ's mean over the sampled tokens of
 * (x_g . q - x_g . w_g)^2, at gs^2 instead of n_tok * gs per candidate. All
 * rows of a candidate go through one F32 GEMM, T = D G. False when a weight
 * is not finite. */
static bool clip_group_rows(const float *w, int64_t nr, int64_t cols, int64_t g, int64_t gs, const float *Gg,
                            const dsq_awq_opts *o, clip_buf *b, float *max_val, int64_t ng)
{
    for (int64_t r = 0; r < nr; r++) {
        const float *wg = w + r * cols + g * gs;
        for (int64_t k = 0; k < gs; k++)
            if (!isfinite(wg[k])) return false;
        dsq_intq_min_max(wg, gs, &b->mn[r], &b->mx[r]);
        b->amax[r] = fmaxf(fabsf(b->mn[r]), fabsf(b->mx[r]));
        b->best_e[r] = INFINITY;
        b->best_r[r] = 1.0f;
    }
    const int n_shrink = (int)(o->max_shrink * o->n_grid);
    for (int k = 0; k < n_shrink; k++) {
        const float ratio = dsq_intq_grid_ratio(k, o->n_grid);
        for (int64_t r = 0; r < nr; r++)
            dsq_intq_code_deltas(w + r * cols + g * gs, gs, b->mn[r], b->mx[r], &o->q, ratio, b->D + r * gs);
        dsq_gemm_f32(DSQ_GEMM_BN, nr, gs, gs, b->D, gs, Gg, gs, b->T, gs, false, b->scratch);
        for (int64_t r = 0; r < nr; r++) {
            double e = 0.0;
            for (int64_t i = 0; i < gs; i++) e += (double)b->D[r * gs + i] * (double)b->T[r * gs + i];
            if (e < b->best_e[r]) b->best_e[r] = e, b->best_r[r] = ratio;
        }
    }
    for (int64_t r = 0; r < nr; r++) max_val[r * ng + g] = b->amax[r] * b->best_r[r];
    return true;
}

/* G[g] = x_g^T x_g / nt for every group g of the sampled tokens: one F32
 * GEMM per group on a transposed copy of its columns. */
static dsq_status group_grams(const float *x, int64_t nt, int64_t step, int64_t cols, int64_t gs, float *G)
{
    int64_t ng = cols / gs;
    int failed = 0;
#pragma omp parallel
    {
        float *xt = malloc((size_t)(gs * nt) * sizeof *xt), *xg = malloc((size_t)(gs * nt) * sizeof *xg);
        float *sc = dsq_gemm_scratch_alloc(dsq_gemm_scratch_floats(gs, nt));
        if (!xt || !xg || !sc) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t g = 0; g < ng; g++) {
            if (!xt || !xg || !sc) continue;
            for (int64_t t = 0; t < nt; t++)
                for (int64_t i = 0; i < gs; i++) {
                    float v = x[(t * step) * cols + g * gs + i];
                    xt[i * nt + t] = v;
                    xg[t * gs + i] = v;
                }
            float *Gg = G + g * gs * gs;
            dsq_gemm_f32(DSQ_GEMM_BN, gs, gs, nt, xt, nt, xg, gs, Gg, gs, false, sc);
            for (int64_t i = 0; i < gs * gs; i++) Gg[i] /= (float)(nt ? nt : 1);
        }
        free(xt);
        free(xg);
        free(sc);
    }
    if (failed) return dsq_fail(DSQ_ERR_NOMEM, "awq clip: out of memory");
    return DSQ_OK;
}

/* The clip search on rows 0, step, 2 step, ... of x [n_tok x cols]. */
static dsq_status search_clip(const float *w, int64_t rows, int64_t cols, const float *x, int64_t n_tok, int64_t step,
                              const dsq_awq_opts *o, float *max_val)
{
    DSQ_TRY(dsq_intq_check(&o->q, cols));
    int64_t gs = o->q.group_size > 0 ? o->q.group_size : cols, ng = cols / gs;
    int64_t nt = (n_tok + step - 1) / step;
    float *G = malloc((size_t)(ng * gs * gs) * sizeof *G);
    if (!G) return dsq_fail(DSQ_ERR_NOMEM, "awq clip: out of memory");
    dsq_status gst = group_grams(x, nt, step, cols, gs, G);
    if (gst != DSQ_OK) {
        free(G);
        return gst;
    }
    int failed = 0;
    const int64_t tiles = (rows + CLIP_TILE - 1) / CLIP_TILE;
#pragma omp parallel
    {
        clip_buf b = {0};
        const bool ok = clip_buf_alloc(&b, gs);
        if (!ok) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t t = 0; t < tiles; t++)
            for (int64_t g = 0; g < ng; g++) {
                const int64_t r0 = t * CLIP_TILE, nr = rows - r0 < CLIP_TILE ? rows - r0 : CLIP_TILE;
                if (ok &&
                    !clip_group_rows(w + r0 * cols, nr, cols, g, gs, G + g * gs * gs, o, &b, max_val + r0 * ng, ng)) {
#pragma omp atomic write
                    failed = 2;
                }
            }
        clip_buf_free(&b);
    }
    free(G);
    if (failed == 1) return dsq_fail(DSQ_ERR_NOMEM, "awq clip: out of memory");
    if (failed == 2)
        return dsq_fail(DSQ_ERR_NUMERIC, "awq clip: non-finite weight in a %lld x %lld linear", (long long)rows,
                        (long long)cols);
    return DSQ_OK;
}

int64_t dsq_awq_clip_step(int64_t n_tok, const dsq_awq_opts *o)
{
    int64_t ns = o->n_sample_token > 0 ? o->n_sample_token : 512;
    return n_tok / ns > 1 ? n_tok / ns : 1;
}

dsq_status dsq_awq_search_clip(const float *w, int64_t rows, int64_t cols, const float *x, int64_t n_tok,
                               const dsq_awq_opts *o, float *max_val)
{
    return search_clip(w, rows, cols, x, n_tok, dsq_awq_clip_step(n_tok, o), o, max_val);
}

dsq_status dsq_awq_search_clip_sampled(const float *w, int64_t rows, int64_t cols, const float *xs, int64_t n_rows,
                                       const dsq_awq_opts *o, float *max_val)
{
    return search_clip(w, rows, cols, xs, n_rows, 1, o, max_val);
}

void dsq_awq_apply_clip(float *w, int64_t rows, int64_t cols, int group_size, const float *max_val)
{
    int64_t gs = group_size > 0 ? group_size : cols, ng = cols / gs;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            float t = max_val[r * ng + c / gs];
            w[r * cols + c] = fminf(fmaxf(w[r * cols + c], -t), t);
        }
}
