/* safetensors: every malformed-file class the reader must refuse (files built
 * byte by byte here), legal corner cases (scalars, empty tensors, unsorted
 * offsets, padding), writer/reader round trips single and sharded, hostile
 * or inconsistent indexes, and writer failures that must leave no file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "formats/safetensors.h"
#include "tests/helpers/testutil.h"

/* ---------- helpers ---------- */

/* <u64 declared header length><header bytes><data_len pattern bytes>. */
static char *make_raw(const char *dir, const char *name, uint64_t declared, const void *header, size_t hl,
                      size_t data_len)
{
    size_t n = 8 + hl + data_len;
    uint8_t *buf = malloc(n);
    assert_non_null(buf);
    for (int k = 0; k < 8; k++) buf[k] = (uint8_t)(declared >> (8 * k));
    if (hl) memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < data_len; i++) buf[8 + hl + i] = (uint8_t)(i * 7 + 1);
    char *p = dsq_test_write(dir, name, buf, n);
    free(buf);
    assert_non_null(p);
    return p;
}

static char *make_st(const char *dir, const char *name, const char *header, size_t data_len)
{
    size_t hl = strlen(header);
    return make_raw(dir, name, hl, header, hl, data_len);
}

static void assert_msg_has(const char *phrase)
{
    if (!strstr(dsq_errmsg(), phrase)) fail_msg("message \"%s\" lacks \"%s\"", dsq_errmsg(), phrase);
}

/* Opening path must fail with want, naming the file and the phrase. */
static void expect_open_fail(const char *path, dsq_status want, const char *phrase)
{
    dsq_st_file *f = (dsq_st_file *)0x1;
    dsq_status s = dsq_st_open(path, &f);
    if (s != want) fail_msg("%s: got %s (%s), want %s", path, dsq_status_name(s), dsq_errmsg(), dsq_status_name(want));
    assert_null(f);
    assert_msg_has(path);
    assert_msg_has(phrase);
}

static void expect_model_fail(const char *path, dsq_status want, const char *phrase)
{
    dsq_st_model *m = (dsq_st_model *)0x1;
    dsq_status s = dsq_st_model_open(path, &m);
    if (s != want) fail_msg("%s: got %s (%s), want %s", path, dsq_status_name(s), dsq_errmsg(), dsq_status_name(want));
    assert_null(m);
    assert_msg_has(phrase);
}

static char *join(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

/* ---------- malformed files ---------- */

static void test_short_and_bad_lengths(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char *p = dsq_test_write(dir, "short.safetensors", "\x02\0\0\0\0", 5);
    expect_open_fail(p, DSQ_ERR_FORMAT, "too short for the 8-byte header length");
    free(p);
    p = dsq_test_write(dir, "empty.safetensors", "", 0);
    expect_open_fail(p, DSQ_ERR_FORMAT, "too short");
    free(p);
    p = make_raw(dir, "zero.safetensors", 0, "{}", 2, 0);
    expect_open_fail(p, DSQ_ERR_FORMAT, "header length is 0");
    free(p);
    p = make_raw(dir, "huge.safetensors", (uint64_t)DSQ_ST_MAX_HEADER + 1, "{}", 2, 0);
    expect_open_fail(p, DSQ_ERR_FORMAT, "exceeds the limit");
    free(p);
    p = make_raw(dir, "max64.safetensors", UINT64_MAX, "{}", 2, 0);
    expect_open_fail(p, DSQ_ERR_FORMAT, "exceeds the limit");
    free(p);
    p = make_raw(dir, "beyond.safetensors", 100, "{}      ", 8, 4);
    expect_open_fail(p, DSQ_ERR_FORMAT, "runs beyond the end of the file");
    free(p);
    /* Exactly one byte short. */
    p = make_raw(dir, "beyond1.safetensors", 3, "{}", 2, 0);
    expect_open_fail(p, DSQ_ERR_FORMAT, "runs beyond the end of the file");
    free(p);
    dsq_test_rmtmp(dir);
}

#define T8 "\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]"

typedef struct bad_case {
    const char *header;
    size_t data_len;
    dsq_status want;
    const char *phrase;
    const char *tensor; /* must appear in the message as well, or NULL */
} bad_case;

static const bad_case g_bad[] = {
    {"[{\"w\":1}]", 0, DSQ_ERR_FORMAT, "does not start with '{'", NULL},
    {" {}", 0, DSQ_ERR_FORMAT, "does not start with '{'", NULL},
    {"{\"w\":{" T8 "}", 8, DSQ_ERR_FORMAT, "not valid JSON", NULL},
    {"{\"w\":{" T8 ",}}", 8, DSQ_ERR_FORMAT, "not valid JSON", NULL},
    {"{\"w\":{" T8 "}} x", 8, DSQ_ERR_FORMAT, "trailing bytes", NULL},
    {"{\"w\":{" T8 "}}{}", 8, DSQ_ERR_FORMAT, "trailing bytes", NULL},
    {"{\"w\xff\":{" T8 "}}", 8, DSQ_ERR_FORMAT, "not valid UTF-8", NULL},
    {"{\"w\xc0\xaf\":{" T8 "}}", 8, DSQ_ERR_FORMAT, "not valid UTF-8", NULL},     /* overlong "/" */
    {"{\"w\xed\xa0\x80\":{" T8 "}}", 8, DSQ_ERR_FORMAT, "not valid UTF-8", NULL}, /* surrogate */
    {"{\"w\x01\":{" T8 "}}", 8, DSQ_ERR_FORMAT, "control byte 0x01", NULL},
    {"{\"w\\u0000x\":{" T8 "}}", 8, DSQ_ERR_FORMAT, "escaped NUL", NULL},
    {"{\"w\":1}", 0, DSQ_ERR_FORMAT, "entry is not an object", "\"w\""},
    {"{\"w\":[0,8]}", 8, DSQ_ERR_FORMAT, "entry is not an object", "\"w\""},
    {"{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT, "missing \"dtype\"", "\"w\""},
    {"{\"w\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT, "\"dtype\" is not a string",
     "\"w\""},
    {"{\"w\":{\"dtype\":\"F7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_UNSUPPORTED, "unknown dtype \"F7\"",
     "\"w\""},
    {"{\"w\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_UNSUPPORTED,
     "unknown dtype \"f32\"", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT, "missing \"shape\"", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT, "\"shape\" is not an array",
     "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT, "shape[0] is negative",
     "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,2.5],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT,
     "shape[1] is not an integer", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1e16],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT, "shape[0] exceeds 2^53",
     "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1e999],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT, "shape[0] exceeds 2^53",
     "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT,
     "shape[0] is not a number", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT,
     "shape[0] is not a number", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_UNSUPPORTED,
     "9 dims, more than the 8 supported", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, DSQ_ERR_FORMAT, "missing \"data_offsets\"", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4,8]}}", 8, DSQ_ERR_FORMAT, "not a pair", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", 8, DSQ_ERR_FORMAT, "not a pair", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{\"a\":0,\"b\":8}}}", 8, DSQ_ERR_FORMAT, "not a pair",
     "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8, DSQ_ERR_FORMAT,
     "data_offsets[0] is negative", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.5]}}", 8, DSQ_ERR_FORMAT,
     "data_offsets[1] is not an integer", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", 8, DSQ_ERR_FORMAT,
     "data_offsets[1] is not a number", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1e17]}}", 8, DSQ_ERR_FORMAT,
     "data_offsets[1] exceeds 2^53", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, DSQ_ERR_FORMAT, "begin 8 is after end 0",
     "\"w\""},
    {"{\"w\":{" T8 "}}", 4, DSQ_ERR_FORMAT, "lie outside the 4-byte data section", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT,
     "span 8 bytes but shape and dtype F32 need 12", "\"w\""},
    {"{\"w\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT, "need 16", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT,
     "overflows", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387,4096],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT,
     "overflows", "\"w\""}, /* elements fit, bytes do not */
    {"{\"a\":{" T8 "},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, DSQ_ERR_FORMAT, "overlap",
     "\"b\""},
    {"{\"a\":{" T8 "},\"b\":{" T8 "}}", 8, DSQ_ERR_FORMAT, "overlap", "\"a\""},
    {"{\"a\":{" T8 "},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}", 16, DSQ_ERR_FORMAT,
     "4 unused bytes in the data section before tensor", "\"b\""},
    {"{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, DSQ_ERR_FORMAT,
     "4 unused bytes in the data section before tensor", "\"b\""},
    {"{\"a\":{" T8 "}}", 12, DSQ_ERR_FORMAT, "4 unused bytes at the end of the data section", NULL},
    {"{}", 3, DSQ_ERR_FORMAT, "3 unused bytes at the end", NULL},
    {"{\"w\":{" T8 "},\"w\":{" T8 "}}", 8, DSQ_ERR_FORMAT, "duplicate tensor name", "\"w\""},
    {"{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, DSQ_ERR_FORMAT,
     "field \"dtype\" appears twice", "\"w\""},
    {"{\"__metadata__\":\"x\"}", 0, DSQ_ERR_FORMAT, "__metadata__ is not an object", NULL},
    {"{\"__metadata__\":{\"k\":1}}", 0, DSQ_ERR_FORMAT, "__metadata__ value of \"k\" is not a string", NULL},
    {"{\"__metadata__\":{\"k\":null}}", 0, DSQ_ERR_FORMAT, "__metadata__ value of \"k\" is not a string", NULL},
    {"{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, DSQ_ERR_FORMAT, "duplicate __metadata__ key \"k\"", NULL},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, DSQ_ERR_FORMAT, "duplicate __metadata__ object", NULL},
};

static void test_malformed_headers(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    for (size_t i = 0; i < sizeof g_bad / sizeof g_bad[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad%02zu.safetensors", i);
        char *p = make_st(dir, name, g_bad[i].header, g_bad[i].data_len);
        expect_open_fail(p, g_bad[i].want, g_bad[i].phrase);
        if (g_bad[i].tensor) assert_msg_has(g_bad[i].tensor);
        /* The model opener reports the same problem for a single file. */
        expect_model_fail(p, g_bad[i].want, g_bad[i].phrase);
        free(p);
    }
    dsq_test_rmtmp(dir);
}

/* A header deeper than cJSON's nesting limit must fail cleanly, not crash. */
static void test_deep_nesting(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    size_t depth = 100000;
    char *h = malloc(depth * 2 + 16);
    size_t n = 0;
    n += (size_t)sprintf(h, "{\"w\":");
    for (size_t i = 0; i < depth; i++) h[n++] = '[';
    for (size_t i = 0; i < depth; i++) h[n++] = ']';
    h[n++] = '}';
    h[n] = '\0';
    char *p = make_st(dir, "deep.safetensors", h, 0);
    expect_open_fail(p, DSQ_ERR_FORMAT, "not valid JSON");
    free(p);
    free(h);
    dsq_test_rmtmp(dir);
}

/* ---------- legal corner cases ---------- */

static void test_legal_corners(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    /* Offsets not in header order, a scalar, two empty tensors (one at 0, one
     * at the end), 8 dims, metadata, padding spaces and an odd header length. */
    const char *h = "{\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[16,16]},"
                    "\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[8,16]},"
                    "\"e\":{\"dtype\":\"I8\",\"shape\":[4,0],\"data_offsets\":[0,0]},"
                    "\"m\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,2,4],\"data_offsets\":[0,8]},"
                    "\"__metadata__\":{\"format\":\"pt\",\"note\":\"a\\\"b\\u00e9\"}}   ";
    assert_true(strlen(h) % 8 != 0);
    char *p = make_st(dir, "ok.safetensors", h, 16);
    dsq_st_file *f = NULL;
    assert_int_equal(dsq_st_open(p, &f), DSQ_OK);
    assert_int_equal(f->n_tensors, 4);
    assert_int_equal(f->data_size, 16);
    assert_int_equal(f->header_len, strlen(h));
    assert_string_equal(f->tensors[0].name, "z"); /* header order kept */
    assert_string_equal(f->tensors[3].name, "m");
    assert_string_equal(dsq_st_meta(f, "format"), "pt");
    assert_string_equal(dsq_st_meta(f, "note"), "a\"b\xc3\xa9");
    assert_null(dsq_st_meta(f, "absent"));
    dsq_tensor t;
    assert_int_equal(dsq_st_view(f, 1, &t), DSQ_OK);
    assert_string_equal(t.name, "s");
    assert_int_equal(t.type, DSQ_TYPE_F64);
    assert_int_equal(t.n_dims, 0);
    assert_int_equal(t.nbytes, 8);
    assert_int_equal(dsq_tensor_nelems(&t), 1);
    const uint8_t *d = t.data;
    for (int i = 0; i < 8; i++) assert_int_equal(d[i], (uint8_t)((8 + i) * 7 + 1));
    assert_int_equal(dsq_st_view(f, 0, &t), DSQ_OK);
    assert_int_equal(t.nbytes, 0);
    assert_int_equal(t.n_dims, 2);
    assert_int_equal(t.shape[0], 0);
    assert_int_equal(t.shape[1], 3);
    assert_int_equal(dsq_st_view(f, 3, &t), DSQ_OK);
    assert_int_equal(t.n_dims, 8);
    assert_int_equal(t.shape[7], 4);
    assert_int_equal(t.type, DSQ_TYPE_U8);
    assert_int_equal(dsq_st_view(f, 4, &t), DSQ_ERR_ARG);
    dsq_st_close(f);
    free(p);

    /* No tensors at all. */
    p = make_st(dir, "empty.safetensors", "{}", 0);
    assert_int_equal(dsq_st_open(p, &f), DSQ_OK);
    assert_int_equal(f->n_tensors, 0);
    assert_int_equal(f->n_meta, 0);
    dsq_st_close(f);
    free(p);
    dsq_test_rmtmp(dir);
}

static void test_every_dtype_name(void **state)
{
    (void)state;
    static const struct {
        const char *st;
        dsq_type t;
        unsigned size;
    } k[] = {{"F64", DSQ_TYPE_F64, 8},   {"F32", DSQ_TYPE_F32, 4},         {"F16", DSQ_TYPE_F16, 2},
             {"BF16", DSQ_TYPE_BF16, 2}, {"F8_E4M3", DSQ_TYPE_F8_E4M3, 1}, {"F8_E5M2", DSQ_TYPE_F8_E5M2, 1},
             {"I64", DSQ_TYPE_I64, 8},   {"I32", DSQ_TYPE_I32, 4},         {"I16", DSQ_TYPE_I16, 2},
             {"I8", DSQ_TYPE_I8, 1},     {"U8", DSQ_TYPE_U8, 1},           {"U16", DSQ_TYPE_U16, 2},
             {"U32", DSQ_TYPE_U32, 4},   {"U64", DSQ_TYPE_U64, 8},         {"BOOL", DSQ_TYPE_BOOL, 1}};
    char *dir = dsq_test_mkdtemp();
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char h[256], name[64];
        snprintf(h, sizeof h, "{\"x\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%u]}}", k[i].st,
                 3 * k[i].size);
        snprintf(name, sizeof name, "%s.safetensors", k[i].st);
        char *p = make_st(dir, name, h, 3 * k[i].size);
        dsq_st_file *f = NULL;
        assert_int_equal(dsq_st_open(p, &f), DSQ_OK);
        assert_int_equal(f->tensors[0].type, k[i].t);
        dsq_st_close(f);
        /* One byte short of three elements is refused. */
        snprintf(h, sizeof h, "{\"x\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%u]}}", k[i].st,
                 3 * k[i].size - 1);
        free(p);
        p = make_st(dir, name, h, 3 * k[i].size - 1);
        expect_open_fail(p, DSQ_ERR_FORMAT, "but shape and dtype");
        free(p);
    }
    dsq_test_rmtmp(dir);
}

/* ---------- round trips ---------- */

typedef struct spec {
    char name[48];
    dsq_type type;
    int n_dims;
    int64_t shape[DSQ_MAX_DIMS];
    uint8_t *data;
    uint64_t nbytes;
} spec;

static const dsq_type g_all_types[] = {DSQ_TYPE_F64,     DSQ_TYPE_F32, DSQ_TYPE_F16, DSQ_TYPE_BF16, DSQ_TYPE_F8_E4M3,
                                       DSQ_TYPE_F8_E5M2, DSQ_TYPE_I64, DSQ_TYPE_I32, DSQ_TYPE_I16,  DSQ_TYPE_I8,
                                       DSQ_TYPE_U8,      DSQ_TYPE_U16, DSQ_TYPE_U32, DSQ_TYPE_U64,  DSQ_TYPE_BOOL};
enum { N_TYPES = sizeof g_all_types / sizeof g_all_types[0], MAX_SPECS = 2 * N_TYPES + 4 };

static void spec_set(spec *s, const char *name, dsq_type t, int n_dims, const int64_t *shape, uint64_t *seed)
{
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->type = t;
    s->n_dims = n_dims;
    uint64_t n = 1;
    for (int d = 0; d < n_dims; d++) {
        s->shape[d] = shape[d];
        n *= (uint64_t)shape[d];
    }
    s->nbytes = n * dsq_type_get((int)t)->block_bytes;
    s->data = malloc(s->nbytes ? s->nbytes : 1);
    for (uint64_t i = 0; i < s->nbytes; i++) {
        uint8_t r = (uint8_t)dsq_test_rand(seed);
        s->data[i] = t == DSQ_TYPE_BOOL ? (r & 1) : r;
    }
}

/* Two tensors of every dtype, a scalar, an empty tensor, a name needing JSON escapes. */
static size_t make_specs(spec *s, uint64_t seed)
{
    size_t n = 0;
    for (size_t i = 0; i < N_TYPES; i++) {
        char name[48];
        const int64_t a[] = {3, 5}, b[] = {7};
        snprintf(name, sizeof name, "layers.%zu.%s.weight", i, dsq_type_get((int)g_all_types[i])->st_name);
        spec_set(&s[n++], name, g_all_types[i], 2, a, &seed);
        snprintf(name, sizeof name, "layers.%zu.%s.bias", i, dsq_type_get((int)g_all_types[i])->st_name);
        spec_set(&s[n++], name, g_all_types[i], 1, b, &seed);
    }
    const int64_t z[] = {0, 4}, q[] = {2, 2};
    spec_set(&s[n++], "scale", DSQ_TYPE_F32, 0, NULL, &seed);
    spec_set(&s[n++], "empty", DSQ_TYPE_I8, 2, z, &seed);
    spec_set(&s[n++], "odd \"name\"\\\xc3\xa9\t", DSQ_TYPE_F16, 2, q, &seed);
    return n;
}

static void free_specs(spec *s, size_t n)
{
    for (size_t i = 0; i < n; i++) free(s[i].data);
}

/* Writes all specs through the writer in irregular chunks that cross tensor boundaries. */
static dsq_status write_specs(const char *dir, uint64_t max_shard, const spec *s, size_t n)
{
    dsq_st_writer *w = NULL;
    dsq_status st = dsq_st_writer_new(dir, "model", max_shard, &w);
    if (st != DSQ_OK) return st;
    st = dsq_st_writer_set_meta(w, "format", "pt");
    if (st == DSQ_OK) st = dsq_st_writer_set_meta(w, "quant", "q\"4\\\n");
    for (size_t i = 0; i < n && st == DSQ_OK; i++)
        st = dsq_st_writer_add(w, s[i].name, s[i].type, s[i].n_dims, s[i].shape);
    if (st == DSQ_OK) st = dsq_st_writer_begin(w);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += s[i].nbytes;
    uint8_t *all = malloc(total + 1);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i].nbytes) memcpy(all + off, s[i].data, s[i].nbytes);
        off += s[i].nbytes;
    }
    uint64_t seed = 99;
    for (off = 0; off < total && st == DSQ_OK;) {
        uint64_t k = 1 + dsq_test_rand(&seed) % 61;
        if (k > total - off) k = total - off;
        st = dsq_st_writer_write(w, all + off, k);
        off += k;
    }
    free(all);
    if (st == DSQ_OK) st = dsq_st_writer_finish(w);
    dsq_st_writer_free(w);
    return st;
}

/* Model order is the declared order; bytes, shapes, dtypes match. */
static void check_model(const dsq_st_model *m, const spec *s, size_t n)
{
    assert_int_equal(m->n_tensors, n);
    for (size_t i = 0; i < n; i++) {
        dsq_tensor t;
        assert_int_equal(dsq_st_model_view(m, i, &t), DSQ_OK);
        assert_string_equal(t.name, s[i].name);
        assert_int_equal(t.type, s[i].type);
        assert_int_equal(t.n_dims, s[i].n_dims);
        for (int d = 0; d < t.n_dims; d++) assert_int_equal(t.shape[d], s[i].shape[d]);
        assert_int_equal(t.nbytes, s[i].nbytes);
        if (t.nbytes) assert_memory_equal(t.data, s[i].data, t.nbytes);
        assert_int_equal(dsq_st_model_find(m, s[i].name), (int64_t)i);
    }
    assert_int_equal(dsq_st_model_find(m, "nope"), -1);
    assert_int_equal(dsq_st_model_find(m, ""), -1);
    assert_string_equal(dsq_st_model_meta(m, "format"), "pt");
    assert_string_equal(dsq_st_model_meta(m, "quant"), "q\"4\\\n");
    assert_null(dsq_st_model_meta(m, "absent"));
}

/* The header length is a multiple of 8, padded with spaces after the JSON. */
static void check_padding(const char *path)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    uint8_t len8[8];
    assert_int_equal(fread(len8, 1, 8, fp), 8);
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--) n = (n << 8) | len8[k];
    assert_int_equal(n % 8, 0);
    char *h = malloc(n + 1);
    assert_int_equal(fread(h, 1, n, fp), n);
    h[n] = '\0';
    fclose(fp);
    assert_memory_equal(h, "{\"__metadata__\":{\"format\":\"pt\"", 30); /* metadata first */
    size_t end = n;
    while (end > 0 && h[end - 1] == ' ') end--;
    assert_true(n - end < 8);
    assert_int_equal(h[end - 1], '}');
    free(h);
}

static void test_round_trip_single(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    spec s[MAX_SPECS];
    size_t n = make_specs(s, 1);
    assert_int_equal(write_specs(dir, 0, s, n), DSQ_OK);
    assert_int_equal(dsq_test_count_entries(dir), 1); /* no temporaries, no index */
    char *file = join(dir, "model.safetensors");
    check_padding(file);

    dsq_st_model *m = NULL;
    assert_int_equal(dsq_st_model_open(dir, &m), DSQ_OK);
    assert_int_equal(m->n_files, 1);
    check_model(m, s, n);
    dsq_st_model_close(m);
    assert_int_equal(dsq_st_model_open(file, &m), DSQ_OK);
    check_model(m, s, n);
    dsq_st_model_close(m);

    dsq_st_file *f = NULL;
    assert_int_equal(dsq_st_open(file, &f), DSQ_OK);
    assert_int_equal(f->n_meta, 2);
    assert_string_equal(f->meta_keys[0], "format");
    assert_int_equal((8 + f->header_len) % 8, 0);
    dsq_st_close(f);

    /* A second writer must not replace the file. */
    assert_int_equal(write_specs(dir, 0, s, n), DSQ_ERR_EXISTS);
    assert_msg_has("model.safetensors");
    assert_int_equal(dsq_test_count_entries(dir), 1);
    free(file);
    free_specs(s, n);
    dsq_test_rmtmp(dir);
}

static uint64_t shard_bytes(const dsq_st_file *f)
{
    uint64_t b = 0;
    for (size_t i = 0; i < f->n_tensors; i++) b += f->tensors[i].end - f->tensors[i].begin;
    return b;
}

static const dsq_st_entry *first_nonempty(const dsq_st_file *f)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].end > f->tensors[i].begin) return &f->tensors[i];
    return NULL;
}

/* The index agrees with the shards and sums the tensor bytes. */
static void check_index(const char *dir, const dsq_st_model *m, uint64_t total)
{
    char *ip = join(dir, "model.safetensors.index.json");
    char *text = NULL;
    assert_int_equal(dsq_read_file(ip, 1 << 20, &text, NULL), DSQ_OK);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    const cJSON *md = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(md, "total_size");
    assert_true(cJSON_IsNumber(ts));
    assert_true(ts->valuedouble == (double)total);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    assert_int_equal(cJSON_GetArraySize(wm), (int)m->n_tensors);
    for (size_t i = 0; i < m->n_tensors; i++) {
        dsq_tensor t;
        assert_int_equal(dsq_st_model_view(m, i, &t), DSQ_OK);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(wm, t.name);
        assert_true(cJSON_IsString(v));
        const char *fp = m->files[m->tensors[i].file]->map.path;
        assert_string_equal(strrchr(fp, '/') + 1, v->valuestring);
    }
    cJSON_Delete(root);
    free(text);
    free(ip);
}

/* Direct mode (dsq_st_writer_set_direct): headers padded so the data
 * starts on 4 KiB, bytes produced in place (reserve / produced) and written
 * (write) in turn, across tensors, shards and the 16 MiB direct buffer, read
 * back the same. */
static void test_round_trip_direct(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    spec s[3];
    const int64_t rows[3] = {7, 20 << 20, 1 << 20}; /* F32: 28 B, 80 MiB (past a 64 MiB buffer), 4 MiB */
    uint64_t seed = 5, total = 0;
    for (int i = 0; i < 3; i++) {
        memset(&s[i], 0, sizeof s[i]);
        snprintf(s[i].name, sizeof s[i].name, "t%d", i);
        s[i].type = DSQ_TYPE_F32, s[i].n_dims = 1, s[i].shape[0] = rows[i];
        s[i].nbytes = (uint64_t)rows[i] * 4;
        s[i].data = malloc(s[i].nbytes);
        for (uint64_t k = 0; k < s[i].nbytes; k++) s[i].data[k] = (uint8_t)dsq_test_rand(&seed);
        total += s[i].nbytes;
    }
    dsq_st_writer *w = NULL;
    assert_int_equal(dsq_st_writer_new(dir, "model", 40u << 20, &w), DSQ_OK);
    dsq_st_writer_set_direct(w, true);
    assert_int_equal(dsq_st_writer_set_meta(w, "format", "pt"), DSQ_OK);
    assert_int_equal(dsq_st_writer_set_meta(w, "quant", "q\"4\\\n"), DSQ_OK);
    for (int i = 0; i < 3; i++) assert_int_equal(dsq_st_writer_add(w, s[i].name, s[i].type, 1, s[i].shape), DSQ_OK);
    assert_int_equal(dsq_st_writer_begin(w), DSQ_OK);
    int t = 0;
    uint64_t done = 0, step = 0;
    while (t < 3) {
        uint64_t left = s[t].nbytes - done, k = 1 + dsq_test_rand(&seed) % (3u << 20);
        if (k > left) k = left;
        if (step++ % 2) {
            assert_int_equal(dsq_st_writer_write(w, s[t].data + done, k), DSQ_OK);
        } else {
            uint8_t *p;
            size_t got;
            assert_int_equal(dsq_st_writer_reserve(w, 1, (size_t)k, &p, &got), DSQ_OK);
            assert_non_null(p);
            assert_true(got >= 1 && got <= k);
            memcpy(p, s[t].data + done, got);
            assert_int_equal(dsq_st_writer_produced(w, got), DSQ_OK);
            k = got;
        }
        done += k;
        if (done == s[t].nbytes) t++, done = 0;
    }
    assert_int_equal(dsq_st_writer_finish(w), DSQ_OK);
    dsq_st_writer_free(w);
    dsq_st_model *m = NULL;
    assert_int_equal(dsq_st_model_open(dir, &m), DSQ_OK);
    assert_true(m->n_files >= 2);
    for (size_t k = 0; k < m->n_files; k++) {
        const dsq_st_file *f = m->files[k];
        assert_int_equal((uint64_t)(f->data - f->map.data) % 4096, 0);
    }
    for (int i = 0; i < 3; i++) {
        dsq_tensor v;
        assert_int_equal(dsq_st_model_view(m, (size_t)i, &v), DSQ_OK);
        assert_int_equal(v.nbytes, s[i].nbytes);
        assert_memory_equal(v.data, s[i].data, v.nbytes);
    }
    assert_string_equal(dsq_st_model_meta(m, "quant"), "q\"4\\\n");
    dsq_st_model_close(m);
    for (int i = 0; i < 3; i++) free(s[i].data);
    (void)total;
    dsq_test_rmtmp(dir);
}

static void test_round_trip_sharded(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    spec s[MAX_SPECS];
    size_t n = make_specs(s, 2);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += s[i].nbytes;
    const uint64_t limit = 400; /* total is ~1.1 KB: three shards */
    assert_int_equal(write_specs(dir, limit, s, n), DSQ_OK);

    dsq_st_model *m = NULL;
    assert_int_equal(dsq_st_model_open(dir, &m), DSQ_OK);
    assert_int_equal(m->n_files, 3);
    assert_int_equal(dsq_test_count_entries(dir), 4); /* 3 shards + index, nothing else */
    check_model(m, s, n);
    check_index(dir, m, total);
    for (size_t k = 0; k < m->n_files; k++) {
        char name[64];
        snprintf(name, sizeof name, "model-%05zu-of-00003.safetensors", k + 1);
        const char *fp = m->files[k]->map.path;
        assert_string_equal(strrchr(fp, '/') + 1, name);
        check_padding(fp);
        const dsq_st_file *f = m->files[k];
        uint64_t b = shard_bytes(f);
        /* Within the limit, unless one tensor alone is bigger. */
        assert_true(b <= limit || (first_nonempty(f) && first_nonempty(f)->end - first_nonempty(f)->begin == b));
        /* Greedy: the next shard's first tensor would not have fitted here. */
        if (k + 1 < m->n_files) {
            const dsq_st_entry *next = first_nonempty(m->files[k + 1]);
            assert_non_null(next);
            assert_true(b + (next->end - next->begin) > limit);
        }
    }
    dsq_st_model_close(m);

    /* The index path itself opens the same model. */
    char *ip = join(dir, "model.safetensors.index.json");
    assert_int_equal(dsq_st_model_open(ip, &m), DSQ_OK);
    check_model(m, s, n);
    dsq_st_model_close(m);
    free(ip);
    free_specs(s, n);
    dsq_test_rmtmp(dir);
}

/* A tensor above the limit gets a shard of its own; an empty one never opens a shard. */
static void test_oversize_tensor(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    uint64_t seed = 5;
    spec s[5];
    const int64_t small[] = {4}, big[] = {64}, none[] = {0};
    spec_set(&s[0], "a", DSQ_TYPE_F32, 1, small, &seed); /* 16 */
    spec_set(&s[1], "big", DSQ_TYPE_F64, 1, big, &seed); /* 512 */
    spec_set(&s[2], "e", DSQ_TYPE_F32, 1, none, &seed);  /* 0: stays with "big" */
    spec_set(&s[3], "b", DSQ_TYPE_F32, 1, small, &seed); /* 16 */
    spec_set(&s[4], "c", DSQ_TYPE_F32, 1, small, &seed); /* 16 */
    assert_int_equal(write_specs(dir, 40, s, 5), DSQ_OK);
    dsq_st_model *m = NULL;
    assert_int_equal(dsq_st_model_open(dir, &m), DSQ_OK);
    assert_int_equal(m->n_files, 3);
    const uint32_t want_file[] = {0, 1, 1, 2, 2};
    for (size_t i = 0; i < 5; i++) assert_int_equal(m->tensors[i].file, want_file[i]);
    check_model(m, s, 5);
    dsq_st_model_close(m);
    free_specs(s, 5);
    dsq_test_rmtmp(dir);
}

/* ---------- checkpoints: hostile or inconsistent indexes ---------- */

static void write_index(const char *dir, const char *json)
{
    char *p = dsq_test_write(dir, "model.safetensors.index.json", json, strlen(json));
    free(p);
}

static void test_index_problems(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    free(make_st(dir, "s1.safetensors", "{\"a\":{" T8 "}}", 8));
    free(make_st(dir, "s2.safetensors",
                 "{\"b\":{" T8 "},\"c\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}", 12));
    char *ip = join(dir, "model.safetensors.index.json");

    write_index(dir, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\",\"c\":\"s2.safetensors\"}}");
    dsq_st_model *m = NULL;
    assert_int_equal(dsq_st_model_open(dir, &m), DSQ_OK);
    assert_int_equal(m->n_files, 2);
    assert_int_equal(m->n_tensors, 3);
    assert_int_equal(dsq_st_model_find(m, "c"), 2);
    assert_int_equal(m->tensors[2].file, 1);
    assert_int_equal(m->tensors[2].idx, 1);
    dsq_st_model_close(m);

    write_index(dir,
                "{\"weight_map\":{\"a\":\"s1.safetensors\",\"ghost\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
    expect_model_fail(dir, DSQ_ERR_NOT_FOUND, "tensor \"ghost\" in s1.safetensors, but that shard lacks it");
    assert_msg_has(ip);

    write_index(dir, "{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s2.safetensors\"}}");
    expect_model_fail(dir, DSQ_ERR_NOT_FOUND, "tensor \"a\" in s2.safetensors, but that shard lacks it");

    write_index(dir, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\",\"c\":\"s2.safetensors\"}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "tensor \"b\" in s1.safetensors, but it is in");
    assert_msg_has("s2.safetensors");

    write_index(dir, "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT,
                      "shard file name \"../s1.safetensors\" (tensor \"a\") is not a plain file name");
    assert_msg_has(ip);
    write_index(dir, "{\"weight_map\":{\"a\":\"/etc/passwd\"}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "is not a plain file name");
    write_index(dir, "{\"weight_map\":{\"a\":\"sub/s1.safetensors\"}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "is not a plain file name");
    write_index(dir, "{\"weight_map\":{\"a\":\"..\"}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "is not a plain file name");
    write_index(dir, "{\"weight_map\":{\"a\":\"\"}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "is not a plain file name");

    write_index(dir, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"x\":\"s9.safetensors\"}}");
    expect_model_fail(dir, DSQ_ERR_NOT_FOUND, "s9.safetensors named by the index does not exist");

    write_index(dir, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s1.safetensors\"}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "weight_map names tensor \"a\" twice");
    write_index(dir, "{\"weight_map\":{\"a\":1}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "weight_map entry of \"a\" is not a string");
    write_index(dir, "{\"weight_map\":{}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "weight_map is empty");
    write_index(dir, "{\"metadata\":{}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "\"weight_map\" is missing or not an object");
    write_index(dir, "{\"weight_map\":[]}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "\"weight_map\" is missing or not an object");
    write_index(dir, "{\"weight_map\":{\"a\":\"s1.safetensors\"}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "index is not valid JSON");
    assert_msg_has(ip);
    write_index(dir, "[1]");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "index is not a JSON object");

    /* A bad shard is reported with its own file name. */
    free(make_st(dir, "bad.safetensors", "{\"a\":{" T8 "}}", 4));
    write_index(dir, "{\"weight_map\":{\"a\":\"bad.safetensors\"}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "outside the 4-byte data section");
    assert_msg_has("bad.safetensors");

    /* The same name in two shards. */
    free(make_st(dir, "s3.safetensors", "{\"a\":{" T8 "}}", 8));
    write_index(dir, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"z\":\"s3.safetensors\"}}");
    expect_model_fail(dir, DSQ_ERR_FORMAT, "duplicate tensor name \"a\" across shards");
    assert_msg_has("s1.safetensors");
    assert_msg_has("s3.safetensors");

    free(ip);
    dsq_test_rmtmp(dir);
}

typedef struct log_capture {
    int warnings;
    char last[512];
} log_capture;

static void capture_sink(dsq_log_level level, const char *msg, void *user)
{
    log_capture *c = user;
    if (level == DSQ_LOG_WARN) {
        c->warnings++;
        snprintf(c->last, sizeof c->last, "%s", msg);
    }
}

/* Tensors a shard holds but the weight_map omits are loaded, with a warning. */
static void test_index_unlisted_tensor(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    free(make_st(dir, "s1.safetensors", "{\"a\":{" T8 "}}", 8));
    free(make_st(dir, "s2.safetensors",
                 "{\"b\":{" T8 "},\"c\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}", 12));
    write_index(
        dir, "{\"metadata\":{\"total_size\":20},\"weight_map\":{\"b\":\"s2.safetensors\",\"a\":\"s1.safetensors\"}}");
    log_capture cap = {0};
    dsq_log_set_sink(capture_sink, &cap);
    dsq_st_model *m = NULL;
    dsq_status s = dsq_st_model_open(dir, &m);
    dsq_log_set_sink(NULL, NULL);
    assert_int_equal(s, DSQ_OK);
    assert_int_equal(cap.warnings, 1);
    assert_non_null(strstr(cap.last, "\"c\""));
    assert_int_equal(m->n_tensors, 3);
    /* Shard order is file-name order, whatever order the weight_map lists. */
    dsq_tensor t;
    assert_int_equal(dsq_st_model_view(m, 0, &t), DSQ_OK);
    assert_string_equal(t.name, "a");
    assert_int_equal(dsq_st_model_find(m, "c"), 2);
    assert_int_equal(dsq_st_model_view(m, 3, &t), DSQ_ERR_ARG);
    dsq_st_model_close(m);
    dsq_test_rmtmp(dir);
}

static void test_model_folder_lookup(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    expect_model_fail(dir, DSQ_ERR_NOT_FOUND, "neither model.safetensors.index.json nor model.safetensors");
    assert_msg_has(dir);
    char *missing = join(dir, "nothing.safetensors");
    expect_model_fail(missing, DSQ_ERR_NOT_FOUND, "nothing.safetensors: no such file or folder");
    free(missing);
    free(make_st(dir, "model.safetensors", "{\"a\":{" T8 "}}", 8));
    dsq_st_model *m = NULL;
    assert_int_equal(dsq_st_model_open(dir, &m), DSQ_OK);
    assert_int_equal(m->n_tensors, 1);
    assert_null(dsq_st_model_meta(m, "format"));
    dsq_st_model_close(m);
    dsq_test_rmtmp(dir);
}

/* ---------- writer failures leave nothing behind ---------- */

static dsq_st_writer *writer_two(const char *dir, uint64_t max)
{
    dsq_st_writer *w = NULL;
    const int64_t sh[] = {4};
    assert_int_equal(dsq_st_writer_new(dir, "model", max, &w), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "a", DSQ_TYPE_F32, 1, sh), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "b", DSQ_TYPE_F32, 1, sh), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "c", DSQ_TYPE_F32, 1, sh), DSQ_OK);
    return w;
}

static void test_writer_incomplete(void **state)
{
    (void)state;
    const uint8_t buf[64] = {1, 2, 3};
    char *dir = dsq_test_mkdtemp();
    for (int sharded = 0; sharded < 2; sharded++) {
        dsq_st_writer *w = writer_two(dir, sharded ? 16 : 0);
        assert_int_equal(dsq_st_writer_begin(w), DSQ_OK);
        assert_int_equal(dsq_st_writer_write(w, buf, 20), DSQ_OK);
        assert_int_equal(dsq_st_writer_finish(w), DSQ_ERR_ARG);
        assert_msg_has("tensor \"b\" incomplete (4 of 16 bytes written)");
        assert_int_equal(dsq_test_count_entries(dir), 0);
        assert_int_equal(dsq_st_writer_write(w, buf, 1), DSQ_ERR_ARG); /* dead after the failure */
        assert_int_equal(dsq_st_writer_finish(w), DSQ_ERR_ARG);
        dsq_st_writer_free(w);
        assert_int_equal(dsq_test_count_entries(dir), 0);
    }
    dsq_test_rmtmp(dir);
}

static void test_writer_free_without_finish(void **state)
{
    (void)state;
    const uint8_t buf[64] = {0};
    char *dir = dsq_test_mkdtemp();
    dsq_st_writer *w = writer_two(dir, 16);
    assert_int_equal(dsq_st_writer_begin(w), DSQ_OK);
    assert_int_equal(dsq_st_writer_write(w, buf, 48), DSQ_OK); /* everything, but no finish */
    assert_true(dsq_test_count_entries(dir) > 0);              /* temporaries exist meanwhile */
    dsq_st_writer_free(w);
    assert_int_equal(dsq_test_count_entries(dir), 0);
    /* Freed before begin: nothing was ever created. */
    w = writer_two(dir, 0);
    dsq_st_writer_free(w);
    assert_int_equal(dsq_test_count_entries(dir), 0);
    dsq_test_rmtmp(dir);
}

static void test_writer_overrun(void **state)
{
    (void)state;
    const uint8_t buf[64] = {0};
    char *dir = dsq_test_mkdtemp();
    dsq_st_writer *w = writer_two(dir, 0);
    assert_int_equal(dsq_st_writer_begin(w), DSQ_OK);
    assert_int_equal(dsq_st_writer_write(w, buf, 40), DSQ_OK);
    assert_int_equal(dsq_st_writer_write(w, buf, 9), DSQ_ERR_ARG);
    assert_msg_has("1 bytes written past the last tensor");
    assert_int_equal(dsq_test_count_entries(dir), 0);
    assert_int_equal(dsq_st_writer_finish(w), DSQ_ERR_ARG);
    dsq_st_writer_free(w);
    assert_int_equal(dsq_test_count_entries(dir), 0);
    dsq_test_rmtmp(dir);
}

/* A shard that fails to commit takes the already committed ones with it. */
static void test_writer_commit_failure(void **state)
{
    (void)state;
    const uint8_t buf[64] = {0};
    char *dir = dsq_test_mkdtemp();
    dsq_st_writer *w = writer_two(dir, 16);
    assert_int_equal(dsq_st_writer_begin(w), DSQ_OK);
    assert_int_equal(dsq_st_writer_write(w, buf, 48), DSQ_OK);
    char *blocker = join(dir, "model-00002-of-00003.safetensors");
    assert_int_equal(mkdir(blocker, 0755), 0); /* rename onto a folder fails */
    assert_int_not_equal(dsq_st_writer_finish(w), DSQ_OK);
    assert_msg_has("model-00002-of-00003.safetensors");
    assert_int_equal(dsq_test_count_entries(dir), 1); /* only the blocker */
    dsq_st_writer_free(w);
    assert_int_equal(dsq_test_count_entries(dir), 1);
    rmdir(blocker);
    free(blocker);
    dsq_test_rmtmp(dir);
}

static void test_writer_exists(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    free(dsq_test_write(dir, "model.safetensors.index.json", "{}", 2));
    dsq_st_writer *w = writer_two(dir, 16);
    assert_int_equal(dsq_st_writer_begin(w), DSQ_ERR_EXISTS);
    assert_msg_has("model.safetensors.index.json");
    assert_int_equal(dsq_test_count_entries(dir), 1);
    assert_int_equal(dsq_st_writer_write(w, "x", 1), DSQ_ERR_ARG);
    dsq_st_writer_free(w);
    assert_int_equal(dsq_test_count_entries(dir), 1);
    dsq_test_rmtmp(dir);
}

static void test_writer_misuse(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    const int64_t sh[] = {4}, neg[] = {-1};
    dsq_st_writer *w = NULL;
    char *nodir = join(dir, "absent");
    assert_int_equal(dsq_st_writer_new(nodir, "model", 0, &w), DSQ_ERR_NOT_FOUND);
    free(nodir);
    assert_int_equal(dsq_st_writer_new(dir, "a/b", 0, &w), DSQ_ERR_ARG);
    assert_int_equal(dsq_st_writer_new(dir, "model", 0, &w), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "q", DSQ_TYPE_Q4_K, 1, sh), DSQ_ERR_UNSUPPORTED);
    assert_msg_has("no safetensors dtype");
    assert_int_equal(dsq_st_writer_add(w, "n", DSQ_TYPE_F32, 1, neg), DSQ_ERR_ARG);
    assert_int_equal(dsq_st_writer_add(w, "__metadata__", DSQ_TYPE_F32, 1, sh), DSQ_ERR_ARG);
    assert_int_equal(dsq_st_writer_add(w, "bad\xff", DSQ_TYPE_F32, 1, sh), DSQ_ERR_ARG);
    assert_int_equal(dsq_st_writer_add(w, "d", DSQ_TYPE_F32, DSQ_MAX_DIMS + 1, sh), DSQ_ERR_ARG);
    assert_int_equal(dsq_st_writer_set_meta(w, "k", "v"), DSQ_OK);
    assert_int_equal(dsq_st_writer_set_meta(w, "k", "w"), DSQ_ERR_ARG);
    assert_int_equal(dsq_st_writer_write(w, "x", 1), DSQ_ERR_ARG); /* before begin */
    assert_int_equal(dsq_st_writer_add(w, "x", DSQ_TYPE_F32, 1, sh), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "x", DSQ_TYPE_F16, 1, sh), DSQ_OK);
    assert_int_equal(dsq_st_writer_begin(w), DSQ_ERR_ARG);
    assert_msg_has("tensor \"x\" added twice");
    assert_int_equal(dsq_test_count_entries(dir), 0);
    dsq_st_writer_free(w);

    w = writer_two(dir, 0);
    assert_int_equal(dsq_st_writer_begin(w), DSQ_OK);
    assert_int_equal(dsq_st_writer_add(w, "late", DSQ_TYPE_F32, 1, sh), DSQ_ERR_ARG);
    assert_int_equal(dsq_st_writer_set_meta(w, "late", "v"), DSQ_ERR_ARG);
    assert_int_equal(dsq_st_writer_begin(w), DSQ_ERR_ARG);
    dsq_st_writer_free(w);
    assert_int_equal(dsq_test_count_entries(dir), 0);

    /* No tensors at all is a valid (empty) file. */
    assert_int_equal(dsq_st_writer_new(dir, "empty", 0, &w), DSQ_OK);
    assert_int_equal(dsq_st_writer_begin(w), DSQ_OK);
    assert_int_equal(dsq_st_writer_finish(w), DSQ_OK);
    dsq_st_writer_free(w);
    char *p = join(dir, "empty.safetensors");
    dsq_st_file *f = NULL;
    assert_int_equal(dsq_st_open(p, &f), DSQ_OK);
    assert_int_equal(f->n_tensors, 0);
    assert_int_equal(f->header_len, 8);
    dsq_st_close(f);
    free(p);
    dsq_test_rmtmp(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_and_bad_lengths),
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_legal_corners),
        cmocka_unit_test(test_every_dtype_name),
        cmocka_unit_test(test_round_trip_single),
        cmocka_unit_test(test_round_trip_sharded),
        cmocka_unit_test(test_round_trip_direct),
        cmocka_unit_test(test_oversize_tensor),
        cmocka_unit_test(test_index_problems),
        cmocka_unit_test(test_index_unlisted_tensor),
        cmocka_unit_test(test_model_folder_lookup),
        cmocka_unit_test(test_writer_incomplete),
        cmocka_unit_test(test_writer_free_without_finish),
        cmocka_unit_test(test_writer_overrun),
        cmocka_unit_test(test_writer_commit_failure),
        cmocka_unit_test(test_writer_exists),
        cmocka_unit_test(test_writer_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
