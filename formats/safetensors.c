/* safetensors reader (one file or a sharded checkpoint) and streaming writer.
 *
 * Validation follows the huggingface/safetensors reference reader
 * (safetensors/src/tensor.rs, read_metadata + Metadata::validate): the header
 * is UTF-8 JSON starting with '{', at most 100 MB; every tensor's byte range
 * equals product(shape) x dtype size; the ranges, sorted by offset, tile the
 * data section from 0 to its end with no gap and no overlap. The writer pads
 * the header with spaces to a multiple of 8 bytes as the reference does, and
 * names shards and the index the way transformers' save_pretrained does. */
#include "formats/safetensors.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/grow.h"
#include "core/json.h"
#include "core/log.h"
#include "core/utf8.h"

#define ST_INDEX_NAME "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"
#define ST_META_KEY "__metadata__"
/* Index files of the largest public checkpoints are a few MB. */
#define ST_MAX_INDEX_BYTES ((size_t)256 << 20)
/* cJSON holds numbers as doubles: above 2^53 they are no longer exact. */
#define ST_MAX_JSON_INT 9007199254740992.0

/* ================= shared helpers ================= */

static dsq_status nomem(const char *what) { return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", what); }

static uint64_t read_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static bool utf8_valid(const char *s) { return dsq_utf8_valid(s, strlen(s)); }

/* What cJSON does not check but the reference parser (serde_json over a Rust
 * str) does: the text is UTF-8 and has no raw control bytes. "\u0000" is
 * refused too: cJSON would cut the name at the NUL, so two different names
 * could read as one. */
static dsq_status check_json_text(const char *path, const char *what, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        if (c >= 0x80) {
            size_t k = dsq_utf8_seq_len((const char *)p + i, n - i);
            if (k == 0) return dsq_fail(DSQ_ERR_FORMAT, "%s: %s is not valid UTF-8 at byte %zu", path, what, i);
            i += k;
            continue;
        }
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
            return dsq_fail(DSQ_ERR_FORMAT, "%s: %s contains control byte 0x%02x at byte %zu", path, what, c, i);
        if (c == '\\' && i + 1 < n && p[i + 1] >= 0x20 && p[i + 1] < 0x80) {
            if (p[i + 1] == 'u' && n - i >= 6 && !memcmp(p + i + 2, "0000", 4))
                return dsq_fail(DSQ_ERR_FORMAT, "%s: %s contains an escaped NUL (\\u0000) at byte %zu", path, what, i);
            i += 2; /* the escaped character cannot start another escape */
            continue;
        }
        i++;
    }
    return DSQ_OK;
}

/* Parses n bytes of JSON that must hold one object and nothing but
 * whitespace after it. The copy gives cJSON a NUL-terminated buffer. */
static dsq_status parse_json(const char *path, const char *what, const char *text, size_t n, cJSON **out)
{
    *out = NULL;
    char *buf = malloc(n + 1);
    if (!buf) return nomem(path);
    memcpy(buf, text, n);
    buf[n] = '\0';
    const char *end = NULL;
    dsq_status why;
    cJSON *root = dsq_json_parse(buf, n, &end, &why);
    size_t pos = end ? (size_t)(end - buf) : 0;
    dsq_status s = DSQ_OK;
    if (!root && why == DSQ_ERR_NOMEM) {
        s = dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory parsing the %s", path, what);
    } else if (!root) {
        s = dsq_fail(DSQ_ERR_FORMAT, "%s: %s is not valid JSON (error near byte %zu)", path, what, pos);
    } else {
        for (size_t i = pos; i < n && s == DSQ_OK; i++)
            if (!strchr(" \t\r\n", buf[i]))
                s = dsq_fail(DSQ_ERR_FORMAT, "%s: %s has trailing bytes after the JSON value (byte %zu)", path, what,
                             i);
        if (s == DSQ_OK && !cJSON_IsObject(root))
            s = dsq_fail(DSQ_ERR_FORMAT, "%s: %s is not a JSON object", path, what);
    }
    free(buf);
    if (s != DSQ_OK) {
        cJSON_Delete(root);
        return s;
    }
    *out = root;
    return DSQ_OK;
}

static int cmp_cstr_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* cJSON keeps every copy of a repeated key (the reference parser refuses
 * them). *dup is the first repeated key, or NULL. */
static dsq_status find_dup_key(const char *path, const cJSON *obj, const char **dup)
{
    *dup = NULL;
    size_t n = 0;
    for (const cJSON *c = obj->child; c; c = c->next) n++;
    if (n < 2) return DSQ_OK;
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) return nomem(path);
    size_t i = 0;
    for (const cJSON *c = obj->child; c; c = c->next) keys[i++] = c->string ? c->string : "";
    qsort(keys, n, sizeof *keys, cmp_cstr_ptr);
    for (i = 1; i < n && !*dup; i++)
        if (!strcmp(keys[i - 1], keys[i])) *dup = keys[i];
    free(keys);
    return DSQ_OK;
}

typedef enum { JINT_OK, JINT_NOT_NUMBER, JINT_NEGATIVE, JINT_FRACTION, JINT_TOO_BIG } jint_result;

/* A JSON number that is an exact non-negative integer no larger than 2^53. */
static jint_result json_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return JINT_NOT_NUMBER;
    double d = v->valuedouble;
    if (d < 0) return JINT_NEGATIVE;
    if (!(d <= ST_MAX_JSON_INT)) return JINT_TOO_BIG; /* NaN and Inf land here too */
    uint64_t u = (uint64_t)d;
    if ((double)u != d) return JINT_FRACTION;
    *out = u;
    return JINT_OK;
}

static const char *jint_problem(jint_result r)
{
    switch (r) {
    case JINT_NOT_NUMBER: return "is not a number";
    case JINT_NEGATIVE: return "is negative";
    case JINT_FRACTION: return "is not an integer";
    case JINT_TOO_BIG: return "exceeds 2^53";
    default: return "is invalid";
    }
}

/* ================= one file ================= */

static dsq_status parse_meta(dsq_st_file *f, const cJSON *meta)
{
    const char *path = f->map.path;
    if (!cJSON_IsObject(meta)) return dsq_fail(DSQ_ERR_FORMAT, "%s: __metadata__ is not an object", path);
    const char *dup;
    DSQ_TRY(find_dup_key(path, meta, &dup));
    if (dup) return dsq_fail(DSQ_ERR_FORMAT, "%s: duplicate __metadata__ key \"%s\"", path, dup);
    size_t n = 0;
    for (const cJSON *c = meta->child; c; c = c->next) n++;
    f->meta_keys = calloc(n ? n : 1, sizeof *f->meta_keys);
    f->meta_vals = calloc(n ? n : 1, sizeof *f->meta_vals);
    if (!f->meta_keys || !f->meta_vals) return nomem(path);
    for (const cJSON *c = meta->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return dsq_fail(DSQ_ERR_FORMAT, "%s: __metadata__ value of \"%s\" is not a string", path, c->string);
        f->meta_keys[f->n_meta] = strdup(c->string);
        f->meta_vals[f->n_meta] = strdup(c->valuestring);
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_vals[f->n_meta - 1]) return nomem(path);
    }
    return DSQ_OK;
}

static dsq_status parse_shape(const char *path, const cJSON *item, dsq_st_entry *e)
{
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    if (!shape) return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": missing \"shape\"", path, e->name);
    if (!cJSON_IsArray(shape))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": \"shape\" is not an array", path, e->name);
    int n = cJSON_GetArraySize(shape);
    if (n > DSQ_MAX_DIMS)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: tensor \"%s\": shape has %d dims, more than the %d supported", path,
                        e->name, n, DSQ_MAX_DIMS);
    int i = 0;
    for (const cJSON *d = shape->child; d; d = d->next, i++) {
        uint64_t v = 0;
        jint_result r = json_uint(d, &v);
        if (r != JINT_OK)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": shape[%d] %s", path, e->name, i, jint_problem(r));
        e->shape[i] = (int64_t)v;
    }
    e->n_dims = n;
    return DSQ_OK;
}

static dsq_status parse_offsets(const char *path, const cJSON *item, uint64_t data_size, dsq_st_entry *e)
{
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!offs) return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": missing \"data_offsets\"", path, e->name);
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": \"data_offsets\" is not a pair [begin, end]", path,
                        e->name);
    uint64_t v[2] = {0, 0};
    int i = 0;
    for (const cJSON *d = offs->child; d; d = d->next, i++) {
        jint_result r = json_uint(d, &v[i]);
        if (r != JINT_OK)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": data_offsets[%d] %s", path, e->name, i,
                            jint_problem(r));
    }
    if (v[0] > v[1])
        return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": data_offsets begin %llu is after end %llu", path, e->name,
                        (unsigned long long)v[0], (unsigned long long)v[1]);
    if (v[1] > data_size)
        return dsq_fail(DSQ_ERR_FORMAT,
                        "%s: tensor \"%s\": data_offsets [%llu, %llu] lie outside the %llu-byte data section", path,
                        e->name, (unsigned long long)v[0], (unsigned long long)v[1], (unsigned long long)data_size);
    e->begin = v[0];
    e->end = v[1];
    return DSQ_OK;
}

static dsq_status parse_entry(const char *path, const cJSON *item, uint64_t data_size, dsq_st_entry *e)
{
    if (!cJSON_IsObject(item))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": entry is not an object", path, e->name);
    const char *dup;
    DSQ_TRY(find_dup_key(path, item, &dup));
    if (dup) return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": field \"%s\" appears twice", path, e->name, dup);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    if (!dtype) return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": missing \"dtype\"", path, e->name);
    if (!cJSON_IsString(dtype))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": \"dtype\" is not a string", path, e->name);
    if (dsq_type_from_st_name(dtype->valuestring, &e->type) != DSQ_OK)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: tensor \"%s\": unknown dtype \"%s\"", path, e->name,
                        dtype->valuestring);
    DSQ_TRY(parse_shape(path, item, e));
    DSQ_TRY(parse_offsets(path, item, data_size, e));
    uint64_t nelems, nbytes;
    if (!dsq_mul_dims(e->shape, e->n_dims, &nelems) || dsq_type_nbytes(e->type, nelems, &nbytes) != DSQ_OK)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor \"%s\": shape times dtype size overflows", path, e->name);
    if (e->end - e->begin != nbytes)
        return dsq_fail(
            DSQ_ERR_FORMAT, "%s: tensor \"%s\": data_offsets span %llu bytes but shape and dtype %s need %llu", path,
            e->name, (unsigned long long)(e->end - e->begin), dtype->valuestring, (unsigned long long)nbytes);
    return DSQ_OK;
}

static dsq_status parse_root(dsq_st_file *f, const cJSON *root)
{
    const char *path = f->map.path;
    const char *dup;
    DSQ_TRY(find_dup_key(path, root, &dup));
    if (dup) {
        if (!strcmp(dup, ST_META_KEY)) return dsq_fail(DSQ_ERR_FORMAT, "%s: duplicate __metadata__ object", path);
        return dsq_fail(DSQ_ERR_FORMAT, "%s: duplicate tensor name \"%s\" in the header", path, dup);
    }
    size_t n = 0;
    for (const cJSON *c = root->child; c; c = c->next) n++;
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors) return nomem(path);
    for (const cJSON *c = root->child; c; c = c->next) {
        if (!strcmp(c->string, ST_META_KEY)) {
            DSQ_TRY(parse_meta(f, c));
            continue;
        }
        dsq_st_entry *e = &f->tensors[f->n_tensors++];
        e->name = strdup(c->string);
        if (!e->name) return nomem(path);
        DSQ_TRY(parse_entry(path, c, f->data_size, e));
    }
    return DSQ_OK;
}

static int cmp_entry_offsets(const void *a, const void *b)
{
    const dsq_st_entry *x = *(const dsq_st_entry *const *)a, *y = *(const dsq_st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* The reference reader wants the tensors, sorted by offset, to tile the data
 * section exactly: any gap or overlap is an error, unused bytes too. */
static dsq_status check_layout(const dsq_st_file *f)
{
    const char *path = f->map.path;
    size_t n = f->n_tensors;
    const dsq_st_entry **order = malloc((n ? n : 1) * sizeof *order);
    if (!order) return nomem(path);
    for (size_t i = 0; i < n; i++) order[i] = &f->tensors[i];
    qsort(order, n, sizeof *order, cmp_entry_offsets);
    dsq_status s = DSQ_OK;
    uint64_t pos = 0;
    const dsq_st_entry *prev = NULL;
    for (size_t i = 0; i < n && s == DSQ_OK; i++) {
        const dsq_st_entry *e = order[i];
        if (e->begin < pos)
            s = dsq_fail(DSQ_ERR_FORMAT, "%s: tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) overlap", path,
                         prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end, e->name,
                         (unsigned long long)e->begin, (unsigned long long)e->end);
        else if (e->begin > pos)
            s = dsq_fail(DSQ_ERR_FORMAT,
                         "%s: %llu unused bytes in the data section before tensor \"%s\" (offsets %llu to %llu)", path,
                         (unsigned long long)(e->begin - pos), e->name, (unsigned long long)pos,
                         (unsigned long long)e->begin);
        pos = e->end;
        prev = e;
    }
    if (s == DSQ_OK && pos != f->data_size)
        s = dsq_fail(
            DSQ_ERR_FORMAT, "%s: %llu unused bytes at the end of the data section (tensors end at %llu of %llu)", path,
            (unsigned long long)(f->data_size - pos), (unsigned long long)pos, (unsigned long long)f->data_size);
    free(order);
    return s;
}

static dsq_status parse_file(dsq_st_file *f)
{
    const char *path = f->map.path;
    size_t size = f->map.size;
    if (size < 8)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: file is %zu bytes, too short for the 8-byte header length", path, size);
    uint64_t n = read_le64(f->map.data);
    if (n == 0) return dsq_fail(DSQ_ERR_FORMAT, "%s: header length is 0", path);
    if (n > DSQ_ST_MAX_HEADER)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: header length %llu exceeds the limit of %u bytes", path,
                        (unsigned long long)n, DSQ_ST_MAX_HEADER);
    if (n > size - 8)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: header length %llu runs beyond the end of the file (%zu bytes)", path,
                        (unsigned long long)n, size);
    const uint8_t *h = f->map.data + 8;
    f->header_len = n;
    f->data = h + n;
    f->data_size = size - 8 - n;
    if (h[0] != '{') return dsq_fail(DSQ_ERR_FORMAT, "%s: header does not start with '{'", path);
    DSQ_TRY(check_json_text(path, "header", h, (size_t)n));
    cJSON *root;
    DSQ_TRY(parse_json(path, "header", (const char *)h, (size_t)n, &root));
    dsq_status s = parse_root(f, root);
    cJSON_Delete(root);
    if (s == DSQ_OK) s = check_layout(f);
    return s;
}

dsq_status dsq_st_open(const char *path, dsq_st_file **out)
{
    *out = NULL;
    dsq_st_file *f = calloc(1, sizeof *f);
    if (!f) return nomem(path);
    dsq_status s = dsq_mmap_open(path, &f->map);
    if (s == DSQ_OK) s = parse_file(f);
    if (s != DSQ_OK) {
        dsq_st_close(f);
        return s;
    }
    *out = f;
    return DSQ_OK;
}

void dsq_st_close(dsq_st_file *f)
{
    if (!f) return;
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    dsq_mmap_close(&f->map);
    free(f);
}

dsq_status dsq_st_view(const dsq_st_file *f, size_t i, dsq_tensor *out)
{
    if (i >= f->n_tensors)
        return dsq_fail(DSQ_ERR_ARG, "%s: tensor index %zu out of range (%zu tensors)", f->map.path, i, f->n_tensors);
    const dsq_st_entry *e = &f->tensors[i];
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->type = e->type;
    out->n_dims = e->n_dims;
    memcpy(out->shape, e->shape, sizeof out->shape);
    out->data = f->data + e->begin;
    out->nbytes = e->end - e->begin;
    return DSQ_OK;
}

const char *dsq_st_meta(const dsq_st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta_keys[i], key)) return f->meta_vals[i];
    return NULL;
}

/* ================= checkpoints ================= */

typedef struct st_name_ref {
    const char *name;
    uint32_t pos; /* index into dsq_st_model.tensors */
} st_name_ref;

/* The public struct plus a name index for dsq_st_model_find. */
typedef struct st_model_impl {
    dsq_st_model pub;
    st_name_ref *by_name; /* sorted by name */
    size_t cap_tensors;
} st_model_impl;

static const dsq_st_entry *model_entry(const dsq_st_model *m, size_t i)
{
    return &m->files[m->tensors[i].file]->tensors[m->tensors[i].idx];
}

static dsq_status model_add_file(st_model_impl *mi, dsq_st_file *f)
{
    dsq_st_model *m = &mi->pub;
    /* The message names f's path, so it is written before f is closed. */
    if (m->n_files >= UINT32_MAX || f->n_tensors > UINT32_MAX - m->n_tensors) {
        dsq_status s = dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: too many tensors", f->map.path);
        dsq_st_close(f);
        return s;
    }
    dsq_st_file **files = realloc(m->files, (m->n_files + 1) * sizeof *files);
    if (!files) {
        dsq_status s = nomem(f->map.path);
        dsq_st_close(f);
        return s;
    }
    m->files = files;
    m->files[m->n_files] = f;
    uint32_t fi = (uint32_t)m->n_files++;
    size_t need = m->n_tensors + f->n_tensors;
    struct dsq_st_ref *t = dsq_grow(m->tensors, &mi->cap_tensors, need, sizeof *t);
    if (!t) return nomem(f->map.path);
    m->tensors = t;
    for (size_t i = 0; i < f->n_tensors; i++) {
        m->tensors[m->n_tensors].file = fi;
        m->tensors[m->n_tensors].idx = (uint32_t)i;
        m->n_tensors++;
    }
    return DSQ_OK;
}

static int cmp_name_ref(const void *a, const void *b)
{
    const st_name_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Sorts the names for lookups; a name in two shards is an error. */
static dsq_status model_index_names(st_model_impl *mi)
{
    dsq_st_model *m = &mi->pub;
    mi->by_name = malloc((m->n_tensors ? m->n_tensors : 1) * sizeof *mi->by_name);
    if (!mi->by_name) return nomem("safetensors model");
    for (size_t i = 0; i < m->n_tensors; i++) {
        mi->by_name[i].name = model_entry(m, i)->name;
        mi->by_name[i].pos = (uint32_t)i;
    }
    qsort(mi->by_name, m->n_tensors, sizeof *mi->by_name, cmp_name_ref);
    for (size_t i = 1; i < m->n_tensors; i++) {
        if (strcmp(mi->by_name[i - 1].name, mi->by_name[i].name)) continue;
        const dsq_st_file *a = m->files[m->tensors[mi->by_name[i - 1].pos].file];
        const dsq_st_file *b = m->files[m->tensors[mi->by_name[i].pos].file];
        return dsq_fail(DSQ_ERR_FORMAT, "duplicate tensor name \"%s\" across shards: in %s and in %s",
                        mi->by_name[i].name, a->map.path, b->map.path);
    }
    return DSQ_OK;
}

static dsq_status open_single(st_model_impl *mi, const char *path)
{
    dsq_st_file *f;
    DSQ_TRY(dsq_st_open(path, &f));
    DSQ_TRY(model_add_file(mi, f));
    return model_index_names(mi);
}

/* A hostile index must not reach files outside its folder. */
static bool plain_file_name(const char *s) { return s[0] && !strchr(s, '/') && !strstr(s, ".."); }

static dsq_status check_weight_map(const char *path, const cJSON *wm)
{
    if (!cJSON_IsObject(wm)) return dsq_fail(DSQ_ERR_FORMAT, "%s: \"weight_map\" is missing or not an object", path);
    const char *dup;
    DSQ_TRY(find_dup_key(path, wm, &dup));
    if (dup) return dsq_fail(DSQ_ERR_FORMAT, "%s: weight_map names tensor \"%s\" twice", path, dup);
    if (!wm->child) return dsq_fail(DSQ_ERR_FORMAT, "%s: weight_map is empty", path);
    for (const cJSON *c = wm->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return dsq_fail(DSQ_ERR_FORMAT, "%s: weight_map entry of \"%s\" is not a string", path, c->string);
        if (!plain_file_name(c->valuestring))
            return dsq_fail(DSQ_ERR_FORMAT,
                            "%s: shard file name \"%s\" (tensor \"%s\") is not a plain file name in the index's folder",
                            path, c->valuestring, c->string);
    }
    return DSQ_OK;
}

/* Distinct shard names of the weight map, sorted: that is the shard order. */
static dsq_status shard_names(const char *path, const cJSON *wm, const char ***out, size_t *n_out)
{
    size_t n = 0;
    for (const cJSON *c = wm->child; c; c = c->next) n++;
    const char **names = malloc(n * sizeof *names);
    if (!names) return nomem(path);
    size_t i = 0;
    for (const cJSON *c = wm->child; c; c = c->next) names[i++] = c->valuestring;
    qsort(names, n, sizeof *names, cmp_cstr_ptr);
    size_t u = 0;
    for (i = 0; i < n; i++)
        if (u == 0 || strcmp(names[u - 1], names[i])) names[u++] = names[i];
    *out = names;
    *n_out = u;
    return DSQ_OK;
}

static dsq_status open_shards(st_model_impl *mi, const char *path, const char *dir, const char **names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char full[PATH_MAX];
        DSQ_TRY(dsq_path_join(full, sizeof full, dir, names[i]));
        if (!dsq_exists(full))
            return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: shard %s named by the index does not exist", path, full);
        dsq_st_file *f;
        DSQ_TRY(dsq_st_open(full, &f));
        DSQ_TRY(model_add_file(mi, f));
    }
    return DSQ_OK;
}

/* Every weight_map entry must point at the shard that holds the tensor.
 * Tensors the map leaves out are kept, with a warning. */
static dsq_status check_index_matches(st_model_impl *mi, const char *path, const cJSON *wm, const char **names,
                                      size_t n_names)
{
    dsq_st_model *m = &mi->pub;
    bool *listed = calloc(m->n_tensors ? m->n_tensors : 1, sizeof *listed);
    if (!listed) return nomem(path);
    dsq_status s = DSQ_OK;
    for (const cJSON *c = wm->child; c && s == DSQ_OK; c = c->next) {
        const char **sh = bsearch(&c->valuestring, names, n_names, sizeof *names, cmp_cstr_ptr);
        if (!sh) {
            s = dsq_fail(DSQ_ERR_INTERNAL, "%s: shard %s of tensor \"%s\" lost", path, c->valuestring, c->string);
            break;
        }
        size_t want = (size_t)(sh - names);
        int64_t pos = dsq_st_model_find(m, c->string);
        if (pos < 0) {
            s = dsq_fail(DSQ_ERR_NOT_FOUND, "%s: weight_map puts tensor \"%s\" in %s, but that shard lacks it", path,
                         c->string, c->valuestring);
        } else if (m->tensors[pos].file != want) {
            s = dsq_fail(DSQ_ERR_FORMAT, "%s: weight_map puts tensor \"%s\" in %s, but it is in %s", path, c->string,
                         c->valuestring, m->files[m->tensors[pos].file]->map.path);
        } else {
            listed[pos] = true;
        }
    }
    size_t unlisted = 0, first = 0;
    for (size_t i = 0; i < m->n_tensors && s == DSQ_OK; i++)
        if (!listed[i] && unlisted++ == 0) first = i;
    if (unlisted)
        DSQ_LOGW("%s: %zu tensors (first \"%s\" in %s) are missing from weight_map; loading them anyway", path,
                 unlisted, model_entry(m, first)->name, m->files[m->tensors[first].file]->map.path);
    free(listed);
    return s;
}

static dsq_status open_index(st_model_impl *mi, const char *path, const char *dir)
{
    char *text;
    size_t len;
    DSQ_TRY(dsq_read_file(path, ST_MAX_INDEX_BYTES, &text, &len));
    dsq_status s = check_json_text(path, "index", (const uint8_t *)text, len);
    cJSON *root = NULL;
    if (s == DSQ_OK) s = parse_json(path, "index", text, len, &root);
    free(text);
    if (s != DSQ_OK) return s;
    const char *dup = NULL;
    const char **names = NULL;
    size_t n_names = 0;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    s = find_dup_key(path, root, &dup);
    if (s == DSQ_OK && dup) s = dsq_fail(DSQ_ERR_FORMAT, "%s: duplicate key \"%s\"", path, dup);
    if (s == DSQ_OK) s = check_weight_map(path, wm);
    if (s == DSQ_OK) s = shard_names(path, wm, &names, &n_names);
    if (s == DSQ_OK) s = open_shards(mi, path, dir, names, n_names);
    if (s == DSQ_OK) s = model_index_names(mi);
    if (s == DSQ_OK) s = check_index_matches(mi, path, wm, names, n_names);
    free(names);
    cJSON_Delete(root);
    return s;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static dsq_status model_open_path(st_model_impl *mi, const char *path)
{
    char buf[PATH_MAX];
    if (!dsq_exists(path)) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: no such file or folder", path);
    if (dsq_is_dir(path)) {
        DSQ_TRY(dsq_path_join(buf, sizeof buf, path, ST_INDEX_NAME));
        if (dsq_exists(buf)) return open_index(mi, buf, path);
        DSQ_TRY(dsq_path_join(buf, sizeof buf, path, ST_SINGLE_NAME));
        if (dsq_exists(buf)) return open_single(mi, buf);
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: folder has neither %s nor %s", path, ST_INDEX_NAME, ST_SINGLE_NAME);
    }
    if (ends_with(path, ".json")) { /* an index named directly: shards sit next to it */
        const char *slash = strrchr(path, '/');
        size_t dl = slash ? (size_t)(slash - path) : 0;
        if (dl >= sizeof buf) return dsq_fail(DSQ_ERR_ARG, "%s: path too long", path);
        memcpy(buf, path, dl);
        buf[dl] = '\0';
        return open_index(mi, path, slash ? (dl ? buf : "/") : ".");
    }
    return open_single(mi, path);
}

dsq_status dsq_st_model_open(const char *path, dsq_st_model **out)
{
    *out = NULL;
    st_model_impl *mi = calloc(1, sizeof *mi);
    if (!mi) return nomem(path);
    dsq_status s = model_open_path(mi, path);
    if (s != DSQ_OK) {
        dsq_st_model_close(&mi->pub);
        return s;
    }
    *out = &mi->pub;
    return DSQ_OK;
}

void dsq_st_model_close(dsq_st_model *m)
{
    if (!m) return;
    st_model_impl *mi = (st_model_impl *)m;
    for (size_t i = 0; i < m->n_files; i++) dsq_st_close(m->files[i]);
    free(m->files);
    free(m->tensors);
    free(mi->by_name);
    free(mi);
}

dsq_status dsq_st_model_view(const dsq_st_model *m, size_t i, dsq_tensor *out)
{
    if (i >= m->n_tensors)
        return dsq_fail(DSQ_ERR_ARG, "safetensors model: tensor index %zu out of range (%zu tensors)", i, m->n_tensors);
    return dsq_st_view(m->files[m->tensors[i].file], m->tensors[i].idx, out);
}

static int cmp_name_key(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const st_name_ref *)elem)->name);
}

int64_t dsq_st_model_find(const dsq_st_model *m, const char *name)
{
    const st_model_impl *mi = (const st_model_impl *)m;
    if (!mi->by_name) return -1;
    const st_name_ref *r = bsearch(name, mi->by_name, m->n_tensors, sizeof *r, cmp_name_key);
    return r ? (int64_t)r->pos : -1;
}

const char *dsq_st_model_meta(const dsq_st_model *m, const char *key)
{
    for (size_t i = 0; i < m->n_files; i++) {
        const char *v = dsq_st_meta(m->files[i], key);
        if (v) return v;
    }
    return NULL;
}

/* ================= writer ================= */

/* A growing text buffer; an allocation failure sticks until checked. */
typedef struct st_sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} st_sbuf;

static void sb_put(st_sbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    char *p = n < SIZE_MAX - 1 - b->len ? dsq_grow(b->p, &b->cap, b->len + n + 1, 1) : NULL;
    if (!p) {
        b->oom = true;
        return;
    }
    b->p = p;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(st_sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(st_sbuf *b, uint64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    sb_put(b, tmp, (size_t)n);
}

/* JSON string with the escapes serde_json emits; UTF-8 passes through. */
static void sb_json_str(st_sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char tmp[8];
        switch (*p) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        default:
            if (*p < 0x20) {
                snprintf(tmp, sizeof tmp, "\\u%04x", *p);
                sb_put(b, tmp, 6);
            } else {
                sb_put(b, (const char *)p, 1);
            }
        }
    }
    sb_put(b, "\"", 1);
}

typedef struct st_wtensor {
    char *name;
    dsq_type type;
    int n_dims;
    int64_t shape[DSQ_MAX_DIMS];
    uint64_t nbytes;
    uint32_t shard;
    uint64_t begin; /* offset within its shard's data section */
} st_wtensor;

enum st_wstate { ST_W_ADDING, ST_W_WRITING, ST_W_FAILED, ST_W_DONE };

struct dsq_st_writer {
    char *dir, *base;
    uint64_t max_shard;
    size_t n_meta;
    char **meta_keys, **meta_vals;
    size_t n, cap;
    st_wtensor *t;
    uint32_t n_shards;
    size_t n_out;      /* shards, then the index when there are several shards */
    char **out_names;  /* file names in dir */
    char **out_paths;  /* full final paths */
    dsq_outfile **out; /* NULL once committed or aborted */
    bool *committed;
    size_t cur;        /* tensor being written */
    uint64_t cur_done; /* its bytes written so far */
    enum st_wstate state;
    bool direct; /* dsq_st_writer_set_direct */
};

dsq_status dsq_st_writer_new(const char *dir, const char *basename, uint64_t max_shard_bytes, dsq_st_writer **out)
{
    *out = NULL;
    if (!basename[0] || strchr(basename, '/'))
        return dsq_fail(DSQ_ERR_ARG, "safetensors writer: base name \"%s\" is not a plain file name", basename);
    if (!dsq_is_dir(dir)) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: output folder does not exist", dir);
    dsq_st_writer *w = calloc(1, sizeof *w);
    if (!w) return nomem(dir);
    w->dir = strdup(dir);
    w->base = strdup(basename);
    w->max_shard = max_shard_bytes;
    if (!w->dir || !w->base) {
        dsq_st_writer_free(w);
        return nomem(dir);
    }
    *out = w;
    return DSQ_OK;
}

/* Drops every output: open ones are aborted, committed ones removed. */
static void writer_discard(dsq_st_writer *w)
{
    for (size_t i = 0; i < w->n_out; i++) {
        if (w->out[i]) dsq_outfile_abort(w->out[i]);
        w->out[i] = NULL;
        if (w->committed[i]) (void)remove(w->out_paths[i]);
        w->committed[i] = false;
    }
    w->state = ST_W_FAILED;
}

void dsq_st_writer_free(dsq_st_writer *w)
{
    if (!w) return;
    if (w->state != ST_W_DONE && w->out) writer_discard(w);
    for (size_t i = 0; i < w->n_meta; i++) {
        free(w->meta_keys[i]);
        free(w->meta_vals[i]);
    }
    free(w->meta_keys);
    free(w->meta_vals);
    for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
    free(w->t);
    for (size_t i = 0; i < w->n_out; i++) {
        free(w->out_names[i]);
        free(w->out_paths[i]);
    }
    free(w->out_names);
    free(w->out_paths);
    free(w->out);
    free(w->committed);
    free(w->dir);
    free(w->base);
    free(w);
}

static dsq_status writer_check_adding(const dsq_st_writer *w, const char *what)
{
    if (w->state != ST_W_ADDING) return dsq_fail(DSQ_ERR_ARG, "%s/%s: %s after begin", w->dir, w->base, what);
    return DSQ_OK;
}

dsq_status dsq_st_writer_set_meta(dsq_st_writer *w, const char *key, const char *value)
{
    DSQ_TRY(writer_check_adding(w, "set_meta"));
    if (!utf8_valid(key) || !utf8_valid(value))
        return dsq_fail(DSQ_ERR_ARG, "%s/%s: metadata key or value is not valid UTF-8", w->dir, w->base);
    for (size_t i = 0; i < w->n_meta; i++)
        if (!strcmp(w->meta_keys[i], key))
            return dsq_fail(DSQ_ERR_ARG, "%s/%s: metadata key \"%s\" set twice", w->dir, w->base, key);
    char **k = realloc(w->meta_keys, (w->n_meta + 1) * sizeof *k);
    if (!k) return nomem(w->dir);
    w->meta_keys = k;
    char **v = realloc(w->meta_vals, (w->n_meta + 1) * sizeof *v);
    if (!v) return nomem(w->dir);
    w->meta_vals = v;
    char *kc = strdup(key), *vc = strdup(value);
    if (!kc || !vc) {
        free(kc);
        free(vc);
        return nomem(w->dir);
    }
    w->meta_keys[w->n_meta] = kc;
    w->meta_vals[w->n_meta] = vc;
    w->n_meta++;
    return DSQ_OK;
}

dsq_status dsq_st_writer_add(dsq_st_writer *w, const char *name, dsq_type type, int n_dims, const int64_t *shape)
{
    DSQ_TRY(writer_check_adding(w, "add"));
    const dsq_type_info *ti = dsq_type_get((int)type);
    if (!ti || !ti->st_name)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s/%s: tensor \"%s\": type %s has no safetensors dtype", w->dir, w->base,
                        name, dsq_type_name(type));
    if (!utf8_valid(name) || !strcmp(name, ST_META_KEY))
        return dsq_fail(DSQ_ERR_ARG, "%s/%s: tensor name \"%s\" is not allowed", w->dir, w->base, name);
    if (n_dims < 0 || n_dims > DSQ_MAX_DIMS)
        return dsq_fail(DSQ_ERR_ARG, "%s/%s: tensor \"%s\": %d dims", w->dir, w->base, name, n_dims);
    uint64_t nelems, nbytes;
    if (!dsq_mul_dims(shape, n_dims, &nelems) || dsq_type_nbytes(type, nelems, &nbytes) != DSQ_OK)
        return dsq_fail(DSQ_ERR_ARG, "%s/%s: tensor \"%s\": negative dim or size overflow", w->dir, w->base, name);
    st_wtensor *grown = dsq_grow(w->t, &w->cap, w->n + 1, sizeof *grown);
    if (!grown) return nomem(w->dir);
    w->t = grown;
    st_wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return nomem(w->dir);
    t->type = type;
    t->n_dims = n_dims;
    if (n_dims) memcpy(t->shape, shape, (size_t)n_dims * sizeof *shape);
    t->nbytes = nbytes;
    w->n++;
    return DSQ_OK;
}

static dsq_status writer_check_names(const dsq_st_writer *w)
{
    const char **names = malloc((w->n ? w->n : 1) * sizeof *names);
    if (!names) return nomem(w->dir);
    for (size_t i = 0; i < w->n; i++) names[i] = w->t[i].name;
    qsort(names, w->n, sizeof *names, cmp_cstr_ptr);
    dsq_status s = DSQ_OK;
    for (size_t i = 1; i < w->n && s == DSQ_OK; i++)
        if (!strcmp(names[i - 1], names[i]))
            s = dsq_fail(DSQ_ERR_ARG, "%s/%s: tensor \"%s\" added twice", w->dir, w->base, names[i]);
    free(names);
    return s;
}

/* Greedy, in the order added: a new shard starts when the next tensor would
 * push the current one past the limit (a tensor over the limit sits alone;
 * empty tensors never open a shard). */
static dsq_status writer_assign_shards(dsq_st_writer *w, uint64_t *total)
{
    uint32_t shard = 0;
    uint64_t used = 0, sum = 0;
    size_t in_shard = 0;
    for (size_t i = 0; i < w->n; i++) {
        st_wtensor *t = &w->t[i];
        if (!dsq_add_u64(sum, t->nbytes, &sum))
            return dsq_fail(DSQ_ERR_ARG, "%s/%s: total tensor size overflows", w->dir, w->base);
        if (w->max_shard && in_shard > 0 && t->nbytes > 0 && used + t->nbytes > w->max_shard) {
            shard++;
            used = 0;
            in_shard = 0;
        }
        t->shard = shard;
        t->begin = used;
        used += t->nbytes;
        in_shard++;
    }
    w->n_shards = shard + 1;
    *total = sum;
    return DSQ_OK;
}

static dsq_status writer_name_outputs(dsq_st_writer *w)
{
    w->n_out = w->n_shards + (w->n_shards > 1);
    w->out_names = calloc(w->n_out, sizeof *w->out_names);
    w->out_paths = calloc(w->n_out, sizeof *w->out_paths);
    w->out = calloc(w->n_out, sizeof *w->out);
    w->committed = calloc(w->n_out, sizeof *w->committed);
    if (!w->out_names || !w->out_paths || !w->out || !w->committed) {
        w->n_out = 0;
        return nomem(w->dir);
    }
    for (size_t i = 0; i < w->n_out; i++) {
        char name[PATH_MAX], full[PATH_MAX];
        int len;
        if (w->n_shards == 1)
            len = snprintf(name, sizeof name, "%s.safetensors", w->base);
        else if (i < w->n_shards)
            len = snprintf(name, sizeof name, "%s-%05zu-of-%05u.safetensors", w->base, i + 1, w->n_shards);
        else
            len = snprintf(name, sizeof name, "%s.safetensors.index.json", w->base);
        if (len < 0 || (size_t)len >= sizeof name)
            return dsq_fail(DSQ_ERR_ARG, "%s/%s: file name too long", w->dir, w->base);
        DSQ_TRY(dsq_path_join(full, sizeof full, w->dir, name));
        w->out_names[i] = strdup(name);
        w->out_paths[i] = strdup(full);
        if (!w->out_names[i] || !w->out_paths[i]) return nomem(w->dir);
    }
    return DSQ_OK;
}

/* Header of one shard: __metadata__ first, then its tensors in the order
 * added, padded with spaces to a multiple of 8 bytes. */
static void build_header(const dsq_st_writer *w, uint32_t shard, st_sbuf *b)
{
    sb_puts(b, "{");
    bool first = true;
    if (w->n_meta) {
        sb_puts(b, "\"" ST_META_KEY "\":{");
        for (size_t i = 0; i < w->n_meta; i++) {
            if (i) sb_puts(b, ",");
            sb_json_str(b, w->meta_keys[i]);
            sb_puts(b, ":");
            sb_json_str(b, w->meta_vals[i]);
        }
        sb_puts(b, "}");
        first = false;
    }
    for (size_t i = 0; i < w->n; i++) {
        const st_wtensor *t = &w->t[i];
        if (t->shard != shard) continue;
        if (!first) sb_puts(b, ",");
        first = false;
        sb_json_str(b, t->name);
        sb_puts(b, ":{\"dtype\":");
        sb_json_str(b, dsq_type_get((int)t->type)->st_name);
        sb_puts(b, ",\"shape\":[");
        for (int d = 0; d < t->n_dims; d++) {
            if (d) sb_puts(b, ",");
            sb_u64(b, (uint64_t)t->shape[d]);
        }
        sb_puts(b, "],\"data_offsets\":[");
        sb_u64(b, t->begin);
        sb_puts(b, ",");
        sb_u64(b, t->begin + t->nbytes);
        sb_puts(b, "]}");
    }
    sb_puts(b, "}");
    /* sb_put stops growing after a failed allocation: without the oom test
     * this loop would never end. */
    while (!b->oom && b->len % 8) sb_puts(b, " ");
}

static void build_index(const dsq_st_writer *w, uint64_t total, st_sbuf *b)
{
    sb_puts(b, "{\n  \"metadata\": {\n    \"total_size\": ");
    sb_u64(b, total);
    sb_puts(b, "\n  },\n  \"weight_map\": {");
    for (size_t i = 0; i < w->n; i++) {
        sb_puts(b, i ? ",\n    " : "\n    ");
        sb_json_str(b, w->t[i].name);
        sb_puts(b, ": ");
        sb_json_str(b, w->out_names[w->t[i].shard]);
    }
    sb_puts(b, "\n  }\n}\n");
}

static dsq_status writer_open_outputs(dsq_st_writer *w, uint64_t total)
{
    for (size_t i = 0; i < w->n_out; i++) {
        DSQ_TRY(dsq_outfile_open(w->out_paths[i], false, &w->out[i]));
        st_sbuf b = {0};
        if (i < w->n_shards) {
            build_header(w, (uint32_t)i, &b);
            /* direct I/O needs the data to start on a 4 KiB boundary: the
             * header takes the trailing spaces the format allows */
            while (w->direct && !b.oom && (b.len + 8) % 4096) sb_puts(&b, " ");
        } else {
            build_index(w, total, &b);
        }
        dsq_status s = b.oom ? nomem(w->out_paths[i]) : DSQ_OK;
        if (s == DSQ_OK && i < w->n_shards) {
            uint8_t len8[8];
            for (int k = 0; k < 8; k++) len8[k] = (uint8_t)((uint64_t)b.len >> (8 * k));
            s = dsq_outfile_write(w->out[i], len8, sizeof len8);
        }
        if (s == DSQ_OK) s = dsq_outfile_write(w->out[i], b.p, b.len);
        /* Only the shard being filled keeps a write buffer (many-shard checkpoints). */
        if (s == DSQ_OK) s = dsq_outfile_suspend(w->out[i]);
        if (s == DSQ_OK && w->direct && i < w->n_shards) dsq_outfile_set_direct(w->out[i], true);
        free(b.p);
        DSQ_TRY(s);
    }
    return DSQ_OK;
}

void dsq_st_writer_set_direct(dsq_st_writer *w, bool on) { w->direct = on; }

dsq_status dsq_st_writer_begin(dsq_st_writer *w)
{
    DSQ_TRY(writer_check_adding(w, "begin"));
    uint64_t total = 0;
    dsq_status s = writer_check_names(w);
    if (s == DSQ_OK) s = writer_assign_shards(w, &total);
    if (s == DSQ_OK) s = writer_name_outputs(w);
    if (s == DSQ_OK) s = writer_open_outputs(w, total);
    if (s != DSQ_OK) {
        writer_discard(w);
        return s;
    }
    w->state = ST_W_WRITING;
    return DSQ_OK;
}

/* Moves past finished tensors (empty ones included). */
static void writer_skip_done(dsq_st_writer *w)
{
    while (w->cur < w->n && w->cur_done == w->t[w->cur].nbytes) {
        w->cur++;
        w->cur_done = 0;
    }
}

static dsq_status writer_check_writing(const dsq_st_writer *w, const char *what)
{
    if (w->state == ST_W_WRITING) return DSQ_OK;
    if (w->state == ST_W_FAILED)
        return dsq_fail(DSQ_ERR_ARG, "%s/%s: %s after an earlier failure", w->dir, w->base, what);
    return dsq_fail(DSQ_ERR_ARG, "%s/%s: %s outside begin..finish", w->dir, w->base, what);
}

/* k more bytes of the current tensor are in its shard; a finished shard gives up its buffer. */
static dsq_status writer_advance(dsq_st_writer *w, uint64_t k)
{
    const st_wtensor *t = &w->t[w->cur];
    w->cur_done += k;
    bool shard_done = w->cur_done == t->nbytes && (w->cur + 1 == w->n || w->t[w->cur + 1].shard != t->shard);
    dsq_status s = shard_done ? dsq_outfile_suspend(w->out[t->shard]) : DSQ_OK;
    if (s != DSQ_OK) writer_discard(w);
    return s;
}

dsq_status dsq_st_writer_write(dsq_st_writer *w, const void *data, uint64_t n)
{
    DSQ_TRY(writer_check_writing(w, "write"));
    if (!data && n) return dsq_fail(DSQ_ERR_ARG, "%s/%s: write from a NULL buffer", w->dir, w->base);
    const uint8_t *p = data;
    while (n > 0) {
        writer_skip_done(w);
        if (w->cur == w->n) {
            dsq_status s = dsq_fail(DSQ_ERR_ARG, "%s/%s: %llu bytes written past the last tensor", w->dir, w->base,
                                    (unsigned long long)n);
            writer_discard(w);
            return s;
        }
        const st_wtensor *t = &w->t[w->cur];
        uint64_t k = t->nbytes - w->cur_done;
        if (k > n) k = n;
        dsq_status s = dsq_outfile_write(w->out[t->shard], p, (size_t)k);
        if (s != DSQ_OK) {
            writer_discard(w);
            return dsq_fail_context(s, "tensor \"%s\"", t->name);
        }
        p += k;
        n -= k;
        DSQ_TRY(writer_advance(w, k));
    }
    return DSQ_OK;
}

dsq_status dsq_st_writer_reserve(dsq_st_writer *w, size_t min, size_t max, uint8_t **p, size_t *got)
{
    *p = NULL, *got = 0;
    DSQ_TRY(writer_check_writing(w, "reserve"));
    writer_skip_done(w);
    if (w->cur == w->n) {
        dsq_status s = dsq_fail(DSQ_ERR_ARG, "%s/%s: bytes reserved past the last tensor", w->dir, w->base);
        writer_discard(w);
        return s;
    }
    const st_wtensor *t = &w->t[w->cur];
    uint64_t rem = t->nbytes - w->cur_done;
    if (max > rem) max = (size_t)rem;
    if (min > max) min = max;
    dsq_status s = dsq_outfile_reserve(w->out[t->shard], min, max, p, got);
    if (s != DSQ_OK) {
        writer_discard(w);
        return dsq_fail_context(s, "tensor \"%s\"", t->name);
    }
    return DSQ_OK;
}

dsq_status dsq_st_writer_produced(dsq_st_writer *w, size_t n)
{
    DSQ_TRY(writer_check_writing(w, "produced"));
    const st_wtensor *t = &w->t[w->cur];
    if (w->cur == w->n || n > t->nbytes - w->cur_done)
        return dsq_fail(DSQ_ERR_INTERNAL, "%s/%s: more bytes produced than reserved", w->dir, w->base);
    dsq_status s = dsq_outfile_produced(w->out[t->shard], n);
    if (s != DSQ_OK) {
        writer_discard(w);
        return dsq_fail_context(s, "tensor \"%s\"", t->name);
    }
    return writer_advance(w, n);
}

dsq_status dsq_st_writer_finish(dsq_st_writer *w)
{
    DSQ_TRY(writer_check_writing(w, "finish"));
    writer_skip_done(w);
    if (w->cur < w->n) {
        const st_wtensor *t = &w->t[w->cur];
        dsq_status s =
            dsq_fail(DSQ_ERR_ARG, "%s/%s: finish with tensor \"%s\" incomplete (%llu of %llu bytes written)", w->dir,
                     w->base, t->name, (unsigned long long)w->cur_done, (unsigned long long)t->nbytes);
        writer_discard(w);
        return s;
    }
    /* Shards first, the index last: a reader never sees an index whose shards are missing. */
    for (size_t i = 0; i < w->n_out; i++) {
        dsq_status s = dsq_outfile_commit(w->out[i]);
        w->out[i] = NULL;
        if (s != DSQ_OK) {
            writer_discard(w);
            return s;
        }
        w->committed[i] = true;
    }
    w->state = ST_W_DONE;
    return DSQ_OK;
}
