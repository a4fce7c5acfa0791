/* 8-bit weight schemes (INT8, FP8 E4M3): the rules and their sources are in w8.h. */
#include "quantizers/w8.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

dsq_w8_scheme dsq_w8_scheme_w8a8(bool static_act)
{
    dsq_w8_scheme s = {DSQ_W8_INT8, DSQ_W8_W_CHANNEL, 0, 0, static_act ? DSQ_W8_ACT_TENSOR : DSQ_W8_ACT_TOKEN, 0};
    return s;
}

dsq_w8_scheme dsq_w8_scheme_fp8_dynamic(void)
{
    dsq_w8_scheme s = {DSQ_W8_FP8, DSQ_W8_W_CHANNEL, 0, 0, DSQ_W8_ACT_TOKEN, 0};
    return s;
}

dsq_w8_scheme dsq_w8_scheme_fp8_static(void)
{
    dsq_w8_scheme s = {DSQ_W8_FP8, DSQ_W8_W_TENSOR, 0, 0, DSQ_W8_ACT_TENSOR, 0};
    return s;
}

dsq_w8_scheme dsq_w8_scheme_fp8_block(void)
{
    dsq_w8_scheme s = {DSQ_W8_FP8, DSQ_W8_W_BLOCK, 128, 128, DSQ_W8_ACT_GROUP, 128};
    return s;
}

dsq_w8_scheme dsq_w8_scheme_fp8_weight_only(void)
{
    dsq_w8_scheme s = {DSQ_W8_FP8, DSQ_W8_W_CHANNEL, 0, 0, DSQ_W8_ACT_NONE, 0};
    return s;
}

const char *dsq_w8_kind_name(dsq_w8_kind k) { return k == DSQ_W8_INT8 ? "int8" : k == DSQ_W8_FP8 ? "fp8" : "?"; }

dsq_status dsq_w8_scheme_check(const dsq_w8_scheme *s)
{
    if (!s) return dsq_fail(DSQ_ERR_ARG, "w8: no scheme");
    if (s->kind != DSQ_W8_INT8 && s->kind != DSQ_W8_FP8)
        return dsq_fail(DSQ_ERR_ARG, "w8: unknown number kind %d", (int)s->kind);
    if (s->wgran < DSQ_W8_W_TENSOR || s->wgran > DSQ_W8_W_BLOCK)
        return dsq_fail(DSQ_ERR_ARG, "w8: unknown weight granularity %d", (int)s->wgran);
    if (s->wgran == DSQ_W8_W_BLOCK && (s->block_rows <= 0 || s->block_cols <= 0 || s->block_rows > (1 << 20) ||
                                       s->block_cols > (1 << 20)))
        return dsq_fail(DSQ_ERR_ARG, "w8: weight block %dx%d is not a positive size", s->block_rows, s->block_cols);
    if (s->act < DSQ_W8_ACT_NONE || s->act > DSQ_W8_ACT_GROUP)
        return dsq_fail(DSQ_ERR_ARG, "w8: unknown activation scheme %d", (int)s->act);
    if (s->act == DSQ_W8_ACT_GROUP && (s->act_group <= 0 || s->act_group > (1 << 20)))
        return dsq_fail(DSQ_ERR_ARG, "w8: activation group %d is not a positive size", s->act_group);
    return DSQ_OK;
}

void dsq_w8_scheme_describe(const dsq_w8_scheme *s, char *buf, int cap)
{
    static const char *const acts[] = {"weight-only", "act per-token dynamic", "act per-tensor static",
                                       "act per-token-group dynamic"};
    char w[48];
    if (s->wgran == DSQ_W8_W_BLOCK)
        snprintf(w, sizeof w, "block %dx%d", s->block_rows, s->block_cols);
    else
        snprintf(w, sizeof w, "%s", s->wgran == DSQ_W8_W_TENSOR ? "per-tensor" : "per-channel");
    const char *a = s->act >= DSQ_W8_ACT_NONE && s->act <= DSQ_W8_ACT_GROUP ? acts[s->act] : "?";
    if (s->act == DSQ_W8_ACT_GROUP)
        snprintf(buf, (size_t)cap, "%s %s, %s %d", dsq_w8_kind_name(s->kind), w, a, s->act_group);
    else
        snprintf(buf, (size_t)cap, "%s %s, %s", dsq_w8_kind_name(s->kind), w, a);
}

void dsq_w8_scale_grid(const dsq_w8_scheme *s, int64_t rows, int64_t cols, int64_t *srows, int64_t *scols)
{
    switch (s->wgran) {
    case DSQ_W8_W_TENSOR: *srows = 1, *scols = 1; break;
    case DSQ_W8_W_CHANNEL: *srows = rows, *scols = 1; break;
    default:
        *srows = (rows + s->block_rows - 1) / s->block_rows;
        *scols = (cols + s->block_cols - 1) / s->block_cols;
    }
}

void dsq_w8q_free(dsq_w8q *q)
{
    if (!q) return;
    if (!q->codes_view) free(q->codes);
    free(q->scales);
    memset(q, 0, sizeof *q);
}

dsq_status dsq_w8q_alloc(const dsq_w8_scheme *s, int64_t rows, int64_t cols, dsq_w8q *out)
{
    memset(out, 0, sizeof *out);
    DSQ_TRY(dsq_w8_scheme_check(s));
    if (rows <= 0 || cols <= 0 || rows > ((int64_t)1 << 31) || cols > ((int64_t)1 << 31) ||
        rows > (int64_t)(SIZE_MAX / 2) / cols)
        return dsq_fail(DSQ_ERR_ARG, "w8: shape %lld x %lld is out of range", (long long)rows, (long long)cols);
    out->rows = rows, out->cols = cols, out->sch = *s;
    dsq_w8_scale_grid(s, rows, cols, &out->n_scale_rows, &out->n_scale_cols);
    out->codes = calloc((size_t)(rows * cols), 1);
    out->scales = calloc((size_t)(out->n_scale_rows * out->n_scale_cols), sizeof *out->scales);
    if (!out->codes || !out->scales) {
        dsq_w8q_free(out);
        return dsq_fail(DSQ_ERR_NOMEM, "w8: out of memory for a %lld x %lld weight", (long long)rows, (long long)cols);
    }
    return DSQ_OK;
}

float dsq_w8_code_value(dsq_w8_kind k, uint8_t code)
{
    return k == DSQ_W8_INT8 ? (float)(int8_t)code : dsq_e4m3_to_f32(code);
}

uint8_t dsq_w8_encode(dsq_w8_kind k, float v, float scale)
{
    float x = v / scale;
    if (k == DSQ_W8_INT8) {
        float r = rintf(x);
        if (!(r >= -128.0f)) r = -128.0f; /* also NaN; inputs are checked first */
        if (r > 127.0f) r = 127.0f;
        return (uint8_t)(int8_t)r;
    }
    if (!(x >= -DSQ_W8_FP8_MAX)) x = -DSQ_W8_FP8_MAX;
    if (x > DSQ_W8_FP8_MAX) x = DSQ_W8_FP8_MAX;
    return dsq_f32_to_e4m3(x);
}

static float qmax_of(dsq_w8_kind k) { return k == DSQ_W8_INT8 ? 127.5f : DSQ_W8_FP8_MAX; }

static float weight_scale(dsq_w8_kind k, float amax)
{
    float s = amax / qmax_of(k);
    return s == 0.0f ? FLT_EPSILON : s;
}

float dsq_w8_static_scale(dsq_w8_kind k, float amax) { return weight_scale(k, amax); }

/* Tile (tr, tc) of the scale grid: rows [r0, r1) x cols [c0, c1). */
static void tile_bounds(const dsq_w8q *q, int64_t tr, int64_t tc, int64_t *r0, int64_t *r1, int64_t *c0, int64_t *c1)
{
    switch (q->sch.wgran) {
    case DSQ_W8_W_TENSOR: *r0 = 0, *r1 = q->rows, *c0 = 0, *c1 = q->cols; break;
    case DSQ_W8_W_CHANNEL: *r0 = tr, *r1 = tr + 1, *c0 = 0, *c1 = q->cols; break;
    default:
        *r0 = tr * q->sch.block_rows, *c0 = tc * q->sch.block_cols;
        *r1 = *r0 + q->sch.block_rows < q->rows ? *r0 + q->sch.block_rows : q->rows;
        *c1 = *c0 + q->sch.block_cols < q->cols ? *c0 + q->sch.block_cols : q->cols;
    }
}

static dsq_status quantize_tile(const float *w, dsq_w8q *q, int64_t tr, int64_t tc, const char *name)
{
    int64_t r0, r1, c0, c1;
    tile_bounds(q, tr, tc, &r0, &r1, &c0, &c1);
    float amax = 0.0f;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++) {
            float v = w[r * q->cols + c];
            if (!isfinite(v))
                return dsq_fail(DSQ_ERR_NUMERIC, "%s: weight [%lld, %lld] is %s", name ? name : "w8",
                                (long long)r, (long long)c, isnan(v) ? "NaN" : "Inf");
            if (fabsf(v) > amax) amax = fabsf(v);
        }
    float s = weight_scale(q->sch.kind, amax);
    q->scales[tr * q->n_scale_cols + tc] = s;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = c0; c < c1; c++) q->codes[r * q->cols + c] = dsq_w8_encode(q->sch.kind, w[r * q->cols + c], s);
    return DSQ_OK;
}

dsq_status dsq_w8q_quantize(const float *w, int64_t rows, int64_t cols, const dsq_w8_scheme *s, const char *name,
                            dsq_w8q *out)
{
    DSQ_TRY(dsq_w8q_alloc(s, rows, cols, out));
    for (int64_t tr = 0; tr < out->n_scale_rows; tr++)
        for (int64_t tc = 0; tc < out->n_scale_cols; tc++) {
            dsq_status st = quantize_tile(w, out, tr, tc, name);
            if (st != DSQ_OK) {
                dsq_w8q_free(out);
                return st;
            }
        }
    return DSQ_OK;
}

dsq_status dsq_w8q_dequantize(const dsq_w8q *q, float *w)
{
    if (!q || !q->codes || !q->scales || !w) return dsq_fail(DSQ_ERR_ARG, "w8: nothing to dequantize");
    float lut[256];
    for (int i = 0; i < 256; i++) lut[i] = dsq_w8_code_value(q->sch.kind, (uint8_t)i);
    for (int64_t r = 0; r < q->rows; r++)
        for (int64_t c = 0; c < q->cols; c++) w[r * q->cols + c] = lut[q->codes[r * q->cols + c]] * dsq_w8q_scale_at(q, r, c);
    return DSQ_OK;
}

dsq_status dsq_w8q_validate(const dsq_w8q *q, const char *name)
{
    const char *n = name ? name : "w8";
    if (!q || !q->codes || !q->scales) return dsq_fail(DSQ_ERR_ARG, "%s: no quantized weight", n);
    DSQ_TRY_CTX(dsq_w8_scheme_check(&q->sch), "%s", n);
    int64_t sr, sc;
    dsq_w8_scale_grid(&q->sch, q->rows, q->cols, &sr, &sc);
    if (sr != q->n_scale_rows || sc != q->n_scale_cols)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: scale grid %lld x %lld, expected %lld x %lld for a %lld x %lld weight", n,
                        (long long)q->n_scale_rows, (long long)q->n_scale_cols, (long long)sr, (long long)sc,
                        (long long)q->rows, (long long)q->cols);
    for (int64_t i = 0; i < sr * sc; i++)
        if (!(isfinite(q->scales[i]) && q->scales[i] > 0.0f))
            return dsq_fail(DSQ_ERR_NUMERIC, "%s: scale %lld is %g (must be finite and positive)", n, (long long)i,
                            (double)q->scales[i]);
    if (q->sch.kind == DSQ_W8_FP8)
        for (int64_t i = 0; i < q->rows * q->cols; i++)
            if ((q->codes[i] & 0x7fu) == 0x7fu)
                return dsq_fail(DSQ_ERR_NUMERIC, "%s: weight [%lld, %lld] is an FP8 NaN", n,
                                (long long)(i / q->cols), (long long)(i % q->cols));
    if (q->sch.act == DSQ_W8_ACT_TENSOR && !(isfinite(q->act_scale) && q->act_scale > 0.0f))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: static activation scale %g (must be finite and positive)", n,
                        (double)q->act_scale);
    return DSQ_OK;
}

float dsq_w8_act_quantize(dsq_w8_kind k, const float *x, int64_t n, float scale_in, uint8_t *codes)
{
    float s = scale_in;
    if (!(s > 0.0f)) {
        float amax = 0.0f;
        for (int64_t i = 0; i < n; i++)
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
        s = amax / (k == DSQ_W8_INT8 ? (float)DSQ_W8_INT8_QMAX : DSQ_W8_FP8_MAX);
        if (s == 0.0f) s = 1.0f;
    }
    for (int64_t i = 0; i < n; i++) codes[i] = dsq_w8_encode(k, x[i], s);
    return s;
}
