/* llama.cpp importance matrices. Layout from llama.cpp examples/imatrix/imatrix.cpp
 * (save_imatrix) and examples/quantize/quantize.cpp (load_imatrix: values
 * divided by ncall when ncall > 0; optional last_chunk + dataset trailer).
 * The GGUF reader follows the later tools/quantize load_gguf_imatrix:
 * importance = in_sum2 / counts per expert row, 1.0 where the count is 0. */
#include "formats/imatrix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checked.h"
#include "core/fileio.h"
#include "core/log.h"
#include "formats/gguf.h"

/* Smallest legacy entry: name_len, 1 name byte, ncall, nval, 1 value. */
#define MIN_ENTRY_BYTES 17u
/* A legacy file bigger than this is not an imatrix (largest real ones: ~100 MB). */
#define MAX_FILE_BYTES ((size_t)1 << 32)

/* ---- entries ---- */

static void entry_free(dsq_imatrix_entry *e)
{
    free(e->name);
    free(e->values);
    free(e->stored);
    memset(e, 0, sizeof *e);
}

void dsq_imatrix_free(dsq_imatrix *im)
{
    if (!im) return;
    for (size_t i = 0; i < im->n_entries; i++) entry_free(&im->entries[i]);
    free(im->entries);
    free(im->dataset);
    free(im);
}

dsq_status dsq_imatrix_new(dsq_imatrix **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return dsq_fail(DSQ_ERR_NOMEM, "imatrix: out of memory");
    (*out)->last_chunk = -1;
    return DSQ_OK;
}

/* Position where name is or would be inserted; *found tells which. */
static size_t find_pos(const dsq_imatrix *im, const char *name, bool *found)
{
    size_t lo = 0, hi = im->n_entries;
    *found = false;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(im->entries[mid].name, name);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

const dsq_imatrix_entry *dsq_imatrix_find(const dsq_imatrix *im, const char *name)
{
    if (!im || !name) return NULL;
    bool found;
    size_t pos = find_pos(im, name, &found);
    return found ? &im->entries[pos] : NULL;
}

/* Takes ownership of e's buffers (freed on failure). Duplicates are refused:
 * llama-imatrix never writes two entries of one name. */
static dsq_status insert_entry(dsq_imatrix *im, dsq_imatrix_entry *e, bool replace, const char *what)
{
    bool found;
    size_t pos = find_pos(im, e->name, &found);
    if (found) {
        if (!replace) {
            dsq_status st = dsq_fail(DSQ_ERR_FORMAT, "%s: entry %s appears twice", what, e->name);
            entry_free(e);
            return st;
        }
        entry_free(&im->entries[pos]);
        im->entries[pos] = *e;
        return DSQ_OK;
    }
    dsq_imatrix_entry *grown = realloc(im->entries, (im->n_entries + 1) * sizeof *grown);
    if (!grown) {
        entry_free(e);
        return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", what);
    }
    im->entries = grown;
    memmove(&grown[pos + 1], &grown[pos], (im->n_entries - pos) * sizeof *grown);
    grown[pos] = *e;
    im->n_entries++;
    return DSQ_OK;
}

static dsq_status alloc_entry(dsq_imatrix_entry *e, const char *name, size_t name_len, uint32_t nval, const char *what)
{
    memset(e, 0, sizeof *e);
    e->name = malloc(name_len + 1);
    e->values = malloc((size_t)nval * sizeof(float));
    e->stored = malloc((size_t)nval * sizeof(float));
    if (!e->name || !e->values || !e->stored) {
        entry_free(e);
        return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for %u values", what, nval);
    }
    memcpy(e->name, name, name_len);
    e->name[name_len] = '\0';
    e->nval = nval;
    return DSQ_OK;
}

/* A value llama-quantize could use: finite (it refuses others) and not
 * negative (a mean of squares cannot be). */
static dsq_status check_values(const float *v, uint32_t n, const char *what, const char *name)
{
    for (uint32_t i = 0; i < n; i++) {
        if (!isfinite(v[i]))
            return dsq_fail(DSQ_ERR_NUMERIC, "%s: entry %s: value %u is not finite", what, name, i);
        if (v[i] < 0.0f)
            return dsq_fail(DSQ_ERR_NUMERIC, "%s: entry %s: value %u is negative (%g)", what, name, i, (double)v[i]);
    }
    return DSQ_OK;
}

/* ---- legacy reader ---- */

typedef struct reader {
    const uint8_t *p;
    size_t left;
    size_t off; /* for messages */
    const char *what;
} reader;

static dsq_status rd_i32(reader *r, int32_t *v, const char *field)
{
    if (r->left < 4)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: truncated at byte %zu reading %s", r->what, r->off, field);
    uint32_t u = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
    memcpy(v, &u, 4);
    r->p += 4;
    r->left -= 4;
    r->off += 4;
    return DSQ_OK;
}

static float get_f32(const uint8_t *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void rd_skip(reader *r, size_t n)
{
    r->p += n;
    r->left -= n;
    r->off += n;
}

static dsq_status read_name(reader *r, int32_t i, const char **name, size_t *len)
{
    int32_t n = 0;
    DSQ_TRY(rd_i32(r, &n, "a name length"));
    if (n < 1 || n > DSQ_IMATRIX_MAX_NAME)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: entry %d: name length %d (1..%d allowed)", r->what, i, n, DSQ_IMATRIX_MAX_NAME);
    if ((size_t)n > r->left)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: entry %d: name of %d bytes, only %zu left", r->what, i, n, r->left);
    if (memchr(r->p, '\0', (size_t)n))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: entry %d: name holds a NUL byte", r->what, i);
    *name = (const char *)r->p;
    *len = (size_t)n;
    rd_skip(r, (size_t)n);
    return DSQ_OK;
}

static dsq_status read_entry(reader *r, int32_t i, dsq_imatrix *im)
{
    const char *name = NULL;
    size_t name_len = 0;
    int32_t ncall = 0, nval = 0;
    DSQ_TRY(read_name(r, i, &name, &name_len));
    DSQ_TRY(rd_i32(r, &ncall, "ncall"));
    DSQ_TRY(rd_i32(r, &nval, "nval"));
    if (ncall < 0) return dsq_fail(DSQ_ERR_FORMAT, "%s: entry %.*s: ncall %d < 0", r->what, (int)name_len, name, ncall);
    if (nval < 1) return dsq_fail(DSQ_ERR_FORMAT, "%s: entry %.*s: nval %d < 1", r->what, (int)name_len, name, nval);
    if ((size_t)nval > r->left / 4)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: entry %.*s: %d values, only %zu bytes left", r->what, (int)name_len, name,
                        nval, r->left);
    dsq_imatrix_entry e;
    DSQ_TRY(alloc_entry(&e, name, name_len, (uint32_t)nval, r->what));
    e.ncall = ncall;
    for (uint32_t k = 0; k < e.nval; k++) e.stored[k] = get_f32(r->p + 4 * (size_t)k);
    rd_skip(r, (size_t)nval * 4);
    dsq_status st = check_values(e.stored, e.nval, r->what, e.name);
    if (st != DSQ_OK) {
        entry_free(&e);
        return st;
    }
    for (uint32_t k = 0; k < e.nval; k++) e.values[k] = ncall > 0 ? e.stored[k] / (float)ncall : e.stored[k];
    return insert_entry(im, &e, false, r->what);
}

/* Optional: int32 last_chunk, int32 dataset_len, dataset bytes; nothing after. */
static dsq_status read_trailer(reader *r, dsq_imatrix *im)
{
    if (r->left == 0) return DSQ_OK;
    int32_t last_chunk = 0, len = 0;
    DSQ_TRY(rd_i32(r, &last_chunk, "the chunk count"));
    DSQ_TRY(rd_i32(r, &len, "the dataset name length"));
    if (last_chunk < 0) return dsq_fail(DSQ_ERR_FORMAT, "%s: chunk count %d < 0", r->what, last_chunk);
    if (len < 0 || (uint32_t)len > DSQ_IMATRIX_MAX_DATASET)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: dataset name length %d (0..%u allowed)", r->what, len, DSQ_IMATRIX_MAX_DATASET);
    if ((size_t)len != r->left)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: dataset name of %d bytes but %zu bytes remain", r->what, len, r->left);
    im->dataset = malloc((size_t)len + 1);
    if (!im->dataset) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", r->what);
    memcpy(im->dataset, r->p, (size_t)len);
    im->dataset[len] = '\0';
    im->last_chunk = last_chunk;
    rd_skip(r, (size_t)len);
    return DSQ_OK;
}

static dsq_status parse_legacy(reader *r, dsq_imatrix *im)
{
    int32_t n = 0;
    DSQ_TRY(rd_i32(r, &n, "the entry count"));
    if (n < 1) return dsq_fail(DSQ_ERR_FORMAT, "%s: %d entries (no data)", r->what, n);
    if ((size_t)n > r->left / MIN_ENTRY_BYTES)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: %d entries cannot fit in %zu bytes", r->what, n, r->left);
    for (int32_t i = 0; i < n; i++) DSQ_TRY(read_entry(r, i, im));
    return read_trailer(r, im);
}

dsq_status dsq_imatrix_parse(const void *data, size_t size, const char *what, dsq_imatrix **out)
{
    *out = NULL;
    if (!what) what = "imatrix";
    if (!data && size) return dsq_fail(DSQ_ERR_ARG, "%s: no data", what);
    dsq_imatrix *im;
    DSQ_TRY(dsq_imatrix_new(&im));
    reader r = {data, size, 0, what};
    dsq_status st = parse_legacy(&r, im);
    if (st != DSQ_OK) {
        dsq_imatrix_free(im);
        return st;
    }
    *out = im;
    return DSQ_OK;
}

/* ---- GGUF reader ---- */

static bool strip_suffix(const char *name, const char *suffix, size_t *base_len)
{
    size_t n = strlen(name), s = strlen(suffix);
    if (n <= s || strcmp(name + n - s, suffix)) return false;
    *base_len = n - s;
    return true;
}

/* Index of the tensor "<base><suffix>", or -1. */
static int64_t find_part(const dsq_gguf *g, const char *base, size_t base_len, const char *suffix)
{
    char name[DSQ_IMATRIX_MAX_NAME + 16];
    if (base_len + strlen(suffix) >= sizeof name) return -1;
    memcpy(name, base, base_len);
    strcpy(name + base_len, suffix);
    return dsq_gguf_find_tensor(g, name);
}

static dsq_status gguf_f32_view(const dsq_gguf *g, int64_t idx, const float **data, uint64_t *n)
{
    const dsq_gguf_tensor_info *ti = &g->tensors[idx];
    if (ti->type != DSQ_TYPE_F32)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: %s is %s, F32 expected", g->path, ti->name, dsq_type_name(ti->type));
    dsq_tensor t;
    DSQ_TRY(dsq_gguf_tensor(g, (uint64_t)idx, &t));
    *data = t.data;
    *n = t.nbytes / 4;
    return DSQ_OK;
}

static dsq_status gguf_entry(const dsq_gguf *g, const char *base, size_t base_len, int32_t ncall, dsq_imatrix *im)
{
    int64_t is = find_part(g, base, base_len, ".in_sum2"), ic = find_part(g, base, base_len, ".counts");
    if (is < 0 || ic < 0)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: mismatched sums and counts for %.*s", g->path, (int)base_len, base);
    const float *sums = NULL, *counts = NULL;
    uint64_t nsum = 0, ncount = 0;
    DSQ_TRY(gguf_f32_view(g, is, &sums, &nsum));
    DSQ_TRY(gguf_f32_view(g, ic, &counts, &ncount));
    const uint64_t ne0 = g->tensors[is].ne[0] > 0 ? (uint64_t)g->tensors[is].ne[0] : 0;
    const uint64_t rows = ne0 ? nsum / ne0 : 0; /* experts; ne[2..] of in_sum2 are 1 in real files */
    if (nsum == 0 || nsum > UINT32_MAX || ncount != rows)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: %.*s: %llu sums and %llu counts do not match", g->path, (int)base_len, base,
                        (unsigned long long)nsum, (unsigned long long)ncount);
    dsq_imatrix_entry e;
    DSQ_TRY(alloc_entry(&e, base, base_len, (uint32_t)nsum, g->path));
    e.ncall = ncall;
    for (uint64_t j = 0; j < rows; j++) {
        float c;
        memcpy(&c, &counts[j], 4);
        for (uint64_t i = 0; i < ne0; i++) {
            float s;
            memcpy(&s, &sums[j * ne0 + i], 4);
            e.values[j * ne0 + i] = c > 0.0f ? s / c : 1.0f;
        }
    }
    dsq_status st = check_values(e.values, e.nval, g->path, e.name);
    /* The legacy .dat stores values x ncall: a value that overflows there
     * could not be written back (nor read by llama-quantize). */
    for (uint32_t k = 0; st == DSQ_OK && k < e.nval; k++) {
        e.stored[k] = e.values[k] * (float)ncall;
        if (!isfinite(e.stored[k]))
            st = dsq_fail(DSQ_ERR_NUMERIC, "%s: entry %s: value %u (%g) times %d chunks is not finite", g->path,
                          e.name, k, (double)e.values[k], (int)ncall);
    }
    if (st != DSQ_OK) {
        entry_free(&e);
        return st;
    }
    return insert_entry(im, &e, false, g->path);
}

static dsq_status gguf_meta(const dsq_gguf *g, dsq_imatrix *im)
{
    uint32_t chunks;
    if (dsq_gguf_find_u32(g, "imatrix.chunk_count", &chunks) && chunks <= INT32_MAX) im->last_chunk = (int32_t)chunks;
    const dsq_gguf_array *ds;
    if (dsq_gguf_find_arr(g, "imatrix.datasets", DSQ_GGUF_STRING, &ds) && ds->n > 0) {
        const dsq_gguf_str *s = ds->data;
        if (s[0].len <= DSQ_IMATRIX_MAX_DATASET) {
            im->dataset = malloc(s[0].len + 1);
            if (!im->dataset) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", g->path);
            memcpy(im->dataset, s[0].ptr, s[0].len);
            im->dataset[s[0].len] = '\0';
        }
    }
    return DSQ_OK;
}

static dsq_status parse_gguf(const dsq_gguf *g, dsq_imatrix *im)
{
    DSQ_TRY(gguf_meta(g, im));
    const int32_t ncall = im->last_chunk > 0 ? im->last_chunk : 1;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const char *name = g->tensors[i].name;
        size_t base_len;
        /* One entry per .in_sum2 tensor; a lone .counts is caught below. */
        if (strip_suffix(name, ".in_sum2", &base_len)) {
            if (base_len > DSQ_IMATRIX_MAX_NAME) return dsq_fail(DSQ_ERR_FORMAT, "%s: tensor name too long", g->path);
            DSQ_TRY(gguf_entry(g, name, base_len, ncall, im));
        } else if (strip_suffix(name, ".counts", &base_len) && find_part(g, name, base_len, ".in_sum2") < 0) {
            return dsq_fail(DSQ_ERR_FORMAT, "%s: mismatched sums and counts for %.*s", g->path, (int)base_len, name);
        }
    }
    if (im->n_entries == 0) return dsq_fail(DSQ_ERR_FORMAT, "%s: GGUF file holds no imatrix entries", g->path);
    return DSQ_OK;
}

static dsq_status load_gguf(const char *path, dsq_imatrix **out)
{
    dsq_gguf *g;
    DSQ_TRY(dsq_gguf_open(path, &g));
    dsq_imatrix *im;
    dsq_status st = dsq_imatrix_new(&im);
    if (st == DSQ_OK) st = parse_gguf(g, im);
    dsq_gguf_close(g);
    if (st != DSQ_OK) {
        dsq_imatrix_free(im);
        return st;
    }
    *out = im;
    return DSQ_OK;
}

dsq_status dsq_imatrix_load(const char *path, dsq_imatrix **out)
{
    *out = NULL;
    dsq_mmap m;
    DSQ_TRY(dsq_mmap_open(path, &m));
    dsq_status st;
    if (m.size >= 4 && !memcmp(m.data, "GGUF", 4)) {
        dsq_mmap_close(&m);
        st = load_gguf(path, out);
    } else if (m.size > MAX_FILE_BYTES)
        st = dsq_fail(DSQ_ERR_FORMAT, "%s: %zu bytes is too big for an imatrix", path, m.size);
    else
        st = dsq_imatrix_parse(m.data, m.size, path, out);
    dsq_mmap_close(&m);
    if (st == DSQ_OK)
        DSQ_LOGI("%s: %zu importance matrix entries, %d chunks, dataset \"%s\"", path, (*out)->n_entries,
                 (*out)->last_chunk, (*out)->dataset ? (*out)->dataset : "");
    return st;
}

/* ---- use ---- */

/* The shape an entry must have, as text: "has N values, the tensor needs ...". */
static void describe_mismatch(const dsq_imatrix_entry *e, const char *tensor, int64_t ne0, int64_t n_expert, char *buf,
                              size_t cap)
{
    if (n_expert > 1)
        snprintf(buf, cap, "tensor %s: imatrix entry has %u values, the tensor needs %lld (%lld columns x %lld experts)",
                 tensor, e->nval, (long long)(ne0 * n_expert), (long long)ne0, (long long)n_expert);
    else
        snprintf(buf, cap, "tensor %s: imatrix entry has %u values, the tensor's rows have %lld", tensor, e->nval,
                 (long long)ne0);
}

static bool shape_ok(int64_t ne0, int64_t n_expert) { return ne0 >= 1 && n_expert >= 1 && ne0 <= INT64_MAX / n_expert; }

dsq_status dsq_imatrix_check_size(const dsq_imatrix_entry *e, const char *tensor, int64_t ne0, int64_t n_expert)
{
    if (!shape_ok(ne0, n_expert))
        return dsq_fail(DSQ_ERR_ARG, "tensor %s: bad shape for an imatrix check (%lld x %lld)", tensor, (long long)ne0,
                        (long long)n_expert);
    if ((int64_t)e->nval == ne0 * n_expert) return DSQ_OK;
    char why[1024];
    describe_mismatch(e, tensor, ne0, n_expert, why, sizeof why);
    return dsq_fail(DSQ_ERR_FORMAT, "%s", why);
}

dsq_status dsq_imatrix_for_tensor(const dsq_imatrix *im, const char *tensor, int64_t ne0, int64_t n_expert,
                                  const float **out)
{
    *out = NULL;
    if (!im) return DSQ_OK;
    const dsq_imatrix_entry *e = dsq_imatrix_find(im, tensor);
    if (!e) {
        DSQ_LOGI("%s: no imatrix entry, quantized without one", tensor);
        return DSQ_OK;
    }
    /* llama-quantize tolerates a mismatch in this one tensor: it often has one. */
    if (shape_ok(ne0, n_expert) && (int64_t)e->nval != ne0 * n_expert && !strcmp(tensor, "token_embd.weight")) {
        char why[1024];
        describe_mismatch(e, tensor, ne0, n_expert, why, sizeof why);
        DSQ_LOGI("%s; quantized without it", why);
        return DSQ_OK;
    }
    DSQ_TRY(dsq_imatrix_check_size(e, tensor, ne0, n_expert));
    *out = e->values;
    return DSQ_OK;
}

static bool contains_any(const char *name, const char *const *parts, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (parts[i] && strstr(name, parts[i])) return true;
    return false;
}

dsq_status dsq_imatrix_filter(dsq_imatrix *im, const char *const *include, size_t n_include,
                              const char *const *exclude, size_t n_exclude)
{
    if (n_include && n_exclude)
        return dsq_fail(DSQ_ERR_ARG, "--include-weights and --exclude-weights cannot be used together");
    if (!n_include && !n_exclude) return DSQ_OK;
    size_t kept = 0;
    for (size_t i = 0; i < im->n_entries; i++) {
        dsq_imatrix_entry *e = &im->entries[i];
        bool keep = n_include ? contains_any(e->name, include, n_include) : !contains_any(e->name, exclude, n_exclude);
        if (keep) im->entries[kept++] = *e;
        else entry_free(e);
    }
    im->n_entries = kept;
    return DSQ_OK;
}

/* ---- building and writing ---- */

dsq_status dsq_imatrix_add(dsq_imatrix *im, const char *name, int32_t ncall, const float *mean, uint32_t nval)
{
    size_t len = name ? strlen(name) : 0;
    if (len < 1 || len > DSQ_IMATRIX_MAX_NAME)
        return dsq_fail(DSQ_ERR_ARG, "imatrix: entry name length %zu (1..%d allowed)", len, DSQ_IMATRIX_MAX_NAME);
    if (ncall < 1) return dsq_fail(DSQ_ERR_ARG, "imatrix: entry %s: ncall %d < 1", name, ncall);
    if (nval < 1 || nval > INT32_MAX || !mean) return dsq_fail(DSQ_ERR_ARG, "imatrix: entry %s: %u values", name, nval);
    DSQ_TRY(check_values(mean, nval, "imatrix", name));
    dsq_imatrix_entry e;
    DSQ_TRY(alloc_entry(&e, name, len, nval, "imatrix"));
    e.ncall = ncall;
    for (uint32_t i = 0; i < nval; i++) {
        e.stored[i] = mean[i] * (float)ncall; /* llama-imatrix: (sum / count) * ncall */
        e.values[i] = e.stored[i] / (float)ncall;
    }
    dsq_status st = check_values(e.stored, nval, "imatrix", name);
    if (st != DSQ_OK) {
        entry_free(&e);
        return st;
    }
    return insert_entry(im, &e, true, "imatrix");
}

dsq_status dsq_imatrix_set_trailer(dsq_imatrix *im, int32_t last_chunk, const char *dataset)
{
    size_t len = dataset ? strlen(dataset) : 0;
    if (last_chunk < 0) return dsq_fail(DSQ_ERR_ARG, "imatrix: chunk count %d < 0", last_chunk);
    if (len > DSQ_IMATRIX_MAX_DATASET) return dsq_fail(DSQ_ERR_ARG, "imatrix: dataset name of %zu bytes", len);
    char *copy = malloc(len + 1);
    if (!copy) return dsq_fail(DSQ_ERR_NOMEM, "imatrix: out of memory");
    memcpy(copy, dataset ? dataset : "", len + 1);
    free(im->dataset);
    im->dataset = copy;
    im->last_chunk = last_chunk;
    return DSQ_OK;
}

static uint8_t *put_i32(uint8_t *p, int32_t v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    p[0] = (uint8_t)u;
    p[1] = (uint8_t)(u >> 8);
    p[2] = (uint8_t)(u >> 16);
    p[3] = (uint8_t)(u >> 24);
    return p + 4;
}

static dsq_status serialized_size(const dsq_imatrix *im, size_t *total)
{
    if (im->n_entries < 1 || im->n_entries > INT32_MAX)
        return dsq_fail(DSQ_ERR_ARG, "imatrix: %zu entries (1..%d can be written)", im->n_entries, INT32_MAX);
    size_t n = 4;
    for (size_t i = 0; i < im->n_entries; i++) {
        const dsq_imatrix_entry *e = &im->entries[i];
        size_t add = 12 + strlen(e->name);
        if (!dsq_add_size(n, add, &n) || !dsq_add_size(n, (size_t)e->nval * 4, &n))
            return dsq_fail(DSQ_ERR_ARG, "imatrix: too large to serialize");
    }
    if (im->last_chunk >= 0) n += 8 + (im->dataset ? strlen(im->dataset) : 0);
    *total = n;
    return DSQ_OK;
}

dsq_status dsq_imatrix_serialize(const dsq_imatrix *im, uint8_t **buf, size_t *len)
{
    size_t total = 0;
    DSQ_TRY(serialized_size(im, &total));
    uint8_t *b = malloc(total), *p = b;
    if (!b) return dsq_fail(DSQ_ERR_NOMEM, "imatrix: out of memory for %zu bytes", total);
    p = put_i32(p, (int32_t)im->n_entries);
    for (size_t i = 0; i < im->n_entries; i++) {
        const dsq_imatrix_entry *e = &im->entries[i];
        size_t nl = strlen(e->name);
        p = put_i32(p, (int32_t)nl);
        memcpy(p, e->name, nl);
        p = put_i32(p + nl, e->ncall);
        p = put_i32(p, (int32_t)e->nval);
        for (uint32_t k = 0; k < e->nval; k++) {
            int32_t bits;
            memcpy(&bits, &e->stored[k], 4);
            p = put_i32(p, bits);
        }
    }
    if (im->last_chunk >= 0) {
        size_t dl = im->dataset ? strlen(im->dataset) : 0;
        p = put_i32(p, im->last_chunk);
        p = put_i32(p, (int32_t)dl);
        if (dl) memcpy(p, im->dataset, dl);
    }
    *buf = b;
    *len = total;
    return DSQ_OK;
}

dsq_status dsq_imatrix_save(const dsq_imatrix *im, const char *path, bool overwrite)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_imatrix_serialize(im, &buf, &len));
    dsq_outfile *f;
    dsq_status st = dsq_outfile_open(path, overwrite, &f);
    if (st == DSQ_OK) {
        st = dsq_outfile_write(f, buf, len);
        if (st == DSQ_OK) st = dsq_outfile_commit(f);
        else dsq_outfile_abort(f);
    }
    free(buf);
    return st;
}
