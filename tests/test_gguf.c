/* GGUF reader and writer: full round trip of every value type and several
 * tensor types, byte-identical rewrite through deep-copied KVs, every class of
 * hostile file (each with its status and a message naming file and field),
 * every truncation, random corruption, atomic writer failure, and ggml's own
 * kquants.gguf from ../shared. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "tests/helpers/testutil.h"

/* ---- a growable byte buffer to assemble files by hand ---- */

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bb_u32(bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_strn(bb *b, const char *s, size_t n)
{
    bb_u64(b, n);
    bb_put(b, s, n);
}
static void bb_str(bb *b, const char *s) { bb_strn(b, s, strlen(s)); }
static void bb_zeros(bb *b, size_t n)
{
    for (size_t i = 0; i < n; i++) bb_put(b, "", 1);
}
static void bb_pad(bb *b, size_t align) { bb_zeros(b, (align - b->n % align) % align); }

static void hdr(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    bb_u32(b, DSQ_GGUF_MAGIC);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void kv_u32(bb *b, const char *key, uint32_t v)
{
    bb_str(b, key);
    bb_u32(b, DSQ_GGUF_U32);
    bb_u32(b, v);
}
static void kv_str(bb *b, const char *key, const char *s)
{
    bb_str(b, key);
    bb_u32(b, DSQ_GGUF_STRING);
    bb_str(b, s);
}

typedef struct tspec {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    uint64_t off;
} tspec;

static void tinfo(bb *b, const tspec *t)
{
    bb_str(b, t->name);
    bb_u32(b, t->n_dims);
    for (uint32_t d = 0; d < t->n_dims && d < 5; d++) bb_u64(b, t->ne[d]);
    bb_u32(b, t->type);
    bb_u64(b, t->off);
}

/* Two KVs, the given tensor infos, padding to 32, then data_len zero bytes. */
static void build_tensors(bb *b, uint32_t version, const tspec *ts, int n, size_t data_len)
{
    hdr(b, version, (uint64_t)n, 2);
    kv_str(b, "general.name", "hostile");
    kv_u32(b, "general.alignment", 32);
    for (int i = 0; i < n; i++) tinfo(b, &ts[i]);
    bb_pad(b, 32);
    bb_zeros(b, data_len);
}

/* A valid pair: a = F32 [32] at 0 (128 B), b = Q8_0 [32 x 2] at 128 (68 B). */
static void base_specs(tspec ts[2])
{
    ts[0] = (tspec){"a", 1, {32}, DSQ_TYPE_F32, 0};
    ts[1] = (tspec){"b", 2, {32, 2}, DSQ_TYPE_Q8_0, 128};
}

static char *g_dir;

static int setup(void **state)
{
    (void)state;
    g_dir = dsq_test_mkdtemp();
    return g_dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    dsq_test_rmtmp(g_dir);
    g_dir = NULL;
    return 0;
}

/* Writes bytes, opens them and checks the failure: code, file path and every needle in the message. */
/* Unlinks first: rewriting a truncated file in place makes ext4 flush it on close (auto_da_alloc). */
static char *write_fresh(const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    unlink(path);
    return dsq_test_write(g_dir, name, p, n);
}

static void expect_fail(const bb *b, dsq_status code, const char *needle1, const char *needle2)
{
    char *path = write_fresh("hostile.gguf", b->p, b->n);
    assert_non_null(path);
    dsq_gguf *g = (dsq_gguf *)1;
    dsq_status s = dsq_gguf_open(path, &g);
    if (s != code) fail_msg("expected %s, got %s: %s", dsq_status_name(code), dsq_status_name(s), dsq_errmsg());
    assert_null(g);
    const char *msg = dsq_errmsg();
    if (!strstr(msg, path)) fail_msg("message lacks the path: %s", msg);
    if (needle1 && !strstr(msg, needle1)) fail_msg("message lacks \"%s\": %s", needle1, msg);
    if (needle2 && !strstr(msg, needle2)) fail_msg("message lacks \"%s\": %s", needle2, msg);
    free(path);
}

static dsq_gguf *expect_ok(const bb *b)
{
    char *path = write_fresh("ok.gguf", b->p, b->n);
    dsq_gguf *g = NULL;
    dsq_status s = dsq_gguf_open(path, &g);
    if (s != DSQ_OK) fail_msg("open failed: %s", dsq_errmsg());
    free(path);
    return g;
}

/* ---- the rich file: every value type, nested arrays, several tensor types ---- */

typedef struct rich_tensor {
    const char *name;
    dsq_type type;
    int n_dims;
    int64_t shape[4];
    uint64_t nbytes;
    uint8_t *data;
} rich_tensor;

enum { N_RICH_T = 7 };

static rich_tensor g_rt[N_RICH_T] = {
    {"t.f32", DSQ_TYPE_F32, 2, {3, 5}, 60, NULL},
    {"t.f16", DSQ_TYPE_F16, 2, {2, 7}, 28, NULL},
    {"t.empty", DSQ_TYPE_F32, 2, {0, 4}, 0, NULL},
    {"t.q4_0", DSQ_TYPE_Q4_0, 2, {4, 64}, 4 * 2 * 18, NULL},
    {"t.q8_0", DSQ_TYPE_Q8_0, 3, {2, 3, 32}, 6 * 34, NULL},
    {"t.q4_K", DSQ_TYPE_Q4_K, 2, {3, 256}, 3 * 144, NULL},
    {"t.vec", DSQ_TYPE_F32, 1, {10}, 40, NULL},
};

/* Scalar arrays, one per scalar type. */
static const uint8_t a_u8[] = {0, 1, 255};
static const int8_t a_i8[] = {-128, 0, 127};
static const uint16_t a_u16[] = {0, 65535, 4660};
static const int16_t a_i16[] = {-32768, 32767, -2};
static const uint32_t a_u32[] = {0, 4294967295u, 305419896u};
static const int32_t a_i32[] = {INT32_MIN, INT32_MAX, -1};
static const float a_f32[] = {1.5f, -0.0f, 3.4e38f};
static const uint8_t a_bool[] = {1, 0, 1, 1};
static const uint64_t a_u64[] = {UINT64_MAX, 0, 0x0123456789abcdefull};
static const int64_t a_i64[] = {INT64_MIN, INT64_MAX, -7};
static const double a_f64[] = {0.1, -1e300, 5e-324};

/* Nested: [[1,2,3], [], [7]] (u32) and [["a","bc"], ["d\0e"]] (str). */
static const uint32_t n_u32_0[] = {1, 2, 3}, n_u32_2[] = {7};
static const dsq_gguf_str n_str_0[] = {{"a", 1}, {"bc", 2}}, n_str_1[] = {{"d\0e", 3}};
static const dsq_gguf_str a_strs[] = {{"q4_0", 4}, {"", 0}, {"x\0y", 3}, {"last", 4}};

typedef struct rich_kv {
    const char *key;
    dsq_gguf_value v;
} rich_kv;

static int build_rich_kvs(rich_kv *kv)
{
    static dsq_gguf_value nested_u32[3], nested_str[2], deep[1], deeper[1];
    nested_u32[0] = (dsq_gguf_value){.type = DSQ_GGUF_ARRAY, .v.arr = {DSQ_GGUF_U32, 3, n_u32_0}};
    nested_u32[1] = (dsq_gguf_value){.type = DSQ_GGUF_ARRAY, .v.arr = {DSQ_GGUF_U32, 0, NULL}};
    nested_u32[2] = (dsq_gguf_value){.type = DSQ_GGUF_ARRAY, .v.arr = {DSQ_GGUF_U32, 1, n_u32_2}};
    nested_str[0] = (dsq_gguf_value){.type = DSQ_GGUF_ARRAY, .v.arr = {DSQ_GGUF_STRING, 2, n_str_0}};
    nested_str[1] = (dsq_gguf_value){.type = DSQ_GGUF_ARRAY, .v.arr = {DSQ_GGUF_STRING, 1, n_str_1}};
    deeper[0] = (dsq_gguf_value){.type = DSQ_GGUF_ARRAY, .v.arr = {DSQ_GGUF_I16, 3, a_i16}};
    deep[0] = (dsq_gguf_value){.type = DSQ_GGUF_ARRAY, .v.arr = {DSQ_GGUF_ARRAY, 1, deeper}};
    int n = 0;
#define SC(k, t, field, val)                                                                                           \
    kv[n++] = (rich_kv)                                                                                                \
    {                                                                                                                  \
        k, { .type = t, .v.field = val }                                                                               \
    }
#define AR(k, t, xs)                                                                                                   \
    kv[n++] = (rich_kv)                                                                                                \
    {                                                                                                                  \
        k,                                                                                                             \
        {                                                                                                              \
            .type = DSQ_GGUF_ARRAY, .v.arr = { t, sizeof xs / sizeof xs[0], xs }                                       \
        }                                                                                                              \
    }
    SC("s.u8", DSQ_GGUF_U8, u64, 200);
    SC("s.i8", DSQ_GGUF_I8, i64, -100);
    SC("s.u16", DSQ_GGUF_U16, u64, 60000);
    SC("s.i16", DSQ_GGUF_I16, i64, -30000);
    SC("s.u32", DSQ_GGUF_U32, u64, 4000000000u);
    SC("s.i32", DSQ_GGUF_I32, i64, -2000000000);
    SC("s.f32", DSQ_GGUF_F32, f64, 1.5);
    SC("s.bool", DSQ_GGUF_BOOL, b, true);
    kv[n++] = (rich_kv){"s.str", {.type = DSQ_GGUF_STRING, .v.str = {"a\0b", 3}}};
    SC("s.u64", DSQ_GGUF_U64, u64, 0xfedcba9876543210ull);
    SC("s.i64", DSQ_GGUF_I64, i64, INT64_MIN + 1);
    SC("s.f64", DSQ_GGUF_F64, f64, 0.1);
    SC("general.alignment", DSQ_GGUF_U32, u64, 64);
    AR("a.u8", DSQ_GGUF_U8, a_u8);
    AR("a.i8", DSQ_GGUF_I8, a_i8);
    AR("a.u16", DSQ_GGUF_U16, a_u16);
    AR("a.i16", DSQ_GGUF_I16, a_i16);
    AR("a.u32", DSQ_GGUF_U32, a_u32);
    AR("a.i32", DSQ_GGUF_I32, a_i32);
    AR("a.f32", DSQ_GGUF_F32, a_f32);
    AR("a.bool", DSQ_GGUF_BOOL, a_bool);
    AR("a.u64", DSQ_GGUF_U64, a_u64);
    AR("a.i64", DSQ_GGUF_I64, a_i64);
    AR("a.f64", DSQ_GGUF_F64, a_f64);
    AR("a.str", DSQ_GGUF_STRING, a_strs);
    AR("a.arr_u32", DSQ_GGUF_ARRAY, nested_u32);
    AR("a.arr_str", DSQ_GGUF_ARRAY, nested_str);
    AR("a.arr_arr_i16", DSQ_GGUF_ARRAY, deep);
#undef SC
#undef AR
    return n;
}

static void fill_rich_data(void)
{
    uint64_t st = 42;
    for (int i = 0; i < N_RICH_T; i++) {
        free(g_rt[i].data);
        g_rt[i].data = malloc(g_rt[i].nbytes + 1);
        for (uint64_t j = 0; j < g_rt[i].nbytes; j++) g_rt[i].data[j] = (uint8_t)dsq_test_rand(&st);
    }
}

static void add_rich_tensors(dsq_gguf_writer *w)
{
    for (int i = 0; i < N_RICH_T; i++)
        assert_int_equal(dsq_gguf_add_tensor(w, g_rt[i].name, g_rt[i].type, g_rt[i].n_dims, g_rt[i].shape), DSQ_OK);
}

/* Tensor bytes in awkward pieces: t.f32 in three chunks (one empty), then
 * the last two tensors in one write that spans the boundary. */
static void write_rich_data(dsq_gguf_writer *w)
{
    const rich_tensor *t = g_rt;
    assert_int_equal(dsq_gguf_writer_write(w, t[0].data, 7), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_write(w, t[0].data + 7, 0), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_write(w, t[0].data + 7, t[0].nbytes - 7), DSQ_OK);
    for (int i = 1; i < N_RICH_T - 2; i++) assert_int_equal(dsq_gguf_writer_write(w, t[i].data, t[i].nbytes), DSQ_OK);
    uint64_t n = t[5].nbytes + t[6].nbytes;
    uint8_t *both = malloc(n);
    memcpy(both, t[5].data, t[5].nbytes);
    memcpy(both + t[5].nbytes, t[6].data, t[6].nbytes);
    assert_int_equal(dsq_gguf_writer_write(w, both, n), DSQ_OK);
    free(both);
}

static char *write_rich(const char *name)
{
    rich_kv kv[40];
    int n = build_rich_kvs(kv);
    fill_rich_data();
    dsq_gguf_writer *w;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    for (int i = 0; i < n; i++) assert_int_equal(dsq_gguf_set(w, kv[i].key, &kv[i].v), DSQ_OK);
    add_rich_tensors(w);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    assert_int_equal(dsq_gguf_writer_begin(w, path, true), DSQ_OK);
    write_rich_data(w);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    return strdup(path);
}

static void assert_array_eq(const dsq_gguf_array *a, const dsq_gguf_array *b);

static void assert_value_eq(const dsq_gguf_value *a, const dsq_gguf_value *b)
{
    assert_int_equal(a->type, b->type);
    switch (a->type) {
    case DSQ_GGUF_U8:
    case DSQ_GGUF_U16:
    case DSQ_GGUF_U32:
    case DSQ_GGUF_U64: assert_true(a->v.u64 == b->v.u64); break;
    case DSQ_GGUF_I8:
    case DSQ_GGUF_I16:
    case DSQ_GGUF_I32:
    case DSQ_GGUF_I64: assert_true(a->v.i64 == b->v.i64); break;
    case DSQ_GGUF_F32: {
        float x = (float)a->v.f64, y = (float)b->v.f64;
        assert_memory_equal(&x, &y, 4);
    } break;
    case DSQ_GGUF_F64: assert_memory_equal(&a->v.f64, &b->v.f64, 8); break;
    case DSQ_GGUF_BOOL: assert_int_equal(a->v.b, b->v.b); break;
    case DSQ_GGUF_STRING:
        assert_true(a->v.str.len == b->v.str.len);
        assert_memory_equal(a->v.str.ptr, b->v.str.ptr, a->v.str.len + (a->v.str.len == 0));
        assert_int_equal(b->v.str.ptr[b->v.str.len], 0);
        break;
    case DSQ_GGUF_ARRAY: assert_array_eq(&a->v.arr, &b->v.arr); break;
    default: fail_msg("bad type %d", a->type);
    }
}

static void assert_array_eq(const dsq_gguf_array *a, const dsq_gguf_array *b)
{
    assert_int_equal(a->elem_type, b->elem_type);
    assert_true(a->n == b->n);
    if (dsq_gguf_vtype_size(a->elem_type)) {
        if (a->n) assert_memory_equal(a->data, b->data, a->n * dsq_gguf_vtype_size(a->elem_type));
        return;
    }
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->elem_type == DSQ_GGUF_STRING) {
            dsq_gguf_value x = {.type = DSQ_GGUF_STRING, .v.str = ((const dsq_gguf_str *)a->data)[i]};
            dsq_gguf_value y = {.type = DSQ_GGUF_STRING, .v.str = ((const dsq_gguf_str *)b->data)[i]};
            assert_value_eq(&x, &y);
        } else {
            assert_value_eq(&((const dsq_gguf_value *)a->data)[i], &((const dsq_gguf_value *)b->data)[i]);
        }
    }
}

static uint64_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

static uint8_t *slurp(const char *path, size_t *n)
{
    *n = (size_t)file_size(path);
    uint8_t *p = malloc(*n + 1);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(p, 1, *n, f), *n);
    fclose(f);
    return p;
}

static void check_rich_tensors(const dsq_gguf *g, const char *path)
{
    assert_true(g->n_tensors == N_RICH_T);
    uint64_t expect_off = 0;
    for (int i = 0; i < N_RICH_T; i++) {
        const dsq_gguf_tensor_info *ti = &g->tensors[i];
        assert_string_equal(ti->name, g_rt[i].name);
        assert_int_equal(ti->type, g_rt[i].type);
        assert_int_equal(ti->n_dims, g_rt[i].n_dims);
        for (int d = 0; d < g_rt[i].n_dims; d++) assert_true(ti->ne[d] == g_rt[i].shape[g_rt[i].n_dims - 1 - d]);
        assert_true(ti->offset == expect_off); /* gguf-py layout: each tensor padded to the alignment */
        expect_off += (ti->nbytes + 63) / 64 * 64;
        assert_true(dsq_gguf_find_tensor(g, g_rt[i].name) == i);
        dsq_tensor t;
        assert_int_equal(dsq_gguf_tensor(g, (uint64_t)i, &t), DSQ_OK);
        assert_string_equal(t.name, g_rt[i].name);
        assert_int_equal(t.n_dims, g_rt[i].n_dims);
        assert_memory_equal(t.shape, g_rt[i].shape, sizeof(int64_t) * (size_t)t.n_dims);
        assert_true(t.nbytes == g_rt[i].nbytes);
        if (t.nbytes) assert_memory_equal(t.data, g_rt[i].data, t.nbytes);
    }
    assert_true(file_size(path) == g->data_offset + expect_off);
    assert_int_equal(dsq_gguf_find_tensor(g, "nope"), -1);
    dsq_tensor t;
    assert_int_equal(dsq_gguf_tensor(g, N_RICH_T, &t), DSQ_ERR_ARG);
}

static void test_roundtrip(void **state)
{
    (void)state;
    char *path = write_rich("rich.gguf");
    rich_kv kv[40];
    int n = build_rich_kvs(kv);
    dsq_gguf *g;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->alignment, 64);
    assert_true(g->data_offset % 64 == 0);
    assert_true(g->n_kv == (uint64_t)n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(g->kv[i].key, kv[i].key); /* insertion order */
        assert_value_eq(&kv[i].v, &g->kv[i].value);
        assert_ptr_equal(dsq_gguf_get(g, kv[i].key), &g->kv[i].value);
    }
    assert_null(dsq_gguf_get(g, "missing"));
    check_rich_tensors(g, path);
    dsq_gguf_close(g);
    free(path);
}

/* Copying every KV of a reader into a writer (the converters' path) and the
 * same tensors gives a byte-identical file, even after the reader is closed. */
static void test_rewrite_identical(void **state)
{
    (void)state;
    char *path = write_rich("orig.gguf");
    dsq_gguf *g;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    dsq_gguf_writer *w;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    for (uint64_t i = 0; i < g->n_kv; i++) assert_int_equal(dsq_gguf_set(w, g->kv[i].key, &g->kv[i].value), DSQ_OK);
    dsq_gguf_close(g);
    add_rich_tensors(w);
    char copy[4096];
    snprintf(copy, sizeof copy, "%s/copy.gguf", g_dir);
    assert_int_equal(dsq_gguf_writer_begin(w, copy, false), DSQ_OK);
    for (int i = 0; i < N_RICH_T; i++) assert_int_equal(dsq_gguf_writer_write(w, g_rt[i].data, g_rt[i].nbytes), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    size_t na, nb;
    uint8_t *a = slurp(path, &na), *b = slurp(copy, &nb);
    assert_true(na == nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
    free(path);
}

/* The typed setters write the documented types; set replaces in place; remove drops. */
static void test_setters_replace_remove(void **state)
{
    (void)state;
    dsq_gguf_writer *w;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    const char *strs[] = {"x", "yz"};
    const uint64_t lens[] = {1, 2};
    const float fl[] = {0.5f, 2.0f};
    assert_int_equal(dsq_gguf_set_u32(w, "k.first", 1), DSQ_OK);
    assert_int_equal(dsq_gguf_set_i32(w, "k.i32", -5), DSQ_OK);
    assert_int_equal(dsq_gguf_set_u64(w, "k.u64", 1ull << 40), DSQ_OK);
    assert_int_equal(dsq_gguf_set_f32(w, "k.f32", 0.25f), DSQ_OK);
    assert_int_equal(dsq_gguf_set_bool(w, "k.bool", true), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str(w, "k.str", "hello"), DSQ_OK);
    assert_int_equal(dsq_gguf_set_arr(w, "k.arr", DSQ_GGUF_F32, fl, 2), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str_arr(w, "k.strs", strs, NULL, 2), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str_arr(w, "k.strs2", strs, lens, 2), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str(w, "k.first", "replaced"), DSQ_OK); /* keeps position 0 */
    assert_int_equal(dsq_gguf_set_u32(w, "k.gone", 9), DSQ_OK);
    assert_int_equal(dsq_gguf_remove(w, "k.gone"), DSQ_OK);
    assert_int_equal(dsq_gguf_remove(w, "k.gone"), DSQ_ERR_NOT_FOUND);
    char path[4096];
    snprintf(path, sizeof path, "%s/setters.gguf", g_dir);
    assert_int_equal(dsq_gguf_writer_begin(w, path, false), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);

    dsq_gguf *g;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    assert_true(g->n_kv == 9 && g->n_tensors == 0);
    assert_string_equal(g->kv[0].key, "k.first");
    assert_int_equal(g->kv[0].value.type, DSQ_GGUF_STRING);
    assert_string_equal(g->kv[0].value.v.str.ptr, "replaced");
    assert_int_equal(g->kv[1].value.type, DSQ_GGUF_I32);
    assert_int_equal(g->kv[2].value.type, DSQ_GGUF_U64);
    assert_int_equal(g->kv[3].value.type, DSQ_GGUF_F32);
    assert_int_equal(g->kv[4].value.type, DSQ_GGUF_BOOL);
    assert_null(dsq_gguf_get(g, "k.gone"));
    const dsq_gguf_array *arr;
    assert_int_equal(dsq_gguf_get_arr(g, "k.strs2", DSQ_GGUF_STRING, &arr), DSQ_OK);
    assert_true(arr->n == 2);
    assert_string_equal(((const dsq_gguf_str *)arr->data)[1].ptr, "yz");
    assert_int_equal(dsq_gguf_get_arr(g, "k.arr", DSQ_GGUF_F32, &arr), DSQ_OK);
    assert_true(((const float *)arr->data)[1] == 2.0f);
    assert_true(g->data_offset % 32 == 0 && g->data_offset == file_size(path));
    dsq_gguf_close(g);
}

static void expect_get_fail(dsq_status got, dsq_status want, const char *needle)
{
    assert_int_equal(got, want);
    if (!strstr(dsq_errmsg(), needle)) fail_msg("message lacks \"%s\": %s", needle, dsq_errmsg());
}

static void test_getters(void **state)
{
    (void)state;
    char *path = write_rich("get.gguf");
    dsq_gguf *g;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    uint32_t u32;
    uint64_t u64;
    float f;
    bool b;
    const char *s;
    const dsq_gguf_array *arr;
    assert_int_equal(dsq_gguf_get_u32(g, "s.u8", &u32), DSQ_OK);
    assert_int_equal(u32, 200);
    assert_int_equal(dsq_gguf_get_u32(g, "s.i32", &u32), DSQ_ERR_FORMAT); /* negative */
    assert_int_equal(dsq_gguf_get_u64(g, "s.u64", &u64), DSQ_OK);
    assert_true(u64 == 0xfedcba9876543210ull);
    expect_get_fail(dsq_gguf_get_u32(g, "s.u64", &u32), DSQ_ERR_FORMAT, "s.u64");
    expect_get_fail(dsq_gguf_get_u64(g, "s.i64", &u64), DSQ_ERR_FORMAT, "s.i64");
    expect_get_fail(dsq_gguf_get_u32(g, "s.str", &u32), DSQ_ERR_FORMAT, "s.str");
    expect_get_fail(dsq_gguf_get_u32(g, "nope", &u32), DSQ_ERR_NOT_FOUND, "nope");
    assert_int_equal(dsq_gguf_get_f32(g, "s.f32", &f), DSQ_OK);
    assert_true(f == 1.5f);
    assert_int_equal(dsq_gguf_get_f32(g, "s.f64", &f), DSQ_OK);
    assert_true(f == 0.1f);
    expect_get_fail(dsq_gguf_get_f32(g, "s.u32", &f), DSQ_ERR_FORMAT, "s.u32");
    assert_int_equal(dsq_gguf_get_bool(g, "s.bool", &b), DSQ_OK);
    assert_true(b);
    expect_get_fail(dsq_gguf_get_bool(g, "s.u8", &b), DSQ_ERR_FORMAT, "s.u8");
    assert_int_equal(dsq_gguf_get_str(g, "s.str", &s), DSQ_OK);
    assert_memory_equal(s, "a\0b", 4);
    expect_get_fail(dsq_gguf_get_str(g, "s.u8", &s), DSQ_ERR_FORMAT, "s.u8");
    assert_int_equal(dsq_gguf_get_arr(g, "a.str", DSQ_GGUF_STRING, &arr), DSQ_OK);
    assert_true(arr->n == 4);
    expect_get_fail(dsq_gguf_get_arr(g, "a.str", DSQ_GGUF_U32, &arr), DSQ_ERR_FORMAT, "a.str");
    expect_get_fail(dsq_gguf_get_arr(g, "s.u8", DSQ_GGUF_U8, &arr), DSQ_ERR_FORMAT, "s.u8");
    assert_string_equal(dsq_gguf_vtype_name(DSQ_GGUF_STRING), "str");
    assert_int_equal(dsq_gguf_vtype_size(DSQ_GGUF_F64), 8);
    assert_int_equal(dsq_gguf_vtype_size(DSQ_GGUF_ARRAY), 0);
    dsq_gguf_close(g);
    free(path);
}

/* Every lookup answers yes exactly when its getter succeeds, with the same
 * value, and never touches the thread's message, over every key of the rich
 * file and one that is absent. */
static void test_lookups_match_getters(void **state)
{
    (void)state;
    char *path = write_rich("find.gguf");
    dsq_gguf *g;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    for (uint64_t i = 0; i <= g->n_kv; i++) {
        const char *key = i < g->n_kv ? g->kv[i].key : "no.such.key";
        uint64_t u64a = 0, u64b = 0;
        uint32_t u32a = 0, u32b = 0;
        float fa = 0, fb = 0;
        bool boa = false, bob = false;
        const char *sa = NULL, *sb = NULL;
        const dsq_gguf_array *aa = NULL, *ab = NULL;
        dsq_fail(DSQ_ERR_IO, "sentinel");
        bool f_u64 = dsq_gguf_find_u64(g, key, &u64a), f_u32 = dsq_gguf_find_u32(g, key, &u32a);
        bool f_f32 = dsq_gguf_find_f32(g, key, &fa), f_bool = dsq_gguf_find_bool(g, key, &boa);
        bool f_str = dsq_gguf_find_str(g, key, &sa);
        bool f_arr = dsq_gguf_find_arr(g, key, DSQ_GGUF_STRING, &aa);
        assert_string_equal(dsq_errmsg(), "sentinel");
        assert_int_equal(f_u64, dsq_gguf_get_u64(g, key, &u64b) == DSQ_OK);
        assert_int_equal(f_u32, dsq_gguf_get_u32(g, key, &u32b) == DSQ_OK);
        assert_int_equal(f_f32, dsq_gguf_get_f32(g, key, &fb) == DSQ_OK);
        assert_int_equal(f_bool, dsq_gguf_get_bool(g, key, &bob) == DSQ_OK);
        assert_int_equal(f_str, dsq_gguf_get_str(g, key, &sb) == DSQ_OK);
        assert_int_equal(f_arr, dsq_gguf_get_arr(g, key, DSQ_GGUF_STRING, &ab) == DSQ_OK);
        assert_true(u64a == u64b && u32a == u32b && fa == fb && boa == bob && sa == sb && aa == ab);
    }
    uint32_t u32;
    assert_true(dsq_gguf_find_u32(g, "s.u8", &u32) && u32 == 200);
    assert_false(dsq_gguf_find_u32(g, "s.i32", &u32)); /* negative */
    assert_false(dsq_gguf_find_u32(g, "s.u64", &u32)); /* too big */
    dsq_gguf_close(g);
    free(path);

    dsq_gguf_writer *w;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    assert_int_equal(dsq_gguf_set_u32(w, "k", 1), DSQ_OK);
    dsq_fail(DSQ_ERR_IO, "sentinel");
    assert_true(dsq_gguf_writer_has(w, "k"));
    assert_false(dsq_gguf_writer_has(w, "other"));
    assert_false(dsq_gguf_writer_has(w, NULL));
    assert_string_equal(dsq_errmsg(), "sentinel");
    assert_int_equal(dsq_gguf_remove(w, "k"), DSQ_OK);
    assert_false(dsq_gguf_writer_has(w, "k"));
    dsq_gguf_writer_free(w);
}

/* ---- hostile files ---- */

static void test_hostile_header(void **state)
{
    (void)state;
    bb b = {0};
    hdr(&b, 3, 0, 0);
    memcpy(b.p, "GGUX", 4);
    expect_fail(&b, DSQ_ERR_FORMAT, "magic", NULL);
    b.n = 0;
    hdr(&b, 1, 0, 0);
    expect_fail(&b, DSQ_ERR_UNSUPPORTED, "version 1", NULL);
    b.n = 0;
    hdr(&b, 4, 0, 0);
    expect_fail(&b, DSQ_ERR_UNSUPPORTED, "version 4", NULL);
    b.n = 0;
    hdr(&b, 0x03000000u, 0, 0);
    expect_fail(&b, DSQ_ERR_UNSUPPORTED, "big-endian", NULL);
    b.n = 0;
    hdr(&b, 3, 0, 1ull << 40);
    expect_fail(&b, DSQ_ERR_FORMAT, "header", "metadata entries");
    b.n = 0;
    hdr(&b, 3, 1ull << 40, 0);
    expect_fail(&b, DSQ_ERR_FORMAT, "tensor infos", "cannot fit");
    b.n = 0;
    bb_put(&b, "GGU", 3);
    expect_fail(&b, DSQ_ERR_FORMAT, "truncated", NULL);
    b.n = 0;
    expect_fail(&b, DSQ_ERR_FORMAT, "truncated", NULL); /* empty file */
    /* Version 2 has the same layout and is read. */
    b.n = 0;
    hdr(&b, 2, 0, 1);
    kv_u32(&b, "x", 5);
    dsq_gguf *g = expect_ok(&b);
    assert_int_equal(g->version, 2);
    dsq_gguf_close(g);
    free(b.p);
}

/* One KV whose bytes after the key the test supplies. */
static void kv_file(bb *b, const char *key, uint32_t type)
{
    b->n = 0;
    hdr(b, 3, 0, 1);
    bb_str(b, key);
    bb_u32(b, type);
}

static void nest(bb *b, int levels)
{
    kv_file(b, "k.deep", DSQ_GGUF_ARRAY);
    for (int i = 1; i < levels; i++) {
        bb_u32(b, DSQ_GGUF_ARRAY);
        bb_u64(b, 1);
    }
    bb_u32(b, DSQ_GGUF_U8);
    bb_u64(b, 0);
}

static void test_hostile_kv(void **state)
{
    (void)state;
    bb b = {0};
    b.n = 0;
    hdr(&b, 3, 0, 1);
    bb_u64(&b, 1ull << 62);
    bb_zeros(&b, 32);
    expect_fail(&b, DSQ_ERR_FORMAT, "entry #0", "string length");
    kv_file(&b, "k.s", DSQ_GGUF_STRING);
    bb_u64(&b, 1ull << 62);
    expect_fail(&b, DSQ_ERR_FORMAT, "key 'k.s'", "string length");
    kv_file(&b, "k.a", DSQ_GGUF_ARRAY);
    bb_u32(&b, DSQ_GGUF_U32);
    bb_u64(&b, 1ull << 62); /* n * 4 would wrap to 0 */
    bb_zeros(&b, 64);
    expect_fail(&b, DSQ_ERR_FORMAT, "key 'k.a'", "array of");
    kv_file(&b, "k.sa", DSQ_GGUF_ARRAY);
    bb_u32(&b, DSQ_GGUF_STRING);
    bb_u64(&b, 9); /* nine strings need at least 72 bytes */
    bb_zeros(&b, 71);
    expect_fail(&b, DSQ_ERR_FORMAT, "key 'k.sa'", "array of 9");
    kv_file(&b, "k.aa", DSQ_GGUF_ARRAY);
    bb_u32(&b, DSQ_GGUF_ARRAY);
    bb_u64(&b, 1ull << 60);
    bb_zeros(&b, 100);
    expect_fail(&b, DSQ_ERR_FORMAT, "key 'k.aa'", "array of");
    nest(&b, 8);
    dsq_gguf *g = expect_ok(&b);
    dsq_gguf_close(g);
    nest(&b, 9);
    expect_fail(&b, DSQ_ERR_FORMAT, "key 'k.deep'", "nested");
    kv_file(&b, "k.t", 13);
    bb_u32(&b, 0);
    expect_fail(&b, DSQ_ERR_FORMAT, "key 'k.t'", "unknown value type 13");
    kv_file(&b, "k.et", DSQ_GGUF_ARRAY);
    bb_u32(&b, 99);
    bb_u64(&b, 0);
    expect_fail(&b, DSQ_ERR_FORMAT, "key 'k.et'", "unknown array element type 99");
    kv_file(&b, "k.trunc", DSQ_GGUF_U64);
    bb_u32(&b, 0);
    expect_fail(&b, DSQ_ERR_FORMAT, "key 'k.trunc'", "truncated");
    b.n = 0;
    hdr(&b, 3, 0, 2);
    kv_u32(&b, "k.dup", 1);
    kv_u32(&b, "k.dup", 2);
    expect_fail(&b, DSQ_ERR_FORMAT, "key 'k.dup'", "duplicate");
    kv_file(&b, "", DSQ_GGUF_U8);
    bb_zeros(&b, 8);
    expect_fail(&b, DSQ_ERR_FORMAT, "empty key", NULL);
    b.n = 0;
    hdr(&b, 3, 0, 1);
    bb_strn(&b, "a\0b", 3);
    bb_u32(&b, DSQ_GGUF_U8);
    bb_put(&b, "", 1);
    expect_fail(&b, DSQ_ERR_FORMAT, "key 'a?b'", "NUL");
    free(b.p);
}

static void test_hostile_alignment(void **state)
{
    (void)state;
    bb b = {0};
    kv_file(&b, "general.alignment", DSQ_GGUF_U64);
    bb_u64(&b, 32);
    expect_fail(&b, DSQ_ERR_FORMAT, "general.alignment", "must be u32");
    const uint32_t bad[] = {0, 48, 96};
    for (int i = 0; i < 3; i++) {
        b.n = 0;
        hdr(&b, 3, 0, 1);
        kv_u32(&b, "general.alignment", bad[i]);
        expect_fail(&b, DSQ_ERR_FORMAT, "general.alignment", "power of two");
    }
    /* ggml accepts any power of two, 8 and 1 included. */
    b.n = 0;
    hdr(&b, 3, 0, 1);
    kv_u32(&b, "general.alignment", 8);
    dsq_gguf *g = expect_ok(&b);
    assert_int_equal(g->alignment, 8);
    dsq_gguf_close(g);
    free(b.p);
}

static void tensor_case(tspec *ts, size_t data_len, dsq_status code, const char *n1, const char *n2)
{
    bb b = {0};
    build_tensors(&b, 3, ts, 2, data_len);
    expect_fail(&b, code, n1, n2);
    free(b.p);
    base_specs(ts);
}

static void test_hostile_tensors(void **state)
{
    (void)state;
    tspec ts[2];
    base_specs(ts);
    bb b = {0};
    build_tensors(&b, 3, ts, 2, 256);
    dsq_gguf *g = expect_ok(&b);
    assert_true(g->data_offset % 32 == 0 && g->tensors[1].nbytes == 68);
    dsq_gguf_close(g);
    free(b.p);

    ts[1].name = "a";
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'a'", "duplicate");
    char long_name[65];
    memset(long_name, 'n', 64);
    long_name[64] = '\0';
    ts[1].name = long_name;
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'nnnn", "at most 63");
    ts[1].n_dims = 0;
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'b'", "0 dimensions");
    ts[1] = (tspec){"b", 5, {32, 1, 1, 1, 1}, DSQ_TYPE_F32, 128};
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'b'", "5 dimensions");
    ts[1].ne[1] = UINT64_MAX; /* -1 as int64 */
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'b'", "negative");
    ts[1].ne[0] = 1ull << 32;
    ts[1].ne[1] = 1ull << 32;
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'b'", "overflows");
    ts[1].ne[0] = 1ull << 32;
    ts[1].ne[1] = 1ull << 31; /* 2^63: wraps no uint64, but is past INT64_MAX */
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'b'", "overflows");
    ts[1].type = 4; /* removed Q4_2 */
    tensor_case(ts, 256, DSQ_ERR_UNSUPPORTED, "tensor 'b'", "ggml type");
    ts[1].type = 1000;
    tensor_case(ts, 256, DSQ_ERR_UNSUPPORTED, "tensor 'b'", "ggml type");
    ts[1].type = DSQ_TYPE_Q4_0;
    ts[1].ne[0] = 16;
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'b'", "row length 16");
    ts[1].off = 144;
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'b'", "offset 144");
    ts[1].off = 1ull << 40;
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'b'", "past the end");
    ts[1].off = UINT64_MAX - 31; /* offset + size wraps */
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'b'", "past the end");
    tensor_case(ts, 128 + 67, DSQ_ERR_FORMAT, "tensor 'b'", "past the end");
    ts[1].off = 96; /* inside a's [0, 128) */
    tensor_case(ts, 256, DSQ_ERR_FORMAT, "tensor 'b'", "overlaps tensor 'a'");
    ts[0].off = 160; /* b at 128 runs to 196, into a */
    tensor_case(ts, 512, DSQ_ERR_FORMAT, "tensor 'a'", "overlaps tensor 'b'");
}

/* Every prefix of a valid file is refused as truncated until the last tensor's
 * data is complete; only the final padding may be missing. */
static void test_truncation(void **state)
{
    (void)state;
    char *path = write_rich("full.gguf");
    size_t n;
    uint8_t *bytes = slurp(path, &n);
    dsq_gguf *g;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    uint64_t need = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].offset + g->tensors[i].nbytes > need) need = g->tensors[i].offset + g->tensors[i].nbytes;
    uint64_t meta = g->data_offset;
    need += meta;
    dsq_gguf_close(g);
    /* Every prefix through the metadata, then every 5th into the data section (file I/O is the cost). */
    for (size_t len = 0; len < n; len += len < meta ? 1 : 5) {
        bb b = {bytes, len, n};
        if (len < need) {
            expect_fail(&b, DSQ_ERR_FORMAT, NULL, NULL);
        } else {
            g = expect_ok(&b);
            dsq_gguf_close(g);
        }
    }
    bb edge = {bytes, (size_t)need - 1, n}; /* the boundaries the stride may skip */
    expect_fail(&edge, DSQ_ERR_FORMAT, "past the end", NULL);
    edge.n = (size_t)need;
    dsq_gguf_close(expect_ok(&edge));
    edge.n = (size_t)meta - 1;
    expect_fail(&edge, DSQ_ERR_FORMAT, "truncated", NULL);
    free(bytes);
    free(path);
}

/* Random corruption must never read out of bounds (run under ASan). */
static void test_fuzz(void **state)
{
    (void)state;
    char *path = write_rich("fuzz-src.gguf");
    size_t n;
    uint8_t *orig = slurp(path, &n);
    uint8_t *bytes = malloc(n);
    uint64_t st = 7;
    int opened = 0;
    for (int iter = 0; iter < 1500; iter++) {
        memcpy(bytes, orig, n);
        int flips = 1 + (int)(dsq_test_rand(&st) % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(dsq_test_rand(&st) % 2048); /* the metadata part */
            bytes[at % n] = (uint8_t)dsq_test_rand(&st);
        }
        char *p = write_fresh("fuzz.gguf", bytes, n);
        dsq_gguf *g = NULL;
        if (dsq_gguf_open(p, &g) == DSQ_OK) {
            opened++;
            volatile uint8_t sink = 0;
            for (uint64_t i = 0; i < g->n_tensors; i++) {
                dsq_tensor t;
                assert_int_equal(dsq_gguf_tensor(g, i, &t), DSQ_OK);
                if (t.nbytes) sink ^= ((const uint8_t *)t.data)[0] ^ ((const uint8_t *)t.data)[t.nbytes - 1];
            }
            (void)sink;
            dsq_gguf_close(g);
        } else {
            assert_non_null(strstr(dsq_errmsg(), p));
        }
        free(p);
    }
    assert_true(opened > 0); /* flips inside string bytes keep the file valid */
    free(orig);
    free(bytes);
    free(path);
}

/* ---- writer failures: nothing appears at the destination ---- */

static dsq_gguf_writer *small_writer(void)
{
    dsq_gguf_writer *w;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str(w, "general.name", "w"), DSQ_OK);
    const int64_t shape[] = {2, 32};
    assert_int_equal(dsq_gguf_add_tensor(w, "w.q8", DSQ_TYPE_Q8_0, 2, shape), DSQ_OK);
    return w;
}

static void test_writer_failures(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char path[4096];
    snprintf(path, sizeof path, "%s/out.gguf", dir);
    uint8_t data[200] = {0};

    dsq_gguf_writer *w = small_writer(); /* too few bytes */
    assert_int_equal(dsq_gguf_writer_begin(w, path, false), DSQ_OK);
    assert_int_equal(dsq_test_count_entries(dir), 1); /* the temporary */
    assert_int_equal(dsq_gguf_writer_write(w, data, 67), DSQ_OK);
    expect_get_fail(dsq_gguf_writer_finish(w), DSQ_ERR_ARG, "w.q8");
    assert_non_null(strstr(dsq_errmsg(), path));
    assert_int_equal(dsq_test_count_entries(dir), 0);
    dsq_gguf_writer_free(w);

    w = small_writer(); /* too many bytes */
    assert_int_equal(dsq_gguf_writer_begin(w, path, false), DSQ_OK);
    expect_get_fail(dsq_gguf_writer_write(w, data, 69), DSQ_ERR_ARG, "more than the tensors declare");
    assert_int_equal(dsq_test_count_entries(dir), 0);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_ERR_ARG);
    assert_int_equal(dsq_test_count_entries(dir), 0);
    dsq_gguf_writer_free(w);

    w = small_writer(); /* abandoned */
    assert_int_equal(dsq_gguf_writer_begin(w, path, false), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_write(w, data, 10), DSQ_OK);
    dsq_gguf_writer_free(w);
    assert_int_equal(dsq_test_count_entries(dir), 0);

    w = small_writer(); /* success; then an existing file is not replaced without overwrite */
    assert_int_equal(dsq_gguf_writer_begin(w, path, false), DSQ_OK);
    expect_get_fail(dsq_gguf_set_u32(w, "late", 1), DSQ_ERR_ARG, "late");
    const int64_t sh[] = {32};
    assert_int_equal(dsq_gguf_add_tensor(w, "late", DSQ_TYPE_F32, 1, sh), DSQ_ERR_ARG);
    assert_int_equal(dsq_gguf_writer_write(w, data, 68), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_ERR_ARG);
    dsq_gguf_writer_free(w);
    uint64_t size = file_size(path);
    w = small_writer();
    assert_int_equal(dsq_gguf_writer_begin(w, path, false), DSQ_ERR_EXISTS);
    dsq_gguf_writer_free(w);
    assert_int_equal(dsq_test_count_entries(dir), 1);
    assert_true(file_size(path) == size);
    dsq_test_rmtmp(dir);
}

static void test_writer_refuses(void **state)
{
    (void)state;
    dsq_gguf_writer *w;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    const int64_t q4_bad[] = {2, 16}, ok[] = {2, 32}, five[] = {1, 1, 1, 1, 32}, neg[] = {-1, 32};
    expect_get_fail(dsq_gguf_add_tensor(w, "q", DSQ_TYPE_Q4_0, 2, q4_bad), DSQ_ERR_ARG, "row length 16");
    assert_int_equal(dsq_gguf_add_tensor(w, "q", DSQ_TYPE_Q4_0, 2, ok), DSQ_OK);
    expect_get_fail(dsq_gguf_add_tensor(w, "q", DSQ_TYPE_Q4_0, 2, ok), DSQ_ERR_ARG, "duplicate");
    expect_get_fail(dsq_gguf_add_tensor(w, "f", DSQ_TYPE_F32, 5, five), DSQ_ERR_ARG, "tensor 'f'");
    expect_get_fail(dsq_gguf_add_tensor(w, "n", DSQ_TYPE_F32, 2, neg), DSQ_ERR_ARG, "tensor 'n'");
    expect_get_fail(dsq_gguf_add_tensor(w, "u", DSQ_TYPE_U8, 2, ok), DSQ_ERR_ARG, "tensor 'u'");
    char long_name[65];
    memset(long_name, 'x', 64);
    long_name[64] = '\0';
    expect_get_fail(dsq_gguf_add_tensor(w, long_name, DSQ_TYPE_F32, 2, ok), DSQ_ERR_ARG, "name is 64 bytes");
    long_name[63] = '\0';
    assert_int_equal(dsq_gguf_add_tensor(w, long_name, DSQ_TYPE_F32, 2, ok), DSQ_OK);
    expect_get_fail(dsq_gguf_set_u32(w, "general.alignment", 48), DSQ_ERR_ARG, "general.alignment");
    expect_get_fail(dsq_gguf_set_u64(w, "general.alignment", 64), DSQ_ERR_ARG, "must be u32");
    assert_int_equal(dsq_gguf_set_u32(w, "general.alignment", 16), DSQ_OK);
    dsq_gguf_value big = {.type = DSQ_GGUF_U8, .v.u64 = 300};
    expect_get_fail(dsq_gguf_set(w, "k.u8", &big), DSQ_ERR_ARG, "k.u8");
    dsq_gguf_value bad_nest = {.type = DSQ_GGUF_ARRAY, .v.arr = {DSQ_GGUF_ARRAY, 1, &big}};
    expect_get_fail(dsq_gguf_set(w, "k.nest", &bad_nest), DSQ_ERR_ARG, "k.nest");
    expect_get_fail(dsq_gguf_set_arr(w, "k.s", DSQ_GGUF_STRING, NULL, 0), DSQ_ERR_ARG, "k.s");
    expect_get_fail(dsq_gguf_set_u32(w, "", 1), DSQ_ERR_ARG, "empty key");
    expect_get_fail(dsq_gguf_writer_write(w, "x", 1), DSQ_ERR_ARG, "before");
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_ERR_ARG);
    dsq_gguf_writer_free(w);
}

/* ---- ggml's own file ---- */

static void test_kquants_vectors(void **state)
{
    (void)state;
    char *path = dsq_test_shared("vectors/kquants.gguf");
    if (!path) DSQ_TEST_SKIP();
    dsq_gguf *g;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    assert_true(g->n_tensors == 500);
    assert_true(g->n_kv == 20);
    assert_int_equal(g->alignment, 32);
    assert_true(g->data_offset == 32480);
    const dsq_gguf_array *types;
    assert_int_equal(dsq_gguf_get_arr(g, "vectors.types", DSQ_GGUF_STRING, &types), DSQ_OK);
    assert_true(types->n == 12);
    assert_string_equal(((const dsq_gguf_str *)types->data)[0].ptr, "q4_0");
    assert_string_equal(((const dsq_gguf_str *)types->data)[11].ptr, "iq4_xs");
    uint64_t seed;
    assert_int_equal(dsq_gguf_get_u64(g, "vectors.seed", &seed), DSQ_OK);
    assert_true(seed == 0x5EED5EED12345678ull);
    int64_t i = dsq_gguf_find_tensor(g, "q4_K.gaussian");
    assert_true(i >= 0);
    dsq_tensor t;
    assert_int_equal(dsq_gguf_tensor(g, (uint64_t)i, &t), DSQ_OK);
    assert_int_equal(t.type, DSQ_TYPE_Q4_K);
    assert_int_equal(t.n_dims, 2);
    assert_true(t.shape[0] == 8 && t.shape[1] == 1024);
    assert_true(t.nbytes == 8 * 4 * 144);
    assert_ptr_equal(t.data, g->map.data + g->data_offset + g->tensors[i].offset);

    /* ggml's writer and ours lay files out identically: copying every KV and
     * tensor through our writer reproduces the file byte for byte. */
    dsq_gguf_writer *w;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    for (uint64_t k = 0; k < g->n_kv; k++) assert_int_equal(dsq_gguf_set(w, g->kv[k].key, &g->kv[k].value), DSQ_OK);
    for (uint64_t k = 0; k < g->n_tensors; k++) {
        assert_int_equal(dsq_gguf_tensor(g, k, &t), DSQ_OK);
        assert_int_equal(dsq_gguf_add_tensor(w, t.name, t.type, t.n_dims, t.shape), DSQ_OK);
    }
    char copy[4096];
    snprintf(copy, sizeof copy, "%s/kquants-copy.gguf", g_dir);
    assert_int_equal(dsq_gguf_writer_begin(w, copy, false), DSQ_OK);
    for (uint64_t k = 0; k < g->n_tensors; k++) {
        assert_int_equal(dsq_gguf_tensor(g, k, &t), DSQ_OK);
        assert_int_equal(dsq_gguf_writer_write(w, t.data, t.nbytes), DSQ_OK);
    }
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    size_t n;
    uint8_t *bytes = slurp(copy, &n);
    assert_true(n == g->map.size);
    assert_memory_equal(bytes, g->map.data, n);
    free(bytes);
    dsq_gguf_close(g);
    free(path);
}

/* ggml reads any non-zero bool byte as true; so does every reader of ours,
 * so that info and convert give such a file the same verdict (a byte 2
 * once passed info and failed convert). The writer writes 1 back. */
static void test_bool_bytes(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char path[4200], again[4200];
    snprintf(path, sizeof path, "%s/b.gguf", dir);
    snprintf(again, sizeof again, "%s/b2.gguf", dir);
    dsq_gguf_writer *w = NULL;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    assert_int_equal(dsq_gguf_set_bool(w, "flag", true), DSQ_OK);
    const uint8_t arr[3] = {1, 0, 1};
    assert_int_equal(dsq_gguf_set_arr(w, "flags", DSQ_GGUF_BOOL, arr, 3), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_begin(w, path, false), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    /* bytes 1 become 2 and 0x80 in the file */
    FILE *f = fopen(path, "r+b");
    uint8_t buf[512];
    size_t n = fread(buf, 1, sizeof buf, f);
    uint8_t *k = memmem(buf, n, "flag\x07\x00\x00\x00", 8);
    assert_non_null(k);
    k[8] = 2;
    uint8_t *a = memmem(buf, n, "flags\x09\x00\x00\x00\x07\x00\x00\x00\x03", 14);
    assert_non_null(a);
    a[21] = 0x80; /* element 0 */
    fseek(f, 0, SEEK_SET);
    fwrite(buf, 1, n, f);
    fclose(f);
    dsq_gguf *g = NULL;
    assert_int_equal(dsq_gguf_open(path, &g), DSQ_OK);
    bool b = false;
    assert_int_equal(dsq_gguf_get_bool(g, "flag", &b), DSQ_OK);
    assert_true(b);
    const dsq_gguf_array *v = NULL;
    assert_int_equal(dsq_gguf_get_arr(g, "flags", DSQ_GGUF_BOOL, &v), DSQ_OK);
    assert_int_equal(((const uint8_t *)v->data)[0], 1);
    assert_int_equal(((const uint8_t *)v->data)[1], 0);
    assert_int_equal(((const uint8_t *)v->data)[2], 1);
    /* copied through the writer: 1s again */
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    for (uint64_t i = 0; i < g->n_kv; i++) assert_int_equal(dsq_gguf_set(w, g->kv[i].key, &g->kv[i].value), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_begin(w, again, false), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    dsq_gguf_close(g);
    f = fopen(again, "rb");
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    k = memmem(buf, n, "flag\x07\x00\x00\x00", 8);
    a = memmem(buf, n, "flags\x09\x00\x00\x00\x07\x00\x00\x00\x03", 14);
    assert_true(k && a && k[8] == 1 && a[21] == 1);
    dsq_test_rmtmp(dir);
}

int main(void)
{
#ifdef DSQ_SHARED_DIR
    /* testutil.c is built without the DSQ_SHARED_DIR definition; hand it over. */
    setenv("DSQ_SHARED_DIR", DSQ_SHARED_DIR, 0);
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_rewrite_identical),
        cmocka_unit_test(test_setters_replace_remove),
        cmocka_unit_test(test_getters),
        cmocka_unit_test(test_lookups_match_getters),
        cmocka_unit_test(test_hostile_header),
        cmocka_unit_test(test_hostile_kv),
        cmocka_unit_test(test_hostile_alignment),
        cmocka_unit_test(test_hostile_tensors),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_fuzz),
        cmocka_unit_test(test_writer_failures),
        cmocka_unit_test(test_writer_refuses),
        cmocka_unit_test(test_bool_bytes),
        cmocka_unit_test(test_kquants_vectors),
    };
    int rc = DSQ_TEST_RUN_GROUP(tests, setup, teardown);
    for (int i = 0; i < N_RICH_T; i++) free(g_rt[i].data);
    return rc;
}
