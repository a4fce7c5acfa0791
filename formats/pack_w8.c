/* 8-bit linears in compressed-tensors, vLLM fp8 and ModelOpt folders; the
 * layouts and their sources are in pack_w8.h. */
#include "formats/pack_w8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- which format expresses which scheme (common.md's matrix) ---- */

/* vLLM's Fp8Config: per-tensor weights with static or dynamic activations,
 * or weight_block_size blocks whose activation groups are block_k wide. */
static bool fp8_can(const dsq_w8_scheme *s)
{
    if (s->kind != DSQ_W8_FP8) return false;
    if (s->wgran == DSQ_W8_W_TENSOR) return s->act == DSQ_W8_ACT_TENSOR || s->act == DSQ_W8_ACT_TOKEN;
    return s->wgran == DSQ_W8_W_BLOCK && s->act == DSQ_W8_ACT_GROUP && s->act_group == s->block_cols;
}

/* ModelOpt quant_algo "FP8": per-tensor weights, static per-tensor activations. */
static bool modelopt_can(const dsq_w8_scheme *s)
{
    return s->kind == DSQ_W8_FP8 && s->wgran == DSQ_W8_W_TENSOR && s->act == DSQ_W8_ACT_TENSOR;
}

bool dsq_w8_format_can(dsq_int_format f, const dsq_w8_scheme *s)
{
    /* a scheme that fails its own check is expressed by nothing */
    if (!s || s->kind < DSQ_W8_INT8 || s->kind > DSQ_W8_FP8 || s->wgran < DSQ_W8_W_TENSOR ||
        s->wgran > DSQ_W8_W_BLOCK || s->act < DSQ_W8_ACT_NONE || s->act > DSQ_W8_ACT_GROUP ||
        (s->wgran == DSQ_W8_W_BLOCK && (s->block_rows <= 0 || s->block_cols <= 0)) ||
        (s->act == DSQ_W8_ACT_GROUP && s->act_group <= 0))
        return false;
    switch (f) {
    /* INT8 weight-only is pack-quantized in llm-compressor (and only that loads in vLLM's WNA16) */
    case DSQ_INT_FORMAT_CT: return !(s->kind == DSQ_W8_INT8 && s->act == DSQ_W8_ACT_NONE);
    case DSQ_INT_FORMAT_FP8: return fp8_can(s);
    case DSQ_INT_FORMAT_MODELOPT: return modelopt_can(s);
    default: return false;
    }
}

dsq_status dsq_w8_format_check(dsq_int_format f, const dsq_w8_scheme *s)
{
    DSQ_TRY(dsq_w8_scheme_check(s));
    if (dsq_w8_format_can(f, s)) return DSQ_OK;
    static const dsq_int_format all[] = {DSQ_INT_FORMAT_CT, DSQ_INT_FORMAT_FP8, DSQ_INT_FORMAT_MODELOPT};
    char can[96] = "", what[96];
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (dsq_w8_format_can(all[i], s)) {
            size_t n = strlen(can);
            snprintf(can + n, sizeof can - n, "%s%s", n ? ", " : "", dsq_int_format_name(all[i]));
        }
    dsq_w8_scheme_describe(s, what, sizeof what);
    if (!*can)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "--format %s cannot express %s; no 8-bit format does (INT8 weight-only is pack-quantized: "
                        "dsquant rtn --w-bit 8 --format compressed-tensors)",
                        dsq_int_format_name(f), what);
    return dsq_fail(DSQ_ERR_UNSUPPORTED, "--format %s cannot express %s; formats that can: %s", dsq_int_format_name(f),
                    what, can);
}

bool dsq_w8_tiling_ok(const dsq_w8_scheme *s, int64_t rows, int64_t cols, bool fused)
{
    if (s->act == DSQ_W8_ACT_GROUP && (s->act_group <= 0 || cols % s->act_group != 0)) return false;
    return !(s->wgran == DSQ_W8_W_BLOCK && fused && (s->block_rows <= 0 || rows % s->block_rows != 0));
}

dsq_status dsq_w8_tiling_check(const dsq_w8_scheme *s, int64_t rows, int64_t cols, bool fused, const char *name)
{
    if (dsq_w8_tiling_ok(s, rows, cols, fused)) return DSQ_OK;
    DSQ_TRY(dsq_w8_scheme_check(s)); /* sizes positive before dividing by them */
    if (s->act == DSQ_W8_ACT_GROUP && cols % s->act_group != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: in_features %lld is not a multiple of the activation group %d (vLLM quantizes "
                        "activations in whole groups); leave the linear dense, use another scheme, or pass "
                        "--partial-blocks to write the last group partial (vLLM will not load that)",
                        name, (long long)cols, s->act_group);
    if (s->wgran == DSQ_W8_W_BLOCK && fused && rows % s->block_rows != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: out_features %lld is not a multiple of the block height %d, which vLLM requires of "
                        "linears it fuses (q/k/v, gate/up); --partial-blocks writes it anyway (vLLM will not load that)",
                        name, (long long)rows, s->block_rows);
    return DSQ_OK;
}

/* ---- tensors ---- */

const char *dsq_w8_scale_suffix(dsq_int_format f, const dsq_w8_scheme *s)
{
    /* "The weight_scale_inv name is intentional for deepseekv3" (vLLM fp8.py) */
    return f == DSQ_INT_FORMAT_FP8 && s->wgran == DSQ_W8_W_BLOCK ? "weight_scale_inv" : "weight_scale";
}

/* compressed-tensors keeps scalars as [1]; AutoFP8 and ModelOpt as []. */
static int scalar_dims(dsq_int_format f) { return f == DSQ_INT_FORMAT_CT ? 1 : 0; }

static dsq_status w8_layout(dsq_int_format f, const dsq_w8_scheme *s, int64_t rows, int64_t cols, dsq_packed *out,
                            void **w, void **sc, void **in)
{
    if (!dsq_w8_format_can(f, s)) return dsq_w8_format_check(f, s);
    int64_t sr, scn;
    dsq_w8_scale_grid(s, rows, cols, &sr, &scn);
    const int64_t wshape[2] = {rows, cols}, one[1] = {1};
    int64_t sshape[2] = {sr, scn};
    int sdims = 2;
    if (s->wgran == DSQ_W8_W_TENSOR) sdims = scalar_dims(f), sshape[0] = 1;
    dsq_type wt = s->kind == DSQ_W8_INT8 ? DSQ_TYPE_I8 : DSQ_TYPE_F8_E4M3;
    dsq_status st = dsq_packed_add(out, "weight", wt, 2, wshape, w);
    if (st == DSQ_OK) st = dsq_packed_add(out, dsq_w8_scale_suffix(f, s), DSQ_TYPE_F32, sdims, sshape, sc);
    if (st == DSQ_OK && s->act == DSQ_W8_ACT_TENSOR)
        st = dsq_packed_add(out, "input_scale", DSQ_TYPE_F32, scalar_dims(f), one, in);
    if (st != DSQ_OK) dsq_packed_free(out);
    return st;
}

dsq_status dsq_w8_pack_shape(dsq_int_format f, const dsq_w8_scheme *s, int64_t rows, int64_t cols, dsq_packed *out)
{
    memset(out, 0, sizeof *out);
    return w8_layout(f, s, rows, cols, out, NULL, NULL, NULL);
}

dsq_status dsq_w8_pack(dsq_int_format f, const dsq_w8q *q, dsq_packed *out)
{
    memset(out, 0, sizeof *out);
    DSQ_TRY(dsq_w8q_validate(q, "w8 pack"));
    void *w, *sc, *in = NULL;
    DSQ_TRY(w8_layout(f, &q->sch, q->rows, q->cols, out, &w, &sc, q->sch.act == DSQ_W8_ACT_TENSOR ? &in : NULL));
    memcpy(w, q->codes, (size_t)(q->rows * q->cols));
    for (int64_t i = 0; i < q->n_scale_rows * q->n_scale_cols; i++)
        dsq_pack_put_scale(sc, i, DSQ_TYPE_F32, q->scales[i]);
    if (in) dsq_pack_put_scale(in, 0, DSQ_TYPE_F32, q->act_scale);
    return DSQ_OK;
}

/* ---- reading back ---- */

static const char *tname(const dsq_tensor *t) { return t && t->name ? t->name : "?"; }

static bool bytes_match(const dsq_tensor *t)
{
    uint64_t n, bytes;
    return dsq_mul_dims(t->shape, t->n_dims, &n) && dsq_type_nbytes(t->type, n, &bytes) == DSQ_OK &&
           bytes == t->nbytes && (bytes == 0 || t->data);
}

dsq_status dsq_w8_read_scalar(const dsq_tensor *t, const char *what, float *out)
{
    if (!t) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s is missing", what);
    if (!dsq_pack_scale_type_ok(t->type))
        return dsq_fail(DSQ_ERR_FORMAT, "%s (%s): expected F32, F16 or BF16, found %s", what, tname(t),
                        dsq_type_name(t->type));
    if (!(t->n_dims == 0 || (t->n_dims == 1 && t->shape[0] == 1)) || !bytes_match(t))
        return dsq_fail(DSQ_ERR_FORMAT, "%s (%s): expected one value (shape [] or [1]), found %d dims", what, tname(t),
                        t->n_dims);
    float v = dsq_pack_get_scale(t->data, 0, t->type);
    if (!(isfinite(v) && v > 0.0f))
        return dsq_fail(DSQ_ERR_NUMERIC, "%s (%s) is %g (must be finite and positive)", what, tname(t), (double)v);
    *out = v;
    return DSQ_OK;
}

/* The weight-scale tensor against the grid [sr x sc]: channel scales come as
 * [N, 1] (compressed-tensors) or [N] (ModelOpt's per-channel form), one
 * scale as [] or [1]. */
static dsq_status expect_scale(const dsq_tensor *t, const dsq_w8_scheme *s, int64_t sr, int64_t sc)
{
    if (!t) return dsq_fail(DSQ_ERR_NOT_FOUND, "weight scale is missing");
    if (!dsq_pack_scale_type_ok(t->type))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: weight scale dtype %s (expected F32, F16 or BF16)", tname(t),
                        dsq_type_name(t->type));
    bool ok;
    if (s->wgran == DSQ_W8_W_TENSOR)
        ok = t->n_dims == 0 || (t->n_dims == 1 && t->shape[0] == 1);
    else if (s->wgran == DSQ_W8_W_CHANNEL)
        ok = (t->n_dims == 2 && t->shape[0] == sr && t->shape[1] == 1) || (t->n_dims == 1 && t->shape[0] == sr);
    else
        ok = t->n_dims == 2 && t->shape[0] == sr && t->shape[1] == sc;
    if (ok && bytes_match(t)) return DSQ_OK;
    return dsq_fail(DSQ_ERR_FORMAT, "%s: weight scale of %d dims [%lld, %lld] does not fit a %lld x %lld scale grid",
                    tname(t), t->n_dims, (long long)(t->n_dims > 0 ? t->shape[0] : 0),
                    (long long)(t->n_dims > 1 ? t->shape[1] : 0), (long long)sr, (long long)sc);
}

static dsq_status expect_weight(const dsq_w8_scheme *s, const dsq_tensor *w, int64_t *rows, int64_t *cols)
{
    if (!w) return dsq_fail(DSQ_ERR_NOT_FOUND, "8-bit weight is missing");
    dsq_type want = s->kind == DSQ_W8_INT8 ? DSQ_TYPE_I8 : DSQ_TYPE_F8_E4M3;
    if (w->type != want)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: expected %s for %s weights, found %s", tname(w), dsq_type_name(want),
                        dsq_w8_kind_name(s->kind), dsq_type_name(w->type));
    if (w->n_dims != 2 || w->shape[0] <= 0 || w->shape[1] <= 0 || !bytes_match(w))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: an 8-bit weight must be a non-empty [out, in] matrix", tname(w));
    *rows = w->shape[0], *cols = w->shape[1];
    return DSQ_OK;
}

static dsq_status unpack(const dsq_w8_scheme *s, const dsq_tensor *weight, const dsq_tensor *scale,
                         const dsq_tensor *input_scale, bool view, dsq_w8q *out);

dsq_status dsq_w8_unpack(const dsq_w8_scheme *s, const dsq_tensor *weight, const dsq_tensor *scale,
                         const dsq_tensor *input_scale, dsq_w8q *out)
{
    return unpack(s, weight, scale, input_scale, false, out);
}

dsq_status dsq_w8_unpack_view(const dsq_w8_scheme *s, const dsq_tensor *weight, const dsq_tensor *scale,
                              const dsq_tensor *input_scale, dsq_w8q *out)
{
    return unpack(s, weight, scale, input_scale, true, out);
}

static dsq_status unpack(const dsq_w8_scheme *s, const dsq_tensor *weight, const dsq_tensor *scale,
                         const dsq_tensor *input_scale, bool view, dsq_w8q *out)
{
    memset(out, 0, sizeof *out);
    DSQ_TRY(dsq_w8_scheme_check(s));
    int64_t N = 0, K = 0, sr, sc;
    DSQ_TRY(expect_weight(s, weight, &N, &K));
    dsq_w8_scale_grid(s, N, K, &sr, &sc);
    DSQ_TRY(expect_scale(scale, s, sr, sc));
    float act = 0.0f;
    if (s->act == DSQ_W8_ACT_TENSOR) {
        char what[300];
        snprintf(what, sizeof what, "static input_scale of %s", tname(weight));
        DSQ_TRY(dsq_w8_read_scalar(input_scale, what, &act));
    }
    dsq_w8q q;
    if (view) {
        memset(&q, 0, sizeof q);
        q.sch = *s, q.rows = N, q.cols = K, q.n_scale_rows = sr, q.n_scale_cols = sc;
        q.codes = (uint8_t *)(uintptr_t)weight->data; /* read-only: codes_view */
        q.codes_view = true;
        if (!(q.scales = malloc((size_t)(sr * sc) * sizeof *q.scales)))
            return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", tname(scale));
    } else {
        DSQ_TRY(dsq_w8q_alloc(s, N, K, &q));
        memcpy(q.codes, weight->data, (size_t)(N * K));
    }
    for (int64_t i = 0; i < sr * sc; i++) q.scales[i] = dsq_pack_get_scale(scale->data, i, scale->type);
    q.act_scale = act;
    dsq_status st = DSQ_OK;
    for (int64_t i = 0; st == DSQ_OK && i < sr * sc; i++)
        if (!(isfinite(q.scales[i]) && q.scales[i] > 0.0f))
            st = dsq_fail(DSQ_ERR_NUMERIC, "%s: scale %lld is %g (must be finite and positive)", tname(scale),
                          (long long)i, (double)q.scales[i]);
    if (st == DSQ_OK) st = dsq_w8q_validate(&q, tname(weight));
    if (st != DSQ_OK) {
        dsq_w8q_free(&q);
        return st;
    }
    *out = q;
    return DSQ_OK;
}

/* ---- KV-cache scales ---- */

void dsq_w8_kv_names(dsq_int_format f, int64_t layer, char *k, char *v, size_t cap)
{
    /* ModelOpt renames k_bmm_quantizer._amax to k_proj.k_scale (quant_utils.py);
     * compressed-tensors registers k_scale / v_scale on self_attn, which vLLM's
     * fp8 loader also reads */
    const char *ks = f == DSQ_INT_FORMAT_MODELOPT ? "k_proj.k_scale" : "k_scale";
    const char *vs = f == DSQ_INT_FORMAT_MODELOPT ? "v_proj.v_scale" : "v_scale";
    snprintf(k, cap, "model.layers.%lld.self_attn.%s", (long long)layer, ks);
    snprintf(v, cap, "model.layers.%lld.self_attn.%s", (long long)layer, vs);
}

int dsq_w8_kv_ndims(dsq_int_format f) { return scalar_dims(f); }
