/* HF <-> GGUF conversion. Each direction plans every output tensor first (the
 * writers need all tensor infos before data), then streams: a tensor is read
 * from the input mmap, converted chunk by chunk into a reusable buffer and
 * handed to the writer; the input pages are released as soon as they are
 * consumed so resident memory stays near one chunk (or one permuted tensor). */
#include "formats/convert.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/dtype.h"
#include "core/fileio.h"
#include "core/grow.h"
#include "core/log.h"
#include "core/tensor.h"
#include "formats/checkpoint.h"
#include "formats/gguf.h"
#include "formats/hf_cast.h"
#include "formats/hf_config.h"
#include "formats/hf_names.h"
#include "formats/hf_tokenizer.h"
#include "formats/safetensors.h"
#include "quantizers/qtypes.h"
#include "formats/block.h"
#include "formats/block_deepseek.h"

#define NAME_CAP 256
/* Elements per conversion chunk, a multiple of every block size: 8 MB of
 * F16 output, so chunks reach the output file without a buffer copy. */
#define CHUNK_ELEMS (1u << 22)
/* Bytes per write when a tensor is copied unchanged. */
#define COPY_BYTES (16u << 20)

/* gguf-py LlamaFileType values for general.file_type. */
enum { FTYPE_ALL_F32 = 0, FTYPE_MOSTLY_F16 = 1, FTYPE_MOSTLY_BF16 = 32 };

dsq_status dsq_convert_dtype_parse(const char *s, dsq_convert_dtype *out)
{
    static const char *const names[] = {"auto", "f32", "f16", "bf16"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, names[i])) {
            *out = (dsq_convert_dtype)i;
            return DSQ_OK;
        }
    }
    return dsq_fail(DSQ_ERR_ARG, "unknown dtype \"%s\" (expected f32, f16, bf16 or auto)", s);
}

const char *dsq_convert_dtype_name(dsq_convert_dtype d)
{
    switch (d) {
    case DSQ_CONVERT_AUTO: return "auto";
    case DSQ_CONVERT_F32: return "f32";
    case DSQ_CONVERT_F16: return "f16";
    case DSQ_CONVERT_BF16: return "bf16";
    }
    return "?";
}

static dsq_type dtype_to_type(dsq_convert_dtype d)
{
    return d == DSQ_CONVERT_F16 ? DSQ_TYPE_F16 : d == DSQ_CONVERT_BF16 ? DSQ_TYPE_BF16 : DSQ_TYPE_F32;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !memcmp(s + n - m, suffix, m);
}

/* ---------------------------------------------------------------- plan */

typedef struct plan_item {
    uint64_t src;   /* index in the input; UINT64_MAX for a generated tensor */
    char name[NAME_CAP];
    dsq_type src_type; /* input type */
    dsq_type type;  /* output type */
    bool keep_f32;  /* HF -> GGUF: F32 whatever the dtype (1-D, norms, non-weights) */
    dsq_permute_kind perm;
    int n_dims;
    int64_t shape[DSQ_MAX_DIMS];
    uint64_t nbytes; /* output bytes */
    float *generated; /* data of a generated tensor (rope_freqs), owned */
    /* DeepSeek (HF -> GGUF): an op over sources other than a plain copy */
    int op;            /* plan_op */
    uint64_t scale;    /* FP8 source: index of its weight_scale_inv, else UINT64_MAX */
    uint64_t *srcs;    /* OP_STACK: n_srcs sources (and their scales in srcs_scale), owned */
    uint64_t *srcs_scale;
    int64_t n_srcs;
} plan_item;

/* What an item makes of its sources (DeepSeek): the experts stacked into one
 * 3-D tensor, kv_b_proj split into llama.cpp's attn_k_b (per head, keys
 * transposed) and attn_v_b. */
enum plan_op { OP_PLAIN = 0, OP_STACK, OP_KB, OP_VB, OP_UNSTACK, OP_MERGE_KV };

typedef struct plan {
    size_t n, cap;
    plan_item *items;
} plan;

static void plan_free(plan *p)
{
    for (size_t i = 0; i < p->n; i++) {
        free(p->items[i].generated);
        free(p->items[i].srcs);
        free(p->items[i].srcs_scale);
    }
    free(p->items);
    memset(p, 0, sizeof *p);
}

static dsq_status plan_push(plan *p, plan_item **out)
{
    plan_item *items = dsq_grow(p->items, &p->cap, p->n + 1, sizeof *items);
    if (!items) return dsq_fail(DSQ_ERR_NOMEM, "out of memory planning %zu tensors", p->n + 1);
    p->items = items;
    *out = &p->items[p->n++];
    memset(*out, 0, sizeof **out);
    (*out)->scale = UINT64_MAX;
    return DSQ_OK;
}

/* Shape, byte count and, for permuted q/k projections, a row count the
 * permutation can take: refused here, before any file is started (a zero-row
 * k_proj used to reach a division by its rows). */
static dsq_status plan_finish_item(const dsq_arch *a, plan_item *it, const dsq_tensor *src)
{
    it->src_type = src->type;
    it->n_dims = src->n_dims > 0 ? src->n_dims : 1;
    it->shape[0] = 1;
    for (int d = 0; d < src->n_dims; d++) it->shape[d] = src->shape[d];
    uint64_t n;
    if (!dsq_mul_dims(it->shape, it->n_dims, &n))
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: shape overflows", src->name);
    if (dsq_type_nbytes(it->type, n, &it->nbytes) != DSQ_OK)
        return dsq_fail_context(DSQ_ERR_FORMAT, "tensor %s", src->name);
    if (it->perm == DSQ_PERMUTE_NONE) return DSQ_OK;
    if (it->n_dims != 2)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: a q/k projection must be a matrix, not %d-dimensional", src->name,
                        it->n_dims);
    if (dsq_permute_check(a, it->perm, it->shape[0]) != DSQ_OK)
        return dsq_fail_context(DSQ_ERR_FORMAT, "tensor %s", src->name);
    return DSQ_OK;
}

/* The embedding and the output head have vocab_size rows: the vocabulary the
 * tokenizer is sized to (a config that claims 2^24 tokens for a 300-row
 * embedding used to become a GGUF of 16.7 M "[PAD]" tokens). gguf_name is
 * the tensor's GGUF name, file_name what the message calls it. */
static dsq_status check_vocab_rows(const dsq_arch *a, const char *gguf_name, const plan_item *it, const char *file_name)
{
    if (strcmp(gguf_name, "token_embd.weight") != 0 && strcmp(gguf_name, "output.weight") != 0) return DSQ_OK;
    if (a->vocab_size <= 0 || it->shape[0] == a->vocab_size) return DSQ_OK;
    return dsq_fail(DSQ_ERR_FORMAT, "tensor %s has %lld rows but the model's vocab_size is %lld", file_name,
                    (long long)it->shape[0], (long long)a->vocab_size);
}

/* ---------------------------------------------------------------- streaming */

typedef dsq_status (*sink_fn)(void *w, const void *data, uint64_t n);

static dsq_status sink_gguf(void *w, const void *data, uint64_t n) { return dsq_gguf_writer_write(w, data, n); }
static dsq_status sink_st(void *w, const void *data, uint64_t n) { return dsq_st_writer_write(w, data, n); }

typedef struct streamer {
    const dsq_arch *arch;
    bool to_gguf;
    sink_fn sink;
    void *w;
    float *f32;        /* CHUNK_ELEMS floats for dequantized blocks, made on first use */
    uint8_t *chunk;    /* CHUNK_ELEMS output elements */
    uint8_t *whole;    /* a whole permuted tensor */
    uint8_t *scratch;  /* permutation scratch, same size */
    uint64_t whole_cap;
    uint64_t bytes_in, bytes_out;
    const dsq_st_model *st; /* HF -> GGUF: the sources of multi-source items */
    const dsq_gguf *g;      /* GGUF -> HF: the same */
    int fp8_block[2];       /* FP8 sources: rows x cols of a scale block */
} streamer;

static void streamer_free(streamer *s)
{
    free(s->f32);
    free(s->chunk);
    free(s->whole);
    free(s->scratch);
}

static dsq_status streamer_init(streamer *s, const dsq_arch *arch, bool to_gguf, sink_fn sink, void *w)
{
    memset(s, 0, sizeof *s);
    s->arch = arch;
    s->to_gguf = to_gguf;
    s->sink = sink;
    s->w = w;
    s->chunk = malloc((size_t)CHUNK_ELEMS * sizeof(float));
    if (!s->chunk) {
        streamer_free(s);
        return dsq_fail(DSQ_ERR_NOMEM, "out of memory for conversion buffers");
    }
    return DSQ_OK;
}

/* Values that are NaN or Inf, counted on the output encoding's bit patterns. */
static uint64_t count_nonfinite(dsq_type t, const void *data, uint64_t n)
{
    uint64_t bad = 0;
    if (t == DSQ_TYPE_F32) {
        const uint32_t *v = data;
        for (uint64_t i = 0; i < n; i++) bad += (v[i] & 0x7f800000u) == 0x7f800000u;
    } else if (t == DSQ_TYPE_F16) {
        const uint16_t *v = data;
        for (uint64_t i = 0; i < n; i++) bad += (v[i] & 0x7c00u) == 0x7c00u;
    } else if (t == DSQ_TYPE_BF16) {
        const uint16_t *v = data;
        for (uint64_t i = 0; i < n; i++) bad += (v[i] & 0x7f80u) == 0x7f80u;
    }
    return bad;
}

/* Converts elements [off, off+n) of src into dst in type out, n <=
 * CHUNK_ELEMS; for block types off is a multiple of the block size. Serial on
 * purpose: shared with other work on a small machine, OpenMP threads made
 * this I/O-bound loop slower, not faster. */
static dsq_status produce(streamer *s, const dsq_tensor *src, dsq_type out, uint64_t off, uint64_t n, void *dst)
{
    const dsq_type_info *ti = dsq_type_get((int)src->type);
    const uint8_t *p = (const uint8_t *)src->data + off / ti->block_elems * ti->block_bytes;
    dsq_status st;
    if (ti->is_float) {
        st = dsq_convert_row(src->type, p, out, dst, (size_t)n);
    } else if (out == DSQ_TYPE_F32) {
        st = dsq_dequantize(src->type, p, dst, 1, (int64_t)n);
    } else {
        if (!s->f32 && !(s->f32 = malloc((size_t)CHUNK_ELEMS * sizeof(float))))
            return dsq_fail(DSQ_ERR_NOMEM, "out of memory for conversion buffers");
        st = dsq_dequantize(src->type, p, s->f32, 1, (int64_t)n);
        if (st == DSQ_OK) st = dsq_convert_row(DSQ_TYPE_F32, s->f32, out, dst, (size_t)n);
    }
    dsq_release_pages(p, n / ti->block_elems * ti->block_bytes);
    return st;
}

static dsq_status stream_copy(streamer *s, const dsq_tensor *src, uint64_t *bad)
{
    const uint8_t *p = src->data;
    uint32_t es = dsq_type_get((int)src->type)->block_bytes;
    for (uint64_t off = 0; off < src->nbytes; off += COPY_BYTES) {
        uint64_t len = src->nbytes - off < COPY_BYTES ? src->nbytes - off : COPY_BYTES;
        *bad += count_nonfinite(src->type, p + off, len / es);
        DSQ_TRY(s->sink(s->w, p + off, len));
        dsq_release_pages(p + off, len);
    }
    return DSQ_OK;
}

static dsq_status stream_chunked(streamer *s, const dsq_tensor *src, const plan_item *it, uint64_t *bad)
{
    uint64_t n = dsq_tensor_nelems(src);
    uint32_t be = dsq_type_get((int)src->type)->block_elems;
    uint64_t step = CHUNK_ELEMS / be * be;
    uint32_t oes = dsq_type_get((int)it->type)->block_bytes;
    for (uint64_t off = 0; off < n; off += step) {
        uint64_t len = n - off < step ? n - off : step;
        DSQ_TRY(produce(s, src, it->type, off, len, s->chunk));
        *bad += count_nonfinite(it->type, s->chunk, len);
        DSQ_TRY(s->sink(s->w, s->chunk, len * oes));
    }
    return DSQ_OK;
}

static dsq_status grow_whole(streamer *s, uint64_t nbytes)
{
    if (nbytes <= s->whole_cap) return DSQ_OK;
    if (nbytes > SIZE_MAX) return dsq_fail(DSQ_ERR_NOMEM, "tensor of %llu bytes does not fit in memory",
                                           (unsigned long long)nbytes);
    free(s->whole);
    free(s->scratch);
    s->whole = malloc((size_t)nbytes);
    s->scratch = malloc((size_t)nbytes);
    s->whole_cap = s->whole && s->scratch ? nbytes : 0;
    if (!s->whole_cap) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for a %llu-byte tensor", (unsigned long long)nbytes);
    return DSQ_OK;
}

/* The whole tensor converted to `out` (a plain float type) into dst, its
 * rows permuted when the plan says so. scratch: NULL or as big as dst. */
static dsq_status convert_whole(streamer *s, const dsq_tensor *src, const plan_item *it, dsq_type out, void *dst,
                                void *scratch)
{
    uint64_t n = dsq_tensor_nelems(src);
    uint32_t be = dsq_type_get((int)src->type)->block_elems;
    uint64_t step = CHUNK_ELEMS / be * be;
    uint32_t oes = dsq_type_get((int)out)->block_bytes;
    for (uint64_t off = 0; off < n; off += step) {
        uint64_t len = n - off < step ? n - off : step;
        DSQ_TRY(produce(s, src, out, off, len, (uint8_t *)dst + off * oes));
    }
    if (it->perm == DSQ_PERMUTE_NONE) return DSQ_OK;
    int64_t rows = it->shape[0];
    size_t row_bytes = (size_t)(n / (uint64_t)rows * oes);
    return dsq_permute_rows(s->arch, it->perm, s->to_gguf, dst, rows, row_bytes, scratch);
}

/* Q/K projections: the whole tensor is converted, then its rows permuted. */
static dsq_status stream_permuted(streamer *s, const dsq_tensor *src, const plan_item *it, uint64_t *bad)
{
    DSQ_TRY(grow_whole(s, it->nbytes));
    DSQ_TRY(convert_whole(s, src, it, it->type, s->whole, s->scratch));
    *bad += count_nonfinite(it->type, s->whole, dsq_tensor_nelems(src));
    return s->sink(s->w, s->whole, it->nbytes);
}

static dsq_status ds_stream(streamer *s, const plan_item *it, uint64_t *bad);
static bool ds_special(const plan_item *it);

static dsq_status stream_one(streamer *s, const dsq_tensor *src, const plan_item *it)
{
    uint64_t bad = 0;
    dsq_status st;
    if (ds_special(it))
        st = ds_stream(s, it, &bad);
    else if (it->generated)
        st = s->sink(s->w, it->generated, it->nbytes);
    else if (it->perm != DSQ_PERMUTE_NONE)
        st = stream_permuted(s, src, it, &bad);
    else if (src->type == it->type)
        st = stream_copy(s, src, &bad);
    else
        st = stream_chunked(s, src, it, &bad);
    if (st != DSQ_OK) return dsq_fail_context(st, "tensor %s", it->name);
    if (bad)
        DSQ_LOGW("tensor %s: %llu NaN/Inf values (kept as they are; quantizers will refuse them)", it->name,
                 (unsigned long long)bad);
    return DSQ_OK;
}

static void log_progress(uint64_t k, uint64_t n, const plan_item *it, dsq_type src_type, uint64_t in_bytes,
                         double secs)
{
    char shape[96] = "";
    size_t used = 0;
    for (int d = 0; d < it->n_dims && used < sizeof shape; d++)
        used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%lld", d ? "x" : "", (long long)it->shape[d]);
    char rate[32] = "-";
    if (secs > 1e-6) snprintf(rate, sizeof rate, "%.0f MB/s", (double)in_bytes / secs / 1e6);
    DSQ_LOGI("[%llu/%llu] %-44s %-5s -> %-5s %-14s %s", (unsigned long long)k, (unsigned long long)n, it->name,
             dsq_type_name(src_type), dsq_type_name(it->type), shape, rate);
}

typedef dsq_status (*view_fn)(const void *src, uint64_t i, dsq_tensor *out);

/* Streams every planned tensor in order through s. */
static dsq_status stream_all(streamer *s, const plan *p, const void *src, view_fn view)
{
    double t0 = dsq_now_s();
    for (size_t i = 0; i < p->n; i++) {
        const plan_item *it = &p->items[i];
        dsq_tensor t = {.name = it->name, .type = DSQ_TYPE_F32};
        if (!it->generated && it->op == OP_PLAIN) DSQ_TRY(view(src, it->src, &t));
        double t1 = dsq_now_s();
        DSQ_TRY(stream_one(s, &t, it));
        uint64_t in_bytes = it->generated ? it->nbytes : t.nbytes;
        s->bytes_in += in_bytes;
        s->bytes_out += it->nbytes;
        log_progress(i + 1, p->n, it, t.type, in_bytes, dsq_now_s() - t1);
    }
    double secs = dsq_now_s() - t0;
    DSQ_LOGI("converted %zu tensors, %.1f MB in, %.1f MB out, %.2f s (%.0f MB/s)", p->n, (double)s->bytes_in / 1e6,
             (double)s->bytes_out / 1e6, secs, secs > 0 ? (double)s->bytes_in / secs / 1e6 : 0.0);
    return DSQ_OK;
}

static dsq_status view_st(const void *src, uint64_t i, dsq_tensor *out)
{
    return dsq_st_model_view(src, (size_t)i, out);
}
static dsq_status view_gguf(const void *src, uint64_t i, dsq_tensor *out) { return dsq_gguf_tensor(src, i, out); }

/* ---------------------------------------------------------------- DeepSeek */

/* DeepSeek-V2/V3 to GGUF arch deepseek2, after llama.cpp's
 * conversion/deepseek.py (DeepseekV2Model): routed experts stacked per layer
 * into ffn_{down,gate,up}_exps [n_expert, out, in]; kv_b_proj split per head
 * into attn_k_b [H, kv_lora, nope] (the key rows, transposed) and attn_v_b
 * [H, v_head, kv_lora], attn_kv_b not written (llama.cpp's loader refuses
 * extra tensors); e_score_correction_bias as exp_probs_b.bias; the router
 * ffn_gate_inp in F32; MTP layers (index >= num_hidden_layers) skipped; FP8
 * weights dequantized with their block scales on the way. No rope
 * permutation: DeepSeek's rope dims are already in interleaved pairs. */

static dsq_type gguf_tensor_type(const char *gguf_name, int n_dims, dsq_type ftype);
static dsq_status check_vocab_rows(const dsq_arch *a, const char *gguf_name, const plan_item *it, const char *file_name);

static const char *const g_exp_proj[3] = {"down", "gate", "up"}; /* llama.cpp's stacking order */

/* "model.layers.L.mlp.experts.E.<p>_proj.weight" -> L, E, p (index in g_exp_proj). */
static bool expert_name(const char *name, int64_t *l, int64_t *e, int *proj)
{
    long long ll, ee;
    char p[16];
    int used = 0;
    if (sscanf(name, "model.layers.%lld.mlp.experts.%lld.%15[a-z]_proj.weight%n", &ll, &ee, p, &used) != 3 ||
        name[used] != '\0' || ll < 0 || ee < 0)
        return false;
    for (int i = 0; i < 3; i++)
        if (!strcmp(p, g_exp_proj[i])) {
            *l = ll, *e = ee, *proj = i;
            return true;
        }
    return false;
}

/* The layer of "model.layers.L.*", or -1. */
static int64_t layer_of(const char *name)
{
    long long l;
    int used = 0;
    if (sscanf(name, "model.layers.%lld.%n", &l, &used) != 1 || used == 0) return -1;
    return l;
}

/* An FP8 weight's weight_scale_inv, checked against the weight's shape in blocks. */
static dsq_status fp8_scale_of(const dsq_st_model *m, const dsq_tensor *t, const int block[2], uint64_t *out)
{
    *out = UINT64_MAX;
    if (t->type != DSQ_TYPE_F8_E4M3) return DSQ_OK;
    char name[NAME_CAP + 32];
    size_t n = strlen(t->name);
    if (t->n_dims != 2 || n < 7 || !ends_with(t->name, ".weight"))
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: FP8 tensors must be 2-D weights", t->name);
    snprintf(name, sizeof name, "%.*s.weight_scale_inv", (int)(n - 7), t->name);
    int64_t si = dsq_st_model_find(m, name);
    if (si < 0) return dsq_fail(DSQ_ERR_FORMAT, "tensor %s is FP8 but %s (its block scales) is missing", t->name, name);
    dsq_tensor s;
    DSQ_TRY(dsq_st_model_view(m, (size_t)si, &s));
    int64_t r = (t->shape[0] + block[0] - 1) / block[0], c = (t->shape[1] + block[1] - 1) / block[1];
    const dsq_type_info *ti = dsq_type_get((int)s.type);
    if (!ti || !ti->is_float || s.n_dims != 2 || s.shape[0] != r || s.shape[1] != c)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: expected float scales of shape [%lld, %lld] for %s in %dx%d blocks",
                        name, (long long)r, (long long)c, t->name, block[0], block[1]);
    *out = (uint64_t)si;
    return DSQ_OK;
}

static dsq_status ds_item(plan *p, const char *name, dsq_type ftype, int n_dims, const int64_t *shape, plan_item **out)
{
    plan_item *it = NULL;
    DSQ_TRY(plan_push(p, &it));
    snprintf(it->name, sizeof it->name, "%s", name);
    it->type = ftype;
    it->n_dims = n_dims;
    for (int d = 0; d < n_dims; d++) it->shape[d] = shape[d];
    uint64_t n;
    if (!dsq_mul_dims(it->shape, n_dims, &n) || dsq_type_nbytes(it->type, n, &it->nbytes) != DSQ_OK)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: shape overflows", name);
    *out = it;
    return DSQ_OK;
}

/* kv_b_proj [H (nope + v), kv_lora] -> attn_k_b [H, kv_lora, nope] and attn_v_b [H, v, kv_lora]. */
static dsq_status plan_kv_b(const dsq_arch *a, int64_t l, const dsq_tensor *t, uint64_t i, uint64_t scale,
                            dsq_type ftype, plan *p)
{
    int64_t H = a->n_heads, N = a->mla.qk_nope_head_dim, D = a->mla.v_head_dim, L = a->mla.kv_lora_rank;
    if (t->n_dims != 2 || t->shape[0] != H * (N + D) || t->shape[1] != L)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: expected [%lld, %lld] (heads x (nope + v), kv_lora_rank)", t->name,
                        (long long)(H * (N + D)), (long long)L);
    char name[NAME_CAP];
    plan_item *it = NULL;
    snprintf(name, sizeof name, "blk.%lld.attn_k_b.weight", (long long)l);
    DSQ_TRY(ds_item(p, name, ftype, 3, (const int64_t[]){H, L, N}, &it));
    it->src = i, it->scale = scale, it->src_type = t->type, it->op = OP_KB;
    snprintf(name, sizeof name, "blk.%lld.attn_v_b.weight", (long long)l);
    DSQ_TRY(ds_item(p, name, ftype, 3, (const int64_t[]){H, D, L}, &it));
    it->src = i, it->scale = scale, it->src_type = t->type, it->op = OP_VB;
    return DSQ_OK;
}

/* One stacked expert tensor from its n_routed sources (every one required). */
static dsq_status plan_stack(const dsq_arch *a, const dsq_st_model *m, int64_t l, int proj, const uint64_t *src,
                             const uint64_t *scale, dsq_type ftype, plan *p)
{
    int64_t E = a->moe.n_routed;
    for (int64_t e = 0; e < E; e++)
        if (src[e] == UINT64_MAX)
            return dsq_fail(DSQ_ERR_NOT_FOUND, "tensor model.layers.%lld.mlp.experts.%lld.%s_proj.weight is missing "
                                               "(expert %lld of %lld)",
                            (long long)l, (long long)e, g_exp_proj[proj], (long long)e, (long long)E);
    dsq_tensor t;
    DSQ_TRY(dsq_st_model_view(m, (size_t)src[0], &t));
    for (int64_t e = 1; e < E; e++) {
        dsq_tensor u;
        DSQ_TRY(dsq_st_model_view(m, (size_t)src[e], &u));
        if (u.n_dims != 2 || t.n_dims != 2 || u.shape[0] != t.shape[0] || u.shape[1] != t.shape[1] || u.type != t.type)
            return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: shape or type differs from expert 0's", u.name);
    }
    char name[NAME_CAP];
    snprintf(name, sizeof name, "blk.%lld.ffn_%s_exps.weight", (long long)l, g_exp_proj[proj]);
    plan_item *it = NULL;
    DSQ_TRY(ds_item(p, name, ftype, 3, (const int64_t[]){E, t.shape[0], t.shape[1]}, &it));
    it->op = OP_STACK, it->src_type = t.type, it->n_srcs = E;
    it->srcs = malloc((size_t)E * sizeof *it->srcs);
    it->srcs_scale = malloc((size_t)E * sizeof *it->srcs_scale);
    if (!it->srcs || !it->srcs_scale) return dsq_fail(DSQ_ERR_NOMEM, "out of memory planning %s", name);
    memcpy(it->srcs, src, (size_t)E * sizeof *src);
    memcpy(it->srcs_scale, scale, (size_t)E * sizeof *scale);
    return DSQ_OK;
}

/* A plain (mapped) tensor, its FP8 scale noted. */
static dsq_status plan_ds_plain(const dsq_arch *a, const dsq_tensor *t, uint64_t i, uint64_t scale, dsq_type ftype,
                                plan *p)
{
    plan_item *it = NULL;
    DSQ_TRY(plan_push(p, &it));
    it->src = i;
    it->scale = scale;
    if (ends_with(t->name, "." DSQ_DS_ROUTER_BIAS_HF_LEAF)) {
        snprintf(it->name, sizeof it->name, "blk.%lld.%s", (long long)layer_of(t->name), DSQ_DS_ROUTER_BIAS_GGUF);
    } else {
        DSQ_TRY(dsq_name_hf_to_gguf(a, t->name, it->name, sizeof it->name, &it->perm));
    }
    it->type = gguf_tensor_type(it->name, t->n_dims, ftype);
    it->keep_f32 = gguf_tensor_type(it->name, t->n_dims, DSQ_TYPE_COUNT) == DSQ_TYPE_F32;
    DSQ_TRY(plan_finish_item(a, it, t));
    return check_vocab_rows(a, it->name, it, t->name);
}

typedef struct ds_plan {
    const dsq_arch *a;
    const dsq_st_model *m;
    dsq_type ftype;
    int block[2];
    uint64_t *exp, *exp_scale; /* [n_layers x 3 x n_routed] source indices, UINT64_MAX: not seen */
    int64_t n_mtp;
} ds_plan;

static dsq_status ds_one(ds_plan *d, uint64_t i, plan *p)
{
    const dsq_arch *a = d->a;
    dsq_tensor t;
    DSQ_TRY(dsq_st_model_view(d->m, (size_t)i, &t));
    if (ends_with(t.name, ".weight_scale_inv") || ends_with(t.name, ".rotary_emb.inv_freq")) return DSQ_OK;
    if (a->tie_word_embeddings && !strcmp(t.name, "lm_head.weight")) return DSQ_OK;
    int64_t l = layer_of(t.name);
    if (l >= a->n_layers) { /* multi-token-prediction layers: not run by llama.cpp either */
        d->n_mtp++;
        return DSQ_OK;
    }
    const dsq_type_info *ti = dsq_type_get((int)t.type);
    if (!ti || !ti->is_float)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "tensor %s: type %s cannot be converted to GGUF", t.name,
                        dsq_type_name(t.type));
    uint64_t scale;
    DSQ_TRY(fp8_scale_of(d->m, &t, d->block, &scale));
    int64_t e;
    int proj;
    if (expert_name(t.name, &l, &e, &proj)) {
        if (e >= a->moe.n_routed || !dsq_arch_layer_is_moe(a, l))
            return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: expert %lld of a model with %lld experts%s", t.name,
                            (long long)e, (long long)a->moe.n_routed,
                            dsq_arch_layer_is_moe(a, l) ? "" : " in a dense layer");
        size_t k = ((size_t)l * 3 + (size_t)proj) * (size_t)a->moe.n_routed + (size_t)e;
        d->exp[k] = i, d->exp_scale[k] = scale;
        return DSQ_OK;
    }
    if (l >= 0 && ends_with(t.name, ".self_attn.kv_b_proj.weight")) return plan_kv_b(a, l, &t, i, scale, d->ftype, p);
    return plan_ds_plain(a, &t, i, scale, d->ftype, p);
}

static dsq_status plan_deepseek(const dsq_arch *a, const dsq_st_model *m, const int block[2], dsq_type ftype, plan *p)
{
    ds_plan d = {a, m, ftype, {block[0], block[1]}, NULL, NULL, 0};
    size_t n = (size_t)a->n_layers * 3 * (size_t)a->moe.n_routed;
    d.exp = malloc((n ? n : 1) * sizeof *d.exp);
    d.exp_scale = malloc((n ? n : 1) * sizeof *d.exp_scale);
    dsq_status st = d.exp && d.exp_scale ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "out of memory planning the experts");
    for (size_t k = 0; st == DSQ_OK && k < n; k++) d.exp[k] = d.exp_scale[k] = UINT64_MAX;
    for (size_t i = 0; st == DSQ_OK && i < m->n_tensors; i++) st = ds_one(&d, i, p);
    for (int64_t l = 0; st == DSQ_OK && l < a->n_layers; l++)
        for (int proj = 0; st == DSQ_OK && proj < 3 && dsq_arch_layer_is_moe(a, l); proj++) {
            size_t k = ((size_t)l * 3 + (size_t)proj) * (size_t)a->moe.n_routed;
            st = plan_stack(a, m, l, proj, d.exp + k, d.exp_scale + k, ftype, p);
        }
    if (st == DSQ_OK && d.n_mtp) DSQ_LOGI("skipped %lld tensors of multi-token-prediction layers", (long long)d.n_mtp);
    free(d.exp);
    free(d.exp_scale);
    return st;
}

/* Rows [r0, r0 + nr) of the 2-D source t as F32 into dst: an FP8 weight
 * times its block scales sc (F32 product, as DeepSeek's weight_dequant). */
static dsq_status ds_rows(streamer *s, const dsq_tensor *t, const dsq_tensor *sc, int64_t r0, int64_t nr, float *dst)
{
    int64_t cols = t->shape[t->n_dims - 1];
    if (!sc) {
        const dsq_type_info *ti = dsq_type_get((int)t->type);
        const uint8_t *q = (const uint8_t *)t->data + (uint64_t)(r0 * cols) * ti->block_bytes;
        DSQ_TRY(dsq_convert_row(t->type, q, DSQ_TYPE_F32, dst, (size_t)(nr * cols)));
        dsq_release_pages(q, (uint64_t)(nr * cols) * ti->block_bytes);
        return DSQ_OK;
    }
    int br = s->fp8_block[0], bc = s->fp8_block[1];
    int64_t sc_cols = sc->shape[1];
    size_t ses = dsq_type_get((int)sc->type)->block_bytes;
    float srow[4096];
    if (sc_cols > 4096) return dsq_fail(DSQ_ERR_UNSUPPORTED, "tensor %s: more than 4096 scale blocks per row", sc->name);
    const uint8_t *codes = (const uint8_t *)t->data + r0 * cols;
    for (int64_t r = 0; r < nr; r++) {
        if (r == 0 || (r0 + r) % br == 0)
            DSQ_TRY(dsq_to_f32_row(sc->type, (const uint8_t *)sc->data + (size_t)((r0 + r) / br * sc_cols) * ses, srow,
                                   (size_t)sc_cols));
        for (int64_t c = 0; c < cols; c++) dst[r * cols + c] = dsq_e4m3_to_f32(codes[r * cols + c]) * srow[c / bc];
    }
    dsq_release_pages(codes, (uint64_t)(nr * cols));
    return DSQ_OK;
}

static dsq_status ds_views(streamer *s, uint64_t i, uint64_t si, dsq_tensor *t, dsq_tensor *sc, bool *has_sc)
{
    DSQ_TRY(dsq_st_model_view(s->st, (size_t)i, t));
    *has_sc = si != UINT64_MAX;
    return *has_sc ? dsq_st_model_view(s->st, (size_t)si, sc) : DSQ_OK;
}

/* A 2-D source streamed in chunks of rows into type out. */
static dsq_status ds_stream_rows(streamer *s, uint64_t i, uint64_t si, dsq_type out, uint64_t *bad)
{
    dsq_tensor t, sc;
    bool has_sc;
    DSQ_TRY(ds_views(s, i, si, &t, &sc, &has_sc));
    int64_t cols = t.shape[t.n_dims - 1], rows = (int64_t)(dsq_tensor_nelems(&t) / (uint64_t)cols);
    int64_t step = (int64_t)CHUNK_ELEMS / cols > 0 ? (int64_t)CHUNK_ELEMS / cols : 1;
    if (cols > (int64_t)CHUNK_ELEMS) return dsq_fail(DSQ_ERR_UNSUPPORTED, "tensor %s: rows too long", t.name);
    if (!s->f32 && !(s->f32 = malloc((size_t)CHUNK_ELEMS * sizeof(float))))
        return dsq_fail(DSQ_ERR_NOMEM, "out of memory for conversion buffers");
    uint32_t oes = dsq_type_get((int)out)->block_bytes;
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
        int64_t nr = rows - r0 < step ? rows - r0 : step;
        DSQ_TRY(ds_rows(s, &t, has_sc ? &sc : NULL, r0, nr, s->f32));
        DSQ_TRY(dsq_convert_row(DSQ_TYPE_F32, s->f32, out, s->chunk, (size_t)(nr * cols)));
        *bad += count_nonfinite(out, s->chunk, (uint64_t)(nr * cols));
        DSQ_TRY(s->sink(s->w, s->chunk, (uint64_t)(nr * cols) * oes));
    }
    return DSQ_OK;
}

/* attn_k_b / attn_v_b of kv_b_proj, as F32 into dst ([H, L, N] or [H, D, L]). */
static dsq_status ds_kv_b_f32(streamer *s, const plan_item *it, float *dst)
{
    dsq_tensor t, sc;
    bool has_sc;
    DSQ_TRY(ds_views(s, it->src, it->scale, &t, &sc, &has_sc));
    int64_t H = s->arch->n_heads, N = s->arch->mla.qk_nope_head_dim, D = s->arch->mla.v_head_dim;
    int64_t L = s->arch->mla.kv_lora_rank, W = N + D;
    float *kv = malloc((size_t)(H * W * L) * sizeof *kv);
    if (!kv) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for %s", t.name);
    dsq_status st = ds_rows(s, &t, has_sc ? &sc : NULL, 0, H * W, kv);
    if (st == DSQ_OK) dsq_ds_kv_b_part(it->op == OP_KB, H, N, D, L, kv, dst);
    free(kv);
    return st;
}

typedef dsq_status (*whole_f32_fn)(streamer *s, const plan_item *it, float *dst);

/* An item made whole in F32 by fn, then streamed in chunks in its output type. */
static dsq_status stream_whole_f32(streamer *s, const plan_item *it, whole_f32_fn fn, uint64_t *bad)
{
    uint64_t n = 1;
    for (int d = 0; d < it->n_dims; d++) n *= (uint64_t)it->shape[d];
    float *f = malloc((size_t)n * sizeof *f);
    if (!f) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for %s", it->name);
    dsq_status st = fn(s, it, f);
    uint32_t oes = dsq_type_get((int)it->type)->block_bytes;
    for (uint64_t off = 0; st == DSQ_OK && off < n; off += CHUNK_ELEMS) {
        uint64_t len = n - off < CHUNK_ELEMS ? n - off : CHUNK_ELEMS;
        st = dsq_convert_row(DSQ_TYPE_F32, f + off, it->type, s->chunk, (size_t)len);
        if (st == DSQ_OK) *bad += count_nonfinite(it->type, s->chunk, len);
        if (st == DSQ_OK) st = s->sink(s->w, s->chunk, len * oes);
    }
    free(f);
    return st;
}

/* The items of a DeepSeek plan that are not plain copies or conversions. */
static bool ds_special(const plan_item *it) { return it->op != OP_PLAIN || it->scale != UINT64_MAX; }

static dsq_status gguf_ds_stream(streamer *s, const plan_item *it, uint64_t *bad);

static dsq_status ds_stream(streamer *s, const plan_item *it, uint64_t *bad)
{
    switch (it->op) {
    case OP_UNSTACK:
    case OP_MERGE_KV: return gguf_ds_stream(s, it, bad);
    case OP_STACK:
        for (int64_t e = 0; e < it->n_srcs; e++) DSQ_TRY(ds_stream_rows(s, it->srcs[e], it->srcs_scale[e], it->type, bad));
        return DSQ_OK;
    case OP_KB:
    case OP_VB: return stream_whole_f32(s, it, ds_kv_b_f32, bad);
    default: return ds_stream_rows(s, it->src, it->scale, it->type, bad);
    }
}

/* The same as F32 into dst, for dsq_hf_source_fetch_f32 (whole tensors). */
static dsq_status ds_fetch_f32(streamer *s, const plan_item *it, float *dst)
{
    if (it->op == OP_KB || it->op == OP_VB) return ds_kv_b_f32(s, it, dst);
    int64_t n = it->op == OP_STACK ? it->n_srcs : 1;
    for (int64_t e = 0; e < n; e++) {
        dsq_tensor t, sc;
        bool has_sc;
        bool stack = it->op == OP_STACK;
        DSQ_TRY(ds_views(s, stack ? it->srcs[e] : it->src, stack ? it->srcs_scale[e] : it->scale, &t, &sc, &has_sc));
        int64_t cols = t.shape[t.n_dims - 1], rows = (int64_t)(dsq_tensor_nelems(&t) / (uint64_t)cols);
        DSQ_TRY(ds_rows(s, &t, has_sc ? &sc : NULL, 0, rows, dst + e * rows * cols));
    }
    return DSQ_OK;
}

/* ---------------------------------------------------------------- HF -> GGUF */

/* rope_freqs.weight for llama3 rope scaling: one factor per rotary pair, as
 * llama.cpp's LlamaModel.generate_extra_tensors computes it (float32). */
static dsq_status llama3_rope_factors(const dsq_arch *a, plan_item *it)
{
    int64_t dim = a->head_dim;
    if (dim <= 0 || dim % 2) return dsq_fail(DSQ_ERR_FORMAT, "llama3 rope scaling: bad head_dim %lld", (long long)dim);
    int64_t n = dim / 2;
    /* transformers' llama3 defaults for parameters a config leaves out */
    dsq_arch d = *a;
    if (!(d.rope_factor > 0)) d.rope_factor = 8.0;
    if (!(d.rope_low_freq_factor > 0)) d.rope_low_freq_factor = 1.0;
    if (!(d.rope_high_freq_factor > 0)) d.rope_high_freq_factor = 4.0;
    if (d.rope_original_max_pos <= 0) d.rope_original_max_pos = 8192;
    float *f = malloc((size_t)n * sizeof *f);
    if (!f) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for rope_freqs");
    dsq_status st = dsq_arch_llama3_rope_freqs(&d, f, n);
    if (st != DSQ_OK) {
        free(f);
        return st;
    }
    snprintf(it->name, sizeof it->name, "rope_freqs.weight");
    it->src = UINT64_MAX;
    it->src_type = DSQ_TYPE_F32;
    it->type = DSQ_TYPE_F32;
    it->keep_f32 = true;
    it->n_dims = 1;
    it->shape[0] = n;
    it->nbytes = (uint64_t)n * sizeof(float);
    it->generated = f;
    return DSQ_OK;
}

/* Output type of one tensor, after convert_hf_to_gguf.py prepare_tensors:
 * 1-D tensors, norms and anything not named ".weight" stay F32. */
static dsq_type gguf_tensor_type(const char *gguf_name, int n_dims, dsq_type ftype)
{
    if (n_dims <= 1 || ends_with(gguf_name, "_norm.weight") || !ends_with(gguf_name, ".weight")) return DSQ_TYPE_F32;
    if (strstr(gguf_name, "ffn_gate_inp")) return DSQ_TYPE_F32; /* MoE routers */
    return ftype;
}

static dsq_status plan_hf_to_gguf(const dsq_arch *a, const dsq_st_model *m, dsq_type ftype, plan *p)
{
    plan_item *it = NULL;
    if (a->rope_scaling == DSQ_ROPE_SCALING_LLAMA3 && a->family == DSQ_ARCH_LLAMA) {
        DSQ_TRY(plan_push(p, &it));
        DSQ_TRY(llama3_rope_factors(a, it));
    }
    for (size_t i = 0; i < m->n_tensors; i++) {
        dsq_tensor t;
        DSQ_TRY(dsq_st_model_view(m, i, &t));
        /* Buffers older checkpoints carry that are rebuilt at load time. */
        if (ends_with(t.name, ".rotary_emb.inv_freq")) continue;
        if (a->tie_word_embeddings && !strcmp(t.name, "lm_head.weight")) continue;
        const dsq_type_info *ti = dsq_type_get((int)t.type);
        if (!ti || !ti->is_float)
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "tensor %s: type %s cannot be converted to GGUF (float types only)",
                            t.name, dsq_type_name(t.type));
        DSQ_TRY(plan_push(p, &it));
        it->src = i;
        DSQ_TRY(dsq_name_hf_to_gguf(a, t.name, it->name, sizeof it->name, &it->perm));
        it->type = gguf_tensor_type(it->name, t.n_dims, ftype);
        it->keep_f32 = gguf_tensor_type(it->name, t.n_dims, DSQ_TYPE_COUNT) == DSQ_TYPE_F32;
        DSQ_TRY(plan_finish_item(a, it, &t));
        DSQ_TRY(check_vocab_rows(a, it->name, it, t.name));
    }
    if (p->n == 0) return dsq_fail(DSQ_ERR_FORMAT, "no tensors to convert");
    return DSQ_OK;
}

/* --outtype auto of convert_hf_to_gguf.py: F16 when the first tensor is F16,
 * else BF16 (it deliberately ignores config.json torch_dtype). */
static dsq_type hf_auto_type(const dsq_st_model *m)
{
    /* Index 0 of a non-empty model is in range, so the view cannot fail. */
    dsq_tensor t;
    if (m->n_tensors > 0 && dsq_st_model_view(m, 0, &t) == DSQ_OK && t.type == DSQ_TYPE_F16) return DSQ_TYPE_F16;
    return DSQ_TYPE_BF16;
}

static uint32_t file_type_of(dsq_type ftype)
{
    return ftype == DSQ_TYPE_F16 ? FTYPE_MOSTLY_F16 : ftype == DSQ_TYPE_BF16 ? FTYPE_MOSTLY_BF16 : FTYPE_ALL_F32;
}

/* general.name: the input folder's last path component, as
 * convert_hf_to_gguf.py falls back to when no model card names it. */
static void model_name_of(const char *dir, char *out, size_t cap)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    snprintf(out, cap, "%.*s", (int)(n - b), dir + b);
}

static dsq_status write_gguf_kvs(dsq_gguf_writer *w, const dsq_arch *a, const char *in_dir, dsq_type ftype,
                                 const plan *p)
{
    char name[256];
    model_name_of(in_dir, name, sizeof name);
    /* general.architecture first, as every GGUF writer orders it. */
    DSQ_TRY(dsq_gguf_set_str(w, "general.architecture", dsq_arch_gguf_name(a)));
    DSQ_TRY(dsq_gguf_set_str(w, "general.type", "model"));
    DSQ_TRY(dsq_gguf_set_str(w, "general.name", name));
    DSQ_TRY(dsq_arch_to_gguf(a, w));
    DSQ_TRY(dsq_gguf_set_u32(w, "general.file_type", file_type_of(ftype)));
    DSQ_TRY(dsq_tokenizer_hf_to_gguf(in_dir, w));
    for (size_t i = 0; i < p->n; i++) {
        if (dsq_type_get((int)p->items[i].type)->quantized) {
            DSQ_TRY(dsq_gguf_set_u32(w, "general.quantization_version", 2));
            break;
        }
    }
    return DSQ_OK;
}

/* A folder must hold config.json; said plainly before anything else. */
static dsq_status check_hf_dir(const char *in_dir)
{
    if (!dsq_is_dir(in_dir)) return dsq_fail(DSQ_ERR_ARG, "%s: not a folder (a Hugging Face checkpoint is a folder)", in_dir);
    char cfg[4096];
    DSQ_TRY(dsq_path_join(cfg, sizeof cfg, in_dir, "config.json"));
    if (!dsq_exists(cfg)) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: not found (a Hugging Face checkpoint needs it)", cfg);
    return DSQ_OK;
}

struct dsq_hf_source {
    char *dir;
    dsq_checkpoint *c;
    int fp8_block[2];
    dsq_type dtype;
    plan p;
    dsq_hf_source_tensor *pub; /* p.n entries, names pointing into p */
};

void dsq_hf_source_close(dsq_hf_source *s)
{
    if (!s) return;
    free(s->pub);
    plan_free(&s->p);
    dsq_checkpoint_close(s->c);
    free(s->dir);
    free(s);
}

static dsq_status hf_source_publish(dsq_hf_source *s)
{
    s->pub = calloc(s->p.n, sizeof *s->pub);
    if (!s->pub) return dsq_fail(DSQ_ERR_NOMEM, "out of memory planning %zu tensors", s->p.n);
    for (size_t i = 0; i < s->p.n; i++) {
        const plan_item *it = &s->p.items[i];
        dsq_hf_source_tensor *t = &s->pub[i];
        t->name = it->name;
        t->src_type = it->src_type;
        t->type = it->type;
        t->keep_f32 = it->keep_f32;
        t->generated = it->generated != NULL;
        t->n_dims = it->n_dims;
        memcpy(t->shape, it->shape, sizeof t->shape);
    }
    return DSQ_OK;
}

static dsq_status hf_source_init(dsq_hf_source *s, const char *in_dir, dsq_convert_dtype dtype)
{
    if (!(s->dir = strdup(in_dir))) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    DSQ_TRY(dsq_checkpoint_open(in_dir, &s->c));
    DSQ_TRY(dsq_checkpoint_require_arch(s->c));
    DSQ_TRY(dsq_block_require(dsq_block_desc_of(&s->c->arch), &s->c->arch, DSQ_BLOCK_CAN_GGUF, in_dir));
    s->dtype = dtype == DSQ_CONVERT_AUTO ? hf_auto_type(s->c->st) : dtype_to_type(dtype);
    if (s->c->arch.family == DSQ_ARCH_DEEPSEEK2) {
        DSQ_TRY(dsq_hf_fp8_block(in_dir, s->fp8_block));
        DSQ_TRY(plan_deepseek(&s->c->arch, s->c->st, s->fp8_block, s->dtype, &s->p));
    } else {
        DSQ_TRY(plan_hf_to_gguf(&s->c->arch, s->c->st, s->dtype, &s->p));
    }
    return hf_source_publish(s);
}

dsq_status dsq_hf_source_open(const char *in_dir, dsq_convert_dtype dtype, dsq_hf_source **out)
{
    *out = NULL;
    DSQ_TRY(check_hf_dir(in_dir));
    dsq_hf_source *s = calloc(1, sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    dsq_status st = hf_source_init(s, in_dir, dtype);
    if (st != DSQ_OK) {
        dsq_hf_source_close(s);
        return st;
    }
    *out = s;
    return DSQ_OK;
}

size_t dsq_hf_source_count(const dsq_hf_source *s) { return s->p.n; }
const dsq_hf_source_tensor *dsq_hf_source_tensor_at(const dsq_hf_source *s, size_t i) { return &s->pub[i]; }
const dsq_arch *dsq_hf_source_arch(const dsq_hf_source *s) { return &s->c->arch; }
dsq_type dsq_hf_source_dtype(const dsq_hf_source *s) { return s->dtype; }

dsq_status dsq_hf_source_write_kvs(const dsq_hf_source *s, dsq_gguf_writer *w)
{
    return write_gguf_kvs(w, &s->c->arch, s->dir, s->dtype, &s->p);
}

dsq_status dsq_hf_source_fetch_f32(dsq_hf_source *s, size_t i, float *dst)
{
    if (i >= s->p.n) return dsq_fail(DSQ_ERR_ARG, "%s: tensor index %zu out of range", s->dir, i);
    const plan_item *it = &s->p.items[i];
    if (it->generated) {
        memcpy(dst, it->generated, (size_t)it->nbytes);
        return DSQ_OK;
    }
    if (ds_special(it)) {
        streamer ds = {.arch = &s->c->arch, .to_gguf = true, .st = s->c->st, .fp8_block = {s->fp8_block[0], s->fp8_block[1]}};
        dsq_status st = ds_fetch_f32(&ds, it, dst);
        streamer_free(&ds);
        return st == DSQ_OK ? st : dsq_fail_context(st, "tensor %s", it->name);
    }
    dsq_tensor t;
    DSQ_TRY(dsq_st_model_view(s->c->st, (size_t)it->src, &t));
    /* Only the permutation's arch and direction are needed: F32 output
     * goes straight into dst without the chunk buffers. */
    streamer conv = {.arch = &s->c->arch, .to_gguf = true};
    dsq_status st = convert_whole(&conv, &t, it, DSQ_TYPE_F32, dst, NULL);
    streamer_free(&conv);
    if (st != DSQ_OK) return dsq_fail_context(st, "tensor %s", it->name);
    return DSQ_OK;
}

static dsq_status hf_to_gguf_run(dsq_hf_source *src, const char *out_path, bool overwrite, dsq_gguf_writer **wp)
{
    const dsq_arch *a = &src->c->arch;
    const plan *p = &src->p;
    DSQ_LOGI("%s -> %s (%s, %s)", src->dir, out_path, a->hf_architecture, dsq_type_name(src->dtype));
    DSQ_TRY(dsq_gguf_writer_new(wp));
    dsq_gguf_writer *w = *wp;
    DSQ_TRY(dsq_hf_source_write_kvs(src, w));
    for (size_t i = 0; i < p->n; i++) {
        const plan_item *it = &p->items[i];
        DSQ_TRY(dsq_gguf_add_tensor(w, it->name, it->type, it->n_dims, it->shape));
    }
    dsq_gguf_writer_set_direct(w, true); /* a checkpoint's worth of bytes: no page-cache copy */
    DSQ_TRY(dsq_gguf_writer_begin(w, out_path, overwrite));
    streamer s;
    DSQ_TRY(streamer_init(&s, a, true, sink_gguf, w));
    s.st = src->c->st;
    s.fp8_block[0] = src->fp8_block[0], s.fp8_block[1] = src->fp8_block[1];
    dsq_status st = stream_all(&s, p, src->c->st, view_st);
    streamer_free(&s);
    DSQ_TRY(st);
    return dsq_gguf_writer_finish(w);
}

dsq_status dsq_convert_hf_to_gguf(const char *in_dir, const char *out_path, dsq_convert_dtype dtype, bool overwrite)
{
    DSQ_TRY(check_hf_dir(in_dir));
    if (dsq_is_dir(out_path)) return dsq_fail(DSQ_ERR_EXISTS, "%s: is a folder (the GGUF output is a file)", out_path);
    if (!overwrite && dsq_exists(out_path))
        return dsq_fail(DSQ_ERR_EXISTS, "%s: already exists (use --force to replace it)", out_path);
    dsq_hf_source *src = NULL;
    DSQ_TRY(dsq_hf_source_open(in_dir, dtype, &src));
    dsq_gguf_writer *w = NULL;
    dsq_status st = hf_to_gguf_run(src, out_path, overwrite, &w);
    if (w) dsq_gguf_writer_free(w); /* after a failure this removes the temporary */
    dsq_hf_source_close(src);
    return st;
}

/* ---------------------------------------------------------------- GGUF -> HF */

static bool can_read_type(dsq_type t)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    if (!ti) return false;
    if (ti->is_float) return true;
    const dsq_qtype *q = dsq_qtype_get(t);
    return ti->quantized && q && q->dequantize_row;
}

/* auto: F32 when anything is quantized, else the type all 2-D tensors share. */
static dsq_type gguf_auto_type(const dsq_gguf *g)
{
    dsq_type common = DSQ_TYPE_COUNT;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const dsq_gguf_tensor_info *ti = &g->tensors[i];
        const dsq_type_info *info = dsq_type_get((int)ti->type);
        if (!info || info->quantized) return DSQ_TYPE_F32;
        if (ti->n_dims < 2) continue;
        if (common == DSQ_TYPE_COUNT) common = ti->type;
        else if (common != ti->type) return DSQ_TYPE_F32;
    }
    if (common == DSQ_TYPE_F16 || common == DSQ_TYPE_BF16) return common;
    return DSQ_TYPE_F32;
}

/* ---- deepseek2 GGUF -> HF: experts unstacked, attn_k_b / attn_v_b merged back into kv_b_proj ---- */

/* n elements of a tensor's data from element off (block-aligned for block types) as F32. */
static dsq_status to_f32_at(dsq_type t, const void *data, uint64_t off, uint64_t n, float *dst)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    if (!ti || off % ti->block_elems || n % ti->block_elems)
        return dsq_fail(DSQ_ERR_FORMAT, "type %s: %llu elements at %llu are not whole blocks", dsq_type_name(t),
                        (unsigned long long)n, (unsigned long long)off);
    const uint8_t *p = (const uint8_t *)data + off / ti->block_elems * ti->block_bytes;
    if (ti->is_float) return dsq_convert_row(t, p, DSQ_TYPE_F32, dst, (size_t)n);
    return dsq_dequantize(t, p, dst, 1, (int64_t)n);
}

static dsq_status gguf_ds_item(plan *p, const char *name, dsq_type t, int64_t d0, int64_t d1, plan_item **out)
{
    return ds_item(p, name, t, d1 ? 2 : 1, (const int64_t[]){d0, d1}, out);
}

static dsq_status plan_gguf_ds_one(const dsq_arch *a, const dsq_gguf *g, uint64_t i, dsq_type out_type, plan *p)
{
    dsq_tensor t;
    DSQ_TRY(dsq_gguf_tensor(g, i, &t));
    char name[NAME_CAP];
    long long l;
    int used = 0;
    char stem[32];
    plan_item *it = NULL;
    if (sscanf(t.name, "blk.%lld.ffn_%15[a-z]_exps.weight%n", &l, stem, &used) == 2 && !t.name[used]) {
        int64_t E = a->moe.n_routed;
        if (t.n_dims != 3 || t.shape[0] != E)
            return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: %lld experts stacked, the model has %lld", t.name,
                            (long long)(t.n_dims == 3 ? t.shape[0] : 0), (long long)E);
        for (int64_t e = 0; e < E; e++) {
            snprintf(name, sizeof name, "model.layers.%lld.mlp.experts.%lld.%s_proj.weight", l, (long long)e, stem);
            DSQ_TRY(gguf_ds_item(p, name, out_type, t.shape[1], t.shape[2], &it));
            it->op = OP_UNSTACK, it->src = i, it->n_srcs = e, it->src_type = t.type;
        }
        return DSQ_OK;
    }
    if (sscanf(t.name, "blk.%lld.attn_k_b.weight%n", &l, &used) == 1 && !t.name[used]) {
        char vb[96];
        snprintf(vb, sizeof vb, "blk.%lld.attn_v_b.weight", l);
        int64_t v = dsq_gguf_find_tensor(g, vb);
        if (v < 0) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: tensor %s is missing (attn_k_b has no pair)", g->path, vb);
        int64_t H = a->n_heads, N = a->mla.qk_nope_head_dim, D = a->mla.v_head_dim, L = a->mla.kv_lora_rank;
        snprintf(name, sizeof name, "model.layers.%lld.self_attn.kv_b_proj.weight", l);
        DSQ_TRY(gguf_ds_item(p, name, out_type, H * (N + D), L, &it));
        it->op = OP_MERGE_KV, it->src = i, it->scale = (uint64_t)v, it->src_type = t.type;
        return DSQ_OK;
    }
    if (strstr(t.name, ".attn_v_b.weight")) return DSQ_OK; /* merged with its attn_k_b */
    DSQ_TRY(plan_push(p, &it));
    it->src = i;
    if (ends_with(t.name, "." DSQ_DS_ROUTER_BIAS_GGUF) && sscanf(t.name, "blk.%lld.", &l) == 1)
        snprintf(it->name, sizeof it->name, "model.layers.%lld.%s", l, DSQ_DS_ROUTER_BIAS_HF);
    else
        DSQ_TRY(dsq_name_gguf_to_hf(a, t.name, it->name, sizeof it->name, &it->perm));
    /* the router stays F32, as transformers keeps it */
    it->type = strstr(t.name, "ffn_gate_inp") || t.n_dims < 2 ? DSQ_TYPE_F32 : out_type;
    DSQ_TRY(plan_finish_item(a, it, &t));
    return check_vocab_rows(a, t.name, it, t.name);
}

/* Expert n_srcs of a stacked tensor, or kv_b from k_b (src) and v_b (scale), as F32 rows into dst. */
static dsq_status gguf_ds_f32(streamer *s, const plan_item *it, float *dst)
{
    dsq_tensor t;
    DSQ_TRY(dsq_gguf_tensor(s->g, it->src, &t));
    if (it->op == OP_UNSTACK) {
        uint64_t n = (uint64_t)(it->shape[0] * it->shape[1]);
        return to_f32_at(t.type, t.data, (uint64_t)it->n_srcs * n, n, dst);
    }
    dsq_tensor v;
    DSQ_TRY(dsq_gguf_tensor(s->g, it->scale, &v));
    const dsq_arch *a = s->arch;
    int64_t H = a->n_heads, N = a->mla.qk_nope_head_dim, D = a->mla.v_head_dim, L = a->mla.kv_lora_rank;
    if (t.n_dims != 3 || t.shape[0] != H || t.shape[1] != L || t.shape[2] != N || v.n_dims != 3 || v.shape[0] != H ||
        v.shape[1] != D || v.shape[2] != L)
        return dsq_fail(DSQ_ERR_FORMAT, "tensors %s / %s: expected [%lld, %lld, %lld] and [%lld, %lld, %lld]", t.name,
                        v.name, (long long)H, (long long)L, (long long)N, (long long)H, (long long)D, (long long)L);
    float *kb = malloc((size_t)(H * L * N) * sizeof *kb), *vb = malloc((size_t)(H * D * L) * sizeof *vb);
    dsq_status st = kb && vb ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "out of memory for %s", t.name);
    if (st == DSQ_OK) st = to_f32_at(t.type, t.data, 0, (uint64_t)(H * L * N), kb);
    if (st == DSQ_OK) st = to_f32_at(v.type, v.data, 0, (uint64_t)(H * D * L), vb);
    for (int64_t h = 0; st == DSQ_OK && h < H; h++) {
        float *o = dst + h * (N + D) * L;
        for (int64_t d = 0; d < N; d++)
            for (int64_t c = 0; c < L; c++) o[d * L + c] = kb[(h * L + c) * N + d];
        memcpy(o + N * L, vb + h * D * L, (size_t)(D * L) * sizeof *o);
    }
    free(kb);
    free(vb);
    return st;
}

static dsq_status gguf_ds_stream(streamer *s, const plan_item *it, uint64_t *bad)
{
    return stream_whole_f32(s, it, gguf_ds_f32, bad);
}

static dsq_status plan_gguf_to_hf(const dsq_arch *a, const dsq_gguf *g, dsq_type out_type, plan *p)
{
    if (a->family == DSQ_ARCH_DEEPSEEK2) {
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            dsq_tensor t;
            DSQ_TRY(dsq_gguf_tensor(g, i, &t));
            if (!can_read_type(t.type))
                return dsq_fail(DSQ_ERR_UNSUPPORTED, "tensor %s: type %s cannot be dequantized yet", t.name,
                                dsq_type_name(t.type));
            DSQ_TRY(plan_gguf_ds_one(a, g, i, out_type, p));
        }
        return p->n ? DSQ_OK : dsq_fail(DSQ_ERR_FORMAT, "%s: no tensors to convert", g->path);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        dsq_tensor t;
        DSQ_TRY(dsq_gguf_tensor(g, i, &t));
        /* Generated from config.json's rope_scaling on the way in. */
        if (!strcmp(t.name, "rope_freqs.weight")) continue;
        if (!can_read_type(t.type))
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "tensor %s: type %s cannot be dequantized yet", t.name,
                            dsq_type_name(t.type));
        plan_item *it = NULL;
        DSQ_TRY(plan_push(p, &it));
        it->src = i;
        DSQ_TRY(dsq_name_gguf_to_hf(a, t.name, it->name, sizeof it->name, &it->perm));
        it->type = out_type;
        DSQ_TRY(plan_finish_item(a, it, &t));
        DSQ_TRY(check_vocab_rows(a, t.name, it, t.name));
    }
    if (p->n == 0) return dsq_fail(DSQ_ERR_FORMAT, "%s: no tensors to convert", g->path);
    return DSQ_OK;
}

static dsq_status write_text_file(const dsq_outdir *d, const char *name, const char *text)
{
    char path[4096];
    DSQ_TRY(dsq_outdir_file(d, name, path, sizeof path));
    dsq_outfile *f;
    DSQ_TRY(dsq_outfile_open(path, false, &f));
    dsq_status st = dsq_outfile_write(f, text, strlen(text));
    if (st == DSQ_OK) st = dsq_outfile_write(f, "\n", 1);
    if (st != DSQ_OK) {
        dsq_outfile_abort(f);
        return st;
    }
    return dsq_outfile_commit(f);
}

static const char *torch_dtype_of(dsq_type t)
{
    return t == DSQ_TYPE_F16 ? "float16" : t == DSQ_TYPE_BF16 ? "bfloat16" : "float32";
}

static int64_t token_id(const dsq_gguf *g, const char *key, int64_t fallback)
{
    uint32_t v;
    return dsq_gguf_find_u32(g, key, &v) ? v : fallback;
}

static dsq_status write_generation_config(const dsq_outdir *d, const dsq_gguf *g, const dsq_arch *a)
{
    int64_t bos = token_id(g, "tokenizer.ggml.bos_token_id", a->bos_token_id);
    int64_t eos = token_id(g, "tokenizer.ggml.eos_token_id", a->eos_token_id);
    cJSON *o = cJSON_CreateObject();
    if (!o) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for generation_config.json");
    /* A dropped id would be a silently wrong file, not a smaller one. */
    bool ok = (bos < 0 || cJSON_AddNumberToObject(o, "bos_token_id", (double)bos)) &&
              (eos < 0 || cJSON_AddNumberToObject(o, "eos_token_id", (double)eos));
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for generation_config.json");
    dsq_status st = write_text_file(d, "generation_config.json", text);
    free(text);
    return st;
}

static dsq_status write_hf_side_files(const dsq_outdir *d, const dsq_gguf *g, dsq_arch *a, dsq_type out_type)
{
    snprintf(a->torch_dtype, sizeof a->torch_dtype, "%s", torch_dtype_of(out_type));
    /* A GGUF without output.weight ties the head to the embeddings. */
    if (dsq_gguf_find_tensor(g, "output.weight") < 0) a->tie_word_embeddings = true;
    char *json = NULL;
    DSQ_TRY(dsq_arch_to_hf_json(a, &json));
    dsq_status st = write_text_file(d, "config.json", json);
    free(json);
    DSQ_TRY(st);
    DSQ_TRY(write_generation_config(d, g, a));
    if (!dsq_gguf_get(g, "tokenizer.ggml.model")) {
        DSQ_LOGW("%s: no tokenizer in the GGUF; writing weights and config only", g->path);
        return DSQ_OK;
    }
    return dsq_tokenizer_gguf_to_hf(g, dsq_outdir_tmp_path(d));
}

static dsq_status gguf_to_hf_weights(const dsq_outdir *d, const dsq_gguf *g, const dsq_arch *a, const plan *p,
                                     uint64_t max_shard)
{
    dsq_st_writer *w = NULL;
    DSQ_TRY(dsq_st_writer_new(dsq_outdir_tmp_path(d), "model", max_shard, &w));
    /* transformers' save_pretrained writes this; its loader checks it. */
    dsq_status st = dsq_st_writer_set_meta(w, "format", "pt");
    for (size_t i = 0; st == DSQ_OK && i < p->n; i++)
        st = dsq_st_writer_add(w, p->items[i].name, p->items[i].type, p->items[i].n_dims, p->items[i].shape);
    if (st == DSQ_OK) st = dsq_st_writer_begin(w);
    if (st == DSQ_OK) {
        streamer s;
        st = streamer_init(&s, a, false, sink_st, w);
        s.g = g;
        if (st == DSQ_OK) {
            st = stream_all(&s, p, g, view_gguf);
            streamer_free(&s);
        }
    }
    if (st == DSQ_OK) st = dsq_st_writer_finish(w);
    dsq_st_writer_free(w);
    return st;
}

static dsq_status gguf_to_hf_run(dsq_checkpoint *c, const char *out_dir, dsq_convert_dtype dtype, bool overwrite,
                                 uint64_t max_shard, plan *p, dsq_outdir **dp)
{
    DSQ_TRY(dsq_checkpoint_require_arch(c));
    dsq_type out_type = dtype == DSQ_CONVERT_AUTO ? gguf_auto_type(c->gguf) : dtype_to_type(dtype);
    DSQ_LOGI("%s -> %s (%s, %s)", c->path, out_dir, c->arch.hf_architecture, dsq_type_name(out_type));
    DSQ_TRY(plan_gguf_to_hf(&c->arch, c->gguf, out_type, p));
    DSQ_TRY(dsq_outdir_open(out_dir, overwrite, dp));
    DSQ_TRY(write_hf_side_files(*dp, c->gguf, &c->arch, out_type));
    DSQ_TRY(gguf_to_hf_weights(*dp, c->gguf, &c->arch, p, max_shard));
    dsq_status st = dsq_outdir_commit(*dp);
    *dp = NULL; /* commit frees it, whatever the outcome */
    return st;
}

dsq_status dsq_convert_gguf_to_hf(const char *in_gguf, const char *out_dir, dsq_convert_dtype dtype, bool overwrite,
                                  uint64_t max_shard_bytes)
{
    if (max_shard_bytes == 0) max_shard_bytes = DSQ_CONVERT_DEFAULT_SHARD_BYTES;
    if (dsq_is_dir(in_gguf)) return dsq_fail(DSQ_ERR_ARG, "%s: is a folder, not a GGUF file", in_gguf);
    if (!overwrite && dsq_exists(out_dir))
        return dsq_fail(DSQ_ERR_EXISTS, "%s: already exists (use --force to replace it)", out_dir);
    dsq_checkpoint *c = NULL;
    DSQ_TRY(dsq_checkpoint_open(in_gguf, &c));
    dsq_status st;
    plan p = {0};
    dsq_outdir *d = NULL;
    if (c->kind != DSQ_CKPT_GGUF)
        st = dsq_fail(DSQ_ERR_FORMAT, "%s: not a GGUF file (bad magic)", in_gguf);
    else
        st = gguf_to_hf_run(c, out_dir, dtype, overwrite, max_shard_bytes, &p, &d);
    if (d) dsq_outdir_abort(d);
    plan_free(&p);
    dsq_checkpoint_close(c);
    return st;
}

dsq_status dsq_convert(const char *in, const char *out, dsq_convert_dtype dtype, bool overwrite,
                       uint64_t max_shard_bytes)
{
    if (dsq_is_dir(in)) {
        size_t n = strlen(out);
        bool gguf = n >= 5 && !strcasecmp(out + n - 5, ".gguf");
        if (gguf) return dsq_convert_hf_to_gguf(in, out, dtype, overwrite);
        return dsq_convert_hf_to_hf(in, out, dtype, overwrite, max_shard_bytes);
    }
    if (!dsq_exists(in)) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: no such file or folder", in);
    FILE *f = fopen(in, "rb");
    if (!f) return dsq_fail_errno(DSQ_ERR_IO, "%s", in);
    uint8_t b[4] = {0};
    size_t n = fread(b, 1, 4, f);
    fclose(f);
    uint32_t magic = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    if (n == 4 && magic == DSQ_GGUF_MAGIC) return dsq_convert_gguf_to_hf(in, out, dtype, overwrite, max_shard_bytes);
    return dsq_fail(DSQ_ERR_ARG,
                    "%s: not a GGUF file; to convert safetensors give the folder that holds them with config.json",
                    in);
}
