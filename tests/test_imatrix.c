/* formats/imatrix: llama.cpp importance-matrix files.
 *
 * The byte layout is checked against a file assembled by hand from the format
 * (int32 count; per entry int32 name length, name, int32 ncall, int32 nval,
 * float values; int32 last_chunk, int32 dataset length, dataset), as
 * llama-quantize's load_imatrix reads it. Every truncation point of a file is
 * fed to the parser, plus hand-made hostile headers. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/fileio.h"
#include "formats/gguf.h"
#include "formats/imatrix.h"
#include "tests/helpers/testutil.h"

/* ---- hand assembly ---- */

typedef struct buf {
    uint8_t b[1 << 16];
    size_t n;
} buf;

static void put_i32(buf *b, int32_t v)
{
    uint32_t u = (uint32_t)v;
    for (int i = 0; i < 4; i++) b->b[b->n++] = (uint8_t)(u >> (8 * i));
}

static void put_f32(buf *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put_i32(b, (int32_t)u);
}

static void put_str(buf *b, const char *s)
{
    size_t n = strlen(s);
    put_i32(b, (int32_t)n);
    memcpy(b->b + b->n, s, n);
    b->n += n;
}

static void put_entry(buf *b, const char *name, int32_t ncall, int32_t nval, const float *v)
{
    put_str(b, name);
    put_i32(b, ncall);
    put_i32(b, nval);
    for (int32_t i = 0; i < nval; i++) put_f32(b, v[i]);
}

/* The reference file: two entries (stored in name order) and a trailer.
 * Stored values are mean x^2 times ncall. */
static const float MEAN_Q[3] = {0.5f, 0.25f, 3.0f};
static const float MEAN_D[2] = {1.5f, 0.0f};

static size_t reference_file(buf *b, bool trailer)
{
    b->n = 0;
    put_i32(b, 2);
    const float stored_q[3] = {2.0f, 1.0f, 12.0f}; /* x ncall 4 */
    put_entry(b, "blk.0.attn_q.weight", 4, 3, stored_q);
    put_entry(b, "blk.1.ffn_down.weight", 1, 2, MEAN_D);
    size_t entries_end = b->n;
    if (trailer) {
        put_i32(b, 10);
        put_str(b, "wiki.train.raw");
    }
    return entries_end;
}

static dsq_imatrix *reference_imatrix(bool trailer)
{
    dsq_imatrix *im;
    assert_int_equal(dsq_imatrix_new(&im), DSQ_OK);
    /* Added out of order: the writer sorts by name like llama-imatrix. */
    assert_int_equal(dsq_imatrix_add(im, "blk.1.ffn_down.weight", 1, MEAN_D, 2), DSQ_OK);
    assert_int_equal(dsq_imatrix_add(im, "blk.0.attn_q.weight", 4, MEAN_Q, 3), DSQ_OK);
    if (trailer) assert_int_equal(dsq_imatrix_set_trailer(im, 10, "wiki.train.raw"), DSQ_OK);
    return im;
}

static void test_byte_layout(void **state)
{
    (void)state;
    for (int trailer = 0; trailer < 2; trailer++) {
        buf want;
        reference_file(&want, trailer);
        dsq_imatrix *im = reference_imatrix(trailer);
        uint8_t *got;
        size_t len;
        assert_int_equal(dsq_imatrix_serialize(im, &got, &len), DSQ_OK);
        assert_int_equal(len, want.n);
        assert_memory_equal(got, want.b, len);
        free(got);
        dsq_imatrix_free(im);
    }
}

static void test_parse_reference(void **state)
{
    (void)state;
    buf b;
    reference_file(&b, true);
    dsq_imatrix *im;
    assert_int_equal(dsq_imatrix_parse(b.b, b.n, "ref", &im), DSQ_OK);
    assert_int_equal(im->n_entries, 2);
    assert_int_equal(im->last_chunk, 10);
    assert_string_equal(im->dataset, "wiki.train.raw");
    const dsq_imatrix_entry *q = dsq_imatrix_find(im, "blk.0.attn_q.weight");
    assert_non_null(q);
    assert_int_equal(q->ncall, 4);
    assert_int_equal(q->nval, 3);
    /* llama-quantize divides by ncall: back to the means. */
    for (int i = 0; i < 3; i++) assert_true(q->values[i] == MEAN_Q[i]);
    assert_true(q->stored[2] == 12.0f);
    const dsq_imatrix_entry *d = dsq_imatrix_find(im, "blk.1.ffn_down.weight");
    assert_non_null(d);
    assert_true(d->values[0] == 1.5f && d->values[1] == 0.0f);
    assert_null(dsq_imatrix_find(im, "blk.1.ffn_up.weight"));
    assert_null(dsq_imatrix_find(im, "blk.0.attn_q"));
    dsq_imatrix_free(im);
}

/* ncall 0: values are used as stored (llama-quantize divides only when ncall > 0). */
static void test_ncall_zero_and_odd(void **state)
{
    (void)state;
    buf b = {.n = 0};
    const float v[2] = {3.0f, 7.0f};
    put_i32(&b, 2);
    put_entry(&b, "a.weight", 0, 2, v);
    put_entry(&b, "b.weight", 3, 2, v);
    dsq_imatrix *im;
    assert_int_equal(dsq_imatrix_parse(b.b, b.n, "t", &im), DSQ_OK);
    assert_true(dsq_imatrix_find(im, "a.weight")->values[1] == 7.0f);
    assert_true(dsq_imatrix_find(im, "b.weight")->values[0] == 1.0f);
    assert_true(dsq_imatrix_find(im, "b.weight")->values[1] == 7.0f / 3.0f);
    assert_int_equal(im->last_chunk, -1);
    assert_null(im->dataset);
    dsq_imatrix_free(im);
}

/* Every proper prefix is refused, except the one that ends right after the
 * entries: the trailer is optional (older llama-imatrix files have none). */
static void test_every_truncation(void **state)
{
    (void)state;
    for (int trailer = 0; trailer < 2; trailer++) {
        buf b;
        size_t entries_end = reference_file(&b, trailer);
        for (size_t n = 0; n < b.n; n++) {
            dsq_imatrix *im = NULL;
            dsq_status st = dsq_imatrix_parse(b.b, n, "trunc", &im);
            if (n == entries_end) {
                assert_int_equal(st, DSQ_OK);
                assert_int_equal(im->n_entries, 2);
                assert_int_equal(im->last_chunk, -1);
                dsq_imatrix_free(im);
                continue;
            }
            if (st != DSQ_ERR_FORMAT) fail_msg("prefix of %zu bytes: status %d", n, st);
            assert_null(im);
            assert_non_null(strstr(dsq_errmsg(), "trunc"));
        }
    }
}

static void expect_bad(const buf *b, dsq_status want, const char *needle)
{
    dsq_imatrix *im = NULL;
    dsq_status st = dsq_imatrix_parse(b->b, b->n, "bad.dat", &im);
    if (st != want) fail_msg("status %d (%s), want %d [%s]", st, dsq_errmsg(), want, needle);
    assert_null(im);
    if (!strstr(dsq_errmsg(), needle)) fail_msg("message \"%s\" lacks \"%s\"", dsq_errmsg(), needle);
}

static void test_hostile(void **state)
{
    (void)state;
    const float one[1] = {1.0f};
    buf b;
    /* counts */
    b.n = 0, put_i32(&b, 0);
    expect_bad(&b, DSQ_ERR_FORMAT, "0 entries");
    b.n = 0, put_i32(&b, -5);
    expect_bad(&b, DSQ_ERR_FORMAT, "-5 entries");
    b.n = 0, put_i32(&b, INT32_MAX), put_entry(&b, "x", 1, 1, one);
    expect_bad(&b, DSQ_ERR_FORMAT, "cannot fit");
    /* name length */
    const int32_t bad_len[] = {0, -1, INT32_MAX, DSQ_IMATRIX_MAX_NAME + 1};
    for (size_t i = 0; i < 4; i++) {
        b.n = 0, put_i32(&b, 1), put_i32(&b, bad_len[i]);
        for (int k = 0; k < 8; k++) put_i32(&b, 0);
        expect_bad(&b, DSQ_ERR_FORMAT, "name length");
    }
    b.n = 0, put_i32(&b, 1), put_i32(&b, 40), put_i32(&b, 0x41414141), put_i32(&b, 1), put_i32(&b, 1), put_i32(&b, 0);
    expect_bad(&b, DSQ_ERR_FORMAT, "only");
    /* a name with a NUL inside (llama.cpp would silently cut it there) */
    b.n = 0, put_i32(&b, 1), put_i32(&b, 3);
    memcpy(b.b + b.n, "a\0b", 3);
    b.n += 3, put_i32(&b, 1), put_i32(&b, 1), put_f32(&b, 1.0f);
    expect_bad(&b, DSQ_ERR_FORMAT, "NUL");
    /* ncall, nval */
    b.n = 0, put_i32(&b, 1), put_entry(&b, "w", -1, 1, one);
    expect_bad(&b, DSQ_ERR_FORMAT, "ncall -1");
    b.n = 0, put_i32(&b, 1), put_str(&b, "w"), put_i32(&b, 1), put_i32(&b, 0), put_f32(&b, 1.0f);
    expect_bad(&b, DSQ_ERR_FORMAT, "nval 0");
    b.n = 0, put_i32(&b, 1), put_str(&b, "w"), put_i32(&b, 1), put_i32(&b, -7), put_f32(&b, 1.0f);
    expect_bad(&b, DSQ_ERR_FORMAT, "nval -7");
    b.n = 0, put_i32(&b, 1), put_str(&b, "w"), put_i32(&b, 1), put_i32(&b, INT32_MAX), put_f32(&b, 1.0f);
    expect_bad(&b, DSQ_ERR_FORMAT, "values, only");
    b.n = 0, put_i32(&b, 1), put_str(&b, "w"), put_i32(&b, 1), put_i32(&b, 2), put_f32(&b, 1.0f);
    expect_bad(&b, DSQ_ERR_FORMAT, "values, only");
    /* values */
    const float nan1[2] = {1.0f, NAN}, inf1[2] = {INFINITY, 1.0f}, neg1[2] = {1.0f, -0.5f};
    b.n = 0, put_i32(&b, 1), put_entry(&b, "blk.3.attn_k.weight", 1, 2, nan1);
    expect_bad(&b, DSQ_ERR_NUMERIC, "blk.3.attn_k.weight");
    b.n = 0, put_i32(&b, 1), put_entry(&b, "w", 1, 2, inf1);
    expect_bad(&b, DSQ_ERR_NUMERIC, "not finite");
    b.n = 0, put_i32(&b, 1), put_entry(&b, "w", 1, 2, neg1);
    expect_bad(&b, DSQ_ERR_NUMERIC, "negative");
    /* duplicates */
    b.n = 0, put_i32(&b, 2), put_entry(&b, "w", 1, 1, one), put_entry(&b, "w", 1, 1, one);
    expect_bad(&b, DSQ_ERR_FORMAT, "twice");
    /* trailer */
    buf r;
    reference_file(&r, true);
    r.b[r.n++] = 'x';
    expect_bad(&r, DSQ_ERR_FORMAT, "remain");
    size_t end = reference_file(&r, false);
    r.n = end, put_i32(&r, 1), put_i32(&r, -3);
    expect_bad(&r, DSQ_ERR_FORMAT, "dataset name length -3");
    r.n = end, put_i32(&r, 1), put_i32(&r, 1000), put_i32(&r, 0);
    expect_bad(&r, DSQ_ERR_FORMAT, "remain");
    r.n = end, put_i32(&r, -1), put_i32(&r, 0);
    expect_bad(&r, DSQ_ERR_FORMAT, "chunk count");
    /* nothing at all */
    expect_bad(&(buf){.n = 0}, DSQ_ERR_FORMAT, "truncated");
}

static void test_round_trip_file(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char path[4096];
    snprintf(path, sizeof path, "%s/imatrix.dat", dir);
    dsq_imatrix *im;
    assert_int_equal(dsq_imatrix_new(&im), DSQ_OK);
    uint64_t rng = 7;
    float vals[1536];
    const char *names[] = {"blk.2.ffn_down.weight", "blk.0.attn_v.weight", "output.weight", "blk.10.ffn_up.weight"};
    const uint32_t nv[] = {1536, 576, 576, 576};
    const int32_t nc[] = {100, 7, 1, 3};
    for (int e = 0; e < 4; e++) {
        for (uint32_t i = 0; i < nv[e]; i++) vals[i] = fabsf(dsq_test_randn(&rng)) * (float)(e + 1);
        assert_int_equal(dsq_imatrix_add(im, names[e], nc[e], vals, nv[e]), DSQ_OK);
    }
    assert_int_equal(dsq_imatrix_set_trailer(im, 100, "calib.txt"), DSQ_OK);
    assert_int_equal(dsq_imatrix_save(im, path, false), DSQ_OK);
    assert_int_equal(dsq_imatrix_save(im, path, false), DSQ_ERR_EXISTS);
    dsq_imatrix *back;
    assert_int_equal(dsq_imatrix_load(path, &back), DSQ_OK);
    assert_int_equal(back->n_entries, 4);
    assert_int_equal(back->last_chunk, 100);
    assert_string_equal(back->dataset, "calib.txt");
    for (size_t i = 0; i < 4; i++) {
        const dsq_imatrix_entry *a = &im->entries[i], *b = &back->entries[i];
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->ncall, b->ncall);
        assert_int_equal(a->nval, b->nval);
        assert_memory_equal(a->stored, b->stored, a->nval * 4);
        /* In-memory values equal what a reload gives: same quantization either way. */
        assert_memory_equal(a->values, b->values, a->nval * 4);
    }
    /* Sorted by byte order: "blk.0" < "blk.10" < "blk.2" < "output". */
    assert_string_equal(back->entries[1].name, "blk.10.ffn_up.weight");
    /* Load -> save gives the same bytes. */
    uint8_t *s1, *s2;
    size_t l1, l2;
    assert_int_equal(dsq_imatrix_serialize(im, &s1, &l1), DSQ_OK);
    assert_int_equal(dsq_imatrix_serialize(back, &s2, &l2), DSQ_OK);
    assert_int_equal(l1, l2);
    assert_memory_equal(s1, s2, l1);
    free(s1);
    free(s2);
    dsq_imatrix_free(back);
    dsq_imatrix_free(im);
    dsq_test_rmtmp(dir);
}

static void test_add_rules(void **state)
{
    (void)state;
    dsq_imatrix *im;
    assert_int_equal(dsq_imatrix_new(&im), DSQ_OK);
    const float ok[2] = {1.0f, 2.0f}, bad[2] = {1.0f, NAN}, neg[2] = {-1.0f, 2.0f};
    assert_int_equal(dsq_imatrix_add(im, "w", 1, bad, 2), DSQ_ERR_NUMERIC);
    assert_int_equal(dsq_imatrix_add(im, "w", 1, neg, 2), DSQ_ERR_NUMERIC);
    assert_int_equal(dsq_imatrix_add(im, "w", 0, ok, 2), DSQ_ERR_ARG);
    assert_int_equal(dsq_imatrix_add(im, "", 1, ok, 2), DSQ_ERR_ARG);
    assert_int_equal(dsq_imatrix_add(im, "w", 1, ok, 0), DSQ_ERR_ARG);
    const float big[1] = {3e38f};
    assert_int_equal(dsq_imatrix_add(im, "w", 10, big, 1), DSQ_ERR_NUMERIC); /* stored overflows to Inf */
    assert_int_equal(im->n_entries, 0);
    assert_int_equal(dsq_imatrix_serialize(im, &(uint8_t *){NULL}, &(size_t){0}), DSQ_ERR_ARG);
    assert_int_equal(dsq_imatrix_add(im, "w", 2, ok, 2), DSQ_OK);
    const float ok2[3] = {4.0f, 5.0f, 6.0f};
    assert_int_equal(dsq_imatrix_add(im, "w", 1, ok2, 3), DSQ_OK); /* replaces */
    assert_int_equal(im->n_entries, 1);
    assert_int_equal(im->entries[0].nval, 3);
    assert_int_equal(dsq_imatrix_set_trailer(im, -1, "x"), DSQ_ERR_ARG);
    dsq_imatrix_free(im);
}

static void test_check_size(void **state)
{
    (void)state;
    dsq_imatrix *im;
    assert_int_equal(dsq_imatrix_new(&im), DSQ_OK);
    float v[2048];
    for (int i = 0; i < 2048; i++) v[i] = 1.0f + (float)i;
    assert_int_equal(dsq_imatrix_add(im, "blk.0.attn_q.weight", 1, v, 576), DSQ_OK);
    assert_int_equal(dsq_imatrix_add(im, "blk.0.ffn_down_exps.weight", 1, v, 256 * 8), DSQ_OK);
    assert_int_equal(dsq_imatrix_add(im, "token_embd.weight", 1, v, 100), DSQ_OK);
    const dsq_imatrix_entry *q = dsq_imatrix_find(im, "blk.0.attn_q.weight");
    assert_int_equal(dsq_imatrix_check_size(q, "blk.0.attn_q.weight", 576, 1), DSQ_OK);
    assert_int_equal(dsq_imatrix_check_size(q, "blk.0.attn_q.weight", 1536, 1), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "blk.0.attn_q.weight"));
    assert_non_null(strstr(dsq_errmsg(), "576"));
    assert_non_null(strstr(dsq_errmsg(), "1536"));
    const dsq_imatrix_entry *x = dsq_imatrix_find(im, "blk.0.ffn_down_exps.weight");
    assert_int_equal(dsq_imatrix_check_size(x, "blk.0.ffn_down_exps.weight", 256, 8), DSQ_OK);
    assert_int_equal(dsq_imatrix_check_size(x, "blk.0.ffn_down_exps.weight", 256, 4), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "4 experts"));
    assert_int_equal(dsq_imatrix_check_size(x, "t", 0, 1), DSQ_ERR_ARG);

    /* llama-quantize's lookup rule. */
    const float *w = (const float *)1;
    assert_int_equal(dsq_imatrix_for_tensor(im, "blk.0.attn_q.weight", 576, 1, &w), DSQ_OK);
    assert_ptr_equal(w, q->values);
    assert_int_equal(dsq_imatrix_for_tensor(im, "blk.0.ffn_down_exps.weight", 256, 8, &w), DSQ_OK);
    assert_true(w[256] == 257.0f); /* expert 1 starts at ne0 */
    assert_int_equal(dsq_imatrix_for_tensor(im, "blk.9.attn_q.weight", 576, 1, &w), DSQ_OK);
    assert_null(w);
    assert_int_equal(dsq_imatrix_for_tensor(im, "blk.0.attn_q.weight", 64, 1, &w), DSQ_ERR_FORMAT);
    assert_int_equal(dsq_imatrix_for_tensor(im, "token_embd.weight", 576, 1, &w), DSQ_OK); /* tolerated */
    assert_null(w);
    assert_int_equal(dsq_imatrix_for_tensor(NULL, "x", 576, 1, &w), DSQ_OK);
    assert_null(w);
    dsq_imatrix_free(im);
}

static void test_filter(void **state)
{
    (void)state;
    const float v[1] = {1.0f};
    const char *names[] = {"blk.0.attn_q.weight", "blk.0.ffn_down.weight", "blk.1.ffn_down.weight", "output.weight"};
    for (int mode = 0; mode < 3; mode++) {
        dsq_imatrix *im;
        assert_int_equal(dsq_imatrix_new(&im), DSQ_OK);
        for (int i = 0; i < 4; i++) assert_int_equal(dsq_imatrix_add(im, names[i], 1, v, 1), DSQ_OK);
        const char *inc[] = {"ffn_down", "output"}, *exc[] = {"blk.0."};
        if (mode == 0) {
            assert_int_equal(dsq_imatrix_filter(im, inc, 2, NULL, 0), DSQ_OK);
            assert_int_equal(im->n_entries, 3);
            assert_null(dsq_imatrix_find(im, "blk.0.attn_q.weight"));
            assert_non_null(dsq_imatrix_find(im, "output.weight"));
        } else if (mode == 1) {
            assert_int_equal(dsq_imatrix_filter(im, NULL, 0, exc, 1), DSQ_OK);
            assert_int_equal(im->n_entries, 2);
            assert_non_null(dsq_imatrix_find(im, "blk.1.ffn_down.weight"));
            assert_null(dsq_imatrix_find(im, "blk.0.ffn_down.weight"));
        } else {
            assert_int_equal(dsq_imatrix_filter(im, inc, 2, exc, 1), DSQ_ERR_ARG);
            assert_int_equal(im->n_entries, 4);
        }
        dsq_imatrix_free(im);
    }
}

/* ---- the GGUF imatrix ---- */

static char *write_gguf_imatrix(const char *dir, bool drop_counts)
{
    dsq_gguf_writer *w;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str(w, "general.type", "imatrix"), DSQ_OK);
    const char *ds[] = {"calib.txt"};
    assert_int_equal(dsq_gguf_set_str_arr(w, "imatrix.datasets", ds, NULL, 1), DSQ_OK);
    assert_int_equal(dsq_gguf_set_u32(w, "imatrix.chunk_count", 5), DSQ_OK);
    assert_int_equal(dsq_gguf_set_u32(w, "imatrix.chunk_size", 512), DSQ_OK);
    const int64_t s_exp[2] = {2, 4}, c_exp[2] = {2, 1}, s_d[2] = {1, 3}, c_d[2] = {1, 1};
    assert_int_equal(dsq_gguf_add_tensor(w, "blk.0.ffn_down_exps.weight.counts", DSQ_TYPE_F32, 2, c_exp), DSQ_OK);
    assert_int_equal(dsq_gguf_add_tensor(w, "blk.0.ffn_down_exps.weight.in_sum2", DSQ_TYPE_F32, 2, s_exp), DSQ_OK);
    assert_int_equal(dsq_gguf_add_tensor(w, "blk.0.attn_q.weight.in_sum2", DSQ_TYPE_F32, 2, s_d), DSQ_OK);
    if (!drop_counts) assert_int_equal(dsq_gguf_add_tensor(w, "blk.0.attn_q.weight.counts", DSQ_TYPE_F32, 2, c_d), DSQ_OK);
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/imatrix%d.gguf", dir, drop_counts);
    assert_int_equal(dsq_gguf_writer_begin(w, path, true), DSQ_OK);
    const float counts_exp[2] = {10.0f, 0.0f}, sums_exp[8] = {10, 20, 30, 40, 5, 6, 7, 8};
    const float sums_d[3] = {8, 4, 2}, counts_d[1] = {4};
    assert_int_equal(dsq_gguf_writer_write(w, counts_exp, sizeof counts_exp), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_write(w, sums_exp, sizeof sums_exp), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_write(w, sums_d, sizeof sums_d), DSQ_OK);
    if (!drop_counts) assert_int_equal(dsq_gguf_writer_write(w, counts_d, sizeof counts_d), DSQ_OK);
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    return path;
}

static void test_gguf_imatrix(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char *path = write_gguf_imatrix(dir, false);
    dsq_imatrix *im;
    assert_int_equal(dsq_imatrix_load(path, &im), DSQ_OK);
    assert_int_equal(im->n_entries, 2);
    assert_int_equal(im->last_chunk, 5);
    assert_string_equal(im->dataset, "calib.txt");
    const dsq_imatrix_entry *x = dsq_imatrix_find(im, "blk.0.ffn_down_exps.weight");
    assert_non_null(x);
    assert_int_equal(x->nval, 8);
    /* expert 0: sums / 10; expert 1 never saw a token: 1.0 (llama-quantize's rule). */
    const float want[8] = {1, 2, 3, 4, 1, 1, 1, 1};
    for (int i = 0; i < 8; i++) assert_true(x->values[i] == want[i]);
    assert_int_equal(dsq_imatrix_check_size(x, "blk.0.ffn_down_exps.weight", 4, 2), DSQ_OK);
    const dsq_imatrix_entry *q = dsq_imatrix_find(im, "blk.0.attn_q.weight");
    assert_true(q->values[0] == 2.0f && q->values[2] == 0.5f);
    /* Saved as legacy .dat, llama-quantize (value / ncall) sees the same numbers. */
    uint8_t *bytes;
    size_t len;
    assert_int_equal(dsq_imatrix_serialize(im, &bytes, &len), DSQ_OK);
    dsq_imatrix *dat;
    assert_int_equal(dsq_imatrix_parse(bytes, len, "dat", &dat), DSQ_OK);
    for (int i = 0; i < 8; i++) assert_true(dsq_imatrix_find(dat, "blk.0.ffn_down_exps.weight")->values[i] == want[i]);
    free(bytes);
    dsq_imatrix_free(dat);
    dsq_imatrix_free(im);
    free(path);
    path = write_gguf_imatrix(dir, true);
    assert_int_equal(dsq_imatrix_load(path, &im), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "mismatched sums and counts for blk.0.attn_q.weight"));
    free(path);
    dsq_test_rmtmp(dir);
}

static void test_load_errors(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/none.dat", dir);
    dsq_imatrix *im = (dsq_imatrix *)1;
    assert_int_equal(dsq_imatrix_load(missing, &im), DSQ_ERR_NOT_FOUND);
    assert_null(im);
    buf b = {.n = 0};
    put_i32(&b, 1), put_i32(&b, 5);
    char *p = dsq_test_write(dir, "short.dat", b.b, b.n);
    assert_int_equal(dsq_imatrix_load(p, &im), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), p));
    free(p);
    p = dsq_test_write(dir, "empty.dat", "", 0);
    assert_int_equal(dsq_imatrix_load(p, &im), DSQ_ERR_FORMAT);
    free(p);
    dsq_test_rmtmp(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_layout),      cmocka_unit_test(test_parse_reference),
        cmocka_unit_test(test_ncall_zero_and_odd), cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_hostile),          cmocka_unit_test(test_round_trip_file),
        cmocka_unit_test(test_add_rules),        cmocka_unit_test(test_check_size),
        cmocka_unit_test(test_filter),           cmocka_unit_test(test_gguf_imatrix),
        cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
