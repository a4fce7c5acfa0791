/* GGUF reader (over an mmap) and streaming writer.
 *
 * Layout after ggml's docs/gguf.md. The validation rules follow ggml's own
 * loader (ggml/src/gguf.cpp, gguf_init_from_reader), which is what decides
 * whether llama.cpp accepts a file: general.alignment must be a u32 power of
 * two, tensor names shorter than GGML_MAX_NAME (64) bytes, at most
 * GGML_MAX_DIMS (4) dimensions, non-negative dims whose product fits int64,
 * ne[0] a multiple of the type's block size, keys non-empty and unique.
 * We are stricter in three places: n_dims 0 is refused, tensor data ranges
 * must lie inside the file and may not overlap, and keys/names may not hold
 * NUL bytes (our API hands them out as C strings).
 *
 * Nested arrays (arrays of arrays) are an extension that gguf-py reads and
 * writes but ggml refuses; we accept them up to GGUF_MAX_DEPTH levels. */
#include "formats/gguf.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/grow.h"
#include "core/strmap.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "formats/gguf.c copies little-endian arrays directly; add byte swapping for this host"
#endif

enum {
    GGUF_MAX_NAME = 64,      /* ggml GGML_MAX_NAME: a name needs len < 64 */
    GGUF_MAX_DIMS = 4,       /* ggml GGML_MAX_DIMS */
    GGUF_MAX_DEPTH = 8,      /* array nesting levels (an array of scalars is level 1) */
    GGUF_MIN_KV_BYTES = 14,  /* key len 8 + >= 1 key byte + type 4 + >= 1 value byte */
    GGUF_MIN_TI_BYTES = 32,  /* name len 8 + n_dims 4 + one dim 8 + type 4 + offset 8 */
    GGUF_MIN_ARR_BYTES = 12, /* a nested array element: elem type 4 + count 8 */
    GGUF_MIN_STR_BYTES = 8,  /* a string element: its length */
    GGUF_VERSION = 3,
    ARENA_CHUNK = 64 * 1024,
};

static const char *const g_vtype_names[DSQ_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
};
static const uint8_t g_vtype_sizes[DSQ_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *dsq_gguf_vtype_name(dsq_gguf_vtype t)
{
    return (unsigned)t < DSQ_GGUF_VTYPE_COUNT ? g_vtype_names[t] : "?";
}

uint32_t dsq_gguf_vtype_size(dsq_gguf_vtype t) { return (unsigned)t < DSQ_GGUF_VTYPE_COUNT ? g_vtype_sizes[t] : 0; }

static bool vtype_is_scalar(dsq_gguf_vtype t) { return dsq_gguf_vtype_size(t) != 0; }

/* Bytes one array element takes in memory (see dsq_gguf_array). */
static size_t elem_storage(dsq_gguf_vtype t)
{
    if (t == DSQ_GGUF_STRING) return sizeof(dsq_gguf_str);
    if (t == DSQ_GGUF_ARRAY) return sizeof(dsq_gguf_value);
    return dsq_gguf_vtype_size(t);
}

/* Fewest bytes one array element can take in a file. */
static uint64_t elem_min_encoded(dsq_gguf_vtype t)
{
    if (t == DSQ_GGUF_STRING) return GGUF_MIN_STR_BYTES;
    if (t == DSQ_GGUF_ARRAY) return GGUF_MIN_ARR_BYTES;
    return dsq_gguf_vtype_size(t);
}

static uint64_t pad_to(uint64_t n, uint64_t align) { return (n + align - 1) / align * align; }
static bool is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

/* ---- bump arena: every string and array of a reader or writer ---- */

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    max_align_t mem[];
} arena_chunk;

typedef struct arena {
    arena_chunk *head;
} arena;

static arena_chunk *chunk_new(size_t cap)
{
    if (cap > SIZE_MAX - sizeof(arena_chunk)) return NULL;
    arena_chunk *c = malloc(sizeof *c + cap);
    if (c) {
        c->next = NULL;
        c->used = 0;
        c->cap = cap;
    }
    return c;
}

/* align is a power of two up to 16; strings use 1, everything else 16. */
static void *arena_alloc_aligned(arena *a, size_t n, size_t align)
{
    arena_chunk *h = a->head;
    if (h) {
        size_t at = (h->used + align - 1) & ~(align - 1);
        if (at <= h->cap && h->cap - at >= n) {
            h->used = at + n;
            return (unsigned char *)h->mem + at;
        }
    }
    bool big = n > ARENA_CHUNK / 4;
    arena_chunk *c = chunk_new(big ? n : ARENA_CHUNK);
    if (!c) return NULL;
    c->used = n;
    if (big && h) {
        /* A big block gets a chunk of its own, behind head, so the spare room in head stays usable. */
        c->next = h->next;
        h->next = c;
    } else {
        c->next = h;
        a->head = c;
    }
    return c->mem;
}

static void *arena_alloc(arena *a, size_t n) { return arena_alloc_aligned(a, n, 16); }

static void arena_free(arena *a)
{
    while (a->head) {
        arena_chunk *next = a->head->next;
        free(a->head);
        a->head = next;
    }
}

/* A NUL-terminated copy of len bytes. */
static char *arena_strdup(arena *a, const char *s, size_t len)
{
    if (len == SIZE_MAX) return NULL;
    char *p = arena_alloc_aligned(a, len + 1, 1);
    if (!p) return NULL;
    if (len) memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* Names are C strings (a GGUF name with a NUL in it is looked up up to the NUL). */
static int64_t index_find(const dsq_strmap *ix, const char *name) { return dsq_strmap_get(ix, name, strlen(name)); }

/* Adds name -> idx. *dup gets the index already holding name, or -1 when added. */
static dsq_status index_add(dsq_strmap *ix, const char *name, uint64_t idx, int64_t *dup)
{
    return dsq_strmap_put(ix, name, strlen(name), (int64_t)idx, dup);
}

/* What dsq_gguf.arena points to. */
typedef struct gguf_store {
    arena mem;
    dsq_strmap keys, tensors;
} gguf_store;

/* "key 'name'" for messages: at most 96 bytes of the name, unprintables as '?'. */
static void describe(char *buf, size_t cap, const char *what, const char *name, uint64_t len)
{
    char safe[100];
    size_t n = len < 96 ? (size_t)len : 96;
    for (size_t i = 0; i < n; i++) safe[i] = (name[i] >= 0x20 && name[i] < 0x7f) ? name[i] : '?';
    safe[n] = '\0';
    snprintf(buf, cap, "%s '%s%s'", what, safe, len > 96 ? "..." : "");
}

/* ---- bounds-checked cursor over the mapped file ---- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t pos, size;
} cursor;

static uint64_t cur_left(const cursor *c) { return c->size - c->pos; }

static dsq_status cur_take(cursor *c, uint64_t n, const uint8_t **out)
{
    *out = NULL;
    if (n > cur_left(c))
        return dsq_fail(DSQ_ERR_FORMAT, "truncated: %llu bytes needed at offset %llu, %llu left", (unsigned long long)n,
                        (unsigned long long)c->pos, (unsigned long long)cur_left(c));
    *out = c->base + c->pos;
    c->pos += n;
    return DSQ_OK;
}

static dsq_status rd_u32(cursor *c, uint32_t *v)
{
    *v = 0;
    const uint8_t *p;
    DSQ_TRY(cur_take(c, 4, &p));
    memcpy(v, p, 4);
    return DSQ_OK;
}

static dsq_status rd_u64(cursor *c, uint64_t *v)
{
    *v = 0;
    const uint8_t *p;
    DSQ_TRY(cur_take(c, 8, &p));
    memcpy(v, p, 8);
    return DSQ_OK;
}

static dsq_status rd_str(cursor *c, arena *a, dsq_gguf_str *out)
{
    uint64_t len;
    DSQ_TRY(rd_u64(c, &len));
    if (len > cur_left(c))
        return dsq_fail(DSQ_ERR_FORMAT, "string length %llu at offset %llu is more than the %llu bytes left",
                        (unsigned long long)len, (unsigned long long)(c->pos - 8), (unsigned long long)cur_left(c));
    const uint8_t *p;
    DSQ_TRY(cur_take(c, len, &p));
    char *s = arena_strdup(a, (const char *)p, (size_t)len);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for a %llu-byte string", (unsigned long long)len);
    out->ptr = s;
    out->len = len;
    return DSQ_OK;
}

/* ---- reader ---- */

typedef struct parser {
    cursor c;
    dsq_gguf *g;
    gguf_store *st;
    char where[160]; /* the part of the file being read, for messages */
} parser;

static void widen_scalar(dsq_gguf_vtype t, const uint8_t *b, dsq_gguf_value *out)
{
    out->type = t;
    switch (t) {
    case DSQ_GGUF_U8: out->v.u64 = b[0]; break;
    case DSQ_GGUF_I8: out->v.i64 = (int8_t)b[0]; break;
    case DSQ_GGUF_BOOL: out->v.b = b[0] != 0; break; /* ggml reads any non-zero byte as true */
    case DSQ_GGUF_U16: {
        uint16_t x;
        memcpy(&x, b, 2);
        out->v.u64 = x;
    } break;
    case DSQ_GGUF_I16: {
        int16_t x;
        memcpy(&x, b, 2);
        out->v.i64 = x;
    } break;
    case DSQ_GGUF_U32: {
        uint32_t x;
        memcpy(&x, b, 4);
        out->v.u64 = x;
    } break;
    case DSQ_GGUF_I32: {
        int32_t x;
        memcpy(&x, b, 4);
        out->v.i64 = x;
    } break;
    case DSQ_GGUF_F32: {
        float x;
        memcpy(&x, b, 4);
        out->v.f64 = x;
    } break;
    case DSQ_GGUF_U64: memcpy(&out->v.u64, b, 8); break;
    case DSQ_GGUF_I64: memcpy(&out->v.i64, b, 8); break;
    case DSQ_GGUF_F64: memcpy(&out->v.f64, b, 8); break;
    default: break;
    }
}

static dsq_status rd_vtype(cursor *c, dsq_gguf_vtype *t, const char *what)
{
    *t = DSQ_GGUF_U8;
    uint32_t v;
    DSQ_TRY(rd_u32(c, &v));
    if (v >= DSQ_GGUF_VTYPE_COUNT) return dsq_fail(DSQ_ERR_FORMAT, "unknown %s type %u", what, v);
    *t = (dsq_gguf_vtype)v;
    return DSQ_OK;
}

static dsq_status parse_array(parser *p, int level, dsq_gguf_array *out);

static dsq_status parse_array_elems(parser *p, int level, dsq_gguf_array *a, void *data)
{
    if (vtype_is_scalar(a->elem_type)) {
        const uint8_t *src;
        DSQ_TRY(cur_take(&p->c, a->n * dsq_gguf_vtype_size(a->elem_type), &src));
        memcpy(data, src, (size_t)(a->n * dsq_gguf_vtype_size(a->elem_type)));
        if (a->elem_type == DSQ_GGUF_BOOL)
            for (uint64_t i = 0; i < a->n; i++) ((uint8_t *)data)[i] = ((uint8_t *)data)[i] != 0;
        return DSQ_OK;
    }
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->elem_type == DSQ_GGUF_STRING) {
            DSQ_TRY(rd_str(&p->c, &p->st->mem, &((dsq_gguf_str *)data)[i]));
        } else {
            dsq_gguf_value *v = &((dsq_gguf_value *)data)[i];
            v->type = DSQ_GGUF_ARRAY;
            DSQ_TRY(parse_array(p, level + 1, &v->v.arr));
        }
    }
    return DSQ_OK;
}

/* level: 1 for an array that is a key's value, 2 for the arrays inside it, ... */
static dsq_status parse_array(parser *p, int level, dsq_gguf_array *out)
{
    DSQ_TRY(rd_vtype(&p->c, &out->elem_type, "array element"));
    if (out->elem_type == DSQ_GGUF_ARRAY && level >= GGUF_MAX_DEPTH)
        return dsq_fail(DSQ_ERR_FORMAT, "arrays nested more than %d levels deep", GGUF_MAX_DEPTH);
    DSQ_TRY(rd_u64(&p->c, &out->n));
    /* Refuse a count the remaining bytes cannot hold before allocating for it. */
    uint64_t min = elem_min_encoded(out->elem_type);
    if (out->n > cur_left(&p->c) / min)
        return dsq_fail(DSQ_ERR_FORMAT, "array of %llu %s elements needs at least %llu bytes each, only %llu left",
                        (unsigned long long)out->n, dsq_gguf_vtype_name(out->elem_type), (unsigned long long)min,
                        (unsigned long long)cur_left(&p->c));
    void *data = arena_alloc(&p->st->mem, (size_t)out->n * elem_storage(out->elem_type));
    if (!data) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for an array of %llu", (unsigned long long)out->n);
    out->data = data;
    return parse_array_elems(p, level, out, data);
}

static dsq_status parse_value(parser *p, dsq_gguf_vtype t, dsq_gguf_value *out)
{
    out->type = t;
    if (t == DSQ_GGUF_STRING) return rd_str(&p->c, &p->st->mem, &out->v.str);
    if (t == DSQ_GGUF_ARRAY) return parse_array(p, 1, &out->v.arr);
    const uint8_t *b;
    DSQ_TRY(cur_take(&p->c, dsq_gguf_vtype_size(t), &b));
    widen_scalar(t, b, out);
    return DSQ_OK;
}

/* Reads a key or tensor name and refuses what our C-string API cannot carry. */
static dsq_status parse_name(parser *p, const char *what, dsq_gguf_str *s)
{
    DSQ_TRY(rd_str(&p->c, &p->st->mem, s));
    describe(p->where, sizeof p->where, what, s->ptr, s->len);
    if (memchr(s->ptr, '\0', (size_t)s->len)) return dsq_fail(DSQ_ERR_FORMAT, "contains a NUL byte");
    return DSQ_OK;
}

static dsq_status parse_kv(parser *p, uint64_t i)
{
    dsq_gguf_kv *kv = &p->g->kv[i];
    snprintf(p->where, sizeof p->where, "metadata entry #%llu", (unsigned long long)i);
    dsq_gguf_str key;
    DSQ_TRY(parse_name(p, "key", &key));
    if (key.len == 0) return dsq_fail(DSQ_ERR_FORMAT, "empty key");
    kv->key = key.ptr;
    int64_t dup;
    DSQ_TRY(index_add(&p->st->keys, kv->key, i, &dup));
    if (dup >= 0) return dsq_fail(DSQ_ERR_FORMAT, "duplicate key (also entry #%lld)", (long long)dup);
    dsq_gguf_vtype t;
    DSQ_TRY(rd_vtype(&p->c, &t, "value"));
    return parse_value(p, t, &kv->value);
}

static dsq_status parse_header(parser *p)
{
    dsq_gguf *g = p->g;
    snprintf(p->where, sizeof p->where, "header");
    uint32_t magic;
    DSQ_TRY(rd_u32(&p->c, &magic));
    if (magic != DSQ_GGUF_MAGIC) return dsq_fail(DSQ_ERR_FORMAT, "bad magic 0x%08x: not a GGUF file", magic);
    DSQ_TRY(rd_u32(&p->c, &g->version));
    if (g->version == 1)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "GGUF version 1 (32-bit counts) is not supported; "
                                             "re-convert the model with a current llama.cpp");
    if (g->version != 0 && (g->version & 0xffffu) == 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "GGUF version 0x%08x: a big-endian file? only little-endian "
                        "files are supported",
                        g->version);
    if (g->version != 2 && g->version != 3)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "GGUF version %u is not supported (2 and 3 are)", g->version);
    DSQ_TRY(rd_u64(&p->c, &g->n_tensors));
    DSQ_TRY(rd_u64(&p->c, &g->n_kv));
    if (g->n_kv > cur_left(&p->c) / GGUF_MIN_KV_BYTES)
        return dsq_fail(DSQ_ERR_FORMAT, "%llu metadata entries cannot fit in the %llu bytes left",
                        (unsigned long long)g->n_kv, (unsigned long long)cur_left(&p->c));
    return DSQ_OK;
}

static dsq_status parse_kvs(parser *p)
{
    dsq_gguf *g = p->g;
    g->kv = arena_alloc(&p->st->mem, (size_t)g->n_kv * sizeof *g->kv);
    if (!g->kv) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for %llu entries", (unsigned long long)g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) DSQ_TRY(parse_kv(p, i));
    return DSQ_OK;
}

static dsq_status read_alignment(parser *p)
{
    snprintf(p->where, sizeof p->where, "key 'general.alignment'");
    p->g->alignment = DSQ_GGUF_DEFAULT_ALIGNMENT;
    const dsq_gguf_value *v = dsq_gguf_get(p->g, "general.alignment");
    if (!v) return DSQ_OK;
    if (v->type != DSQ_GGUF_U32) return dsq_fail(DSQ_ERR_FORMAT, "is %s, must be u32", dsq_gguf_vtype_name(v->type));
    if (!is_pow2(v->v.u64)) return dsq_fail(DSQ_ERR_FORMAT, "%llu is not a power of two", (unsigned long long)v->v.u64);
    p->g->alignment = (uint32_t)v->v.u64;
    return DSQ_OK;
}

static dsq_status parse_dims(parser *p, dsq_gguf_tensor_info *ti)
{
    DSQ_TRY(rd_u32(&p->c, &ti->n_dims));
    if (ti->n_dims == 0 || ti->n_dims > GGUF_MAX_DIMS)
        return dsq_fail(DSQ_ERR_FORMAT, "%u dimensions (1 to %d allowed)", ti->n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < DSQ_MAX_DIMS; d++) ti->ne[d] = 1;
    for (uint32_t d = 0; d < ti->n_dims; d++) {
        uint64_t v;
        DSQ_TRY(rd_u64(&p->c, &v));
        if (v > INT64_MAX) return dsq_fail(DSQ_ERR_FORMAT, "dimension %u is negative (%lld)", d, (long long)v);
        ti->ne[d] = (int64_t)v;
    }
    uint64_t nel;
    if (!dsq_mul_dims(ti->ne, (int)ti->n_dims, &nel) || nel > INT64_MAX)
        return dsq_fail(DSQ_ERR_FORMAT, "element count overflows (ne = %lld x %lld x %lld x %lld)",
                        (long long)ti->ne[0], (long long)ti->ne[1], (long long)ti->ne[2], (long long)ti->ne[3]);
    return DSQ_OK;
}

static dsq_status parse_type_and_size(parser *p, dsq_gguf_tensor_info *ti)
{
    uint32_t id;
    DSQ_TRY(rd_u32(&p->c, &id));
    DSQ_TRY(dsq_type_from_ggml(id, &ti->type));
    const dsq_type_info *info = dsq_type_get((int)ti->type);
    if (ti->ne[0] % info->block_elems != 0)
        return dsq_fail(DSQ_ERR_FORMAT, "row length %lld is not a multiple of the %s block size %u",
                        (long long)ti->ne[0], info->name, info->block_elems);
    uint64_t nel;
    (void)dsq_mul_dims(ti->ne, (int)ti->n_dims, &nel); /* checked by parse_dims */
    return dsq_type_nbytes(ti->type, nel, &ti->nbytes);
}

static dsq_status parse_tensor_info(parser *p, uint64_t i)
{
    dsq_gguf_tensor_info *ti = &p->g->tensors[i];
    snprintf(p->where, sizeof p->where, "tensor #%llu", (unsigned long long)i);
    dsq_gguf_str name;
    DSQ_TRY(parse_name(p, "tensor", &name));
    if (name.len >= GGUF_MAX_NAME)
        return dsq_fail(DSQ_ERR_FORMAT, "name is %llu bytes; ggml allows at most %d", (unsigned long long)name.len,
                        GGUF_MAX_NAME - 1);
    ti->name = name.ptr;
    int64_t dup;
    DSQ_TRY(index_add(&p->st->tensors, ti->name, i, &dup));
    if (dup >= 0) return dsq_fail(DSQ_ERR_FORMAT, "duplicate tensor name (also tensor #%lld)", (long long)dup);
    DSQ_TRY(parse_dims(p, ti));
    DSQ_TRY(parse_type_and_size(p, ti));
    DSQ_TRY(rd_u64(&p->c, &ti->offset));
    if (ti->offset % p->g->alignment != 0)
        return dsq_fail(DSQ_ERR_FORMAT, "offset %llu is not a multiple of the alignment %u",
                        (unsigned long long)ti->offset, p->g->alignment);
    return DSQ_OK;
}

static dsq_status parse_tensor_infos(parser *p)
{
    dsq_gguf *g = p->g;
    snprintf(p->where, sizeof p->where, "tensor infos");
    if (g->n_tensors > cur_left(&p->c) / GGUF_MIN_TI_BYTES)
        return dsq_fail(DSQ_ERR_FORMAT, "%llu tensor infos cannot fit in the %llu bytes left",
                        (unsigned long long)g->n_tensors, (unsigned long long)cur_left(&p->c));
    g->tensors = arena_alloc(&p->st->mem, (size_t)g->n_tensors * sizeof *g->tensors);
    if (!g->tensors) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for %llu tensors", (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) DSQ_TRY(parse_tensor_info(p, i));
    return DSQ_OK;
}

typedef struct span {
    uint64_t begin, end, idx;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

/* Zero-byte tensors occupy nothing and cannot overlap. */
static dsq_status check_overlaps(parser *p)
{
    dsq_gguf *g = p->g;
    span *s = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].nbytes) s[n++] = (span){g->tensors[i].offset, g->tensors[i].offset + g->tensors[i].nbytes, i};
    qsort(s, n, sizeof *s, span_cmp);
    for (size_t i = 1; i < n; i++) {
        if (s[i].begin < s[i - 1].end) {
            const dsq_gguf_tensor_info *a = &g->tensors[s[i - 1].idx], *b = &g->tensors[s[i].idx];
            describe(p->where, sizeof p->where, "tensor", b->name, strlen(b->name));
            free(s);
            return dsq_fail(DSQ_ERR_FORMAT, "data [%llu, %llu) overlaps tensor '%s' [%llu, %llu)",
                            (unsigned long long)b->offset, (unsigned long long)(b->offset + b->nbytes), a->name,
                            (unsigned long long)a->offset, (unsigned long long)(a->offset + a->nbytes));
        }
    }
    free(s);
    return DSQ_OK;
}

/* The data section starts at the first aligned offset after the tensor infos. */
static dsq_status place_data(parser *p)
{
    dsq_gguf *g = p->g;
    g->data_offset = pad_to(p->c.pos, g->alignment);
    if (g->n_tensors == 0) return DSQ_OK;
    snprintf(p->where, sizeof p->where, "data section");
    if (g->data_offset > p->c.size)
        return dsq_fail(DSQ_ERR_FORMAT, "truncated: data starts at offset %llu but the file is %llu bytes",
                        (unsigned long long)g->data_offset, (unsigned long long)p->c.size);
    uint64_t avail = p->c.size - g->data_offset;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const dsq_gguf_tensor_info *t = &g->tensors[i];
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            describe(p->where, sizeof p->where, "tensor", t->name, strlen(t->name));
            return dsq_fail(DSQ_ERR_FORMAT,
                            "data [%llu, +%llu) runs past the end of the file (data section is %llu bytes)",
                            (unsigned long long)t->offset, (unsigned long long)t->nbytes, (unsigned long long)avail);
        }
    }
    return check_overlaps(p);
}

static dsq_status parse_file(dsq_gguf *g)
{
    parser p = {.c = {g->map.data, 0, g->map.size}, .g = g, .st = g->arena};
    dsq_status s = parse_header(&p);
    if (s == DSQ_OK) s = parse_kvs(&p);
    if (s == DSQ_OK) s = read_alignment(&p);
    if (s == DSQ_OK) s = parse_tensor_infos(&p);
    if (s == DSQ_OK) s = place_data(&p);
    if (s != DSQ_OK) return dsq_fail_context(s, "%s: %s", g->path, p.where);
    return DSQ_OK;
}

dsq_status dsq_gguf_open(const char *path, dsq_gguf **out)
{
    *out = NULL;
    dsq_gguf *g = calloc(1, sizeof *g);
    if (g) g->arena = calloc(1, sizeof(gguf_store));
    if (g && g->arena) g->path = strdup(path);
    if (!g || !g->arena || !g->path) {
        dsq_gguf_close(g);
        return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    }
    dsq_status s = dsq_mmap_open(path, &g->map);
    if (s == DSQ_OK) s = parse_file(g);
    if (s != DSQ_OK) {
        dsq_gguf_close(g);
        return s;
    }
    *out = g;
    return DSQ_OK;
}

void dsq_gguf_close(dsq_gguf *g)
{
    if (!g) return;
    dsq_mmap_close(&g->map);
    gguf_store *st = g->arena;
    if (st) {
        arena_free(&st->mem);
        dsq_strmap_free(&st->keys);
        dsq_strmap_free(&st->tensors);
        free(st);
    }
    free(g->path);
    free(g);
}

const dsq_gguf_value *dsq_gguf_get(const dsq_gguf *g, const char *key)
{
    const gguf_store *st = g->arena;
    int64_t i = index_find(&st->keys, key);
    return i >= 0 ? &g->kv[i].value : NULL;
}

int64_t dsq_gguf_find_tensor(const dsq_gguf *g, const char *name)
{
    const gguf_store *st = g->arena;
    return index_find(&st->tensors, name);
}

dsq_status dsq_gguf_tensor(const dsq_gguf *g, uint64_t i, dsq_tensor *out)
{
    if (i >= g->n_tensors)
        return dsq_fail(DSQ_ERR_ARG, "%s: tensor index %llu out of range (%llu tensors)", g->path,
                        (unsigned long long)i, (unsigned long long)g->n_tensors);
    const dsq_gguf_tensor_info *ti = &g->tensors[i];
    memset(out, 0, sizeof *out);
    out->name = ti->name;
    out->type = ti->type;
    out->n_dims = (int)ti->n_dims;
    for (uint32_t d = 0; d < ti->n_dims; d++) out->shape[d] = ti->ne[ti->n_dims - 1 - d];
    out->data = g->map.data + g->data_offset + ti->offset;
    out->nbytes = ti->nbytes;
    return DSQ_OK;
}

/* ---- typed getters ---- */

static dsq_status get_typed(const dsq_gguf *g, const char *key, const dsq_gguf_value **v)
{
    *v = dsq_gguf_get(g, key);
    if (!*v) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: key '%s' not found", g->path, key);
    return DSQ_OK;
}

static dsq_status wrong_type(const dsq_gguf *g, const char *key, const dsq_gguf_value *v, const char *want)
{
    return dsq_fail(DSQ_ERR_FORMAT, "%s: key '%s' is %s, expected %s", g->path, key, dsq_gguf_vtype_name(v->type),
                    want);
}

static bool is_unsigned(dsq_gguf_vtype t)
{
    return t == DSQ_GGUF_U8 || t == DSQ_GGUF_U16 || t == DSQ_GGUF_U32 || t == DSQ_GGUF_U64;
}

static bool is_signed(dsq_gguf_vtype t)
{
    return t == DSQ_GGUF_I8 || t == DSQ_GGUF_I16 || t == DSQ_GGUF_I32 || t == DSQ_GGUF_I64;
}

/* ---- lookups: yes/no, no message ---- */

bool dsq_gguf_find_u64(const dsq_gguf *g, const char *key, uint64_t *out)
{
    const dsq_gguf_value *v = dsq_gguf_get(g, key);
    if (!v) return false;
    if (is_unsigned(v->type)) {
        *out = v->v.u64;
        return true;
    }
    if (!is_signed(v->type) || v->v.i64 < 0) return false;
    *out = (uint64_t)v->v.i64;
    return true;
}

bool dsq_gguf_find_u32(const dsq_gguf *g, const char *key, uint32_t *out)
{
    uint64_t v;
    if (!dsq_gguf_find_u64(g, key, &v) || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

bool dsq_gguf_find_f32(const dsq_gguf *g, const char *key, float *out)
{
    const dsq_gguf_value *v = dsq_gguf_get(g, key);
    if (!v || (v->type != DSQ_GGUF_F32 && v->type != DSQ_GGUF_F64)) return false;
    *out = (float)v->v.f64;
    return true;
}

bool dsq_gguf_find_bool(const dsq_gguf *g, const char *key, bool *out)
{
    const dsq_gguf_value *v = dsq_gguf_get(g, key);
    if (!v || v->type != DSQ_GGUF_BOOL) return false;
    *out = v->v.b;
    return true;
}

bool dsq_gguf_find_str(const dsq_gguf *g, const char *key, const char **out)
{
    const dsq_gguf_value *v = dsq_gguf_get(g, key);
    if (!v || v->type != DSQ_GGUF_STRING) return false;
    *out = v->v.str.ptr;
    return true;
}

bool dsq_gguf_find_arr(const dsq_gguf *g, const char *key, dsq_gguf_vtype elem_type, const dsq_gguf_array **out)
{
    const dsq_gguf_value *v = dsq_gguf_get(g, key);
    if (!v || v->type != DSQ_GGUF_ARRAY || v->v.arr.elem_type != elem_type) return false;
    *out = &v->v.arr;
    return true;
}

/* ---- typed getters: the lookups, and a message saying why when they answer no ---- */

dsq_status dsq_gguf_get_u64(const dsq_gguf *g, const char *key, uint64_t *out)
{
    if (dsq_gguf_find_u64(g, key, out)) return DSQ_OK;
    const dsq_gguf_value *v;
    DSQ_TRY(get_typed(g, key, &v));
    if (!is_signed(v->type) && !is_unsigned(v->type)) return wrong_type(g, key, v, "an integer");
    return dsq_fail(DSQ_ERR_FORMAT, "%s: key '%s' is %lld, expected a non-negative value", g->path, key,
                    (long long)v->v.i64);
}

dsq_status dsq_gguf_get_u32(const dsq_gguf *g, const char *key, uint32_t *out)
{
    uint64_t v = 0;
    DSQ_TRY(dsq_gguf_get_u64(g, key, &v));
    if (v > UINT32_MAX)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: key '%s' is %llu, more than a u32 holds", g->path, key,
                        (unsigned long long)v);
    *out = (uint32_t)v;
    return DSQ_OK;
}

dsq_status dsq_gguf_get_f32(const dsq_gguf *g, const char *key, float *out)
{
    if (dsq_gguf_find_f32(g, key, out)) return DSQ_OK;
    const dsq_gguf_value *v;
    DSQ_TRY(get_typed(g, key, &v));
    return wrong_type(g, key, v, "f32 or f64");
}

dsq_status dsq_gguf_get_bool(const dsq_gguf *g, const char *key, bool *out)
{
    if (dsq_gguf_find_bool(g, key, out)) return DSQ_OK;
    const dsq_gguf_value *v;
    DSQ_TRY(get_typed(g, key, &v));
    return wrong_type(g, key, v, "bool");
}

dsq_status dsq_gguf_get_str(const dsq_gguf *g, const char *key, const char **out)
{
    if (dsq_gguf_find_str(g, key, out)) return DSQ_OK;
    const dsq_gguf_value *v;
    DSQ_TRY(get_typed(g, key, &v));
    return wrong_type(g, key, v, "str");
}

dsq_status dsq_gguf_get_arr(const dsq_gguf *g, const char *key, dsq_gguf_vtype elem_type, const dsq_gguf_array **out)
{
    if (dsq_gguf_find_arr(g, key, elem_type, out)) return DSQ_OK;
    const dsq_gguf_value *v;
    DSQ_TRY(get_typed(g, key, &v));
    char want[32];
    snprintf(want, sizeof want, "arr[%s]", dsq_gguf_vtype_name(elem_type));
    if (v->type != DSQ_GGUF_ARRAY) return wrong_type(g, key, v, want);
    return dsq_fail(DSQ_ERR_FORMAT, "%s: key '%s' is arr[%s], expected %s", g->path, key,
                    dsq_gguf_vtype_name(v->v.arr.elem_type), want);
}

/* ---- writer ---- */

typedef struct wtensor {
    const char *name;
    dsq_type type;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ggml order */
    uint64_t nbytes, offset;
} wtensor;

typedef enum wstate { W_BUILD, W_DATA, W_DONE, W_FAILED } wstate;

struct dsq_gguf_writer {
    arena mem; /* keys, names, values; a replaced value stays until free */
    dsq_gguf_kv *kv;
    uint64_t n_kv;
    size_t kv_cap;
    wtensor *t;
    uint64_t n_t;
    size_t t_cap;
    dsq_strmap t_index;
    wstate state;
    char *path;
    dsq_outfile *out;
    uint32_t alignment;
    uint64_t data_start, data_size;
    uint64_t cur, cur_done; /* tensor being streamed and its bytes so far */
    bool direct;            /* dsq_gguf_writer_set_direct */
};

dsq_status dsq_gguf_writer_new(dsq_gguf_writer **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return dsq_fail(DSQ_ERR_NOMEM, "gguf writer: out of memory");
    return DSQ_OK;
}

void dsq_gguf_writer_free(dsq_gguf_writer *w)
{
    if (!w) return;
    dsq_outfile_abort(w->out);
    arena_free(&w->mem);
    dsq_strmap_free(&w->t_index);
    free(w->kv);
    free(w->t);
    free(w->path);
    free(w);
}

static dsq_status check_value(const dsq_gguf_value *v, int level);

static dsq_status check_scalar(const dsq_gguf_value *v)
{
    static const uint64_t umax[DSQ_GGUF_VTYPE_COUNT] = {[DSQ_GGUF_U8] = UINT8_MAX,
                                                        [DSQ_GGUF_U16] = UINT16_MAX,
                                                        [DSQ_GGUF_U32] = UINT32_MAX,
                                                        [DSQ_GGUF_U64] = UINT64_MAX};
    static const int64_t smax[DSQ_GGUF_VTYPE_COUNT] = {
        [DSQ_GGUF_I8] = INT8_MAX, [DSQ_GGUF_I16] = INT16_MAX, [DSQ_GGUF_I32] = INT32_MAX, [DSQ_GGUF_I64] = INT64_MAX};
    if (is_unsigned(v->type) && v->v.u64 > umax[v->type])
        return dsq_fail(DSQ_ERR_ARG, "value %llu does not fit in %s", (unsigned long long)v->v.u64,
                        dsq_gguf_vtype_name(v->type));
    if (is_signed(v->type) && (v->v.i64 > smax[v->type] || v->v.i64 < -smax[v->type] - 1))
        return dsq_fail(DSQ_ERR_ARG, "value %lld does not fit in %s", (long long)v->v.i64,
                        dsq_gguf_vtype_name(v->type));
    return DSQ_OK;
}

static dsq_status check_array(const dsq_gguf_array *a, int level)
{
    if ((unsigned)a->elem_type >= DSQ_GGUF_VTYPE_COUNT)
        return dsq_fail(DSQ_ERR_ARG, "unknown array element type %d", (int)a->elem_type);
    if (a->elem_type == DSQ_GGUF_ARRAY && level >= GGUF_MAX_DEPTH)
        return dsq_fail(DSQ_ERR_ARG, "arrays nested more than %d levels deep", GGUF_MAX_DEPTH);
    if (a->n && !a->data) return dsq_fail(DSQ_ERR_ARG, "array of %llu elements without data", (unsigned long long)a->n);
    if (a->n > SIZE_MAX / elem_storage(a->elem_type))
        return dsq_fail(DSQ_ERR_ARG, "array of %llu elements is too large", (unsigned long long)a->n);
    for (uint64_t i = 0; i < a->n && a->elem_type == DSQ_GGUF_STRING; i++) {
        const dsq_gguf_str *s = &((const dsq_gguf_str *)a->data)[i];
        if (s->len && !s->ptr) return dsq_fail(DSQ_ERR_ARG, "string #%llu has no data", (unsigned long long)i);
    }
    for (uint64_t i = 0; i < a->n && a->elem_type == DSQ_GGUF_ARRAY; i++) {
        const dsq_gguf_value *e = &((const dsq_gguf_value *)a->data)[i];
        if (e->type != DSQ_GGUF_ARRAY)
            return dsq_fail(DSQ_ERR_ARG, "element #%llu of an array of arrays is %s", (unsigned long long)i,
                            dsq_gguf_vtype_name(e->type));
        DSQ_TRY(check_array(&e->v.arr, level + 1));
    }
    return DSQ_OK;
}

static dsq_status check_value(const dsq_gguf_value *v, int level)
{
    if ((unsigned)v->type >= DSQ_GGUF_VTYPE_COUNT) return dsq_fail(DSQ_ERR_ARG, "unknown value type %d", (int)v->type);
    if (v->type == DSQ_GGUF_STRING && v->v.str.len && !v->v.str.ptr)
        return dsq_fail(DSQ_ERR_ARG, "string without data");
    if (v->type == DSQ_GGUF_ARRAY) return check_array(&v->v.arr, level + 1);
    return check_scalar(v);
}

static dsq_status copy_str(arena *a, const dsq_gguf_str *src, dsq_gguf_str *dst)
{
    if (src->len >= SIZE_MAX) return dsq_fail(DSQ_ERR_ARG, "string too long");
    char *p = arena_strdup(a, src->ptr, (size_t)src->len);
    if (!p) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for a %llu-byte string", (unsigned long long)src->len);
    dst->ptr = p;
    dst->len = src->len;
    return DSQ_OK;
}

static dsq_status copy_array(arena *a, const dsq_gguf_array *src, dsq_gguf_array *dst)
{
    size_t es = elem_storage(src->elem_type);
    void *data = arena_alloc(a, (size_t)src->n * es);
    if (!data) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for an array of %llu", (unsigned long long)src->n);
    dst->elem_type = src->elem_type;
    dst->n = src->n;
    dst->data = data;
    if (vtype_is_scalar(src->elem_type)) {
        if (src->n) memcpy(data, src->data, (size_t)src->n * es);
        if (src->elem_type == DSQ_GGUF_BOOL)
            for (uint64_t i = 0; i < src->n; i++) ((uint8_t *)data)[i] = ((uint8_t *)data)[i] != 0;
        return DSQ_OK;
    }
    for (uint64_t i = 0; i < src->n; i++) {
        if (src->elem_type == DSQ_GGUF_STRING) {
            DSQ_TRY(copy_str(a, &((const dsq_gguf_str *)src->data)[i], &((dsq_gguf_str *)data)[i]));
        } else {
            dsq_gguf_value *e = &((dsq_gguf_value *)data)[i];
            e->type = DSQ_GGUF_ARRAY;
            DSQ_TRY(copy_array(a, &((const dsq_gguf_value *)src->data)[i].v.arr, &e->v.arr));
        }
    }
    return DSQ_OK;
}

static dsq_status copy_value(arena *a, const dsq_gguf_value *src, dsq_gguf_value *dst)
{
    *dst = *src;
    if (src->type == DSQ_GGUF_STRING) return copy_str(a, &src->v.str, &dst->v.str);
    if (src->type == DSQ_GGUF_ARRAY) return copy_array(a, &src->v.arr, &dst->v.arr);
    if (src->type == DSQ_GGUF_F32) dst->v.f64 = (float)src->v.f64; /* what the file will hold */
    return DSQ_OK;
}

static int64_t writer_find_key(const dsq_gguf_writer *w, const char *key)
{
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) return (int64_t)i;
    return -1;
}

static dsq_status check_alignment_value(const dsq_gguf_value *v)
{
    /* ggml and gguf-py both refuse a file whose alignment is not a u32 power of two. */
    if (v->type != DSQ_GGUF_U32) return dsq_fail(DSQ_ERR_ARG, "must be u32, not %s", dsq_gguf_vtype_name(v->type));
    if (!is_pow2(v->v.u64)) return dsq_fail(DSQ_ERR_ARG, "%llu is not a power of two", (unsigned long long)v->v.u64);
    return DSQ_OK;
}

static dsq_status writer_check_set(const dsq_gguf_writer *w, const char *key, const dsq_gguf_value *v)
{
    if (!key || !key[0]) return dsq_fail(DSQ_ERR_ARG, "gguf writer: empty key");
    if (w->state != W_BUILD)
        return dsq_fail(DSQ_ERR_ARG, "gguf writer: key '%s': metadata is fixed once writing has begun", key);
    dsq_status s = v ? check_value(v, 0) : dsq_fail(DSQ_ERR_ARG, "no value");
    if (s == DSQ_OK && !strcmp(key, "general.alignment")) s = check_alignment_value(v);
    if (s != DSQ_OK) return dsq_fail_context(s, "gguf writer: key '%s'", key);
    return DSQ_OK;
}

dsq_status dsq_gguf_set(dsq_gguf_writer *w, const char *key, const dsq_gguf_value *v)
{
    DSQ_TRY(writer_check_set(w, key, v));
    dsq_gguf_value copy;
    dsq_status s = copy_value(&w->mem, v, &copy);
    if (s != DSQ_OK) return dsq_fail_context(s, "gguf writer: key '%s'", key);
    int64_t i = writer_find_key(w, key);
    if (i >= 0) {
        w->kv[i].value = copy;
        return DSQ_OK;
    }
    char *k = arena_strdup(&w->mem, key, strlen(key));
    dsq_gguf_kv *kv = k ? dsq_grow(w->kv, &w->kv_cap, w->n_kv + 1, sizeof *kv) : NULL;
    if (!kv) return dsq_fail(DSQ_ERR_NOMEM, "gguf writer: key '%s': out of memory", key);
    w->kv = kv;
    w->kv[w->n_kv++] = (dsq_gguf_kv){k, copy};
    return DSQ_OK;
}

dsq_status dsq_gguf_set_u32(dsq_gguf_writer *w, const char *key, uint32_t v)
{
    return dsq_gguf_set(w, key, &(dsq_gguf_value){.type = DSQ_GGUF_U32, .v.u64 = v});
}

dsq_status dsq_gguf_set_i32(dsq_gguf_writer *w, const char *key, int32_t v)
{
    return dsq_gguf_set(w, key, &(dsq_gguf_value){.type = DSQ_GGUF_I32, .v.i64 = v});
}

dsq_status dsq_gguf_set_u64(dsq_gguf_writer *w, const char *key, uint64_t v)
{
    return dsq_gguf_set(w, key, &(dsq_gguf_value){.type = DSQ_GGUF_U64, .v.u64 = v});
}

dsq_status dsq_gguf_set_f32(dsq_gguf_writer *w, const char *key, float v)
{
    return dsq_gguf_set(w, key, &(dsq_gguf_value){.type = DSQ_GGUF_F32, .v.f64 = v});
}

dsq_status dsq_gguf_set_bool(dsq_gguf_writer *w, const char *key, bool v)
{
    return dsq_gguf_set(w, key, &(dsq_gguf_value){.type = DSQ_GGUF_BOOL, .v.b = v});
}

dsq_status dsq_gguf_set_str(dsq_gguf_writer *w, const char *key, const char *s)
{
    if (!s) return dsq_fail(DSQ_ERR_ARG, "gguf writer: key '%s': NULL string", key ? key : "");
    return dsq_gguf_set(w, key, &(dsq_gguf_value){.type = DSQ_GGUF_STRING, .v.str = {s, strlen(s)}});
}

dsq_status dsq_gguf_set_arr(dsq_gguf_writer *w, const char *key, dsq_gguf_vtype elem_type, const void *data, uint64_t n)
{
    if (!vtype_is_scalar(elem_type))
        return dsq_fail(DSQ_ERR_ARG, "gguf writer: key '%s': dsq_gguf_set_arr takes scalar elements, not %s",
                        key ? key : "", dsq_gguf_vtype_name(elem_type));
    dsq_gguf_value v = {.type = DSQ_GGUF_ARRAY, .v.arr = {elem_type, n, data}};
    return dsq_gguf_set(w, key, &v);
}

dsq_status dsq_gguf_set_str_arr(dsq_gguf_writer *w, const char *key, const char *const *strs, const uint64_t *lens,
                                uint64_t n)
{
    if (n && !strs) return dsq_fail(DSQ_ERR_ARG, "gguf writer: key '%s': no strings", key ? key : "");
    if (n > SIZE_MAX / sizeof(dsq_gguf_str))
        return dsq_fail(DSQ_ERR_ARG, "gguf writer: key '%s': too many strings", key ? key : "");
    dsq_gguf_str *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!tmp) return dsq_fail(DSQ_ERR_NOMEM, "gguf writer: key '%s': out of memory", key ? key : "");
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i]) {
            free(tmp);
            return dsq_fail(DSQ_ERR_ARG, "gguf writer: key '%s': string #%llu is NULL", key ? key : "",
                            (unsigned long long)i);
        }
        tmp[i] = (dsq_gguf_str){strs[i], lens ? lens[i] : strlen(strs[i])};
    }
    dsq_gguf_value v = {.type = DSQ_GGUF_ARRAY, .v.arr = {DSQ_GGUF_STRING, n, tmp}};
    dsq_status s = dsq_gguf_set(w, key, &v);
    free(tmp);
    return s;
}

bool dsq_gguf_writer_has(const dsq_gguf_writer *w, const char *key) { return key && writer_find_key(w, key) >= 0; }

dsq_status dsq_gguf_remove(dsq_gguf_writer *w, const char *key)
{
    if (!key) return dsq_fail(DSQ_ERR_ARG, "gguf writer: remove without a key");
    if (w->state != W_BUILD)
        return dsq_fail(DSQ_ERR_ARG, "gguf writer: key '%s': metadata is fixed once writing has begun", key);
    int64_t i = writer_find_key(w, key);
    if (i < 0) return dsq_fail(DSQ_ERR_NOT_FOUND, "gguf writer: key '%s' not found", key);
    memmove(&w->kv[i], &w->kv[i + 1], (size_t)(w->n_kv - (uint64_t)i - 1) * sizeof *w->kv);
    w->n_kv--;
    return DSQ_OK;
}

static dsq_status check_tensor(const char *name, dsq_type type, int n_dims, const int64_t *shape, wtensor *t)
{
    size_t len = strlen(name);
    if (len == 0 || len >= GGUF_MAX_NAME)
        return dsq_fail(DSQ_ERR_ARG, "name is %zu bytes (1 to %d allowed)", len, GGUF_MAX_NAME - 1);
    if (!dsq_type_is_ggml(type)) return dsq_fail(DSQ_ERR_ARG, "type %s has no GGUF id", dsq_type_name(type));
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || !shape)
        return dsq_fail(DSQ_ERR_ARG, "%d dimensions (1 to %d allowed)", n_dims, GGUF_MAX_DIMS);
    t->type = type;
    t->n_dims = (uint32_t)n_dims;
    for (int d = 0; d < n_dims; d++) t->ne[d] = shape[n_dims - 1 - d];
    uint64_t nel;
    if (!dsq_mul_dims(t->ne, n_dims, &nel) || nel > INT64_MAX)
        return dsq_fail(DSQ_ERR_ARG, "negative dimension or element count overflow");
    const dsq_type_info *info = dsq_type_get((int)type);
    if (t->ne[0] % info->block_elems != 0)
        return dsq_fail(DSQ_ERR_ARG, "row length %lld is not a multiple of the %s block size %u", (long long)t->ne[0],
                        info->name, info->block_elems);
    return dsq_type_nbytes(type, nel, &t->nbytes);
}

static dsq_status writer_add_tensor(dsq_gguf_writer *w, const char *name, dsq_type type, int n_dims,
                                    const int64_t *shape)
{
    if (w->state != W_BUILD) return dsq_fail(DSQ_ERR_ARG, "tensors are fixed once writing has begun");
    wtensor t = {0};
    DSQ_TRY(check_tensor(name, type, n_dims, shape, &t));
    if (index_find(&w->t_index, name) >= 0) return dsq_fail(DSQ_ERR_ARG, "duplicate tensor name");
    t.name = arena_strdup(&w->mem, name, strlen(name));
    wtensor *grown = t.name ? dsq_grow(w->t, &w->t_cap, w->n_t + 1, sizeof *grown) : NULL;
    if (!grown) return dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    w->t = grown;
    int64_t dup;
    DSQ_TRY(index_add(&w->t_index, t.name, w->n_t, &dup));
    w->t[w->n_t++] = t;
    return DSQ_OK;
}

dsq_status dsq_gguf_add_tensor(dsq_gguf_writer *w, const char *name, dsq_type type, int n_dims, const int64_t *shape)
{
    if (!name) return dsq_fail(DSQ_ERR_ARG, "gguf writer: tensor without a name");
    dsq_status s = writer_add_tensor(w, name, type, n_dims, shape);
    if (s != DSQ_OK) return dsq_fail_context(s, "gguf writer: tensor '%s'", name);
    return DSQ_OK;
}

/* -- serialisation: everything goes through the buffered dsq_outfile -- */

static dsq_status wr_u32(dsq_outfile *f, uint32_t v) { return dsq_outfile_write(f, &v, 4); }
static dsq_status wr_u64(dsq_outfile *f, uint64_t v) { return dsq_outfile_write(f, &v, 8); }

static dsq_status wr_str(dsq_outfile *f, const dsq_gguf_str *s)
{
    DSQ_TRY(wr_u64(f, s->len));
    return dsq_outfile_write(f, s->ptr, (size_t)s->len);
}

static void narrow_scalar(const dsq_gguf_value *v, uint8_t *b)
{
    switch (v->type) {
    case DSQ_GGUF_U8: b[0] = (uint8_t)v->v.u64; break;
    case DSQ_GGUF_I8: b[0] = (uint8_t)(int8_t)v->v.i64; break;
    case DSQ_GGUF_BOOL: b[0] = v->v.b ? 1 : 0; break;
    case DSQ_GGUF_U16: {
        uint16_t x = (uint16_t)v->v.u64;
        memcpy(b, &x, 2);
    } break;
    case DSQ_GGUF_I16: {
        int16_t x = (int16_t)v->v.i64;
        memcpy(b, &x, 2);
    } break;
    case DSQ_GGUF_U32: {
        uint32_t x = (uint32_t)v->v.u64;
        memcpy(b, &x, 4);
    } break;
    case DSQ_GGUF_I32: {
        int32_t x = (int32_t)v->v.i64;
        memcpy(b, &x, 4);
    } break;
    case DSQ_GGUF_F32: {
        float x = (float)v->v.f64;
        memcpy(b, &x, 4);
    } break;
    case DSQ_GGUF_U64: memcpy(b, &v->v.u64, 8); break;
    case DSQ_GGUF_I64: memcpy(b, &v->v.i64, 8); break;
    case DSQ_GGUF_F64: memcpy(b, &v->v.f64, 8); break;
    default: break;
    }
}

static dsq_status wr_array(dsq_outfile *f, const dsq_gguf_array *a)
{
    DSQ_TRY(wr_u32(f, (uint32_t)a->elem_type));
    DSQ_TRY(wr_u64(f, a->n));
    if (vtype_is_scalar(a->elem_type)) return dsq_outfile_write(f, a->data, (size_t)a->n * elem_storage(a->elem_type));
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->elem_type == DSQ_GGUF_STRING)
            DSQ_TRY(wr_str(f, &((const dsq_gguf_str *)a->data)[i]));
        else
            DSQ_TRY(wr_array(f, &((const dsq_gguf_value *)a->data)[i].v.arr));
    }
    return DSQ_OK;
}

static dsq_status wr_kv(dsq_outfile *f, const dsq_gguf_kv *kv)
{
    DSQ_TRY(wr_str(f, &(dsq_gguf_str){kv->key, strlen(kv->key)}));
    DSQ_TRY(wr_u32(f, (uint32_t)kv->value.type));
    if (kv->value.type == DSQ_GGUF_STRING) return wr_str(f, &kv->value.v.str);
    if (kv->value.type == DSQ_GGUF_ARRAY) return wr_array(f, &kv->value.v.arr);
    uint8_t b[8];
    narrow_scalar(&kv->value, b);
    return dsq_outfile_write(f, b, dsq_gguf_vtype_size(kv->value.type));
}

static dsq_status wr_tensor_info(dsq_outfile *f, const wtensor *t)
{
    DSQ_TRY(wr_str(f, &(dsq_gguf_str){t->name, strlen(t->name)}));
    DSQ_TRY(wr_u32(f, t->n_dims));
    for (uint32_t d = 0; d < t->n_dims; d++) DSQ_TRY(wr_u64(f, (uint64_t)t->ne[d]));
    DSQ_TRY(wr_u32(f, (uint32_t)t->type));
    return wr_u64(f, t->offset);
}

/* Offsets as gguf-py and ggml lay them out: each tensor padded to the alignment. */
static dsq_status layout_tensors(dsq_gguf_writer *w)
{
    int64_t a = writer_find_key(w, "general.alignment");
    w->alignment = a >= 0 ? (uint32_t)w->kv[a].value.v.u64 : DSQ_GGUF_DEFAULT_ALIGNMENT;
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        uint64_t padded = pad_to(w->t[i].nbytes, w->alignment);
        if (padded < w->t[i].nbytes || !dsq_add_u64(off, padded, &off))
            return dsq_fail(DSQ_ERR_ARG, "tensor '%s': data section size overflows", w->t[i].name);
    }
    w->data_size = off;
    return DSQ_OK;
}

/* Bytes each part of the header takes on disk (mirrors the wr_* functions). */
static uint64_t array_disk_bytes(const dsq_gguf_array *a)
{
    uint64_t n = 4 + 8;
    if (vtype_is_scalar(a->elem_type)) return n + a->n * dsq_gguf_vtype_size(a->elem_type);
    for (uint64_t i = 0; i < a->n; i++)
        n += a->elem_type == DSQ_GGUF_STRING ? 8 + ((const dsq_gguf_str *)a->data)[i].len
                                             : array_disk_bytes(&((const dsq_gguf_value *)a->data)[i].v.arr);
    return n;
}

static uint64_t kv_disk_bytes(const dsq_gguf_kv *kv)
{
    uint64_t n = 8 + strlen(kv->key) + 4;
    if (kv->value.type == DSQ_GGUF_STRING) return n + 8 + kv->value.v.str.len;
    if (kv->value.type == DSQ_GGUF_ARRAY) return n + array_disk_bytes(&kv->value.v.arr);
    return n + dsq_gguf_vtype_size(kv->value.type);
}

dsq_status dsq_gguf_writer_layout(dsq_gguf_writer *w, uint64_t *header_bytes, uint64_t *data_bytes, uint32_t *alignment)
{
    if (w->state != W_BUILD) return dsq_fail(DSQ_ERR_ARG, "gguf writer: layout after dsq_gguf_writer_begin");
    DSQ_TRY(layout_tensors(w));
    uint64_t n = 4 + 4 + 8 + 8;
    for (uint64_t i = 0; i < w->n_kv; i++) n += kv_disk_bytes(&w->kv[i]);
    for (uint64_t i = 0; i < w->n_t; i++) n += 8 + strlen(w->t[i].name) + 4 + 8 * (uint64_t)w->t[i].n_dims + 4 + 8;
    *header_bytes = pad_to(n, w->alignment);
    *data_bytes = w->data_size;
    *alignment = w->alignment;
    return DSQ_OK;
}

static dsq_status wr_header(dsq_gguf_writer *w)
{
    dsq_outfile *f = w->out;
    DSQ_TRY(wr_u32(f, DSQ_GGUF_MAGIC));
    DSQ_TRY(wr_u32(f, GGUF_VERSION));
    DSQ_TRY(wr_u64(f, w->n_t));
    DSQ_TRY(wr_u64(f, w->n_kv));
    for (uint64_t i = 0; i < w->n_kv; i++) DSQ_TRY(wr_kv(f, &w->kv[i]));
    for (uint64_t i = 0; i < w->n_t; i++) DSQ_TRY(wr_tensor_info(f, &w->t[i]));
    DSQ_TRY(dsq_outfile_align(f, w->alignment));
    w->data_start = dsq_outfile_tell(f);
    return DSQ_OK;
}

/* Removes the temporary file: after a failure nothing appears at the destination. */
static dsq_status writer_fail(dsq_gguf_writer *w, dsq_status s)
{
    dsq_outfile_abort(w->out);
    w->out = NULL;
    w->state = W_FAILED;
    return s;
}

static void skip_empty_tensors(dsq_gguf_writer *w)
{
    while (w->cur < w->n_t && w->t[w->cur].nbytes == 0) w->cur++;
}

void dsq_gguf_writer_set_direct(dsq_gguf_writer *w, bool on) { w->direct = on; }

dsq_status dsq_gguf_writer_begin(dsq_gguf_writer *w, const char *path, bool overwrite)
{
    if (w->state != W_BUILD) return dsq_fail(DSQ_ERR_ARG, "%s: gguf writer already began", path);
    dsq_status s = layout_tensors(w);
    if (s != DSQ_OK) return dsq_fail_context(s, "%s", path);
    free(w->path);
    w->path = strdup(path);
    if (!w->path) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    DSQ_TRY(dsq_outfile_open(path, overwrite, &w->out)); /* nothing created on failure: begin may be retried */
    dsq_outfile_set_direct(w->out, w->direct);
    s = wr_header(w);
    if (s != DSQ_OK) return writer_fail(w, s);
    w->state = W_DATA;
    w->cur = 0;
    w->cur_done = 0;
    skip_empty_tensors(w);
    return DSQ_OK;
}

static dsq_status writer_not_writing(const dsq_gguf_writer *w)
{
    const char *p = w->path ? w->path : "gguf writer";
    if (w->state == W_BUILD) return dsq_fail(DSQ_ERR_ARG, "%s: tensor data before dsq_gguf_writer_begin", p);
    if (w->state == W_DONE) return dsq_fail(DSQ_ERR_ARG, "%s: the file is already finished", p);
    return dsq_fail(DSQ_ERR_ARG, "%s: not written: an earlier step failed", p);
}

dsq_status dsq_gguf_writer_write(dsq_gguf_writer *w, const void *data, uint64_t n)
{
    if (w->state != W_DATA) return writer_not_writing(w);
    if (n && !data) return writer_fail(w, dsq_fail(DSQ_ERR_ARG, "%s: NULL tensor data", w->path));
    const uint8_t *p = data;
    while (n > 0) {
        if (w->cur >= w->n_t)
            return writer_fail(w, dsq_fail(DSQ_ERR_ARG, "%s: %llu bytes more than the tensors declare", w->path,
                                           (unsigned long long)n));
        const wtensor *t = &w->t[w->cur];
        uint64_t k = t->nbytes - w->cur_done < n ? t->nbytes - w->cur_done : n;
        dsq_status s = dsq_outfile_write(w->out, p, (size_t)k);
        p += k;
        n -= k;
        w->cur_done += k;
        if (s == DSQ_OK && w->cur_done == t->nbytes) {
            s = dsq_outfile_write_zeros(w->out, (size_t)(pad_to(t->nbytes, w->alignment) - t->nbytes));
            w->cur++;
            w->cur_done = 0;
            skip_empty_tensors(w);
        }
        if (s != DSQ_OK) return writer_fail(w, s);
    }
    return DSQ_OK;
}

dsq_status dsq_gguf_writer_finish(dsq_gguf_writer *w)
{
    if (w->state != W_DATA) return writer_not_writing(w);
    if (w->cur < w->n_t)
        return writer_fail(w, dsq_fail(DSQ_ERR_ARG, "%s: tensor '%s': %llu of %llu bytes written", w->path,
                                       w->t[w->cur].name, (unsigned long long)w->cur_done,
                                       (unsigned long long)w->t[w->cur].nbytes));
    if (dsq_outfile_tell(w->out) != w->data_start + w->data_size)
        return writer_fail(w, dsq_fail(DSQ_ERR_INTERNAL, "%s: wrote %llu bytes, expected %llu", w->path,
                                       (unsigned long long)dsq_outfile_tell(w->out),
                                       (unsigned long long)(w->data_start + w->data_size)));
    dsq_status s = dsq_outfile_commit(w->out);
    w->out = NULL;
    w->state = s == DSQ_OK ? W_DONE : W_FAILED;
    return s;
}
