/* GGUF quantization after llama.cpp's llama_model_quantize_impl
 * (src/llama-quant.cpp) and examples/quantize/quantize.cpp at c392e509:
 * plan every tensor's type (quantizers/mixes.c), write the header, then one
 * tensor at a time: F32 values in, quantized rows out, written in llama.cpp's
 * visiting order. */
#include "formats/gguf_quantize.h"

#include <math.h>
#include <stdint.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/bgwrite.h"
#include "core/clock.h"
#include "core/finite.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/tensor.h"
#include "formats/convert.h"
#include "formats/gguf.h"
#include "quantizers/qtypes.h"

/* llama.cpp's GGML_QNT_VERSION. */
#define QNT_VERSION 2
/* Elements per parallel job at least (llama.cpp's min_chunk_size 32 * 512):
 * small enough to balance threads, big enough to amortise scheduling. */
#define MIN_JOB_ELEMS (32 * 512)
#define COPY_BYTES (16u << 20)

/* examples/quantize/quantize.cpp's LLM_KV_QUANTIZE_IMATRIX_* keys. */
static const char KEY_IMATRIX_FILE[] = "quantize.imatrix.file";
static const char KEY_IMATRIX_DATASET[] = "quantize.imatrix.dataset";
static const char KEY_IMATRIX_ENTRIES[] = "quantize.imatrix.entries_count";
static const char KEY_IMATRIX_CHUNKS[] = "quantize.imatrix.chunks_count";

dsq_gguf_quantize_options dsq_gguf_quantize_defaults(dsq_ftype ftype)
{
    dsq_gguf_quantize_options o = {0};
    o.ftype = ftype;
    o.output_type = DSQ_MIX_NO_TYPE;
    o.token_embd_type = DSQ_MIX_NO_TYPE;
    return o;
}

void dsq_gguf_quantize_report_free(dsq_gguf_quantize_report *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n_tensors; i++) free(r->tensors[i].name);
    free(r->tensors);
    free(r);
}

/* ---------------------------------------------------------------- the input */

/* Either input kind seen as a list of GGUF tensors. mt[i].type is the type
 * the mix sees; stored[i] the type actually in the file. */
typedef struct qsrc {
    const char *path;
    dsq_gguf *g;
    dsq_hf_source *hf;
    size_t n;
    dsq_mix_tensor *mt;
    dsq_type *stored;
    char arch[128];
    dsq_mix_model model;
} qsrc;

static void src_close(qsrc *s)
{
    free(s->mt);
    free(s->stored);
    dsq_gguf_close(s->g);
    dsq_hf_source_close(s->hf);
    memset(s, 0, sizeof *s);
}

static dsq_status src_alloc(qsrc *s, size_t n)
{
    s->n = n;
    s->mt = calloc(n ? n : 1, sizeof *s->mt);
    s->stored = calloc(n ? n : 1, sizeof *s->stored);
    if (!s->mt || !s->stored) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for %zu tensors", s->path, n);
    return DSQ_OK;
}

/* Integer element i of a GGUF array of any integer type. */
static bool arr_int(const dsq_gguf_array *a, uint64_t i, int64_t *out)
{
    if (i >= a->n) return false;
    switch (a->elem_type) {
    case DSQ_GGUF_U8: *out = ((const uint8_t *)a->data)[i]; return true;
    case DSQ_GGUF_I8: *out = ((const int8_t *)a->data)[i]; return true;
    case DSQ_GGUF_U16: *out = ((const uint16_t *)a->data)[i]; return true;
    case DSQ_GGUF_I16: *out = ((const int16_t *)a->data)[i]; return true;
    case DSQ_GGUF_U32: *out = ((const uint32_t *)a->data)[i]; return true;
    case DSQ_GGUF_I32: *out = ((const int32_t *)a->data)[i]; return true;
    case DSQ_GGUF_U64: *out = (int64_t)((const uint64_t *)a->data)[i]; return true;
    case DSQ_GGUF_I64: *out = ((const int64_t *)a->data)[i]; return true;
    default: return false;
    }
}

static bool val_int(const dsq_gguf_value *v, int64_t *out)
{
    switch (v->type) {
    case DSQ_GGUF_U8: case DSQ_GGUF_U16: case DSQ_GGUF_U32: case DSQ_GGUF_U64:
        *out = v->v.u64 > INT64_MAX ? INT64_MAX : (int64_t)v->v.u64;
        return true;
    case DSQ_GGUF_I8: case DSQ_GGUF_I16: case DSQ_GGUF_I32: case DSQ_GGUF_I64:
        *out = v->v.i64;
        return true;
    default: return false;
    }
}

/* A per-layer hyperparameter: scalar, or an array whose first entry is
 * layer 0's (llama.cpp reads head counts either way). *nonzero counts the
 * layers of the first n_layer whose value is not 0 (-1 for a scalar). */
static int kv_layer_int(const dsq_gguf *g, const char *arch, const char *suffix, int fallback, int n_layer,
                        int *nonzero)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const dsq_gguf_value *v = dsq_gguf_get(g, key);
    if (nonzero) *nonzero = -1;
    if (!v) return fallback;
    int64_t x;
    if (v->type == DSQ_GGUF_ARRAY) {
        if (!arr_int(&v->v.arr, 0, &x)) return fallback;
        for (int i = 0; nonzero && i < n_layer; i++) {
            int64_t y = 0;
            if (i == 0) *nonzero = 0;
            if (arr_int(&v->v.arr, (uint64_t)i, &y) && y != 0) (*nonzero)++;
        }
    } else if (!val_int(v, &x)) {
        return fallback;
    }
    return x < 0 || x > 1 << 20 ? fallback : (int)x;
}

/* 1 + the largest N of the "blk.N." names: the layer count of an
 * architecture whose block_count key we do not find. */
static int layers_from_names(const qsrc *s)
{
    int n = 0;
    for (size_t i = 0; i < s->n; i++) {
        int layer;
        if (sscanf(s->mt[i].name, "blk.%d.", &layer) == 1 && layer >= 0 && layer < 1 << 20 && layer + 1 > n)
            n = layer + 1;
    }
    return n;
}

/* The facts llama.cpp's load_hparams gives llama_tensor_get_type, read the
 * generic way ({arch}.block_count, ...) so any architecture can be planned. */
static void model_from_gguf(qsrc *s)
{
    const dsq_gguf *g = s->g;
    const char *arch = NULL;
    if (!dsq_gguf_find_str(g, "general.architecture", &arch)) arch = NULL;
    snprintf(s->arch, sizeof s->arch, "%s", arch ? arch : "");
    dsq_mix_model *m = &s->model;
    memset(m, 0, sizeof *m);
    m->arch = arch ? s->arch : NULL;
    m->n_layer = kv_layer_int(g, s->arch, "block_count", -1, 0, NULL);
    if (m->n_layer < 0) m->n_layer = layers_from_names(s);
    m->n_head = kv_layer_int(g, s->arch, "attention.head_count", 0, m->n_layer, NULL);
    int kv_layers;
    m->n_head_kv = kv_layer_int(g, s->arch, "attention.head_count_kv", m->n_head, m->n_layer, &kv_layers);
    m->n_expert = kv_layer_int(g, s->arch, "expert_count", 0, 0, NULL);
    m->n_attn_layer = kv_layers >= 0 ? kv_layers : 0;
    /* llama_model_has_encoder: T5's attention tensors come three per layer. */
    if (!strcmp(s->arch, "t5") || !strcmp(s->arch, "t5encoder"))
        m->n_attn_layer = 3 * (m->n_attn_layer ? m->n_attn_layer : m->n_layer);
    m->is_70b = dsq_mix_guess_70b(m->arch, m->n_layer, m->n_head, m->n_head_kv, m->n_expert);
}

static dsq_status src_open_gguf(qsrc *s)
{
    DSQ_TRY(dsq_gguf_open(s->path, &s->g));
    DSQ_TRY(src_alloc(s, (size_t)s->g->n_tensors));
    for (size_t i = 0; i < s->n; i++) {
        const dsq_gguf_tensor_info *ti = &s->g->tensors[i];
        dsq_mix_tensor *t = &s->mt[i];
        if (ti->n_dims > 4)
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: tensor %s has %u dimensions (llama-quantize handles up to 4)",
                            s->path, ti->name, ti->n_dims);
        t->name = ti->name;
        t->type = s->stored[i] = ti->type;
        t->n_dims = ti->n_dims > 0 ? (int)ti->n_dims : 1;
        for (int d = 0; d < 4; d++) t->ne[d] = d < (int)ti->n_dims ? ti->ne[d] : 1;
    }
    model_from_gguf(s);
    return DSQ_OK;
}

/* The type a HF tensor counts as stored in (see the header). */
static dsq_type hf_virtual_type(const dsq_hf_source_tensor *t)
{
    if (t->keep_f32) return DSQ_TYPE_F32;
    if (t->src_type == DSQ_TYPE_F16 || t->src_type == DSQ_TYPE_BF16) return t->src_type;
    return DSQ_TYPE_F32;
}

static dsq_status src_open_hf(qsrc *s)
{
    DSQ_TRY(dsq_hf_source_open(s->path, DSQ_CONVERT_F32, &s->hf));
    DSQ_TRY(src_alloc(s, dsq_hf_source_count(s->hf)));
    for (size_t i = 0; i < s->n; i++) {
        const dsq_hf_source_tensor *h = dsq_hf_source_tensor_at(s->hf, i);
        dsq_mix_tensor *t = &s->mt[i];
        if (h->n_dims > 4)
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: tensor %s has %d dimensions (up to 4 handled)", s->path,
                            h->name, h->n_dims);
        t->name = h->name;
        t->type = hf_virtual_type(h);
        s->stored[i] = h->src_type;
        t->n_dims = h->n_dims;
        for (int d = 0; d < 4; d++) t->ne[d] = d < h->n_dims ? h->shape[h->n_dims - 1 - d] : 1;
    }
    const dsq_arch *a = dsq_hf_source_arch(s->hf);
    snprintf(s->arch, sizeof s->arch, "%s", dsq_arch_gguf_name(a));
    bool mla = a->family == DSQ_ARCH_DEEPSEEK2; /* its GGUF: one KV head, n_routed experts */
    s->model = (dsq_mix_model){.arch = s->arch,
                               .n_layer = (int)a->n_layers,
                               .n_head = (int)a->n_heads,
                               .n_head_kv = mla ? 1 : (int)a->n_kv_heads,
                               .n_expert = mla ? (int)a->moe.n_routed : 0};
    s->model.is_70b = dsq_mix_guess_70b(s->arch, s->model.n_layer, s->model.n_head, s->model.n_head_kv, 0);
    return DSQ_OK;
}

static dsq_status src_open(qsrc *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    if (dsq_is_dir(path)) return src_open_hf(s);
    if (!dsq_exists(path)) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: no such file or folder", path);
    return src_open_gguf(s);
}

/* ---------------------------------------------------------------- the run */

typedef struct qrun {
    const char *out;
    const dsq_gguf_quantize_options *opt;
    const dsq_imatrix *im; /* NULL, or one with entries */
    dsq_imatrix *im_owned;
    qsrc src;
    dsq_mix_choice *choice;
    size_t *order;
    int threads;
    float *f32;          /* one tensor's values */
    uint64_t f32_cap;    /* elements */
    uint8_t *qbuf;       /* its output bytes */
    uint64_t q_cap;
    uint8_t *qbuf_out;   /* the previous tensor's, being written meanwhile */
    uint64_t q_cap_out;
    dsq_bgwrite *bg;     /* the writes of quantized tensors, on a thread of their own */
    dsq_gguf_quantize_report *rep;
    bool quiet; /* the plan alone: its warnings come again with the file */
} qrun;

static void run_free(qrun *r)
{
    free(r->choice);
    free(r->order);
    free(r->f32);
    free(r->qbuf);
    free(r->qbuf_out);
    dsq_imatrix_free(r->im_owned);
    src_close(&r->src);
    dsq_gguf_quantize_report_free(r->rep);
}

static uint64_t nelems_of(const dsq_mix_tensor *t)
{
    return (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
}

static bool can_read(dsq_type t)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    if (!ti) return false;
    if (!ti->quantized) return t == DSQ_TYPE_F32 || t == DSQ_TYPE_F16 || t == DSQ_TYPE_BF16;
    const dsq_qtype *q = dsq_qtype_get(t);
    return q && q->dequantize_row;
}

static bool can_write(dsq_type t)
{
    if (t == DSQ_TYPE_F32 || t == DSQ_TYPE_F16 || t == DSQ_TYPE_BF16) return true;
    const dsq_qtype *q = dsq_qtype_get(t);
    return q && q->quantize_row;
}

/* The types this program can produce, for messages (Q8_1 / Q8_K are
 * activation types, never weights). */
typedef struct type_list {
    char s[256];
} type_list;

static type_list writable_types(void)
{
    type_list l = {""};
    size_t used = 0;
    for (int t = 0; t < DSQ_GGML_TYPE_LIMIT && used < sizeof l.s; t++) {
        if (!dsq_type_get(t) || !can_write((dsq_type)t) || t == DSQ_TYPE_Q8_1 || t == DSQ_TYPE_Q8_K) continue;
        used += (size_t)snprintf(l.s + used, sizeof l.s - used, "%s%s", used ? ", " : "", dsq_type_name((dsq_type)t));
    }
    return l;
}

static dsq_status check_options(const dsq_gguf_quantize_options *o)
{
    dsq_type def;
    DSQ_TRY(dsq_ftype_default_type(o->ftype, &def));
    const dsq_type ov[2] = {o->output_type, o->token_embd_type};
    static const char *const what[2] = {"--output-type", "--token-embedding-type"};
    for (int i = 0; i < 2; i++) {
        if (ov[i] == DSQ_MIX_NO_TYPE) continue;
        if (!dsq_type_is_ggml(ov[i]) || !can_write(ov[i]))
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s %s: cannot produce this type (valid: %s)", what[i],
                            dsq_type_name(ov[i]), writable_types().s);
    }
    if (o->n_threads < 0) return dsq_fail(DSQ_ERR_ARG, "thread count %d is negative", o->n_threads);
    return DSQ_OK;
}

static dsq_status load_imatrix(qrun *r)
{
    const dsq_gguf_quantize_options *o = r->opt;
    const dsq_imatrix *im = o->imatrix;
    if (!im && o->imatrix_file) {
        DSQ_TRY(dsq_imatrix_load(o->imatrix_file, &r->im_owned));
        im = r->im_owned;
    }
    if (!im) return DSQ_OK;
    /* quantize.cpp passes no imatrix at all when none is left after filtering. */
    if (im->n_entries == 0) {
        DSQ_LOGW("importance matrix has no entries; quantizing without one");
        return DSQ_OK;
    }
    r->im = im;
    if (!r->quiet)
        DSQ_LOGI("importance matrix %s: %zu entries, dataset '%s', %d chunks", o->imatrix_file ? o->imatrix_file : "(given)",
             im->n_entries, im->dataset ? im->dataset : "", (int)im->last_chunk);
    return DSQ_OK;
}

/* After the mix: refuse what cannot be done before anything is written. */
static dsq_status check_plan(const qrun *r)
{
    int n_requant = 0;
    for (size_t i = 0; i < r->src.n; i++) {
        const dsq_mix_tensor *t = &r->src.mt[i];
        const dsq_mix_choice *c = &r->choice[i];
        if (!c->quantize) continue;
        if (!can_read(t->type))
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "tensor %s: type %s cannot be dequantized", t->name,
                            dsq_type_name(t->type));
        if (!can_write(c->type))
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "tensor %s: type %s cannot be produced (valid: %s)", t->name,
                            dsq_type_name(c->type), writable_types().s);
        if (dsq_type_get((int)t->type)->quantized) n_requant++;
    }
    if (n_requant)
        DSQ_LOGW("requantizing %d already quantized tensor(s): quality is worse than quantizing from 16 or 32 bits",
                 n_requant);
    return DSQ_OK;
}

static int find_tensor(const qsrc *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->mt[i].name, name)) return (int)i;
    return -1;
}

/* The per-tensor types over the mix (opt->tensor_types). */
static dsq_status apply_tensor_types(qrun *r)
{
    const dsq_gguf_quantize_options *o = r->opt;
    for (size_t k = 0; k < o->n_tensor_types; k++) {
        const dsq_gguf_tensor_type *tt = &o->tensor_types[k];
        int i = tt->name ? find_tensor(&r->src, tt->name) : -1;
        if (i < 0) return dsq_fail(DSQ_ERR_ARG, "tensor type for %s: no such tensor in %s", tt->name ? tt->name : "(null)", r->src.path);
        const dsq_mix_tensor *t = &r->src.mt[i];
        const dsq_type_info *ti = dsq_type_is_ggml(tt->type) ? dsq_type_get((int)tt->type) : NULL;
        if (!ti || (tt->type != r->src.stored[i] && !can_write(tt->type)))
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "tensor %s: type %s cannot be produced (valid: %s)", t->name,
                            ti ? dsq_type_name(tt->type) : "?", writable_types().s);
        if (t->ne[0] % ti->block_elems != 0)
            return dsq_fail(DSQ_ERR_ARG, "tensor %s: rows of %lld are not whole %s blocks of %d", t->name,
                            (long long)t->ne[0], dsq_type_name(tt->type), (int)ti->block_elems);
        dsq_mix_choice *c = &r->choice[i];
        c->type = tt->type;
        c->quantize = tt->type != t->type;
        c->fallback = false;
        snprintf(c->reason, sizeof c->reason, "tensor type -> %s", dsq_type_name(tt->type));
    }
    return DSQ_OK;
}

static dsq_status plan(qrun *r)
{
    const dsq_gguf_quantize_options *o = r->opt;
    dsq_mix_options mo = dsq_mix_options_default(o->ftype);
    mo.pure = o->pure;
    mo.leave_output = o->leave_output;
    mo.output_type = o->output_type;
    mo.token_embd_type = o->token_embd_type;
    mo.has_imatrix = r->im != NULL;
    mo.allow_requantize = o->allow_requantize;
    mo.quiet = r->quiet || o->n_tensor_types > 0; /* the mix's fallbacks may all be overridden */
    size_t n = r->src.n;
    r->choice = calloc(n ? n : 1, sizeof *r->choice);
    r->order = calloc(n ? n : 1, sizeof *r->order);
    if (!r->choice || !r->order) return dsq_fail(DSQ_ERR_NOMEM, "out of memory planning %zu tensors", n);
    if (n == 0) return dsq_fail(DSQ_ERR_FORMAT, "%s: no tensors to quantize", r->src.path);
    DSQ_TRY(dsq_mix_plan(&r->src.model, &mo, r->src.mt, n, r->choice, NULL));
    DSQ_TRY(apply_tensor_types(r));
    DSQ_TRY(dsq_mix_order(r->src.mt, n, r->order));
    return check_plan(r);
}

static dsq_status write_kvs(const qrun *r, dsq_gguf_writer *w)
{
    if (r->src.hf) {
        DSQ_TRY(dsq_hf_source_write_kvs(r->src.hf, w));
    } else {
        for (uint64_t i = 0; i < r->src.g->n_kv; i++)
            DSQ_TRY(dsq_gguf_set(w, r->src.g->kv[i].key, &r->src.g->kv[i].value));
    }
    DSQ_TRY(dsq_gguf_set_u32(w, "general.quantization_version", QNT_VERSION));
    DSQ_TRY(dsq_gguf_set_u32(w, "general.file_type", (uint32_t)r->opt->ftype));
    static const char *const split_keys[] = {"split.no", "split.count", "split.tensors.count"};
    for (size_t i = 0; i < 3; i++)
        if (dsq_gguf_writer_has(w, split_keys[i])) DSQ_TRY(dsq_gguf_remove(w, split_keys[i]));
    if (!r->im) return DSQ_OK;
    DSQ_TRY(dsq_gguf_set_str(w, KEY_IMATRIX_FILE, r->opt->imatrix_file ? r->opt->imatrix_file : ""));
    if (r->im->dataset && r->im->dataset[0]) DSQ_TRY(dsq_gguf_set_str(w, KEY_IMATRIX_DATASET, r->im->dataset));
    DSQ_TRY(dsq_gguf_set_i32(w, KEY_IMATRIX_ENTRIES, (int32_t)r->im->n_entries));
    if (r->im->last_chunk > 0) DSQ_TRY(dsq_gguf_set_i32(w, KEY_IMATRIX_CHUNKS, r->im->last_chunk));
    return DSQ_OK;
}

static dsq_status add_tensors(const qrun *r, dsq_gguf_writer *w)
{
    for (size_t k = 0; k < r->src.n; k++) {
        size_t i = r->order[k];
        const dsq_mix_tensor *t = &r->src.mt[i];
        int64_t shape[4];
        for (int d = 0; d < t->n_dims; d++) shape[d] = t->ne[t->n_dims - 1 - d];
        DSQ_TRY(dsq_gguf_add_tensor(w, t->name, r->choice[i].type, t->n_dims, shape));
    }
    return DSQ_OK;
}

/* ---------------------------------------------------------------- one tensor */

static dsq_status grow(void **buf, uint64_t *cap, uint64_t n, size_t elem, const char *name)
{
    if (n <= *cap) return DSQ_OK;
    if (n > SIZE_MAX / elem) return dsq_fail(DSQ_ERR_NOMEM, "tensor %s does not fit in memory", name);
    free(*buf);
    *buf = malloc((size_t)n * elem);
    *cap = *buf ? n : 0;
    if (!*buf) return dsq_fail(DSQ_ERR_NOMEM, "tensor %s: out of memory for %llu bytes", name,
                               (unsigned long long)(n * elem));
    return DSQ_OK;
}

/* Rows [row0, row0 + nrows) of a tensor, x pointing at row0. */
static dsq_status check_finite(const char *name, const float *x, int64_t ne0, int64_t row0, int64_t nrows)
{
    const int64_t i = dsq_find_nonfinite(x, nrows * ne0);
    if (i >= 0)
        return dsq_fail(DSQ_ERR_NUMERIC, "tensor %s: row %lld, column %lld: value is %s (weights must be finite)", name,
                        (long long)(row0 + i / ne0), (long long)(i % ne0), isnan(x[i]) ? "NaN" : "Inf");
    return DSQ_OK;
}

/* The whole tensor as F32: straight from the mmap when it is stored so,
 * else dequantized (or fetched from the HF source) into r->f32. */
static dsq_status load_f32(qrun *r, size_t i, const float **out)
{
    const dsq_mix_tensor *t = &r->src.mt[i];
    uint64_t n = nelems_of(t);
    if (r->src.hf) {
        DSQ_TRY(grow((void **)&r->f32, &r->f32_cap, n, sizeof(float), t->name));
        DSQ_TRY(dsq_hf_source_fetch_f32(r->src.hf, i, r->f32));
        *out = r->f32;
        return DSQ_OK;
    }
    dsq_tensor v;
    DSQ_TRY(dsq_gguf_tensor(r->src.g, i, &v));
    if (v.type == DSQ_TYPE_F32 && (uintptr_t)v.data % sizeof(float) == 0) {
        *out = v.data;
        return DSQ_OK;
    }
    DSQ_TRY(grow((void **)&r->f32, &r->f32_cap, n, sizeof(float), t->name));
    dsq_status st = dsq_dequantize(v.type, v.data, r->f32, (int64_t)(n / (uint64_t)t->ne[0]), t->ne[0]);
    dsq_release_pages(v.data, v.nbytes);
    if (st != DSQ_OK) return dsq_fail_context(st, "tensor %s", t->name);
    *out = r->f32;
    return DSQ_OK;
}

typedef struct qjobs {
    dsq_type type;
    const float *src;
    uint8_t *dst;
    int64_t ne0, ne1, ne2; /* rows of one matrix, matrices per imatrix period */
    size_t row_bytes;
    int64_t rows_per_job, jobs_per_matrix;
    const float *imatrix; /* ne0 x ne2 values, or NULL */
} qjobs;

static dsq_status run_job(const qjobs *q, int64_t j)
{
    int64_t m = j / q->jobs_per_matrix;
    int64_t r0 = (j % q->jobs_per_matrix) * q->rows_per_job;
    int64_t nr = q->ne1 - r0 < q->rows_per_job ? q->ne1 - r0 : q->rows_per_job;
    int64_t row = m * q->ne1 + r0;
    /* Each expert of a 3-D tensor has its own importance slice (llama.cpp's i03 loop). */
    const float *qw = q->imatrix ? q->imatrix + (m % q->ne2) * q->ne0 : NULL;
    const float *x = q->src + row * q->ne0;
    /* The tensor's finiteness check is dsq_quantize's own scan of the job's
     * rows, just before it quantizes them (they come from memory once; a
     * pass of its own over the tensor read them twice). Its position counts
     * from the job's first row: on that failure alone it is found again and
     * named from the tensor's. */
    dsq_status st = dsq_quantize(q->type, x, q->dst + (size_t)row * q->row_bytes, nr, q->ne0, qw);
    const int64_t bad = st == DSQ_ERR_NUMERIC ? dsq_find_nonfinite(x, nr * q->ne0) : -1;
    if (bad >= 0)
        return dsq_fail(DSQ_ERR_NUMERIC, "row %lld, column %lld: value is %s (weights must be finite)",
                        (long long)(row + bad / q->ne0), (long long)(bad % q->ne0), isnan(x[bad]) ? "NaN" : "Inf");
    return st;
}

/* Rows split in jobs that never straddle two matrices; each job writes its
 * own rows, so the bytes do not depend on the threads or the schedule. The
 * error reported is the lowest failing job's, so a tensor with several bad
 * values names the first one, whatever the threads. */
static dsq_status quantize_parallel(const qrun *r, const char *name, qjobs *q, int64_t n_matrices)
{
    q->rows_per_job = (MIN_JOB_ELEMS + q->ne0 - 1) / q->ne0;
    q->jobs_per_matrix = (q->ne1 + q->rows_per_job - 1) / q->rows_per_job;
    int64_t n_jobs = n_matrices * q->jobs_per_matrix;
    int64_t bad_job = INT64_MAX;
    dsq_status bad = DSQ_OK;
    char msg[512] = "";
#pragma omp parallel for schedule(dynamic, 1) num_threads(r->threads) if (n_jobs > 1)
    for (int64_t j = 0; j < n_jobs; j++) {
        dsq_status st = run_job(q, j);
        if (st != DSQ_OK) {
#pragma omp critical(dsq_gguf_quantize_error)
            if (j < bad_job) {
                bad_job = j;
                bad = st;
                snprintf(msg, sizeof msg, "%s", dsq_errmsg());
            }
        }
    }
    if (bad != DSQ_OK) return dsq_fail(bad, "tensor %s: %s", name, msg);
    return DSQ_OK;
}

/* Quantizes F32 values x of tensor i to its planned type into r->qbuf. */
static dsq_status quantize_tensor(qrun *r, size_t i, const float *x, dsq_type type, uint64_t out_bytes,
                                  const float *imatrix)
{
    const dsq_mix_tensor *t = &r->src.mt[i];
    DSQ_TRY(grow((void **)&r->qbuf, &r->q_cap, out_bytes, 1, t->name));
    uint64_t row_bytes;
    DSQ_TRY(dsq_type_nbytes(type, (uint64_t)t->ne[0], &row_bytes));
    qjobs q = {.type = type,
               .src = x,
               .dst = r->qbuf,
               .ne0 = t->ne[0],
               .ne1 = t->ne[1],
               .ne2 = t->ne[2],
               .row_bytes = (size_t)row_bytes,
               .imatrix = imatrix};
    return quantize_parallel(r, t->name, &q, t->ne[2] * t->ne[3]);
}

/* Bytes that must reach the file in order with the background writes: after
 * them, written here. */
static dsq_status write_now(qrun *r, dsq_gguf_writer *w, const void *p, uint64_t n)
{
    DSQ_TRY(dsq_bgwrite_wait(r->bg));
    return dsq_gguf_writer_write(w, p, n);
}

/* The quantized tensor in r->qbuf goes to the writer thread; the next tensor
 * is quantized into the other buffer meanwhile. */
static dsq_status write_quantized(qrun *r, uint64_t n)
{
    DSQ_TRY(dsq_bgwrite_submit(r->bg, r->qbuf, n));
    uint8_t *b = r->qbuf;
    uint64_t c = r->q_cap;
    r->qbuf = r->qbuf_out, r->q_cap = r->q_cap_out;
    r->qbuf_out = b, r->q_cap_out = c;
    return DSQ_OK;
}

static dsq_status bg_write(void *w, const void *buf, uint64_t n) { return dsq_gguf_writer_write(w, buf, n); }

/* A GGUF tensor that keeps its type: checked like llama.cpp's loader checks
 * every tensor (values must be finite), then copied byte for byte. */
static dsq_status copy_gguf_tensor(qrun *r, size_t i, dsq_gguf_writer *w)
{
    const dsq_mix_tensor *t = &r->src.mt[i];
    dsq_tensor v;
    DSQ_TRY(dsq_gguf_tensor(r->src.g, i, &v));
    if (can_read(v.type)) {
        const dsq_type_info *ti = dsq_type_get((int)v.type);
        size_t row_bytes = (size_t)(t->ne[0] / ti->block_elems) * ti->block_bytes;
        int64_t nrows = (int64_t)(nelems_of(t) / (uint64_t)t->ne[0]);
        DSQ_TRY(grow((void **)&r->f32, &r->f32_cap, (uint64_t)t->ne[0], sizeof(float), t->name));
        for (int64_t row = 0; row < nrows; row++) {
            DSQ_TRY(dsq_dequantize(v.type, (const uint8_t *)v.data + (size_t)row * row_bytes, r->f32, 1, t->ne[0]));
            DSQ_TRY(check_finite(t->name, r->f32, t->ne[0], row, 1));
        }
    } else {
        DSQ_LOGD("tensor %s: type %s copied without a value check", t->name, dsq_type_name(v.type));
    }
    const uint8_t *p = v.data;
    for (uint64_t off = 0; off < v.nbytes; off += COPY_BYTES) {
        uint64_t len = v.nbytes - off < COPY_BYTES ? v.nbytes - off : COPY_BYTES;
        DSQ_TRY(write_now(r, w, p + off, len));
        dsq_release_pages(p + off, len);
    }
    return DSQ_OK;
}

/* llama.cpp refuses a very low-bit type without importance weights; of the
 * types we produce that is Q2_K under Q2_K_S (token_embd excepted). */
static dsq_status check_low_bit(const qrun *r, const char *name, dsq_type type, const float *imatrix)
{
    if (imatrix || type != DSQ_TYPE_Q2_K || r->opt->ftype != DSQ_FTYPE_Q2_K_S || !strcmp(name, "token_embd.weight"))
        return DSQ_OK;
    return dsq_fail(DSQ_ERR_ARG, "tensor %s: missing importance matrix entry in a very low-bit quantization (Q2_K_S)",
                    name);
}

/* Converts or quantizes tensor i and hands its bytes to the writer. */
static dsq_status emit_tensor(qrun *r, size_t i, dsq_gguf_writer *w, dsq_gguf_quantize_tensor *rt)
{
    const dsq_mix_tensor *t = &r->src.mt[i];
    const dsq_mix_choice *c = &r->choice[i];
    const float *imatrix = NULL;
    if (c->quantize && r->im) DSQ_TRY(dsq_imatrix_for_tensor(r->im, t->name, t->ne[0], t->ne[2], &imatrix));
    /* asked first for every tensor: AWQ's folded norms keep their type */
    if (r->opt->provider) {
        const void *bytes = NULL;
        DSQ_TRY(r->opt->provider->get(r->opt->provider->user, t->name, c->type, rt->bytes_out, &bytes));
        if (bytes) {
            rt->provided = true;
            rt->imatrix = imatrix != NULL;
            return write_now(r, w, bytes, rt->bytes_out);
        }
    }
    if (!c->quantize && r->src.g) return copy_gguf_tensor(r, i, w);
    if (c->quantize) DSQ_TRY(check_low_bit(r, t->name, c->type, imatrix));
    rt->imatrix = imatrix != NULL;
    const float *x = NULL;
    DSQ_TRY(load_f32(r, i, &x));
    uint64_t n = nelems_of(t);
    /* A HF tensor that keeps its type: already F32, or converted like the rest. */
    if (c->type == DSQ_TYPE_F32) {
        DSQ_TRY(check_finite(t->name, x, t->ne[0], 0, (int64_t)(n / (uint64_t)t->ne[0])));
        return write_now(r, w, x, n * sizeof(float));
    }
    DSQ_TRY(quantize_tensor(r, i, x, c->type, rt->bytes_out, imatrix));
    if (r->src.g) {
        dsq_tensor v;
        if (dsq_gguf_tensor(r->src.g, i, &v) == DSQ_OK) dsq_release_pages(v.data, v.nbytes);
    }
    return write_quantized(r, rt->bytes_out);
}

static void format_shape(const dsq_mix_tensor *t, char *buf, size_t cap)
{
    size_t used = 0;
    for (int d = 0; d < t->n_dims && used < cap; d++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", d ? "x" : "", (long long)t->ne[d]);
}

static void log_tensor(size_t k, size_t n, const dsq_mix_tensor *t, const dsq_gguf_quantize_tensor *rt)
{
    char shape[96] = "";
    format_shape(t, shape, sizeof shape);
    DSQ_LOGI("[%zu/%zu] %-36s %-5s -> %-6s %-16s %9.3f MB -> %9.3f MB%s%s%s%s%s", k, n, t->name,
             dsq_type_name(rt->type_in), dsq_type_name(rt->type_out), shape, (double)rt->bytes_in / 1e6,
             (double)rt->bytes_out / 1e6, rt->fallback ? "  (fallback: " : "", rt->fallback ? rt->reason : "",
             rt->fallback ? ")" : "", rt->imatrix ? "  [imatrix]" : "", rt->provided ? "  [calibrated]" : "");
}

static dsq_status fill_record(const qrun *r, size_t i, dsq_gguf_quantize_tensor *rt)
{
    const dsq_mix_tensor *t = &r->src.mt[i];
    const dsq_mix_choice *c = &r->choice[i];
    if (!(rt->name = strdup(t->name))) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    rt->type_in = r->src.stored[i];
    rt->type_out = c->type;
    rt->n_dims = t->n_dims;
    memcpy(rt->ne, t->ne, sizeof rt->ne);
    rt->quantized = c->quantize;
    rt->fallback = c->fallback;
    snprintf(rt->reason, sizeof rt->reason, "%s", c->reason);
    uint64_t n = nelems_of(t);
    DSQ_TRY(dsq_type_nbytes(rt->type_in, n, &rt->bytes_in));
    return dsq_type_nbytes(rt->type_out, n, &rt->bytes_out);
}

static dsq_status emit_all(qrun *r, dsq_gguf_writer *w)
{
    dsq_gguf_quantize_report *rep = r->rep;
    for (size_t k = 0; k < r->src.n; k++) {
        size_t i = r->order[k];
        dsq_gguf_quantize_tensor *rt = &rep->tensors[k];
        DSQ_TRY(fill_record(r, i, rt));
        rep->n_tensors = k + 1;
        DSQ_TRY(emit_tensor(r, i, w, rt));
        rep->n_elements += nelems_of(&r->src.mt[i]);
        rep->bytes_in += rt->bytes_in;
        rep->bytes_out += rt->bytes_out;
        rep->n_quantized += rt->quantized;
        rep->n_copied += !rt->quantized;
        rep->n_fallback += rt->fallback;
        rep->n_imatrix += rt->imatrix;
        rep->n_provided += rt->provided && rt->quantized; /* not AWQ's norms */
        log_tensor(k + 1, r->src.n, &r->src.mt[i], rt);
    }
    return DSQ_OK;
}

static dsq_status new_report(qrun *r)
{
    r->rep = calloc(1, sizeof *r->rep);
    if (r->rep) r->rep->tensors = calloc(r->src.n, sizeof *r->rep->tensors);
    if (!r->rep || !r->rep->tensors) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    r->rep->ftype = r->opt->ftype;
    return DSQ_OK;
}

/* The header and tensor infos in a writer, and the file's size from them. */
static dsq_status lay_out(qrun *r, dsq_gguf_writer *w)
{
    DSQ_TRY(write_kvs(r, w));
    DSQ_TRY(add_tensors(r, w));
    uint64_t data;
    DSQ_TRY(dsq_gguf_writer_layout(w, &r->rep->header_bytes, &data, &r->rep->alignment));
    r->rep->file_bytes = r->rep->header_bytes + data;
    return DSQ_OK;
}

static dsq_status write_output(qrun *r, dsq_gguf_writer **wp)
{
    DSQ_TRY(dsq_gguf_writer_new(wp));
    DSQ_TRY(new_report(r));
    DSQ_TRY(lay_out(r, *wp));
    /* A model's worth of bytes: not copied into the page cache (the copy cost
     * as much as a quantizer), and waiting on the disk on the writer thread. */
    dsq_gguf_writer_set_direct(*wp, true);
    DSQ_TRY(dsq_gguf_writer_begin(*wp, r->out, r->opt->overwrite));
    DSQ_TRY(dsq_bgwrite_start(&r->bg, bg_write, *wp));
    DSQ_TRY(emit_all(r, *wp));
    DSQ_TRY(dsq_bgwrite_wait(r->bg));
    return dsq_gguf_writer_finish(*wp);
}

static void log_totals(const dsq_gguf_quantize_report *rep)
{
    double bpw = rep->n_elements ? (double)rep->bytes_out * 8.0 / (double)rep->n_elements : 0.0;
    DSQ_LOGI("%zu tensors (%d quantized, %d copied, %d fallback, %d with imatrix): %.2f MB -> %.2f MB, "
             "%.2f bits per weight, %.2f s",
             rep->n_tensors, rep->n_quantized, rep->n_copied, rep->n_fallback, rep->n_imatrix,
             (double)rep->bytes_in / 1e6, (double)rep->bytes_out / 1e6, bpw, rep->seconds);
}

static dsq_status check_output_path(const char *in, const char *out, bool overwrite)
{
    if (dsq_path_is_open_input(out))
        return dsq_fail(DSQ_ERR_ARG, "%s: output would overwrite the input %s", out, in);
    if (dsq_is_dir(out)) return dsq_fail(DSQ_ERR_EXISTS, "%s: is a folder (the GGUF output is a file)", out);
    if (!overwrite && dsq_exists(out))
        return dsq_fail(DSQ_ERR_EXISTS, "%s: already exists (use --force to replace it)", out);
    return DSQ_OK;
}

static dsq_status run(qrun *r, const char *in)
{
    double t0 = dsq_now_s();
    DSQ_TRY(check_options(r->opt));
    DSQ_TRY(src_open(&r->src, in));
    DSQ_TRY(check_output_path(in, r->out, r->opt->overwrite));
    DSQ_TRY(load_imatrix(r));
    r->threads = r->opt->n_threads > 0 ? r->opt->n_threads : omp_get_num_procs();
    DSQ_LOGI("%s -> %s as %s (%s, %zu tensors, %d threads)", in, r->out, dsq_ftype_name(r->opt->ftype),
             r->src.arch[0] ? r->src.arch : "unknown architecture", r->src.n, r->threads);
    DSQ_TRY(plan(r));
    dsq_gguf_writer *w = NULL;
    dsq_status st = write_output(r, &w);
    dsq_bgwrite_stop(r->bg); /* before the writer it writes to goes */
    r->bg = NULL;
    dsq_gguf_writer_free(w); /* after a failure this removes the temporary */
    DSQ_TRY(st);
    r->rep->seconds = dsq_now_s() - t0;
    log_totals(r->rep);
    return DSQ_OK;
}

static dsq_status plan_only(qrun *r, const char *in)
{
    DSQ_TRY(check_options(r->opt));
    DSQ_TRY(src_open(&r->src, in));
    DSQ_TRY(load_imatrix(r));
    DSQ_TRY(plan(r));
    DSQ_TRY(new_report(r));
    dsq_gguf_writer *w = NULL;
    dsq_status st = dsq_gguf_writer_new(&w);
    if (st == DSQ_OK) st = lay_out(r, w);
    dsq_gguf_writer_free(w);
    DSQ_TRY(st);
    for (size_t k = 0; k < r->src.n; k++) {
        dsq_gguf_quantize_tensor *rt = &r->rep->tensors[k];
        DSQ_TRY(fill_record(r, r->order[k], rt));
        r->rep->n_tensors = k + 1;
        r->rep->n_elements += nelems_of(&r->src.mt[r->order[k]]);
        r->rep->bytes_in += rt->bytes_in;
        r->rep->bytes_out += rt->bytes_out;
        r->rep->n_quantized += rt->quantized;
        r->rep->n_copied += !rt->quantized;
        r->rep->n_fallback += rt->fallback;
    }
    return DSQ_OK;
}

static dsq_status visit_all(qrun *r, dsq_gguf_visit_fn fn, void *user)
{
    for (size_t k = 0; k < r->src.n; k++) {
        size_t i = r->order[k];
        const dsq_mix_tensor *t = &r->src.mt[i];
        if (!r->choice[i].quantize) continue;
        dsq_gguf_quantize_tensor rt = {0};
        dsq_status st = fill_record(r, i, &rt);
        const float *imatrix = NULL, *x = NULL;
        if (st == DSQ_OK && r->im) st = dsq_imatrix_for_tensor(r->im, t->name, t->ne[0], t->ne[2], &imatrix);
        rt.imatrix = imatrix != NULL;
        if (st == DSQ_OK) st = load_f32(r, i, &x);
        if (st == DSQ_OK) st = check_finite(t->name, x, t->ne[0], 0, (int64_t)(nelems_of(t) / (uint64_t)t->ne[0]));
        if (st == DSQ_OK) st = fn(user, &rt, x, imatrix);
        if (r->src.g) {
            dsq_tensor v;
            if (dsq_gguf_tensor(r->src.g, i, &v) == DSQ_OK) dsq_release_pages(v.data, v.nbytes);
        }
        free(rt.name);
        DSQ_TRY(st);
    }
    return DSQ_OK;
}

dsq_status dsq_gguf_quantize_visit(const char *in, const dsq_gguf_quantize_options *opt, dsq_gguf_visit_fn fn,
                                   void *user)
{
    if (!in || !opt || !fn) return dsq_fail(DSQ_ERR_ARG, "gguf quantize: input, options and visitor are required");
    qrun r = {.out = "", .opt = opt, .quiet = true};
    dsq_status st = check_options(opt);
    if (st == DSQ_OK) st = src_open(&r.src, in);
    if (st == DSQ_OK) st = load_imatrix(&r);
    if (st == DSQ_OK) st = plan(&r);
    if (st == DSQ_OK) st = visit_all(&r, fn, user);
    run_free(&r);
    return st;
}

dsq_status dsq_gguf_quantize_plan(const char *in, const dsq_gguf_quantize_options *opt,
                                  dsq_gguf_quantize_report **report)
{
    *report = NULL;
    if (!in || !opt) return dsq_fail(DSQ_ERR_ARG, "gguf quantize: input and options are required");
    qrun r = {.out = "", .opt = opt, .quiet = true};
    dsq_status st = plan_only(&r, in);
    if (st == DSQ_OK) {
        *report = r.rep;
        r.rep = NULL;
    }
    run_free(&r);
    return st;
}

dsq_status dsq_gguf_quantize(const char *in, const char *out, const dsq_gguf_quantize_options *opt,
                             dsq_gguf_quantize_report **report)
{
    if (report) *report = NULL;
    if (!in || !out || !opt) return dsq_fail(DSQ_ERR_ARG, "gguf quantize: input, output and options are required");
    qrun r = {.out = out, .opt = opt};
    dsq_status st = run(&r, in);
    if (st == DSQ_OK && report) {
        *report = r.rep;
        r.rep = NULL;
    }
    run_free(&r);
    return st;
}
