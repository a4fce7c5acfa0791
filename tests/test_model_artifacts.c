/* Quantized Hugging Face artifacts run directly: a tiny synthetic Llama/Qwen2
 * model is quantized (RTN), packed as AutoAWQ GEMM, GPTQ v1/v2 and
 * compressed-tensors pack-quantized with our packers, written with the
 * safetensors writer and a config.json quantization_config, and must give the
 * logits of the same model with the dequantized weights stored densely (both
 * the batched and the one-token decode path). Also: modules_to_not_convert /
 * ignore keep layers dense, a quantized lm_head, and the refusals of unknown
 * methods and variants, each naming what it refused. */
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

#include "formats/block_llama.h"
#include "core/status.h"
#include "formats/hf_config.h"
#include "formats/pack_awq.h"
#include "formats/pack_ct.h"
#include "formats/pack_gptq.h"
#include "formats/safetensors.h"
#include "quantizers/intq.h"
#include "runtime/forward.h"
#include "runtime/linear.h"
#include "runtime/model.h"
#include "tests/helpers/testutil.h"

#define T_HIDDEN 64
#define T_FFN 96
#define T_LAYERS 2
#define T_HEADS 4
#define T_KV 2
#define T_HD 16
#define T_VOCAB 128
#define T_TOKS 11

static uint64_t g_seed = 0x71a9e5d3c1b2a4f6ull;
static const int32_t g_toks[T_TOKS] = {1, 17, 99, 3, 64, 64, 120, 5, 0, 127, 42};

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("unexpected failure: %s", dsq_errmsg());
}

static float *randm(size_t n, float scale, float offset)
{
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    for (size_t i = 0; i < n; i++) x[i] = offset + scale * dsq_test_randn(&g_seed);
    return x;
}

/* ---- the tiny model ---- */

typedef struct tensor {
    char name[96];
    int n_dims;
    int64_t shape[2];
    float *data;
    bool linear; /* a decoder or head projection: quantizable */
} tensor;

typedef struct tiny {
    dsq_arch a;
    int n;
    tensor t[48];
} tiny;

static void add(tiny *m, const char *name, int n_dims, int64_t d0, int64_t d1, float scale, float offset, bool linear)
{
    tensor *t = &m->t[m->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->data = randm((size_t)d0 * (size_t)(n_dims == 2 ? d1 : 1), scale, offset);
    t->linear = linear;
}

static void tiny_build(tiny *m, bool qwen2)
{
    memset(m, 0, sizeof *m);
    dsq_arch *a = &m->a;
    a->family = qwen2 ? DSQ_ARCH_QWEN2 : DSQ_ARCH_LLAMA;
    snprintf(a->hf_architecture, sizeof a->hf_architecture, "%s", qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM");
    snprintf(a->model_type, sizeof a->model_type, "%s", qwen2 ? "qwen2" : "llama");
    a->hidden_size = T_HIDDEN;
    a->intermediate_size = T_FFN;
    a->n_layers = T_LAYERS;
    a->n_heads = T_HEADS;
    a->n_kv_heads = T_KV;
    a->head_dim = T_HD;
    a->vocab_size = T_VOCAB;
    a->max_position_embeddings = 2048;
    a->rms_norm_eps = 1e-5;
    a->rope_theta = 10000;
    a->attention_bias = qwen2;
    a->bos_token_id = 1;
    a->eos_token_id = 2;
    snprintf(a->torch_dtype, sizeof a->torch_dtype, "float32");
    expect_ok(dsq_arch_validate(a, "tiny"));
    add(m, "model.embed_tokens.weight", 2, T_VOCAB, T_HIDDEN, 1, 0, false);
    add(m, "model.norm.weight", 1, T_HIDDEN, 0, 0.1f, 1, false);
    add(m, "lm_head.weight", 2, T_VOCAB, T_HIDDEN, 0.1f, 0, true);
    static const struct {
        const char *name;
        int64_t d0, d1;
        float sc;
    } lin[] = {{"self_attn.q_proj", T_HEADS * T_HD, T_HIDDEN, 0.15f}, {"self_attn.k_proj", T_KV * T_HD, T_HIDDEN, 0.15f},
               {"self_attn.v_proj", T_KV * T_HD, T_HIDDEN, 0.15f},    {"self_attn.o_proj", T_HIDDEN, T_HEADS * T_HD, 0.1f},
               {"mlp.gate_proj", T_FFN, T_HIDDEN, 0.15f},             {"mlp.up_proj", T_FFN, T_HIDDEN, 0.15f},
               {"mlp.down_proj", T_HIDDEN, T_FFN, 0.1f}};
    char n[96];
    for (int l = 0; l < T_LAYERS; l++) {
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", l);
        add(m, n, 1, T_HIDDEN, 0, 0.1f, 1, false);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", l);
        add(m, n, 1, T_HIDDEN, 0, 0.1f, 1, false);
        for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
            snprintf(n, sizeof n, "model.layers.%d.%s.weight", l, lin[i].name);
            add(m, n, 2, lin[i].d0, lin[i].d1, lin[i].sc, 0, true);
            if (qwen2 && i < 3) {
                snprintf(n, sizeof n, "model.layers.%d.%s.bias", l, lin[i].name);
                add(m, n, 1, lin[i].d0, 0, 0.3f, 0, false);
            }
        }
    }
}

static void tiny_free(tiny *m)
{
    for (int i = 0; i < m->n; i++) free(m->t[i].data);
}

/* ---- one artifact format ---- */

typedef enum { FMT_AWQ, FMT_GPTQ, FMT_CT } fmt_kind;

typedef struct variant {
    const char *label;
    fmt_kind fmt;
    int bits, group; /* group -1: one per row */
    bool sym, act_order, quant_head;
    dsq_gptq_format gptq;
    const char *skip[2]; /* left dense (modules_to_not_convert / ignore) */
    const char *dense_module; /* a module the skip list must keep dense */
} variant;

static bool skipped(const variant *v, const char *module)
{
    if (!strcmp(module, "lm_head") && !v->quant_head) return true;
    for (int i = 0; i < 2 && v->skip[i]; i++) {
        const char *s = v->skip[i];
        if (!strncmp(s, "re:", 3) ? strstr(module, "gate_proj") != NULL : strstr(module, s) != NULL) return true;
    }
    return false;
}

static void set_act_order(dsq_intq *q)
{
    q->g_idx = malloc((size_t)q->cols * sizeof *q->g_idx);
    int32_t *perm = malloc((size_t)q->cols * sizeof *perm);
    for (int64_t c = 0; c < q->cols; c++) perm[c] = (int32_t)c;
    for (int64_t c = q->cols - 1; c > 0; c--) {
        int64_t j = (int64_t)(dsq_test_rand(&g_seed) % (uint64_t)(c + 1));
        int32_t t = perm[c];
        perm[c] = perm[j];
        perm[j] = t;
    }
    for (int64_t i = 0; i < q->cols; i++) q->g_idx[perm[i]] = (int32_t)(i / q->group_size);
    free(perm);
}

static void pack(const variant *v, const dsq_intq *q, dsq_packed *p)
{
    switch (v->fmt) {
    case FMT_AWQ: expect_ok(dsq_awq_pack(q, p)); break;
    case FMT_GPTQ: expect_ok(dsq_gptq_pack(q, v->gptq, DSQ_TYPE_F16, p, NULL)); break;
    case FMT_CT: expect_ok(dsq_ct_pack(q, DSQ_TYPE_F16, p)); break;
    }
}

static const dsq_tensor *view(const dsq_packed *p, const char *suffix, dsq_tensor *v)
{
    const dsq_pack_tensor *t = dsq_packed_find(p, suffix);
    if (!t) return NULL;
    *v = dsq_packed_view(t);
    return v;
}

/* What a reader gets back (F16 scales): the dense twin is made from this. */
static void unpack(const variant *v, const dsq_packed *p, dsq_intq *back)
{
    dsq_tensor a, b, c, d, e;
    switch (v->fmt) {
    case FMT_AWQ:
        expect_ok(dsq_awq_unpack(view(p, "qweight", &a), view(p, "qzeros", &b), view(p, "scales", &c), v->group, back));
        break;
    case FMT_GPTQ:
        expect_ok(dsq_gptq_unpack(view(p, "qweight", &a), view(p, "qzeros", &b), view(p, "scales", &c),
                                  view(p, "g_idx", &d), v->bits, v->group, v->sym, v->gptq, back));
        break;
    case FMT_CT:
        expect_ok(dsq_ct_unpack(view(p, "weight_packed", &a), view(p, "weight_scale", &b),
                                view(p, "weight_zero_point", &c), view(p, "weight_shape", &d),
                                view(p, "weight_g_idx", &e), v->bits, v->group, v->sym, back));
        break;
    }
}

static cJSON *quant_config(const variant *v)
{
    cJSON *o = NULL;
    switch (v->fmt) {
    case FMT_AWQ: {
        size_t n = v->skip[0] ? (v->skip[1] ? 2 : 1) : 0;
        expect_ok(dsq_awq_config_json(v->group, v->skip, n, &o));
        break;
    }
    case FMT_GPTQ: {
        dsq_gptq_config c = {.bits = v->bits, .group_size = v->group, .damp_percent = 0.01, .desc_act = v->act_order,
                             .sym = v->sym, .true_sequential = true, .format = v->gptq};
        expect_ok(dsq_gptq_config_json(&c, &o));
        break;
    }
    case FMT_CT: {
        const char *ign[3] = {"lm_head", v->skip[0], v->skip[1]};
        size_t n = 1 + (v->skip[0] ? 1 : 0) + (v->skip[1] ? 1 : 0);
        dsq_ct_config c = {.bits = v->bits, .group_size = v->group, .sym = v->sym,
                           .actorder = v->act_order ? "group" : NULL, .ignore = ign, .n_ignore = n};
        expect_ok(dsq_ct_config_json(&c, &o));
        break;
    }
    }
    return o;
}

static void write_config(const dsq_arch *a, const char *dir, cJSON *qc)
{
    char *json;
    expect_ok(dsq_arch_to_hf_json(a, &json));
    cJSON *root = cJSON_Parse(json);
    free(json);
    assert_non_null(root);
    if (qc) cJSON_AddItemToObject(root, "quantization_config", qc);
    char *text = cJSON_Print(root);
    free(dsq_test_write(dir, "config.json", text, strlen(text)));
    free(text);
    cJSON_Delete(root);
}

/* One tensor to write: a name, a type, a shape and its bytes. */
typedef struct out_tensor {
    char name[128];
    dsq_type type;
    int n_dims;
    int64_t shape[2];
    const void *data;
    uint64_t nbytes;
} out_tensor;

static void write_st(const char *dir, const out_tensor *t, int n)
{
    dsq_st_writer *w;
    expect_ok(dsq_st_writer_new(dir, "model", 1ull << 30, &w));
    for (int i = 0; i < n; i++) expect_ok(dsq_st_writer_add(w, t[i].name, t[i].type, t[i].n_dims, t[i].shape));
    expect_ok(dsq_st_writer_begin(w));
    for (int i = 0; i < n; i++) expect_ok(dsq_st_writer_write(w, t[i].data, t[i].nbytes));
    expect_ok(dsq_st_writer_finish(w));
    dsq_st_writer_free(w);
}

static char *subdir(const char *dir, const char *name)
{
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    assert_int_equal(mkdir(p, 0755), 0);
    return p;
}

/* Writes the quantized artifact to dir/q and its dense twin to dir/d. */
static void write_pair(const tiny *m, const variant *v, const char *dir, char **qdir, char **ddir)
{
    out_tensor *qt = calloc(256, sizeof *qt), *dt = calloc(64, sizeof *dt);
    dsq_packed *packs = calloc((size_t)m->n, sizeof *packs);
    float **dense = calloc((size_t)m->n, sizeof *dense);
    int nq = 0, nd = 0;
    for (int i = 0; i < m->n; i++) {
        const tensor *t = &m->t[i];
        uint64_t n = (uint64_t)t->shape[0] * (uint64_t)(t->n_dims == 2 ? t->shape[1] : 1);
        out_tensor plain = {.type = DSQ_TYPE_F32, .n_dims = t->n_dims, .data = t->data, .nbytes = n * 4};
        snprintf(plain.name, sizeof plain.name, "%s", t->name);
        memcpy(plain.shape, t->shape, sizeof plain.shape);
        char module[96];
        snprintf(module, sizeof module, "%.*s", (int)(strlen(t->name) - 7), t->name); /* minus ".weight" */
        if (!t->linear || skipped(v, module)) {
            qt[nq++] = plain;
            dt[nd++] = plain;
            continue;
        }
        dsq_intq_params p = {.bits = v->bits, .group_size = v->group, .sym = v->sym, .rule = DSQ_INTQ_RULE_GPTQ};
        dsq_intq q, back;
        expect_ok(dsq_intq_quantize(t->data, t->shape[0], t->shape[1], &p, NULL, &q));
        if (v->act_order) set_act_order(&q);
        pack(v, &q, &packs[i]);
        unpack(v, &packs[i], &back);
        dense[i] = malloc(n * sizeof(float));
        expect_ok(dsq_intq_dequantize(&back, dense[i]));
        dsq_intq_free(&q);
        dsq_intq_free(&back);
        plain.data = dense[i];
        dt[nd++] = plain;
        for (int k = 0; k < packs[i].n; k++) {
            const dsq_pack_tensor *pt = &packs[i].t[k];
            out_tensor *o = &qt[nq++];
            snprintf(o->name, sizeof o->name, "%s.%s", module, pt->suffix);
            o->type = pt->type;
            o->n_dims = pt->n_dims;
            memcpy(o->shape, pt->shape, sizeof o->shape);
            o->data = pt->data;
            o->nbytes = pt->nbytes;
        }
    }
    *qdir = subdir(dir, "q");
    *ddir = subdir(dir, "d");
    write_config(&m->a, *qdir, quant_config(v));
    write_config(&m->a, *ddir, NULL);
    write_st(*qdir, qt, nq);
    write_st(*ddir, dt, nd);
    for (int i = 0; i < m->n; i++) {
        dsq_packed_free(&packs[i]);
        free(dense[i]);
    }
    free(packs), free(dense), free(qt), free(dt);
}

/* ---- running ---- */

/* Logits of all tokens at once (batched path) and one by one (decode path). */
static void run(const dsq_model *m, float *batched, float *decoded)
{
    dsq_ctx *c;
    expect_ok(dsq_ctx_new(m, 32, 2, &c));
    expect_ok(dsq_forward(c, g_toks, T_TOKS, 0, batched));
    dsq_ctx_free(c);
    expect_ok(dsq_ctx_new(m, 32, 2, &c));
    for (int t = 0; t < T_TOKS; t++) expect_ok(dsq_forward(c, g_toks + t, 1, t, decoded + (size_t)t * T_VOCAB));
    dsq_ctx_free(c);
}

static void assert_close(const float *a, const float *b, const char *what, const char *label)
{
    for (size_t i = 0; i < (size_t)T_TOKS * T_VOCAB; i++)
        if (!(fabsf(a[i] - b[i]) <= 1e-4f)) fail_msg("%s %s: logit [%zu] %.7g vs dense %.7g", label, what, i, a[i], b[i]);
}

static void check_storage(const dsq_model *m, const variant *v)
{
    for (int l = 0; l < T_LAYERS; l++)
        for (int i = 0; i < DSQ_LLAMA_N_LINEARS; i++) {
            char module[96];
            snprintf(module, sizeof module, "model.layers.%d.%s", l,
                     i < 4 ? (const char *[]){"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                              "self_attn.o_proj"}[i]
                           : (const char *[]){"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}[i - 4]);
            bool want = !skipped(v, module);
            if (dsq_linear_is_intq(&m->layers[l].lin[i]) != want)
                fail_msg("%s: %s should be %s", v->label, module, want ? "INT" : "dense");
            if (want) assert_int_equal(dsq_linear_intq_bits(&m->layers[l].lin[i]), v->bits);
        }
    assert_int_equal(dsq_linear_is_intq(&m->output), v->quant_head);
    assert_false(m->tied);
}

static void run_variant(const variant *v, bool qwen2)
{
    char *dir = dsq_test_mkdtemp(), *qdir, *ddir;
    tiny m;
    tiny_build(&m, qwen2);
    write_pair(&m, v, dir, &qdir, &ddir);
    dsq_model *mq, *md;
    dsq_status s = dsq_model_open(qdir, &mq);
    if (s != DSQ_OK) fail_msg("%s: %s", v->label, dsq_errmsg());
    expect_ok(dsq_model_open(ddir, &md));
    check_storage(mq, v);
    size_t n = (size_t)T_TOKS * T_VOCAB;
    float *qb = malloc(n * sizeof *qb), *qd = malloc(n * sizeof *qd), *db = malloc(n * sizeof *db),
          *dd = malloc(n * sizeof *dd);
    run(mq, qb, qd);
    run(md, db, dd);
    assert_close(qb, db, "batched", v->label);
    assert_close(qd, dd, "decode", v->label);
    dsq_model_close(mq);
    dsq_model_close(md);
    free(qb), free(qd), free(db), free(dd), free(qdir), free(ddir);
    tiny_free(&m);
    dsq_test_rmtmp(dir);
}

static void test_awq(void **state)
{
    (void)state;
    variant v[] = {
        {.label = "awq g32 asym, down dense", .fmt = FMT_AWQ, .bits = 4, .group = 32, .skip = {"down_proj"}},
        {.label = "awq g-1 sym", .fmt = FMT_AWQ, .bits = 4, .group = -1, .sym = true},
    };
    run_variant(&v[0], true);
    run_variant(&v[1], false);
}

static void test_gptq(void **state)
{
    (void)state;
    variant v[] = {
        {.label = "gptq v1 4-bit g32 sym desc_act", .fmt = FMT_GPTQ, .bits = 4, .group = 32, .sym = true,
         .act_order = true},
        {.label = "gptq v1 3-bit g32 asym", .fmt = FMT_GPTQ, .bits = 3, .group = 32},
        {.label = "gptq v1 2-bit g-1 asym, head", .fmt = FMT_GPTQ, .bits = 2, .group = -1, .quant_head = true},
        {.label = "gptq v2 8-bit g32 asym desc_act", .fmt = FMT_GPTQ, .bits = 8, .group = 32, .act_order = true,
         .gptq = DSQ_GPTQ_FORMAT_V2},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) run_variant(&v[i], i % 2 == 1);
}

static void test_compressed_tensors(void **state)
{
    (void)state;
    variant v[] = {
        {.label = "ct 4-bit g32 sym, gate by re:", .fmt = FMT_CT, .bits = 4, .group = 32, .sym = true,
         .skip = {"re:.*gate_proj$"}},
        {.label = "ct 8-bit channel asym", .fmt = FMT_CT, .bits = 8, .group = -1},
        {.label = "ct 4-bit g32 asym actorder group", .fmt = FMT_CT, .bits = 4, .group = 32, .act_order = true},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) run_variant(&v[i], i == 1);
}

/* A config the runtime cannot honour is refused by name at open. */
static void refuse(const char *qc_json, dsq_status want, const char *needle)
{
    char *dir = dsq_test_mkdtemp(), *q = subdir(dir, "x");
    tiny m;
    tiny_build(&m, false);
    cJSON *qc = cJSON_Parse(qc_json);
    assert_non_null(qc);
    write_config(&m.a, q, qc);
    out_tensor t[48];
    for (int i = 0; i < m.n; i++) {
        memset(&t[i], 0, sizeof t[i]);
        snprintf(t[i].name, sizeof t[i].name, "%s", m.t[i].name);
        t[i].type = DSQ_TYPE_F32;
        t[i].n_dims = m.t[i].n_dims;
        memcpy(t[i].shape, m.t[i].shape, sizeof t[i].shape);
        t[i].data = m.t[i].data;
        t[i].nbytes = (uint64_t)m.t[i].shape[0] * (uint64_t)(m.t[i].n_dims == 2 ? m.t[i].shape[1] : 1) * 4;
    }
    write_st(q, t, m.n);
    dsq_model *mm = NULL;
    assert_int_equal(dsq_model_open(q, &mm), want);
    assert_null(mm);
    if (!strstr(dsq_errmsg(), needle)) fail_msg("error \"%s\" does not name \"%s\"", dsq_errmsg(), needle);
    tiny_free(&m);
    free(q);
    dsq_test_rmtmp(dir);
}

static void test_refusals(void **state)
{
    (void)state;
    refuse("{\"quant_method\": \"bitsandbytes\", \"load_in_4bit\": true}", DSQ_ERR_UNSUPPORTED, "bitsandbytes");
    refuse("{\"quant_method\": \"awq\", \"version\": \"gemv\", \"bits\": 4, \"group_size\": 32}", DSQ_ERR_UNSUPPORTED,
           "gemv");
    refuse("{\"quant_method\": \"awq\", \"version\": \"gemm\", \"bits\": 3, \"group_size\": 32}", DSQ_ERR_UNSUPPORTED,
           "3 bits");
    refuse("{\"quant_method\": \"gptq\", \"checkpoint_format\": \"marlin\", \"bits\": 4, \"group_size\": 32}",
           DSQ_ERR_UNSUPPORTED, "marlin");
    refuse("{\"quant_method\": \"gptq\", \"bits\": 5, \"group_size\": 32}", DSQ_ERR_UNSUPPORTED, "5-bit");
    /* (float-quantized is the 8-bit reader's: tests/test_w8_artifacts.c) */
    refuse("{\"quant_method\": \"compressed-tensors\", \"format\": \"nvfp4-pack-quantized\", \"config_groups\": "
           "{\"group_0\": {\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 4, \"type\": \"float\"}}}}",
           DSQ_ERR_UNSUPPORTED, "nvfp4-pack-quantized");
    refuse("{\"quant_method\": \"compressed-tensors\", \"format\": \"pack-quantized\", \"config_groups\": "
           "{\"group_0\": {\"targets\": [\"Linear\"], \"weights\": {\"num_bits\": 4, \"type\": \"int\", \"symmetric\": "
           "true, \"strategy\": \"group\", \"group_size\": 32}, \"input_activations\": {\"num_bits\": 8}}}}",
           DSQ_ERR_UNSUPPORTED, "activations");
    /* hostile values: a number no int holds, a config that is not an object */
    refuse("{\"quant_method\": \"gptq\", \"bits\": 1e300, \"group_size\": 32}", DSQ_ERR_FORMAT, "bits");
    refuse("[1, 2]", DSQ_ERR_FORMAT, "quantization_config");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_awq),
        cmocka_unit_test(test_gptq),
        cmocka_unit_test(test_compressed_tensors),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
