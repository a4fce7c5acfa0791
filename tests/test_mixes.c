/* quantizers/mixes: llama-quantize's per-tensor type choice.
 *
 * Three kinds of evidence:
 *  - hand-written tables (algorithms-notes 1.6, checked against
 *    src/llama-quant.cpp), with the layer sets of use_more_bits written out
 *    literally rather than computed, for every ftype on a 32-layer dense model;
 *  - SmolLM2-135M's real shapes (576-wide rows: most k-quants fall back),
 *    worked through the llama.cpp rules by hand for Q4_K_M, Q6_K, Q8_0, Q2_K;
 *  - fixtures recorded from the real llama_model_quantize
 *    (tests/data/mixes/, see its README): every tensor of every run must match. */
#include <ctype.h>
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/log.h"
#include "quantizers/mixes.h"
#include "tests/helpers/testutil.h"

/* ---- a model's tensor list ---- */

#define MAX_T 2048

typedef struct model {
    dsq_mix_tensor t[MAX_T];
    char names[MAX_T][64];
    size_t n;
    dsq_mix_model facts;
} model;

static void add(model *m, const char *name, dsq_type type, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2)
{
    assert_true(m->n < MAX_T);
    snprintf(m->names[m->n], sizeof m->names[0], "%s", name);
    dsq_mix_tensor *t = &m->t[m->n++];
    memset(t, 0, sizeof *t);
    t->name = m->names[m->n - 1];
    t->type = type;
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims > 1 ? ne1 : 1;
    t->ne[2] = n_dims > 2 ? ne2 : 1;
    t->ne[3] = 1;
}

static void addl(model *m, int layer, const char *suffix, int n_dims, int64_t ne0, int64_t ne1)
{
    char name[64];
    snprintf(name, sizeof name, "blk.%d.%s", layer, suffix);
    add(m, name, DSQ_TYPE_F32, n_dims, ne0, ne1, 1);
}

/* LLaMA-like dense model as llama.cpp names it; rows: n_embd (ffn_down: n_ff). */
static model *dense(int n_layer, int n_embd, int n_ff, int n_head, int n_head_kv, int n_vocab, bool tied, bool fused_qkv)
{
    model *m = calloc(1, sizeof *m);
    int kv = n_embd / n_head * n_head_kv;
    add(m, "token_embd.weight", DSQ_TYPE_F32, 2, n_embd, n_vocab, 1);
    add(m, "output_norm.weight", DSQ_TYPE_F32, 1, n_embd, 1, 1);
    if (!tied) add(m, "output.weight", DSQ_TYPE_F32, 2, n_embd, n_vocab, 1);
    for (int i = 0; i < n_layer; i++) {
        addl(m, i, "attn_norm.weight", 1, n_embd, 1);
        if (fused_qkv) {
            addl(m, i, "attn_qkv.weight", 2, n_embd, n_embd + 2 * kv);
        } else {
            addl(m, i, "attn_q.weight", 2, n_embd, n_embd);
            addl(m, i, "attn_k.weight", 2, n_embd, kv);
            addl(m, i, "attn_v.weight", 2, n_embd, kv);
        }
        addl(m, i, "attn_output.weight", 2, n_embd, n_embd);
        addl(m, i, "ffn_norm.weight", 1, n_embd, 1);
        addl(m, i, "ffn_gate.weight", 2, n_embd, n_ff);
        addl(m, i, "ffn_up.weight", 2, n_embd, n_ff);
        addl(m, i, "ffn_down.weight", 2, n_ff, n_embd);
    }
    m->facts = (dsq_mix_model){.arch = "llama", .n_layer = n_layer, .n_head = n_head, .n_head_kv = n_head_kv};
    return m;
}

/* SmolLM2-135M: 30 layers, hidden 576, ffn 1536, 9 heads / 3 kv heads, vocab 49152, tied. */
static model *smollm2(void) { return dense(30, 576, 1536, 9, 3, 49152, true, false); }

static dsq_mix_choice *plan(model *m, const dsq_mix_options *o, dsq_status want, dsq_mix_stats *stats)
{
    dsq_mix_choice *c = calloc(m->n, sizeof *c);
    dsq_status st = dsq_mix_plan(&m->facts, o, m->t, m->n, c, stats);
    if (st != want) fail_msg("plan: status %d, want %d (%s)", st, want, dsq_errmsg());
    return c;
}

static int layer_of(const char *name)
{
    int l = -1;
    if (sscanf(name, "blk.%d.", &l) != 1) return -1;
    return l;
}

static bool in_set(int v, const int *set)
{
    for (; *set >= 0; set++)
        if (*set == v) return true;
    return false;
}

static void expect_type(const char *name, const dsq_mix_choice *c, dsq_type want)
{
    if (c->type != want)
        fail_msg("%s: got %s (%s), want %s", name, dsq_type_name(c->type), c->reason, dsq_type_name(want));
}

/* ---- log capture ---- */

static int g_warns, g_fallback_lines;
static char g_summary[256];

static void sink(dsq_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level != DSQ_LOG_WARN) return;
    g_warns++;
    if (strstr(msg, "are not divisible by")) g_fallback_lines++;
    if (strstr(msg, "required fallback quantization")) snprintf(g_summary, sizeof g_summary, "%s", msg);
}

static void capture(void)
{
    g_warns = g_fallback_lines = 0;
    g_summary[0] = '\0';
    dsq_log_set_sink(sink, NULL);
    dsq_log_set_level(DSQ_LOG_DEBUG);
}

/* ---- ftype names and numbers ---- */

static void test_ftype_names(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int number;
        dsq_type def;
    } rows[] = {
        {"Q4_0", 2, DSQ_TYPE_Q4_0},     {"Q4_1", 3, DSQ_TYPE_Q4_1},     {"Q5_0", 8, DSQ_TYPE_Q5_0},
        {"Q5_1", 9, DSQ_TYPE_Q5_1},     {"Q8_0", 7, DSQ_TYPE_Q8_0},     {"Q2_K", 10, DSQ_TYPE_Q2_K},
        {"Q2_K_S", 21, DSQ_TYPE_Q2_K},  {"Q3_K_S", 11, DSQ_TYPE_Q3_K},  {"Q3_K_M", 12, DSQ_TYPE_Q3_K},
        {"Q3_K_L", 13, DSQ_TYPE_Q3_K},  {"Q4_K_S", 14, DSQ_TYPE_Q4_K},  {"Q4_K_M", 15, DSQ_TYPE_Q4_K},
        {"Q5_K_S", 16, DSQ_TYPE_Q5_K},  {"Q5_K_M", 17, DSQ_TYPE_Q5_K},  {"Q6_K", 18, DSQ_TYPE_Q6_K},
        {"IQ4_NL", 25, DSQ_TYPE_IQ4_NL}, {"IQ4_XS", 30, DSQ_TYPE_IQ4_XS}, {"F16", 1, DSQ_TYPE_F16},
        {"BF16", 32, DSQ_TYPE_BF16},    {"F32", 0, DSQ_TYPE_F32},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        dsq_ftype f;
        assert_int_equal(dsq_ftype_from_name(rows[i].name, &f), DSQ_OK);
        assert_int_equal((int)f, rows[i].number);
        assert_string_equal(dsq_ftype_name(f), rows[i].name);
        dsq_type d;
        assert_int_equal(dsq_ftype_default_type(f, &d), DSQ_OK);
        assert_int_equal(d, rows[i].def);
        char lower[16];
        for (size_t k = 0; k <= strlen(rows[i].name); k++) lower[k] = (char)tolower((unsigned char)rows[i].name[k]);
        assert_int_equal(dsq_ftype_from_name(lower, &f), DSQ_OK);
        assert_int_equal((int)f, rows[i].number);
    }
    dsq_ftype f;
    assert_int_equal(dsq_ftype_from_name("Q4_K", &f), DSQ_OK);
    assert_int_equal(f, DSQ_FTYPE_Q4_K_M);
    assert_int_equal(dsq_ftype_from_name("q3_k", &f), DSQ_OK);
    assert_int_equal(f, DSQ_FTYPE_Q3_K_M);
    assert_int_equal(dsq_ftype_from_name("Q5_K", &f), DSQ_OK);
    assert_int_equal(f, DSQ_FTYPE_Q5_K_M);
    assert_int_equal(dsq_ftype_from_name("15", &f), DSQ_OK);
    assert_int_equal(f, DSQ_FTYPE_Q4_K_M);
    /* Unknown: error listing the valid names. */
    assert_int_equal(dsq_ftype_from_name("Q4_K_X", &f), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "Q4_K_X"));
    assert_non_null(strstr(dsq_errmsg(), "Q4_K_M"));
    assert_non_null(strstr(dsq_errmsg(), "IQ4_XS"));
    assert_int_equal(dsq_ftype_from_name("IQ2_XXS", &f), DSQ_ERR_ARG); /* a llama.cpp ftype we cannot produce */
    assert_int_equal(dsq_ftype_from_name("19", &f), DSQ_ERR_ARG);
    assert_int_equal(dsq_ftype_from_name("", &f), DSQ_ERR_ARG);
    assert_null(dsq_ftype_name(DSQ_FTYPE_IQ2_XXS));
}

/* ---- use_more_bits: literal sets of algorithms-notes 1.4 ---- */

static void test_use_more_bits(void **state)
{
    (void)state;
    static const struct {
        int n;
        int set[40];
    } rows[] = {
        {16, {0, 1, 4, 7, 10, 13, 14, 15, -1}},
        {22, {0, 1, 4, 7, 10, 13, 16, 19, 20, 21, -1}},
        {24, {0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23, -1}},
        {28, {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27, -1}},
        {30, {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29, -1}},
        {32, {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31, -1}},
        {36, {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34, 35, -1}},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (int i = 0; i < rows[r].n; i++)
            if (dsq_mix_use_more_bits(i, rows[r].n) != in_set(i, rows[r].set))
                fail_msg("use_more_bits(%d, %d)", i, rows[r].n);
}

/* ---- the dense table (algorithms-notes 1.6), 32 layers ---- */

static const int UMB32[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31, -1};
static const int LT2[] = {0, 1, -1};       /* L < N/16, iv < 2 */
static const int LT4[] = {0, 1, 2, 3, -1}; /* L < N/8, iv < 4 */
static const int NONE[] = {-1};

#define X DSQ_TYPE_COUNT /* "same as the default" */

/* A layer-dependent choice: in_set ? hi : lo. */
typedef struct lrule {
    dsq_type hi, lo;
    const int *set;
} lrule;

typedef struct dense_row {
    dsq_ftype ft;
    dsq_type def, output;
    lrule attn_v_gqa4, attn_v_gqa1;
    dsq_type attn_output, attn_qkv;
    lrule ffn_down, ffn_down_imatrix;
} dense_row;

#define ALL(t) {t, t, NONE}
static const dense_row DENSE[] = {
    {DSQ_FTYPE_Q2_K, DSQ_TYPE_Q2_K, DSQ_TYPE_Q6_K, ALL(DSQ_TYPE_Q4_K), ALL(DSQ_TYPE_Q3_K), DSQ_TYPE_Q3_K, X,
     ALL(DSQ_TYPE_Q3_K), ALL(DSQ_TYPE_Q3_K)},
    {DSQ_FTYPE_Q2_K_S, DSQ_TYPE_Q2_K, DSQ_TYPE_Q6_K, ALL(DSQ_TYPE_Q4_K), ALL(DSQ_TYPE_Q2_K), X, X,
     {DSQ_TYPE_Q4_K, DSQ_TYPE_Q2_K, LT4}, {DSQ_TYPE_Q4_K, DSQ_TYPE_Q2_K, LT4}},
    {DSQ_FTYPE_Q3_K_S, DSQ_TYPE_Q3_K, DSQ_TYPE_Q6_K, ALL(X), ALL(X), X, X, ALL(X), ALL(X)},
    {DSQ_FTYPE_Q3_K_M, DSQ_TYPE_Q3_K, DSQ_TYPE_Q6_K, {DSQ_TYPE_Q5_K, DSQ_TYPE_Q4_K, LT2},
     {DSQ_TYPE_Q5_K, DSQ_TYPE_Q4_K, LT2}, DSQ_TYPE_Q4_K, DSQ_TYPE_Q4_K, {DSQ_TYPE_Q5_K, DSQ_TYPE_Q4_K, LT2},
     {DSQ_TYPE_Q5_K, DSQ_TYPE_Q4_K, LT2}},
    {DSQ_FTYPE_Q3_K_L, DSQ_TYPE_Q3_K, DSQ_TYPE_Q6_K, ALL(DSQ_TYPE_Q5_K), ALL(DSQ_TYPE_Q5_K), DSQ_TYPE_Q5_K,
     DSQ_TYPE_Q4_K, ALL(DSQ_TYPE_Q5_K), ALL(DSQ_TYPE_Q5_K)},
    {DSQ_FTYPE_Q4_K_S, DSQ_TYPE_Q4_K, DSQ_TYPE_Q6_K, {DSQ_TYPE_Q5_K, DSQ_TYPE_Q4_K, LT4},
     {DSQ_TYPE_Q5_K, DSQ_TYPE_Q4_K, LT4}, X, X, {DSQ_TYPE_Q5_K, DSQ_TYPE_Q4_K, LT4},
     {DSQ_TYPE_Q5_K, DSQ_TYPE_Q4_K, LT4}},
    {DSQ_FTYPE_Q4_K_M, DSQ_TYPE_Q4_K, DSQ_TYPE_Q6_K, {DSQ_TYPE_Q6_K, DSQ_TYPE_Q4_K, UMB32},
     {DSQ_TYPE_Q6_K, DSQ_TYPE_Q4_K, UMB32}, X, DSQ_TYPE_Q5_K, {DSQ_TYPE_Q6_K, DSQ_TYPE_Q4_K, UMB32},
     {DSQ_TYPE_Q6_K, DSQ_TYPE_Q4_K, UMB32}},
    {DSQ_FTYPE_Q5_K_S, DSQ_TYPE_Q5_K, DSQ_TYPE_Q6_K, ALL(X), ALL(X), X, X, ALL(X), ALL(X)},
    {DSQ_FTYPE_Q5_K_M, DSQ_TYPE_Q5_K, DSQ_TYPE_Q6_K, {DSQ_TYPE_Q6_K, DSQ_TYPE_Q5_K, UMB32},
     {DSQ_TYPE_Q6_K, DSQ_TYPE_Q5_K, UMB32}, X, DSQ_TYPE_Q6_K, {DSQ_TYPE_Q6_K, DSQ_TYPE_Q5_K, UMB32},
     {DSQ_TYPE_Q6_K, DSQ_TYPE_Q5_K, UMB32}},
    {DSQ_FTYPE_Q6_K, DSQ_TYPE_Q6_K, DSQ_TYPE_Q6_K, ALL(X), ALL(X), X, X, ALL(X), ALL(X)},
    {DSQ_FTYPE_Q4_0, DSQ_TYPE_Q4_0, DSQ_TYPE_Q6_K, ALL(X), ALL(X), X, X, ALL(X), {DSQ_TYPE_Q4_1, DSQ_TYPE_Q4_0, LT4}},
    {DSQ_FTYPE_Q4_1, DSQ_TYPE_Q4_1, DSQ_TYPE_Q6_K, ALL(X), ALL(X), X, X, ALL(X), ALL(X)},
    {DSQ_FTYPE_Q5_0, DSQ_TYPE_Q5_0, DSQ_TYPE_Q6_K, ALL(X), ALL(X), X, X, ALL(X), {DSQ_TYPE_Q5_1, DSQ_TYPE_Q5_0, LT4}},
    {DSQ_FTYPE_Q5_1, DSQ_TYPE_Q5_1, DSQ_TYPE_Q6_K, ALL(X), ALL(X), X, X, ALL(X), ALL(X)},
    {DSQ_FTYPE_Q8_0, DSQ_TYPE_Q8_0, DSQ_TYPE_Q8_0, ALL(X), ALL(X), X, X, ALL(X), ALL(X)},
    {DSQ_FTYPE_IQ4_NL, DSQ_TYPE_IQ4_NL, DSQ_TYPE_Q6_K, ALL(DSQ_TYPE_Q5_K), ALL(X), X, X,
     {DSQ_TYPE_Q5_K, DSQ_TYPE_IQ4_NL, LT4}, ALL(X)},
    {DSQ_FTYPE_IQ4_XS, DSQ_TYPE_IQ4_XS, DSQ_TYPE_Q6_K, ALL(DSQ_TYPE_Q5_K), ALL(X), X, X,
     {DSQ_TYPE_Q5_K, DSQ_TYPE_IQ4_XS, LT4}, ALL(X)},
};

static dsq_type resolve(dsq_type t, dsq_type def) { return t == X ? def : t; }
static dsq_type lresolve(const lrule *r, int i, dsq_type def)
{
    return resolve(in_set(i, r->set) ? r->hi : r->lo, def);
}

/* The expected type of one tensor of the dense model. */
static dsq_type dense_expect(const dense_row *r, const char *name, bool gqa4, bool imatrix, bool tied)
{
    int L = layer_of(name);
    if (strstr(name, "_norm.weight")) return DSQ_TYPE_F32;
    if (!strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight"))) return r->output;
    if (strstr(name, "attn_v.weight")) return lresolve(gqa4 ? &r->attn_v_gqa4 : &r->attn_v_gqa1, L, r->def);
    if (strstr(name, "attn_output.weight")) return resolve(r->attn_output, r->def);
    if (strstr(name, "attn_qkv.weight")) return resolve(r->attn_qkv, r->def);
    if (strstr(name, "ffn_down")) return lresolve(imatrix ? &r->ffn_down_imatrix : &r->ffn_down, L, r->def);
    return r->def; /* token_embd (untied), attn_q, attn_k, ffn_gate, ffn_up */
}

static void check_dense(const dense_row *r, bool gqa4, bool imatrix, bool tied, bool fused)
{
    model *m = dense(32, 256, 512, 32, gqa4 ? 8 : 32, 1024, tied, fused);
    dsq_mix_options o = dsq_mix_options_default(r->ft);
    o.has_imatrix = imatrix;
    dsq_mix_stats stats;
    dsq_mix_choice *c = plan(m, &o, DSQ_OK, &stats);
    for (size_t i = 0; i < m->n; i++) {
        dsq_type want = dense_expect(r, m->t[i].name, gqa4, imatrix, tied);
        if (c[i].type != want)
            fail_msg("%s gqa4=%d imatrix=%d tied=%d fused=%d: %s got %s (%s), want %s", dsq_ftype_name(r->ft), gqa4,
                     imatrix, tied, fused, m->t[i].name, dsq_type_name(c[i].type), c[i].reason, dsq_type_name(want));
        assert_int_equal(c[i].quantize, want != DSQ_TYPE_F32);
        assert_false(c[i].fallback);
    }
    assert_int_equal(stats.n_fallback, 0);
    assert_int_equal(stats.n_attention_wv, 32);
    assert_int_equal(stats.has_output, !tied);
    free(c);
    free(m);
}

static void test_dense_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof DENSE / sizeof DENSE[0]; i++) {
        const dense_row *r = &DENSE[i];
        bool needs_imatrix = r->ft == DSQ_FTYPE_Q2_K_S;
        for (int gqa4 = 0; gqa4 < 2; gqa4++) {
            for (int im = needs_imatrix; im < 2; im++) {
                check_dense(r, gqa4, im, false, false);
                check_dense(r, gqa4, im, true, false);
            }
        }
        check_dense(r, true, needs_imatrix, false, true); /* fused attn_qkv */
    }
}

/* F16 / BF16 / F32 ftypes: no mix; every 2-D weight gets the type, 1-D stays. */
static void test_float_ftypes(void **state)
{
    (void)state;
    const dsq_ftype fts[] = {DSQ_FTYPE_F16, DSQ_FTYPE_BF16, DSQ_FTYPE_ALL_F32};
    const dsq_type want[] = {DSQ_TYPE_F16, DSQ_TYPE_BF16, DSQ_TYPE_F32};
    model *m = smollm2();
    for (int k = 0; k < 3; k++) {
        dsq_mix_options o = dsq_mix_options_default(fts[k]);
        dsq_mix_choice *c = plan(m, &o, DSQ_OK, NULL);
        for (size_t i = 0; i < m->n; i++) {
            bool one_d = m->t[i].n_dims == 1;
            expect_type(m->t[i].name, &c[i], one_d ? DSQ_TYPE_F32 : want[k]);
            assert_int_equal(c[i].quantize, !one_d && want[k] != DSQ_TYPE_F32);
        }
        free(c);
    }
    free(m);
}

/* ---- SmolLM2, worked by hand ----
 * N = 30, umb(i,30) = {0,1,2,5,8,11,14,17,20,23,26..29}; n_gqa = 9/3 = 3;
 * rows of 576 (576 % 256 = 64, 576 % 32 = 0) except ffn_down (1536 = 6 x 256);
 * no output.weight, so token_embd follows the output rule: 576 is not a
 * multiple of the k-quant block, so it becomes Q8_0 (rule A2) for every k-quant ftype. */

static const int UMB30[] = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29, -1};

static dsq_type smol_expect(dsq_ftype ft, const char *name)
{
    int L = layer_of(name);
    bool umb = in_set(L, UMB30);
    if (strstr(name, "_norm.weight")) return DSQ_TYPE_F32;
    if (!strcmp(name, "token_embd.weight")) return DSQ_TYPE_Q8_0;
    bool down = strstr(name, "ffn_down") != NULL;
    switch (ft) {
    case DSQ_FTYPE_Q4_K_M:
        /* ffn_down: umb ? Q6_K : Q4_K (fits 1536). 576-wide: Q4_K -> Q5_0, attn_v umb Q6_K -> Q8_0. */
        if (down) return umb ? DSQ_TYPE_Q6_K : DSQ_TYPE_Q4_K;
        if (strstr(name, "attn_v.weight")) return umb ? DSQ_TYPE_Q8_0 : DSQ_TYPE_Q5_0;
        return DSQ_TYPE_Q5_0;
    case DSQ_FTYPE_Q6_K: return down ? DSQ_TYPE_Q6_K : DSQ_TYPE_Q8_0;
    case DSQ_FTYPE_Q8_0: return DSQ_TYPE_Q8_0;
    case DSQ_FTYPE_Q2_K:
        /* ffn_down Q3_K (fits); attn_v (gqa 3 < 4) Q3_K, attn_output Q3_K, the rest Q2_K: all -> IQ4_NL. */
        return down ? DSQ_TYPE_Q3_K : DSQ_TYPE_IQ4_NL;
    default: fail_msg("no hand table for %d", ft);
    }
    return DSQ_TYPE_COUNT;
}

static void test_smollm2_fallback(void **state)
{
    (void)state;
    const dsq_ftype fts[] = {DSQ_FTYPE_Q4_K_M, DSQ_FTYPE_Q6_K, DSQ_FTYPE_Q8_0, DSQ_FTYPE_Q2_K};
    const int fallbacks[] = {180, 180, 0, 180}; /* 6 of the 7 per-layer weights are 576 wide, x30 */
    model *m = smollm2();
    assert_int_equal(m->n, 272);
    for (int k = 0; k < 4; k++) {
        dsq_mix_options o = dsq_mix_options_default(fts[k]);
        dsq_mix_stats stats;
        capture();
        dsq_mix_choice *c = plan(m, &o, DSQ_OK, &stats);
        dsq_log_set_sink(NULL, NULL);
        int n_fb = 0;
        for (size_t i = 0; i < m->n; i++) {
            expect_type(m->t[i].name, &c[i], smol_expect(fts[k], m->t[i].name));
            n_fb += c[i].fallback;
        }
        assert_int_equal(n_fb, fallbacks[k]);
        assert_int_equal(stats.n_fallback, fallbacks[k]);
        /* Every tensor through the mix: token_embd + 7 x 30 weights = 211 (llama.cpp: "180 of 211"). */
        assert_int_equal(stats.n_k_quantized + stats.n_fallback, 211);
        assert_int_equal(g_fallback_lines, fallbacks[k]);
        if (fallbacks[k]) {
            char want[128];
            snprintf(want, sizeof want, "%d of 211 tensor(s) required fallback quantization", fallbacks[k]);
            assert_non_null(strstr(g_summary, want));
        } else {
            assert_int_equal(g_summary[0], '\0');
        }
        assert_int_equal(stats.n_copy, 61); /* 1-D norms */
        free(c);
    }
    free(m);
}

/* The fallback message carries llama.cpp's wording and the tensor. */
static char g_first_fallback[256];
static void sink_first(dsq_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level == DSQ_LOG_WARN && strstr(msg, "not divisible") && !g_first_fallback[0])
        snprintf(g_first_fallback, sizeof g_first_fallback, "%s", msg);
}

static void test_fallback_message(void **state)
{
    (void)state;
    model *m = smollm2();
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    g_first_fallback[0] = '\0';
    dsq_log_set_sink(sink_first, NULL);
    dsq_mix_choice *c = plan(m, &o, DSQ_OK, NULL);
    dsq_log_set_sink(NULL, NULL);
    /* First fallback in llama.cpp's order: blk.0.attn_k.weight (576 x 192). */
    assert_non_null(strstr(g_first_fallback, "blk.0.attn_k.weight"));
    assert_non_null(strstr(g_first_fallback, "tensor cols 576 x 192 are not divisible by 256, required for q4_K"));
    assert_non_null(strstr(g_first_fallback, "using fallback quantization q5_0"));
    free(c);
    free(m);
}

/* Rows that not even the 32-element fallback fits become F16; types without a
 * fallback are an error naming the tensor. */
static void test_fallback_f16_and_unsupported(void **state)
{
    (void)state;
    model *m = dense(8, 256, 512, 8, 8, 1000, false, false);
    add(m, "blk.0.extra_odd.weight", DSQ_TYPE_F32, 2, 100, 16, 1);
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    dsq_mix_choice *c = plan(m, &o, DSQ_OK, NULL);
    expect_type("odd", &c[m->n - 1], DSQ_TYPE_F16);
    assert_true(c[m->n - 1].fallback);
    free(c);
    o = dsq_mix_options_default(DSQ_FTYPE_Q8_0);
    c = plan(m, &o, DSQ_ERR_UNSUPPORTED, NULL);
    assert_non_null(strstr(dsq_errmsg(), "blk.0.extra_odd.weight"));
    free(c);
    free(m);
}

/* ---- --pure ---- */

static void test_pure(void **state)
{
    (void)state;
    model *m = smollm2();
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q8_0);
    o.pure = true;
    dsq_mix_stats stats;
    dsq_mix_choice *c = plan(m, &o, DSQ_OK, &stats);
    for (size_t i = 0; i < m->n; i++)
        expect_type(m->t[i].name, &c[i], m->t[i].n_dims == 1 ? DSQ_TYPE_F32 : DSQ_TYPE_Q8_0);
    assert_int_equal(stats.n_fallback + stats.n_k_quantized, 0); /* the mix never ran */
    free(c);
    /* No fallback with --pure: llama.cpp aborts on the 576-wide rows; we fail naming the first one. */
    o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    o.pure = true;
    c = plan(m, &o, DSQ_ERR_ARG, NULL);
    assert_non_null(strstr(dsq_errmsg(), "token_embd.weight"));
    assert_non_null(strstr(dsq_errmsg(), "--pure"));
    free(c);
    free(m);
    /* Rows that fit: every 2-D weight gets the default, output and token_embd included. */
    m = dense(32, 256, 512, 32, 8, 1024, false, false);
    o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    o.pure = true;
    c = plan(m, &o, DSQ_OK, NULL);
    for (size_t i = 0; i < m->n; i++)
        expect_type(m->t[i].name, &c[i], m->t[i].n_dims == 1 ? DSQ_TYPE_F32 : DSQ_TYPE_Q4_K);
    free(c);
    /* The explicit overrides still apply after --pure. */
    o.output_type = DSQ_TYPE_Q8_0;
    o.token_embd_type = DSQ_TYPE_Q6_K;
    c = plan(m, &o, DSQ_OK, NULL);
    for (size_t i = 0; i < m->n; i++) {
        const char *n = m->t[i].name;
        dsq_type want = !strcmp(n, "output.weight")       ? DSQ_TYPE_Q8_0
                        : !strcmp(n, "token_embd.weight") ? DSQ_TYPE_Q6_K
                        : m->t[i].n_dims == 1            ? DSQ_TYPE_F32
                                                         : DSQ_TYPE_Q4_K;
        expect_type(n, &c[i], want);
    }
    free(c);
    free(m);
}

/* ---- options ---- */

static const dsq_mix_choice *find(const model *m, const dsq_mix_choice *c, const char *name)
{
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->t[i].name, name)) return &c[i];
    fail_msg("no tensor %s", name);
    return NULL;
}

static void test_leave_output_and_overrides(void **state)
{
    (void)state;
    model *m = dense(32, 256, 512, 32, 8, 1024, false, false);
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    o.leave_output = true;
    dsq_mix_choice *c = plan(m, &o, DSQ_OK, NULL);
    const dsq_mix_choice *out = find(m, c, "output.weight");
    assert_false(out->quantize);
    assert_int_equal(out->type, DSQ_TYPE_F32);
    /* has_output stays true: token_embd is not treated as the output. */
    expect_type("token_embd.weight", find(m, c, "token_embd.weight"), DSQ_TYPE_Q4_K);
    free(c);

    o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    o.output_type = DSQ_TYPE_Q8_0;
    o.token_embd_type = DSQ_TYPE_Q4_0;
    c = plan(m, &o, DSQ_OK, NULL);
    expect_type("output.weight", find(m, c, "output.weight"), DSQ_TYPE_Q8_0);
    expect_type("token_embd.weight", find(m, c, "token_embd.weight"), DSQ_TYPE_Q4_0);
    expect_type("blk.0.attn_v.weight", find(m, c, "blk.0.attn_v.weight"), DSQ_TYPE_Q6_K);
    free(c);
    free(m);

    /* Tied model: --output-tensor-type reaches token_embd through rule A. */
    m = dense(32, 256, 512, 32, 8, 1024, true, false);
    o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    o.output_type = DSQ_TYPE_Q5_K;
    c = plan(m, &o, DSQ_OK, NULL);
    expect_type("token_embd.weight", find(m, c, "token_embd.weight"), DSQ_TYPE_Q5_K);
    free(c);
    free(m);

    /* An override the row does not fit: llama.cpp asserts; we fail naming it. */
    m = smollm2();
    o = dsq_mix_options_default(DSQ_FTYPE_Q8_0);
    o.token_embd_type = DSQ_TYPE_Q4_K;
    c = plan(m, &o, DSQ_ERR_ARG, NULL);
    assert_non_null(strstr(dsq_errmsg(), "token_embd.weight"));
    free(c);
    free(m);
}

static void test_q2_k_s_needs_imatrix(void **state)
{
    (void)state;
    model *m = dense(8, 256, 512, 8, 8, 1000, false, false);
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q2_K_S);
    dsq_mix_choice *c = plan(m, &o, DSQ_ERR_ARG, NULL);
    assert_non_null(strstr(dsq_errmsg(), "importance matrix"));
    free(c);
    free(m);
}

/* Source types: same type -> copied; quantized source needs allow_requantize. */
static void test_requantize(void **state)
{
    (void)state;
    model *m = dense(8, 256, 512, 8, 8, 1000, false, false);
    for (size_t i = 0; i < m->n; i++)
        if (m->t[i].n_dims == 2) m->t[i].type = DSQ_TYPE_Q4_1;
    m->t[0].type = DSQ_TYPE_Q4_K; /* token_embd already in the target type */
    assert_string_equal(m->t[0].name, "token_embd.weight");
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    dsq_mix_choice *c = plan(m, &o, DSQ_ERR_ARG, NULL);
    assert_non_null(strstr(dsq_errmsg(), "requantizing from type q4_1"));
    assert_non_null(strstr(dsq_errmsg(), "output.weight")); /* first in llama.cpp order: output < output_norm < token_embd */
    free(c);
    o.allow_requantize = true;
    c = plan(m, &o, DSQ_OK, NULL);
    assert_false(c[0].quantize); /* q4_K -> q4_K: copied */
    assert_int_equal(c[0].type, DSQ_TYPE_Q4_K);
    expect_type("output.weight", find(m, c, "output.weight"), DSQ_TYPE_Q6_K);
    assert_true(find(m, c, "output.weight")->quantize);
    free(c);
    free(m);
}

/* ---- visiting order and counters ---- */

static void test_order(void **state)
{
    (void)state;
    model *m = calloc(1, sizeof *m);
    const char *names[] = {"blk.10.attn_v.weight", "blk.2.ffn_up.weight", "output.weight", "blk.2.attn_k.weight",
                           "token_embd.weight", "blk.0.ffn_down.weight", "output_norm.weight", "blk.-1.odd.weight"};
    for (size_t i = 0; i < 8; i++) add(m, names[i], DSQ_TYPE_F32, 2, 32, 32, 1);
    size_t order[8];
    assert_int_equal(dsq_mix_order(m->t, 8, order), DSQ_OK);
    /* Layer -1 (no blk. prefix, or blk.-1.) first, by strcmp; then layers ascending. */
    const char *want[] = {"blk.-1.odd.weight", "output.weight", "output_norm.weight", "token_embd.weight",
                          "blk.0.ffn_down.weight", "blk.2.attn_k.weight", "blk.2.ffn_up.weight", "blk.10.attn_v.weight"};
    for (size_t k = 0; k < 8; k++) assert_string_equal(m->t[order[k]].name, want[k]);
    add(m, "output.weight", DSQ_TYPE_F32, 2, 32, 32, 1);
    size_t order9[9];
    assert_int_equal(dsq_mix_order(m->t, 9, order9), DSQ_ERR_FORMAT);
    free(m);
}

/* The counters follow llama.cpp's order whatever order the caller uses. */
static void test_input_order_irrelevant(void **state)
{
    (void)state;
    model *a = dense(32, 256, 512, 32, 8, 1024, false, false);
    model *b = calloc(1, sizeof *b);
    for (size_t i = a->n; i-- > 0;) add(b, a->t[i].name, a->t[i].type, a->t[i].n_dims, a->t[i].ne[0], a->t[i].ne[1], 1);
    b->facts = a->facts;
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q3_K_M);
    dsq_mix_choice *ca = plan(a, &o, DSQ_OK, NULL), *cb = plan(b, &o, DSQ_OK, NULL);
    for (size_t i = 0; i < a->n; i++) assert_int_equal(ca[i].type, cb[a->n - 1 - i].type);
    /* Q3_K_M attn_v: i_attention_wv < 2 -> Q5_K: only layers 0 and 1. */
    expect_type("blk.1.attn_v.weight", find(b, cb, "blk.1.attn_v.weight"), DSQ_TYPE_Q5_K);
    expect_type("blk.2.attn_v.weight", find(b, cb, "blk.2.attn_v.weight"), DSQ_TYPE_Q4_K);
    expect_type("blk.10.attn_v.weight", find(b, cb, "blk.10.attn_v.weight"), DSQ_TYPE_Q4_K);
    free(ca);
    free(cb);
    free(a);
    free(b);
}

/* ---- special models ---- */

static void test_70b(void **state)
{
    (void)state;
    assert_true(dsq_mix_guess_70b("llama", 80, 64, 8, 0));
    assert_false(dsq_mix_guess_70b("llama", 80, 64, 64, 0)); /* LLaMA-1 65B */
    assert_false(dsq_mix_guess_70b("llama", 32, 32, 8, 0));
    assert_false(dsq_mix_guess_70b("llama", 80, 64, 8, 8));
    model *m = dense(80, 256, 512, 64, 8, 1024, false, false);
    m->facts.is_70b = true;
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q3_K_M);
    dsq_mix_choice *c = plan(m, &o, DSQ_OK, NULL);
    /* Q3_K_M attn_v is Q5_K (iv < 2) or Q4_K; the 70B bump makes every one Q5_K. */
    for (size_t i = 0; i < m->n; i++)
        if (strstr(m->t[i].name, "attn_v.weight")) expect_type(m->t[i].name, &c[i], DSQ_TYPE_Q5_K);
    free(c);
    free(m);
}

static model *moe(int n_layer, int n_expert)
{
    model *m = calloc(1, sizeof *m);
    add(m, "token_embd.weight", DSQ_TYPE_F32, 2, 256, 1024, 1);
    add(m, "output.weight", DSQ_TYPE_F32, 2, 256, 1024, 1);
    add(m, "output_norm.weight", DSQ_TYPE_F32, 1, 256, 1, 1);
    for (int i = 0; i < n_layer; i++) {
        char name[64];
        const char *two_d[] = {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight"};
        for (int k = 0; k < 4; k++) addl(m, i, two_d[k], 2, 256, 256);
        addl(m, i, "ffn_gate_inp.weight", 2, 256, n_expert);
        addl(m, i, "attn_norm.weight", 1, 256, 1);
        snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", i);
        add(m, name, DSQ_TYPE_F32, 3, 512, 256, n_expert);
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", i);
        add(m, name, DSQ_TYPE_F32, 3, 256, 512, n_expert);
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", i);
        add(m, name, DSQ_TYPE_F32, 3, 256, 512, n_expert);
    }
    m->facts = (dsq_mix_model){.arch = "llama", .n_layer = n_layer, .n_head = 8, .n_head_kv = 8, .n_expert = n_expert};
    return m;
}

static void test_moe(void **state)
{
    (void)state;
    model *m = moe(32, 8);
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    dsq_mix_choice *c = plan(m, &o, DSQ_OK, NULL);
    for (size_t i = 0; i < m->n; i++) {
        const char *n = m->t[i].name;
        int L = layer_of(n);
        dsq_type want = DSQ_TYPE_Q4_K;
        if (strstr(n, "_norm") || strstr(n, "ffn_gate_inp")) want = DSQ_TYPE_F32;
        else if (!strcmp(n, "output.weight")) want = DSQ_TYPE_Q6_K;
        else if (strstr(n, "attn_v.weight") || strstr(n, "attn_k.weight")) want = DSQ_TYPE_Q8_0;
        else if (strstr(n, "attn_output.weight")) want = DSQ_TYPE_Q5_K;
        else if (strstr(n, "ffn_down_exps")) want = in_set(L, UMB32) ? DSQ_TYPE_Q6_K : DSQ_TYPE_Q4_K;
        expect_type(n, &c[i], want);
    }
    free(c);
    /* Q5_K_M with 8 experts: attn_output keeps the default. */
    o = dsq_mix_options_default(DSQ_FTYPE_Q5_K_M);
    c = plan(m, &o, DSQ_OK, NULL);
    expect_type("attn_output", find(m, c, "blk.3.attn_output.weight"), DSQ_TYPE_Q5_K);
    expect_type("attn_k", find(m, c, "blk.3.attn_k.weight"), DSQ_TYPE_Q8_0);
    free(c);
    /* An expert tensor whose name has no layer, or a layer out of range. */
    add(m, "stray.ffn_down_exps.weight", DSQ_TYPE_F32, 3, 512, 256, 8);
    o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    c = plan(m, &o, DSQ_ERR_FORMAT, NULL);
    assert_non_null(strstr(dsq_errmsg(), "stray.ffn_down_exps.weight"));
    free(c);
    snprintf(m->names[m->n - 1], sizeof m->names[0], "blk.40.ffn_down_exps.weight");
    c = plan(m, &o, DSQ_ERR_FORMAT, NULL);
    assert_non_null(strstr(dsq_errmsg(), "bad layer 40"));
    free(c);
    free(m);
}

static void test_falcon(void **state)
{
    (void)state;
    model *m = dense(32, 256, 512, 32, 32, 1024, false, false);
    m->facts.arch = "falcon";
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    dsq_mix_choice *c = plan(m, &o, DSQ_OK, NULL);
    expect_type("output", find(m, c, "output.weight"), DSQ_TYPE_Q8_0);
    /* L < 32/16 -> Q6_K; umb -> Q5_K; else Q4_K. */
    expect_type("down0", find(m, c, "blk.1.ffn_down.weight"), DSQ_TYPE_Q6_K);
    expect_type("down2", find(m, c, "blk.2.ffn_down.weight"), DSQ_TYPE_Q5_K);
    expect_type("down4", find(m, c, "blk.4.ffn_down.weight"), DSQ_TYPE_Q4_K);
    expect_type("down6", find(m, c, "blk.6.ffn_down.weight"), DSQ_TYPE_Q5_K);
    free(c);
    o = dsq_mix_options_default(DSQ_FTYPE_Q3_K_M);
    c = plan(m, &o, DSQ_OK, NULL);
    expect_type("down1", find(m, c, "blk.1.ffn_down.weight"), DSQ_TYPE_Q5_K);
    expect_type("down5", find(m, c, "blk.5.ffn_down.weight"), DSQ_TYPE_Q3_K);
    expect_type("down6", find(m, c, "blk.6.ffn_down.weight"), DSQ_TYPE_Q4_K);
    expect_type("attn_output", find(m, c, "blk.6.attn_output.weight"), DSQ_TYPE_Q3_K);
    free(c);
    free(m);
}

static void test_never_quantized(void **state)
{
    (void)state;
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q8_0);
    const char *why = NULL;
    assert_false(dsq_mix_is_quantizable("blk.0.attn_q.bias", 2, &o, &why));
    assert_false(dsq_mix_is_quantizable("blk.0.attn_norm.weight", 2, &o, &why));
    assert_false(dsq_mix_is_quantizable("blk.0.ffn_gate_inp.weight", 2, &o, &why));
    assert_false(dsq_mix_is_quantizable("position_embd.weight", 2, &o, &why));
    assert_false(dsq_mix_is_quantizable("blk.0.ssm_conv1d.weight", 2, &o, &why));
    assert_false(dsq_mix_is_quantizable("blk.0.attn_rel_b.weight", 2, &o, &why));
    assert_false(dsq_mix_is_quantizable("blk.0.time_mix_first.weight", 2, &o, &why));
    assert_false(dsq_mix_is_quantizable("blk.0.attn_q.weight", 1, &o, &why));
    assert_string_equal(why, "1-D tensor");
    assert_true(dsq_mix_is_quantizable("blk.0.attn_q.weight", 2, &o, &why));
    assert_true(dsq_mix_is_quantizable("blk.0.ffn_up_exps.weight", 3, &o, &why));
    o.leave_output = true;
    assert_false(dsq_mix_is_quantizable("output.weight", 2, &o, &why));
    /* ggml_n_dims ignores trailing 1s: a [576, 1] tensor is 1-D. */
    const int64_t ne[4] = {576, 1, 1, 1}, ne3[4] = {64, 32, 8, 1};
    assert_int_equal(dsq_mix_ggml_n_dims(ne), 1);
    assert_int_equal(dsq_mix_ggml_n_dims(ne3), 3);
}

static void test_attn_count_mismatch(void **state)
{
    (void)state;
    model *m = dense(8, 256, 512, 8, 8, 1000, false, false);
    m->facts.n_layer = 9;
    dsq_mix_options o = dsq_mix_options_default(DSQ_FTYPE_Q4_K_M);
    dsq_mix_choice *c = plan(m, &o, DSQ_ERR_FORMAT, NULL);
    assert_non_null(strstr(dsq_errmsg(), "8 attn_v"));
    free(c);
    m->facts.n_attn_layer = 8; /* e.g. a hybrid model with one attention-free layer */
    c = plan(m, &o, DSQ_OK, NULL);
    free(c);
    free(m);
}

/* ---- fixtures from the real llama_model_quantize ---- */

typedef struct fixture {
    model m;
    dsq_type want[MAX_T];
    dsq_mix_options opt;
    bool expect_fail;
    int fallback_total; /* from "# N of M tensor(s) required ..." or -1 */
    int fallback_n;
} fixture;

static int header_int(const char *h, const char *key)
{
    const char *p = strstr(h, key);
    assert_non_null(p);
    return atoi(p + strlen(key));
}

static void parse_header(fixture *f, const char *h, char *arch, size_t cap)
{
    const char *a = strstr(h, "arch=");
    assert_non_null(a);
    sscanf(a + 5, "%31s", arch);
    (void)cap;
    f->m.facts = (dsq_mix_model){.arch = arch, .n_layer = header_int(h, "n_layer="), .n_head = header_int(h, "n_head="),
                                 .n_head_kv = header_int(h, "n_head_kv="), .n_expert = header_int(h, "n_expert=")};
    char ft[32];
    sscanf(strstr(h, "ftype=") + 6, "%31s", ft);
    dsq_ftype fty;
    assert_int_equal(dsq_ftype_from_name(ft, &fty), DSQ_OK);
    f->opt = dsq_mix_options_default(fty);
    f->opt.pure = strstr(h, "pure=True") != NULL;
    f->opt.leave_output = strstr(h, "leave_output=True") != NULL;
    f->opt.has_imatrix = strstr(h, "imatrix=True") != NULL;
    if (strstr(h, "output_type=")) f->opt.output_type = (dsq_type)header_int(h, "output_type=");
    if (strstr(h, "embd_type=")) f->opt.token_embd_type = (dsq_type)header_int(h, "embd_type=");
}

static void parse_tensor_line(fixture *f, char *line)
{
    char name[64], shape[64], type[16];
    if (sscanf(line, "%63s %63s %15s", name, shape, type) != 3) fail_msg("bad fixture line: %s", line);
    int64_t ne[4] = {1, 1, 1, 1};
    int nd = 0;
    for (char *tok = strtok(shape, "x"); tok && nd < 4; tok = strtok(NULL, "x")) ne[nd++] = atoll(tok);
    add(&f->m, name, DSQ_TYPE_F32, nd, ne[0], ne[1], ne[2]);
    dsq_type t;
    if (dsq_type_from_name(type, &t) != DSQ_OK) fail_msg("fixture type %s", type);
    f->want[f->m.n - 1] = t;
}

static void load_fixture(fixture *f, const char *path, char *arch)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char line[512];
    memset(f, 0, sizeof *f);
    f->fallback_total = -1;
    f->expect_fail = strstr(path, ".fail") != NULL;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') {
            if (strstr(line, "arch=")) parse_header(f, line, arch, 32);
            if (strstr(line, "required fallback")) {
                const char *p = strstr(line, "WARNING: ");
                if (p) sscanf(p + 9, "%d of %d", &f->fallback_n, &f->fallback_total);
            }
            continue;
        }
        if (line[0] != '\n') parse_tensor_line(f, line);
    }
    fclose(fp);
}

/* The tensor list of a failed run comes from the matching successful run of the same model. */
static void check_fixture(const char *dir, const char *file)
{
    char path[1024], arch[32];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    fixture *f = calloc(1, sizeof *f);
    load_fixture(f, path, arch);
    if (f->expect_fail) {
        /* Shapes: the same model's Q8_0 run. */
        char other[1024], arch2[32];
        fixture *g = calloc(1, sizeof *g);
        const char *us = strchr(file, '_');
        snprintf(other, sizeof other, "%s/%.*s_Q8_0.txt", dir, (int)(us - file), file);
        load_fixture(g, other, arch2);
        g->opt = f->opt;
        g->m.facts.arch = arch;
        dsq_mix_choice *c = calloc(g->m.n, sizeof *c);
        if (dsq_mix_plan(&g->m.facts, &g->opt, g->m.t, g->m.n, c, NULL) == DSQ_OK)
            fail_msg("%s: llama.cpp failed this run, our plan did not", file);
        free(c);
        free(g);
        free(f);
        return;
    }
    /* Reverse the file order: the plan must find llama.cpp's order itself. */
    model *rev = calloc(1, sizeof *rev);
    for (size_t i = f->m.n; i-- > 0;)
        add(rev, f->m.t[i].name, f->m.t[i].type, f->m.t[i].n_dims, f->m.t[i].ne[0], f->m.t[i].ne[1], f->m.t[i].ne[2]);
    rev->facts = f->m.facts;
    dsq_mix_choice *c = calloc(rev->n, sizeof *c);
    dsq_mix_stats stats;
    dsq_log_set_level(DSQ_LOG_ERROR);
    dsq_status st = dsq_mix_plan(&rev->facts, &f->opt, rev->t, rev->n, c, &stats);
    if (st != DSQ_OK) fail_msg("%s: plan failed: %s", file, dsq_errmsg());
    for (size_t i = 0; i < rev->n; i++) {
        dsq_type want = f->want[f->m.n - 1 - i];
        if (c[i].type != want)
            fail_msg("%s: %s: ours %s (%s), llama.cpp %s", file, rev->t[i].name, dsq_type_name(c[i].type), c[i].reason,
                     dsq_type_name(want));
    }
    if (f->fallback_total >= 0) {
        assert_int_equal(stats.n_fallback, f->fallback_n);
        assert_int_equal(stats.n_fallback + stats.n_k_quantized, f->fallback_total);
    } else {
        assert_int_equal(stats.n_fallback, 0);
    }
    free(c);
    free(rev);
    free(f);
}

static void test_llama_cpp_fixtures(void **state)
{
    (void)state;
    const char *dir = DSQ_SOURCE_DIR "/tests/data/mixes";
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        bool txt = len > 4 && !strcmp(e->d_name + len - 4, ".txt");
        bool fail = len > 5 && !strcmp(e->d_name + len - 5, ".fail");
        if (!txt && !fail) continue;
        check_fixture(dir, e->d_name);
        n++;
    }
    closedir(d);
    /* README lists the runs; losing some would silently weaken this test. */
    assert_true(n >= 40);
    dsq_log_set_level(DSQ_LOG_INFO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ftype_names),
        cmocka_unit_test(test_use_more_bits),
        cmocka_unit_test(test_dense_table),
        cmocka_unit_test(test_float_ftypes),
        cmocka_unit_test(test_smollm2_fallback),
        cmocka_unit_test(test_fallback_message),
        cmocka_unit_test(test_fallback_f16_and_unsupported),
        cmocka_unit_test(test_pure),
        cmocka_unit_test(test_leave_output_and_overrides),
        cmocka_unit_test(test_q2_k_s_needs_imatrix),
        cmocka_unit_test(test_requantize),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_input_order_irrelevant),
        cmocka_unit_test(test_70b),
        cmocka_unit_test(test_moe),
        cmocka_unit_test(test_falcon),
        cmocka_unit_test(test_never_quantized),
        cmocka_unit_test(test_attn_count_mismatch),
        cmocka_unit_test(test_llama_cpp_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
