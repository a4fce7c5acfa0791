/* 8-bit weight storage of a linear (runtime/linear.h): INT8 and FP8 E4M3
 * codes with per-tensor, per-channel or block scales (quantizers/w8.h), and
 * the scheme's activation numerics.
 *
 *  - INT8 weights with per-tensor or per-channel scales and TOKEN or TENSOR
 *    activations (SmoothQuant W8A8): x is quantized per token to int8
 *    (dsq_w8_act_quantize), multiplied in int32 (kernels/gemm_i8.h) and
 *    scaled as vLLM's CUTLASS epilogue does (ScaledEpilogue in
 *    csrc/cutlass_extensions/epilogue/scaled_mm_epilogues_c3x.hpp):
 *    y = s_x * (s_w[row] * float(acc)) + b. The storage's own forward
 *    (vt->forward) serves every path, so gemm and gemv agree bit for bit.
 *  - everything else (FP8, INT8 with block scales or group activations):
 *    the weights are the codes' values times their scales (the table of
 *    kernels/fp8.h for FP8), exactly dsq_w8q_dequantize's numbers, and x is
 *    first replaced by its quantized value q * s (vt->input_f32) where the
 *    scheme quantizes it: per token, per tensor (static), or per token and
 *    act_group columns; weight-only schemes leave x as it is. The generic F32,
 *    BF16 and decode paths then run on those.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/fp8.h"
#include "kernels/gemm_i8.h"
#include "runtime/linear.h"

typedef struct w8_store {
    dsq_w8q q;        /* owned copy of codes and scales */
    float lut[256];   /* value of each code */
    bool int_path;    /* the int32 product applies (see the top comment) */
    dsq_gemm_i8_w iw; /* int_path only: the codes prepared for kernels/gemm_i8 */
} w8_store;

static const w8_store *store_of(const dsq_linear *W) { return W->priv; }

/* Scale of row r for the columns [c, end), where end is the next block edge. */
static float seg_scale(const dsq_w8q *q, int64_t r, int64_t c, int64_t *end)
{
    *end = q->sch.wgran == DSQ_W8_W_BLOCK ? (c / q->sch.block_cols + 1) * q->sch.block_cols : q->cols;
    if (*end > q->cols) *end = q->cols;
    return dsq_w8q_scale_at(q, r, c);
}

/* ---- weights as F32 (batched path, calibration copies) ---- */

static void w8_rows_f32(const dsq_linear *W, int64_t r0, int64_t nr, float *dst)
{
    const w8_store *s = store_of(W);
    for (int64_t r = r0; r < r0 + nr; r++) {
        const uint8_t *row = s->q.codes + r * s->q.cols;
        float *d = dst + (r - r0) * W->in;
        for (int64_t c = 0, e; c < W->in; c = e) {
            float sc = seg_scale(&s->q, r, c, &e);
            for (int64_t i = c; i < e; i++) d[i] = s->lut[row[i]] * sc; /* as dsq_w8q_dequantize */
        }
    }
}

/* ---- decode path of the float schemes: row . x, one scale per segment ---- */

static size_t w8_act_bytes(const dsq_linear *W) { return 0; }

static void w8_dot_rows(const dsq_linear *W, const float *x, const void *act, int64_t r0, int64_t r1, float *y)
{
    const w8_store *s = store_of(W);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = s->q.codes + r * s->q.cols;
        float acc = 0.0f;
        for (int64_t c = 0, e; c < W->in; c = e) {
            float sc = seg_scale(&s->q, r, c, &e);
            float p0 = 0.0f, p1 = 0.0f, p2 = 0.0f, p3 = 0.0f; /* four chains: no serial add latency */
            int64_t i = c;
            for (; i + 4 <= e; i += 4) {
                p0 += s->lut[row[i]] * x[i];
                p1 += s->lut[row[i + 1]] * x[i + 1];
                p2 += s->lut[row[i + 2]] * x[i + 2];
                p3 += s->lut[row[i + 3]] * x[i + 3];
            }
            for (; i < e; i++) p0 += s->lut[row[i]] * x[i];
            acc += ((p0 + p1) + (p2 + p3)) * sc;
        }
        y[r - r0] = acc;
    }
}

/* ---- activations ---- */

/* Columns that share one activation scale. */
static int64_t act_span(const dsq_w8q *q) { return q->sch.act == DSQ_W8_ACT_GROUP ? q->sch.act_group : q->cols; }

/* xq = the quantized value of x (codes times their scale), token by token. */
static dsq_status w8_input_f32(const dsq_linear *W, const float *x, float *xq, int n_tok)
{
    const w8_store *s = store_of(W);
    int64_t in = W->in, span = act_span(&s->q);
    float scale_in = s->q.sch.act == DSQ_W8_ACT_TENSOR ? s->q.act_scale : 0.0f;
    uint8_t *codes = malloc((size_t)n_tok * (size_t)in);
    if (!codes) return dsq_fail(DSQ_ERR_NOMEM, "w8 linear: out of memory quantizing %d input rows", n_tok);
#pragma omp parallel for schedule(static) num_threads(n_tok < dsq_cpu_threads() ? n_tok : dsq_cpu_threads())
    for (int t = 0; t < n_tok; t++)
        for (int64_t c = 0; c < in; c += span) {
            int64_t n = in - c < span ? in - c : span;
            size_t o = (size_t)t * (size_t)in + (size_t)c;
            float sx = dsq_w8_act_quantize(s->q.sch.kind, x + o, n, scale_in, codes + o);
            for (int64_t i = 0; i < n; i++) xq[o + i] = s->lut[codes[o + i]] * sx;
        }
    free(codes);
    return DSQ_OK;
}

/* ---- the int32 product ---- */

#define INT_TOKEN_BLOCK 256 /* tokens per int32 accumulator block: bounded scratch */

static void int_block(const dsq_linear *W, const float *x, float *y, int nt, int8_t *a, float *sx, int32_t *acc)
{
    const w8_store *s = store_of(W);
    int64_t in = W->in, out = W->out;
    float scale_in = s->q.sch.act == DSQ_W8_ACT_TENSOR ? s->q.act_scale : 0.0f;
    int threads = dsq_cpu_threads();
#pragma omp parallel for schedule(static) num_threads(nt < threads ? nt : threads)
    for (int t = 0; t < nt; t++)
        sx[t] = dsq_w8_act_quantize(DSQ_W8_INT8, x + (size_t)t * (size_t)in, in, scale_in,
                                    (uint8_t *)a + (size_t)t * (size_t)in);
    dsq_gemm_i8_parallel(&s->iw, nt, a, in, acc, out);
    bool chan = s->q.sch.wgran == DSQ_W8_W_CHANNEL;
#pragma omp parallel for schedule(static) num_threads(nt < threads ? nt : threads)
    for (int t = 0; t < nt; t++)
        for (int64_t r = 0; r < out; r++) {
            float sw = chan ? s->q.scales[r] : s->q.scales[0];
            float v = sx[t] * (sw * (float)acc[(size_t)t * (size_t)out + r]);
            y[(size_t)t * (size_t)out + r] = W->bias ? v + W->bias[r] : v;
        }
}

static dsq_status w8_int_forward(const dsq_linear *W, const float *x, float *y, int n_tok)
{
    int nb = n_tok < INT_TOKEN_BLOCK ? n_tok : INT_TOKEN_BLOCK;
    int8_t *a = malloc((size_t)nb * (size_t)W->in);
    float *sx = malloc((size_t)nb * sizeof *sx);
    int32_t *acc = malloc((size_t)nb * (size_t)W->out * sizeof *acc);
    if (!a || !sx || !acc) {
        free(a), free(sx), free(acc);
        return dsq_fail(DSQ_ERR_NOMEM, "w8 linear %lld x %lld: out of memory for %d int8 input rows", (long long)W->out,
                        (long long)W->in, n_tok);
    }
    for (int t0 = 0; t0 < n_tok; t0 += nb) {
        int nt = n_tok - t0 < nb ? n_tok - t0 : nb;
        int_block(W, x + (size_t)t0 * (size_t)W->in, y + (size_t)t0 * (size_t)W->out, nt, a, sx, acc);
    }
    free(a), free(sx), free(acc);
    return DSQ_OK;
}

/* ---- construction ---- */

static void w8_release(dsq_linear *W)
{
    w8_store *s = W->priv;
    if (!s) return;
    dsq_gemm_i8_w_free(&s->iw);
    dsq_w8q_free(&s->q);
    free(s);
    W->priv = NULL;
}

/* INT8 product; FP8 or INT8 with quantized float inputs; weight-only. */
static const dsq_linear_vtable g_w8_int = {"w8", w8_rows_f32, NULL, NULL, NULL, w8_release, NULL, w8_int_forward};
static const dsq_linear_vtable g_w8_actq = {"w8",        w8_rows_f32, w8_act_bytes, NULL,
                                            w8_dot_rows, w8_release,  w8_input_f32, NULL};
static const dsq_linear_vtable g_w8_wonly = {"w8",        w8_rows_f32, w8_act_bytes, NULL,
                                             w8_dot_rows, w8_release,  NULL,         NULL};

static dsq_status copy_q(w8_store *s, const dsq_w8q *q)
{
    DSQ_TRY(dsq_w8q_alloc(&q->sch, q->rows, q->cols, &s->q));
    memcpy(s->q.codes, q->codes, (size_t)(q->rows * q->cols));
    memcpy(s->q.scales, q->scales, (size_t)(q->n_scale_rows * q->n_scale_cols) * sizeof *q->scales);
    s->q.act_scale = q->act_scale;
    if (q->sch.kind == DSQ_W8_FP8)
        memcpy(s->lut, dsq_fp8_e4m3_table(), sizeof s->lut);
    else
        for (int i = 0; i < 256; i++) s->lut[i] = (float)(int8_t)i;
    return DSQ_OK;
}

static bool takes_int_path(const dsq_w8_scheme *sch)
{
    return sch->kind == DSQ_W8_INT8 && sch->wgran != DSQ_W8_W_BLOCK &&
           (sch->act == DSQ_W8_ACT_TOKEN || sch->act == DSQ_W8_ACT_TENSOR);
}

dsq_status dsq_linear_init_w8(dsq_linear *W, const dsq_w8q *q)
{
    memset(W, 0, sizeof *W);
    DSQ_TRY(dsq_w8q_validate(q, "w8 linear"));
    w8_store *s = calloc(1, sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "w8 linear: out of memory");
    W->kind = DSQ_LINEAR_W8;
    W->priv = s;
    W->in = q->cols;
    W->out = q->rows;
    W->type = q->sch.kind == DSQ_W8_INT8 ? DSQ_TYPE_I8 : DSQ_TYPE_F8_E4M3;
    W->row_bytes = (size_t)q->cols;
    s->int_path = takes_int_path(&q->sch);
    W->vt = s->int_path ? &g_w8_int : q->sch.act == DSQ_W8_ACT_NONE ? &g_w8_wonly : &g_w8_actq;
    dsq_status st = copy_q(s, q);
    if (st == DSQ_OK && s->int_path)
        st = dsq_gemm_i8_prepare(&s->iw, (const int8_t *)s->q.codes, q->rows, q->cols, q->cols);
    if (st != DSQ_OK) {
        dsq_linear_release(W);
        return dsq_fail_context(st, "w8 linear %lld x %lld", (long long)q->rows, (long long)q->cols);
    }
    W->data = s->q.codes;
    return DSQ_OK;
}

bool dsq_linear_is_w8(const dsq_linear *W)
{
    return W && (W->vt == &g_w8_int || W->vt == &g_w8_actq || W->vt == &g_w8_wonly);
}

const dsq_w8_scheme *dsq_linear_w8_scheme(const dsq_linear *W)
{
    return dsq_linear_is_w8(W) ? &store_of(W)->q.sch : NULL;
}
