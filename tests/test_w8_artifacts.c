/* The 8-bit artifacts end to end: a tiny synthetic Llama (a dense HF folder)
 * is quantized with each 8-bit scheme, written by the INT writer as
 * compressed-tensors (int-/float-/naive-quantized), vLLM fp8 and ModelOpt
 * folders, and read back through runtime/model_quant.h: codes, scales, the
 * static input scale, the scheme and the FP8 KV-cache scales must be what was
 * written, and the model must load the linears as 8-bit storages whose rows
 * are the dequantized weights. config.json must carry quantization_config as
 * llm-compressor (compressed-tensors 0.20.1 model_dump of the presets),
 * DeepSeek-V3 / vLLM and ModelOpt write it. Refusals: a scheme a format
 * cannot express (naming the formats that can), blocks vLLM cannot tile,
 * hostile tensors (scale dtype and shape, NaN scales, a missing input_scale)
 * and configs, each with one line naming what it refused, and no output left
 * behind. Also GPTQ's desc_act: false with static groups (--act-order), true
 * only with a g_idx. */
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

#include "core/dtype.h"
#include "core/fileio.h"
#include "core/status.h"
#include "formats/block.h"
#include "formats/hf_config.h"
#include "formats/int_writer.h"
#include "formats/pack_w8.h"
#include "formats/pack_w8_config.h"
#include "formats/safetensors.h"
#include "quantizers/intq.h"
#include "quantizers/w8.h"
#include "runtime/linear.h"
#include "runtime/model.h"
#include "runtime/model_quant.h"
#include "tests/helpers/testutil.h"

#define T_HIDDEN 64
#define T_FFN 96
#define T_LAYERS 2
#define T_HEADS 4
#define T_KV 2
#define T_HD 16
#define T_VOCAB 128

static uint64_t g_seed = 0x5eed8b17a3c2d4e1ull;

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("unexpected failure: %s", dsq_errmsg());
}

/* s failed with a message containing every one of the NULL-ended needles. */
static void expect_fail(dsq_status s, ...)
{
    if (s == DSQ_OK) fail_msg("expected a failure");
    const char *msg = dsq_errmsg();
    if (strchr(msg, '\n')) fail_msg("message is not one line: %s", msg);
    va_list ap;
    va_start(ap, s);
    for (const char *n; (n = va_arg(ap, const char *));)
        if (!strstr(msg, n)) fail_msg("message lacks \"%s\": %s", n, msg);
    va_end(ap);
}

/* ---- the tiny dense model ---- */

static const struct {
    const char *name;
    int64_t out, in;
} g_lin[] = {{"self_attn.q_proj", T_HEADS *T_HD, T_HIDDEN},
             {"self_attn.k_proj", T_KV *T_HD, T_HIDDEN},
             {"self_attn.v_proj", T_KV *T_HD, T_HIDDEN},
             {"self_attn.o_proj", T_HIDDEN, T_HEADS *T_HD},
             {"mlp.gate_proj", T_FFN, T_HIDDEN},
             {"mlp.up_proj", T_FFN, T_HIDDEN},
             {"mlp.down_proj", T_HIDDEN, T_FFN}};
#define N_LIN 7

static void tiny_arch(dsq_arch *a)
{
    memset(a, 0, sizeof *a);
    a->family = DSQ_ARCH_LLAMA;
    snprintf(a->hf_architecture, sizeof a->hf_architecture, "LlamaForCausalLM");
    snprintf(a->model_type, sizeof a->model_type, "llama");
    a->hidden_size = T_HIDDEN, a->intermediate_size = T_FFN, a->n_layers = T_LAYERS;
    a->n_heads = T_HEADS, a->n_kv_heads = T_KV, a->head_dim = T_HD, a->vocab_size = T_VOCAB;
    a->max_position_embeddings = 2048, a->rms_norm_eps = 1e-5, a->rope_theta = 10000;
    a->bos_token_id = 1, a->eos_token_id = 2;
    snprintf(a->torch_dtype, sizeof a->torch_dtype, "float32");
    expect_ok(dsq_arch_validate(a, "tiny"));
}

static void write_text(const char *dir, const char *name, const char *text)
{
    free(dsq_test_write(dir, name, text, strlen(text)));
}

/* dir/model.safetensors (F32) and config.json of the tiny Llama. */
static void write_dense(const char *dir)
{
    dsq_arch a;
    tiny_arch(&a);
    char *json;
    expect_ok(dsq_arch_to_hf_json(&a, &json));
    write_text(dir, "config.json", json);
    free(json);
    dsq_st_writer *w;
    expect_ok(dsq_st_writer_new(dir, "model", 1ull << 30, &w));
    const int64_t emb[2] = {T_VOCAB, T_HIDDEN}, vec[1] = {T_HIDDEN};
    expect_ok(dsq_st_writer_add(w, "model.embed_tokens.weight", DSQ_TYPE_F32, 2, emb));
    expect_ok(dsq_st_writer_add(w, "model.norm.weight", DSQ_TYPE_F32, 1, vec));
    expect_ok(dsq_st_writer_add(w, "lm_head.weight", DSQ_TYPE_F32, 2, emb));
    char n[128];
    for (int l = 0; l < T_LAYERS; l++) {
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l);
        expect_ok(dsq_st_writer_add(w, n, DSQ_TYPE_F32, 1, vec));
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l);
        expect_ok(dsq_st_writer_add(w, n, DSQ_TYPE_F32, 1, vec));
        for (int i = 0; i < N_LIN; i++) {
            const int64_t sh[2] = {g_lin[i].out, g_lin[i].in};
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, g_lin[i].name);
            expect_ok(dsq_st_writer_add(w, n, DSQ_TYPE_F32, 2, sh));
        }
    }
    expect_ok(dsq_st_writer_begin(w));
    float *buf = malloc(T_VOCAB * T_FFN * sizeof *buf);
    const int64_t sizes[3] = {T_VOCAB * T_HIDDEN, T_HIDDEN, T_VOCAB * T_HIDDEN};
    for (int i = 0; i < 3; i++) {
        for (int64_t k = 0; k < sizes[i]; k++) buf[k] = i == 1 ? 1.0f : 0.2f * dsq_test_randn(&g_seed);
        expect_ok(dsq_st_writer_write(w, buf, (uint64_t)sizes[i] * 4));
    }
    for (int l = 0; l < T_LAYERS; l++) {
        for (int k = 0; k < T_HIDDEN; k++) buf[k] = 1.0f + 0.1f * dsq_test_randn(&g_seed);
        expect_ok(dsq_st_writer_write(w, buf, T_HIDDEN * 4));
        expect_ok(dsq_st_writer_write(w, buf, T_HIDDEN * 4));
        for (int i = 0; i < N_LIN; i++) {
            int64_t ne = g_lin[i].out * g_lin[i].in;
            for (int64_t k = 0; k < ne; k++) buf[k] = 0.1f * dsq_test_randn(&g_seed);
            buf[l + i] = 0.0f; /* an exact zero code somewhere */
            expect_ok(dsq_st_writer_write(w, buf, (uint64_t)ne * 4));
        }
    }
    free(buf);
    expect_ok(dsq_st_writer_finish(w));
    dsq_st_writer_free(w);
}

/* ---- writing an 8-bit folder with the INT writer ---- */

typedef struct case8 {
    const char *label;
    dsq_int_format fmt;
    dsq_w8_scheme sch;
    bool kv;
    int dense_id; /* a linear left dense (-1: none) */
} case8;

static bool g_partial; /* the writer's partial_blocks (--partial-blocks) for the next write_w8 */

typedef struct written {
    dsq_w8q q[T_LAYERS][N_LIN];
    float k[T_LAYERS], v[T_LAYERS];
} written;

static dsq_status rows_of(void *user, int64_t r0, int64_t nr, float *dst)
{
    return dsq_linear_rows_f32(user, r0, nr, dst);
}

/* Writes the 8-bit folder of m to out; w keeps what went in. */
static dsq_status write_w8(const dsq_model *m, const case8 *c, const char *out, written *wr)
{
    memset(wr, 0, sizeof *wr);
    bool quantized[T_LAYERS * N_LIN], bias[T_LAYERS * N_LIN];
    for (int i = 0; i < T_LAYERS * N_LIN; i++) quantized[i] = i % N_LIN != c->dense_id, bias[i] = false;
    dsq_int_source src = {m->ckpt, &m->arch, m->block, m->vocab, m->tied, false, quantized, bias};
    dsq_int_spec spec = {.format = c->fmt, .w8 = true, .w8s = c->sch, .kv_fp8 = c->kv, .partial_blocks = g_partial};
    dsq_outdir *d = NULL;
    dsq_int_writer *w = NULL;
    dsq_status s = dsq_outdir_open(out, false, &d);
    if (s == DSQ_OK) s = dsq_int_writer_new(dsq_outdir_tmp_path(d), &src, &spec, &w);
    dsq_linear E;
    expect_ok(dsq_linear_from_tensor(&E, &m->tok_embd));
    if (s == DSQ_OK) s = dsq_int_writer_rows(w, m->vocab, m->dim, rows_of, &E);
    dsq_linear_release(&E);
    float *f = malloc(T_FFN * T_FFN * sizeof *f);
    for (int l = 0; s == DSQ_OK && l < T_LAYERS; l++) {
        dsq_int_layer L;
        memset(&L, 0, sizeof L);
        L.layer = l;
        for (int i = 0; i < m->block->n_norms; i++) L.norm[i] = m->layers[l].norm[i];
        for (int i = 0; s == DSQ_OK && i < N_LIN; i++) {
            const dsq_linear *W = &m->layers[l].lin[i];
            expect_ok(dsq_linear_rows_f32(W, 0, W->out, f));
            if (i == c->dense_id) {
                L.w[i] = malloc((size_t)(W->out * W->in) * sizeof(float));
                memcpy((float *)L.w[i], f, (size_t)(W->out * W->in) * sizeof(float));
                continue;
            }
            s = dsq_w8q_quantize(f, W->out, W->in, &c->sch, "tiny", &wr->q[l][i]);
            wr->q[l][i].act_scale = c->sch.act == DSQ_W8_ACT_TENSOR ? 0.01f * (float)(1 + l * N_LIN + i) : 0.0f;
            L.q8[i] = &wr->q[l][i];
        }
        wr->k[l] = c->kv ? 0.02f + 0.01f * (float)l : 0.0f;
        wr->v[l] = c->kv ? 0.03f + 0.01f * (float)l : 0.0f;
        L.k_scale = wr->k[l], L.v_scale = wr->v[l];
        if (s == DSQ_OK) s = dsq_int_writer_layer(w, &L);
        for (int i = 0; i < N_LIN; i++) free((void *)L.w[i]);
    }
    free(f);
    if (s == DSQ_OK) s = dsq_int_writer_vector(w, m->output_norm, (size_t)m->dim);
    if (s == DSQ_OK) s = dsq_int_writer_rows(w, m->vocab, m->dim, rows_of, (void *)&m->output);
    if (s == DSQ_OK) s = dsq_int_writer_finish(w, d);
    dsq_int_writer_free(w);
    if (s == DSQ_OK)
        s = dsq_outdir_commit(d);
    else
        dsq_outdir_abort(d);
    return s;
}

static void written_free(written *wr)
{
    for (int l = 0; l < T_LAYERS; l++)
        for (int i = 0; i < N_LIN; i++) dsq_w8q_free(&wr->q[l][i]);
}

/* ---- reading back ---- */

static void same_w8q(const dsq_w8q *a, const dsq_w8q *b, const char *what)
{
    if (memcmp(&a->sch, &b->sch, sizeof a->sch) != 0) fail_msg("%s: scheme differs", what);
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->cols, b->cols);
    assert_int_equal(a->n_scale_rows, b->n_scale_rows);
    assert_int_equal(a->n_scale_cols, b->n_scale_cols);
    if (memcmp(a->codes, b->codes, (size_t)(a->rows * a->cols)) != 0) fail_msg("%s: codes differ", what);
    if (memcmp(a->scales, b->scales, (size_t)(a->n_scale_rows * a->n_scale_cols) * sizeof(float)) != 0)
        fail_msg("%s: scales differ", what);
    if (a->act_scale != b->act_scale) fail_msg("%s: act_scale %g vs %g", what, a->act_scale, b->act_scale);
}

static void check_reader(const case8 *c, const char *dir, const written *wr)
{
    dsq_hfq q;
    expect_ok(dsq_hfq_from_dir(dir, &q));
    assert_int_equal(q.method, DSQ_HFQ_W8);
    assert_int_equal(q.w8_format, c->fmt);
    if (memcmp(&q.w8, &c->sch, sizeof q.w8) != 0) fail_msg("%s: scheme read back differs", c->label);
    assert_int_equal(q.kv_fp8, c->kv && c->fmt != DSQ_INT_FORMAT_FP8);
    dsq_st_model *st;
    expect_ok(dsq_st_model_open(dir, &st));
    char mod[128];
    for (int l = 0; l < T_LAYERS; l++) {
        for (int i = 0; i < N_LIN; i++) {
            snprintf(mod, sizeof mod, "model.layers.%d.%s", l, g_lin[i].name);
            dsq_w8q back;
            bool found;
            expect_ok(dsq_hfq_read_w8(&q, st, mod, &back, &found));
            assert_int_equal(found, i != c->dense_id);
            if (i == c->dense_id) assert_true(dsq_hfq_skips(&q, mod));
            if (found) same_w8q(&back, &wr->q[l][i], mod);
            dsq_w8q_free(&back);
        }
        float k, v;
        expect_ok(dsq_hfq_load_kv(&q, st, l, &k, &v));
        assert_true(k == wr->k[l] && v == wr->v[l]);
    }
    dsq_st_model_close(st);
    dsq_hfq_free(&q);
}

/* The runtime loads the folder: 8-bit storages whose rows are the dequantized codes. */
static void check_model(const case8 *c, const char *dir, const written *wr)
{
    dsq_model *m;
    dsq_status s = dsq_model_open(dir, &m);
    if (s != DSQ_OK) fail_msg("%s: %s", c->label, dsq_errmsg());
    float *want = malloc(T_FFN * T_FFN * sizeof *want), *got = malloc(T_FFN * T_FFN * sizeof *got);
    for (int l = 0; l < T_LAYERS; l++) {
        for (int i = 0; i < N_LIN; i++) {
            const dsq_linear *W = &m->layers[l].lin[i];
            assert_int_equal(dsq_linear_is_w8(W), i != c->dense_id);
            if (i == c->dense_id) continue;
            assert_memory_equal(dsq_linear_w8_scheme(W), &c->sch, sizeof c->sch);
            expect_ok(dsq_w8q_dequantize(&wr->q[l][i], want));
            expect_ok(dsq_linear_rows_f32(W, 0, W->out, got));
            for (int64_t k = 0; k < W->out * W->in; k++)
                if (got[k] != want[k]) fail_msg("%s: layer %d linear %d element %lld", c->label, l, i, (long long)k);
        }
        assert_true(m->layers[l].k_scale == wr->k[l] && m->layers[l].v_scale == wr->v[l]);
    }
    assert_false(dsq_linear_is_w8(&m->output)); /* lm_head stays dense */
    free(want), free(got);
    dsq_model_close(m);
}

static cJSON *read_json(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = NULL;
    size_t len = 0;
    expect_ok(dsq_read_file(path, 1 << 20, &text, &len));
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(o);
    return o;
}

static void check_config(const case8 *c, const char *dir)
{
    cJSON *root = read_json(dir, "config.json");
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    assert_non_null(qc);
    const char *method = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(qc, "quant_method"));
    const char *want = c->fmt == DSQ_INT_FORMAT_CT    ? "compressed-tensors"
                       : c->fmt == DSQ_INT_FORMAT_FP8 ? "fp8"
                                                      : "modelopt";
    assert_string_equal(method, want);
    const cJSON *ign = cJSON_GetObjectItemCaseSensitive(qc, c->fmt == DSQ_INT_FORMAT_CT    ? "ignore"
                                                            : c->fmt == DSQ_INT_FORMAT_FP8 ? "ignored_layers"
                                                                                           : "ignore");
    if (c->fmt != DSQ_INT_FORMAT_FP8 || c->dense_id >= 0) {
        assert_true(cJSON_IsArray(ign));
        assert_int_equal(cJSON_GetArraySize(ign), c->dense_id >= 0 ? 1 + T_LAYERS : 1);
    }
    if (c->fmt == DSQ_INT_FORMAT_MODELOPT) {
        cJSON *h = read_json(dir, "hf_quant_config.json");
        const cJSON *qz = cJSON_GetObjectItemCaseSensitive(h, "quantization");
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(qz, "quant_algo")), "FP8");
        const cJSON *kv = cJSON_GetObjectItemCaseSensitive(qz, "kv_cache_quant_algo");
        assert_true(c->kv ? cJSON_IsString(kv) : cJSON_IsNull(kv));
        assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                                cJSON_GetObjectItemCaseSensitive(h, "producer"), "name")),
                            "modelopt");
        cJSON_Delete(h);
    }
    cJSON_Delete(root);
}

static char *join(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

/* tmp/src: the dense tiny model; its path. */
static char *make_src(const char *tmp)
{
    char *src = join(tmp, "src");
    assert_int_equal(mkdir(src, 0755), 0);
    write_dense(src);
    return src;
}

static void run_case(const case8 *c)
{
    char *tmp = dsq_test_mkdtemp(), *src = make_src(tmp), *out = join(tmp, "out");
    dsq_model *m;
    expect_ok(dsq_model_open(src, &m));
    written wr;
    dsq_status s = write_w8(m, c, out, &wr);
    if (s != DSQ_OK) fail_msg("%s: %s", c->label, dsq_errmsg());
    check_config(c, out);
    check_reader(c, out, &wr);
    check_model(c, out, &wr);
    written_free(&wr);
    dsq_model_close(m);
    free(src), free(out);
    dsq_test_rmtmp(tmp);
}

static dsq_w8_scheme block32(void)
{
    dsq_w8_scheme s = {DSQ_W8_FP8, DSQ_W8_W_BLOCK, 32, 32, DSQ_W8_ACT_GROUP, 32};
    return s;
}

static void test_ct(void **state)
{
    (void)state;
    const case8 cs[] = {
        {"ct W8A8 dynamic", DSQ_INT_FORMAT_CT, dsq_w8_scheme_w8a8(false), false, -1},
        {"ct W8A8 static, down dense", DSQ_INT_FORMAT_CT, dsq_w8_scheme_w8a8(true), false, 6},
        {"ct FP8 static + kv", DSQ_INT_FORMAT_CT, dsq_w8_scheme_fp8_static(), true, -1},
        {"ct FP8_DYNAMIC", DSQ_INT_FORMAT_CT, dsq_w8_scheme_fp8_dynamic(), false, -1},
        {"ct FP8 block 32", DSQ_INT_FORMAT_CT, block32(), true, -1},
        {"ct FP8 weight-only", DSQ_INT_FORMAT_CT, dsq_w8_scheme_fp8_weight_only(), false, 2},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
    /* what the tiling check refuses (test_format_matrix), written on request:
     * partial last activation groups and fused linears' partial blocks */
    const case8 partial = {"ct FP8 block 48, groups 48, partial", DSQ_INT_FORMAT_CT,
                           {DSQ_W8_FP8, DSQ_W8_W_BLOCK, 48, 32, DSQ_W8_ACT_GROUP, 48}, false, -1};
    g_partial = true;
    run_case(&partial);
    g_partial = false;
}

static void test_fp8(void **state)
{
    (void)state;
    dsq_w8_scheme dyn = dsq_w8_scheme_fp8_static();
    dyn.act = DSQ_W8_ACT_TOKEN;
    const case8 cs[] = {
        {"fp8 static + kv", DSQ_INT_FORMAT_FP8, dsq_w8_scheme_fp8_static(), true, -1},
        {"fp8 dynamic per-tensor, o dense", DSQ_INT_FORMAT_FP8, dyn, false, 3},
        {"fp8 block 32 (weight_scale_inv)", DSQ_INT_FORMAT_FP8, block32(), false, -1},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

static void test_modelopt(void **state)
{
    (void)state;
    const case8 cs[] = {
        {"modelopt FP8 + kv", DSQ_INT_FORMAT_MODELOPT, dsq_w8_scheme_fp8_static(), true, -1},
        {"modelopt FP8, up dense", DSQ_INT_FORMAT_MODELOPT, dsq_w8_scheme_fp8_static(), false, 5},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) run_case(&cs[i]);
}

/* ---- quantization_config exactly as the producers write it ---- */

/* What llm-compressor's ModelCompressor.update_config adds around
 * QuantizationConfig.model_dump() (compressed-tensors 0.20.1). */
#define CT_TAIL                                                                                                        \
    "\"global_compression_ratio\": null, \"ignore\": [\"lm_head\"], \"kv_cache_scheme\": null, "                       \
    "\"moe_sparsity_config\": null, \"quant_method\": \"compressed-tensors\", \"quantization_status\": "               \
    "\"compressed\", \"sparsity_config\": {}, \"transform_config\": {}, \"version\": \"0.20.1\"}"
#define CT_ARGS(extra, dyn, gs, strat, type)                                                                           \
    "{" extra "\"dynamic\": " dyn ", \"group_size\": " gs ", \"num_bits\": 8, \"strategy\": \"" strat                  \
    "\", \"symmetric\": true, \"type\": \"" type "\"}"
#define CT_CONFIG(fmt, in, w)                                                                                          \
    "{\"config_groups\": {\"group_0\": {\"format\": \"" fmt "\", \"input_activations\": " in                           \
    ", \"output_activations\": null, \"targets\": [\"Linear\"], \"weights\": " w "}}, \"format\": \"" fmt              \
    "\", " CT_TAIL

static void same_json(const cJSON *got, const char *want, const char *what)
{
    cJSON *w = cJSON_Parse(want);
    if (!w) fail_msg("%s: bad expected JSON", what);
    if (!cJSON_Compare(got, w, true)) {
        char *t = cJSON_PrintUnformatted(got);
        fail_msg("%s: got %s\nwant %s", what, t, want);
    }
    cJSON_Delete(w);
}

static void config_is(dsq_int_format f, dsq_w8_scheme sch, bool kv, const char *want, const char *what)
{
    const char *const ign[] = {"lm_head"};
    dsq_w8_config c = {f, sch, kv, ign, 1};
    cJSON *o;
    expect_ok(dsq_w8_config_json(&c, &o));
    same_json(o, want, what);
    cJSON_Delete(o);
}

static void test_config_exact(void **state)
{
    (void)state;
    /* the presets of compressed-tensors quantization/quant_scheme.py, dumped by 0.20.1 */
    config_is(DSQ_INT_FORMAT_CT, dsq_w8_scheme_w8a8(false), false,
              CT_CONFIG("int-quantized", CT_ARGS("", "true", "null", "token", "int"),
                        CT_ARGS("", "false", "null", "channel", "int")),
              "W8A8");
    config_is(DSQ_INT_FORMAT_CT, dsq_w8_scheme_fp8_static(), false,
              CT_CONFIG("float-quantized",
                        "{\"dynamic\": false, \"group_size\": null, \"num_bits\": 8, \"observer\": \"static_minmax\", "
                        "\"strategy\": \"tensor\", \"symmetric\": true, \"type\": \"float\"}",
                        CT_ARGS("", "false", "null", "tensor", "float")),
              "FP8");
    config_is(DSQ_INT_FORMAT_CT, dsq_w8_scheme_fp8_dynamic(), false,
              CT_CONFIG("float-quantized", CT_ARGS("", "true", "null", "token", "float"),
                        CT_ARGS("", "false", "null", "channel", "float")),
              "FP8_DYNAMIC");
    config_is(DSQ_INT_FORMAT_CT, dsq_w8_scheme_fp8_block(), false,
              CT_CONFIG("float-quantized", CT_ARGS("", "true", "128", "group", "float"),
                        CT_ARGS("\"block_structure\": [128, 128], ", "false", "null", "block", "float")),
              "FP8_BLOCK");
    config_is(DSQ_INT_FORMAT_CT, dsq_w8_scheme_fp8_weight_only(), false,
              CT_CONFIG("naive-quantized", "null", CT_ARGS("", "false", "null", "channel", "float")), "FP8 W8A16");
    /* DeepSeek-V3 README_WEIGHTS.md, verbatim */
    config_is(DSQ_INT_FORMAT_FP8, dsq_w8_scheme_fp8_block(), false,
              "{\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\", "
              "\"weight_block_size\": [128, 128]}",
              "fp8 block");
    config_is(DSQ_INT_FORMAT_FP8, dsq_w8_scheme_fp8_static(), false,
              "{\"activation_scheme\": \"static\", \"fmt\": \"e4m3\", \"quant_method\": \"fp8\"}", "fp8 static");
    /* Model-Optimizer convert_hf_quant_config_format for quant_algo FP8 */
    config_is(DSQ_INT_FORMAT_MODELOPT, dsq_w8_scheme_fp8_static(), true,
              "{\"config_groups\": {\"group_0\": {\"input_activations\": {\"dynamic\": false, \"num_bits\": 8, "
              "\"type\": \"float\"}, \"weights\": {\"dynamic\": false, \"num_bits\": 8, \"type\": \"float\"}, "
              "\"targets\": [\"Linear\"]}}, \"ignore\": [\"lm_head\"], \"quant_algo\": \"FP8\", \"kv_cache_scheme\": "
              "{\"dynamic\": false, \"num_bits\": 8, \"type\": \"float\"}, \"producer\": {\"name\": \"modelopt\", "
              "\"version\": \"0.46.0\"}, \"quant_method\": \"modelopt\"}",
              "modelopt config.json");
    const char *const ign[] = {"lm_head"};
    dsq_w8_config c = {DSQ_INT_FORMAT_MODELOPT, dsq_w8_scheme_fp8_static(), true, ign, 1};
    cJSON *o;
    expect_ok(dsq_w8_hf_quant_config_json(&c, &o));
    same_json(o,
              "{\"producer\": {\"name\": \"modelopt\", \"version\": \"0.46.0\"}, \"quantization\": {\"quant_algo\": "
              "\"FP8\", \"kv_cache_quant_algo\": \"FP8\", \"exclude_modules\": [\"lm_head\"]}}",
              "hf_quant_config.json");
    cJSON_Delete(o);
    /* the kv_cache_scheme llm-compressor's FP8 KV recipes give */
    const char *const ign2[] = {"lm_head"};
    dsq_w8_config k = {DSQ_INT_FORMAT_CT, dsq_w8_scheme_fp8_static(), true, ign2, 1};
    expect_ok(dsq_w8_config_json(&k, &o));
    same_json(cJSON_GetObjectItemCaseSensitive(o, "kv_cache_scheme"), CT_ARGS("", "false", "null", "tensor", "float"),
              "kv_cache_scheme");
    cJSON_Delete(o);
}

/* ---- refusals ---- */

static void test_format_matrix(void **state)
{
    (void)state;
    dsq_w8_scheme dyn_tensor = dsq_w8_scheme_fp8_static();
    dyn_tensor.act = DSQ_W8_ACT_TOKEN;
    assert_true(dsq_w8_format_can(DSQ_INT_FORMAT_FP8, &dyn_tensor));
    assert_true(dsq_w8_format_can(DSQ_INT_FORMAT_FP8,
                                  &(dsq_w8_scheme){DSQ_W8_FP8, DSQ_W8_W_BLOCK, 128, 128, DSQ_W8_ACT_GROUP, 128}));
    assert_false(dsq_w8_format_can(DSQ_INT_FORMAT_MODELOPT, &dyn_tensor));
    dsq_w8_scheme s = dsq_w8_scheme_fp8_dynamic();
    expect_fail(dsq_w8_format_check(DSQ_INT_FORMAT_FP8, &s), "--format fp8", "per-channel",
                "formats that can: compressed-tensors", NULL);
    expect_fail(dsq_w8_format_check(DSQ_INT_FORMAT_MODELOPT, &s), "formats that can: compressed-tensors", NULL);
    s = dsq_w8_scheme_w8a8(true);
    expect_fail(dsq_w8_format_check(DSQ_INT_FORMAT_FP8, &s), "int8", "formats that can: compressed-tensors", NULL);
    s = dsq_w8_scheme_fp8_block();
    expect_fail(dsq_w8_format_check(DSQ_INT_FORMAT_MODELOPT, &s), "formats that can: compressed-tensors, fp8", NULL);
    s = dsq_w8_scheme_fp8_static();
    expect_ok(dsq_w8_format_check(DSQ_INT_FORMAT_MODELOPT, &s));
    s = dsq_w8_scheme_w8a8(false);
    s.act = DSQ_W8_ACT_NONE;
    expect_fail(dsq_w8_format_check(DSQ_INT_FORMAT_CT, &s), "pack-quantized", NULL);

    /* through the writer: one line, and nothing left behind */
    char *tmp = dsq_test_mkdtemp(), *src = make_src(tmp), *out = join(tmp, "out");
    dsq_model *m;
    expect_ok(dsq_model_open(src, &m));
    written wr;
    case8 c = {"fp8 per-channel", DSQ_INT_FORMAT_FP8, dsq_w8_scheme_fp8_dynamic(), false, -1};
    expect_fail(write_w8(m, &c, out, &wr), "formats that can: compressed-tensors", NULL);
    written_free(&wr);
    assert_int_equal(dsq_test_count_entries(tmp), 1); /* src only: no out, no temporary */
    /* tiling: fused q/k/v outputs must be multiples of the block height */
    c = (case8){"block 48", DSQ_INT_FORMAT_CT, {DSQ_W8_FP8, DSQ_W8_W_BLOCK, 48, 32, DSQ_W8_ACT_GROUP, 32}, false, -1};
    expect_fail(write_w8(m, &c, out, &wr), "model.layers.0.self_attn.q_proj.weight", "block height 48", NULL);
    written_free(&wr);
    /* activation groups must tile in_features */
    c = (case8){"group 48", DSQ_INT_FORMAT_CT, {DSQ_W8_FP8, DSQ_W8_W_BLOCK, 32, 32, DSQ_W8_ACT_GROUP, 48}, false, -1};
    expect_fail(write_w8(m, &c, out, &wr), "model.layers.0.self_attn.q_proj.weight", "activation group 48", NULL);
    written_free(&wr);
    assert_int_equal(dsq_test_count_entries(tmp), 1);
    /* specs the writer refuses before it starts a file */
    bool quantized[T_LAYERS * N_LIN] = {0}, bias[T_LAYERS * N_LIN] = {0};
    dsq_int_source so = {m->ckpt, &m->arch, m->block, m->vocab, m->tied, false, quantized, bias};
    dsq_int_writer *w = NULL;
    dsq_int_spec sp = {.format = (dsq_int_format)99};
    expect_fail(dsq_int_writer_new(tmp, &so, &sp, &w), "unknown format 99", NULL);
    sp = (dsq_int_spec){.format = DSQ_INT_FORMAT_MODELOPT, .bits = 4, .group = 32};
    expect_fail(dsq_int_writer_new(tmp, &so, &sp, &w), "--format modelopt stores 8-bit schemes only", NULL);
    sp = (dsq_int_spec){.format = DSQ_INT_FORMAT_AWQ, .w8 = true, .w8s = dsq_w8_scheme_fp8_static()};
    expect_fail(dsq_int_writer_new(tmp, &so, &sp, &w), "--format awq stores INTn weights only", NULL);
    assert_null(w);
    assert_int_equal(dsq_test_count_entries(tmp), 1);
    dsq_model_close(m);
    free(src), free(out);
    dsq_test_rmtmp(tmp);
}

static void test_ceil_grid(void **state)
{
    (void)state;
    dsq_w8_scheme fb = dsq_w8_scheme_fp8_block();
    assert_true(dsq_w8_tiling_ok(&fb, 100, 256, false)); /* edge rows of a linear vLLM does not fuse */
    assert_false(dsq_w8_tiling_ok(&fb, 100, 256, true));
    assert_false(dsq_w8_tiling_ok(&fb, 256, 576, false)); /* SmolLM2's hidden 576 */
    expect_fail(dsq_w8_tiling_check(&fb, 256, 576, false, "x.weight"), "x.weight", "576", NULL);
    /* partial edge blocks get their own scale (DeepSeek pads them) */
    dsq_w8_scheme b = {DSQ_W8_FP8, DSQ_W8_W_BLOCK, 32, 32, DSQ_W8_ACT_GROUP, 32};
    dsq_packed p;
    expect_ok(dsq_w8_pack_shape(DSQ_INT_FORMAT_FP8, &b, 100, 64, &p));
    const dsq_pack_tensor *t = dsq_packed_find(&p, "weight_scale_inv");
    assert_non_null(t);
    assert_int_equal(t->shape[0], 4);
    assert_int_equal(t->shape[1], 2);
    assert_int_equal(t->type, DSQ_TYPE_F32);
    assert_null(dsq_packed_find(&p, "input_scale"));
    dsq_packed_free(&p);
    dsq_w8_scheme st = dsq_w8_scheme_fp8_static();
    expect_ok(dsq_w8_pack_shape(DSQ_INT_FORMAT_CT, &st, 8, 64, &p));
    assert_int_equal(dsq_packed_find(&p, "weight_scale")->n_dims, 1); /* compressed-tensors: [1] */
    assert_int_equal(dsq_packed_find(&p, "input_scale")->n_dims, 1);
    dsq_packed_free(&p);
    expect_ok(dsq_w8_pack_shape(DSQ_INT_FORMAT_MODELOPT, &st, 8, 64, &p));
    assert_int_equal(dsq_packed_find(&p, "weight_scale")->n_dims, 0); /* ModelOpt: a scalar */
    assert_int_equal(dsq_packed_find(&p, "input_scale")->n_dims, 0);
    dsq_packed_free(&p);
    dsq_w8_scheme ch = dsq_w8_scheme_w8a8(false);
    expect_ok(dsq_w8_pack_shape(DSQ_INT_FORMAT_CT, &ch, 8, 64, &p));
    t = dsq_packed_find(&p, "weight_scale");
    assert_true(t->n_dims == 2 && t->shape[0] == 8 && t->shape[1] == 1);
    assert_int_equal(dsq_packed_find(&p, "weight")->type, DSQ_TYPE_I8);
    dsq_packed_free(&p);
}

/* A packed static-FP8 channel linear whose tensors the cases corrupt. */
typedef struct hostile {
    dsq_w8_scheme sch;
    dsq_w8q q;
    dsq_packed p;
    dsq_tensor w, s, in;
} hostile;

static void hostile_make(hostile *h)
{
    h->sch = (dsq_w8_scheme){DSQ_W8_FP8, DSQ_W8_W_CHANNEL, 0, 0, DSQ_W8_ACT_TENSOR, 0};
    float w[8 * 64];
    for (int i = 0; i < 8 * 64; i++) w[i] = dsq_test_randn(&g_seed);
    expect_ok(dsq_w8q_quantize(w, 8, 64, &h->sch, "h", &h->q));
    h->q.act_scale = 0.5f;
    expect_ok(dsq_w8_pack(DSQ_INT_FORMAT_CT, &h->q, &h->p));
    h->w = dsq_packed_view(dsq_packed_find(&h->p, "weight"));
    h->s = dsq_packed_view(dsq_packed_find(&h->p, "weight_scale"));
    h->in = dsq_packed_view(dsq_packed_find(&h->p, "input_scale"));
    h->w.name = "m.weight", h->s.name = "m.weight_scale", h->in.name = "m.input_scale";
}

static void hostile_free(hostile *h)
{
    dsq_w8q_free(&h->q);
    dsq_packed_free(&h->p);
}

static void test_hostile_tensors(void **state)
{
    (void)state;
    hostile h;
    hostile_make(&h);
    dsq_w8q back;
    expect_ok(dsq_w8_unpack(&h.sch, &h.w, &h.s, &h.in, &back));
    same_w8q(&back, &h.q, "round trip");
    dsq_w8q_free(&back);
    dsq_tensor t = h.s;
    t.type = DSQ_TYPE_I32;
    expect_fail(dsq_w8_unpack(&h.sch, &h.w, &t, &h.in, &back), "m.weight_scale", "dtype i32", NULL);
    t = h.s;
    t.n_dims = 2, t.shape[0] = 4, t.shape[1] = 2;
    expect_fail(dsq_w8_unpack(&h.sch, &h.w, &t, &h.in, &back), "m.weight_scale", "8 x 1 scale grid", NULL);
    t = h.s;
    t.shape[0] = 7, t.nbytes = 28; /* [7, 1] */
    expect_fail(dsq_w8_unpack(&h.sch, &h.w, &t, &h.in, &back), "m.weight_scale", NULL);
    float *sc = (float *)h.s.data;
    float keep = sc[3];
    sc[3] = NAN;
    expect_fail(dsq_w8_unpack(&h.sch, &h.w, &h.s, &h.in, &back), "m.weight_scale", "scale 3", "finite", NULL);
    sc[3] = -1.0f;
    expect_fail(dsq_w8_unpack(&h.sch, &h.w, &h.s, &h.in, &back), "m.weight_scale", "scale 3", NULL);
    sc[3] = keep;
    expect_fail(dsq_w8_unpack(&h.sch, &h.w, &h.s, NULL, &back), "input_scale", "m.weight", "missing", NULL);
    float *in = (float *)h.in.data;
    *in = 0.0f;
    expect_fail(dsq_w8_unpack(&h.sch, &h.w, &h.s, &h.in, &back), "m.input_scale", "positive", NULL);
    *in = 0.5f;
    t = h.w;
    t.type = DSQ_TYPE_I8;
    expect_fail(dsq_w8_unpack(&h.sch, &t, &h.s, &h.in, &back), "m.weight", "expected f8_e4m3", "found i8", NULL);
    t = h.w;
    t.n_dims = 1, t.shape[0] = 8 * 64;
    expect_fail(dsq_w8_unpack(&h.sch, &t, &h.s, &h.in, &back), "m.weight", "[out, in]", NULL);
    uint8_t *codes = (uint8_t *)h.w.data;
    uint8_t c0 = codes[70];
    codes[70] = 0x7f; /* E4M3FN NaN */
    expect_fail(dsq_w8_unpack(&h.sch, &h.w, &h.s, &h.in, &back), "m.weight", "NaN", NULL);
    codes[70] = c0;
    expect_ok(dsq_w8_unpack(&h.sch, &h.w, &h.s, &h.in, &back));
    dsq_w8q_free(&back);
    /* llm-compressor stores the model dtype: BF16 scales, [1] scalars */
    uint16_t bf[8], bin;
    for (int i = 0; i < 8; i++) bf[i] = dsq_f32_to_bf16(sc[i]);
    bin = dsq_f32_to_bf16(*in);
    dsq_tensor b = h.s, bi = h.in;
    b.type = bi.type = DSQ_TYPE_BF16, b.data = bf, bi.data = &bin, b.nbytes = 16, bi.nbytes = 2;
    expect_ok(dsq_w8_unpack(&h.sch, &h.w, &b, &bi, &back));
    for (int i = 0; i < 8; i++) assert_true(back.scales[i] == dsq_bf16_to_f32(bf[i]));
    assert_true(back.act_scale == dsq_bf16_to_f32(bin));
    dsq_w8q_free(&back);
    hostile_free(&h);
}

/* DeepSeek-V3's padded edge blocks read back: a 100 x 72 weight in 32 x 32 blocks. */
static void test_edge_blocks(void **state)
{
    (void)state;
    dsq_w8_scheme s = {DSQ_W8_FP8, DSQ_W8_W_BLOCK, 32, 32, DSQ_W8_ACT_GROUP, 32};
    float *w = malloc(100 * 72 * sizeof *w);
    for (int i = 0; i < 100 * 72; i++) w[i] = (i / 72 >= 96 ? 8.0f : 1.0f) * dsq_test_randn(&g_seed);
    dsq_w8q q, back;
    expect_ok(dsq_w8q_quantize(w, 100, 72, &s, "edge", &q));
    assert_int_equal(q.n_scale_rows, 4);
    assert_int_equal(q.n_scale_cols, 3);
    dsq_packed p;
    expect_ok(dsq_w8_pack(DSQ_INT_FORMAT_FP8, &q, &p));
    dsq_tensor tw = dsq_packed_view(dsq_packed_find(&p, "weight"));
    dsq_tensor ts = dsq_packed_view(dsq_packed_find(&p, "weight_scale_inv"));
    expect_ok(dsq_w8_unpack(&s, &tw, &ts, NULL, &back));
    same_w8q(&back, &q, "edge blocks");
    /* the 4-row edge tile has its own (larger) scale */
    assert_true(back.scales[3 * 3] > 2.0f * back.scales[0]);
    dsq_w8q_free(&back);
    ts.shape[0] = 3, ts.nbytes = 36; /* a floor grid */
    expect_fail(dsq_w8_unpack(&s, &tw, &ts, NULL, &back), "weight_scale_inv", "4 x 3 scale grid", NULL);
    dsq_packed_free(&p);
    dsq_w8q_free(&q);
    free(w);
}

/* Copies src's model.safetensors into dst with the tensor `from` renamed `to`
 * (to NULL: left out), and config.json. */
static void copy_renamed(const char *src, const char *dst, const char *from, const char *to)
{
    assert_int_equal(mkdir(dst, 0755), 0);
    char *cfg = join(src, "config.json"), *text = NULL;
    size_t len = 0;
    expect_ok(dsq_read_file(cfg, 1 << 20, &text, &len));
    free(dsq_test_write(dst, "config.json", text, len));
    free(text), free(cfg);
    dsq_st_model *st;
    expect_ok(dsq_st_model_open(src, &st));
    dsq_st_writer *w;
    expect_ok(dsq_st_writer_new(dst, "model", 1ull << 30, &w));
    for (size_t i = 0; i < st->n_tensors; i++) {
        dsq_tensor t;
        expect_ok(dsq_st_model_view(st, i, &t));
        bool hit = !strcmp(t.name, from);
        if (!hit || to) expect_ok(dsq_st_writer_add(w, hit ? to : t.name, t.type, t.n_dims, t.shape));
    }
    expect_ok(dsq_st_writer_begin(w));
    for (size_t i = 0; i < st->n_tensors; i++) {
        dsq_tensor t;
        expect_ok(dsq_st_model_view(st, i, &t));
        if (strcmp(t.name, from) != 0 || to) expect_ok(dsq_st_writer_write(w, t.data, t.nbytes));
    }
    expect_ok(dsq_st_writer_finish(w));
    dsq_st_writer_free(w);
    dsq_st_model_close(st);
}

static void test_hostile_folder(void **state)
{
    (void)state;
    char *tmp = dsq_test_mkdtemp(), *src = make_src(tmp), *out = join(tmp, "out");
    dsq_model *m;
    expect_ok(dsq_model_open(src, &m));
    written wr;
    case8 c = {"ct FP8 static + kv", DSQ_INT_FORMAT_CT, dsq_w8_scheme_fp8_static(), true, -1};
    expect_ok(write_w8(m, &c, out, &wr));
    written_free(&wr);
    dsq_model_close(m);
    static const struct {
        const char *drop, *needle;
    } cases[] = {
        {"model.layers.1.mlp.up_proj.input_scale", "static input_scale of model.layers.1.mlp.up_proj.weight"},
        {"model.layers.0.self_attn.k_proj.weight_scale", "model.layers.0.self_attn.k_proj.weight_scale is missing"},
        {"model.layers.1.self_attn.v_scale", "model.layers.1.self_attn.v_scale is missing"},
    };
    /* older llm-compressor KV names: self_attn.k_proj.output_scale */
    char *old = join(tmp, "old");
    copy_renamed(out, old, "model.layers.1.self_attn.k_scale", "model.layers.1.self_attn.k_proj.output_scale");
    dsq_model *mo;
    expect_ok(dsq_model_open(old, &mo));
    assert_true(mo->layers[1].k_scale == 0.02f + 0.01f && mo->layers[1].v_scale == 0.03f + 0.01f);
    dsq_model_close(mo);
    free(old);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%zu", i);
        char *bad = join(tmp, name);
        copy_renamed(out, bad, cases[i].drop, NULL);
        dsq_model *q = NULL;
        expect_fail(dsq_model_open(bad, &q), cases[i].needle, bad, NULL);
        assert_null(q);
        free(bad);
    }
    free(src), free(out);
    dsq_test_rmtmp(tmp);
}

static void config_fails(const char *qc, const char *needle)
{
    char *tmp = dsq_test_mkdtemp();
    char text[4096];
    snprintf(text, sizeof text, "{\"architectures\": [\"LlamaForCausalLM\"], \"quantization_config\": %s}", qc);
    write_text(tmp, "config.json", text);
    dsq_hfq q;
    expect_fail(dsq_hfq_from_dir(tmp, &q), "config.json", needle, NULL);
    dsq_test_rmtmp(tmp);
}

#define CT_W(weights, inputs)                                                                                          \
    "{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", \"config_groups\": {\"group_0\": "    \
    "{\"targets\": [\"Linear\"], \"weights\": " weights ", \"input_activations\": " inputs "}}}"

static void test_hostile_configs(void **state)
{
    (void)state;
    config_fails(CT_W("{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"group\", \"group_size\": 128}", "null"),
                 "strategy \"group\"");
    config_fails(CT_W("{\"num_bits\": 4, \"type\": \"float\", \"strategy\": \"channel\"}", "null"), "num_bits 4");
    config_fails(CT_W("{\"num_bits\": 8, \"type\": \"bogus\", \"strategy\": \"channel\"}", "null"), "type \"bogus\"");
    config_fails(CT_W("{\"num_bits\": 8, \"type\": \"int\", \"strategy\": \"channel\", \"symmetric\": false}", "null"),
                 "asymmetric");
    config_fails(CT_W("{\"num_bits\": 8, \"type\": \"int\", \"strategy\": \"channel\"}",
                      "{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"token\", \"dynamic\": true}"),
                 "int8 weights with fp8 activations");
    config_fails(CT_W("{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"channel\"}",
                      "{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"token\", \"dynamic\": false}"),
                 "strategy \"token\"");
    config_fails(CT_W("{\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"block\"}", "null"), "block_structure");
    config_fails("{\"quant_method\": \"compressed-tensors\", \"format\": \"float-quantized\", \"kv_cache_scheme\": "
                 "{\"num_bits\": 8, \"type\": \"int\"}, \"config_groups\": {\"group_0\": {\"targets\": [\"Linear\"], "
                 "\"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"tensor\"}}}}",
                 "kv_cache_scheme");
    config_fails("{\"quant_method\": \"fp8\"}", "activation_scheme is missing");
    config_fails("{\"quant_method\": \"fp8\", \"activation_scheme\": \"static\", \"weight_block_size\": [128, 128]}",
                 "needs activation_scheme \"dynamic\"");
    config_fails("{\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\", \"weight_block_size\": [128]}",
                 "block_structure");
    config_fails("{\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\", \"fmt\": \"e5m2\"}", "e5m2");
    config_fails("{\"quant_method\": \"modelopt\", \"quant_algo\": \"NVFP4\"}", "quant_algo \"NVFP4\"");
    config_fails("{\"quant_method\": \"modelopt\"}", "no quant_algo");
    /* hf_quant_config.json alone (older ModelOpt exports): read, and refused when hostile */
    char *tmp = dsq_test_mkdtemp();
    write_text(tmp, "config.json", "{\"architectures\": [\"LlamaForCausalLM\"]}");
    write_text(tmp, "hf_quant_config.json",
               "{\"producer\": {\"name\": \"modelopt\"}, \"quantization\": {\"quant_algo\": \"FP8\", "
               "\"kv_cache_quant_algo\": \"FP8\", \"exclude_modules\": [\"lm_head\", \"model.layers.1.mlp*\"]}}");
    dsq_hfq q;
    expect_ok(dsq_hfq_from_dir(tmp, &q));
    assert_int_equal(q.method, DSQ_HFQ_W8);
    assert_int_equal(q.w8_format, DSQ_INT_FORMAT_MODELOPT);
    assert_true(q.kv_fp8);
    assert_true(dsq_hfq_skips(&q, "model.layers.1.mlp.down_proj")); /* a ModelOpt wildcard */
    assert_false(dsq_hfq_skips(&q, "model.layers.0.mlp.down_proj"));
    dsq_hfq_free(&q);
    write_text(tmp, "hf_quant_config.json", "{\"quantization\": {\"quant_algo\": \"W4A8_AWQ\"}}");
    expect_fail(dsq_hfq_from_dir(tmp, &q), "hf_quant_config.json", "W4A8_AWQ", NULL);
    dsq_test_rmtmp(tmp);
}

/* ---- GPTQ: desc_act only with a g_idx ---- */

static bool gptq_desc_act(const dsq_model *m, const char *out, bool static_groups)
{
    bool quantized[T_LAYERS * N_LIN], bias[T_LAYERS * N_LIN];
    for (int i = 0; i < T_LAYERS * N_LIN; i++) quantized[i] = true, bias[i] = false;
    dsq_int_source src = {m->ckpt, &m->arch, m->block, m->vocab, m->tied, false, quantized, bias};
    dsq_int_spec spec = {.format = DSQ_INT_FORMAT_GPTQ,
                         .bits = 4,
                         .group = 32,
                         .sym = true,
                         .act_order = true,
                         .static_groups = static_groups,
                         .damp = 0.01};
    dsq_outdir *d;
    dsq_int_writer *w;
    expect_ok(dsq_outdir_open(out, false, &d));
    expect_ok(dsq_int_writer_new(dsq_outdir_tmp_path(d), &src, &spec, &w));
    dsq_linear E;
    expect_ok(dsq_linear_from_tensor(&E, &m->tok_embd));
    expect_ok(dsq_int_writer_rows(w, m->vocab, m->dim, rows_of, &E));
    dsq_linear_release(&E);
    float *f = malloc(T_FFN * T_FFN * sizeof *f);
    dsq_intq_params p = {4, 32, true, DSQ_INTQ_RULE_GPTQ, 0, DSQ_INTQ_GRID_MINMAX};
    for (int l = 0; l < T_LAYERS; l++) {
        dsq_int_layer L;
        memset(&L, 0, sizeof L);
        L.layer = l;
        dsq_intq q[N_LIN];
        for (int i = 0; i < m->block->n_norms; i++) L.norm[i] = m->layers[l].norm[i];
        for (int i = 0; i < N_LIN; i++) {
            const dsq_linear *W = &m->layers[l].lin[i];
            expect_ok(dsq_linear_rows_f32(W, 0, W->out, f));
            expect_ok(dsq_intq_quantize(f, W->out, W->in, &p, NULL, &q[i]));
            L.q[i] = &q[i];
        }
        expect_ok(dsq_int_writer_layer(w, &L));
        for (int i = 0; i < N_LIN; i++) dsq_intq_free(&q[i]);
    }
    free(f);
    expect_ok(dsq_int_writer_vector(w, m->output_norm, (size_t)m->dim));
    expect_ok(dsq_int_writer_rows(w, m->vocab, m->dim, rows_of, (void *)&m->output));
    expect_ok(dsq_int_writer_finish(w, d));
    dsq_int_writer_free(w);
    expect_ok(dsq_outdir_commit(d));
    cJSON *root = read_json(out, "quantize_config.json");
    const cJSON *da = cJSON_GetObjectItemCaseSensitive(root, "desc_act");
    const cJSON *sg = cJSON_GetObjectItemCaseSensitive(root, "static_groups");
    assert_true(cJSON_IsBool(da) && cJSON_IsBool(sg));
    assert_int_equal(cJSON_IsTrue(sg), static_groups);
    bool r = cJSON_IsTrue(da);
    cJSON_Delete(root);
    return r;
}

static void test_gptq_act_order(void **state)
{
    (void)state;
    char *tmp = dsq_test_mkdtemp(), *src = make_src(tmp), *a = join(tmp, "static"), *b = join(tmp, "g_idx");
    dsq_model *m;
    expect_ok(dsq_model_open(src, &m));
    assert_false(gptq_desc_act(m, a, true)); /* --act-order: what vLLM loads */
    assert_true(gptq_desc_act(m, b, false)); /* --desc-act */
    dsq_model_close(m);
    free(src), free(a), free(b);
    dsq_test_rmtmp(tmp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ct),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_modelopt),
        cmocka_unit_test(test_config_exact),
        cmocka_unit_test(test_format_matrix),
        cmocka_unit_test(test_ceil_grid),
        cmocka_unit_test(test_hostile_tensors),
        cmocka_unit_test(test_edge_blocks),
        cmocka_unit_test(test_hostile_folder),
        cmocka_unit_test(test_hostile_configs),
        cmocka_unit_test(test_gptq_act_order),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
