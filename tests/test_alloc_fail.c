/* Allocation-failure sweep (tests/helpers/failalloc.h): for each operation,
 * allocation N fails, for N = 1, 2, ... until the operation completes without
 * reaching N. Every N must end in DSQ_ERR_NOMEM with a message that says so,
 * leave the output folder empty (no file, no ".<name>.tmp-*"), keep the open
 * file descriptors as they were and, under ASan, leak nothing (LeakSanitizer
 * is asked after every N, so a leak names its N).
 *
 * Operations, on a tiny two-layer Llama checkpoint built here: HF -> GGUF and
 * GGUF -> HF conversion, the GGUF quantizer (Q4_K_M) from a GGUF and from the
 * HF folder, the tokenizer both ways, and what every command does first
 * (open a checkpoint, its tokenizer and chat template: dsquant info) and
 * the evaluation commands' passes (ppl, imatrix collected and saved, kld's
 * base logits saved). (One calibrated layer through the
 * INT writer follows once the driver's new API has landed.) Operations with many allocations are
 * swept with a stride after the first FULL_PREFIX numbers, so the whole test
 * stays near two minutes under ASan on a slow two-core machine; DSQ_TEST_EXHAUSTIVE=1 sweeps
 * every N. */
#include <dirent.h>
#include <omp.h>
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
#include "calibration/int_export.h"
#include "calibration/method.h"
#include "core/fileio.h"
#include "core/log.h"
#include "core/status.h"
#include "eval/imatrix_collect.h"
#include "eval/kld.h"
#include "eval/perplexity.h"
#include "formats/checkpoint.h"
#include "formats/convert.h"
#include "formats/gguf.h"
#include "formats/gguf_quantize.h"
#include "formats/hf_config.h"
#include "formats/hf_tokenizer.h"
#include "formats/safetensors.h"
#include "kernels/cpu.h"
#include "quantizers/w8.h"
#include "runtime/linear.h"
#include "runtime/chat.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "runtime/tokenizer.h"
#include "tests/helpers/failalloc.h"
#include "tests/helpers/testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define HAVE_LSAN 1
#else
#define HAVE_LSAN 0
#endif

/* Every N up to here; above, about MAX_POINTS numbers spread evenly. */
#define FULL_PREFIX 200
#define MAX_POINTS 200

/* The model the conversions and the GGUF quantizer run on: rows of 256, so
 * Q4_K_M takes its k-quant paths. The calibrated layer runs on a smaller one
 * (its passes dominate the time under ASan). */
#define DIM 256
#define FFN 256
#define SMALL_DIM 64
#define SMALL_FFN 128
#define LAYERS 2
#define VOCAB 32

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("%s", dsq_errmsg());
}

/* ---------------------------------------------------------------- fixture */

static const char TOKENIZER_JSON[] =
    "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,"
    " \"added_tokens\": [{\"id\": 0, \"content\": \"<|endoftext|>\", \"single_word\": false, \"lstrip\": false,"
    " \"rstrip\": false, \"normalized\": false, \"special\": true}],"
    " \"normalizer\": null,"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true,"
    " \"use_regex\": true},"
    " \"post_processor\": null,"
    " \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},"
    " \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null,"
    " \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false,"
    " \"vocab\": {\"<|endoftext|>\": 0, \"a\": 1, \"b\": 2, \"ab\": 3, \"\xc4\xa0\": 4, \"\xc4\xa0"
    "ab\": 5},"
    " \"merges\": [\"a b\", \"\xc4\xa0 ab\"]}}";

static const char TOKENIZER_CONFIG_JSON[] =
    "{\"add_bos_token\": false, \"bos_token\": \"<|endoftext|>\", \"eos_token\": \"<|endoftext|>\","
    " \"tokenizer_class\": \"GPT2Tokenizer\"}";

static void write_config(const char *dir, int64_t dim, int64_t ffn)
{
    dsq_arch a;
    memset(&a, 0, sizeof a);
    a.family = DSQ_ARCH_LLAMA;
    snprintf(a.hf_architecture, sizeof a.hf_architecture, "LlamaForCausalLM");
    snprintf(a.model_type, sizeof a.model_type, "llama");
    a.hidden_size = dim, a.intermediate_size = ffn, a.n_layers = LAYERS, a.n_heads = 4, a.n_kv_heads = 2;
    a.head_dim = dim / 4, a.vocab_size = VOCAB, a.max_position_embeddings = 512, a.rms_norm_eps = 1e-5;
    a.rope_theta = 10000, a.bos_token_id = 0, a.eos_token_id = 0;
    snprintf(a.torch_dtype, sizeof a.torch_dtype, "float32");
    char *json;
    expect_ok(dsq_arch_to_hf_json(&a, &json));
    free(dsq_test_write(dir, "config.json", json, strlen(json)));
    free(json);
}

static void write_weights(const char *dir, int64_t dim, int64_t ffn)
{
    const struct {
        const char *name;
        int64_t d0, d1;
    } per_layer[] = {{"input_layernorm.weight", dim, 0},  {"post_attention_layernorm.weight", dim, 0},
                     {"self_attn.q_proj.weight", dim, dim}, {"self_attn.k_proj.weight", dim / 2, dim},
                     {"self_attn.v_proj.weight", dim / 2, dim}, {"self_attn.o_proj.weight", dim, dim},
                     {"mlp.gate_proj.weight", ffn, dim},    {"mlp.up_proj.weight", ffn, dim},
                     {"mlp.down_proj.weight", dim, ffn}};
    dsq_st_writer *w;
    expect_ok(dsq_st_writer_new(dir, "model", 1ull << 30, &w));
    int64_t emb[2] = {VOCAB, dim}, norm[1] = {dim};
    expect_ok(dsq_st_writer_add(w, "model.embed_tokens.weight", DSQ_TYPE_F32, 2, emb));
    expect_ok(dsq_st_writer_add(w, "lm_head.weight", DSQ_TYPE_F32, 2, emb));
    expect_ok(dsq_st_writer_add(w, "model.norm.weight", DSQ_TYPE_F32, 1, norm));
    uint64_t total = 2ull * VOCAB * (uint64_t)dim + (uint64_t)dim;
    for (int l = 0; l < LAYERS; l++)
        for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++) {
            char name[128];
            snprintf(name, sizeof name, "model.layers.%d.%s", l, per_layer[k].name);
            int64_t sh[2] = {per_layer[k].d0, per_layer[k].d1};
            expect_ok(dsq_st_writer_add(w, name, DSQ_TYPE_F32, per_layer[k].d1 ? 2 : 1, sh));
            total += (uint64_t)per_layer[k].d0 * (uint64_t)(per_layer[k].d1 ? per_layer[k].d1 : 1);
        }
    expect_ok(dsq_st_writer_begin(w));
    float *v = malloc(total * sizeof *v);
    assert_non_null(v);
    uint64_t seed = 11;
    for (uint64_t i = 0; i < total; i++) v[i] = 0.1f * dsq_test_randn(&seed);
    expect_ok(dsq_st_writer_write(w, v, total * sizeof *v));
    free(v);
    expect_ok(dsq_st_writer_finish(w));
    dsq_st_writer_free(w);
}

typedef struct fixture {
    char *root;
    char hf[4096];      /* the HF checkpoint */
    char hf_small[4096]; /* the same shape of model, SMALL_DIM wide */
    char gguf[4096];    /* its F32 GGUF */
    dsq_gguf *gguf_open; /* the same, open (for the tokenizer export) */
    dsq_calib_set calib; /* 4 windows of 16 random tokens */
} fixture;

static fixture g_fx;

static int setup(void **state)
{
    (void)state;
    g_fx.root = dsq_test_mkdtemp();
    snprintf(g_fx.hf, sizeof g_fx.hf, "%s/hf", g_fx.root);
    snprintf(g_fx.gguf, sizeof g_fx.gguf, "%s/model-f32.gguf", g_fx.root);
    snprintf(g_fx.hf_small, sizeof g_fx.hf_small, "%s/hf-small", g_fx.root);
    if (mkdir(g_fx.hf, 0755) != 0 || mkdir(g_fx.hf_small, 0755) != 0) return -1;
    write_config(g_fx.hf, DIM, FFN);
    write_config(g_fx.hf_small, SMALL_DIM, SMALL_FFN);
    write_weights(g_fx.hf_small, SMALL_DIM, SMALL_FFN);
    free(dsq_test_write(g_fx.hf, "tokenizer.json", TOKENIZER_JSON, strlen(TOKENIZER_JSON)));
    free(dsq_test_write(g_fx.hf, "tokenizer_config.json", TOKENIZER_CONFIG_JSON, strlen(TOKENIZER_CONFIG_JSON)));
    write_weights(g_fx.hf, DIM, FFN);
    if (dsq_convert_hf_to_gguf(g_fx.hf, g_fx.gguf, DSQ_CONVERT_F32, false) != DSQ_OK) {
        fprintf(stderr, "fixture: %s\n", dsq_errmsg());
        return -1;
    }
    if (dsq_gguf_open(g_fx.gguf, &g_fx.gguf_open) != DSQ_OK) return -1;
    int32_t ids[512];
    uint64_t seed = 3;
    for (int i = 0; i < 512; i++) ids[i] = (int32_t)(dsq_test_rand(&seed) % VOCAB);
    dsq_calib_opts co = {NULL, 4, 16, 1};
    if (dsq_calib_sample(ids, 512, &co, &g_fx.calib) != DSQ_OK) return -1;
    /* The tokenizer's "no .pre match" warning would repeat at every N. */
    dsq_log_set_level(DSQ_LOG_ERROR);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    dsq_gguf_close(g_fx.gguf_open);
    dsq_calib_free(&g_fx.calib);
    dsq_test_rmtmp(g_fx.root);
    return 0;
}

/* ---------------------------------------------------------------- operations */

/* Each writes what it makes under out (an empty folder) and nowhere else. */
typedef dsq_status (*op_fn)(const char *out);

static dsq_status op_hf_to_gguf(const char *out)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/model.gguf", out);
    return dsq_convert_hf_to_gguf(g_fx.hf, path, DSQ_CONVERT_F16, false);
}

static dsq_status op_gguf_to_hf(const char *out)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/hf", out);
    /* Small shards: the index file and several shard writers take part. */
    return dsq_convert_gguf_to_hf(g_fx.gguf, path, DSQ_CONVERT_BF16, false, 256 * 1024);
}

static dsq_status quantize(const char *in, const char *out, int threads)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/model-q4_k_m.gguf", out);
    dsq_gguf_quantize_options o = dsq_gguf_quantize_defaults(DSQ_FTYPE_Q4_K_M);
    o.n_threads = threads; /* 1: the same allocation order at every N */
    dsq_gguf_quantize_report *r = NULL;
    dsq_status s = dsq_gguf_quantize(in, path, &o, &r);
    if (s == DSQ_OK) assert_non_null(r);
    else assert_null(r);
    dsq_gguf_quantize_report_free(r);
    return s;
}

static dsq_status op_quantize_gguf(const char *out) { return quantize(g_fx.gguf, out, 1); }
static dsq_status op_quantize_hf(const char *out) { return quantize(g_fx.hf, out, 1); }
/* Failures inside OpenMP workers must reach the caller's thread with their message. */
static dsq_status op_quantize_threads(const char *out) { return quantize(g_fx.gguf, out, 2); }

static dsq_status op_tokenizer_to_gguf(const char *out)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.gguf", out);
    dsq_gguf_writer *w = NULL;
    dsq_status s = dsq_gguf_writer_new(&w);
    if (s == DSQ_OK) s = dsq_gguf_set_str(w, "general.architecture", "llama");
    if (s == DSQ_OK) s = dsq_tokenizer_hf_to_gguf(g_fx.hf, w);
    if (s == DSQ_OK) s = dsq_gguf_writer_begin(w, path, false);
    if (s == DSQ_OK) s = dsq_gguf_writer_finish(w);
    dsq_gguf_writer_free(w);
    return s;
}

/* The exporter fills a folder its caller owns; the caller here is the
 * converter's way: a temporary output folder, committed or aborted. */
static dsq_status op_tokenizer_to_hf(const char *out)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer", out);
    dsq_outdir *d = NULL;
    dsq_status s = dsq_outdir_open(path, false, &d);
    if (s != DSQ_OK) return s;
    s = dsq_tokenizer_gguf_to_hf(g_fx.gguf_open, dsq_outdir_tmp_path(d));
    if (s == DSQ_OK) return dsq_outdir_commit(d);
    dsq_outdir_abort(d);
    return s;
}

/* The tiny model calibrated layer by layer and streamed by the INT writer
 * into a folder committed at the end (dsq_int_export). */
static dsq_status int_export(const char *out, const dsq_method *method, dsq_int_format format)
{
    /* Opened outside the count: the driver changes the model, so every N
     * gets a fresh one, and opening it is not the operation under test. */
    dsq_model *m = NULL;
    dsq_failalloc_pause(true);
    dsq_status s = dsq_model_open(g_fx.hf_small, &m);
    dsq_failalloc_pause(false);
    if (s != DSQ_OK) fail_msg("model: %s", dsq_errmsg());
    dsq_seq_opts o = dsq_seq_default_opts();
    o.method = method;
    o.q.group_size = 64;
    o.threads = 1;
    o.max_layers = 0; /* the writer wants every layer; the tiny model has two */
    /* A coarse AWQ search: the same code paths, a fraction of the time per N. */
    o.awq.n_grid = 2;
    o.awq.n_sample_token = 16;
    dsq_int_spec spec = {.format = format, .bits = o.q.bits, .group = o.q.group_size, .sym = o.q.sym, .damp = o.damp};
    char path[4200];
    snprintf(path, sizeof path, "%s/int4", out);
    dsq_outdir *d = NULL;
    s = dsq_outdir_open(path, false, &d);
    dsq_seq_report r;
    dsq_seq_keep *keep = NULL;
    if (s == DSQ_OK) s = dsq_int_export(m, &g_fx.calib, &o, &spec, d, &r, &keep);
    if (s == DSQ_OK) s = dsq_outdir_commit(d);
    else dsq_outdir_abort(d);
    dsq_model_close(m);
    dsq_seq_keep_free(keep);
    return s;
}

static dsq_status op_gptq_export(const char *out) { return int_export(out, &dsq_method_gptq, DSQ_INT_FORMAT_GPTQ); }
static dsq_status op_awq_export(const char *out) { return int_export(out, &dsq_method_awq, DSQ_INT_FORMAT_AWQ); }

/* ---------------------------------------------------------------- the sweep */

static int count_fds(void)
{
    int n = dsq_test_count_entries("/proc/self/fd");
    return n < 0 ? -1 : n;
}

/* Names of what is left in dir, for the failure message. */
static void list_dir(const char *dir, char *buf, size_t cap)
{
    buf[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, "%s%s", n ? " " : "", e->d_name);
    }
    closedir(d);
}

/* True when folders a and b hold the same files with the same bytes. */
static bool same_tree(const char *a, const char *b)
{
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "diff -r -q '%s' '%s' >/dev/null", a, b);
    return dsq_test_run(cmd, NULL, 0) == 0;
}

/* Checks one run in which the armed allocation failed; returns the number of
 * problems printed. An operation may survive a failed allocation on purpose
 * (a slower fallback); then its output must be exactly the unarmed run's. */
static int check_failure(const char *op, long n, dsq_status s, const char *out, const char *ref, int fds_before)
{
    int bad = 0;
    const char *msg = dsq_errmsg();
    if (s == DSQ_OK) {
        if (!same_tree(out, ref)) {
            printf("%s: N=%ld: the failed allocation was not reported, and the output differs\n", op, n);
            bad++;
        }
    } else if (s != DSQ_ERR_NOMEM || !msg[0] || !strstr(msg, "memory")) {
        printf("%s: N=%ld: status %s, message \"%s\" (wanted an out-of-memory status and message)\n", op, n,
               dsq_status_name(s), msg);
        bad++;
    }
    char left[2048];
    list_dir(out, left, sizeof left);
    if (s != DSQ_OK && left[0]) {
        printf("%s: N=%ld: left in the output folder: %s\n", op, n, left);
        bad++;
    }
    int fds = count_fds();
    if (fds != fds_before) {
        printf("%s: N=%ld: %d file descriptors open before, %d after\n", op, n, fds_before, fds);
        bad++;
    }
#if HAVE_LSAN
    if (__lsan_do_recoverable_leak_check()) {
        printf("%s: N=%ld: leak (LeakSanitizer's report above)\n", op, n);
        bad++;
    }
#endif
    return bad;
}

/* The 8-bit linear storage: construction and the batched and decode
 * products of the INT8 (int32 GEMM) and FP8 (code product; block scales
 * through rounded inputs) schemes. Nothing is written to out. */
static dsq_status op_linear_w8(const char *out)
{
    (void)out;
    enum { R = 40, C = 72, T = 9 };
    static float w[R * C], x[T * C], y[T * R];
    for (int i = 0; i < R * C; i++) w[i] = (float)((i * 7919) % 61) / 30.0f - 1.0f;
    for (int i = 0; i < T * C; i++) x[i] = (float)((i * 104729) % 53) / 26.0f - 1.0f;
    dsq_w8_scheme sch[3] = {dsq_w8_scheme_w8a8(false), dsq_w8_scheme_fp8_dynamic(), dsq_w8_scheme_fp8_block()};
    sch[2].block_rows = sch[2].block_cols = sch[2].act_group = 32;
    dsq_status s = DSQ_OK;
    for (int k = 0; k < 3 && s == DSQ_OK; k++) {
        dsq_w8q q;
        dsq_failalloc_pause(true);
        expect_ok(dsq_w8q_quantize(w, R, C, &sch[k], "w", &q));
        dsq_failalloc_pause(false);
        dsq_linear W;
        s = dsq_linear_init_w8(&W, &q);
        if (s == DSQ_OK) s = dsq_linear_forward_gemm(&W, x, y, T);
        if (s == DSQ_OK) s = dsq_linear_forward_gemv(&W, x, y, 2);
        dsq_linear_release(&W);
        dsq_w8q_free(&q);
    }
    return s;
}

/* One run with allocation n failing (0: none) in a fresh output folder. */
/* What every command does first (dsquant info's whole job): open the
 * checkpoint (its shape check included), read the tokenizer and the chat
 * template. */
static dsq_status op_info(const char *out)
{
    (void)out;
    dsq_checkpoint *c = NULL;
    dsq_tokenizer *t = NULL;
    char *tmpl = NULL;
    dsq_status s = dsq_checkpoint_open(g_fx.gguf, &c);
    if (s == DSQ_OK) s = dsq_tokenizer_load(g_fx.gguf, &t);
    if (s == DSQ_OK) {
        s = dsq_chat_template_text(c, &tmpl);
        if (s == DSQ_ERR_NOT_FOUND) s = DSQ_OK; /* the tiny model has none: not an error */
    }
    free(tmpl);
    dsq_tokenizer_free(t);
    dsq_checkpoint_close(c);
    return s;
}

/* The evaluation commands on the tiny model: a context, then ppl's,
 * imatrix's and kld's passes over 64 tokens in chunks of 16. */
static const int32_t *eval_tokens(void)
{
    static int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (i * 7 + 3) % VOCAB;
    return ids;
}

static dsq_status with_ctx(dsq_status (*body)(dsq_ctx *c, const char *out), const char *out)
{
    dsq_model *m = NULL;
    dsq_ctx *c = NULL;
    dsq_status s = dsq_model_open(g_fx.gguf, &m);
    if (s == DSQ_OK) s = dsq_ctx_new(m, 16, 1, &c);
    if (s == DSQ_OK) s = body(c, out);
    dsq_ctx_free(c);
    dsq_model_close(m);
    return s;
}

static dsq_status ppl_body(dsq_ctx *c, const char *out)
{
    (void)out;
    dsq_ppl_opts o;
    dsq_ppl_opts_default(&o);
    o.ctx = 16;
    dsq_ppl_result r;
    return dsq_ppl_tokens(c, eval_tokens(), 64, &o, &r);
}

static dsq_status imatrix_body(dsq_ctx *c, const char *out)
{
    dsq_imatrix_collector *col = NULL;
    dsq_imatrix *im = NULL;
    dsq_imatrix_opts o;
    dsq_imatrix_opts_default(&o);
    o.ctx = 16, o.batch = 16, o.bos = 1;
    dsq_imatrix_run_result r;
    char path[4200];
    snprintf(path, sizeof path, "%s/imatrix.dat", out);
    dsq_status s = dsq_imatrix_collector_new(dsq_ctx_model(c), &col);
    if (s == DSQ_OK) s = dsq_imatrix_run(c, col, eval_tokens(), 64, &o, &r);
    if (s == DSQ_OK) s = dsq_imatrix_collector_result(col, "tokens", &im);
    if (s == DSQ_OK) s = dsq_imatrix_save(im, path, false);
    dsq_imatrix_free(im);
    dsq_imatrix_collector_free(col);
    return s;
}

static dsq_status kld_body(dsq_ctx *c, const char *out)
{
    dsq_kld_opts o;
    dsq_kld_opts_default(&o);
    char path[4200];
    snprintf(path, sizeof path, "%s/base.logits", out);
    o.ctx = 16, o.bos = 1, o.save_path = path;
    return dsq_kld_compute(c, NULL, eval_tokens(), 64, &o, NULL);
}

static dsq_status op_ppl(const char *out) { return with_ctx(ppl_body, out); }
static dsq_status op_imatrix(const char *out) { return with_ctx(imatrix_body, out); }
static dsq_status op_kld_save(const char *out) { return with_ctx(kld_body, out); }

static dsq_status run_once(op_fn fn, long n, char **out_dir, long *count)
{
    *out_dir = dsq_test_mkdtemp();
    dsq_clear_error();
    dsq_failalloc_arm(n);
    dsq_status s = fn(*out_dir);
    *count = dsq_failalloc_disarm();
    return s;
}

/* Every N below FULL_PREFIX, then every stride-th, and always total + 1 (the
 * run that should complete and end the sweep). */
static long next_n(long n, long total, long stride)
{
    long step = n < FULL_PREFIX ? 1 : stride;
    return n <= total && n + step > total ? total + 1 : n + step;
}

static void sweep(const char *op, op_fn fn)
{
    char *out;
    long total;
    char *ref;
    dsq_status s = run_once(fn, 0, &ref, &total);
    if (s != DSQ_OK) fail_msg("%s without injected failures: %s", op, dsq_errmsg());
    assert_true(dsq_failalloc_active());
    assert_true(total > 0);
    bool exhaustive = getenv("DSQ_TEST_EXHAUSTIVE") != NULL;
    long stride = exhaustive || total <= FULL_PREFIX + MAX_POINTS ? 1 : (total - FULL_PREFIX) / MAX_POINTS + 1;
    long runs = 0, problems = 0;
    /* DSQ_SWEEP_N=n: that N only (with DSQ_FAILALLOC_TRACE=1, to see where). */
    long only = getenv("DSQ_SWEEP_N") ? atol(getenv("DSQ_SWEEP_N")) : 0;
    for (long n = only > 0 ? only : 1;; n = next_n(n, total, stride)) {
        int fds = count_fds();
        long count;
        s = run_once(fn, n, &out, &count);
        runs++;
        if (!dsq_failalloc_hit()) {
            if (s != DSQ_OK) {
                printf("%s: N=%ld: failed without an injected failure: %s\n", op, n, dsq_errmsg());
                problems++;
            }
            dsq_test_rmtmp(out);
            break;
        }
        problems += check_failure(op, n, s, out, ref, fds);
        dsq_test_rmtmp(out);
        if (only > 0) break;
        if (n > 4 * total + 1000) fail_msg("%s: the sweep does not end (N=%ld)", op, n);
    }
    dsq_test_rmtmp(ref);
    printf("%s: %ld allocations, %ld runs (every N up to %d, then every %ld), %ld problems\n", op, total, runs,
           FULL_PREFIX, stride, problems);
    fflush(stdout);
    assert_int_equal(problems, 0);
}

static void test_hf_to_gguf(void **state) { (void)state; sweep("convert hf->gguf", op_hf_to_gguf); }
static void test_gguf_to_hf(void **state) { (void)state; sweep("convert gguf->hf", op_gguf_to_hf); }
static void test_quantize_gguf(void **state) { (void)state; sweep("gguf quantize Q4_K_M (gguf in)", op_quantize_gguf); }
static void test_quantize_hf(void **state) { (void)state; sweep("gguf quantize Q4_K_M (hf in)", op_quantize_hf); }
static void test_quantize_threads(void **state)
{
    (void)state;
    sweep("gguf quantize Q4_K_M (gguf in, 2 threads)", op_quantize_threads);
}
static void test_gptq_export(void **state) { (void)state; sweep("GPTQ layer 0 -> INT writer (gptq)", op_gptq_export); }
static void test_awq_export(void **state) { (void)state; sweep("AWQ layer 0 -> INT writer (awq)", op_awq_export); }
static void test_tokenizer_to_gguf(void **state) { (void)state; sweep("tokenizer hf->gguf", op_tokenizer_to_gguf); }
static void test_tokenizer_to_hf(void **state) { (void)state; sweep("tokenizer gguf->hf", op_tokenizer_to_hf); }
static void test_linear_w8(void **state) { (void)state; sweep("8-bit linear storage (init, gemm, gemv)", op_linear_w8); }
static void test_info(void **state) { (void)state; sweep("info: checkpoint, tokenizer, chat template", op_info); }
static void test_ppl(void **state) { (void)state; sweep("ppl: model, context, 4 chunks", op_ppl); }
static void test_imatrix(void **state) { (void)state; sweep("imatrix: collect and save", op_imatrix); }
static void test_kld_save(void **state) { (void)state; sweep("kld: base logits saved", op_kld_save); }

int main(void)
{
    /* fsync on tmpfs costs nothing; thousands of committed outputs add up elsewhere. */
    struct stat st;
    if (!getenv("TMPDIR") && stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) setenv("TMPDIR", "/dev/shm", 1);
    /* One thread unless an operation asks for more: waking a team for each
     * small parallel region would cost more than the work, thousands of times. */
    dsq_cpu_set_threads(1);
    omp_set_num_threads(1);
    /* DSQ_SWEEP_ONLY=test_quantize_hf (a cmocka name pattern) runs one sweep. */
    if (getenv("DSQ_SWEEP_ONLY")) cmocka_set_test_filter(getenv("DSQ_SWEEP_ONLY"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenizer_to_gguf), cmocka_unit_test(test_tokenizer_to_hf),
        cmocka_unit_test(test_hf_to_gguf),        cmocka_unit_test(test_gguf_to_hf),
        cmocka_unit_test(test_quantize_gguf),     cmocka_unit_test(test_quantize_hf),
        cmocka_unit_test(test_quantize_threads),  cmocka_unit_test(test_gptq_export),
        cmocka_unit_test(test_awq_export),
        cmocka_unit_test(test_linear_w8),
        cmocka_unit_test(test_info),              cmocka_unit_test(test_ppl),
        cmocka_unit_test(test_imatrix),           cmocka_unit_test(test_kld_save),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
