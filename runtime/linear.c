#include "runtime/linear.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_q8.h"
#include "kernels/vec.h"
#include "quantizers/qtypes.h"
#include "runtime/cpu/qgemm_i8.h"
#include "runtime/cpu/qgemv.h"

const char *dsq_linear_kind_name(dsq_linear_kind k)
{
    switch (k) {
    case DSQ_LINEAR_DENSE: return "dense";
    case DSQ_LINEAR_GGML: return "ggml";
    case DSQ_LINEAR_INTQ: return "intq";
    case DSQ_LINEAR_W8: return "w8";
    }
    return "?";
}

static const uint8_t *row_ptr(const dsq_linear *W, int64_t r)
{
    return (const uint8_t *)W->data + (size_t)r * W->row_bytes;
}

/* ---- dense F32 / F16 / BF16 ---- */

static void dense_rows_f32(const dsq_linear *W, int64_t r0, int64_t nr, float *dst)
{
    for (int64_t r = 0; r < nr; r++)
        (void)dsq_to_f32_row(W->type, row_ptr(W, r0 + r), dst + r * W->in, (size_t)W->in); /* type checked at init */
}

static size_t dense_act_bytes(const dsq_linear *W) { return 0; }

static void dense_dot_rows(const dsq_linear *W, const float *x, const void *act, int64_t r0, int64_t r1, float *y)
{
    for (int64_t r = r0; r < r1; r++) {
        const void *w = row_ptr(W, r);
        switch (W->type) {
        case DSQ_TYPE_F16: y[r - r0] = dsq_vec_dot_f16_f32(W->in, w, x); break;
        case DSQ_TYPE_BF16: y[r - r0] = dsq_vec_dot_bf16_f32(W->in, w, x); break;
        default: y[r - r0] = dsq_vec_dot_f32(W->in, w, x); break;
        }
    }
}

static const dsq_linear_vtable g_dense = {
    "dense", dense_rows_f32, dense_act_bytes, NULL, dense_dot_rows, NULL, NULL, NULL, NULL};

/* ---- GGUF block types through the quant-type table ---- */

static void ggml_rows_f32(const dsq_linear *W, int64_t r0, int64_t nr, float *dst)
{
    const dsq_qtype *q = dsq_qtype_get(W->type);
    for (int64_t r = 0; r < nr; r++) q->dequantize_row(row_ptr(W, r0 + r), dst + r * W->in, W->in);
}

static size_t ggml_act_bytes(const dsq_linear *W)
{
    const dsq_qtype *q = dsq_qtype_get(W->type);
    uint64_t n = 0;
    if (dsq_type_nbytes(q->vec_dot_type, (uint64_t)W->in, &n) != DSQ_OK) return 0;
    return (size_t)n;
}

static void ggml_act_prepare(const dsq_linear *W, const float *x, void *act)
{
    const dsq_qtype *a = dsq_qtype_get(dsq_qtype_get(W->type)->vec_dot_type);
    a->quantize_row(x, act, W->in, NULL);
}

static void ggml_dot_rows(const dsq_linear *W, const float *x, const void *act, int64_t r0, int64_t r1, float *y)
{
    dsq_qgemv_fn kern = dsq_qgemv_kernel(W->type);
    if (kern) {
        kern(W->in, row_ptr(W, r0), W->row_bytes, r1 - r0, act, y);
        return;
    }
    dsq_vec_dot_fn dot = dsq_qtype_get(W->type)->vec_dot;
    for (int64_t r = r0; r < r1; r++) dot(W->in, &y[r - r0], row_ptr(W, r), act);
}

static void ggml_dot_rows_multi(const dsq_linear *W, const void *act, size_t act_stride, int nt, int64_t r0, int64_t r1,
                                float *y, int64_t ldy)
{
    dsq_qgemm_fn kern = dsq_qgemm_kernel(W->type);
    if (kern) {
        kern(W->in, row_ptr(W, r0), W->row_bytes, r1 - r0, act, act_stride, nt, y, ldy);
        return;
    }
    for (int t = 0; t < nt; t++)
        ggml_dot_rows(W, NULL, (const uint8_t *)act + (size_t)t * act_stride, r0, r1, y + (int64_t)t * ldy);
}

static const dsq_linear_vtable g_ggml = {"ggml", ggml_rows_f32, ggml_act_bytes, ggml_act_prepare,   ggml_dot_rows,
                                         NULL,   NULL,          NULL,           ggml_dot_rows_multi};
/* A block type we can read but not dot (no vec_dot, or its activation type
 * cannot be produced): batched path only. */
static const dsq_linear_vtable g_ggml_nodot = {"ggml", ggml_rows_f32, NULL, NULL, NULL, NULL, NULL, NULL, NULL};

static bool ggml_can_dot(const dsq_qtype *q)
{
    if (!q->vec_dot) return false;
    const dsq_qtype *a = dsq_qtype_get(q->vec_dot_type);
    return a && a->quantize_row;
}

/* ---- construction ---- */

dsq_status dsq_linear_init(dsq_linear *W, dsq_type t, const void *data, int64_t out, int64_t in)
{
    memset(W, 0, sizeof *W);
    const dsq_type_info *ti = dsq_type_get((int)t);
    if (!ti) return dsq_fail(DSQ_ERR_UNSUPPORTED, "linear: unknown weight type id %d", (int)t);
    if (out <= 0 || in <= 0)
        return dsq_fail(DSQ_ERR_ARG, "linear: bad shape %lld x %lld", (long long)out, (long long)in);
    if (t == DSQ_TYPE_F32 || t == DSQ_TYPE_F16 || t == DSQ_TYPE_BF16) {
        W->kind = DSQ_LINEAR_DENSE;
        W->vt = &g_dense;
    } else {
        const dsq_qtype *q = dsq_qtype_get(t);
        if (!q || !ti->quantized)
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "linear: weights of type %s are not supported", ti->name);
        W->kind = DSQ_LINEAR_GGML;
        W->vt = ggml_can_dot(q) ? &g_ggml : &g_ggml_nodot;
    }
    uint64_t rb = 0;
    if (dsq_type_nbytes(t, (uint64_t)in, &rb) != DSQ_OK)
        return dsq_fail(DSQ_ERR_FORMAT, "linear: row length %lld is not a multiple of the %s block size %u",
                        (long long)in, ti->name, ti->block_elems);
    W->type = t;
    W->data = data;
    W->in = in;
    W->out = out;
    W->row_bytes = (size_t)rb;
    return DSQ_OK;
}

dsq_status dsq_linear_from_tensor(dsq_linear *W, const dsq_tensor *t)
{
    if (t->n_dims != 2)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: a linear weight must have 2 dims, not %d", t->name, t->n_dims);
    dsq_status s = dsq_linear_init(W, t->type, t->data, t->shape[0], t->shape[1]);
    if (s != DSQ_OK) return dsq_fail_context(s, "tensor %s", t->name);
    uint64_t need = 0;
    if (!dsq_mul_u64((uint64_t)W->row_bytes, (uint64_t)W->out, &need) || need != t->nbytes)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: %llu bytes for %lld x %lld %s", t->name,
                        (unsigned long long)t->nbytes, (long long)W->out, (long long)W->in, dsq_type_name(t->type));
    return DSQ_OK;
}

dsq_status dsq_linear_set_bias(dsq_linear *W, dsq_type t, const void *bias, int64_t n)
{
    if (n != W->out)
        return dsq_fail(DSQ_ERR_FORMAT, "linear bias has %lld values for %lld outputs", (long long)n,
                        (long long)W->out);
    free(W->owned_bias);
    W->owned_bias = NULL;
    if (t == DSQ_TYPE_F32) {
        W->bias = bias;
        return DSQ_OK;
    }
    float *b = malloc((size_t)n * sizeof *b);
    if (!b) return dsq_fail(DSQ_ERR_NOMEM, "linear bias: out of memory");
    dsq_status s = dsq_convert_row(t, bias, DSQ_TYPE_F32, b, (size_t)n);
    if (s != DSQ_OK) {
        free(b);
        return dsq_fail_context(s, "linear bias");
    }
    W->owned_bias = b;
    W->bias = b;
    return DSQ_OK;
}

void dsq_linear_release(dsq_linear *W)
{
    if (!W) return;
    if (W->vt && W->vt->release) W->vt->release(W);
    free(W->bf16_packed);
    free(W->q8_packed);
    free(W->owned);
    free(W->owned_bias);
    memset(W, 0, sizeof *W);
}

dsq_status dsq_linear_rows_f32(const dsq_linear *W, int64_t r0, int64_t nr, float *dst)
{
    if (r0 < 0 || nr < 0 || r0 > W->out - nr)
        return dsq_fail(DSQ_ERR_ARG, "linear: rows [%lld, +%lld) outside %lld rows", (long long)r0, (long long)nr,
                        (long long)W->out);
    W->vt->rows_f32(W, r0, nr, dst);
    return DSQ_OK;
}

/* ---- compute ---- */

static void add_bias(const dsq_linear *W, float *y, int n_tok)
{
    if (!W->bias) return;
    for (int t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < W->out; r++) y[(size_t)t * W->out + r] += W->bias[r];
}

/* Work items of the batched paths: tiles of output rows times blocks of
 * tokens. Wide tiles amortise turning W into F32 and packing it, and each
 * token block is streamed once per tile, so blocks keep that stream in cache
 * at calibration sizes (thousands of tokens); narrow matrices still need
 * several items per thread. */
#define TOKEN_BLOCK 1024
#define TILE_BYTES (1 << 20) /* the F32 tile stays within a core's L2 */

typedef struct tiling {
    int64_t nc, ntiles, ntb, items;
} tiling;

static tiling plan_tiles(int64_t out, int64_t in, int n_tok, int threads, int64_t min_nc)
{
    tiling t;
    t.ntb = (n_tok + TOKEN_BLOCK - 1) / TOKEN_BLOCK;
    t.nc = 256;
    while (t.nc > min_nc && t.nc * in * (int64_t)sizeof(float) > TILE_BYTES) t.nc /= 2;
    while (t.nc > min_nc && (out + t.nc - 1) / t.nc * t.ntb < 4 * threads) t.nc /= 2;
    t.ntiles = (out + t.nc - 1) / t.nc;
    t.items = t.ntiles * t.ntb;
    return t;
}

/* Both batched paths: bf16 rounds x once and multiplies with dsq_gemm_bf16. */
static dsq_status forward_tiled(const dsq_linear *W, const float *x, float *y, int n_tok, bool bf16)
{
    if (n_tok <= 0) return DSQ_OK;
    int threads = dsq_cpu_threads();
    tiling tl = plan_tiles(W->out, W->in, n_tok, threads, bf16 ? DSQ_GEMM_BF16_NR : DSQ_GEMM_NR);
    if (tl.items < threads) threads = (int)tl.items;
    int64_t lda = bf16 ? dsq_gemm_bf16_lda(W->in) : W->in;
    size_t tile_b = ((size_t)tl.nc * (size_t)W->in * sizeof(float) + 63) & ~(size_t)63;
    size_t gemm_b =
        bf16 ? dsq_gemm_bf16_scratch_bytes(tl.nc, W->in) : dsq_gemm_scratch_floats(tl.nc, W->in) * sizeof(float);
    size_t per = tile_b + ((gemm_b + 63) & ~(size_t)63);
    uint16_t *xb = bf16 ? malloc((size_t)n_tok * (size_t)lda * sizeof *xb) : NULL;
    char *scratch = aligned_alloc(64, per * (size_t)threads);
    if (!scratch || (bf16 && !xb)) {
        free(xb);
        free(scratch);
        return dsq_fail(DSQ_ERR_NOMEM, "linear %lld x %lld: out of memory for the GEMM tiles of %d tokens",
                        (long long)W->out, (long long)W->in, n_tok);
    }
#pragma omp parallel num_threads(threads)
    {
        if (bf16) {
#pragma omp for schedule(static)
            for (int t = 0; t < n_tok; t++)
                dsq_gemm_bf16_round_rows(x + (size_t)t * (size_t)W->in, W->in, 1, W->in, xb + (size_t)t * (size_t)lda,
                                         lda);
        }
        float *tile = (float *)(scratch + per * (size_t)omp_get_thread_num());
        void *gs = (char *)tile + tile_b;
        int64_t have = -1; /* the tile now in this thread's buffer */
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < tl.items; it++) {
            int64_t q = it / tl.ntb, t0 = (it % tl.ntb) * TOKEN_BLOCK;
            int64_t r0 = q * tl.nc, w = W->out - r0 < tl.nc ? W->out - r0 : tl.nc;
            int64_t nt = n_tok - t0 < TOKEN_BLOCK ? n_tok - t0 : TOKEN_BLOCK;
            float *yb = y + t0 * W->out + r0;
            if (bf16 && W->bf16_packed) {
                dsq_gemm_bf16_packed(nt, W->out, r0, w, W->in, xb + t0 * lda, lda, W->bf16_packed, yb, W->out, false,
                                     gs);
                continue;
            }
            if (have != q) W->vt->rows_f32(W, r0, w, tile);
            have = q;
            if (bf16)
                dsq_gemm_bf16(DSQ_GEMM_BT, nt, w, W->in, xb + t0 * lda, lda, tile, W->in, yb, W->out, false, gs);
            else
                dsq_gemm_f32(DSQ_GEMM_BT, nt, w, W->in, x + t0 * lda, lda, tile, W->in, yb, W->out, false, gs);
        }
    }
    free(xb);
    free(scratch);
    add_bias(W, y, n_tok);
    return DSQ_OK;
}

#define GEMV_ROWS 16 /* rows per OpenMP work item */

static dsq_status forward_rows(const dsq_linear *W, const float *x, float *y, int n_tok)
{
    if (!W->vt->dot_rows) return forward_tiled(W, x, y, n_tok, false);
    size_t ab = W->vt->act_bytes(W);
    uint8_t *act = NULL;
    if (ab) {
        act = malloc(ab * (size_t)n_tok);
        if (!act) return dsq_fail(DSQ_ERR_NOMEM, "linear: out of memory for %d activation rows", n_tok);
        for (int t = 0; t < n_tok; t++) W->vt->act_prepare(W, x + (size_t)t * W->in, act + ab * (size_t)t);
    }
    int64_t nitems = (W->out + GEMV_ROWS - 1) / GEMV_ROWS;
    int threads = dsq_cpu_threads();
    if (nitems < threads) threads = (int)nitems;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t it = 0; it < nitems; it++) {
        int64_t r0 = it * GEMV_ROWS, r1 = r0 + GEMV_ROWS < W->out ? r0 + GEMV_ROWS : W->out;
        int t = 0;
        if (act && W->vt->dot_rows_multi) /* the weight rows unpacked once per group of tokens */
            for (; t + 1 < n_tok; t += DSQ_QGEMM_TOKENS) {
                const int nt = n_tok - t < DSQ_QGEMM_TOKENS ? n_tok - t : DSQ_QGEMM_TOKENS;
                W->vt->dot_rows_multi(W, act + ab * (size_t)t, ab, nt, r0, r1, y + (size_t)t * W->out + r0, W->out);
            }
        for (; t < n_tok; t++)
            W->vt->dot_rows(W, x + (size_t)t * W->in, act ? act + ab * (size_t)t : NULL, r0, r1,
                            y + (size_t)t * W->out + r0);
    }
    free(act);
    add_bias(W, y, n_tok);
    return DSQ_OK;
}

#define PACK_ROWS 64 /* rows per packing work item (a multiple of DSQ_GEMM_BF16_NR) */

dsq_status dsq_linear_bf16_pack(dsq_linear *W)
{
    if (W->vt->forward || W->bf16_packed) return DSQ_OK;
    uint16_t *P = aligned_alloc(64, (dsq_gemm_bf16_packed_bytes(W->out, W->in) + 63) & ~(size_t)63);
    float *rows = P ? malloc((size_t)dsq_cpu_threads() * PACK_ROWS * (size_t)W->in * sizeof *rows) : NULL;
    if (!P || !rows) {
        free(P);
        return dsq_fail(DSQ_ERR_NOMEM, "linear %lld x %lld: out of memory for its BF16 copy", (long long)W->out,
                        (long long)W->in);
    }
    int64_t items = (W->out + PACK_ROWS - 1) / PACK_ROWS;
    int threads = items < dsq_cpu_threads() ? (int)items : dsq_cpu_threads();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t it = 0; it < items; it++) {
        int64_t r0 = it * PACK_ROWS, nr = W->out - r0 < PACK_ROWS ? W->out - r0 : PACK_ROWS;
        float *f = rows + (size_t)omp_get_thread_num() * PACK_ROWS * (size_t)W->in;
        W->vt->rows_f32(W, r0, nr, f);
        dsq_gemm_bf16_pack_all(W->out, W->in, f, W->in, r0, nr, P);
    }
    free(rows);
    W->bf16_packed = P;
    return DSQ_OK;
}

dsq_status dsq_linear_q8_pack(dsq_linear *W)
{
    if (W->q8_packed || W->kind != DSQ_LINEAR_GGML || W->type != DSQ_TYPE_Q8_0 || W->vt->forward ||
        !dsq_gemm_q8_simd())
        return DSQ_OK;
    void *P = aligned_alloc(64, (dsq_qgemm_i8_packed_bytes(W->out, W->in) + 63) & ~(size_t)63);
    if (!P)
        return dsq_fail(DSQ_ERR_NOMEM, "linear %lld x %lld: out of memory for its int8 copy", (long long)W->out,
                        (long long)W->in);
    dsq_status s = dsq_qgemm_i8_pack(W->type, W->data, W->row_bytes, W->out, W->in, P);
    if (s != DSQ_OK) {
        free(P);
        return s;
    }
    W->q8_packed = P;
    return DSQ_OK;
}

void dsq_linear_bf16_unpack(dsq_linear *W)
{
    free(W->bf16_packed);
    W->bf16_packed = NULL;
}

typedef enum path { PATH_GEMM, PATH_BF16, PATH_GEMV, PATH_INT8 } path;

/* Whether W multiplies Q8_0-rounded activations (the decode path's and
 * llama.cpp's arithmetic for its type) on path p at all, and whether the
 * block-scaled int8 GEMM can do it: a batch, and a CPU with its kernel. */
static bool q8_paired(const dsq_linear *W, path p)
{
    return (p == PATH_GEMV || p == PATH_INT8) && W->kind == DSQ_LINEAR_GGML && !W->vt->forward &&
           dsq_qgemm_i8_type(W->type);
}

static dsq_status forward_int8(const dsq_linear *W, const float *x, float *y, int n_tok)
{
    if (W->q8_packed)
        DSQ_TRY(dsq_qgemm_i8_packed(W->q8_packed, W->out, W->in, x, y, n_tok));
    else
        DSQ_TRY(dsq_qgemm_i8(W->type, W->data, W->row_bytes, W->out, W->in, x, y, n_tok));
    add_bias(W, y, n_tok);
    return DSQ_OK;
}

/* Every public product: the storage's own forward when it has one, else the
 * generic path on the input as the storage rounds it (vt->input_f32). */
static dsq_status forward_on(const dsq_linear *W, const float *x, float *y, int n_tok, path p)
{
    if (n_tok <= 0) return DSQ_OK;
    if (W->vt->forward) return W->vt->forward(W, x, y, n_tok, p != PATH_GEMV);
    float *xq = NULL;
    if (W->vt->input_f32) {
        xq = malloc((size_t)n_tok * (size_t)W->in * sizeof *xq);
        if (!xq) return dsq_fail(DSQ_ERR_NOMEM, "linear: out of memory for %d rounded input rows", n_tok);
        dsq_status s = W->vt->input_f32(W, x, xq, n_tok);
        if (s != DSQ_OK) {
            free(xq);
            return s;
        }
        x = xq;
    }
    dsq_status s;
    const bool q8 = q8_paired(W, p);
    if (q8 && (W->q8_packed || n_tok > DSQ_LINEAR_GEMV_MAX_TOKENS) && dsq_gemm_q8_simd())
        s = forward_int8(W, x, y, n_tok);
    else if (p == PATH_GEMV || q8) /* the same arithmetic, token groups at a time */
        s = forward_rows(W, x, y, n_tok);
    else
        s = forward_tiled(W, x, y, n_tok, p == PATH_BF16);
    free(xq);
    return s;
}

dsq_status dsq_linear_forward_gemm(const dsq_linear *W, const float *x, float *y, int n_tok)
{
    return forward_on(W, x, y, n_tok, PATH_GEMM);
}

dsq_status dsq_linear_forward_bf16(const dsq_linear *W, const float *x, float *y, int n_tok)
{
    return forward_on(W, x, y, n_tok, PATH_BF16);
}

dsq_status dsq_linear_forward_gemv(const dsq_linear *W, const float *x, float *y, int n_tok)
{
    return forward_on(W, x, y, n_tok, PATH_GEMV);
}

dsq_status dsq_linear_forward_int8act(const dsq_linear *W, const float *x, float *y, int n_tok)
{
    if (n_tok <= DSQ_LINEAR_GEMV_MAX_TOKENS) return dsq_linear_forward_gemv(W, x, y, n_tok);
    return forward_on(W, x, y, n_tok, PATH_INT8);
}

dsq_status dsq_linear_forward(const dsq_linear *W, const float *x, float *y, int n_tok)
{
    if (n_tok <= DSQ_LINEAR_GEMV_MAX_TOKENS) return dsq_linear_forward_gemv(W, x, y, n_tok);
    return dsq_linear_forward_gemm(W, x, y, n_tok);
}
