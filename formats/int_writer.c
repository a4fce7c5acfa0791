/* The INTn artifact writer (formats/int_writer.h). */
#include "formats/int_writer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/grow.h"
#include "core/json.h"
#include "core/log.h"
#include "quantizers/intq_search.h"
#include "formats/hf_names.h"
#include "formats/hf_tokenizer.h"
#include "formats/pack_awq.h"
#include "formats/pack_ct.h"
#include "formats/pack_gptq.h"
#include "formats/pack_w8.h"
#include "formats/pack_w8_config.h"
#include "formats/safetensors.h"
#include "formats/block_deepseek.h"

struct dsq_int_writer {
    const dsq_int_source *src;
    const dsq_int_spec *spec;
    dsq_st_writer *st;
    char **skipped; /* module names left unquantized */
    size_t n_skipped, cap_skipped;
    int64_t n_wrapped;
    uint16_t *buf16;
    size_t cap16;
    bool warned_partial; /* --partial-blocks said once */
    int expert_layer, expert_next; /* the expert dsq_int_writer_expert expects next */
    size_t n_routers;              /* of the skipped modules */
};

static int n_lin(const dsq_int_writer *w) { return w->src->block->n_linears; }

static void module_name(const dsq_int_writer *w, int64_t layer, int id, char *buf, size_t cap)
{
    snprintf(buf, cap, "model.layers.%lld.%s", (long long)layer, w->src->block->linears[id].hf);
}

/* ---- the plan ---- */

static dsq_intq_shape shape_of(const dsq_int_writer *w, int64_t out, int64_t in)
{
    const dsq_int_spec *s = w->spec;
    dsq_intq_shape sh = {out, in, s->bits, s->group == -1 ? (int)in : s->group, s->sym, false};
    /* GPTQ then emits a g_idx; with one group per row it is trivial, which
     * AWQ's layout (no g_idx) still stores */
    sh.g_idx = s->act_order && !s->static_groups && !(s->format == DSQ_INT_FORMAT_AWQ && sh.group_size == in);
    return sh;
}

static dsq_status pack_shape(const dsq_int_writer *w, const dsq_intq_shape *sh, dsq_packed *out)
{
    switch (w->spec->format) {
    case DSQ_INT_FORMAT_AWQ: return dsq_awq_pack_shape(sh, out);
    case DSQ_INT_FORMAT_CT: return dsq_ct_pack_shape(sh, DSQ_TYPE_F16, out);
    case DSQ_INT_FORMAT_GPTQ: return dsq_gptq_pack_shape(sh, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_F16, out);
    case DSQ_INT_FORMAT_FP8:
    case DSQ_INT_FORMAT_MODELOPT: break; /* 8-bit only (not yet written) */
    }
    return dsq_fail(DSQ_ERR_ARG, "int writer: unknown format %d", (int)w->spec->format);
}

static dsq_status plan_packed(dsq_int_writer *w, const char *module, int64_t out, int64_t in)
{
    dsq_intq_shape sh = shape_of(w, out, in);
    dsq_packed pk;
    DSQ_TRY_CTX(pack_shape(w, &sh, &pk), "%s", module);
    dsq_status s = DSQ_OK;
    for (int i = 0; s == DSQ_OK && i < pk.n; i++) {
        char name[256];
        snprintf(name, sizeof name, "%s.%s", module, pk.t[i].suffix);
        s = dsq_st_writer_add(w->st, name, pk.t[i].type, pk.t[i].n_dims, pk.t[i].shape);
    }
    dsq_packed_free(&pk);
    return s;
}

/* vLLM fuses the linears that read one input (qkv_proj, gate_up_proj). */
static bool fused(const dsq_block_desc *d, int id)
{
    int ids[DSQ_BLOCK_MAX_LINEARS];
    return dsq_block_group_members(d, d->linears[id].group, ids, DSQ_BLOCK_MAX_LINEARS) > 1;
}

static dsq_status plan_w8(dsq_int_writer *w, const char *module, int id, int64_t out, int64_t in)
{
    const dsq_int_spec *sp = w->spec;
    char name[256];
    snprintf(name, sizeof name, "%s.weight", module);
    if (!sp->partial_blocks) DSQ_TRY(dsq_w8_tiling_check(&sp->w8s, out, in, fused(w->src->block, id), name));
    else if (!dsq_w8_tiling_ok(&sp->w8s, out, in, fused(w->src->block, id)) && !w->warned_partial) {
        w->warned_partial = true;
        DSQ_LOGW("%s (%lld x %lld): partial edge blocks or activation groups written (--partial-blocks); vLLM will "
                 "not load this folder",
                 name, (long long)out, (long long)in);
    }
    if (sp->w8s.wgran == DSQ_W8_W_BLOCK && w->src->permute_qk && w->src->block->linears[id].perm != DSQ_PERMUTE_NONE)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: block scales of llama.cpp-permuted q/k rows cannot be unpermuted; convert the GGUF "
                        "to a Hugging Face folder first (dsquant convert)",
                        name);
    dsq_packed pk;
    DSQ_TRY(dsq_w8_pack_shape(sp->format, &sp->w8s, out, in, &pk));
    dsq_status s = DSQ_OK;
    for (int i = 0; s == DSQ_OK && i < pk.n; i++) {
        snprintf(name, sizeof name, "%s.%s", module, pk.t[i].suffix);
        s = dsq_st_writer_add(w->st, name, pk.t[i].type, pk.t[i].n_dims, pk.t[i].shape);
    }
    dsq_packed_free(&pk);
    return s;
}

/* FP8 KV-cache scales of layer l, where the format's loader reads them. */
static dsq_status plan_kv(dsq_int_writer *w, int64_t l)
{
    char k[160], v[160];
    const int64_t one[1] = {1};
    dsq_w8_kv_names(w->spec->format, l, k, v, sizeof k);
    int nd = dsq_w8_kv_ndims(w->spec->format);
    DSQ_TRY(dsq_st_writer_add(w->st, k, DSQ_TYPE_F32, nd, one));
    return dsq_st_writer_add(w->st, v, DSQ_TYPE_F32, nd, one);
}

static dsq_status add_f16(dsq_int_writer *w, const char *name, int n_dims, int64_t d0, int64_t d1)
{
    int64_t shape[2] = {d0, d1};
    return dsq_st_writer_add(w->st, name, DSQ_TYPE_F16, n_dims, shape);
}

static dsq_status add_f32(dsq_int_writer *w, const char *name, int n_dims, int64_t d0, int64_t d1)
{
    int64_t shape[2] = {d0, d1};
    return dsq_st_writer_add(w->st, name, DSQ_TYPE_F32, n_dims, shape);
}

/* The router stays F32 (transformers keeps it there), with its selection bias. */
static dsq_status plan_router(dsq_int_writer *w, int64_t l, const char *mod, int64_t out, int64_t in)
{
    char name[256];
    snprintf(name, sizeof name, "%s.weight", mod);
    DSQ_TRY(add_f32(w, name, 2, out, in));
    if (w->src->arch->moe.topk_method != DSQ_TOPK_NOAUX_TC) return DSQ_OK;
    snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, DSQ_DS_ROUTER_BIAS_HF);
    return add_f32(w, name, 1, out, 0);
}

/* "model.layers.L.mlp.experts.E.gate_proj" of expert linear id. */
static void expert_module(const dsq_int_writer *w, int64_t l, int id, int e, char *buf, size_t cap)
{
    char leaf[128];
    snprintf(leaf, sizeof leaf, w->src->block->linears[id].hf, e);
    snprintf(buf, cap, "model.layers.%lld.%s", (long long)l, leaf);
}

static dsq_status plan_linear(dsq_int_writer *w, int64_t l, int id, const char *mod, int64_t out, int64_t in)
{
    const dsq_int_source *src = w->src;
    char name[256];
    bool q = src->quantized[l * n_lin(w) + id];
    if (q && w->spec->w8) return plan_w8(w, mod, id, out, in);
    if (q) return plan_packed(w, mod, out, in);
    snprintf(name, sizeof name, "%s.weight", mod);
    return add_f16(w, name, 2, out, in);
}

/* Every routed expert of an MoE layer, expert by expert (the order they are quantized in). */
static dsq_status plan_experts(dsq_int_writer *w, int64_t l)
{
    const dsq_block_desc *d = w->src->block;
    char mod[200];
    for (int e = 0; e < w->src->arch->moe.n_routed; e++)
        for (int id = 0; id < d->n_linears; id++) {
            if (!d->linears[id].expert) continue;
            int64_t out, in;
            dsq_block_linear_shape(d, w->src->arch, id, &out, &in);
            expert_module(w, l, id, e, mod, sizeof mod);
            DSQ_TRY(plan_linear(w, l, id, mod, out, in));
        }
    return DSQ_OK;
}

static dsq_status plan_layer(dsq_int_writer *w, int64_t l)
{
    const dsq_int_source *src = w->src;
    const dsq_block_desc *d = src->block;
    char name[256], mod[200];
    for (int i = 0; i < d->n_norms; i++) {
        if (!dsq_block_norm_present(d, src->arch, l, i)) continue;
        snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, d->norms[i].hf);
        DSQ_TRY(add_f16(w, name, 1, dsq_block_norm_dim(d, src->arch, i), 0));
    }
    for (int id = 0; id < d->n_linears; id++) {
        if (!dsq_block_linear_present(d, src->arch, l, id) || d->linears[id].expert) continue;
        int64_t out, in;
        dsq_block_linear_shape(d, src->arch, id, &out, &in);
        module_name(w, l, id, mod, sizeof mod);
        if (d->linears[id].router) {
            DSQ_TRY(plan_router(w, l, mod, out, in));
            continue;
        }
        if (src->quantized[l * d->n_linears + id] && w->spec->w8)
            DSQ_TRY(plan_w8(w, mod, id, out, in));
        else if (src->quantized[l * d->n_linears + id])
            DSQ_TRY(plan_packed(w, mod, out, in));
        else {
            snprintf(name, sizeof name, "%s.weight", mod);
            DSQ_TRY(add_f16(w, name, 2, out, in));
        }
        if (src->has_bias[l * d->n_linears + id]) {
            snprintf(name, sizeof name, "%s.bias", mod);
            DSQ_TRY(add_f16(w, name, 1, out, 0));
        }
    }
    if (w->spec->w8 && w->spec->kv_fp8) DSQ_TRY(plan_kv(w, l));
    return dsq_arch_layer_is_moe(src->arch, l) ? plan_experts(w, l) : DSQ_OK;
}

static dsq_status plan_tensors(dsq_int_writer *w)
{
    const dsq_int_source *src = w->src;
    int64_t dim = src->arch->hidden_size;
    DSQ_TRY(add_f16(w, "model.embed_tokens.weight", 2, src->vocab, dim));
    for (int64_t l = 0; l < src->arch->n_layers; l++) DSQ_TRY(plan_layer(w, l));
    DSQ_TRY(add_f16(w, "model.norm.weight", 1, dim, 0));
    if (!src->tied) DSQ_TRY(add_f16(w, "lm_head.weight", 2, src->vocab, dim));
    return DSQ_OK;
}

/* What the spec asks for at all, before any file exists. */
static dsq_status check_spec(const dsq_int_spec *sp)
{
    bool eight_bit_only = sp->format == DSQ_INT_FORMAT_FP8 || sp->format == DSQ_INT_FORMAT_MODELOPT;
    if (sp->format < DSQ_INT_FORMAT_AWQ || sp->format > DSQ_INT_FORMAT_MODELOPT)
        return dsq_fail(DSQ_ERR_ARG, "int writer: unknown format %d (awq, gptq, compressed-tensors, fp8, modelopt)",
                        (int)sp->format);
    if (!sp->w8 && eight_bit_only)
        return dsq_fail(DSQ_ERR_ARG,
                        "--format %s stores 8-bit schemes only (dsquant fp8); INTn weights go to awq, "
                        "gptq or compressed-tensors",
                        dsq_int_format_name(sp->format));
    if (sp->w8 && !eight_bit_only && sp->format != DSQ_INT_FORMAT_CT)
        return dsq_fail(DSQ_ERR_ARG,
                        "--format %s stores INTn weights only; 8-bit schemes go to compressed-tensors, "
                        "fp8 or modelopt",
                        dsq_int_format_name(sp->format));
    if (sp->kv_fp8 && !sp->w8) return dsq_fail(DSQ_ERR_ARG, "int writer: FP8 KV-cache scales come with 8-bit schemes");
    return sp->w8 ? dsq_w8_format_check(sp->format, &sp->w8s) : DSQ_OK;
}

dsq_status dsq_int_writer_new(const char *dir, const dsq_int_source *src, const dsq_int_spec *spec,
                              dsq_int_writer **out)
{
    *out = NULL;
    dsq_int_writer *w = calloc(1, sizeof *w);
    if (!w) return dsq_fail(DSQ_ERR_NOMEM, "int writer: out of memory");
    w->src = src;
    w->spec = spec;
    dsq_status s = check_spec(spec);
    if (s == DSQ_OK) s = dsq_st_writer_new(dir, "model", 5000000000ULL, &w->st);
    if (s == DSQ_OK) s = dsq_st_writer_set_meta(w->st, "format", "pt");
    if (s == DSQ_OK) s = plan_tensors(w);
    if (s == DSQ_OK) s = dsq_st_writer_begin(w->st);
    if (s != DSQ_OK) {
        dsq_int_writer_free(w);
        return s;
    }
    *out = w;
    return DSQ_OK;
}

void dsq_int_writer_free(dsq_int_writer *w)
{
    if (!w) return;
    dsq_st_writer_free(w->st);
    for (size_t i = 0; i < w->n_skipped; i++) free(w->skipped[i]);
    free(w->skipped);
    free(w->buf16);
    free(w);
}

int64_t dsq_int_writer_wrapped(const dsq_int_writer *w) { return w->n_wrapped; }

/* ---- tensor data ---- */

dsq_status dsq_int_writer_vector(dsq_int_writer *w, const float *x, size_t n)
{
    if (n > w->cap16) {
        uint16_t *b = realloc(w->buf16, n * sizeof *b);
        if (!b) return dsq_fail(DSQ_ERR_NOMEM, "int writer: out of memory");
        w->buf16 = b;
        w->cap16 = n;
    }
    for (size_t i = 0; i < n; i++) w->buf16[i] = dsq_f32_to_f16(x[i]);
    return dsq_st_writer_write(w->st, w->buf16, n * sizeof *w->buf16);
}

dsq_status dsq_int_writer_rows(dsq_int_writer *w, int64_t rows, int64_t cols, dsq_int_rows_fn fn, void *user)
{
    int64_t chunk = 256;
    float *buf = malloc((size_t)(chunk * cols) * sizeof *buf);
    if (!buf) return dsq_fail(DSQ_ERR_NOMEM, "int writer: out of memory");
    dsq_status s = DSQ_OK;
    for (int64_t r = 0; r < rows && s == DSQ_OK; r += chunk) {
        int64_t nr = rows - r < chunk ? rows - r : chunk;
        s = fn(user, r, nr, buf);
        if (s == DSQ_OK) s = dsq_int_writer_vector(w, buf, (size_t)(nr * cols));
    }
    free(buf);
    return s;
}

static dsq_permute_kind perm_of(const dsq_int_writer *w, int id)
{
    return w->src->permute_qk ? w->src->block->linears[id].perm : DSQ_PERMUTE_NONE;
}

/* llama.cpp's converter permuted q/k rows; the HF file wants them back. Row
 * permutation commutes with group quantization (groups run along a row). */
static dsq_status unpermute_intq(const dsq_int_writer *w, dsq_permute_kind k, dsq_intq *q)
{
    const dsq_arch *a = w->src->arch;
    DSQ_TRY(dsq_permute_rows(a, k, false, q->codes, q->rows, (size_t)q->cols, NULL));
    DSQ_TRY(dsq_permute_rows(a, k, false, q->scales, q->rows, (size_t)q->n_groups * sizeof(float), NULL));
    return dsq_permute_rows(a, k, false, q->zeros, q->rows, (size_t)q->n_groups, NULL);
}

static dsq_status copy_intq(const dsq_intq *src, dsq_intq *dst)
{
    dsq_intq_params p = {src->bits, src->group_size, src->sym, DSQ_INTQ_RULE_GPTQ, 0, DSQ_INTQ_GRID_MINMAX};
    DSQ_TRY(dsq_intq_alloc(&p, src->rows, src->cols, dst));
    memcpy(dst->codes, src->codes, (size_t)(src->rows * src->cols));
    memcpy(dst->scales, src->scales, (size_t)(src->rows * src->n_groups) * sizeof(float));
    memcpy(dst->zeros, src->zeros, (size_t)(src->rows * src->n_groups));
    if (src->g_idx) {
        if (!(dst->g_idx = malloc((size_t)src->cols * sizeof *dst->g_idx))) {
            dsq_intq_free(dst);
            return dsq_fail(DSQ_ERR_NOMEM, "int writer: out of memory");
        }
        memcpy(dst->g_idx, src->g_idx, (size_t)src->cols * sizeof *dst->g_idx);
    }
    return DSQ_OK;
}

static dsq_status pack_one(dsq_int_writer *w, const dsq_intq *q, dsq_packed *out)
{
    memset(out, 0, sizeof *out);
    int64_t wrapped = 0;
    dsq_status s = DSQ_OK;
    switch (w->spec->format) {
    case DSQ_INT_FORMAT_AWQ: s = dsq_awq_pack(q, out); break;
    case DSQ_INT_FORMAT_CT: s = dsq_ct_pack(q, DSQ_TYPE_F16, out); break;
    case DSQ_INT_FORMAT_GPTQ: s = dsq_gptq_pack(q, DSQ_GPTQ_FORMAT_V1, DSQ_TYPE_F16, out, &wrapped); break;
    case DSQ_INT_FORMAT_FP8:
    case DSQ_INT_FORMAT_MODELOPT:
        s = dsq_fail(DSQ_ERR_UNSUPPORTED, "int writer: %s stores 8-bit schemes only",
                     dsq_int_format_name(w->spec->format));
        break;
    }
    w->n_wrapped += wrapped;
    return s;
}

static dsq_status write_packed(dsq_int_writer *w, const dsq_intq *q0, dsq_permute_kind k)
{
    dsq_intq q;
    DSQ_TRY(copy_intq(q0, &q));
    dsq_status s = k != DSQ_PERMUTE_NONE ? unpermute_intq(w, k, &q) : DSQ_OK;
    dsq_packed pk;
    if (s == DSQ_OK && (s = pack_one(w, &q, &pk)) == DSQ_OK) {
        for (int i = 0; i < pk.n && s == DSQ_OK; i++) s = dsq_st_writer_write(w->st, pk.t[i].data, pk.t[i].nbytes);
        dsq_packed_free(&pk);
    }
    dsq_intq_free(&q);
    return s;
}

static dsq_status write_dense(dsq_int_writer *w, const float *x, int64_t rows, int64_t cols, dsq_permute_kind k)
{
    if (k == DSQ_PERMUTE_NONE) return dsq_int_writer_vector(w, x, (size_t)(rows * cols));
    float *c = malloc((size_t)(rows * cols) * sizeof *c);
    if (!c) return dsq_fail(DSQ_ERR_NOMEM, "int writer: out of memory");
    memcpy(c, x, (size_t)(rows * cols) * sizeof *c);
    dsq_status s = dsq_permute_rows(w->src->arch, k, false, c, rows, (size_t)cols * sizeof *c, NULL);
    if (s == DSQ_OK) s = dsq_int_writer_vector(w, c, (size_t)(rows * cols));
    free(c);
    return s;
}

static dsq_status note_skipped(dsq_int_writer *w, int layer, int id)
{
    char name[200];
    module_name(w, layer, id, name, sizeof name);
    char **n = dsq_grow(w->skipped, &w->cap_skipped, w->n_skipped + 1, sizeof *n);
    if (!n) return dsq_fail(DSQ_ERR_NOMEM, "int writer: out of memory");
    w->skipped = n;
    if (!(n[w->n_skipped] = strdup(name))) return dsq_fail(DSQ_ERR_NOMEM, "int writer: out of memory");
    w->n_skipped++;
    return DSQ_OK;
}

/* An 8-bit linear, its rows back in HF order when the source was a
 * llama.cpp GGUF (a row permutation moves per-channel scales with their rows;
 * one scale needs nothing; blocks were refused when planning). */
static dsq_status write_w8(dsq_int_writer *w, const dsq_w8q *q0, dsq_permute_kind k, int64_t out, int64_t in,
                           const char *module)
{
    if (q0->rows != out || q0->cols != in)
        return dsq_fail(DSQ_ERR_ARG, "%s: 8-bit weight is %lld x %lld, the model's linear is %lld x %lld", module,
                        (long long)q0->rows, (long long)q0->cols, (long long)out, (long long)in);
    if (memcmp(&q0->sch, &w->spec->w8s, sizeof q0->sch) != 0)
        return dsq_fail(DSQ_ERR_ARG, "%s: quantized under another scheme than the folder's", module);
    dsq_w8q c;
    memset(&c, 0, sizeof c);
    const dsq_w8q *q = q0;
    dsq_status s = DSQ_OK;
    if (k != DSQ_PERMUTE_NONE) {
        const dsq_arch *a = w->src->arch;
        s = dsq_w8q_alloc(&q0->sch, out, in, &c);
        if (s == DSQ_OK) {
            memcpy(c.codes, q0->codes, (size_t)(out * in));
            memcpy(c.scales, q0->scales, (size_t)(c.n_scale_rows * c.n_scale_cols) * sizeof *c.scales);
            c.act_scale = q0->act_scale;
            s = dsq_permute_rows(a, k, false, c.codes, out, (size_t)in, NULL);
        }
        if (s == DSQ_OK && c.sch.wgran == DSQ_W8_W_CHANNEL)
            s = dsq_permute_rows(a, k, false, c.scales, out, sizeof *c.scales, NULL);
        q = &c;
    }
    dsq_packed pk;
    if (s == DSQ_OK && (s = dsq_w8_pack(w->spec->format, q, &pk)) == DSQ_OK) {
        for (int i = 0; i < pk.n && s == DSQ_OK; i++) s = dsq_st_writer_write(w->st, pk.t[i].data, pk.t[i].nbytes);
        dsq_packed_free(&pk);
    }
    dsq_w8q_free(&c);
    return s == DSQ_OK ? s : dsq_fail_context(s, "%s", module);
}

static dsq_status write_kv(dsq_int_writer *w, const dsq_int_layer *l)
{
    const float v[2] = {l->k_scale, l->v_scale};
    for (int i = 0; i < 2; i++)
        if (!(isfinite(v[i]) && v[i] > 0.0f))
            return dsq_fail(DSQ_ERR_ARG, "layer %d: FP8 KV-cache %s_scale is %g (must be finite and positive)",
                            l->layer, i ? "v" : "k", (double)v[i]);
    uint8_t b[8];
    dsq_pack_put_scale(b, 0, DSQ_TYPE_F32, v[0]);
    dsq_pack_put_scale(b, 1, DSQ_TYPE_F32, v[1]);
    DSQ_TRY(dsq_st_writer_write(w->st, b, 4));
    return dsq_st_writer_write(w->st, b + 4, 4);
}

/* The 8-bit weight a planned linear must carry (and no other). */
static dsq_status w8_of(const dsq_int_writer *w, const dsq_int_layer *l, int id, const char *module,
                        const dsq_w8q **out)
{
    bool planned = w->src->quantized[(int64_t)l->layer * n_lin(w) + id];
    if (planned && !l->q8[id])
        return dsq_fail(DSQ_ERR_ARG, "%s: planned 8-bit but the layer has no 8-bit weight", module);
    if (!planned && l->q8[id]) return dsq_fail(DSQ_ERR_ARG, "%s: has an 8-bit weight but was planned dense", module);
    *out = l->q8[id];
    return DSQ_OK;
}

static dsq_status write_f32(dsq_int_writer *w, const float *x, size_t n)
{
    return dsq_st_writer_write(w->st, x, n * sizeof *x);
}

static dsq_status write_router(dsq_int_writer *w, const dsq_int_layer *l, int id, int64_t out, int64_t in)
{
    if (!l->w[id]) return dsq_fail(DSQ_ERR_ARG, "layer %d: the router's weights are missing", l->layer);
    DSQ_TRY(write_f32(w, l->w[id], (size_t)(out * in)));
    DSQ_TRY(note_skipped(w, l->layer, id));
    w->n_routers++;
    if (w->src->arch->moe.topk_method != DSQ_TOPK_NOAUX_TC) return DSQ_OK;
    if (!l->router_bias) return dsq_fail(DSQ_ERR_ARG, "layer %d: the router's selection bias is missing", l->layer);
    return write_f32(w, l->router_bias, (size_t)out);
}

dsq_status dsq_int_writer_layer(dsq_int_writer *w, const dsq_int_layer *l)
{
    const dsq_block_desc *d = w->src->block;
    const dsq_arch *a = w->src->arch;
    if (l->layer < 0 || l->layer >= w->src->arch->n_layers)
        return dsq_fail(DSQ_ERR_ARG, "int writer: layer %d of %lld", l->layer, (long long)w->src->arch->n_layers);
    for (int i = 0; i < d->n_norms; i++) {
        if (!dsq_block_norm_present(d, a, l->layer, i)) continue;
        if (!l->norm[i]) return dsq_fail(DSQ_ERR_ARG, "layer %d: norm %s is missing", l->layer, d->norms[i].role);
        DSQ_TRY(dsq_int_writer_vector(w, l->norm[i], (size_t)dsq_block_norm_dim(d, a, i)));
    }
    w->expert_next = 0;
    w->expert_layer = l->layer;
    for (int id = 0; id < n_lin(w); id++) {
        if (!dsq_block_linear_present(d, a, l->layer, id) || d->linears[id].expert) continue;
        dsq_permute_kind k = perm_of(w, id);
        int64_t out, in;
        dsq_block_linear_shape(d, w->src->arch, id, &out, &in);
        const dsq_w8q *q8 = NULL;
        char mod[200];
        module_name(w, l->layer, id, mod, sizeof mod);
        if (d->linears[id].router) {
            DSQ_TRY(write_router(w, l, id, out, in));
            continue;
        }
        if (w->spec->w8) DSQ_TRY(w8_of(w, l, id, mod, &q8));
        if (q8)
            DSQ_TRY(write_w8(w, q8, k, out, in, mod));
        else if (l->q[id])
            DSQ_TRY(write_packed(w, l->q[id], k));
        else {
            DSQ_TRY(write_dense(w, l->w[id], out, in, k));
            DSQ_TRY(note_skipped(w, l->layer, id));
        }
        if (l->bias[id]) DSQ_TRY(write_dense(w, l->bias[id], out, 1, k));
    }
    return w->spec->w8 && w->spec->kv_fp8 ? write_kv(w, l) : DSQ_OK;
}

dsq_status dsq_int_writer_expert(dsq_int_writer *w, const dsq_int_expert *x)
{
    const dsq_block_desc *d = w->src->block;
    if (x->layer != w->expert_layer || x->expert != w->expert_next || !dsq_arch_layer_is_moe(w->src->arch, x->layer))
        return dsq_fail(DSQ_ERR_ARG, "int writer: expert %d of layer %d out of order (expected expert %d of layer %d)",
                        x->expert, x->layer, w->expert_next, w->expert_layer);
    int k = 0;
    for (int id = 0; id < n_lin(w); id++) {
        if (!d->linears[id].expert) continue;
        if (k >= DSQ_INT_EXPERT_LINEARS) return dsq_fail(DSQ_ERR_INTERNAL, "int writer: more than 3 expert linears");
        int64_t out, in;
        dsq_block_linear_shape(d, w->src->arch, id, &out, &in);
        bool planned = w->src->quantized[(int64_t)x->layer * n_lin(w) + id];
        bool has = w->spec->w8 ? x->q8[k] != NULL : x->q[k] != NULL;
        char mod[200];
        expert_module(w, x->layer, id, x->expert, mod, sizeof mod);
        if (planned != has)
            return dsq_fail(DSQ_ERR_ARG, "%s: planned %s but emitted %s", mod, planned ? "quantized" : "dense",
                            has ? "quantized" : "dense");
        if (has && w->spec->w8) DSQ_TRY(write_w8(w, x->q8[k], DSQ_PERMUTE_NONE, out, in, mod));
        else if (has) DSQ_TRY_CTX(write_packed(w, x->q[k], DSQ_PERMUTE_NONE), "%s", mod);
        else DSQ_TRY(write_dense(w, x->w[k], out, in, DSQ_PERMUTE_NONE));
        k++;
    }
    w->expert_next++;
    return DSQ_OK;
}

/* ---- side files ---- */

static dsq_status write_text(const dsq_outdir *d, const char *name, const char *text)
{
    char path[4096];
    DSQ_TRY(dsq_outdir_file(d, name, path, sizeof path));
    dsq_outfile *f;
    DSQ_TRY(dsq_outfile_open(path, false, &f));
    dsq_status s = dsq_outfile_write(f, text, strlen(text));
    if (s == DSQ_OK) s = dsq_outfile_write(f, "\n", 1);
    if (s != DSQ_OK) {
        dsq_outfile_abort(f);
        return s;
    }
    return dsq_outfile_commit(f);
}

static dsq_status write_json(const dsq_outdir *d, const char *name, cJSON *o)
{
    char *t = cJSON_Print(o);
    if (!t) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for %s", name);
    dsq_status s = write_text(d, name, t);
    free(t);
    return s;
}

/* llm-compressor's observer names ("imatrix_mse" with an underscore). */
static const char *ct_observer(dsq_intq_grid g)
{
    return g == DSQ_INTQ_GRID_IMATRIX_MSE ? "imatrix_mse" : dsq_intq_grid_get(g)->name;
}

static dsq_status ct_config(const dsq_int_writer *w, cJSON **out)
{
    const dsq_int_spec *a = w->spec;
    const char **ign = malloc((w->n_skipped + 1) * sizeof *ign);
    if (!ign) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < w->n_skipped; i++) ign[i] = w->skipped[i];
    ign[w->n_skipped] = "lm_head";
    dsq_ct_config c = {a->bits, a->group,        a->sym, a->act_order ? (a->static_groups ? "weight" : "group") : NULL,
                       ign,     w->n_skipped + 1, a->grid == DSQ_INTQ_GRID_MINMAX ? NULL : ct_observer(a->grid)};
    dsq_status s = dsq_ct_config_json(&c, out);
    free(ign);
    return s;
}

static dsq_status gptq_config(const dsq_int_writer *w, cJSON **out)
{
    const dsq_int_spec *a = w->spec;
    /* desc_act says a g_idx reorders the groups; act-order with static groups
     * keeps groups in column order (trivial g_idx), which vLLM loads (it
     * refuses desc_act true) */
    dsq_gptq_config c = {a->bits,          a->group, a->damp, a->act_order && !a->static_groups,
                         a->static_groups, a->sym,   true,    DSQ_GPTQ_FORMAT_V1,
                         a->grid == DSQ_INTQ_GRID_MINMAX ? NULL : dsq_intq_grid_get(a->grid)->name};
    DSQ_TRY(dsq_gptq_config_json(&c, out));
    if (!w->n_skipped) return DSQ_OK;
    /* GPTQ configs have no standard skip list; transformers' quantizers read this key */
    cJSON *arr = cJSON_AddArrayToObject(*out, "modules_to_not_convert");
    bool ok = arr != NULL;
    for (size_t i = 0; ok && i < w->n_skipped; i++) {
        cJSON *name = cJSON_CreateString(w->skipped[i]);
        ok = name && cJSON_AddItemToArray(arr, name);
        if (!ok) cJSON_Delete(name);
    }
    if (!ok) {
        cJSON_Delete(*out);
        *out = NULL;
        return dsq_fail(DSQ_ERR_NOMEM, "config.json: out of memory for modules_to_not_convert");
    }
    /* MoE routers are never quantized by any loader (vLLM builds them unquantized) */
    if (w->n_skipped > w->n_routers)
        DSQ_LOGW("%zu linears left unquantized; GPTQ loaders may not honour modules_to_not_convert",
                 w->n_skipped - w->n_routers);
    return DSQ_OK;
}

/* The modules left dense and lm_head, for the 8-bit configs. */
static dsq_status w8_config(const dsq_int_writer *w, const char ***ign, dsq_w8_config *c)
{
    *ign = malloc((w->n_skipped + 1) * sizeof **ign);
    if (!*ign) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < w->n_skipped; i++) (*ign)[i] = w->skipped[i];
    (*ign)[w->n_skipped] = "lm_head";
    *c = (dsq_w8_config){w->spec->format, w->spec->w8s, w->spec->kv_fp8, *ign, w->n_skipped + 1};
    return DSQ_OK;
}

static dsq_status w8_quant_config(const dsq_int_writer *w, bool hf_quant, cJSON **out)
{
    const char **ign;
    dsq_w8_config c;
    DSQ_TRY(w8_config(w, &ign, &c));
    dsq_status s = hf_quant ? dsq_w8_hf_quant_config_json(&c, out) : dsq_w8_config_json(&c, out);
    free(ign);
    return s;
}

static dsq_status quant_config(const dsq_int_writer *w, cJSON **out)
{
    if (w->spec->w8) return w8_quant_config(w, false, out);
    switch (w->spec->format) {
    case DSQ_INT_FORMAT_AWQ:
        return dsq_awq_config_json(w->spec->group, (const char *const *)w->skipped, w->n_skipped, out);
    case DSQ_INT_FORMAT_CT: return ct_config(w, out);
    case DSQ_INT_FORMAT_GPTQ: return gptq_config(w, out);
    case DSQ_INT_FORMAT_FP8:
    case DSQ_INT_FORMAT_MODELOPT: break;
    }
    return dsq_fail(DSQ_ERR_ARG, "int writer: unknown format %d", (int)w->spec->format);
}

static dsq_status write_config(const dsq_outdir *d, const dsq_int_writer *w)
{
    dsq_arch arch = *w->src->arch;
    snprintf(arch.torch_dtype, sizeof arch.torch_dtype, "float16");
    arch.tie_word_embeddings = w->src->tied;
    char *json = NULL;
    DSQ_TRY(dsq_arch_to_hf_json(&arch, &json));
    dsq_status why = DSQ_OK;
    cJSON *o = dsq_json_parse(json, strlen(json), NULL, &why), *qc = NULL;
    free(json);
    if (!o)
        return why == DSQ_ERR_NOMEM ? dsq_fail(DSQ_ERR_NOMEM, "config.json: out of memory")
                                    : dsq_fail(DSQ_ERR_INTERNAL, "config.json: could not re-read our own JSON");
    dsq_status s = quant_config(w, &qc);
    /* without its quantization_config the folder would load as a dense model: never write it so */
    if (s == DSQ_OK && !cJSON_AddItemToObject(o, "quantization_config", qc)) {
        cJSON_Delete(qc);
        s = dsq_fail(DSQ_ERR_NOMEM, "config.json: out of memory for quantization_config");
    }
    if (s == DSQ_OK) s = write_json(d, "config.json", o);
    if (s == DSQ_OK && w->spec->format == DSQ_INT_FORMAT_GPTQ) s = write_json(d, "quantize_config.json", qc);
    cJSON_Delete(o);
    /* ModelOpt's unified export writes both; TensorRT-LLM reads hf_quant_config.json */
    if (s == DSQ_OK && w->spec->w8 && w->spec->format == DSQ_INT_FORMAT_MODELOPT) {
        cJSON *h = NULL;
        s = w8_quant_config(w, true, &h);
        if (s == DSQ_OK) s = write_json(d, "hf_quant_config.json", h);
        cJSON_Delete(h);
    }
    return s;
}

static dsq_status copy_file(const dsq_outdir *d, const char *src_dir, const char *name)
{
    char src[4096];
    DSQ_TRY(dsq_path_join(src, sizeof src, src_dir, name));
    if (!dsq_exists(src)) return DSQ_OK;
    char *text = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_read_file(src, (size_t)1 << 30, &text, &len));
    char path[4096];
    dsq_outfile *f = NULL;
    dsq_status s = dsq_outdir_file(d, name, path, sizeof path);
    if (s == DSQ_OK) s = dsq_outfile_open(path, false, &f);
    if (s == DSQ_OK) s = dsq_outfile_write(f, text, len);
    if (s == DSQ_OK)
        s = dsq_outfile_commit(f);
    else
        dsq_outfile_abort(f);
    free(text);
    return s;
}

static dsq_status write_generation_config(const dsq_outdir *d, const dsq_arch *a)
{
    cJSON *g = cJSON_CreateObject();
    bool ok = g != NULL;
    if (ok && a->bos_token_id >= 0) ok = cJSON_AddNumberToObject(g, "bos_token_id", (double)a->bos_token_id) != NULL;
    if (ok && a->eos_token_id >= 0) ok = cJSON_AddNumberToObject(g, "eos_token_id", (double)a->eos_token_id) != NULL;
    dsq_status s = ok ? write_json(d, "generation_config.json", g)
                      : dsq_fail(DSQ_ERR_NOMEM, "generation_config.json: out of memory");
    cJSON_Delete(g);
    return s;
}

static dsq_status write_side_files(const dsq_outdir *d, const dsq_int_writer *w)
{
    DSQ_TRY(write_config(d, w));
    const dsq_checkpoint *c = w->src->ckpt;
    if (c->kind == DSQ_CKPT_HF_DIR) {
        static const char *const names[] = {
            "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",   "vocab.json",
            "merges.txt",     "added_tokens.json",     "chat_template.jinja",     "chat_template.json"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) DSQ_TRY(copy_file(d, c->path, names[i]));
        char gp[4096];
        DSQ_TRY(dsq_path_join(gp, sizeof gp, c->path, "generation_config.json"));
        if (dsq_exists(gp)) return copy_file(d, c->path, "generation_config.json");
    }
    DSQ_TRY(write_generation_config(d, w->src->arch));
    if (c->kind == DSQ_CKPT_GGUF) return dsq_tokenizer_gguf_to_hf(c->gguf, dsq_outdir_tmp_path(d));
    return DSQ_OK;
}

dsq_status dsq_int_writer_finish(dsq_int_writer *w, const dsq_outdir *d)
{
    DSQ_TRY(dsq_st_writer_finish(w->st));
    DSQ_TRY(write_side_files(d, w));
    if (w->n_wrapped)
        DSQ_LOGW("%lld GPTQ v1 zero points of 0 were stored wrapped (see formats/pack_gptq.h)",
                 (long long)w->n_wrapped);
    return DSQ_OK;
}
