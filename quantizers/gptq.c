/* GPTQ for one linear layer; the algorithm and its sources are in gptq.h. */
#include "quantizers/gptq.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/bigbuf.h"
#include "core/log.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"      /* x^T x */
#include "kernels/gemm_bf16.h" /* x^T x of a BF16 pass */
#include "kernels/rowupd.h"    /* the lazy batch updates' inner loops */
#include "quantizers/gptq_internal.h"
#include "quantizers/intq_search.h"

#define COL_CHUNK 64 /* columns kept in L1 during the batched updates */

/* ================================ Hessian ================================ */

dsq_status dsq_hessian_init(dsq_hessian *h, int64_t cols)
{
    memset(h, 0, sizeof *h);
    if (cols <= 0 || (uint64_t)cols > SIZE_MAX / sizeof(double) / (uint64_t)cols)
        return dsq_fail(DSQ_ERR_ARG, "hessian: %lld columns is out of range", (long long)cols);
    h->h = dsq_bigbuf_calloc((size_t)cols * (size_t)cols, sizeof(double));
    if (!h->h)
        return dsq_fail(DSQ_ERR_NOMEM, "hessian: out of memory for [%lld x %lld]", (long long)cols, (long long)cols);
    h->cols = cols;
    return DSQ_OK;
}

/* F32 passes: x^T x of up to HCHUNK tokens is one F32 GEMM (as the
 * reference accumulates in float32), added to the double sum; rows of the
 * product are split over threads. */
#define HCHUNK 256
/* Rows of x^T x per work item: each item packs its (n - i0) x HCHUNK slice of
 * x, so taller bands pack less (at 128 rows packing stays far below the
 * products; the diagonal blocks' lower halves are the price). */
#define HBAND 128

/* Adds x^T x of the h->pend rows gathered in h->xr (row-major) and h->xt
 * (transposed, leading dimension HCHUNK). */
static dsq_status hessian_flush_f32(dsq_hessian *h)
{
    const int64_t n = h->cols, t = h->pend;
    if (t == 0) return DSQ_OK;
    const float *xt = h->xt, *x = h->xr;
    float *c = h->c;
    int64_t bands = (n + HBAND - 1) / HBAND;
    int failed = 0;
#pragma omp parallel
    {
        void *gs = aligned_alloc(64, (dsq_gemm_scratch_floats(n, t) * sizeof(float) + 63) & ~(size_t)63);
        if (!gs) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int64_t b = 0; b < bands; b++) {
            if (!gs) continue;
            int64_t i0 = b * HBAND, m = n - i0 < HBAND ? n - i0 : HBAND;
            /* rows i0.. of x^T x, columns from i0 on (the upper triangle and a little more) */
            dsq_gemm_f32(DSQ_GEMM_BN, m, n - i0, t, xt + i0 * HCHUNK, HCHUNK, x + i0, n, c + i0 * n + i0, n, false, gs);
            for (int64_t i = i0; i < i0 + m; i++)
                for (int64_t j = i; j < n; j++) h->h[i * n + j] += (double)c[i * n + j];
        }
        free(gs);
    }
    h->pend = 0;
    if (failed) return dsq_fail(DSQ_ERR_NOMEM, "hessian: out of memory for GEMM scratch");
    return DSQ_OK;
}

/* dst[j * ldd + i] = x[i * n + j] for i < rows, j < n, in 16 x 16 blocks so
 * the reads and the strided writes both stay within a few cache lines (one
 * row at a time wrote n lines HCHUNK floats apart for every row). */
static void transpose_into(const float *x, int64_t rows, int64_t n, float *dst, int64_t ldd)
{
    for (int64_t i0 = 0; i0 < rows; i0 += 16) {
        const int64_t i1 = i0 + 16 < rows ? i0 + 16 : rows;
        for (int64_t j0 = 0; j0 < n; j0 += 16) {
            const int64_t j1 = j0 + 16 < n ? j0 + 16 : n;
            for (int64_t j = j0; j < j1; j++)
                for (int64_t i = i0; i < i1; i++) dst[j * ldd + i] = x[i * n + j];
        }
    }
}

/* Rows gather across calls into chunks of HCHUNK, so the sums (and their
 * bits) do not depend on how the rows were split into calls. */
static dsq_status hessian_add_f32(dsq_hessian *h, const float *x, int64_t n_rows)
{
    const int64_t n = h->cols;
    for (int64_t r = 0; r < n_rows;) {
        int64_t take = HCHUNK - h->pend < n_rows - r ? HCHUNK - h->pend : n_rows - r;
        transpose_into(x + r * n, take, n, h->xt + h->pend, HCHUNK);
        memcpy(h->xr + h->pend * n, x + r * n, (size_t)(take * n) * sizeof *x);
        h->pend += take;
        r += take;
        if (h->pend == HCHUNK) DSQ_TRY(hessian_flush_f32(h));
    }
    return DSQ_OK;
}

/* The BF16 product gathers rows across calls (one call per sample is
 * typical) into chunks of HCHUNK_BF16: at AMX speed the per-chunk double
 * additions and packing, not the products, would otherwise dominate. Torch's
 * x^T x of a BF16 batch sums as many tokens in F32. Work items are bands of
 * HCOLS columns of the upper triangle (rows 0 .. band end), so each packs
 * only its own columns of x once. */
#define HCHUNK_BF16 1024
#define HCOLS 128

static void transpose_rows(const float *x, int64_t rows, int64_t n, float *xt, int64_t ldt)
{
    /* 32 x 32 tiles keep both sides' cache lines live */
#pragma omp parallel for schedule(static)
    for (int64_t j0 = 0; j0 < n; j0 += 32)
        for (int64_t i0 = 0; i0 < rows; i0 += 32)
            for (int64_t j = j0; j < j0 + 32 && j < n; j++)
                for (int64_t i = i0; i < i0 + 32 && i < rows; i++) xt[j * ldt + i] = x[i * n + j];
}

static dsq_status hessian_flush_bf16(dsq_hessian *h)
{
    const int64_t n = h->cols, t = h->pend, ld = HCHUNK_BF16;
    if (t == 0) return DSQ_OK;
    float *xt = h->xt, *c = h->c;
    uint16_t *xtb = h->xtb;
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; j++) dsq_gemm_bf16_round_rows(xt + j * ld, ld, 1, t, xtb + j * ld, ld);
    int64_t bands = (n + HCOLS - 1) / HCOLS;
    int failed = 0;
#pragma omp parallel num_threads(h->c_threads)
    {
        void *gs = aligned_alloc(64, (dsq_gemm_bf16_scratch_bytes(HCOLS, t) + 63) & ~(size_t)63);
        if (!gs) {
#pragma omp atomic write
            failed = 1;
        }
        float *cb = c + (size_t)omp_get_thread_num() * (size_t)n * HCOLS; /* this thread's band */
#pragma omp for schedule(dynamic, 1)
        for (int64_t q = 0; q < bands; q++) {
            if (!gs) continue;
            int64_t b = bands - 1 - q; /* the tallest bands first, for balance */
            int64_t j0 = b * HCOLS, jw = n - j0 < HCOLS ? n - j0 : HCOLS, j1 = j0 + jw;
            dsq_gemm_bf16(DSQ_GEMM_BT, j1, jw, t, xtb, ld, xt + j0 * ld, ld, cb, HCOLS, false, gs);
            for (int64_t i = 0; i < j1; i++)
                for (int64_t j = i > j0 ? i : j0; j < j1; j++) h->h[i * n + j] += (double)cb[i * HCOLS + (j - j0)];
        }
        free(gs);
    }
    h->pend = 0;
    if (failed) return dsq_fail(DSQ_ERR_NOMEM, "hessian: out of memory for GEMM scratch");
    return DSQ_OK;
}

static dsq_status hessian_add_bf16(dsq_hessian *h, const float *x, int64_t n_rows)
{
    const int64_t n = h->cols;
    for (int64_t r = 0; r < n_rows;) {
        int64_t take = HCHUNK_BF16 - h->pend < n_rows - r ? HCHUNK_BF16 - h->pend : n_rows - r;
        transpose_rows(x + r * n, take, n, h->xt + h->pend, HCHUNK_BF16);
        h->pend += take;
        r += take;
        if (h->pend == HCHUNK_BF16) DSQ_TRY(hessian_flush_bf16(h));
    }
    return DSQ_OK;
}

dsq_status dsq_hessian_add(dsq_hessian *h, const float *x, int64_t n_rows)
{
    if (!h || !h->h || h->final) return dsq_fail(DSQ_ERR_ARG, "hessian: not open for adding");
    if (n_rows < 0 || (n_rows > 0 && !x)) return dsq_fail(DSQ_ERR_ARG, "hessian: bad input rows");
    const int64_t n = h->cols;
    /* all-ones exponent bits = Inf or NaN; integer tests vectorize, isfinite() does not */
    uint32_t bad = 0;
    for (int64_t i = 0; i < n_rows * n; i++) {
        uint32_t u;
        memcpy(&u, x + i, sizeof u);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    for (int64_t i = 0; bad && i < n_rows * n; i++)
        if (!isfinite(x[i]))
            return dsq_fail(DSQ_ERR_NUMERIC, "hessian: input row %lld, column %lld is not finite", (long long)(i / n),
                            (long long)(i % n));
    if (n_rows == 0) return DSQ_OK;
    int64_t chunk = h->bf16 ? HCHUNK_BF16 : HCHUNK;
    if (!h->xt) h->xt = dsq_bigbuf_alloc((size_t)(n * chunk) * sizeof *h->xt);
    /* F32: the n x n product; BF16: one n x HCOLS band per thread */
    if (!h->c) h->c_threads = dsq_cpu_threads();
    size_t cn = h->bf16 ? (size_t)h->c_threads * (size_t)n * HCOLS : (size_t)(n * n);
    if (!h->c) h->c = dsq_bigbuf_alloc(cn * sizeof *h->c);
    if (h->bf16 && !h->xtb) h->xtb = dsq_bigbuf_alloc((size_t)(n * chunk) * sizeof *h->xtb);
    if (!h->bf16 && !h->xr) h->xr = dsq_bigbuf_alloc((size_t)(n * chunk) * sizeof *h->xr);
    dsq_status st =
        h->xt && h->c && (h->bf16 ? h->xtb != NULL : h->xr != NULL)
            ? DSQ_OK
            : dsq_fail(DSQ_ERR_NOMEM, "hessian: out of memory for [%lld x %lld]", (long long)n, (long long)n);
    if (st == DSQ_OK) st = h->bf16 ? hessian_add_bf16(h, x, n_rows) : hessian_add_f32(h, x, n_rows);
    if (st == DSQ_OK) h->n += (uint64_t)n_rows;
    return st;
}

/* The strict lower triangle of h [n x n] from its upper, in 64 x 64 tiles so
 * both sides stay in cache. */
static void mirror_upper(double *h, int64_t n)
{
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i0 = 0; i0 < n; i0 += 64)
        for (int64_t j0 = 0; j0 <= i0; j0 += 64)
            for (int64_t i = i0; i < i0 + 64 && i < n; i++)
                for (int64_t j = j0; j < j0 + 64 && j < i; j++) h[i * n + j] = h[j * n + i];
}

dsq_status dsq_hessian_finalize(dsq_hessian *h)
{
    if (!h || !h->h || h->final) return dsq_fail(DSQ_ERR_ARG, "hessian: not open for finalizing");
    if (h->n == 0) return dsq_fail(DSQ_ERR_ARG, "hessian: no input rows were added");
    DSQ_TRY(h->bf16 ? hessian_flush_bf16(h) : hessian_flush_f32(h));
    free(h->xt);
    free(h->xtb);
    free(h->xr);
    free(h->c);
    h->xt = h->c = h->xr = NULL;
    h->xtb = NULL;
    const int64_t n = h->cols;
    const double f = 2.0 / (double)h->n;
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i; j < n; j++) h->h[i * n + j] *= f;
    mirror_upper(h->h, n);
    h->final = true;
    return DSQ_OK;
}

void dsq_hessian_free(dsq_hessian *h)
{
    if (!h) return;
    free(h->xt);
    free(h->xtb);
    free(h->xr);
    free(h->c);
    free(h->h);
    memset(h, 0, sizeof *h);
}

double *dsq_gptq_alloc_square(int64_t n, size_t elem)
{
    if (n <= 0 || (uint64_t)n > SIZE_MAX / elem / (uint64_t)n) return NULL;
    return dsq_bigbuf_alloc((size_t)n * (size_t)n * elem);
}

/* ================================ GPTQ ================================ */

dsq_gptq_opts dsq_gptq_default_opts(void)
{
    dsq_gptq_opts o;
    memset(&o, 0, sizeof o);
    o.q.bits = 4;
    o.q.group_size = 128;
    o.q.sym = true;
    o.q.rule = DSQ_INTQ_RULE_GPTQ;
    o.q.clip = 1.0f;
    o.percdamp = 0.01;
    o.block_size = 128;
    return o;
}

typedef struct gptq_ctx {
    const float *w;
    int64_t rows, cols;
    const float *U;      /* upper factor in processing order, [cols x cols] */
    const int64_t *perm; /* processing position -> original column */
    const uint8_t *dead; /* by original column */
    const dsq_intq_params *qp;
    int bs;
    dsq_intq *out;
    bool static_groups;
    const float *imp_orig, *imp_proc; /* diag(H) by original column and in processing order (0 when dead) */
} gptq_ctx;

/* A group's scale and zero under qp: min/max, or the ratio its grid search
 * picks with the Hessian diagonal as the importance of each column. */
static dsq_status group_params(const float *w, int64_t n, const float *imp, const dsq_intq_params *qp, float *s, int *z)
{
    float ratio = dsq_intq_search_ratio(w, n, imp, qp, qp->clip > 0.0f ? qp->clip : 1.0f, NULL);
    return dsq_intq_group_params(w, n, qp, ratio, s, z);
}

/* One row's weight in processing order with dead columns zeroed; per-channel
 * and static-group params, which the reference takes before the first update. */
static void tile_prepare(const gptq_ctx *c, int64_t r, float *wg, float *grp, bool static_groups)
{
    const float *src = c->w + r * c->cols;
    dsq_intq *q = c->out;
    for (int64_t j = 0; j < c->cols; j++) wg[j] = c->dead[c->perm[j]] ? 0.0f : src[c->perm[j]];
    if (q->group_size == c->cols) {
        float s;
        int z;
        group_params(src, c->cols, c->imp_orig, c->qp, &s, &z); /* original row: before dead zeroing */
        q->scales[r] = s;
        q->zeros[r] = (uint8_t)z;
    } else if (static_groups) {
        const int gs = q->group_size;
        for (int64_t g = 0; g < q->n_groups; g++) {
            for (int i = 0; i < gs; i++) grp[i] = c->dead[g * gs + i] ? 0.0f : src[g * gs + i];
            float s;
            int z;
            group_params(grp, gs, c->imp_orig + g * gs, c->qp, &s, &z);
            q->scales[r * q->n_groups + g] = s;
            q->zeros[r * q->n_groups + g] = (uint8_t)z;
        }
    }
}

/* Quantizes columns [i1, i2) of one row; returns its share of the loss. */
static double row_block(const gptq_ctx *c, int64_t r, const float *wg, float *w1, float *err, int64_t i1, int64_t i2,
                        bool static_groups, float *cur_s, int *cur_z)
{
    dsq_intq *q = c->out;
    const int64_t n = c->cols, ng = q->n_groups;
    const int gs = q->group_size, maxq = dsq_intq_maxq(q->bits);
    const int64_t cnt = i2 - i1;
    double loss = 0.0;
    memcpy(w1, wg + i1, (size_t)cnt * sizeof(float));
    for (int64_t i = 0; i < cnt; i++) {
        const int64_t col = i1 + i;
        if (gs == n) {
            *cur_s = q->scales[r];
            *cur_z = q->zeros[r];
        } else if (static_groups) {
            int64_t g = c->perm[col] / gs;
            *cur_s = q->scales[r * ng + g];
            *cur_z = q->zeros[r * ng + g];
        } else if (col % gs == 0) {
            /* From the weight as the previous blocks left it (not this block's updates). */
            if (group_params(wg + col, gs, c->imp_proc + col, c->qp, cur_s, cur_z) != DSQ_OK) {
                *cur_s = NAN; /* updates blew up; dsq_intq_validate reports it after the run */
                *cur_z = 0;
            }
            q->scales[r * ng + col / gs] = *cur_s;
            q->zeros[r * ng + col / gs] = (uint8_t)*cur_z;
        }
        const int code = dsq_intq_code(w1[i], *cur_s, *cur_z, maxq);
        q->codes[r * n + c->perm[col]] = (uint8_t)code;
        const float dq = (float)(code - *cur_z) * *cur_s;
        const float d = c->U[col * n + col];
        const float diff = w1[i] - dq;
        loss += (double)diff * (double)diff / ((double)d * (double)d) / 2.0;
        err[i] = diff / d;
        dsq_gptq_feedback(i, cnt, w1, err, c->U + i1 * n + i1, n);
    }
    return loss;
}

static double run_tile(const gptq_ctx *c, int64_t r0, int64_t nr, float *buf, bool static_groups)
{
    const int64_t n = c->cols, bs = c->bs;
    float *wg = buf;            /* [nr x n] */
    float *w1 = wg + nr * n;    /* [bs] */
    float *err = w1 + bs;       /* [nr x bs] */
    float *grp = err + nr * bs; /* [group] */
    float cur_s[DSQ_GPTQ_ROW_TILE] = {0};
    int cur_z[DSQ_GPTQ_ROW_TILE] = {0};
    double loss = 0.0;
    for (int64_t t = 0; t < nr; t++) tile_prepare(c, r0 + t, wg + t * n, grp, static_groups);
    for (int64_t i1 = 0; i1 < n; i1 += bs) {
        const int64_t i2 = i1 + bs < n ? i1 + bs : n;
        for (int64_t t = 0; t < nr; t++)
            loss += row_block(c, r0 + t, wg + t * n, w1, err + t * bs, i1, i2, static_groups, &cur_s[t], &cur_z[t]);
        /* Lazy batch update W[:, i2:] -= Err * U[i1:i2, i2:], in column chunks so
         * the tile's chunk stays in L1 while the rows of U stream past. */
        for (int64_t j0 = i2; j0 < n; j0 += COL_CHUNK) {
            const int64_t j1 = j0 + COL_CHUNK < n ? j0 + COL_CHUNK : n;
            dsq_rowupd_f32(nr, i2 - i1, j1 - j0, wg + j0, n, err, bs, 1, c->U + i1 * n + j0, n, -1);
        }
    }
    return loss;
}

void dsq_gptq_feedback(int64_t i, int64_t cnt, float *w1, const float *err, const float *U0, int64_t n)
{
    const int64_t p0 = i / DSQ_GPTQ_PANEL * DSQ_GPTQ_PANEL;
    const int64_t p1 = p0 + DSQ_GPTQ_PANEL < cnt ? p0 + DSQ_GPTQ_PANEL : cnt;
    dsq_rowupd_sub_f32(1, p1 - i - 1, w1 + i + 1, err + i, 1, U0 + i * n + i + 1, 0);
    if (i == p1 - 1) dsq_rowupd_f32(1, p1 - p0, cnt - p1, w1 + p1, 0, err + p0, 0, 1, U0 + p0 * n + p1, n, -1);
}

/* Whether H differs from its transpose anywhere, compared in 64 x 64 tiles
 * so the column side stays in cache (row against column, one element at a
 * time, missed the cache on every read of a wide layer's H). */
static bool asymmetric(const double *H, int64_t n)
{
    for (int64_t i0 = 0; i0 < n; i0 += 64)
        for (int64_t j0 = i0; j0 < n; j0 += 64)
            for (int64_t i = i0; i < i0 + 64 && i < n; i++)
                for (int64_t j = j0 > i + 1 ? j0 : i + 1; j < j0 + 64 && j < n; j++)
                    if (H[i * n + j] != H[j * n + i]) return true;
    return false;
}

dsq_status dsq_gptq_check_inputs(const float *w, int64_t rows, int64_t cols, const double *H, const char *name)
{
    for (int64_t i = 0; i < rows * cols; i++)
        if (!isfinite(w[i]))
            return dsq_fail(DSQ_ERR_NUMERIC, "gptq: layer %s: weight row %lld, column %lld is not finite", name,
                            (long long)(i / cols), (long long)(i % cols));
    for (int64_t i = 0; i < cols * cols; i++)
        if (!isfinite(H[i]))
            return dsq_fail(DSQ_ERR_NUMERIC, "gptq: layer %s: Hessian entry (%lld, %lld) is not finite", name,
                            (long long)(i / cols), (long long)(i % cols));
    if (asymmetric(H, cols)) /* the first pair in row order, named */
        for (int64_t i = 0; i < cols; i++)
            for (int64_t j = i + 1; j < cols; j++)
                if (H[i * cols + j] != H[j * cols + i])
                    return dsq_fail(
                        DSQ_ERR_ARG, "gptq: layer %s: Hessian is not symmetric: (%lld, %lld) is %g, (%lld, %lld) %g",
                        name, (long long)i, (long long)j, H[i * cols + j], (long long)j, (long long)i, H[j * cols + i]);
    for (int64_t i = 0; i < cols; i++)
        if (H[i * cols + i] < 0.0)
            return dsq_fail(DSQ_ERR_NUMERIC, "gptq: layer %s: Hessian diagonal %lld is negative (%g)", name,
                            (long long)i, H[i * cols + i]);
    return DSQ_OK;
}

/* Act-order: processing order by descending diag, ties by column index. */
int dsq_gptq_key_cmp(const void *pa, const void *pb)
{
    const dsq_gptq_key *a = pa, *b = pb;
    if (a->d != b->d) return a->d > b->d ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

dsq_status dsq_gptq_run_tiles(int64_t rows, int64_t tile_rows, size_t tile_floats, dsq_gptq_tile_fn fn, const void *ctx,
                              double *loss_out)
{
    double loss = 0.0;
    int oom = 0;
#pragma omp parallel reduction(+ : loss) reduction(| : oom)
    {
        float *buf = malloc(tile_floats * sizeof(float));
        if (!buf) oom = 1;
#pragma omp for schedule(dynamic, 1)
        for (int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
            if (!buf) continue;
            int64_t nr = rows - r0 < tile_rows ? rows - r0 : tile_rows;
            loss += fn(ctx, r0, nr, buf);
        }
        free(buf);
    }
    if (oom) return dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory for row buffers");
    *loss_out = loss;
    return DSQ_OK;
}

static double tile_fn(const void *ctx, int64_t r0, int64_t nr, float *buf)
{
    const gptq_ctx *c = ctx;
    return run_tile(c, r0, nr, buf, c->static_groups);
}

dsq_status dsq_gptq_quantize(const float *w, int64_t rows, int64_t cols, const double *H, const dsq_gptq_opts *o,
                             dsq_intq *out, dsq_gptq_report *report)
{
    const char *name = o && o->name ? o->name : "?";
    if (!w || !H || !o || !out) return dsq_fail(DSQ_ERR_ARG, "gptq: layer %s: missing argument", name);
    memset(out, 0, sizeof *out);
    if (!(o->percdamp >= 0.0 && o->percdamp <= 1.0))
        return dsq_fail(DSQ_ERR_ARG, "gptq: layer %s: percdamp %g is not in [0, 1]", name, o->percdamp);
    if (o->block_size < 0) return dsq_fail(DSQ_ERR_ARG, "gptq: layer %s: block size %d", name, o->block_size);
    if (cols <= 0 || cols > INT32_MAX || rows <= 0)
        return dsq_fail(DSQ_ERR_ARG, "gptq: layer %s: weight [%lld x %lld] is out of range", name, (long long)rows,
                        (long long)cols);
    dsq_status st = dsq_intq_alloc(&o->q, rows, cols, out);
    if (st != DSQ_OK) return dsq_fail_context(st, "gptq: layer %s", name);
    st = dsq_gptq_check_inputs(w, rows, cols, H, name);
    if (st != DSQ_OK) {
        dsq_intq_free(out);
        return st;
    }
    dsq_gptq_report rep = {0};
    const bool per_channel = out->group_size == cols;
    const bool static_groups = o->static_groups && !per_channel;
    int64_t *perm = malloc((size_t)cols * sizeof *perm);
    uint8_t *dead = malloc((size_t)cols);
    dsq_gptq_key *diag = malloc((size_t)cols * sizeof *diag);
    float *U = (float *)dsq_gptq_alloc_square(cols, sizeof(float));
    float *imp = malloc(2 * (size_t)cols * sizeof *imp);
    if (!perm || !dead || !diag || !U || !imp) {
        st = dsq_fail(DSQ_ERR_NOMEM, "gptq: layer %s: out of memory", name);
        goto done;
    }
    for (int64_t i = 0; i < cols; i++) {
        double d = H[i * cols + i];
        dead[i] = d == 0.0;
        rep.n_dead += dead[i];
        diag[i] = (dsq_gptq_key){dead[i] ? 1.0 : d, i};
    }
    if (o->act_order) qsort(diag, (size_t)cols, sizeof *diag, dsq_gptq_key_cmp);
    for (int64_t i = 0; i < cols; i++) perm[i] = diag[i].i;
    for (int64_t i = 0; i < cols; i++) imp[i] = dead[i] ? 0.0f : (float)H[i * cols + i];
    for (int64_t i = 0; i < cols; i++) imp[cols + i] = imp[perm[i]];
    st = dsq_gptq_factor(H, perm, dead, cols, o, name, U, &rep);
    if (st != DSQ_OK) goto done;
    gptq_ctx ctx = {w,   rows,          cols, U,         perm, dead, &o->q, o->block_size ? o->block_size : 128,
                    out, static_groups, imp,  imp + cols};
    const size_t per_tile = (size_t)(DSQ_GPTQ_ROW_TILE * cols + ctx.bs + DSQ_GPTQ_ROW_TILE * ctx.bs + out->group_size);
    st = dsq_gptq_run_tiles(rows, DSQ_GPTQ_ROW_TILE, per_tile, tile_fn, &ctx, &rep.loss);
    if (st != DSQ_OK) goto done;
    st = dsq_intq_validate(out);
    if (st != DSQ_OK || !isfinite(rep.loss)) {
        st = dsq_fail_context(st != DSQ_OK ? st : dsq_fail(DSQ_ERR_NUMERIC, "loss is not finite"),
                              "gptq: layer %s: the updates did not stay finite", name);
        goto done;
    }
    if (o->act_order && !static_groups && !per_channel) {
        out->g_idx = malloc((size_t)cols * sizeof(int32_t));
        if (!out->g_idx) {
            st = dsq_fail(DSQ_ERR_NOMEM, "gptq: layer %s: out of memory", name);
            goto done;
        }
        bool trivial = true;
        for (int64_t pos = 0; pos < cols; pos++) {
            out->g_idx[perm[pos]] = (int32_t)(pos / out->group_size);
            trivial = trivial && perm[pos] / out->group_size == pos / out->group_size;
        }
        if (trivial) { /* the order kept every column in its own group */
            free(out->g_idx);
            out->g_idx = NULL;
        }
    }
    if (o->refit) { /* the factor is done with: its buffer holds the refit's damped H */
        st = dsq_gptq_refit_scales_in(w, H, rep.damp, out, name, &rep.n_refit, U);
        if (st != DSQ_OK) goto done;
    }
    if (report) *report = rep;
done:
    free(perm);
    free(dead);
    free(diag);
    free(U);
    free(imp);
    if (st != DSQ_OK) dsq_intq_free(out);
    return st;
}
