/* Importance-matrix collection (eval/imatrix_collect.h): on a tiny synthetic
 * model the collected values equal a direct recomputation from the hook
 * inputs of an independently driven forward pass (chunking, BOS, batches,
 * llama.cpp's 16-row rule, ncall per call), the .dat round trip; on SmolLM2
 * an entry of the right size for every linear weight, positive values; and
 * dsquant imatrix end to end, its file accepted by dsquant gguf --imatrix. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "formats/block_llama.h"
#include "core/fileio.h"
#include "core/status.h"
#include "eval/imatrix_collect.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/imatrix.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "tests/helpers/testutil.h"

static uint64_t g_seed = 0x696d6174ull;

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("unexpected failure: %s", dsq_errmsg());
}

/* ================================================================ tiny model */

enum { H = 32, FF = 48, NL = 2, NH = 4, NKV = 2, HD = 8, NV = 64 };

static void add_tensor(dsq_gguf_writer *w, const char *name, int nd, int64_t d0, int64_t d1, float ***data, int *n,
                       float scale, float offset)
{
    int64_t shape[2] = {d0, d1};
    expect_ok(dsq_gguf_add_tensor(w, name, DSQ_TYPE_F32, nd, shape));
    size_t cnt = (size_t)d0 * (nd == 2 ? (size_t)d1 : 1);
    float *d = malloc(cnt * sizeof *d);
    for (size_t i = 0; i < cnt; i++) d[i] = offset + scale * dsq_test_randn(&g_seed);
    (*data)[(*n)++] = d;
}

/* A 2-layer Llama with F32 weights and tied embeddings. */
static char *write_tiny(const char *dir)
{
    dsq_arch a;
    memset(&a, 0, sizeof a);
    a.family = DSQ_ARCH_LLAMA;
    snprintf(a.hf_architecture, sizeof a.hf_architecture, "LlamaForCausalLM");
    snprintf(a.model_type, sizeof a.model_type, "llama");
    a.hidden_size = H, a.intermediate_size = FF, a.n_layers = NL, a.n_heads = NH, a.n_kv_heads = NKV;
    a.head_dim = HD, a.vocab_size = NV, a.max_position_embeddings = 256, a.rms_norm_eps = 1e-5;
    a.rope_theta = 10000, a.tie_word_embeddings = true, a.bos_token_id = 1, a.eos_token_id = 2;
    expect_ok(dsq_arch_validate(&a, "tiny"));
    dsq_gguf_writer *w;
    expect_ok(dsq_gguf_writer_new(&w));
    expect_ok(dsq_arch_to_gguf(&a, w));
    expect_ok(dsq_gguf_set_u32(w, "llama.vocab_size", NV));
    float **data = malloc(64 * sizeof *data);
    int n = 0;
    add_tensor(w, "token_embd.weight", 2, NV, H, &data, &n, 1, 0);
    add_tensor(w, "output_norm.weight", 1, H, 0, &data, &n, 0.1f, 1);
    for (int l = 0; l < NL; l++) {
        char nm[64];
#define T(stem, nd, d0, d1, sc, off) snprintf(nm, sizeof nm, "blk.%d." stem ".weight", l), add_tensor(w, nm, nd, d0, d1, &data, &n, sc, off)
        T("attn_norm", 1, H, 0, 0.1f, 1);
        T("ffn_norm", 1, H, 0, 0.1f, 1);
        T("attn_q", 2, NH * HD, H, 0.2f, 0);
        T("attn_k", 2, NKV * HD, H, 0.2f, 0);
        T("attn_v", 2, NKV * HD, H, 0.2f, 0);
        T("attn_output", 2, H, NH * HD, 0.2f, 0);
        T("ffn_gate", 2, FF, H, 0.2f, 0);
        T("ffn_up", 2, FF, H, 0.2f, 0);
        T("ffn_down", 2, H, FF, 0.2f, 0);
#undef T
    }
    char *path = malloc(strlen(dir) + 16);
    sprintf(path, "%s/tiny.gguf", dir);
    expect_ok(dsq_gguf_writer_begin(w, path, true));
    /* Sizes in the order added. */
    const int64_t per_layer[9] = {H, H, NH * HD * H, NKV * HD * H, NKV * HD * H, H * NH * HD, FF * H, FF * H, H * FF};
    expect_ok(dsq_gguf_writer_write(w, data[0], (uint64_t)NV * H * sizeof(float)));
    expect_ok(dsq_gguf_writer_write(w, data[1], H * sizeof(float)));
    for (int l = 0; l < NL; l++)
        for (int k = 0; k < 9; k++)
            expect_ok(dsq_gguf_writer_write(w, data[2 + l * 9 + k], (uint64_t)per_layer[k] * sizeof(float)));
    expect_ok(dsq_gguf_writer_finish(w));
    dsq_gguf_writer_free(w);
    for (int i = 0; i < n; i++) free(data[i]);
    free(data);
    return path;
}

/* Sums of x^2 per (layer, linear, column), accumulated by a hook written
 * here, column by column in double. */
typedef struct direct {
    double sum[NL][DSQ_LLAMA_N_LINEARS][FF];
    int64_t count[NL][DSQ_LLAMA_N_LINEARS];
    int ncall[NL][DSQ_LLAMA_N_LINEARS];
} direct;

static dsq_status record(void *user, int layer, int which, int expert, const float *x, int n_tok, int64_t in)
{
    direct *d = user;
    if (n_tok < 16) return DSQ_OK; /* llama.cpp's rule */
    for (int64_t j = 0; j < in; j++)
        for (int t = 0; t < n_tok; t++) {
            double v = x[(size_t)t * (size_t)in + (size_t)j];
            d->sum[layer][which][j] += v * v;
        }
    d->count[layer][which] += n_tok;
    d->ncall[layer][which]++;
    return DSQ_OK;
}

/* The chunks as llama-imatrix cuts them, driven here. */
static void drive(dsq_ctx *c, const int32_t *toks, int ctx, int batch, int chunks, int32_t bos, direct *d)
{
    memset(d, 0, sizeof *d);
    dsq_ctx_set_hooks(c, record, NULL, d);
    int32_t chunk[256];
    for (int i = 0; i < chunks; i++) {
        memcpy(chunk, toks + i * ctx, (size_t)ctx * sizeof *chunk);
        if (bos >= 0) chunk[0] = bos;
        for (int b0 = 0; b0 < ctx; b0 += batch) {
            int nb = ctx - b0 < batch ? ctx - b0 : batch;
            expect_ok(dsq_forward_range(c, chunk + b0, nb, b0, nb - 1, NULL));
        }
    }
    dsq_ctx_set_hooks(c, NULL, NULL, NULL);
}

static void compare(const dsq_imatrix *im, const direct *d, const dsq_model *m)
{
    size_t want = 0;
    for (int l = 0; l < NL; l++)
        for (int k = 0; k < DSQ_LLAMA_N_LINEARS; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, dsq_block_llama.linears[k].gguf);
            const dsq_imatrix_entry *e = dsq_imatrix_find(im, name);
            if (!d->count[l][k]) {
                assert_null(e);
                continue;
            }
            want++;
            if (!e) fail_msg("no entry %s", name);
            assert_int_equal(e->nval, m->layers[l].lin[k].in);
            assert_int_equal(e->ncall, d->ncall[l][k]);
            for (uint32_t j = 0; j < e->nval; j++) {
                double mean = d->sum[l][k][j] / (double)d->count[l][k];
                if (!(fabs(e->values[j] - mean) <= 1e-6 * mean + 1e-12))
                    fail_msg("%s[%u] = %.9g, direct %.9g", name, j, e->values[j], mean);
                assert_true(e->values[j] > 0);
                assert_true(fabsf(e->stored[j] - e->values[j] * (float)e->ncall) <= 1e-6f * e->stored[j]);
            }
        }
    assert_int_equal(im->n_entries, want);
}

static void test_tiny_equals_direct(void **state)
{
    (void)state;
    char *dir = dsq_test_mkdtemp(), *path = write_tiny(dir);
    dsq_model *m;
    dsq_ctx *c, *c2;
    expect_ok(dsq_model_open(path, &m));
    expect_ok(dsq_ctx_new(m, 32, 2, &c));
    expect_ok(dsq_ctx_new(m, 32, 2, &c2));
    int32_t toks[200];
    for (int i = 0; i < 200; i++) toks[i] = (int32_t)(dsq_test_rand(&g_seed) % NV);
    struct {
        int batch, chunks, ncall;
        int32_t bos;
    } cases[] = {
        {32, 2, 2, 1},  /* one call per chunk */
        {16, 3, 6, -1}, /* two calls per chunk, no BOS */
        {20, 2, 2, 1},  /* the 12-token remainder of each chunk is not collected */
        {0, 0, 6, 1},   /* batch = ctx, every chunk the text holds (200 / 32 = 6) */
    };
    static direct d;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        dsq_imatrix_collector *col;
        expect_ok(dsq_imatrix_collector_new(m, &col));
        dsq_imatrix_opts o;
        dsq_imatrix_opts_default(&o);
        o.ctx = 32, o.batch = cases[ci].batch, o.chunks = cases[ci].chunks, o.bos = cases[ci].bos;
        dsq_imatrix_run_result r;
        expect_ok(dsq_imatrix_run(c, col, toks, 200, &o, &r));
        int chunks = cases[ci].chunks ? cases[ci].chunks : 6;
        assert_int_equal(r.n_chunks, chunks);
        assert_true(r.ppl > 1 && isfinite(r.ppl_err));
        assert_int_equal(dsq_imatrix_collector_calls(col), cases[ci].ncall);
        dsq_imatrix *im;
        expect_ok(dsq_imatrix_collector_result(col, "tiny-text", &im));
        drive(c2, toks, 32, cases[ci].batch ? cases[ci].batch : 32, chunks, cases[ci].bos, &d);
        assert_int_equal(d.ncall[0][DSQ_LLAMA_Q], cases[ci].ncall);
        compare(im, &d, m);
        assert_int_equal(im->n_entries, NL * DSQ_LLAMA_N_LINEARS);
        assert_int_equal(im->last_chunk, cases[ci].ncall);
        assert_string_equal(im->dataset, "tiny-text");
        /* The .dat round trip. */
        char out[4096];
        snprintf(out, sizeof out, "%s/im%zu.dat", dir, ci);
        expect_ok(dsq_imatrix_save(im, out, false));
        dsq_imatrix *back;
        expect_ok(dsq_imatrix_load(out, &back));
        assert_int_equal(back->n_entries, im->n_entries);
        assert_int_equal(back->last_chunk, im->last_chunk);
        assert_string_equal(back->dataset, "tiny-text");
        for (size_t i = 0; i < im->n_entries; i++) {
            assert_string_equal(back->entries[i].name, im->entries[i].name);
            assert_int_equal(back->entries[i].ncall, im->entries[i].ncall);
            assert_memory_equal(back->entries[i].stored, im->entries[i].stored, im->entries[i].nval * sizeof(float));
        }
        dsq_imatrix_free(back);
        dsq_imatrix_free(im);
        dsq_imatrix_collector_free(col);
    }
    /* Batches under 16 tokens collect nothing, as in llama.cpp. */
    dsq_imatrix_collector *col;
    expect_ok(dsq_imatrix_collector_new(m, &col));
    dsq_imatrix_opts o;
    dsq_imatrix_opts_default(&o);
    o.ctx = 32, o.batch = 8, o.chunks = 2;
    dsq_imatrix_run_result r;
    expect_ok(dsq_imatrix_run(c, col, toks, 200, &o, &r));
    dsq_imatrix *im;
    assert_int_equal(dsq_imatrix_collector_result(col, NULL, &im), DSQ_ERR_ARG);
    /* Too little text; a context over the cache. */
    o.batch = 32;
    assert_int_equal(dsq_imatrix_run(c, col, toks, 63, &o, &r), DSQ_ERR_ARG);
    o.ctx = 64;
    assert_int_equal(dsq_imatrix_run(c, col, toks, 200, &o, &r), DSQ_ERR_ARG);
    /* A non-finite input is named. */
    float bad[16 * H];
    for (int i = 0; i < 16 * H; i++) bad[i] = 1;
    bad[5 * H + 3] = INFINITY;
    assert_int_equal(dsq_imatrix_collect_hook(col, 1, DSQ_LLAMA_UP, -1, bad, 16, H), DSQ_ERR_NUMERIC);
    assert_non_null(strstr(dsq_errmsg(), "blk.1.ffn_up.weight"));
    dsq_imatrix_collector_free(col);
    dsq_ctx_free(c), dsq_ctx_free(c2);
    dsq_model_close(m);
    free(path);
    dsq_test_rmtmp(dir);
}

/* ================================================================ SmolLM2 */

static int32_t *fixture_tokens(int *n)
{
    char *text;
    size_t len;
    expect_ok(dsq_read_file(DSQ_SOURCE_DIR "/tests/data/ref_smollm2_q4_1.json", 16 << 20, &text, &len));
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "ppl"), "tokens");
    *n = cJSON_GetArraySize(t);
    int32_t *ids = malloc((size_t)*n * sizeof *ids);
    for (int i = 0; i < *n; i++) ids[i] = (int32_t)cJSON_GetArrayItem(t, i)->valueint;
    cJSON_Delete(j);
    return ids;
}

static void test_smollm2_two_chunks(void **state)
{
    (void)state;
    char *path = dsq_test_default_model();
    if (!path) DSQ_TEST_SKIP();
    dsq_model *m;
    dsq_ctx *c;
    expect_ok(dsq_model_open(path, &m));
    expect_ok(dsq_ctx_new(m, 64, 0, &c));
    int n;
    int32_t *toks = fixture_tokens(&n);
    dsq_imatrix *im[2];
    for (int v = 0; v < 2; v++) {
        dsq_imatrix_collector *col;
        expect_ok(dsq_imatrix_collector_new(m, &col));
        dsq_imatrix_opts o;
        dsq_imatrix_opts_default(&o);
        o.ctx = 64, o.chunks = 2, o.no_ppl = v == 1;
        dsq_imatrix_run_result r;
        expect_ok(dsq_imatrix_run(c, col, toks, n, &o, &r));
        if (v == 0) printf("SmolLM2, 2 chunks of 64: ppl %.3f\n", r.ppl);
        assert_true(v == 1 ? r.ppl == 0 : (r.ppl > 2 && r.ppl < 500));
        expect_ok(dsq_imatrix_collector_result(col, "wiki", &im[v]));
        dsq_imatrix_collector_free(col);
    }
    assert_int_equal(im[0]->n_entries, m->arch.n_layers * DSQ_LLAMA_N_LINEARS);
    assert_int_equal(im[0]->last_chunk, 2);
    for (int64_t l = 0; l < m->arch.n_layers; l++)
        for (int k = 0; k < DSQ_LLAMA_N_LINEARS; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", (int)l, dsq_block_llama.linears[k].gguf);
            const dsq_imatrix_entry *e = dsq_imatrix_find(im[0], name), *e1 = dsq_imatrix_find(im[1], name);
            if (!e) fail_msg("no entry %s", name);
            /* Sizes of the GGUF weights themselves. */
            int64_t ti = dsq_gguf_find_tensor(m->ckpt->gguf, name);
            assert_true(ti >= 0);
            assert_int_equal(e->nval, m->ckpt->gguf->tensors[ti].ne[0]);
            assert_int_equal(e->ncall, 2);
            expect_ok(dsq_imatrix_check_size(e, name, m->ckpt->gguf->tensors[ti].ne[0], 1));
            for (uint32_t j = 0; j < e->nval; j++) assert_true(e->values[j] > 0 && isfinite(e->values[j]));
            /* The perplexity's head does not touch the collection. */
            assert_memory_equal(e->values, e1->values, e->nval * sizeof(float));
        }
    /* q, k and v see the same input. */
    assert_memory_equal(dsq_imatrix_find(im[0], "blk.3.attn_q.weight")->values,
                        dsq_imatrix_find(im[0], "blk.3.attn_v.weight")->values, 576 * sizeof(float));
    dsq_imatrix_free(im[0]), dsq_imatrix_free(im[1]);
    free(toks);
    dsq_ctx_free(c);
    dsq_model_close(m);
    free(path);
}

static void test_cli(void **state)
{
    (void)state;
    char *model = dsq_test_default_model();
    if (!model) DSQ_TEST_SKIP();
    char *dir = dsq_test_mkdtemp(), cmd[16384], err[8192], text[8192] = "", out[4096];
    for (int i = 0; i < 12; i++)
        strcat(text, "The river rose after the storm, and the people of the valley moved their animals to the hills. ");
    char *data = dsq_test_write(dir, "calib.txt", text, strlen(text));
    snprintf(out, sizeof out, "%s/imatrix.dat", dir);
    snprintf(cmd, sizeof cmd, "%s imatrix %s --data %s --ctx 64 --chunks 2 -o %s --threads 2", DSQ_BINARY, model, data,
             out);
    if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s\n%s", cmd, err);
    assert_non_null(strstr(err, "Final estimate: PPL"));
    dsq_imatrix *im;
    expect_ok(dsq_imatrix_load(out, &im));
    assert_int_equal(im->n_entries, 30 * DSQ_LLAMA_N_LINEARS);
    assert_int_equal(im->last_chunk, 2);
    assert_string_equal(im->dataset, data);
    dsq_imatrix_free(im);
    /* An existing output is kept unless --force. */
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    /* dsquant gguf --imatrix takes it (when that command is built). */
    snprintf(cmd, sizeof cmd, "%s gguf --help > /dev/null", DSQ_BINARY);
    if (dsq_test_run(cmd, err, sizeof err) == 0) {
        snprintf(cmd, sizeof cmd, "%s gguf %s -o %s/q.gguf --type Q4_0 --imatrix %s --allow-requantize --threads 2",
                 DSQ_BINARY, model, dir, out);
        if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s\n%s", cmd, err);
        snprintf(out, sizeof out, "%s/q.gguf", dir);
        assert_true(dsq_exists(out));
    } else {
        dsq_test_fixture_missing("%s has no gguf command: the --imatrix check did not run", DSQ_BINARY);
    }
    free(data), free(model);
    dsq_test_rmtmp(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_equals_direct),
        cmocka_unit_test(test_smollm2_two_chunks),
        cmocka_unit_test(test_cli),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
