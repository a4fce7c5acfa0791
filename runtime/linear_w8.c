/* 8-bit weight storage of a linear (runtime/linear.h): INT8 and FP8 E4M3
 * codes with per-tensor, per-channel or block scales (quantizers/w8.h), and
 * the scheme's activation numerics.
 *
 *  - INT8 weights with per-tensor or per-channel scales and TOKEN or TENSOR
 *    activations (SmoothQuant W8A8): x is quantized per token to int8
 *    (dsq_w8_act_quantize, or its AVX512 twin with the same bytes), multiplied in int32 (kernels/gemm_i8.h) and
 *    scaled as vLLM's CUTLASS epilogue does (ScaledEpilogue in
 *    csrc/cutlass_extensions/epilogue/scaled_mm_epilogues_c3x.hpp):
 *    y = s_x * (s_w[row] * float(acc)) (+ b in the same rounding: CUTLASS's
 *    ScaledEpilogueBias ends in a multiply_add, fmaf here). The storage's own forward
 *    (vt->forward) serves every path, so gemm and gemv agree bit for bit.
 *  - FP8 weights with per-tensor or per-channel scales and TOKEN or TENSOR
 *    activations: the same on FP8 codes (exact products, F32 sums; see the
 *    FP8 section below).
 *  - everything else (FP8 block scales, INT8 with block scales, group
 *    activations, weight-only):
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
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_i8.h"
#include "kernels/vec.h"
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
            if (s->q.sch.kind == DSQ_W8_FP8)
                dsq_fp8_decode_row(row + c, e - c, sc, d + c); /* the table's values: bit-identical */
            else
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
            float d = s->q.sch.kind == DSQ_W8_FP8 ? dsq_fp8_dot(row + c, x + c, e - c)
                                                  : dsq_gemm_i8_dot_f32((const int8_t *)row + c, x + c, e - c);
            acc += d * sc;
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
            float sx = 0.0f;
            bool fast = s->q.sch.kind == DSQ_W8_FP8
                            ? dsq_fp8_quantize_act(x + o, n, scale_in, codes + o, &sx)
                            : dsq_gemm_i8_quantize_act(x + o, n, scale_in, (int8_t *)codes + o, &sx);
            if (!fast) sx = dsq_w8_act_quantize(s->q.sch.kind, x + o, n, scale_in, codes + o);
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
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (size_t)t * (size_t)in;
        int8_t *at = a + (size_t)t * (size_t)in;
        if (!dsq_gemm_i8_quantize_act(xt, in, scale_in, at, &sx[t]))
            sx[t] = dsq_w8_act_quantize(DSQ_W8_INT8, xt, in, scale_in, (uint8_t *)at);
    }
    dsq_gemm_i8_parallel(&s->iw, nt, a, in, acc, out);
    bool chan = s->q.sch.wgran == DSQ_W8_W_CHANNEL;
#pragma omp parallel for schedule(static) num_threads(nt < threads ? nt : threads)
    for (int t = 0; t < nt; t++)
        for (int64_t r = 0; r < out; r++) {
            float sw = chan ? s->q.scales[r] : s->q.scales[0], v = sw * (float)acc[(size_t)t * (size_t)out + r];
            y[(size_t)t * (size_t)out + r] = W->bias ? fmaf(sx[t], v, W->bias[r]) : sx[t] * v;
        }
}

static dsq_status w8_int_forward(const dsq_linear *W, const float *x, float *y, int n_tok, bool batched)
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

/* ---- FP8 x FP8 with exact products ----
 * FP8 weights with a per-tensor or per-channel scale and per-token or static
 * activations: x becomes FP8 codes and their scale per token, and the product
 * runs on the codes' values, which are exact in BF16 and whose products are
 * exact in F32, with F32 sums, before the epilogue s_x * (s_w * acc): vLLM's
 * FP8 GEMM (CUTLASS, the same ScaledEpilogue) computes it that way. The
 * batched path uses the BF16 GEMM (vdpbf16ps, exact here) where the CPU has
 * it, else the F32 one; the decode path dots the codes row by row. */

#define FP8_TILE_BYTES (1 << 20) /* the F32 tile of decoded rows stays in L2 */
#define FP8_TOKEN_BLOCK 1024

typedef struct fp8_act {
    float *xv; /* [n_tok x in] code values */
    float *sx; /* [n_tok] */
} fp8_act;

static dsq_status fp8_quantize_input(const dsq_linear *W, const float *x, int n_tok, fp8_act *a)
{
    const w8_store *s = store_of(W);
    int64_t in = W->in;
    float scale_in = s->q.sch.act == DSQ_W8_ACT_TENSOR ? s->q.act_scale : 0.0f;
    a->xv = malloc((size_t)n_tok * (size_t)in * sizeof *a->xv);
    a->sx = malloc((size_t)n_tok * sizeof *a->sx);
    uint8_t *codes = malloc((size_t)n_tok * (size_t)in);
    if (!a->xv || !a->sx || !codes) {
        free(a->xv), free(a->sx), free(codes);
        return dsq_fail(DSQ_ERR_NOMEM, "w8 linear: out of memory quantizing %d input rows", n_tok);
    }
    int threads = dsq_cpu_threads();
#pragma omp parallel for schedule(static) num_threads(n_tok < threads ? n_tok : threads)
    for (int t = 0; t < n_tok; t++) {
        size_t o = (size_t)t * (size_t)in;
        if (!dsq_fp8_quantize_act(x + o, in, scale_in, codes + o, &a->sx[t]))
            a->sx[t] = dsq_w8_act_quantize(DSQ_W8_FP8, x + o, in, scale_in, codes + o);
        dsq_fp8_decode_row(codes + o, in, 1.0f, a->xv + o);
    }
    free(codes);
    return DSQ_OK;
}

static void fp8_epilogue(const dsq_linear *W, const float *sx, int n_tok, float *y)
{
    const w8_store *s = store_of(W);
    bool chan = s->q.sch.wgran == DSQ_W8_W_CHANNEL;
    int threads = dsq_cpu_threads();
#pragma omp parallel for schedule(static) num_threads(n_tok < threads ? n_tok : threads)
    for (int t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < W->out; r++) {
            float *v = &y[(size_t)t * (size_t)W->out + r], p = (chan ? s->q.scales[r] : s->q.scales[0]) * *v;
            *v = W->bias ? fmaf(sx[t], p, W->bias[r]) : sx[t] * p;
        }
}

/* y[t][r] = sum_c xv[t][c] * value(code[r][c]), over tiles of rows. */
static dsq_status fp8_batched(const dsq_linear *W, const float *xv, int n_tok, float *y)
{
    const w8_store *s = store_of(W);
    int64_t in = W->in, out = W->out;
    bool bf16 = dsq_gemm_bf16_preferred();
    int64_t nc = 256;
    while (nc > 32 && nc * in * (int64_t)sizeof(float) > FP8_TILE_BYTES) nc /= 2;
    int threads = dsq_cpu_threads();
    while (nc > 32 && (out + nc - 1) / nc < 2 * threads) nc /= 2;
    int64_t ntiles = (out + nc - 1) / nc;
    if (ntiles < threads) threads = (int)ntiles;
    int64_t lda = bf16 ? dsq_gemm_bf16_lda(in) : in;
    size_t tile_b = ((size_t)nc * (size_t)in * sizeof(float) + 63) & ~(size_t)63;
    size_t gemm_b = bf16 ? dsq_gemm_bf16_scratch_bytes(nc, in) : dsq_gemm_scratch_floats(nc, in) * sizeof(float);
    size_t per = tile_b + ((gemm_b + 63) & ~(size_t)63);
    uint16_t *xb = bf16 ? malloc((size_t)n_tok * (size_t)lda * sizeof *xb) : NULL;
    char *scratch = aligned_alloc(64, per * (size_t)threads);
    if (!scratch || (bf16 && !xb)) {
        free(xb), free(scratch);
        return dsq_fail(DSQ_ERR_NOMEM, "w8 linear %lld x %lld: out of memory for the FP8 tiles of %d tokens",
                        (long long)out, (long long)in, n_tok);
    }
    if (bf16) dsq_gemm_bf16_round_rows(xv, in, n_tok, in, xb, lda); /* exact: FP8 values fit BF16 */
#pragma omp parallel num_threads(threads)
    {
        float *tile = (float *)(scratch + per * (size_t)omp_get_thread_num());
        void *gs = (char *)tile + tile_b;
#pragma omp for schedule(dynamic, 1)
        for (int64_t q = 0; q < ntiles; q++) {
            int64_t r0 = q * nc, w = out - r0 < nc ? out - r0 : nc;
            for (int64_t r = 0; r < w; r++) dsq_fp8_decode_row(s->q.codes + (r0 + r) * in, in, 1.0f, tile + r * in);
            for (int64_t t0 = 0; t0 < n_tok; t0 += FP8_TOKEN_BLOCK) { /* a block of x streams from cache */
                int64_t nt = n_tok - t0 < FP8_TOKEN_BLOCK ? n_tok - t0 : FP8_TOKEN_BLOCK;
                float *yb = y + t0 * out + r0;
                if (bf16)
                    dsq_gemm_bf16(DSQ_GEMM_BT, nt, w, in, xb + t0 * lda, lda, tile, in, yb, out, false, gs);
                else
                    dsq_gemm_f32(DSQ_GEMM_BT, nt, w, in, xv + t0 * in, in, tile, in, yb, out, false, gs);
            }
        }
    }
    free(xb), free(scratch);
    return DSQ_OK;
}

#define FP8_GEMV_ROWS 16

/* Decode path: one token dots the codes directly; several decode each row
 * once into a per-thread buffer and dot it with every token. */
static dsq_status fp8_rows(const dsq_linear *W, const float *xv, int n_tok, float *y)
{
    const w8_store *s = store_of(W);
    int64_t in = W->in, items = (W->out + FP8_GEMV_ROWS - 1) / FP8_GEMV_ROWS;
    int threads = dsq_cpu_threads();
    if (items < threads) threads = (int)items;
    float *rows = n_tok > 1 ? malloc((size_t)threads * (size_t)in * sizeof *rows) : NULL;
    if (n_tok > 1 && !rows) return dsq_fail(DSQ_ERR_NOMEM, "w8 linear: out of memory for %d decoded rows", threads);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t it = 0; it < items; it++) {
        float *row = rows ? rows + (size_t)omp_get_thread_num() * (size_t)in : NULL;
        for (int64_t r = it * FP8_GEMV_ROWS; r < (it + 1) * FP8_GEMV_ROWS && r < W->out; r++) {
            const uint8_t *codes = s->q.codes + r * in;
            if (!row) {
                y[r] = dsq_fp8_dot(codes, xv, in);
                continue;
            }
            dsq_fp8_decode_row(codes, in, 1.0f, row);
            for (int t = 0; t < n_tok; t++)
                y[(size_t)t * (size_t)W->out + r] = dsq_vec_dot_f32(in, row, xv + (size_t)t * (size_t)in);
        }
    }
    free(rows);
    return DSQ_OK;
}

static dsq_status w8_fp8_forward(const dsq_linear *W, const float *x, float *y, int n_tok, bool batched)
{
    fp8_act a;
    DSQ_TRY(fp8_quantize_input(W, x, n_tok, &a));
    dsq_status st = DSQ_OK;
    st = batched ? fp8_batched(W, a.xv, n_tok, y) : fp8_rows(W, a.xv, n_tok, y);
    if (st == DSQ_OK) fp8_epilogue(W, a.sx, n_tok, y);
    free(a.xv), free(a.sx);
    return st;
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

/* INT8 product; FP8 product; FP8 or INT8 with quantized float inputs; weight-only. */
static const dsq_linear_vtable g_w8_int = {"w8", w8_rows_f32, NULL, NULL, NULL, w8_release, NULL, w8_int_forward, NULL};
static const dsq_linear_vtable g_w8_fp8 = {"w8", w8_rows_f32, NULL, NULL, NULL, w8_release, NULL, w8_fp8_forward, NULL};
static const dsq_linear_vtable g_w8_actq = {"w8",       w8_rows_f32,  w8_act_bytes, NULL, w8_dot_rows,
                                            w8_release, w8_input_f32, NULL,         NULL};
static const dsq_linear_vtable g_w8_wonly = {"w8",       w8_rows_f32, w8_act_bytes, NULL, w8_dot_rows,
                                             w8_release, NULL,        NULL,         NULL};

static dsq_status copy_q(w8_store *s, const dsq_w8q *q)
{
    if (q->codes_view) { /* the codes stay in the checkpoint's mmap */
        s->q = *q;
        s->q.scales = malloc((size_t)(q->n_scale_rows * q->n_scale_cols) * sizeof *q->scales);
        if (!s->q.scales) {
            s->q.codes = NULL;
            return dsq_fail(DSQ_ERR_NOMEM, "w8 linear: out of memory");
        }
    } else {
        DSQ_TRY(dsq_w8q_alloc(&q->sch, q->rows, q->cols, &s->q));
        memcpy(s->q.codes, q->codes, (size_t)(q->rows * q->cols));
    }
    memcpy(s->q.scales, q->scales, (size_t)(q->n_scale_rows * q->n_scale_cols) * sizeof *q->scales);
    s->q.act_scale = q->act_scale;
    if (q->sch.kind == DSQ_W8_FP8)
        memcpy(s->lut, dsq_fp8_e4m3_table(), sizeof s->lut);
    else
        for (int i = 0; i < 256; i++) s->lut[i] = (float)(int8_t)i;
    return DSQ_OK;
}

/* The schemes whose product runs on the codes (one scale per token and per row). */
static bool code_product(const dsq_w8_scheme *sch)
{
    return sch->wgran != DSQ_W8_W_BLOCK && (sch->act == DSQ_W8_ACT_TOKEN || sch->act == DSQ_W8_ACT_TENSOR);
}

static const dsq_linear_vtable *vtable_of(const dsq_w8_scheme *sch)
{
    if (code_product(sch)) return sch->kind == DSQ_W8_INT8 ? &g_w8_int : &g_w8_fp8;
    return sch->act == DSQ_W8_ACT_NONE ? &g_w8_wonly : &g_w8_actq;
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
    W->vt = vtable_of(&q->sch);
    s->int_path = W->vt == &g_w8_int;
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
    return W && (W->vt == &g_w8_int || W->vt == &g_w8_fp8 || W->vt == &g_w8_actq || W->vt == &g_w8_wonly);
}

const dsq_w8_scheme *dsq_linear_w8_scheme(const dsq_linear *W)
{
    return dsq_linear_is_w8(W) ? &store_of(W)->q.sch : NULL;
}
