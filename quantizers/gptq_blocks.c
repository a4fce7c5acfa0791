/* GPTQ into GGUF blocks; the algorithm is described in gptq_blocks.h. */
#include "quantizers/gptq_blocks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/bigbuf.h"
#include "core/log.h"
#include "kernels/rowupd.h"
#include "quantizers/block_codes.h"
#include "quantizers/gptq_internal.h"
#include "quantizers/qtypes.h"
#include "quantizers/quants.h"

#define COL_CHUNK 64 /* columns kept in L1 during the batched updates */

typedef struct bctx {
    const float *w;
    int64_t rows, cols;
    const float *U;      /* processing order */
    const int64_t *perm; /* processing position -> column */
    const float *imp;    /* [cols] or NULL */
    const dsq_qtype *qt;
    int64_t qk, bs; /* block elements, lazy-batch width */
    size_t block_bytes, row_bytes;
    uint8_t *out;
    bool recode; /* elements moved by feedback are rounded again under the block's scales */
} bctx;

/* Quantizes the block that starts at processing position j0 from the
 * current weights seg, writes its bytes, and leaves its dequantized values in q. */
static uint8_t *quantize_block(const bctx *c, int64_t r, int64_t j0, const float *seg, float sigma2, float *q)
{
    const int64_t col0 = c->perm[j0]; /* a block's columns stay together and in order */
    uint8_t *dst = c->out + (size_t)r * c->row_bytes + (size_t)(col0 / c->qk) * c->block_bytes;
    const float *qw = c->imp ? c->imp + col0 : NULL;
    if (qw) {
        double sum = 0.0;
        for (int64_t i = 0; i < c->qk; i++) sum += qw[i];
        if (!(sum > 0.0)) qw = NULL; /* no column of it ever active: plain rounding */
    }
    if (qw && c->qt->quantize_row_sigma)
        c->qt->quantize_row_sigma(seg, dst, c->qk, qw, sigma2);
    else
        c->qt->quantize_row(seg, dst, c->qk, qw);
    c->qt->dequantize_row(dst, q, c->qk);
    return dst;
}

/* Columns [i1, i2) of one row, block by block; w1 gets the batch's weights,
 * err its scaled errors; sigma2: the original row's mean square, which the
 * legacy types' importance weights take from the whole row. Returns the
 * row's share of the loss. */
static double row_batch(const bctx *c, int64_t r, const float *wg, float *w1, float *err, float *q, int64_t i1,
                        int64_t i2, float sigma2)
{
    const int64_t n = c->cols, cnt = i2 - i1;
    double loss = 0.0;
    memcpy(w1, wg + i1, (size_t)cnt * sizeof(float));
    float w0[DSQ_BLOCK_CODES_MAX];
    dsq_block_grid g;
    for (int64_t b = 0; b < cnt; b += c->qk) {
        uint8_t *blk = quantize_block(c, r, i1 + b, w1 + b, sigma2, q);
        if (c->recode) {
            memcpy(w0, w1 + b, (size_t)c->qk * sizeof *w0);
            dsq_block_grid_get(c->qt->type, blk, &g);
        }
        for (int64_t k = 0; k < c->qk; k++) {
            const int64_t i = b + k, col = i1 + i;
            const float d = c->U[col * n + col];
            float v = q[k];
            if (c->recode && w1[i] != w0[k]) { /* feedback moved it: nearest value under the block's scales */
                int code = dsq_block_nearest(&g, (int)k, w1[i]);
                dsq_block_code_set(c->qt->type, blk, (int)k, code);
                v = dsq_block_value(&g, (int)k, code);
            }
            const float diff = w1[i] - v;
            loss += (double)diff * (double)diff / ((double)d * (double)d) / 2.0;
            err[i] = diff / d;
            dsq_gptq_feedback(i, cnt, w1, err, c->U + i1 * n + i1, n);
        }
    }
    return loss;
}

static double run_tile(const bctx *c, int64_t r0, int64_t nr, float *buf)
{
    const int64_t n = c->cols, bs = c->bs;
    float *wg = buf;         /* [nr x n], processing order */
    float *w1 = wg + nr * n; /* [bs] */
    float *err = w1 + bs;    /* [nr x bs] */
    float *q = err + nr * bs;
    double loss = 0.0;
    float sigma2[DSQ_GPTQ_ROW_TILE];
    for (int64_t t = 0; t < nr; t++) {
        for (int64_t j = 0; j < n; j++) wg[t * n + j] = c->w[(r0 + t) * n + c->perm[j]];
        sigma2[t] = dsq_quantize_row_sigma2(c->w + (r0 + t) * n, n);
    }
    for (int64_t i1 = 0; i1 < n; i1 += bs) {
        const int64_t i2 = i1 + bs < n ? i1 + bs : n;
        for (int64_t t = 0; t < nr; t++)
            loss += row_batch(c, r0 + t, wg + t * n, w1, err + t * bs, q, i1, i2, sigma2[t]);
        for (int64_t j0 = i2; j0 < n; j0 += COL_CHUNK) {
            const int64_t j1 = j0 + COL_CHUNK < n ? j0 + COL_CHUNK : n;
            dsq_rowupd_f32(nr, i2 - i1, j1 - j0, wg + j0, n, err, bs, 1, c->U + i1 * n + j0, n, -1);
        }
    }
    return loss;
}

static double tile_fn(const void *ctx, int64_t r0, int64_t nr, float *buf) { return run_tile(ctx, r0, nr, buf); }

/* Processing order: blocks in column order, or by descending summed diagonal. */
static dsq_status block_order(const double *H, int64_t cols, int64_t qk, bool act_order, int64_t *perm)
{
    const int64_t nb = cols / qk;
    dsq_gptq_key *k = malloc((size_t)nb * sizeof *k);
    if (!k) return dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory");
    for (int64_t b = 0; b < nb; b++) {
        double s = 0.0;
        for (int64_t i = b * qk; i < (b + 1) * qk; i++) s += H[i * cols + i];
        k[b] = (dsq_gptq_key){s, b};
    }
    if (act_order) qsort(k, (size_t)nb, sizeof *k, dsq_gptq_key_cmp);
    for (int64_t p = 0; p < nb; p++)
        for (int64_t i = 0; i < qk; i++) perm[p * qk + i] = k[p].i * qk + i;
    free(k);
    return DSQ_OK;
}

static dsq_status check_type(const dsq_gptq_blocks_opts *o, int64_t rows, int64_t cols, const char *name,
                             const dsq_qtype **qt, const dsq_type_info **ti)
{
    *qt = dsq_qtype_get(o->type);
    *ti = dsq_type_get((int)o->type);
    if (!*qt || !(*qt)->quantize_row || !(*qt)->dequantize_row || !*ti)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "gptq: tensor %s: type %s is not a GGUF block type we quantize to", name,
                        dsq_type_name(o->type));
    if (rows <= 0 || cols <= 0 || cols > INT32_MAX || cols % (*ti)->block_elems)
        return dsq_fail(DSQ_ERR_ARG, "gptq: tensor %s: [%lld x %lld] rows are not whole %s blocks of %u", name,
                        (long long)rows, (long long)cols, dsq_type_name(o->type), (*ti)->block_elems);
    if (!(o->percdamp >= 0.0 && o->percdamp <= 1.0))
        return dsq_fail(DSQ_ERR_ARG, "gptq: tensor %s: percdamp %g is not in [0, 1]", name, o->percdamp);
    return DSQ_OK;
}

dsq_status dsq_gptq_blocks_quantize(const float *w, int64_t rows, int64_t cols, const double *H,
                                    const dsq_gptq_blocks_opts *o, void *out, dsq_gptq_report *report)
{
    const char *name = o && o->name ? o->name : "?";
    if (!w || !H || !o || !out) return dsq_fail(DSQ_ERR_ARG, "gptq: tensor %s: missing argument", name);
    const dsq_qtype *qt;
    const dsq_type_info *ti;
    DSQ_TRY(check_type(o, rows, cols, name, &qt, &ti));
    DSQ_TRY(dsq_gptq_check_inputs(w, rows, cols, H, name));
    dsq_gptq_report rep = {0};
    dsq_status st = DSQ_OK;
    int64_t *perm = malloc((size_t)cols * sizeof *perm);
    uint8_t *dead = malloc((size_t)cols);
    float *imp = qt->uses_imatrix && !o->importance ? malloc((size_t)cols * sizeof *imp) : NULL;
    float *U = (float *)dsq_gptq_alloc_square(cols, sizeof(float));
    if (!perm || !dead || !U || (qt->uses_imatrix && !o->importance && !imp)) {
        st = dsq_fail(DSQ_ERR_NOMEM, "gptq: tensor %s: out of memory", name);
        goto done;
    }
    for (int64_t i = 0; i < cols; i++) {
        dead[i] = H[i * cols + i] == 0.0;
        rep.n_dead += dead[i];
        if (imp) imp[i] = (float)H[i * cols + i];
    }
    const int64_t qk = ti->block_elems;
    st = block_order(H, cols, qk, o->act_order, perm);
    dsq_gptq_opts fo = dsq_gptq_default_opts();
    fo.percdamp = o->percdamp;
    if (st == DSQ_OK) st = dsq_gptq_factor(H, perm, dead, cols, &fo, name, U, &rep);
    if (st != DSQ_OK) goto done;
    const int64_t bs = qk >= 128 ? qk : 128 / qk * qk;
    bctx c = {w,
              rows,
              cols,
              U,
              perm,
              qt->uses_imatrix ? (o->importance ? o->importance : imp) : NULL,
              qt,
              qk,
              bs,
              ti->block_bytes,
              (size_t)(cols / qk) * ti->block_bytes,
              out,
              dsq_block_codes_supported(o->type)};
    const size_t per_tile = (size_t)(DSQ_GPTQ_ROW_TILE * cols + bs + DSQ_GPTQ_ROW_TILE * bs + qk);
    st = dsq_gptq_run_tiles(rows, DSQ_GPTQ_ROW_TILE, per_tile, tile_fn, &c, &rep.loss);
    if (st == DSQ_OK && !isfinite(rep.loss))
        st = dsq_fail(DSQ_ERR_NUMERIC, "gptq: tensor %s: the updates did not stay finite (loss %g)", name, rep.loss);
    if (st == DSQ_OK && report) *report = rep;
done:
    free(perm);
    free(dead);
    free(imp);
    free(U);
    return st;
}

dsq_status dsq_gptq_blocks_error(const float *w, const void *q, dsq_type t, int64_t rows, int64_t cols, const double *H,
                                 double *err)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    if (!ti || !ti->quantized || cols % ti->block_elems)
        return dsq_fail(DSQ_ERR_ARG, "gptq: error of a %s tensor of %lld columns", dsq_type_name(t), (long long)cols);
    const size_t row_bytes = (size_t)(cols / ti->block_elems) * ti->block_bytes;
    double *d = malloc((size_t)cols * sizeof *d);
    float *qr = malloc((size_t)cols * sizeof *qr);
    dsq_status st = d && qr ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory");
    double sum = 0.0;
    for (int64_t r = 0; r < rows && st == DSQ_OK; r++) {
        st = dsq_dequantize(t, (const uint8_t *)q + (size_t)r * row_bytes, qr, 1, cols);
        for (int64_t j = 0; j < cols && st == DSQ_OK; j++) d[j] = (double)w[r * cols + j] - (double)qr[j];
        for (int64_t i = 0; i < cols && st == DSQ_OK; i++) {
            double hd = 0.0;
            for (int64_t j = 0; j < cols; j++) hd += H[i * cols + j] * d[j];
            sum += d[i] * hd;
        }
    }
    free(d);
    free(qr);
    if (st == DSQ_OK) *err = sum / 2.0;
    return st;
}
