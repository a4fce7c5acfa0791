/* GGUF quantization (formats/gguf_quantize.c, `dsquant gguf`).
 *
 * Real model (SmolLM2-135M Q4_1, skipped when not cached): it is taken to a
 * HF folder in F32 and back to an F32 GGUF with `convert`, then quantized.
 * The per-tensor types and the order must equal what the real llama-quantize
 * chose (tests/data/mixes/smollm2_*.txt), and the bytes of whole tensors must
 * equal dsq_quantize of the same F32 rows. The HF folder must give the very
 * same file as the F32 GGUF, and 1 thread the same as 2. An imatrix must
 * change exactly the tensors it has entries for and be recorded in the KVs.
 *
 * Synthetic models (always run): a one-layer llama-like GGUF built here for
 * the errors (unknown type, NaN/Inf, imatrix of the wrong size, existing
 * output, output == input), each leaving nothing behind; an unknown
 * architecture with --pure; same-type copies and requantization; 3-D expert
 * tensors with per-expert importance slices; the CLI with --json. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "core/dtype.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "formats/convert.h"
#include "formats/gguf.h"
#include "formats/gguf_quantize.h"
#include "formats/imatrix.h"
#include "quantizers/mixes.h"
#include "quantizers/qtypes.h"
#include "tests/helpers/testutil.h"

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* ---------------------------------------------------------------- log capture */

static char g_log[1 << 16];

static void capture_sink(dsq_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level > DSQ_LOG_WARN) return;
    size_t used = strlen(g_log);
    snprintf(g_log + used, sizeof g_log - used, "%s\n", msg);
}

static void capture_start(void)
{
    g_log[0] = '\0';
    dsq_log_set_sink(capture_sink, NULL);
}

static void capture_stop(void) { dsq_log_set_sink(NULL, NULL); }

/* ---------------------------------------------------------------- checks on outputs */

static dsq_gguf *open_gguf(const char *path)
{
    dsq_gguf *g = NULL;
    if (dsq_gguf_open(path, &g) != DSQ_OK) fail_msg("%s: %s", path, dsq_errmsg());
    return g;
}

static const dsq_gguf_tensor_info *tensor_named(const dsq_gguf *g, const char *name, dsq_tensor *view)
{
    int64_t i = dsq_gguf_find_tensor(g, name);
    if (i < 0) fail_msg("tensor %s missing", name);
    assert_int_equal(dsq_gguf_tensor(g, (uint64_t)i, view), DSQ_OK);
    return &g->tensors[i];
}

static uint32_t kv_u32(const dsq_gguf *g, const char *key)
{
    uint32_t v = 0;
    if (dsq_gguf_get_u32(g, key, &v) != DSQ_OK) fail_msg("key %s: %s", key, dsq_errmsg());
    return v;
}

/* Tensor `name` of `out` must equal dsq_quantize of the same tensor of the
 * F32 file `f32` (with importance weights qw, one row's worth, or NULL). */
static void assert_tensor_quantized_from(const dsq_gguf *out, const dsq_gguf *f32, const char *name, const float *qw)
{
    dsq_tensor o, x;
    const dsq_gguf_tensor_info *oi = tensor_named(out, name, &o);
    tensor_named(f32, name, &x);
    assert_int_equal(x.type, DSQ_TYPE_F32);
    int64_t ne0 = oi->ne[0], nrows = (int64_t)(dsq_tensor_nelems(&x) / (uint64_t)ne0);
    uint8_t *want = malloc(o.nbytes);
    assert_non_null(want);
    assert_int_equal(dsq_quantize(o.type, x.data, want, nrows, ne0, qw), DSQ_OK);
    if (memcmp(want, o.data, o.nbytes)) fail_msg("tensor %s (%s): bytes differ from dsq_quantize", name, dsq_type_name(o.type));
    free(want);
}

/* The output's tensor list (order, names, shapes, types) must be the fixture's:
 * what the real llama-quantize wrote. Returns the fallback count its header
 * reports (0 when it prints none). */
static int assert_matches_fixture(const dsq_gguf *g, const char *fixture)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/mixes/%s", DSQ_SOURCE_DIR, fixture);
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: cannot open", path);
    char line[512];
    uint64_t k = 0;
    int fallback = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            const char *w = strstr(line, "WARNING: ");
            if (w) fallback = atoi(w + 9);
            continue;
        }
        char name[256], dims[64], type[32];
        if (sscanf(line, "%255s %63s %31s", name, dims, type) != 3) continue;
        if (k >= g->n_tensors) fail_msg("%s: more tensors than the output's %llu", fixture, (unsigned long long)g->n_tensors);
        const dsq_gguf_tensor_info *ti = &g->tensors[k];
        char got[64] = "";
        size_t used = 0;
        for (uint32_t d = 0; d < ti->n_dims; d++)
            used += (size_t)snprintf(got + used, sizeof got - used, "%s%lld", d ? "x" : "", (long long)ti->ne[d]);
        if (strcmp(ti->name, name) || strcmp(got, dims) || strcasecmp(dsq_type_name(ti->type), type))
            fail_msg("%s line %llu: llama-quantize wrote %s %s %s, we wrote %s %s %s", fixture,
                     (unsigned long long)k + 1, name, dims, type, ti->name, got, dsq_type_name(ti->type));
        k++;
    }
    fclose(f);
    assert_int_equal(k, g->n_tensors);
    return fallback;
}

/* Every KV of `in` must be in `out` with the same type, except the ones
 * quantization sets. */
static void assert_kvs_carried(const dsq_gguf *in, const dsq_gguf *out)
{
    for (uint64_t i = 0; i < in->n_kv; i++) {
        const char *key = in->kv[i].key;
        if (!strcmp(key, "general.file_type") || !strcmp(key, "general.quantization_version")) continue;
        const dsq_gguf_value *v = dsq_gguf_get(out, key);
        if (!v) fail_msg("key %s not carried over", key);
        assert_int_equal(v->type, in->kv[i].value.type);
        if (v->type == DSQ_GGUF_STRING) assert_string_equal(v->v.str.ptr, in->kv[i].value.v.str.ptr);
        if (v->type == DSQ_GGUF_ARRAY) assert_int_equal(v->v.arr.n, in->kv[i].value.v.arr.n);
    }
}

static bool files_equal(const char *a, const char *b)
{
    dsq_mmap ma = {0}, mb = {0};
    if (dsq_mmap_open(a, &ma) != DSQ_OK) fail_msg("%s: %s", a, dsq_errmsg());
    if (dsq_mmap_open(b, &mb) != DSQ_OK) fail_msg("%s: %s", b, dsq_errmsg());
    bool eq = ma.size == mb.size && !memcmp(ma.data, mb.data, ma.size);
    dsq_mmap_close(&ma);
    dsq_mmap_close(&mb);
    return eq;
}

static dsq_gguf_quantize_report *quantize_ok(const char *in, const char *out, const dsq_gguf_quantize_options *o)
{
    dsq_gguf_quantize_report *r = NULL;
    if (dsq_gguf_quantize(in, out, o, &r) != DSQ_OK) fail_msg("%s -> %s: %s", in, out, dsq_errmsg());
    assert_non_null(r);
    return r;
}

/* ================================================================ real model */

typedef struct real {
    char *dir, *hf, *f32;
    char out[4][4096]; /* Q4_K_M, Q6_K, Q8_0, Q2_K outputs of test_real_mixes */
} real;

static const char *const g_real_types[4] = {"Q4_K_M", "Q6_K", "Q8_0", "Q2_K"};

static int real_setup(void **state)
{
    *state = NULL;
    char *model = dsq_test_default_model();
    if (!model) return 0;
    real *r = calloc(1, sizeof *r);
    r->dir = dsq_test_mkdtemp();
    r->hf = join(r->dir, "hf");
    r->f32 = join(r->dir, "hf-f32.gguf");
    /* Quiet: SmolLM2's 576-wide rows make llama.cpp's fallback warn 180 times a run. */
    dsq_log_set_level(DSQ_LOG_ERROR);
    /* F32 GGUF through the HF folder: dequantized, names and permutation round-tripped. */
    dsq_status s = dsq_convert_gguf_to_hf(model, r->hf, DSQ_CONVERT_F32, false, 0);
    if (s == DSQ_OK) s = dsq_convert_hf_to_gguf(r->hf, r->f32, DSQ_CONVERT_F32, false);
    free(model);
    if (s != DSQ_OK) {
        fprintf(stderr, "setup: %s\n", dsq_errmsg());
        return -1;
    }
    *state = r;
    return 0;
}

static int real_teardown(void **state)
{
    real *r = *state;
    dsq_log_set_level(DSQ_LOG_INFO);
    if (!r) return 0;
    dsq_test_rmtmp(r->dir);
    free(r->hf);
    free(r->f32);
    free(r);
    return 0;
}

static dsq_gguf_quantize_options options(const char *type, int threads)
{
    dsq_ftype ft;
    assert_int_equal(dsq_ftype_from_name(type, &ft), DSQ_OK);
    dsq_gguf_quantize_options o = dsq_gguf_quantize_defaults(ft);
    o.n_threads = threads;
    return o;
}

/* Four ftypes against llama-quantize's recorded choices, with the bytes of
 * tensors of each chosen type checked whole. */
static void test_real_mixes(void **state)
{
    real *r = *state;
    if (!r) DSQ_TEST_SKIP();
    static const char *const spot[] = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_v.weight",
                                       "blk.0.ffn_down.weight", "blk.3.ffn_down.weight", "blk.29.ffn_up.weight"};
    dsq_gguf *in = open_gguf(r->f32);
    for (int k = 0; k < 4; k++) {
        char name[64], fixture[64];
        snprintf(name, sizeof name, "%s.gguf", g_real_types[k]);
        snprintf(fixture, sizeof fixture, "smollm2_%s.txt", g_real_types[k]);
        snprintf(r->out[k], sizeof r->out[k], "%s/%s", r->dir, name);
        dsq_gguf_quantize_options o = options(g_real_types[k], 2);
        dsq_gguf_quantize_report *rep = quantize_ok(r->f32, r->out[k], &o);
        dsq_gguf *g = open_gguf(r->out[k]);
        int fallback = assert_matches_fixture(g, fixture);
        assert_int_equal(rep->n_fallback, fallback);
        assert_int_equal(rep->n_tensors, g->n_tensors);
        assert_int_equal(kv_u32(g, "general.file_type"), (uint32_t)o.ftype);
        assert_int_equal(kv_u32(g, "general.quantization_version"), 2);
        assert_null(dsq_gguf_get(g, "quantize.imatrix.file"));
        assert_kvs_carried(in, g);
        uint64_t sum = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            assert_string_equal(rep->tensors[i].name, g->tensors[i].name);
            assert_int_equal(rep->tensors[i].type_out, g->tensors[i].type);
            assert_int_equal(rep->tensors[i].bytes_out, g->tensors[i].nbytes);
            sum += g->tensors[i].nbytes;
        }
        assert_int_equal(rep->bytes_out, sum);
        for (size_t i = 0; i < sizeof spot / sizeof spot[0]; i++) assert_tensor_quantized_from(g, in, spot[i], NULL);
        /* A copied tensor is the input's bytes. */
        dsq_tensor a, b;
        tensor_named(g, "blk.7.attn_norm.weight", &a);
        tensor_named(in, "blk.7.attn_norm.weight", &b);
        assert_int_equal(a.type, DSQ_TYPE_F32);
        assert_memory_equal(a.data, b.data, a.nbytes);
        dsq_gguf_close(g);
        dsq_gguf_quantize_report_free(rep);
    }
    dsq_gguf_close(in);
}

/* Rows are split among threads; the file must not depend on how. */
static void test_real_threads(void **state)
{
    real *r = *state;
    if (!r) DSQ_TEST_SKIP();
    if (!r->out[0][0]) fail_msg("test_real_mixes did not run");
    char *one = join(r->dir, "Q4_K_M-1thread.gguf");
    dsq_gguf_quantize_options o = options("Q4_K_M", 1);
    dsq_gguf_quantize_report_free(quantize_ok(r->f32, one, &o));
    assert_true(files_equal(one, r->out[0]));
    remove(one);
    free(one);
}

/* Straight from the HF folder: the same file as from the F32 GGUF that
 * `convert` made of that folder (same KVs, names, permutation, bytes). */
static void test_real_hf_input(void **state)
{
    real *r = *state;
    if (!r) DSQ_TEST_SKIP();
    if (!r->out[0][0]) fail_msg("test_real_mixes did not run");
    static const int which[] = {2, 0}; /* Q8_0, Q4_K_M */
    for (int k = 0; k < 2; k++) {
        char *out = join(r->dir, "from-hf.gguf");
        dsq_gguf_quantize_options o = options(g_real_types[which[k]], 2);
        dsq_gguf_quantize_report *rep = quantize_ok(r->hf, out, &o);
        assert_int_equal(rep->tensors[1].type_in, DSQ_TYPE_F32); /* the safetensors type */
        if (!files_equal(out, r->out[which[k]])) fail_msg("%s from the HF folder differs", g_real_types[which[k]]);
        dsq_gguf_quantize_report_free(rep);
        remove(out);
        free(out);
    }
}

/* A BF16 folder: its 2-D weights count as stored in BF16, so --type BF16
 * copies them (nothing quantized, as llama-quantize does for a BF16 GGUF)
 * and gives the tensors `convert --dtype bf16` writes. */
static void test_real_hf_bf16(void **state)
{
    real *r = *state;
    if (!r) DSQ_TEST_SKIP();
    char *model = dsq_test_default_model();
    char *hf = join(r->dir, "hf-bf16"), *conv = join(r->dir, "conv-bf16.gguf"), *out = join(r->dir, "q-bf16.gguf");
    assert_int_equal(dsq_convert_gguf_to_hf(model, hf, DSQ_CONVERT_BF16, false, 0), DSQ_OK);
    assert_int_equal(dsq_convert_hf_to_gguf(hf, conv, DSQ_CONVERT_BF16, false), DSQ_OK);
    dsq_gguf_quantize_options o = options("BF16", 2);
    dsq_gguf_quantize_report *rep = quantize_ok(hf, out, &o);
    assert_int_equal(rep->n_quantized, 0);
    dsq_gguf *g = open_gguf(out), *c = open_gguf(conv);
    assert_int_equal(g->n_tensors, c->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        dsq_tensor a, b;
        assert_int_equal(dsq_gguf_tensor(g, i, &a), DSQ_OK);
        tensor_named(c, a.name, &b);
        assert_int_equal(a.type, b.type);
        assert_int_equal(rep->tensors[i].type_in, DSQ_TYPE_BF16); /* all of the folder is bf16 */
        if (a.nbytes != b.nbytes || memcmp(a.data, b.data, a.nbytes)) fail_msg("%s differs from convert's", a.name);
    }
    assert_int_equal(kv_u32(g, "general.file_type"), DSQ_FTYPE_BF16);
    dsq_gguf_close(g);
    dsq_gguf_close(c);
    dsq_gguf_quantize_report_free(rep);
    assert_int_equal(dsq_rmtree(hf), DSQ_OK);
    remove(conv);
    remove(out);
    free(out);
    free(conv);
    free(hf);
    free(model);
}

/* An imatrix with entries for three tensors: those are quantized with their
 * weights, every other tensor exactly as without; the keys are recorded. */
static void test_real_imatrix(void **state)
{
    real *r = *state;
    if (!r) DSQ_TEST_SKIP();
    static const struct {
        const char *name;
        uint32_t nval;
    } ent[] = {{"blk.0.attn_q.weight", 576}, {"blk.4.ffn_down.weight", 1536}, {"blk.11.ffn_up.weight", 576}};
    dsq_imatrix *im = NULL;
    assert_int_equal(dsq_imatrix_new(&im), DSQ_OK);
    uint64_t rng = 7;
    float vals[1536];
    for (size_t e = 0; e < 3; e++) {
        for (uint32_t i = 0; i < ent[e].nval; i++) vals[i] = 0.01f + fabsf(dsq_test_randn(&rng)) * (i % 7 == 0 ? 50.f : 1.f);
        assert_int_equal(dsq_imatrix_add(im, ent[e].name, 5, vals, ent[e].nval), DSQ_OK);
    }
    assert_int_equal(dsq_imatrix_set_trailer(im, 7, "tiny-calibration.txt"), DSQ_OK);
    char *imf = join(r->dir, "tiny.imatrix.dat");
    assert_int_equal(dsq_imatrix_save(im, imf, false), DSQ_OK);

    char *out = join(r->dir, "Q4_0-imatrix.gguf");
    dsq_gguf_quantize_options o = options("Q4_0", 2);
    o.imatrix_file = imf;
    dsq_gguf_quantize_report *rep = quantize_ok(r->f32, out, &o);
    assert_int_equal(rep->n_imatrix, 3);
    dsq_gguf *g = open_gguf(out), *in = open_gguf(r->f32);
    /* has_imatrix changes llama.cpp's choices: the imatrix fixture applies. */
    assert_matches_fixture(g, "smollm2_Q4_0_imatrix.txt");
    const char *s = NULL;
    assert_int_equal(dsq_gguf_get_str(g, "quantize.imatrix.file", &s), DSQ_OK);
    assert_string_equal(s, imf);
    assert_int_equal(dsq_gguf_get_str(g, "quantize.imatrix.dataset", &s), DSQ_OK);
    assert_string_equal(s, "tiny-calibration.txt");
    const dsq_gguf_value *v = dsq_gguf_get(g, "quantize.imatrix.entries_count");
    assert_non_null(v);
    assert_int_equal(v->type, DSQ_GGUF_I32);
    assert_int_equal(v->v.i64, 3);
    v = dsq_gguf_get(g, "quantize.imatrix.chunks_count");
    assert_non_null(v);
    assert_int_equal(v->type, DSQ_GGUF_I32);
    assert_int_equal(v->v.i64, 7);
    for (size_t e = 0; e < 3; e++) {
        const dsq_imatrix_entry *ie = dsq_imatrix_find(im, ent[e].name);
        assert_tensor_quantized_from(g, in, ent[e].name, ie->values);
        /* ...and that differs from quantizing without (the type honours it). */
        dsq_tensor t;
        tensor_named(g, ent[e].name, &t);
        assert_true(dsq_qtype_get(t.type)->uses_imatrix);
        char *tmp = malloc(t.nbytes);
        dsq_tensor x;
        const dsq_gguf_tensor_info *xi = tensor_named(in, ent[e].name, &x);
        assert_int_equal(dsq_quantize(t.type, x.data, tmp, (int64_t)(dsq_tensor_nelems(&x) / (uint64_t)xi->ne[0]),
                                      xi->ne[0], NULL),
                         DSQ_OK);
        if (!memcmp(tmp, t.data, t.nbytes)) fail_msg("%s: the imatrix changed nothing", ent[e].name);
        free(tmp);
    }
    assert_tensor_quantized_from(g, in, "blk.0.attn_k.weight", NULL);
    assert_tensor_quantized_from(g, in, "blk.4.ffn_up.weight", NULL);
    dsq_gguf_close(g);
    dsq_gguf_close(in);
    dsq_gguf_quantize_report_free(rep);
    dsq_imatrix_free(im);
    remove(out);
    free(out);
    free(imf);
}

/* The cached Q4_1 model: refused without --allow-requantize (nothing
 * written); with it, --type F32 dequantizes every tensor, which must give
 * exactly the F32 GGUF that convert's round trip through HF gave. */
static void test_real_requantize(void **state)
{
    real *r = *state;
    if (!r) DSQ_TEST_SKIP();
    char *model = dsq_test_default_model();
    char *out = join(r->dir, "requant.gguf");
    int before = dsq_test_count_entries(r->dir);
    dsq_gguf_quantize_options o = options("Q8_0", 2);
    assert_int_equal(dsq_gguf_quantize(model, out, &o, NULL), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "requantizing from type q4_1"));
    assert_int_equal(dsq_test_count_entries(r->dir), before);

    o = options("F32", 2);
    o.allow_requantize = true;
    capture_start();
    dsq_log_set_level(DSQ_LOG_WARN);
    dsq_gguf_quantize_report *rep = quantize_ok(model, out, &o);
    dsq_log_set_level(DSQ_LOG_ERROR);
    capture_stop();
    assert_non_null(strstr(g_log, "requantizing"));
    dsq_gguf *g = open_gguf(out), *f = open_gguf(r->f32);
    assert_int_equal(g->n_tensors, f->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        dsq_tensor a, b;
        assert_int_equal(dsq_gguf_tensor(g, i, &a), DSQ_OK);
        tensor_named(f, a.name, &b);
        assert_int_equal(a.type, DSQ_TYPE_F32);
        assert_int_equal(a.nbytes, b.nbytes);
        if (memcmp(a.data, b.data, a.nbytes)) fail_msg("%s: dequantized values differ from convert's", a.name);
    }
    assert_int_equal(kv_u32(g, "general.file_type"), 0);
    dsq_gguf_close(g);
    dsq_gguf_close(f);
    dsq_gguf_quantize_report_free(rep);
    remove(out);
    free(out);
    free(model);
}

/* ================================================================ synthetic models */

#define EMBD 256
#define FF 512
#define VOCAB 32

typedef struct synth {
    const char *arch;  /* general.architecture */
    bool hparams;      /* write {arch}.block_count and head counts */
    dsq_type wtype;    /* type of the 2-D weights */
    int n_expert;      /* > 0: 3-D ffn_*_exps tensors instead of dense ffn */
    const char *nan_tensor;
    int64_t nan_row, nan_col;
    float bad_value;
    bool split_keys;
} synth;

typedef struct stensor {
    const char *name;
    int n_dims;
    int64_t shape[3]; /* outermost first */
} stensor;

static size_t synth_tensors(const synth *s, stensor *t)
{
    size_t n = 0;
    t[n++] = (stensor){"token_embd.weight", 2, {VOCAB, EMBD}};
    t[n++] = (stensor){"output_norm.weight", 1, {EMBD}};
    t[n++] = (stensor){"output.weight", 2, {VOCAB, EMBD}};
    t[n++] = (stensor){"blk.0.attn_norm.weight", 1, {EMBD}};
    t[n++] = (stensor){"blk.0.attn_q.weight", 2, {EMBD, EMBD}};
    t[n++] = (stensor){"blk.0.attn_k.weight", 2, {EMBD, EMBD}};
    t[n++] = (stensor){"blk.0.attn_v.weight", 2, {EMBD, EMBD}};
    t[n++] = (stensor){"blk.0.attn_output.weight", 2, {EMBD, EMBD}};
    t[n++] = (stensor){"blk.0.ffn_norm.weight", 1, {EMBD}};
    if (s->n_expert) {
        t[n++] = (stensor){"blk.0.ffn_gate_inp.weight", 2, {s->n_expert, EMBD}};
        t[n++] = (stensor){"blk.0.ffn_gate_exps.weight", 3, {s->n_expert, FF, EMBD}};
        t[n++] = (stensor){"blk.0.ffn_up_exps.weight", 3, {s->n_expert, FF, EMBD}};
        t[n++] = (stensor){"blk.0.ffn_down_exps.weight", 3, {s->n_expert, EMBD, FF}};
    } else {
        t[n++] = (stensor){"blk.0.ffn_gate.weight", 2, {FF, EMBD}};
        t[n++] = (stensor){"blk.0.ffn_up.weight", 2, {FF, EMBD}};
        t[n++] = (stensor){"blk.0.ffn_down.weight", 2, {EMBD, FF}};
    }
    return n;
}

static uint64_t nelems(const stensor *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->n_dims; d++) n *= (uint64_t)t->shape[d];
    return n;
}

static void put_kvs(dsq_gguf_writer *w, const synth *s)
{
    char key[128];
    assert_int_equal(dsq_gguf_set_str(w, "general.architecture", s->arch), DSQ_OK);
    assert_int_equal(dsq_gguf_set_str(w, "general.name", "synthetic"), DSQ_OK);
    assert_int_equal(dsq_gguf_set_u32(w, "general.file_type", 0), DSQ_OK);
    if (s->hparams) {
        snprintf(key, sizeof key, "%s.block_count", s->arch);
        assert_int_equal(dsq_gguf_set_u32(w, key, 1), DSQ_OK);
        snprintf(key, sizeof key, "%s.attention.head_count", s->arch);
        assert_int_equal(dsq_gguf_set_u32(w, key, 4), DSQ_OK);
        snprintf(key, sizeof key, "%s.attention.head_count_kv", s->arch);
        assert_int_equal(dsq_gguf_set_u32(w, key, 4), DSQ_OK);
        if (s->n_expert) {
            snprintf(key, sizeof key, "%s.expert_count", s->arch);
            assert_int_equal(dsq_gguf_set_u32(w, key, (uint32_t)s->n_expert), DSQ_OK);
        }
    }
    if (s->split_keys) {
        assert_int_equal(dsq_gguf_set_u32(w, "split.count", 1), DSQ_OK);
        assert_int_equal(dsq_gguf_set_u32(w, "split.no", 0), DSQ_OK);
    }
    assert_int_equal(dsq_gguf_set_str(w, "zz.custom", "kept"), DSQ_OK);
}

/* Writes the synthetic model to dir/name; values are N(0, 1) with a few
 * outliers, norms near 1. */
static char *make_synth(const char *dir, const char *name, const synth *s)
{
    stensor t[16];
    size_t n = synth_tensors(s, t);
    dsq_gguf_writer *w = NULL;
    assert_int_equal(dsq_gguf_writer_new(&w), DSQ_OK);
    put_kvs(w, s);
    for (size_t i = 0; i < n; i++) {
        dsq_type ty = t[i].n_dims == 1 || strstr(t[i].name, "gate_inp") ? DSQ_TYPE_F32 : s->wtype;
        assert_int_equal(dsq_gguf_add_tensor(w, t[i].name, ty, t[i].n_dims, t[i].shape), DSQ_OK);
    }
    char *path = join(dir, name);
    assert_int_equal(dsq_gguf_writer_begin(w, path, false), DSQ_OK);
    uint64_t rng = 12345;
    for (size_t i = 0; i < n; i++) {
        uint64_t ne = nelems(&t[i]);
        int64_t ne0 = t[i].shape[t[i].n_dims - 1];
        float *x = malloc(ne * sizeof *x);
        for (uint64_t j = 0; j < ne; j++)
            x[j] = t[i].n_dims == 1 ? 1.0f + 0.1f * dsq_test_randn(&rng)
                                    : dsq_test_randn(&rng) * (j % 97 == 0 ? 8.0f : 1.0f);
        if (s->nan_tensor && !strcmp(s->nan_tensor, t[i].name)) x[s->nan_row * ne0 + s->nan_col] = s->bad_value;
        dsq_type ty = t[i].n_dims == 1 || strstr(t[i].name, "gate_inp") ? DSQ_TYPE_F32 : s->wtype;
        uint64_t nb;
        assert_int_equal(dsq_type_nbytes(ty, ne, &nb), DSQ_OK);
        void *q = malloc(nb);
        if (ty == DSQ_TYPE_F32) memcpy(q, x, nb);
        else assert_int_equal(dsq_quantize(ty, x, q, (int64_t)(ne / (uint64_t)ne0), ne0, NULL), DSQ_OK);
        assert_int_equal(dsq_gguf_writer_write(w, q, nb), DSQ_OK);
        free(q);
        free(x);
    }
    assert_int_equal(dsq_gguf_writer_finish(w), DSQ_OK);
    dsq_gguf_writer_free(w);
    return path;
}

static const synth g_llama = {.arch = "llama", .hparams = true, .wtype = DSQ_TYPE_F32};

/* Unknown type: the message lists the valid ones (library and CLI), nothing written. */
static void test_unknown_type(void **state)
{
    (void)state;
    dsq_ftype ft;
    assert_int_equal(dsq_ftype_from_name("Q9_X", &ft), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "Q9_X"));
    assert_non_null(strstr(dsq_errmsg(), "Q4_K_M"));
    char *dir = dsq_test_mkdtemp();
    char *in = make_synth(dir, "in.gguf", &g_llama);
    char cmd[8192], err[4096];
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s/out.gguf' --type Q9_X", DSQ_BINARY, in, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    if (!strstr(err, "Q9_X") || !strstr(err, "Q4_K_M") || !strstr(err, "IQ4_XS")) fail_msg("stderr: %s", err);
    /* A ggml type we cannot produce for --output-type is refused by name. */
    dsq_gguf_quantize_options o = options("Q8_0", 1);
    o.output_type = DSQ_TYPE_IQ2_XXS;
    char *out = join(dir, "out.gguf");
    assert_int_equal(dsq_gguf_quantize(in, out, &o, NULL), DSQ_ERR_UNSUPPORTED);
    assert_non_null(strstr(dsq_errmsg(), "iq2_xxs"));
    assert_int_equal(dsq_test_count_entries(dir), 1);
    free(out);
    free(in);
    dsq_test_rmtmp(dir);
}

/* NaN in a quantized weight and Inf in a copied norm: stop naming tensor,
 * row and column; nothing left. */
static void test_nonfinite(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    synth s = g_llama;
    s.nan_tensor = "blk.0.ffn_up.weight";
    s.nan_row = 3;
    s.nan_col = 5;
    s.bad_value = NAN;
    char *in = make_synth(dir, "nan.gguf", &s);
    char *out = join(dir, "out.gguf");
    dsq_gguf_quantize_options o = options("Q4_K_M", 2);
    dsq_log_set_level(DSQ_LOG_ERROR);
    assert_int_equal(dsq_gguf_quantize(in, out, &o, NULL), DSQ_ERR_NUMERIC);
    if (!strstr(dsq_errmsg(), "blk.0.ffn_up.weight") || !strstr(dsq_errmsg(), "row 3, column 5") ||
        !strstr(dsq_errmsg(), "NaN"))
        fail_msg("message: %s", dsq_errmsg());
    assert_int_equal(dsq_test_count_entries(dir), 1);

    /* a row far into the tensor: the scan runs per job of rows, so the
     * position must still be counted from the tensor's first row */
    s.nan_row = 200;
    char *in3 = make_synth(dir, "nan200.gguf", &s);
    assert_int_equal(dsq_gguf_quantize(in3, out, &o, NULL), DSQ_ERR_NUMERIC);
    if (!strstr(dsq_errmsg(), "blk.0.ffn_up.weight") || !strstr(dsq_errmsg(), "row 200, column 5"))
        fail_msg("message: %s", dsq_errmsg());
    remove(in3);
    free(in3);
    assert_int_equal(dsq_test_count_entries(dir), 1);

    s.nan_tensor = "output_norm.weight";
    s.nan_row = 0;
    s.nan_col = 7;
    s.bad_value = -INFINITY;
    char *in2 = make_synth(dir, "inf.gguf", &s);
    assert_int_equal(dsq_gguf_quantize(in2, out, &o, NULL), DSQ_ERR_NUMERIC);
    if (!strstr(dsq_errmsg(), "output_norm.weight") || !strstr(dsq_errmsg(), "row 0, column 7") ||
        !strstr(dsq_errmsg(), "Inf"))
        fail_msg("message: %s", dsq_errmsg());
    dsq_log_set_level(DSQ_LOG_INFO);
    assert_int_equal(dsq_test_count_entries(dir), 2);
    free(in2);
    free(out);
    free(in);
    dsq_test_rmtmp(dir);
}

static char *save_imatrix(const char *dir, const char *name, const char *tensor, uint32_t nval)
{
    dsq_imatrix *im = NULL;
    assert_int_equal(dsq_imatrix_new(&im), DSQ_OK);
    float *v = malloc(nval * sizeof *v);
    for (uint32_t i = 0; i < nval; i++) v[i] = 1.0f + (float)(i % 13);
    assert_int_equal(dsq_imatrix_add(im, tensor, 1, v, nval), DSQ_OK);
    char *path = join(dir, name);
    assert_int_equal(dsq_imatrix_save(im, path, false), DSQ_OK);
    dsq_imatrix_free(im);
    free(v);
    return path;
}

/* An imatrix entry of the wrong size stops the run (llama-quantize throws),
 * except for token_embd.weight, which is then quantized without. */
static void test_imatrix_wrong_size(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char *in = make_synth(dir, "in.gguf", &g_llama);
    char *bad = save_imatrix(dir, "bad.dat", "blk.0.attn_q.weight", 128);
    char *out = join(dir, "out.gguf");
    dsq_gguf_quantize_options o = options("Q4_0", 1);
    o.imatrix_file = bad;
    dsq_log_set_level(DSQ_LOG_ERROR);
    assert_int_equal(dsq_gguf_quantize(in, out, &o, NULL), DSQ_ERR_FORMAT);
    if (!strstr(dsq_errmsg(), "blk.0.attn_q.weight") || !strstr(dsq_errmsg(), "128"))
        fail_msg("message: %s", dsq_errmsg());
    assert_int_equal(dsq_test_count_entries(dir), 2);

    char *emb = save_imatrix(dir, "emb.dat", "token_embd.weight", 100);
    o.imatrix_file = emb;
    dsq_gguf_quantize_report *rep = quantize_ok(in, out, &o);
    dsq_log_set_level(DSQ_LOG_INFO);
    assert_int_equal(rep->n_imatrix, 0);
    dsq_gguf *g = open_gguf(out);
    assert_non_null(dsq_gguf_get(g, "quantize.imatrix.file"));
    assert_null(dsq_gguf_get(g, "quantize.imatrix.chunks_count")); /* no trailer, no chunk count */
    dsq_gguf_close(g);
    dsq_gguf_quantize_report_free(rep);
    free(emb);
    free(out);
    free(bad);
    free(in);
    dsq_test_rmtmp(dir);
}

/* An existing output is kept without --force and replaced with it; the
 * input itself is never an acceptable output. */
static void test_output_paths(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char *in = make_synth(dir, "in.gguf", &g_llama);
    char *out = dsq_test_write(dir, "out.gguf", "keep", 4);
    dsq_gguf_quantize_options o = options("Q8_0", 1);
    dsq_log_set_level(DSQ_LOG_WARN);
    assert_int_equal(dsq_gguf_quantize(in, out, &o, NULL), DSQ_ERR_EXISTS);
    assert_non_null(strstr(dsq_errmsg(), "--force"));
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(dsq_read_file(out, 64, &text, &len), DSQ_OK);
    assert_string_equal(text, "keep");
    free(text);
    assert_int_equal(dsq_test_count_entries(dir), 2);

    char *copy = join(dir, "in-copy.gguf");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", in, copy);
    assert_int_equal(dsq_test_run(cmd, NULL, 0), 0);
    for (int force = 0; force < 2; force++) {
        o.overwrite = force;
        assert_int_not_equal(dsq_gguf_quantize(in, in, &o, NULL), DSQ_OK);
        assert_non_null(strstr(dsq_errmsg(), "input"));
        assert_true(files_equal(in, copy));
    }
    assert_int_equal(dsq_test_count_entries(dir), 3);

    o.overwrite = true;
    dsq_gguf_quantize_report_free(quantize_ok(in, out, &o));
    dsq_log_set_level(DSQ_LOG_INFO);
    dsq_gguf *g = open_gguf(out);
    assert_int_equal(g->n_tensors, 12);
    dsq_gguf_close(g);
    free(copy);
    free(out);
    free(in);
    dsq_test_rmtmp(dir);
}

/* An architecture we know nothing about (no hyperparameter keys): --pure
 * quantizes every weight matrix to the default type; order, KVs and split
 * keys as llama-quantize leaves them. */
static void test_pure_unknown_arch(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    synth s = {.arch = "mystery", .hparams = false, .wtype = DSQ_TYPE_F32, .split_keys = true};
    char *in = make_synth(dir, "in.gguf", &s);
    char *out = join(dir, "out.gguf");
    dsq_gguf_quantize_options o = options("Q4_K_M", 2);
    o.pure = true;
    dsq_log_set_level(DSQ_LOG_WARN);
    dsq_gguf_quantize_report *rep = quantize_ok(in, out, &o);
    dsq_log_set_level(DSQ_LOG_INFO);
    dsq_gguf *g = open_gguf(out), *src = open_gguf(in);
    static const char *const order[] = {"output.weight",       "output_norm.weight",     "token_embd.weight",
                                        "blk.0.attn_k.weight", "blk.0.attn_norm.weight", "blk.0.attn_output.weight",
                                        "blk.0.attn_q.weight", "blk.0.attn_v.weight",    "blk.0.ffn_down.weight",
                                        "blk.0.ffn_gate.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_up.weight"};
    assert_int_equal(g->n_tensors, 12);
    for (int i = 0; i < 12; i++) {
        assert_string_equal(g->tensors[i].name, order[i]);
        dsq_type want = strstr(order[i], "norm") ? DSQ_TYPE_F32 : DSQ_TYPE_Q4_K;
        assert_int_equal(g->tensors[i].type, want);
        if (want == DSQ_TYPE_Q4_K) assert_tensor_quantized_from(g, src, order[i], NULL);
    }
    assert_int_equal(rep->n_quantized, 9);
    assert_int_equal(rep->n_copied, 3);
    /* KVs: file_type replaced in place (it was the 3rd key), version appended, split keys gone. */
    assert_string_equal(g->kv[2].key, "general.file_type");
    assert_int_equal(kv_u32(g, "general.file_type"), DSQ_FTYPE_Q4_K_M);
    assert_string_equal(g->kv[g->n_kv - 1].key, "general.quantization_version");
    assert_null(dsq_gguf_get(g, "split.count"));
    assert_null(dsq_gguf_get(g, "split.no"));
    const char *custom = NULL;
    assert_int_equal(dsq_gguf_get_str(g, "zz.custom", &custom), DSQ_OK);
    assert_string_equal(custom, "kept");
    dsq_gguf_close(src);
    dsq_gguf_close(g);
    dsq_gguf_quantize_report_free(rep);
    free(out);
    free(in);
    dsq_test_rmtmp(dir);
}

/* A Q8_0 input: Q8_0 again copies every tensor as it is (no requantize
 * needed); Q4_0 is refused without --allow-requantize and with it gives
 * dsq_quantize of the dequantized rows. */
static void test_same_type_and_requantize(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    synth s = g_llama;
    s.wtype = DSQ_TYPE_Q8_0;
    char *in = make_synth(dir, "q8.gguf", &s);
    char *out = join(dir, "out.gguf");
    dsq_gguf_quantize_options o = options("Q8_0", 2);
    dsq_log_set_level(DSQ_LOG_WARN);
    dsq_gguf_quantize_report *rep = quantize_ok(in, out, &o);
    assert_int_equal(rep->n_quantized, 0);
    dsq_gguf *g = open_gguf(out), *src = open_gguf(in);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        dsq_tensor a, b;
        assert_int_equal(dsq_gguf_tensor(g, i, &a), DSQ_OK);
        tensor_named(src, a.name, &b);
        assert_int_equal(a.type, b.type);
        assert_int_equal(a.nbytes, b.nbytes);
        assert_memory_equal(a.data, b.data, a.nbytes);
    }
    dsq_gguf_close(g);
    dsq_gguf_quantize_report_free(rep);
    remove(out);

    o = options("Q4_0", 2);
    o.pure = true;
    assert_int_equal(dsq_gguf_quantize(in, out, &o, NULL), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "--allow-requantize"));
    assert_int_equal(dsq_test_count_entries(dir), 1);
    o.allow_requantize = true;
    capture_start();
    rep = quantize_ok(in, out, &o);
    capture_stop();
    dsq_log_set_level(DSQ_LOG_INFO);
    assert_non_null(strstr(g_log, "requantizing 9"));
    g = open_gguf(out);
    dsq_tensor a, b;
    const dsq_gguf_tensor_info *ti = tensor_named(src, "blk.0.ffn_down.weight", &b);
    tensor_named(g, "blk.0.ffn_down.weight", &a);
    assert_int_equal(a.type, DSQ_TYPE_Q4_0);
    int64_t ne0 = ti->ne[0], nrows = ti->ne[1];
    float *x = malloc((size_t)(ne0 * nrows) * sizeof *x);
    uint8_t *q = malloc(a.nbytes);
    assert_int_equal(dsq_dequantize(DSQ_TYPE_Q8_0, b.data, x, nrows, ne0), DSQ_OK);
    assert_int_equal(dsq_quantize(DSQ_TYPE_Q4_0, x, q, nrows, ne0, NULL), DSQ_OK);
    assert_memory_equal(q, a.data, a.nbytes);
    free(q);
    free(x);
    dsq_gguf_close(g);
    dsq_gguf_close(src);
    dsq_gguf_quantize_report_free(rep);
    free(out);
    free(in);
    dsq_test_rmtmp(dir);
}

/* 3-D expert tensors: expert e is quantized with slice e of the importance
 * vector (llama.cpp's per-expert loop), and the router stays F32. */
static void test_experts_imatrix(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    synth s = g_llama;
    s.n_expert = 2;
    char *in = make_synth(dir, "moe.gguf", &s);
    dsq_imatrix *im = NULL;
    assert_int_equal(dsq_imatrix_new(&im), DSQ_OK);
    float v[2 * EMBD];
    for (int i = 0; i < 2 * EMBD; i++) v[i] = i < EMBD ? 1.0f + (float)(i % 5) : 40.0f / (1.0f + (float)(i % 11));
    assert_int_equal(dsq_imatrix_add(im, "blk.0.ffn_up_exps.weight", 3, v, 2 * EMBD), DSQ_OK);
    char *out = join(dir, "out.gguf");
    dsq_gguf_quantize_options o = options("Q4_K_S", 2);
    o.imatrix = im;
    o.imatrix_file = "given-in-memory";
    dsq_log_set_level(DSQ_LOG_WARN);
    dsq_gguf_quantize_report *rep = quantize_ok(in, out, &o);
    dsq_log_set_level(DSQ_LOG_INFO);
    assert_int_equal(rep->n_imatrix, 1);
    dsq_gguf *g = open_gguf(out), *src = open_gguf(in);
    dsq_tensor a, x;
    tensor_named(g, "blk.0.ffn_gate_inp.weight", &a);
    assert_int_equal(a.type, DSQ_TYPE_F32);
    tensor_named(g, "blk.0.ffn_up_exps.weight", &a);
    tensor_named(src, "blk.0.ffn_up_exps.weight", &x);
    assert_true(dsq_qtype_get(a.type) && dsq_qtype_get(a.type)->uses_imatrix);
    uint8_t *q = malloc(a.nbytes);
    size_t half = (size_t)a.nbytes / 2;
    const float *xf = x.data;
    const float *w = dsq_imatrix_find(im, "blk.0.ffn_up_exps.weight")->values;
    for (int e = 0; e < 2; e++)
        assert_int_equal(dsq_quantize(a.type, xf + (size_t)e * FF * EMBD, q + (size_t)e * half, FF, EMBD, w + e * EMBD),
                         DSQ_OK);
    assert_memory_equal(q, a.data, a.nbytes);
    /* Expert 1 with expert 0's slice would differ: the slices matter. */
    assert_int_equal(dsq_quantize(a.type, xf + (size_t)FF * EMBD, q, FF, EMBD, w), DSQ_OK);
    assert_true(memcmp(q, (const uint8_t *)a.data + half, half) != 0);
    const dsq_gguf_value *ec = dsq_gguf_get(g, "quantize.imatrix.entries_count");
    assert_non_null(ec);
    assert_int_equal(ec->v.i64, 1);
    free(q);
    dsq_gguf_close(g);
    dsq_gguf_close(src);
    dsq_gguf_quantize_report_free(rep);
    dsq_imatrix_free(im);
    free(out);
    free(in);
    dsq_test_rmtmp(dir);
}

/* The CLI: --json summary on stdout, overrides and thread options, usage errors. */
static void test_cli(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char *in = make_synth(dir, "in.gguf", &g_llama);
    char cmd[8192], err[8192];
    snprintf(cmd, sizeof cmd,
             "'%s' gguf '%s' -o '%s/out.gguf' --type Q5_K_M --output-type q8_0 --token-embedding-type Q6_K "
             "--threads 2 --json > '%s/summary.json'",
             DSQ_BINARY, in, dir, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 0);
    if (!strstr(err, "[1/12] output.weight") || !strstr(err, "bits per weight")) fail_msg("progress: %s", err);
    char *path = join(dir, "summary.json"), *text = NULL;
    size_t len;
    assert_int_equal(dsq_read_file(path, 1 << 20, &text, &len), DSQ_OK);
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "type")->valuestring, "Q5_K_M");
    assert_int_equal((int)cJSON_GetObjectItem(j, "file_type")->valuedouble, DSQ_FTYPE_Q5_K_M);
    cJSON *tensors = cJSON_GetObjectItem(j, "tensors");
    assert_int_equal(cJSON_GetArraySize(tensors), 12);
    double sum = 0;
    for (int i = 0; i < 12; i++) {
        cJSON *t = cJSON_GetArrayItem(tensors, i);
        const char *name = cJSON_GetObjectItem(t, "name")->valuestring;
        const char *type = cJSON_GetObjectItem(t, "type_out")->valuestring;
        if (!strcmp(name, "output.weight")) assert_string_equal(type, "q8_0");
        if (!strcmp(name, "token_embd.weight")) assert_string_equal(type, "q6_K");
        sum += cJSON_GetObjectItem(t, "bytes_out")->valuedouble;
    }
    assert_true(sum == cJSON_GetObjectItem(j, "bytes_out")->valuedouble);
    double bpw = cJSON_GetObjectItem(j, "bits_per_weight")->valuedouble;
    assert_true(bpw > 4.0 && bpw < 32.0);
    cJSON_Delete(j);
    free(text);
    free(path);

    /* The file the CLI wrote equals the library's with the same options. */
    char *lib = join(dir, "lib.gguf");
    dsq_gguf_quantize_options o = options("Q5_K_M", 1);
    o.output_type = DSQ_TYPE_Q8_0;
    o.token_embd_type = DSQ_TYPE_Q6_K;
    dsq_log_set_level(DSQ_LOG_WARN);
    dsq_gguf_quantize_report_free(quantize_ok(in, lib, &o));
    dsq_log_set_level(DSQ_LOG_INFO);
    char *cli_out = join(dir, "out.gguf");
    assert_true(files_equal(lib, cli_out));

    /* Exists without --force (exit 1), usage errors (exit 2). */
    snprintf(cmd, sizeof cmd, "'%s' -q gguf '%s' -o '%s' --type Q8_0", DSQ_BINARY, in, cli_out);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "--force"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s/x.gguf'", DSQ_BINARY, in, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "--type"));
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s/x.gguf' --type Q8_0 --threads 0", DSQ_BINARY, in, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' -o '%s/x.gguf' --type Q8_0 --output-type q9_9", DSQ_BINARY, in, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    assert_non_null(strstr(err, "q9_9"));
    assert_int_equal(dsq_test_count_entries(dir), 4); /* in, out, summary.json, lib */
    free(cli_out);
    free(lib);
    free(in);
    dsq_test_rmtmp(dir);
}

int main(void)
{
    const struct CMUnitTest synthetic[] = {
        cmocka_unit_test(test_unknown_type),
        cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_imatrix_wrong_size),
        cmocka_unit_test(test_output_paths),
        cmocka_unit_test(test_pure_unknown_arch),
        cmocka_unit_test(test_same_type_and_requantize),
        cmocka_unit_test(test_experts_imatrix),
        cmocka_unit_test(test_cli),
    };
    const struct CMUnitTest real_model[] = {
        cmocka_unit_test(test_real_mixes),
        cmocka_unit_test(test_real_threads),
        cmocka_unit_test(test_real_hf_input),
        cmocka_unit_test(test_real_hf_bf16),
        cmocka_unit_test(test_real_imatrix),
        cmocka_unit_test(test_real_requantize),
    };
    int failed = cmocka_run_group_tests_name("synthetic", synthetic, NULL, NULL);
    failed += cmocka_run_group_tests_name("real_model", real_model, real_setup, real_teardown);
    return dsq_test_status(failed, sizeof synthetic / sizeof *synthetic + sizeof real_model / sizeof *real_model);
}
