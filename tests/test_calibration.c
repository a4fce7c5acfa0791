/* Calibration sampling and the layer-by-layer driver (calibration/dataset.h, calibration/sequential.h).
 *
 * - sampling: windows are slices of the stream at the reported starts, the
 *   same for a seed and different for another; a too-short text is an error
 *   saying how many tokens it has and needs; jsonl "text" fields are joined
 *   with "\n\n"; an unknown name is NOT_FOUND naming the choices.
 * - a tiny synthetic Llama (HF folder, F32): RTN, AWQ and GPTQ run over every
 *   layer, emit every layer once with codes that dequantize to exactly the
 *   weights left in the model; AWQ's chosen scales never lose to ratio 0;
 *   GPTQ's logits on the calibration tokens are closer to the float model's
 *   than RTN's (three calibration seeds); the kept model's linears are the
 *   dequantized weights; the peak RSS reported is bounded.
 * - a group that divides no width: one error naming the layers and the valid
 *   sizes, or (skip) those linears reported unquantized.
 * - SmolLM2-135M (skipped when absent), every layer at 4 and 3 bits, group
 *   64, three calibration seeds: perplexity (hf protocol) of AWQ below RTN's
 *   on WikiText-2 and on held-out tinyshakespeare, GPTQ's below RTN's on the
 *   latter; and `dsquant rtn` writes a GPTQ folder the runtime reads back. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "calibration/dataset.h"
#include "calibration/sequential.h"
#include "core/status.h"
#include "datasets/registry.h"
#include "eval/perplexity.h"
#include "formats/block_llama.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "kernels/cpu.h"
#include "kernels/gemm_bf16.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"
#include "tests/helpers/testutil.h"

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("status %d: %s", (int)s, dsq_errmsg());
}

/* ---------------------------------------------------------------- sampling */

static void test_sampling(void **state)
{
    (void)state;
    int32_t ids[1000];
    for (int i = 0; i < 1000; i++) ids[i] = i * 7 % 1000;
    dsq_calib_opts o = {NULL, 8, 64, 42};
    dsq_calib_set a, b, c;
    expect_ok(dsq_calib_sample(ids, 1000, &o, &a));
    expect_ok(dsq_calib_sample(ids, 1000, &o, &b));
    o.seed = 43;
    expect_ok(dsq_calib_sample(ids, 1000, &o, &c));
    assert_memory_equal(a.tokens, b.tokens, 8 * 64 * sizeof(int32_t));
    int same = 0;
    for (int i = 0; i < 8; i++) {
        assert_true(a.starts[i] >= 0 && a.starts[i] + 64 <= 1000);
        assert_memory_equal(a.tokens + i * 64, ids + a.starts[i], 64 * sizeof(int32_t));
        same += a.starts[i] == c.starts[i];
    }
    assert_true(same < 8);
    dsq_calib_free(&a);
    dsq_calib_free(&b);
    dsq_calib_free(&c);
    o.seqlen = 1000;
    assert_int_equal(dsq_calib_sample(ids, 1000, &o, &a), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "1000 tokens"));
    assert_non_null(strstr(dsq_errmsg(), "too short"));
    o.seqlen = 999; /* exactly enough: one possible window */
    expect_ok(dsq_calib_sample(ids, 1000, &o, &a));
    dsq_calib_free(&a);
}

static void test_text_sources(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    const char jl[] = "{\"text\": \"first row\"}\n\n{\"text\": \"second\", \"id\": 2}\n";
    char *p = dsq_test_write(dir, "c.jsonl", jl, strlen(jl));
    char path[4096], *text;
    size_t len;
    expect_ok(dsq_calib_text(p, path, sizeof path, &text, &len));
    assert_string_equal(text, "first row\n\nsecond");
    assert_int_equal(len, strlen("first row\n\nsecond"));
    free(text);
    free(p);
    p = dsq_test_write(dir, "bad.jsonl", "{\"t\": 1}\n", 9);
    assert_int_equal(dsq_calib_text(p, path, sizeof path, &text, &len), DSQ_ERR_FORMAT);
    assert_non_null(strstr(dsq_errmsg(), "line 1"));
    free(p);
    assert_int_equal(dsq_calib_text("no-such-calib-set", path, sizeof path, &text, &len), DSQ_ERR_NOT_FOUND);
    assert_non_null(strstr(dsq_errmsg(), "tinyshakespeare"));
    dsq_test_rmtmp(dir);
}

/* ---------------------------------------------------------------- tiny model */

#define T_DIM 64
#define T_FFN 128
#define T_LAYERS 3
#define T_VOCAB 96

static float *randv(size_t n, float sc, uint64_t *seed)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = sc * dsq_test_randn(seed);
    return v;
}

/* A Llama HF folder (no GQA, so AWQ's v->o group runs too). */
static char *tiny_model(const char *dir)
{
    dsq_arch a;
    memset(&a, 0, sizeof a);
    a.family = DSQ_ARCH_LLAMA;
    snprintf(a.hf_architecture, sizeof a.hf_architecture, "LlamaForCausalLM");
    snprintf(a.model_type, sizeof a.model_type, "llama");
    a.hidden_size = T_DIM, a.intermediate_size = T_FFN, a.n_layers = T_LAYERS, a.n_heads = 4, a.n_kv_heads = 4;
    a.head_dim = 16, a.vocab_size = T_VOCAB, a.max_position_embeddings = 512, a.rms_norm_eps = 1e-5;
    a.rope_theta = 10000, a.bos_token_id = 1, a.eos_token_id = 2;
    snprintf(a.torch_dtype, sizeof a.torch_dtype, "float32");
    char *path = malloc(strlen(dir) + 8);
    sprintf(path, "%s/hf", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    char *json;
    expect_ok(dsq_arch_to_hf_json(&a, &json));
    free(dsq_test_write(path, "config.json", json, strlen(json)));
    free(json);
    static const struct {
        const char *n;
        int64_t d0, d1;
        float sc, off;
    } per_layer[] = {
        {"input_layernorm.weight", T_DIM, 0, 0.2f, 1},       {"post_attention_layernorm.weight", T_DIM, 0, 0.2f, 1},
        {"self_attn.q_proj.weight", T_DIM, T_DIM, 0.15f, 0}, {"self_attn.k_proj.weight", T_DIM, T_DIM, 0.15f, 0},
        {"self_attn.v_proj.weight", T_DIM, T_DIM, 0.15f, 0}, {"self_attn.o_proj.weight", T_DIM, T_DIM, 0.1f, 0},
        {"mlp.gate_proj.weight", T_FFN, T_DIM, 0.15f, 0},    {"mlp.up_proj.weight", T_FFN, T_DIM, 0.15f, 0},
        {"mlp.down_proj.weight", T_DIM, T_FFN, 0.1f, 0}};
    dsq_st_writer *w;
    expect_ok(dsq_st_writer_new(path, "model", 1ull << 30, &w));
    int64_t sh[2] = {T_VOCAB, T_DIM};
    expect_ok(dsq_st_writer_add(w, "model.embed_tokens.weight", DSQ_TYPE_F32, 2, sh));
    expect_ok(dsq_st_writer_add(w, "lm_head.weight", DSQ_TYPE_F32, 2, sh));
    sh[0] = T_DIM;
    expect_ok(dsq_st_writer_add(w, "model.norm.weight", DSQ_TYPE_F32, 1, sh));
    char name[128];
    for (int l = 0; l < T_LAYERS; l++)
        for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, per_layer[k].n);
            int64_t s2[2] = {per_layer[k].d0, per_layer[k].d1};
            expect_ok(dsq_st_writer_add(w, name, DSQ_TYPE_F32, per_layer[k].d1 ? 2 : 1, s2));
        }
    expect_ok(dsq_st_writer_begin(w));
    uint64_t seed = 77;
    float *v = randv(T_VOCAB * T_DIM, 1.0f, &seed);
    expect_ok(dsq_st_writer_write(w, v, T_VOCAB * T_DIM * sizeof(float)));
    free(v);
    v = randv(T_VOCAB * T_DIM, 0.1f, &seed);
    expect_ok(dsq_st_writer_write(w, v, T_VOCAB * T_DIM * sizeof(float)));
    free(v);
    v = randv(T_DIM, 0.1f, &seed);
    for (int i = 0; i < T_DIM; i++) v[i] += 1;
    expect_ok(dsq_st_writer_write(w, v, T_DIM * sizeof(float)));
    free(v);
    for (int l = 0; l < T_LAYERS; l++)
        for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++) {
            size_t n = (size_t)per_layer[k].d0 * (per_layer[k].d1 ? (size_t)per_layer[k].d1 : 1);
            v = randv(n, per_layer[k].sc, &seed);
            /* a few salient input channels, as real activations have */
            for (size_t i = 0; i < n; i++) v[i] += per_layer[k].off + (per_layer[k].off && i % 17 == 3 ? 3.0f : 0.0f);
            expect_ok(dsq_st_writer_write(w, v, n * sizeof(float)));
            free(v);
        }
    expect_ok(dsq_st_writer_finish(w));
    dsq_st_writer_free(w);
    return path;
}

static dsq_calib_set tiny_calib(int n, int len, uint64_t sample_seed)
{
    int32_t ids[4000];
    uint64_t seed = 5;
    for (int i = 0; i < 4000; i++) ids[i] = (int32_t)(dsq_test_rand(&seed) % T_VOCAB);
    dsq_calib_opts o = {NULL, n, len, sample_seed};
    dsq_calib_set c;
    expect_ok(dsq_calib_sample(ids, 4000, &o, &c));
    return c;
}

typedef struct emitted {
    int n_layers_seen[T_LAYERS];
    int n_q;
    double max_dq_err; /* |dequant(q) - w| over all emitted linears */
} emitted;

static dsq_status on_emit(void *user, const dsq_seq_layer_out *l)
{
    emitted *e = user;
    e->n_layers_seen[l->layer]++;
    for (int id = 0; id < DSQ_LLAMA_N_LINEARS; id++) {
        if (!l->q[id]) continue;
        e->n_q++;
        const dsq_intq *q = l->q[id];
        float *d = malloc((size_t)(q->rows * q->cols) * sizeof *d);
        DSQ_TRY(dsq_intq_dequantize(q, d));
        for (int64_t i = 0; i < q->rows * q->cols; i++) {
            double err = fabs((double)d[i] - (double)l->w[id][i]);
            if (err > e->max_dq_err) e->max_dq_err = err;
        }
        free(d);
    }
    return DSQ_OK;
}

/* Mean squared logit difference of m against reference logits on the calibration windows. */
static double logit_mse(dsq_model *m, const dsq_calib_set *c, const float *ref, float **out)
{
    dsq_ctx *ctx;
    expect_ok(dsq_ctx_new(m, c->seqlen, 2, &ctx));
    size_t per = (size_t)c->seqlen * T_VOCAB;
    float *lg = malloc(per * (size_t)c->n_samples * sizeof *lg);
    for (int i = 0; i < c->n_samples; i++)
        expect_ok(dsq_forward(ctx, c->tokens + i * c->seqlen, c->seqlen, 0, lg + i * per));
    dsq_ctx_free(ctx);
    double e = 0;
    for (size_t i = 0; ref && i < per * (size_t)c->n_samples; i++)
        e += ((double)lg[i] - ref[i]) * ((double)lg[i] - ref[i]);
    if (out)
        *out = lg;
    else
        free(lg);
    return e / (double)(per * (size_t)c->n_samples);
}

/* AWQ's loss in parts (part tokens, 0: the default) and its finalists (-1: the default). */
static int g_awq_part_tokens, g_awq_finalists = -1;

static double run_method(const char *path, const dsq_method *method, int bits, const dsq_calib_set *c, const float *ref,
                         dsq_seq_report *rep)
{
    dsq_model *m;
    expect_ok(dsq_model_open(path, &m));
    dsq_seq_opts o = dsq_seq_default_opts();
    o.awq_part_tokens = g_awq_part_tokens;
    if (g_awq_finalists >= 0) o.awq.finalists = g_awq_finalists;
    o.method = method;
    o.q.bits = bits;
    o.q.group_size = 32;
    o.threads = 2;
    o.keep_fake_quant = true;
    emitted e;
    memset(&e, 0, sizeof e);
    o.emit = on_emit;
    o.user = &e;
    dsq_seq_keep *keep = NULL;
    expect_ok(dsq_seq_quantize(m, c, &o, rep, &keep));
    for (int l = 0; l < T_LAYERS; l++) assert_int_equal(e.n_layers_seen[l], 1);
    assert_int_equal(e.n_q, T_LAYERS * DSQ_LLAMA_N_LINEARS);
    assert_int_equal(rep->n_quantized, T_LAYERS * DSQ_LLAMA_N_LINEARS);
    assert_true(e.max_dq_err == 0.0);
    /* the model now runs the dequantized weights */
    float row[T_FFN];
    expect_ok(dsq_linear_rows_f32(&m->layers[1].lin[DSQ_LLAMA_DOWN], 0, 1, row));
    int distinct = 0; /* 3-bit groups of 32 hold at most 8 values each */
    for (int i = 0; i < 32; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= row[j] == row[i];
        distinct += !seen;
    }
    assert_true(distinct <= (1 << bits));
    if (!(rep->peak_rss_kb > 0 && rep->peak_rss_kb < 1024 * 1024)) fail_msg("peak RSS %ld kB", rep->peak_rss_kb);
    double mse = logit_mse(m, c, ref, NULL);
    dsq_model_close(m);
    dsq_seq_keep_free(keep);
    return mse;
}

/* The float model's logits on c (the reference of logit_mse). */
static float *float_logits(const char *path, const dsq_calib_set *c)
{
    dsq_model *m;
    float *ref;
    expect_ok(dsq_model_open(path, &m));
    logit_mse(m, c, NULL, &ref);
    dsq_model_close(m);
    return ref;
}

/* AWQ's grid search in loss parts: every point on every part, stopped once
 * past the best whole loss, picks exactly what one whole-loss part picks
 * (identical logits); screened to 4 finalists it stays near that and below
 * RTN's error. */
static void test_awq_parts(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char *path = tiny_model(dir);
    dsq_calib_set c = tiny_calib(16, 48, 4);
    float *ref = float_logits(path, &c);
    dsq_seq_report r_one, r_parts, r_screen, r_rtn;
    g_awq_part_tokens = 1 << 20, g_awq_finalists = 0;
    double e_one = run_method(path, &dsq_method_awq, 3, &c, ref, &r_one);
    g_awq_part_tokens = 48;
    double e_parts = run_method(path, &dsq_method_awq, 3, &c, ref, &r_parts);
    g_awq_finalists = 4;
    double e_screen = run_method(path, &dsq_method_awq, 3, &c, ref, &r_screen);
    g_awq_part_tokens = 0, g_awq_finalists = -1;
    double e_rtn = run_method(path, &dsq_method_rtn, 3, &c, ref, &r_rtn);
    print_message("logit MSE: awq one part %.6g, 16 parts %.6g, screened %.6g; rtn %.6g\n", e_one, e_parts, e_screen,
                  e_rtn);
    assert_true(e_one == e_parts);
    assert_true(fabs(r_one.awq_loss_best - r_parts.awq_loss_best) <= 1e-9 * r_one.awq_loss_best);
    assert_true(e_screen <= 1.1 * e_one);
    assert_true(e_screen < e_rtn);
    free(ref);
    dsq_calib_free(&c);
    free(path);
    dsq_test_rmtmp(dir);
}

static void test_driver_tiny(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char *path = tiny_model(dir);
    dsq_calib_set c = tiny_calib(8, 48, 1);
    float *ref = float_logits(path, &c);
    dsq_seq_report r_rtn, r_awq, r_gptq;
    double e_rtn = run_method(path, &dsq_method_rtn, 3, &c, ref, &r_rtn);
    double e_awq = run_method(path, &dsq_method_awq, 3, &c, ref, &r_awq);
    double e_gptq = run_method(path, &dsq_method_gptq, 3, &c, ref, &r_gptq);
    print_message("logit MSE vs float: rtn %.5g awq %.5g gptq %.5g\n", e_rtn, e_awq, e_gptq);
    assert_true(e_rtn > 0);
    assert_true(r_awq.awq_loss_best <= r_awq.awq_loss_r0);
    assert_true(e_gptq < e_rtn);
    assert_true(r_gptq.gptq_loss > 0);
    /* Two more calibration draws: GPTQ's lead on its own windows is no luck of one. */
    for (uint64_t seed = 2; seed <= 3; seed++) {
        dsq_calib_set c2 = tiny_calib(8, 48, seed);
        float *ref2 = float_logits(path, &c2);
        double er = run_method(path, &dsq_method_rtn, 3, &c2, ref2, &r_rtn);
        double eg = run_method(path, &dsq_method_gptq, 3, &c2, ref2, &r_gptq);
        print_message("calibration seed %d: logit MSE rtn %.5g gptq %.5g\n", (int)seed, er, eg);
        if (!(eg < er)) fail_msg("calibration seed %d: GPTQ logit MSE %g not below RTN's %g", (int)seed, eg, er);
        free(ref2);
        dsq_calib_free(&c2);
    }
    free(ref);
    dsq_calib_free(&c);
    free(path);
    dsq_test_rmtmp(dir);
}

static void test_group_errors(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp();
    char *path = tiny_model(dir);
    dsq_model *m;
    expect_ok(dsq_model_open(path, &m));
    dsq_intq_params p = {4, 128, false, DSQ_INTQ_RULE_AWQ, 0, DSQ_INTQ_GRID_MINMAX};
    int64_t bad = 0;
    assert_int_equal(dsq_seq_check_groups(m, &p, false, &bad), DSQ_ERR_ARG);
    assert_int_equal(bad, T_LAYERS * 6); /* every linear but down (in 128) */
    assert_non_null(strstr(dsq_errmsg(), "q_proj (in 64)"));
    assert_non_null(strstr(dsq_errmsg(), "valid group sizes"));
    assert_null(strstr(dsq_errmsg(), "down_proj"));
    expect_ok(dsq_seq_check_groups(m, &p, true, &bad));
    dsq_seq_opts o = dsq_seq_default_opts();
    o.q = p;
    o.skip_indivisible = true;
    dsq_seq_report r;
    expect_ok(dsq_seq_quantize(m, NULL, &o, &r, NULL));
    assert_int_equal(r.n_quantized, T_LAYERS);
    assert_int_equal(r.n_skipped, T_LAYERS * 6);
    o.skip_indivisible = false;
    assert_int_equal(dsq_seq_quantize(m, NULL, &o, &r, NULL), DSQ_ERR_ARG);
    o.method = &dsq_method_gptq;
    o.q.group_size = 32;
    assert_int_equal(dsq_seq_quantize(m, NULL, &o, &r, NULL), DSQ_ERR_ARG); /* no calibration data */
    dsq_model_close(m);
    free(path);
    dsq_test_rmtmp(dir);
}

/* ---------------------------------------------------------------- SmolLM2 */

/* Tokens of the first bytes of a text (tokenizing all of it costs more than the test). */
static void prefix_tokens(const dsq_tokenizer *tok, const char *text, size_t len, size_t max_bytes, dsq_tokens *out)
{
    expect_ok(dsq_tokenizer_encode(tok, text, len < max_bytes ? len : max_bytes, true, false, out));
}

#if defined(__SANITIZE_ADDRESS__)
/* ~10x slower: the sanitizer run checks memory on 1 layer and 1 window; the
 * quality ordering is asserted by the release run. */
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif

/* Perplexity (hf protocol, windows of 256) of the default model on two token
 * sets after quantizing every layer with `method` (< 0: the float model). */
static void smol_ppl(const char *model, const dsq_method *method, int bits, const dsq_calib_set *c,
                     const dsq_tokens *eval[2], double ppl[2])
{
    dsq_model *m;
    expect_ok(dsq_model_open(model, &m));
    dsq_seq_keep *keep = NULL;
    if (method) {
        dsq_seq_opts o = dsq_seq_default_opts();
        o.method = method;
        o.q.bits = bits;
        o.q.group_size = 64;
        o.threads = 2;
        o.keep_fake_quant = true;
        o.max_layers = UNDER_SANITIZER ? 1 : 0; /* 0: every layer */
        o.awq_loss_samples = 4;
        o.awq.n_sample_token = 128;
        dsq_seq_report r;
        expect_ok(dsq_seq_quantize(m, c, &o, &r, &keep));
    }
    dsq_ctx *ctx;
    expect_ok(dsq_ctx_new(m, 256, 2, &ctx));
    for (int k = 0; k < 2; k++) {
        dsq_ppl_opts po;
        dsq_ppl_opts_default(&po);
        po.protocol = DSQ_PPL_HF;
        po.ctx = 256;
        po.chunks = UNDER_SANITIZER ? 1 : 6;
        dsq_ppl_result pr;
        expect_ok(dsq_ppl_tokens(ctx, eval[k]->ids, (int64_t)eval[k]->n, &po, &pr));
        ppl[k] = pr.ppl;
    }
    dsq_ctx_free(ctx);
    dsq_model_close(m);
    dsq_seq_keep_free(keep);
}

/* The whole SmolLM2-135M at 4 and 3 bits, groups of 64, calibrated on 24
 * windows of the first 70% of tinyshakespeare. Two evaluations: WikiText-2
 * (another domain) and the held-out last 30% of tinyshakespeare (the
 * calibration's domain). Measured over seeds 0, 1, 2 (base 37.9 WikiText,
 * 67.1 held-out): 4-bit RTN 51.3 / 84.2, AWQ 44.7-46.4 / 76.2-79.4, GPTQ
 * 48.8-50.1 / 74.4-78.8; 3-bit RTN 129.2 / 172.4, AWQ 76.3-85.1 / 108.8-112.3,
 * GPTQ 121.3-130.5 / 111.3-121.4.
 *
 * Asserted at 4 bits with calibration seed 0 and, with DSQ_TEST_FULL=1, at 3
 * bits with seed 1, so that the two widths rest on two draws of windows (every
 * margin below held at every seed measured above; the CI time budget pays for
 * the 4-bit draw only: on a 2-core AMD Zen 3 the 3-bit one adds 5 minutes of
 * a 12-minute test, and the tiny DeepSeek-V3 quality test asserts the 3-bit
 * ordering on its own model): RTN above the base; AWQ below
 * RTN on both evaluations; GPTQ below RTN on the calibration's domain. GPTQ
 * against RTN on WikiText is printed, not asserted: GPTQ fits the calibration
 * domain (docs/algorithms.md) and on another one its margin is thin enough
 * that a draw loses it (3-bit, seed 2: 130.5 against RTN's 129.2), so it is
 * no property of the method. About 4 to 7 minutes on 2 cores (its TIMEOUT in
 * CMakeLists.txt), twice that with DSQ_TEST_FULL. */
static void test_smollm_awq_gptq_beat_rtn(void **state)
{
    (void)state;
    char *model = dsq_test_default_model();
    char *shared = dsq_test_shared("datasets");
    if (!model || !shared) {
        free(model);
        free(shared);
        DSQ_TEST_SKIP();
    }
    setenv("DSQ_SHARED_DIR", DSQ_SHARED_DIR, 0);
    dsq_tokenizer *tok;
    expect_ok(dsq_tokenizer_load(model, &tok));
    char path[4096], *text;
    size_t len;
    dsq_tokens cal = {0}, held = {0}, wiki = {0};
    expect_ok(dsq_calib_text("tinyshakespeare", path, sizeof path, &text, &len));
    size_t cut = len * 7 / 10;
    prefix_tokens(tok, text, cut, cut, &cal);
    prefix_tokens(tok, text + cut, len - cut, 9000, &held);
    free(text);
    expect_ok(dsq_dataset_load("wikitext2", DSQ_TEXT_HF_JOIN, path, sizeof path, &text, &len));
    prefix_tokens(tok, text, len, 9000, &wiki);
    free(text);
    const dsq_tokens *ev[2] = {&wiki, &held};
    const char *const ev_name[2] = {"WikiText-2", "held-out tinyshakespeare"};
    const char *full = getenv("DSQ_TEST_FULL");
    const int n_bits = UNDER_SANITIZER || !full || strcmp(full, "1") ? 1 : 2;
    if (n_bits == 1 && !UNDER_SANITIZER)
        print_message("3-bit ordering not run: DSQ_TEST_FULL=1 runs it (about 5 more minutes)\n");
    dsq_calib_set c[2]; /* [bits 4, 3]: seeds 0 and 1 */
    for (int b = 0; b < n_bits; b++) {
        dsq_calib_opts co = {NULL, UNDER_SANITIZER ? 2 : 24, 256, (uint64_t)b};
        expect_ok(dsq_calib_sample(cal.ids, (int64_t)cal.n, &co, &c[b]));
    }
    /* [bits 4, 3][evaluation]. RTN needs no calibration. */
    double base[2], rtn[2][2], awq[2][2], gptq[2][2];
    smol_ppl(model, NULL, 4, &c[0], ev, base);
    for (int b = 0; b < n_bits; b++) {
        smol_ppl(model, &dsq_method_rtn, 4 - b, &c[b], ev, rtn[b]);
        smol_ppl(model, &dsq_method_awq, 4 - b, &c[b], ev, awq[b]);
        smol_ppl(model, &dsq_method_gptq, 4 - b, &c[b], ev, gptq[b]);
    }
    /* The whole table first, then the checks: a failure shows every figure. */
    for (int b = 0; b < n_bits; b++)
        for (int k = 0; k < 2; k++)
            print_message("SmolLM2-135M, every layer %d-bit g64, ppl on %s (6 x 256), calibration seed %d: base %.3f "
                          "rtn %.3f awq %.3f gptq %.3f\n",
                          4 - b, ev_name[k], b, base[k], rtn[b][k], awq[b][k], gptq[b][k]);
    for (int b = 0; b < n_bits; b++)
        for (int k = 0; k < 2; k++) {
            assert_true(isfinite(rtn[b][k]) && isfinite(awq[b][k]) && isfinite(gptq[b][k]));
            if (UNDER_SANITIZER) continue; /* one layer, two windows: memory only */
            if (!(rtn[b][k] > base[k]))
                fail_msg("%d-bit RTN %.3f not above the base %.3f on %s", 4 - b, rtn[b][k], base[k], ev_name[k]);
            if (!(awq[b][k] < rtn[b][k]))
                fail_msg("%d-bit AWQ %.3f not below RTN %.3f on %s, seed %d", 4 - b, awq[b][k], rtn[b][k], ev_name[k],
                         b);
            if (k == 1 && !(gptq[b][k] < rtn[b][k]))
                fail_msg("%d-bit GPTQ %.3f not below RTN %.3f on %s, seed %d", 4 - b, gptq[b][k], rtn[b][k], ev_name[k],
                         b);
        }
    for (int b = 0; b < n_bits; b++) dsq_calib_free(&c[b]);
    dsq_tokens_free(&cal);
    dsq_tokens_free(&held);
    dsq_tokens_free(&wiki);
    dsq_tokenizer_free(tok);
    free(model);
    free(shared);
}

/* The file dir/name holds needle. */
static void expect_in_file(const char *dir, const char *name, const char *needle)
{
    char p[4200], *text;
    size_t n;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    expect_ok(dsq_read_file(p, 1 << 20, &text, &n));
    if (!strstr(text, needle)) fail_msg("%s lacks %s", p, needle);
    free(text);
}

/* --json's layer_peak_rss_mib: one running peak per layer, positive,
 * never falling, and the last no more than the run's peak_rss_mib. */
static void expect_layer_rss(const char *dir, const char *name, int n_layers)
{
    char p[4200], *text;
    size_t n;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    expect_ok(dsq_read_file(p, 1 << 20, &text, &n));
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) fail_msg("%s: not JSON", p);
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(j, "layer_peak_rss_mib");
    const cJSON *peak = cJSON_GetObjectItemCaseSensitive(j, "peak_rss_mib");
    assert_true(cJSON_IsArray(arr) && cJSON_IsNumber(peak));
    assert_int_equal(cJSON_GetArraySize(arr), n_layers);
    double prev = 0;
    for (int l = 0; l < n_layers; l++) {
        const cJSON *v = cJSON_GetArrayItem(arr, l);
        assert_true(cJSON_IsNumber(v));
        if (!(v->valuedouble > 0 && v->valuedouble >= prev && v->valuedouble <= peak->valuedouble))
            fail_msg("%s: layer %d peak RSS %g MiB (previous %g, run %g)", p, l, v->valuedouble, prev,
                     peak->valuedouble);
        prev = v->valuedouble;
    }
    cJSON_Delete(j);
}

/* dsquant rtn end to end: refusals, then a GPTQ folder the runtime reads. */
static void test_cli_rtn(void **state)
{
    (void)state;
    char *model = dsq_test_default_model();
    if (!model) DSQ_TEST_SKIP();
    char *dir = dsq_test_mkdtemp();
    char cmd[8192], err[4096];
    snprintf(cmd, sizeof cmd, "%s rtn %s -o %s/out -q", DSQ_BINARY, model, dir);
    assert_int_not_equal(dsq_test_run(cmd, err, sizeof err), 0); /* group 128 does not divide 576 */
    assert_non_null(strstr(err, "skip-indivisible"));
    snprintf(cmd, sizeof cmd, "%s rtn %s -o %s/out -q --w-bit 5", DSQ_BINARY, model, dir);
    assert_int_not_equal(dsq_test_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "--w-bit 5"));
    /* --grid minmax where the grid is not the point: the default's search costs minutes under ASan on
     * the whole model; the defaults are checked on the two-layer cut below */
    snprintf(cmd, sizeof cmd, "%s rtn %s -o %s/out -q --skip-indivisible --format awq --grid minmax", DSQ_BINARY, model,
             dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 0);
    char p[4096];
    snprintf(p, sizeof p, "%s/out/config.json", dir);
    char *cfg;
    size_t n;
    expect_ok(dsq_read_file(p, 1 << 20, &cfg, &n));
    assert_non_null(strstr(cfg, "\"quant_method\":\t\"awq\""));
    assert_non_null(strstr(cfg, "model.layers.0.self_attn.q_proj")); /* modules_to_not_convert */
    assert_null(strstr(cfg, "model.layers.0.mlp.down_proj"));        /* quantized: 1536 = 12 x 128 */
    free(cfg);
    snprintf(p, sizeof p, "%s/out", dir);
    dsq_st_model *st;
    expect_ok(dsq_st_model_open(p, &st));
    assert_true(dsq_st_model_find(st, "model.layers.3.mlp.down_proj.qweight") >= 0);
    assert_true(dsq_st_model_find(st, "model.layers.3.mlp.gate_proj.weight") >= 0);
    dsq_st_model_close(st);
    snprintf(cmd, sizeof cmd, "%s rtn %s -o %s/out -q --group 64", DSQ_BINARY, model, dir);
    assert_int_not_equal(dsq_test_run(cmd, err, sizeof err), 0);
    assert_non_null(strstr(err, "--force"));
    snprintf(cmd, sizeof cmd, "%s rtn %s -o %s/out -q --group 64 --force --grid minmax", DSQ_BINARY, model, dir);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 0);
    snprintf(p, sizeof p, "%s/out/quantize_config.json", dir);
    assert_true(dsq_exists(p));
    snprintf(p, sizeof p, "%s/out/tokenizer.json", dir);
    assert_true(dsq_exists(p));
    /* the calibration arithmetic and the AWQ loss windows */
    static const char *const bad[][3] = {
        {"awq", "--group 64 --compute fp8", "--compute takes auto, f32 or bf16"},
        {"rtn", "--group 64 --loss-samples 2", "--loss-samples is an AWQ option"},
        {"awq", "--group 64 --n-samples 4 --loss-samples 8", "--loss-samples 8 exceeds --n-samples 4"},
        {"rtn", "--group 64 --grid l2", "--grid takes minmax, mse or imatrix-mse, not \"l2\""},
        {"awq", "--group 64 --grid mse", "--grid is an rtn and gptq option"},
        {"rtn", "--group 64 --refit", "--refit is a GPTQ option"},
        {"gptq", "--group 64 --finalists 2", "--finalists is an AWQ option"},
        {"awq", "--group 64 --finalists -1", "--finalists"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s %s %s -o %s/bad -q %s", DSQ_BINARY, bad[i][0], model, dir, bad[i][1]);
        assert_int_not_equal(dsq_test_run(cmd, err, sizeof err), 0);
        if (!strstr(err, bad[i][2])) fail_msg("%s %s: stderr '%s' lacks '%s'", bad[i][0], bad[i][1], err, bad[i][2]);
        snprintf(p, sizeof p, "%s/bad", dir);
        assert_false(dsq_exists(p));
    }
    char *calib = dsq_test_shared("datasets/tinyshakespeare.txt.zst");
    if (calib) { /* --compute auto says which arithmetic it chose (on the first 2 layers: minutes under ASan for 30) */
        char cut[4200];
        snprintf(cut, sizeof cut, "%s/cut.gguf", dir);
        if (dsq_test_cut_model(model, cut, 2) != DSQ_OK) fail_msg("cut: %s", dsq_errmsg());
        snprintf(cmd, sizeof cmd,
                 "%s awq %s -o %s/awq -q --group 64 --calib %s --n-samples 2 --seqlen 64 --loss-samples 1 --json > "
                 "%s/awq.json",
                 DSQ_BINARY, cut, dir, calib, dir);
        if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s: %s", cmd, err);
        expect_in_file(dir, "awq.json", dsq_gemm_bf16_preferred() ? "\"compute\":\t\"bf16\"" : "\"compute\":\t\"f32\"");
        expect_layer_rss(dir, "awq.json", 2);
        /* RTN with the weighted grid calibrates, says so, and records the grid as llm-compressor's observer */
        snprintf(cmd, sizeof cmd,
                 "%s rtn %s -o %s/rtn-im -q --group 64 --grid imatrix-mse --format compressed-tensors --calib %s "
                 "--n-samples 2 --seqlen 64 --json > %s/rtn.json",
                 DSQ_BINARY, cut, dir, calib, dir);
        if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s: %s", cmd, err);
        expect_in_file(dir, "rtn.json", "\"grid\":\t\"imatrix-mse\"");
        expect_in_file(dir, "rtn.json", "\"n_samples\":\t2");
        expect_in_file(dir, "rtn-im/config.json", "\"observer\":\t\"imatrix_mse\"");
        /* the defaults: GPTQ searches with its Hessian's diagonal and refits its scales, RTN searches unweighted */
        snprintf(cmd, sizeof cmd,
                 "%s gptq %s -o %s/gptq -q --group 64 --format compressed-tensors --calib %s --n-samples 2 "
                 "--seqlen 64 --json > %s/gptq.json",
                 DSQ_BINARY, cut, dir, calib, dir);
        if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s: %s", cmd, err);
        snprintf(cmd, sizeof cmd, "%s rtn %s -o %s/rtn -q --group 64 --json > %s/rtn0.json", DSQ_BINARY, cut, dir, dir);
        if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s: %s", cmd, err);
        expect_in_file(dir, "gptq.json", "\"grid\":\t\"imatrix-mse\"");
        expect_in_file(dir, "gptq.json", "\"refit\":\ttrue");
        expect_in_file(dir, "gptq/config.json", "\"observer\":\t\"imatrix_mse\"");
        expect_in_file(dir, "rtn0.json", "\"grid\":\t\"mse\"");
        expect_in_file(dir, "rtn/quantize_config.json", "\"grid\":\t\"mse\"");
        free(calib);
    }
    free(model);
    dsq_test_rmtmp(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_text_sources),
        cmocka_unit_test(test_driver_tiny),
        cmocka_unit_test(test_awq_parts),
        cmocka_unit_test(test_group_errors),
        cmocka_unit_test(test_cli_rtn),
        cmocka_unit_test(test_smollm_awq_gptq_beat_rtn),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
