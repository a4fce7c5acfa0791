/* SmoothQuant W8A8 and FP8 (calibration/method_smoothquant.c, method_fp8.c,
 * smooth.c, w8_layer.c):
 * - folding the smoothing scales keeps the float model's logits (tiny Llama
 *   without GQA, tiny Qwen2 with GQA and q/k/v biases, default groups and
 *   --smooth-all; the real default model when present);
 * - on inputs with a few outlier channels, smoothed W8A8 has a clearly lower
 *   output error than plain W8A8;
 * - alpha auto never does worse than its start alpha on its own objective;
 * - the max |x| statistic and the static input scales equal a brute-force
 *   max over the inputs of the quantized model; the FP8 KV scales;
 * - GPTQ's 8-bit codes on the INT8 grid;
 * - NaN/Inf in weights and activations named; CLI refusals (the format x
 *   scheme matrix itself is formats/pack_w8.c's, tested by test_w8_artifacts). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "calibration/dataset.h"
#include "calibration/sequential.h"
#include "calibration/smooth.h"
#include "core/fileio.h"
#include "core/status.h"
#include "formats/block.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "quantizers/gptq.h"
#include "quantizers/w8.h"
#include "runtime/forward.h"
#include "runtime/linear.h"
#include "runtime/model.h"
#include "tests/helpers/testutil.h"

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("status %d: %s", (int)s, dsq_errmsg());
}

/* ---------------------------------------------------------------- tiny models */

#define T_DIM 64
#define T_FFN 128
#define T_LAYERS 2
#define T_VOCAB 96
#define T_LEN 32

/* Outlier channels of the norms' output (real LLMs have a few such). */
static const int g_outlier[] = {5, 23, 41};

typedef struct tiny_spec {
    bool qwen2;    /* Qwen2 block: q/k/v biases; with GQA (2 KV heads of 4) */
    float outlier; /* norm weight of the outlier channels (0: none) */
    int nan_layer; /* >= 0: a NaN in this layer's mlp.up_proj weight */
    int nan_token; /* >= 0: a NaN in this token's embedding */
} tiny_spec;

static float randn(uint64_t *seed) { return dsq_test_randn(seed); }

static void write_rand(dsq_st_writer *w, size_t n, float sc, float off, uint64_t *seed, int64_t nan_at)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = off + sc * randn(seed);
    if (nan_at >= 0) v[nan_at] = NAN;
    expect_ok(dsq_st_writer_write(w, v, n * sizeof(float)));
    free(v);
}

static dsq_arch tiny_arch(const tiny_spec *t)
{
    dsq_arch a;
    memset(&a, 0, sizeof a);
    a.family = t->qwen2 ? DSQ_ARCH_QWEN2 : DSQ_ARCH_LLAMA;
    snprintf(a.hf_architecture, sizeof a.hf_architecture, t->qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
    snprintf(a.model_type, sizeof a.model_type, t->qwen2 ? "qwen2" : "llama");
    a.hidden_size = T_DIM, a.intermediate_size = T_FFN, a.n_layers = T_LAYERS, a.n_heads = 4;
    a.n_kv_heads = t->qwen2 ? 2 : 4;
    a.head_dim = 16, a.vocab_size = T_VOCAB, a.max_position_embeddings = 512, a.rms_norm_eps = 1e-5;
    a.rope_theta = 10000, a.bos_token_id = 1, a.eos_token_id = 2;
    snprintf(a.torch_dtype, sizeof a.torch_dtype, "float32");
    return a;
}

/* An F32 HF folder under dir, every tensor named from the block description. */
static char *tiny_model(const char *dir, const char *sub, const tiny_spec *t)
{
    dsq_arch a = tiny_arch(t);
    const dsq_block_desc *d = dsq_block_desc_of(&a);
    char *path = malloc(strlen(dir) + strlen(sub) + 2);
    sprintf(path, "%s/%s", dir, sub);
    assert_int_equal(mkdir(path, 0755), 0);
    char *json;
    expect_ok(dsq_arch_to_hf_json(&a, &json));
    free(dsq_test_write(path, "config.json", json, strlen(json)));
    free(json);
    dsq_st_writer *w;
    expect_ok(dsq_st_writer_new(path, "model", 1ull << 30, &w));
    int64_t sh[2] = {T_VOCAB, T_DIM};
    expect_ok(dsq_st_writer_add(w, "model.embed_tokens.weight", DSQ_TYPE_F32, 2, sh));
    expect_ok(dsq_st_writer_add(w, "lm_head.weight", DSQ_TYPE_F32, 2, sh));
    sh[0] = T_DIM;
    expect_ok(dsq_st_writer_add(w, "model.norm.weight", DSQ_TYPE_F32, 1, sh));
    char name[160];
    for (int l = 0; l < T_LAYERS; l++) {
        for (int i = 0; i < d->n_norms; i++) {
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, d->norms[i].hf);
            expect_ok(dsq_st_writer_add(w, name, DSQ_TYPE_F32, 1, sh));
        }
        for (int id = 0; id < d->n_linears; id++) {
            int64_t s2[2];
            dsq_block_linear_shape(d, &a, id, &s2[0], &s2[1]);
            snprintf(name, sizeof name, "model.layers.%d.%s.weight", l, d->linears[id].hf);
            expect_ok(dsq_st_writer_add(w, name, DSQ_TYPE_F32, 2, s2));
            if (!dsq_block_linear_has_bias(&d->linears[id], &a)) continue;
            snprintf(name, sizeof name, "model.layers.%d.%s.bias", l, d->linears[id].hf);
            expect_ok(dsq_st_writer_add(w, name, DSQ_TYPE_F32, 1, s2));
        }
    }
    expect_ok(dsq_st_writer_begin(w));
    uint64_t seed = 99;
    write_rand(w, T_VOCAB * T_DIM, 1.0f, 0, &seed, t->nan_token >= 0 ? t->nan_token * T_DIM + 7 : -1);
    write_rand(w, T_VOCAB * T_DIM, 0.1f, 0, &seed, -1);
    write_rand(w, T_DIM, 0.1f, 1, &seed, -1);
    for (int l = 0; l < T_LAYERS; l++) {
        for (int i = 0; i < d->n_norms; i++) {
            float v[T_DIM];
            for (int c = 0; c < T_DIM; c++) v[c] = 1.0f + 0.1f * randn(&seed);
            for (size_t k = 0; t->outlier > 0 && k < sizeof g_outlier / sizeof g_outlier[0]; k++)
                v[g_outlier[k]] = t->outlier * (k % 2 ? -1.0f : 1.0f);
            expect_ok(dsq_st_writer_write(w, v, sizeof v));
        }
        for (int id = 0; id < d->n_linears; id++) {
            int64_t out, in;
            dsq_block_linear_shape(d, &a, id, &out, &in);
            bool nan = l == t->nan_layer && !strcmp(d->linears[id].role, "up");
            write_rand(w, (size_t)(out * in), 0.12f, 0, &seed, nan ? 3 * in + 2 : -1);
            if (dsq_block_linear_has_bias(&d->linears[id], &a)) write_rand(w, (size_t)out, 0.2f, 0, &seed, -1);
        }
    }
    expect_ok(dsq_st_writer_finish(w));
    dsq_st_writer_free(w);
    return path;
}

static const tiny_spec g_llama = {false, 30.0f, -1, -1};
static const tiny_spec g_qwen2 = {true, 30.0f, -1, -1};

static dsq_calib_set tiny_calib(int n, int len, int64_t vocab)
{
    enum { N = 3000 };
    int32_t *ids = malloc(N * sizeof *ids);
    uint64_t seed = 5;
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(dsq_test_rand(&seed) % (uint64_t)vocab);
    dsq_calib_opts o = {NULL, n, len, 3};
    dsq_calib_set c;
    expect_ok(dsq_calib_sample(ids, N, &o, &c));
    free(ids);
    return c;
}

/* Logits of every calibration window: n x len x vocab. */
static float *logits(dsq_model *m, const dsq_calib_set *c)
{
    dsq_ctx *ctx;
    expect_ok(dsq_ctx_new(m, c->seqlen, 2, &ctx));
    size_t per = (size_t)c->seqlen * (size_t)m->vocab;
    float *lg = malloc(per * (size_t)c->n_samples * sizeof *lg);
    for (int i = 0; i < c->n_samples; i++)
        expect_ok(dsq_forward(ctx, c->tokens + (size_t)i * c->seqlen, c->seqlen, 0, lg + (size_t)i * per));
    dsq_ctx_free(ctx);
    return lg;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - (double)b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / den;
}

static dsq_seq_opts sq_opts(void)
{
    dsq_seq_opts o = dsq_seq_w8_default_opts(&dsq_method_smoothquant);
    o.threads = 2;
    return o;
}

/* ---------------------------------------------------------------- (a) folding */

/* Smoothing alone (nothing quantized) must leave the model's function. */
static void check_fold(const char *path, const dsq_calib_set *c, bool smooth_all, int64_t want_smoothed)
{
    dsq_model *m;
    expect_ok(dsq_model_open(path, &m));
    float *ref = logits(m, c);
    float n0 = m->layers[0].norm[0][g_outlier[0]];
    dsq_seq_opts o = sq_opts();
    o.w8.smooth_only = true;
    o.w8.smooth_all = smooth_all;
    o.keep_fake_quant = true;
    dsq_seq_report rep;
    dsq_seq_keep *keep = NULL;
    expect_ok(dsq_seq_quantize(m, c, &o, &rep, &keep));
    if (want_smoothed >= 0) assert_int_equal(rep.n_smoothed, want_smoothed);
    assert_int_equal(rep.n_quantized, 0);
    assert_true(m->layers[0].norm[0][g_outlier[0]] != n0); /* the scales went into the norm */
    float *lg = logits(m, c);
    double rd = rel_diff(lg, ref, (size_t)c->n_samples * (size_t)c->seqlen * (size_t)m->vocab);
    print_message("fold %s%s: %lld groups, relative logit change %.3g\n", path, smooth_all ? " (smooth-all)" : "",
                  (long long)rep.n_smoothed, rd);
    assert_true(rd < 1e-4);
    free(lg);
    free(ref);
    dsq_model_close(m);
    dsq_seq_keep_free(keep);
}

static void test_fold_keeps_logits(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char *llama = tiny_model(dir, "llama", &g_llama), *qwen = tiny_model(dir, "qwen2", &g_qwen2);
    dsq_calib_set c = tiny_calib(4, T_LEN, T_VOCAB);
    check_fold(llama, &c, false, 2 * T_LAYERS);
    check_fold(llama, &c, true, 4 * T_LAYERS); /* no GQA: v -> o too */
    check_fold(qwen, &c, false, 2 * T_LAYERS);
    check_fold(qwen, &c, true, 3 * T_LAYERS); /* GQA: v -> o is left alone */
    dsq_calib_free(&c);
    free(llama);
    free(qwen);
    dsq_test_rmtmp(dir);
}

static void test_fold_default_model(void **state)
{
    (void)state;
    char *model = dsq_test_default_model();
    if (!model) DSQ_TEST_SKIP();
    dsq_model *m;
    expect_ok(dsq_model_open(model, &m));
    dsq_calib_set c = tiny_calib(1, 16, m->vocab);
    dsq_model_close(m);
    check_fold(model, &c, true, 30 * 3); /* the default groups and up -> down (GQA: no v -> o) */
    dsq_calib_free(&c);
    free(model);
}

/* ---------------------------------------------------------------- (b), (c) the objective */

/* X [n x cols] with a few outlier channels (50-100x), W [rows x cols]. */
static void outlier_case(uint64_t seed, int64_t n, int64_t cols, int64_t rows, float **x, float **w)
{
    *x = malloc((size_t)(n * cols) * sizeof **x);
    *w = malloc((size_t)(rows * cols) * sizeof **w);
    for (int64_t i = 0; i < n * cols; i++) (*x)[i] = randn(&seed);
    for (int64_t t = 0; t < n; t++) {
        (*x)[t * cols + 3] *= 80.0f;
        (*x)[t * cols + 17] *= 50.0f;
        (*x)[t * cols + cols - 2] *= 100.0f;
    }
    for (int64_t i = 0; i < rows * cols; i++) (*w)[i] = 0.1f * randn(&seed);
}

static double group_err(dsq_sq_eval *e, const float *xmax, const float *wmax, double alpha)
{
    float *s = malloc((size_t)e->cols * sizeof *s);
    dsq_sq_scales(xmax, wmax, e->cols, alpha, s);
    double err;
    expect_ok(dsq_sq_eval_error(e, s, &err));
    free(s);
    return err;
}

static void stats_of(const float *x, int64_t n, const float *w, int64_t rows, int64_t cols, float *xmax, float *wmax)
{
    memset(xmax, 0, (size_t)cols * sizeof *xmax);
    assert_int_equal(dsq_sq_amax_update(xmax, x, n, cols), -1);
    const float *wl[1] = {w};
    dsq_sq_weight_amax(wl, &rows, 1, cols, wmax);
}

static void test_smoothing_beats_plain(void **state)
{
    (void)state;
    const int64_t n = 256, cols = 64, rows = 96;
    for (int act = 0; act < 2; act++) {
        float *x, *w, xmax[64], wmax[64];
        outlier_case(11 + (uint64_t)act, n, cols, rows, &x, &w);
        stats_of(x, n, w, rows, cols, xmax, wmax);
        dsq_w8_scheme sch = dsq_w8_scheme_w8a8(act == 1);
        dsq_sq_eval e;
        const float *wl[1] = {w};
        expect_ok(dsq_sq_eval_init(&e, x, n, cols, wl, &rows, 1, &sch));
        double plain, smooth = group_err(&e, xmax, wmax, 0.5);
        expect_ok(dsq_sq_eval_error(&e, NULL, &plain));
        print_message("%s activations: W8A8 error plain %.4g, smoothed (alpha 0.5) %.4g\n", act ? "static" : "dynamic",
                      plain, smooth);
        assert_true(smooth * 4 < plain);
        dsq_sq_eval_free(&e);
        free(x);
        free(w);
    }
}

static void test_alpha_auto_never_worse(void **state)
{
    (void)state;
    const int64_t n = 128, cols = 64, rows = 48;
    const double starts[] = {0.85, 0.37, 0.0, 1.0};
    for (int k = 0; k < 4; k++) {
        float *x, *w, xmax[64], wmax[64];
        outlier_case(40 + (uint64_t)k, n, cols, rows, &x, &w);
        stats_of(x, n, w, rows, cols, xmax, wmax);
        dsq_w8_scheme sch = dsq_w8_scheme_w8a8(k % 2 == 1);
        dsq_sq_eval e;
        const float *wl[1] = {w};
        expect_ok(dsq_sq_eval_init(&e, x, n, cols, wl, &rows, 1, &sch));
        dsq_sq_search res;
        expect_ok(dsq_sq_search_alpha(&e, xmax, wmax, starts[k], &res));
        assert_true(res.err <= res.start_err);
        assert_true(group_err(&e, xmax, wmax, starts[k]) == res.start_err);
        assert_true(group_err(&e, xmax, wmax, res.alpha) == res.err);
        for (int g = 0; g <= DSQ_SQ_GRID_STEPS; g++)
            assert_true(res.err <= group_err(&e, xmax, wmax, (double)g / DSQ_SQ_GRID_STEPS));
        dsq_sq_eval_free(&e);
        free(x);
        free(w);
    }
}

/* Through the driver: the chosen alphas' summed error is at most the family default's. */
static void test_alpha_auto_driver(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char *path = tiny_model(dir, "llama", &g_llama);
    dsq_calib_set c = tiny_calib(4, T_LEN, T_VOCAB);
    dsq_model *m;
    expect_ok(dsq_model_open(path, &m));
    float alphas[T_LAYERS * DSQ_BLOCK_MAX_GROUPS];
    dsq_seq_opts o = sq_opts();
    o.w8.alpha = DSQ_SQ_ALPHA_AUTO;
    o.w8.smooth_all = true;
    o.w8.alpha_out = alphas;
    dsq_seq_report rep;
    expect_ok(dsq_seq_quantize(m, &c, &o, &rep, NULL));
    assert_int_equal(rep.n_smoothed, 4 * T_LAYERS);
    assert_int_equal(rep.n_quantized, T_LAYERS * m->block->n_linears);
    print_message("alpha auto: error %.4g at the default alpha, %.4g chosen\n", rep.sq_err_default, rep.sq_err_best);
    assert_true(rep.sq_err_best <= rep.sq_err_default && rep.sq_err_best > 0);
    for (int l = 0; l < T_LAYERS; l++)
        for (int g = 0; g < m->block->n_groups; g++) {
            double a = alphas[l * DSQ_BLOCK_MAX_GROUPS + g], k = a * DSQ_SQ_GRID_STEPS;
            assert_true(fabs(k - round(k)) < 1e-5 || fabs(a - 0.85) < 1e-6);
        }
    dsq_model_close(m);
    dsq_calib_free(&c);
    free(path);
    dsq_test_rmtmp(dir);
}

/* ---------------------------------------------------------------- (d) statistics */

static void test_amax_brute_force(void **state)
{
    (void)state;
    uint64_t seed = 3;
    float x[50 * 7], amax[7] = {0}, brute[7] = {0};
    for (int i = 0; i < 50 * 7; i++) x[i] = 10 * randn(&seed);
    for (int part = 0; part < 5; part++) assert_int_equal(dsq_sq_amax_update(amax, x + part * 70, 10, 7), -1);
    for (int t = 0; t < 50; t++)
        for (int c = 0; c < 7; c++) brute[c] = fmaxf(brute[c], fabsf(x[t * 7 + c]));
    assert_memory_equal(amax, brute, sizeof amax);
    x[4 * 7 + 5] = INFINITY;
    assert_int_equal(dsq_sq_amax_update(amax, x, 50, 7), 4 * 7 + 5);
    x[2 * 7 + 1] = NAN;
    assert_int_equal(dsq_sq_amax_update(amax, x, 50, 7), 2 * 7 + 1);
}

typedef struct seen {
    float act[T_LAYERS][DSQ_BLOCK_MAX_LINEARS];
    float k_scale[T_LAYERS], v_scale[T_LAYERS];
    int n_q8;
    bool exact; /* emitted w == dequant(q8) everywhere */
    bool grid;  /* INT8 codes: w / scale an integer in [-128, 127] */
} seen;

static dsq_status on_emit(void *user, const dsq_seq_layer_out *l)
{
    seen *e = user;
    for (int id = 0; id < DSQ_BLOCK_MAX_LINEARS; id++) {
        const dsq_w8q *q = l->q8[id];
        if (!q) continue;
        e->n_q8++;
        e->act[l->layer][id] = q->act_scale;
        float *d = malloc((size_t)(q->rows * q->cols) * sizeof *d);
        DSQ_TRY(dsq_w8q_dequantize(q, d));
        for (int64_t i = 0; i < q->rows * q->cols; i++) {
            if (memcmp(&d[i], &l->w[id][i], sizeof *d)) {
                if (e->exact)
                    print_message("layer %d linear %d [%lld]: dequant %.9g, emitted %.9g\n", l->layer, id, (long long)i,
                                  (double)d[i], (double)l->w[id][i]);
                e->exact = false;
            }
            if (q->sch.kind == DSQ_W8_INT8) {
                double v = (double)d[i] / (double)dsq_w8q_scale_at(q, i / q->cols, i % q->cols);
                if (fabs(v - rint(v)) > 1e-4 || v < -128.001 || v > 127.001) {
                    if (e->grid)
                        print_message("layer %d linear %d [%lld]: %.9g scales off the grid\n", l->layer, id,
                                      (long long)i, v);
                    e->grid = false;
                }
            }
        }
        free(d);
    }
    e->k_scale[l->layer] = l->k_scale;
    e->v_scale[l->layer] = l->v_scale;
    return DSQ_OK;
}

typedef struct brute {
    const dsq_model *m;
    float amax[T_LAYERS][DSQ_BLOCK_MAX_LINEARS];
    float vmax[T_LAYERS], k0max[T_LAYERS]; /* max |V|, max |K| at position 0 (RoPE is the identity there) */
    float kpair[T_LAYERS];                 /* max over rotation pairs of the pair's norm: bounds max |K| after RoPE */
    int kid, vid;
} brute;

static dsq_status brute_hook(void *user, int layer, int which, int expert, const float *x, int n, int64_t in)
{
    (void)expert;
    brute *b = user;
    for (int64_t i = 0; i < n * in; i++) b->amax[layer][which] = fmaxf(b->amax[layer][which], fabsf(x[i]));
    if (which != b->kid && which != b->vid) return DSQ_OK;
    const dsq_linear *W = &b->m->layers[layer].lin[which];
    float *y = malloc((size_t)n * (size_t)W->out * sizeof *y);
    DSQ_TRY(dsq_linear_forward(W, x, y, n));
    int64_t hd = b->m->arch.head_dim;
    for (int t = 0; t < n; t++)
        for (int64_t j = 0; j < W->out; j++) {
            float v = fabsf(y[t * W->out + j]);
            if (which == b->vid) b->vmax[layer] = fmaxf(b->vmax[layer], v);
            if (which != b->kid) continue;
            if (t == 0) b->k0max[layer] = fmaxf(b->k0max[layer], v);
            int64_t h0 = j / hd * hd, i = j % hd, half = hd / 2, mate;
            if (b->m->rope_layout == DSQ_ROPE_NEOX)
                mate = h0 + (i < half ? i + half : i - half);
            else
                mate = h0 + (i % 2 ? i - 1 : i + 1);
            float p = hypotf(y[t * W->out + j], y[t * W->out + mate]);
            b->kpair[layer] = fmaxf(b->kpair[layer], p);
        }
    free(y);
    return DSQ_OK;
}

/* The quantized model kept in memory is what the driver's last passes ran:
 * its linear inputs are the inputs the static scales come from. */
static void brute_force(dsq_model *m, const dsq_calib_set *c, brute *b)
{
    memset(b, 0, sizeof *b);
    b->m = m;
    b->kid = dsq_block_find_linear(m->block, "k");
    b->vid = dsq_block_find_linear(m->block, "v");
    dsq_ctx *ctx;
    expect_ok(dsq_ctx_new(m, c->seqlen, 2, &ctx));
    dsq_ctx_set_hooks(ctx, brute_hook, NULL, b);
    float *lg = malloc((size_t)c->seqlen * (size_t)m->vocab * sizeof *lg);
    for (int i = 0; i < c->n_samples; i++)
        expect_ok(dsq_forward(ctx, c->tokens + (size_t)i * c->seqlen, c->seqlen, 0, lg));
    free(lg);
    dsq_ctx_free(ctx);
}

static void check_static_scales(const dsq_method *method, const tiny_spec *t)
{
    char *dir = dsq_test_mkdtemp();
    char *path = tiny_model(dir, "m", t);
    dsq_calib_set c = tiny_calib(3, T_LEN, T_VOCAB);
    dsq_model *m;
    expect_ok(dsq_model_open(path, &m));
    dsq_seq_opts o = dsq_seq_w8_default_opts(method);
    o.threads = 2;
    o.w8.scheme = method == &dsq_method_fp8 ? dsq_w8_scheme_fp8_static() : dsq_w8_scheme_w8a8(true);
    o.w8.kv_fp8 = method == &dsq_method_fp8;
    o.keep_fake_quant = true;
    seen e;
    memset(&e, 0, sizeof e);
    e.exact = e.grid = true;
    o.emit = on_emit;
    o.user = &e;
    dsq_seq_report rep;
    dsq_seq_keep *keep = NULL;
    expect_ok(dsq_seq_quantize(m, &c, &o, &rep, &keep));
    assert_int_equal(e.n_q8, T_LAYERS * m->block->n_linears);
    assert_true(e.exact && e.grid);
    brute b;
    brute_force(m, &c, &b);
    dsq_w8_kind kind = o.w8.scheme.kind;
    for (int l = 0; l < T_LAYERS; l++) {
        for (int id = 0; id < m->block->n_linears; id++) {
            float want = dsq_w8_static_scale(kind, b.amax[l][id]);
            if (fabsf(e.act[l][id] - want) > 1e-6f * want)
                fail_msg("layer %d %s: input scale %.9g, brute force %.9g", l, m->block->linears[id].hf,
                         (double)e.act[l][id], (double)want);
        }
        if (!o.w8.kv_fp8) continue;
        float vs = dsq_w8_static_scale(DSQ_W8_FP8, b.vmax[l]);
        assert_true(fabsf(e.v_scale[l] - vs) <= 1e-6f * vs);
        float kmax = e.k_scale[l] * DSQ_W8_FP8_MAX;
        print_message("layer %d: max|K| %.4g (pos 0 %.4g, pair bound %.4g), max|V| %.4g\n", l, (double)kmax,
                      (double)b.k0max[l], (double)b.kpair[l], (double)b.vmax[l]);
        assert_true(kmax >= b.k0max[l] * (1 - 1e-5f) && kmax <= b.kpair[l] * (1 + 1e-5f));
    }
    dsq_model_close(m);
    dsq_seq_keep_free(keep);
    dsq_calib_free(&c);
    free(path);
    dsq_test_rmtmp(dir);
}

static void test_static_scales_brute_force(void **state)
{
    (void)state;
    check_static_scales(&dsq_method_smoothquant, &g_llama);
    check_static_scales(&dsq_method_fp8, &g_qwen2);
}

/* ---------------------------------------------------------------- (e) GPTQ INT8 */

static void test_gptq_int8_grid(void **state)
{
    (void)state;
    /* the rule: at 8 bits, sym, one group per row, s = 2 amax / 255 and z = 128 */
    const int64_t rows = 16, cols = 64, n = 200;
    uint64_t seed = 8;
    float *w = malloc(rows * cols * sizeof *w), *x = malloc(n * cols * sizeof *x);
    for (int64_t i = 0; i < rows * cols; i++) w[i] = randn(&seed);
    for (int64_t i = 0; i < n * cols; i++) x[i] = randn(&seed);
    dsq_hessian H;
    expect_ok(dsq_hessian_init(&H, cols));
    expect_ok(dsq_hessian_add(&H, x, n));
    expect_ok(dsq_hessian_finalize(&H));
    dsq_gptq_opts go = dsq_gptq_default_opts();
    go.q.bits = 8, go.q.group_size = -1, go.q.sym = true, go.q.rule = DSQ_INTQ_RULE_GPTQ;
    dsq_intq q;
    dsq_gptq_report gr;
    expect_ok(dsq_gptq_quantize(w, rows, cols, H.h, &go, &q, &gr));
    for (int64_t r = 0; r < rows; r++) {
        float amax = 0;
        for (int64_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(w[r * cols + c]));
        assert_int_equal(q.zeros[r], 128);
        assert_true(fabsf(q.scales[r] - amax / 127.5f) <= 1e-6f * amax);
    }
    dsq_intq_free(&q);
    dsq_hessian_free(&H);
    free(w);
    free(x);
    /* through the driver: the conversion is checked bit for bit there, and here */
    char *dir = dsq_test_mkdtemp();
    char *path = tiny_model(dir, "m", &g_qwen2);
    dsq_calib_set c = tiny_calib(3, T_LEN, T_VOCAB);
    dsq_model *m;
    expect_ok(dsq_model_open(path, &m));
    dsq_seq_opts o = sq_opts();
    o.w8.gptq = true;
    seen e;
    memset(&e, 0, sizeof e);
    e.exact = e.grid = true;
    o.emit = on_emit;
    o.user = &e;
    dsq_seq_report rep;
    expect_ok(dsq_seq_quantize(m, &c, &o, &rep, NULL));
    assert_int_equal(e.n_q8, T_LAYERS * m->block->n_linears);
    assert_true(e.exact && e.grid);
    assert_true(rep.gptq_loss > 0);
    dsq_model_close(m);
    dsq_calib_free(&c);
    free(path);
    dsq_test_rmtmp(dir);
}

/* ---------------------------------------------------------------- (f) refusals */

static void expect_fail(const char *path, const dsq_seq_opts *o, const char *want1, const char *want2)
{
    dsq_model *m;
    expect_ok(dsq_model_open(path, &m));
    dsq_calib_set c = tiny_calib(2, T_LEN, T_VOCAB);
    dsq_seq_report rep;
    dsq_status s = dsq_seq_quantize(m, &c, o, &rep, NULL);
    assert_int_not_equal(s, DSQ_OK);
    if (!strstr(dsq_errmsg(), want1) || (want2 && !strstr(dsq_errmsg(), want2)))
        fail_msg("message '%s' lacks '%s' / '%s'", dsq_errmsg(), want1, want2 ? want2 : "");
    dsq_calib_free(&c);
    dsq_model_close(m);
}

static void test_nonfinite_named(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    tiny_spec t = g_llama;
    t.nan_layer = 1;
    char *wpath = tiny_model(dir, "nanw", &t);
    t.nan_layer = -1;
    /* a token the windows hold: every id appears in 2 x 32 random tokens of 96? take the first one */
    dsq_calib_set c = tiny_calib(2, T_LEN, T_VOCAB);
    t.nan_token = c.tokens[5];
    dsq_calib_free(&c);
    char *apath = tiny_model(dir, "nana", &t);
    dsq_seq_opts o = sq_opts();
    expect_fail(wpath, &o, "model.layers.1.mlp.up_proj.weight [3, 2] is NaN", NULL);
    o = dsq_seq_w8_default_opts(&dsq_method_fp8);
    expect_fail(wpath, &o, "model.layers.1.mlp.up_proj.weight", "NaN");
    o = sq_opts();
    expect_fail(apath, &o, "layer 0: the input of self_attn.q_proj is NaN at sample ", "token");
    o.w8.alpha = 1.5;
    expect_fail(wpath, &o, "alpha 1.5 is outside [0, 1]", NULL);
    free(wpath);
    free(apath);
    dsq_test_rmtmp(dir);
}

static void test_cli_refusals(void **state)
{
    (void)state;
    char *model = dsq_test_default_model();
    if (!model) DSQ_TEST_SKIP();
    char *dir = dsq_test_mkdtemp();
    char cmd[8192], err[4096], out[4096];
    static const struct {
        const char *args;
        int rc;
        const char *want;
    } bad[] = {
        {"smoothquant %s -o %s --alpha 1.5", 2, "--alpha \"1.5\": takes a number in [0, 1] or auto"},
        {"smoothquant %s -o %s --alpha abc", 2, "--alpha \"abc\""},
        {"smoothquant %s -o %s --alpha nan", 2, "--alpha \"nan\""},
        {"smoothquant %s -o %s --weights awq", 2, "--weights \"awq\""},
        {"smoothquant %s -o %s --act sometimes", 2, "--act \"sometimes\""},
        {"smoothquant %s -o %s --format fp8", 2, "takes compressed-tensors"},
        {"smoothquant %s -o %s --scheme static", 2, "unknown option --scheme"},
        {"smoothquant %s -o %s --no-smooth --alpha 0.5", 2, "--no-smooth takes neither"},
        {"fp8 %s -o %s --scheme fp4", 2, "takes dynamic, static, block or weight-only"},
        {"fp8 %s -o %s --format exl2", 2, "takes compressed-tensors, fp8 or modelopt"},
        {"fp8 %s -o %s --format fp8", 1, "formats that can: compressed-tensors"},
        {"fp8 %s -o %s --scheme block --format modelopt", 1, "formats that can: compressed-tensors, fp8"},
        {"fp8 %s -o %s --scheme weight-only --format fp8", 1,
         "--format fp8 cannot express fp8 per-channel, weight-only"},
        {"fp8 %s -o %s --smooth-all", 2, "unknown option --smooth-all"},
        {"fp8 %s -o %s --partial-blocks", 2, "--partial-blocks takes --scheme block"},
        {"smoothquant %s -o %s --partial-blocks", 2, "unknown option --partial-blocks"},
        {"fp8 %s -o %s --scheme static --n-samples 0", 2, "--n-samples"},
    };
    snprintf(out, sizeof out, "%s/out", dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, bad[i].args, model, out);
        snprintf(cmd, sizeof cmd, "%s %s -q", DSQ_BINARY, args);
        int rc = dsq_test_run(cmd, err, sizeof err);
        if (rc != bad[i].rc || !strstr(err, bad[i].want) || strncmp(err, "dsquant: error: ", 16) ||
            strchr(err, '\n') != err + strlen(err) - 1)
            fail_msg("%s: exit %d (want %d), stderr '%s' (want one line with '%s')", args, rc, bad[i].rc, err,
                     bad[i].want);
        assert_int_equal(dsq_test_count_entries(dir), 0); /* nothing written */
    }
    assert_int_equal(mkdir(out, 0755), 0);
    snprintf(cmd, sizeof cmd, "%s smoothquant %s -o %s -q", DSQ_BINARY, model, out);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "exists (pass --force to replace it)"));
    assert_int_equal(dsq_test_count_entries(out), 0);
    snprintf(cmd, sizeof cmd, "%s smoothquant --help > /dev/null && %s fp8 --help > /dev/null", DSQ_BINARY, DSQ_BINARY);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 0);
    free(model);
    dsq_test_rmtmp(dir);
}

/* The written folders load back into the runtime as 8-bit linears. */
static void check_folder(const char *path, dsq_w8_kind kind, dsq_w8_act act, bool kv)
{
    dsq_model *m;
    expect_ok(dsq_model_open(path, &m));
    for (int64_t l = 0; l < m->arch.n_layers; l++) {
        for (int id = 0; id < m->block->n_linears; id++) {
            const dsq_linear *W = &m->layers[l].lin[id];
            assert_true(dsq_linear_is_w8(W));
            assert_int_equal(dsq_linear_w8_scheme(W)->kind, kind);
            assert_int_equal(dsq_linear_w8_scheme(W)->act, act);
        }
        if (kv) assert_true(m->layers[l].k_scale > 0 && m->layers[l].v_scale > 0);
    }
    dsq_model_close(m);
}

static void test_cli_runs(void **state)
{
    (void)state;
    char *model = dsq_test_default_model();
    if (!model) DSQ_TEST_SKIP();
    char *calib = dsq_test_shared("datasets/tinyshakespeare.txt.zst");
    if (!calib) {
        free(model);
        DSQ_TEST_SKIP();
    }
    char *dir = dsq_test_mkdtemp();
    char cmd[8192], err[4096], p[4096];
    snprintf(cmd, sizeof cmd,
             "%s -q smoothquant %s -o %s/sq --calib %s --n-samples 2 --seqlen 32 --act static --smooth-all --threads 2 "
             "--json > %s/sq.json",
             DSQ_BINARY, model, dir, calib, dir);
    if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s: %s", cmd, err);
    snprintf(p, sizeof p, "%s/sq.json", dir);
    char *text;
    size_t len;
    expect_ok(dsq_read_file(p, 1 << 20, &text, &len));
    assert_non_null(strstr(text, "\"scheme\":\t\"w8a8-static\""));
    assert_non_null(strstr(text, "\"alpha\":\t0.85"));
    assert_non_null(strstr(text, "\"n_smoothed\":\t90")); /* 30 layers x (q/k/v, gate/up, down); GQA: no v -> o */
    assert_non_null(strstr(text, "\"mlp_out\":\t0.85"));
    assert_null(strstr(text, "\"attn_out\""));
    free(text);
    snprintf(p, sizeof p, "%s/sq", dir);
    check_folder(p, DSQ_W8_INT8, DSQ_W8_ACT_TENSOR, false);
    snprintf(cmd, sizeof cmd, "%s -q fp8 %s -o %s/fp8 --threads 2 --json > %s/fp8.json", DSQ_BINARY, model, dir, dir);
    if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s: %s", cmd, err);
    snprintf(p, sizeof p, "%s/fp8.json", dir);
    expect_ok(dsq_read_file(p, 1 << 20, &text, &len));
    assert_non_null(strstr(text, "\"scheme\":\t\"dynamic\""));
    assert_null(strstr(text, "\"calib\"")); /* dynamic needs no data */
    free(text);
    snprintf(p, sizeof p, "%s/fp8", dir);
    check_folder(p, DSQ_W8_FP8, DSQ_W8_ACT_TOKEN, false);
    snprintf(cmd, sizeof cmd,
             "%s -q fp8 %s -o %s/fp8s --scheme static --format fp8 --kv-cache-fp8 --calib %s --n-samples 2 --seqlen 32 "
             "--threads 2",
             DSQ_BINARY, model, dir, calib);
    if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s: %s", cmd, err);
    snprintf(p, sizeof p, "%s/fp8s", dir);
    check_folder(p, DSQ_W8_FP8, DSQ_W8_ACT_TENSOR, true);
    free(calib);
    free(model);
    dsq_test_rmtmp(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fold_keeps_logits),
        cmocka_unit_test(test_fold_default_model),
        cmocka_unit_test(test_smoothing_beats_plain),
        cmocka_unit_test(test_alpha_auto_never_worse),
        cmocka_unit_test(test_alpha_auto_driver),
        cmocka_unit_test(test_amax_brute_force),
        cmocka_unit_test(test_static_scales_brute_force),
        cmocka_unit_test(test_gptq_int8_grid),
        cmocka_unit_test(test_nonfinite_named),
        cmocka_unit_test(test_cli_refusals),
        cmocka_unit_test(test_cli_runs),
    };
    if (getenv("DSQ_TEST_ONLY")) cmocka_set_test_filter(getenv("DSQ_TEST_ONLY")); /* one case by name */
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
