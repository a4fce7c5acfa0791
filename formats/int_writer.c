/* The INTn artifact writer (formats/int_writer.h). */
#include "formats/int_writer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/grow.h"
#include "core/json.h"
#include "core/log.h"
#include "formats/hf_names.h"
#include "formats/hf_tokenizer.h"
#include "formats/pack_awq.h"
#include "formats/pack_ct.h"
#include "formats/pack_gptq.h"
#include "formats/safetensors.h"

struct dsq_int_writer {
    const dsq_int_source *src;
    const dsq_int_spec *spec;
    dsq_st_writer *st;
    char **skipped; /* module names left unquantized */
    size_t n_skipped, cap_skipped;
    int64_t n_wrapped;
    uint16_t *buf16;
    size_t cap16;
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

static dsq_status add_f16(dsq_int_writer *w, const char *name, int n_dims, int64_t d0, int64_t d1)
{
    int64_t shape[2] = {d0, d1};
    return dsq_st_writer_add(w->st, name, DSQ_TYPE_F16, n_dims, shape);
}

static dsq_status plan_layer(dsq_int_writer *w, int64_t l)
{
    const dsq_int_source *src = w->src;
    const dsq_block_desc *d = src->block;
    int64_t dim = src->arch->hidden_size;
    char name[256], mod[200];
    for (int i = 0; i < d->n_norms; i++) {
        snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, d->norms[i].hf);
        DSQ_TRY(add_f16(w, name, 1, dim, 0));
    }
    for (int id = 0; id < d->n_linears; id++) {
        int64_t out, in;
        dsq_block_linear_shape(d, src->arch, id, &out, &in);
        module_name(w, l, id, mod, sizeof mod);
        if (src->quantized[l * d->n_linears + id]) DSQ_TRY(plan_packed(w, mod, out, in));
        else {
            snprintf(name, sizeof name, "%s.weight", mod);
            DSQ_TRY(add_f16(w, name, 2, out, in));
        }
        if (src->has_bias[l * d->n_linears + id]) {
            snprintf(name, sizeof name, "%s.bias", mod);
            DSQ_TRY(add_f16(w, name, 1, out, 0));
        }
    }
    return DSQ_OK;
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

dsq_status dsq_int_writer_new(const char *dir, const dsq_int_source *src, const dsq_int_spec *spec,
                              dsq_int_writer **out)
{
    *out = NULL;
    dsq_int_writer *w = calloc(1, sizeof *w);
    if (!w) return dsq_fail(DSQ_ERR_NOMEM, "int writer: out of memory");
    w->src = src;
    w->spec = spec;
    dsq_status s = dsq_st_writer_new(dir, "model", 5000000000ULL, &w->st);
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
    dsq_intq_params p = {src->bits, src->group_size, src->sym, DSQ_INTQ_RULE_GPTQ, 0};
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
        s = dsq_fail(DSQ_ERR_UNSUPPORTED, "int writer: %s stores 8-bit schemes only", dsq_int_format_name(w->spec->format));
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

dsq_status dsq_int_writer_layer(dsq_int_writer *w, const dsq_int_layer *l)
{
    const dsq_block_desc *d = w->src->block;
    for (int i = 0; i < d->n_norms; i++)
        DSQ_TRY(dsq_int_writer_vector(w, l->norm[i], (size_t)w->src->arch->hidden_size));
    for (int id = 0; id < n_lin(w); id++) {
        dsq_permute_kind k = perm_of(w, id);
        int64_t out, in;
        dsq_block_linear_shape(d, w->src->arch, id, &out, &in);
        if (l->q[id]) DSQ_TRY(write_packed(w, l->q[id], k));
        else {
            DSQ_TRY(write_dense(w, l->w[id], out, in, k));
            DSQ_TRY(note_skipped(w, l->layer, id));
        }
        if (l->bias[id]) DSQ_TRY(write_dense(w, l->bias[id], out, 1, k));
    }
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

static dsq_status ct_config(const dsq_int_writer *w, cJSON **out)
{
    const dsq_int_spec *a = w->spec;
    const char **ign = malloc((w->n_skipped + 1) * sizeof *ign);
    if (!ign) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < w->n_skipped; i++) ign[i] = w->skipped[i];
    ign[w->n_skipped] = "lm_head";
    dsq_ct_config c = {a->bits, a->group, a->sym, a->act_order ? (a->static_groups ? "weight" : "group") : NULL, ign,
                       w->n_skipped + 1};
    dsq_status s = dsq_ct_config_json(&c, out);
    free(ign);
    return s;
}

static dsq_status gptq_config(const dsq_int_writer *w, cJSON **out)
{
    const dsq_int_spec *a = w->spec;
    dsq_gptq_config c = {a->bits, a->group, a->damp, a->act_order, a->static_groups, a->sym, true, DSQ_GPTQ_FORMAT_V1};
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
    DSQ_LOGW("%zu linears left unquantized; GPTQ loaders may not honour modules_to_not_convert", w->n_skipped);
    return DSQ_OK;
}

static dsq_status quant_config(const dsq_int_writer *w, cJSON **out)
{
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
    if (s == DSQ_OK) s = dsq_outfile_commit(f);
    else dsq_outfile_abort(f);
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
        static const char *const names[] = {"tokenizer.json",     "tokenizer_config.json", "special_tokens_map.json",
                                            "tokenizer.model",    "vocab.json",            "merges.txt",
                                            "added_tokens.json",  "chat_template.jinja",   "chat_template.json"};
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
