/* KL divergence (eval/kld.h, eval/kld_file.h): the statistics against a
 * direct computation in double on synthetic logits, the 16-bit row packing,
 * the base log-prob file (round trip; truncated, corrupted and hostile files
 * refused), and on SmolLM2: a model against itself (KLD 0, same top 100%),
 * against a Q8_0 re-quantization of itself (small but positive), the same
 * numbers whether the base is computed or read back from a file, mismatches
 * refused, and the dsquant kld command end to end. */
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
#include "eval/kld.h"
#include "eval/kld_file.h"
#include "quantizers/qtypes.h"
#include "kernels/cpu.h"
#include "runtime/forward.h"
#include "runtime/model.h"
#include "tests/helpers/testutil.h"

static uint64_t g_seed = 0x6b6c6431ull;

static void expect_ok(dsq_status s)
{
    if (s != DSQ_OK) fail_msg("unexpected failure: %s", dsq_errmsg());
}

/* ================================================================ statistics */

enum { V = 300, N = 240 };

static void log_softmax_d(const float *l, int n, double *out)
{
    double mx = l[0], s = 0;
    for (int i = 1; i < n; i++) mx = fmax(mx, l[i]);
    for (int i = 0; i < n; i++) s += exp(l[i] - mx);
    for (int i = 0; i < n; i++) out[i] = l[i] - mx - log(s);
}

static int argmax_d(const double *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Linear interpolation between order statistics (numpy's default). */
static double q_direct(double *s, int n, double f)
{
    if (f == 0.5) return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    double p = f * (n - 1);
    int i = (int)p;
    return i + 1 < n ? s[i] + (p - i) * (s[i + 1] - s[i]) : s[n - 1];
}

static void mean_err(const double *x, int n, double *m, double *e)
{
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) s += x[i], s2 += x[i] * x[i];
    *m = s / n;
    *e = sqrt((s2 / n - *m * *m) / (n - 1));
}

static void close_to(double got, double want, double tol, const char *what)
{
    if (!(fabs(got - want) <= tol)) fail_msg("%s: %.9g, want %.9g (tol %g)", what, got, want, tol);
}

typedef struct synth {
    float *base, *quant;
    uint8_t *packed;
    int32_t tgt[N];
} synth;

static void synth_make(synth *s, float noise)
{
    size_t rb = dsq_kld_row_bytes(V);
    s->base = malloc((size_t)N * V * sizeof(float));
    s->quant = malloc((size_t)N * V * sizeof(float));
    s->packed = malloc((size_t)N * rb);
    for (int r = 0; r < N; r++) {
        /* Peaked rows with a long tail: some log-probs fall below max-16. */
        float peak = (float)(dsq_test_rand(&g_seed) % V);
        for (int i = 0; i < V; i++) {
            float b = 4 * dsq_test_randn(&g_seed) - (i == (int)peak ? 0 : 0.05f * (float)(i % 97));
            s->base[(size_t)r * V + i] = b + (i == (int)peak ? 12 : 0);
            s->quant[(size_t)r * V + i] = s->base[(size_t)r * V + i] + noise * dsq_test_randn(&g_seed);
        }
        s->tgt[r] = r % 5 == 0 ? (int32_t)peak : (int32_t)(dsq_test_rand(&g_seed) % V);
        dsq_kld_pack_row(s->base + (size_t)r * V, V, s->tgt[r], s->packed + (size_t)r * rb);
    }
}

static void synth_free(synth *s) { free(s->base), free(s->quant), free(s->packed); }

/* The packed row reads back each log-prob within half a step (those above
 * the floor), the floor for the rest, and the exact NLL of its target. */
static void test_pack_row(void **state)
{
    (void)state;
    synth s;
    synth_make(&s, 0);
    size_t rb = dsq_kld_row_bytes(V);
    assert_int_equal(rb, 12 + 2 * V);
    double lp[V];
    int below = 0;
    for (int r = 0; r < N; r++) {
        const uint8_t *row = s.packed + (size_t)r * rb;
        log_softmax_d(s.base + (size_t)r * V, V, lp);
        float scale, mn;
        memcpy(&scale, row, 4);
        memcpy(&mn, row + 4, 4);
        for (int i = 0; i < V; i++) {
            double got = dsq_kld_row_logprob(row, i);
            if (lp[i] >= mn) close_to(got, lp[i], scale / 2 + 1e-5, "packed log-prob");
            else close_to(got, mn, 1e-6, "floor"), below++;
        }
        close_to(dsq_kld_row_nll(row), -lp[s.tgt[r]], 1e-5, "exact NLL");
    }
    assert_true(below > 0); /* the floor was exercised */
    /* A flat row (scale 0) packs to zeros and reads -log(V). */
    float flat[V];
    for (int i = 0; i < V; i++) flat[i] = 3;
    uint8_t row[12 + 2 * V];
    dsq_kld_pack_row(flat, V, 7, row);
    close_to(dsq_kld_row_logprob(row, 123), -log(V), 1e-5, "flat row");
    synth_free(&s);
}

/* Every statistic against a direct computation in double from the same
 * packed base rows and quantized logits. */
static void test_stats_vs_direct(void **state)
{
    (void)state;
    synth s;
    synth_make(&s, 0.3f);
    size_t rb = dsq_kld_row_bytes(V);
    double kld[N], nll[N], nllb[N], dp[N], dp2[N], lq[V], lb[V];
    int same = 0;
    for (int r = 0; r < N; r++) {
        const uint8_t *row = s.packed + (size_t)r * rb;
        log_softmax_d(s.quant + (size_t)r * V, V, lq);
        for (int i = 0; i < V; i++) lb[i] = dsq_kld_row_logprob(row, i);
        double k = 0;
        for (int i = 0; i < V; i++)
            if (lb[i] > -16) k += exp(lb[i]) * (lb[i] - lq[i]);
        kld[r] = k;
        nll[r] = -lq[s.tgt[r]];
        nllb[r] = dsq_kld_row_nll(row);
        dp[r] = exp(-nll[r]) - exp(-nllb[r]);
        dp2[r] = dp[r] * dp[r];
        same += argmax_d(lq, V) == argmax_d(lb, V);
    }
    for (int threads = 1; threads <= 2; threads++) {
        dsq_cpu_set_threads(threads);
        dsq_kld_acc *a;
        expect_ok(dsq_kld_acc_new(&a));
        /* Two calls: accumulation across chunks. */
        expect_ok(dsq_kld_acc_add(a, s.packed, s.quant, V, s.tgt, 100));
        expect_ok(dsq_kld_acc_add(a, s.packed + 100 * rb, s.quant + (size_t)100 * V, V, s.tgt + 100, N - 100));
        dsq_kld_result r;
        expect_ok(dsq_kld_acc_result(a, true, &r));
        assert_int_equal(r.count, N);
        assert_true(r.has_quantiles);
        double m, e, mb, eb;
        mean_err(kld, N, &m, &e);
        close_to(r.kld, m, 1e-6 * fabs(m) + 1e-7, "mean KLD");
        close_to(r.kld_err, e, 1e-4 * e, "KLD error");
        assert_true(r.kld > 0.01); /* the noise is visible */
        mean_err(nll, N, &m, &e);
        mean_err(nllb, N, &mb, &eb);
        close_to(r.ppl, exp(m), 1e-5 * exp(m), "PPL(Q)");
        close_to(r.ppl_err, exp(m) * e, 1e-4 * exp(m) * e, "PPL(Q) error");
        close_to(r.ppl_base, exp(mb), 1e-5 * exp(mb), "PPL(base)");
        close_to(r.ln_ratio, m - mb, 1e-5, "ln ratio");
        double cov = 0;
        for (int i = 0; i < N; i++) cov += (nll[i] - m) * (nllb[i] - mb);
        cov /= (double)N * (N - 1);
        close_to(r.cor, cov / (e * eb), 1e-4, "correlation");
        close_to(r.ln_ratio_err, sqrt(e * e + eb * eb - 2 * cov), 1e-4 * r.ln_ratio_err + 1e-8, "ln ratio error");
        close_to(r.ratio, exp(m - mb), 1e-5, "ratio");
        close_to(r.diff, exp(m) - exp(mb), 1e-5 * fabs(exp(m) - exp(mb)), "difference");
        mean_err(dp, N, &m, &e);
        close_to(r.dp, m, 1e-6, "mean dp");
        close_to(r.dp_err, e, 1e-5 * e + 1e-9, "dp error");
        mean_err(dp2, N, &m, &e);
        close_to(r.dp_rms, sqrt(m), 1e-6, "RMS dp");
        close_to(r.dp_rms_err, 0.5 / sqrt(m) * e, 1e-4 * r.dp_rms_err + 1e-9, "RMS dp error");
        close_to(r.same_top, (double)same / N, 1e-12, "same top");
        assert_true(same > N / 2 && same < N); /* both outcomes occur */
        close_to(r.same_top_err, sqrt(r.same_top * (1 - r.same_top) / (N - 1)), 1e-12, "same top error");
        double sorted[N];
        memcpy(sorted, kld, sizeof sorted);
        qsort(sorted, N, sizeof *sorted, cmp_d);
        for (int i = 0; i < DSQ_KLD_NQ; i++)
            close_to(r.kld_q[i], q_direct(sorted, N, dsq_kld_quantiles[i]), 1e-5 * fabs(sorted[N - 1]), "KLD quantile");
        close_to(r.kld_q[0], sorted[N - 1], 1e-6, "KLD max");
        close_to(r.kld_q[DSQ_KLD_NQ - 1], sorted[0], 1e-6, "KLD min");
        memcpy(sorted, dp, sizeof sorted);
        qsort(sorted, N, sizeof *sorted, cmp_d);
        for (int i = 0; i < DSQ_KLD_DP_NQ; i++)
            close_to(r.dp_q[i], q_direct(sorted, N, dsq_kld_dp_quantiles[i]), 1e-6, "dp quantile");
        /* Progress reports skip the sort but agree on the rest. */
        dsq_kld_result p;
        expect_ok(dsq_kld_acc_result(a, false, &p));
        assert_false(p.has_quantiles);
        assert_true(p.kld == r.kld && p.ppl == r.ppl && p.same_top == r.same_top);
        dsq_kld_acc_free(a);
        static dsq_kld_result first;
        if (threads == 1) first = r;
        else assert_true(first.kld == r.kld && first.dp_rms == r.dp_rms && first.ppl_base == r.ppl_base);
    }
    dsq_cpu_set_threads(0);
    /* A distribution against itself: KLD ~ 0 (the 16-bit base), same top 100%. */
    dsq_kld_acc *a;
    expect_ok(dsq_kld_acc_new(&a));
    expect_ok(dsq_kld_acc_add(a, s.packed, s.base, V, s.tgt, N));
    dsq_kld_result r;
    expect_ok(dsq_kld_acc_result(a, true, &r));
    assert_true(fabs(r.kld) < 1e-5 && r.kld_q[0] < 1e-4);
    close_to(r.same_top, 1, 0, "same top, self");
    close_to(r.ln_ratio, 0, 1e-6, "ln ratio, self");
    close_to(r.dp_rms, 0, 1e-6, "RMS dp, self");
    int32_t bad = V;
    assert_int_equal(dsq_kld_acc_add(a, s.packed, s.base, V, &bad, 1), DSQ_ERR_ARG);
    dsq_kld_acc_free(a);
    expect_ok(dsq_kld_acc_new(&a));
    assert_int_equal(dsq_kld_acc_result(a, true, &r), DSQ_ERR_ARG); /* nothing scored */
    dsq_kld_acc_free(a);
    synth_free(&s);
}

/* ================================================================ the file */

enum { FV = 300, FCTX = 16, FCH = 3, FROWS = FCTX - 1 - FCTX / 2 };

typedef struct ffix {
    char *dir, *path;
    dsq_kld_header h;
    int32_t tokens[FCTX * FCH];
    uint8_t *rows;
} ffix;

static void ffix_make(ffix *f)
{
    f->dir = dsq_test_mkdtemp();
    f->path = malloc(strlen(f->dir) + 16);
    sprintf(f->path, "%s/base.kld", f->dir);
    f->h = (dsq_kld_header){FV, FCTX, FCH, FCTX / 2, 1};
    for (int i = 0; i < FCTX * FCH; i++) f->tokens[i] = (int32_t)(dsq_test_rand(&g_seed) % FV);
    size_t rb = dsq_kld_row_bytes(FV);
    f->rows = malloc((size_t)FCH * FROWS * rb);
    float lg[FV];
    for (int r = 0; r < FCH * FROWS; r++) {
        for (int i = 0; i < FV; i++) lg[i] = 3 * dsq_test_randn(&g_seed);
        dsq_kld_pack_row(lg, FV, f->tokens[r % (FCTX * FCH)], f->rows + (size_t)r * rb);
    }
    dsq_kld_writer *w;
    expect_ok(dsq_kld_writer_open(f->path, false, &f->h, f->tokens, &w));
    for (int c = 0; c < FCH; c++) expect_ok(dsq_kld_writer_rows(w, f->rows + (size_t)c * FROWS * rb, FROWS));
    expect_ok(dsq_kld_writer_commit(w));
}

static void ffix_free(ffix *f)
{
    dsq_test_rmtmp(f->dir);
    free(f->path), free(f->rows);
}

/* Opens, reads every row and finishes; returns the first failure. */
static dsq_status read_all(const char *path, uint8_t *rows)
{
    dsq_kld_reader *r;
    DSQ_TRY(dsq_kld_reader_open(path, &r));
    dsq_status s = DSQ_OK;
    uint32_t n = dsq_kld_reader_header(r)->n_chunks;
    for (uint32_t c = 0; c < n && s == DSQ_OK; c++)
        s = dsq_kld_reader_rows(r, rows + (size_t)c * FROWS * dsq_kld_row_bytes(FV), FROWS);
    if (s == DSQ_OK) s = dsq_kld_reader_finish(r);
    dsq_kld_reader_close(r);
    return s;
}

static void test_file_round_trip(void **state)
{
    (void)state;
    ffix f;
    ffix_make(&f);
    dsq_kld_reader *r;
    expect_ok(dsq_kld_reader_open(f.path, &r));
    const dsq_kld_header *h = dsq_kld_reader_header(r);
    assert_int_equal(h->n_vocab, FV);
    assert_int_equal(h->n_ctx, FCTX);
    assert_int_equal(h->n_chunks, FCH);
    assert_int_equal(h->first, FCTX / 2);
    assert_int_equal(h->bos, 1);
    assert_memory_equal(dsq_kld_reader_tokens(r), f.tokens, sizeof f.tokens);
    dsq_kld_reader_close(r);
    size_t all = (size_t)FCH * FROWS * dsq_kld_row_bytes(FV);
    uint8_t *back = malloc(all);
    expect_ok(read_all(f.path, back));
    assert_memory_equal(back, f.rows, all);
    /* The output exists only once committed; an existing one is not replaced. */
    dsq_kld_writer *w;
    assert_int_equal(dsq_kld_writer_open(f.path, false, &f.h, f.tokens, &w), DSQ_ERR_EXISTS);
    char other[4096];
    snprintf(other, sizeof other, "%s/short.kld", f.dir);
    expect_ok(dsq_kld_writer_open(other, false, &f.h, f.tokens, &w));
    expect_ok(dsq_kld_writer_rows(w, f.rows, FROWS));
    assert_int_equal(dsq_kld_writer_commit(w), DSQ_ERR_INTERNAL); /* rows missing */
    assert_false(dsq_exists(other));
    expect_ok(dsq_kld_writer_open(other, false, &f.h, f.tokens, &w));
    assert_int_equal(dsq_kld_writer_rows(w, f.rows, FCH * FROWS + 1), DSQ_ERR_INTERNAL);
    dsq_kld_writer_abort(w);
    f.tokens[5] = FV; /* a token outside the vocabulary is refused before anything is written */
    assert_int_equal(dsq_kld_writer_open(other, false, &f.h, f.tokens, &w), DSQ_ERR_ARG);
    assert_int_equal(dsq_test_count_entries(f.dir), 1);
    free(back);
    ffix_free(&f);
}

static char *load_bytes(const char *path, size_t *n)
{
    char *b;
    expect_ok(dsq_read_file(path, 1 << 26, &b, n));
    return b;
}

static dsq_status read_variant(const ffix *f, const char *bytes, size_t n, uint8_t *rows)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/v.kld", f->dir);
    free(dsq_test_write(f->dir, "v.kld", bytes, n));
    return read_all(p, rows);
}

static void put_u32(char *b, size_t off, uint32_t v) { memcpy(b + off, &v, 4); }

static void test_file_hostile(void **state)
{
    (void)state;
    ffix f;
    ffix_make(&f);
    size_t n, all = (size_t)FCH * FROWS * dsq_kld_row_bytes(FV);
    char *good = load_bytes(f.path, &n), *b = malloc(n + 64);
    uint8_t *rows = malloc(all);
    /* Every cut is refused: inside the header, the tokens, the rows, the checksum. */
    size_t cuts[] = {0, 7, 20, 47, 48, 52, n / 3, n / 2, n - 5, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        dsq_status s = read_variant(&f, good, cuts[i], rows);
        if (s != DSQ_ERR_FORMAT) fail_msg("cut at %zu of %zu: status %d (%s)", cuts[i], n, s, dsq_errmsg());
    }
    /* Bytes after the stream. */
    memcpy(b, good, n);
    memcpy(b + n, "trailing", 8);
    assert_int_equal(read_variant(&f, b, n + 8, rows), DSQ_ERR_FORMAT);
    /* Flipped bits in the compressed data: a zstd error or a checksum mismatch. */
    for (int k = 1; k <= 9; k++) {
        memcpy(b, good, n);
        size_t at = 48 + 16 + (n - 64 - 8) * (size_t)k / 10;
        b[at] ^= 0x5a;
        dsq_status s = read_variant(&f, b, n, rows);
        if (s == DSQ_OK) fail_msg("byte %zu of %zu corrupted, yet read without error", at, n);
    }
    /* Header fields. */
    struct {
        size_t off;
        uint32_t v;
        dsq_status want;
    } bad[] = {
        {0, 0x58515344, DSQ_ERR_FORMAT},       /* magic */
        {8, 2, DSQ_ERR_UNSUPPORTED},           /* version */
        {12, 7, DSQ_ERR_UNSUPPORTED},          /* row format */
        {16, 1, DSQ_ERR_FORMAT},               /* vocabulary 1 */
        {16, 0xffffffffu, DSQ_ERR_FORMAT},     /* huge vocabulary */
        {20, 0x7fffffff, DSQ_ERR_FORMAT},      /* huge context */
        {24, 0, DSQ_ERR_FORMAT},               /* no chunks */
        {24, 0x40000000, DSQ_ERR_FORMAT},      /* chunks x ctx over the bound */
        {28, 3, DSQ_ERR_FORMAT},               /* first != ctx/2 */
        {32, FV, DSQ_ERR_FORMAT},              /* BOS outside the vocabulary */
        {40, 1, DSQ_ERR_FORMAT},               /* reserved */
        {24, FCH + 1, DSQ_ERR_FORMAT},         /* more chunks than the data holds */
        {16, 100, DSQ_ERR_FORMAT},             /* smaller vocabulary: token ids outside it */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(b, good, n);
        put_u32(b, bad[i].off, bad[i].v);
        uint8_t *big = malloc((size_t)(FCH + 1) * FROWS * dsq_kld_row_bytes(FV));
        dsq_status s = read_variant(&f, b, n, big);
        free(big);
        if (s != bad[i].want) fail_msg("header field at %zu = %u: status %d, want %d (%s)", bad[i].off, bad[i].v, s,
                                       bad[i].want, dsq_errmsg());
    }
    assert_non_null(strstr(dsq_errmsg(), "outside the vocabulary"));
    free(good), free(b), free(rows);
    ffix_free(&f);
}

/* ================================================================ SmolLM2 */

/* The fixture's WikiText tokens: a real text without needing a tokenizer. */
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

/* Every linear re-quantized to Q8_0 from its current weights. */
static void requantize_q8_0(dsq_model *m)
{
    for (int64_t l = 0; l < m->arch.n_layers; l++)
        for (int k = 0; k < DSQ_LLAMA_N_LINEARS; k++) {
            dsq_linear *W = &m->layers[l].lin[k];
            float *w = malloc((size_t)(W->out * W->in) * sizeof *w);
            expect_ok(dsq_linear_rows_f32(W, 0, W->out, w));
            uint64_t nb;
            expect_ok(dsq_type_nbytes(DSQ_TYPE_Q8_0, (uint64_t)(W->out * W->in), &nb));
            void *q = malloc(nb);
            expect_ok(dsq_quantize(DSQ_TYPE_Q8_0, w, q, W->out, W->in, NULL));
            free(w);
            int64_t out = W->out, in = W->in;
            dsq_linear_release(W);
            expect_ok(dsq_linear_init(W, DSQ_TYPE_Q8_0, q, out, in));
            W->owned = q;
        }
}

enum { SCTX = 64, SCHUNKS = 2 };

typedef struct smol {
    char *path;
    dsq_model *m, *mq;
    dsq_ctx *c, *cq;
    int32_t *tokens;
    int n_tokens;
} smol;

static bool smol_open(smol *s)
{
    memset(s, 0, sizeof *s);
    if (!(s->path = dsq_test_default_model())) return false;
    expect_ok(dsq_model_open(s->path, &s->m));
    expect_ok(dsq_model_open(s->path, &s->mq));
    requantize_q8_0(s->mq);
    expect_ok(dsq_ctx_new(s->m, SCTX, 0, &s->c));
    expect_ok(dsq_ctx_new(s->mq, SCTX, 0, &s->cq));
    s->tokens = fixture_tokens(&s->n_tokens);
    return true;
}

static void smol_close(smol *s)
{
    dsq_ctx_free(s->c), dsq_ctx_free(s->cq);
    dsq_model_close(s->m), dsq_model_close(s->mq);
    free(s->path), free(s->tokens);
}

static void opts(dsq_kld_opts *o)
{
    dsq_kld_opts_default(o);
    o->ctx = SCTX;
    o->chunks = SCHUNKS;
    o->bos = 1; /* SmolLM2 adds none; any id exercises the replacement */
}

static void test_smollm2_self_and_q8(void **state)
{
    (void)state;
    smol s;
    if (!smol_open(&s)) DSQ_TEST_SKIP();
    dsq_kld_opts o;
    opts(&o);
    dsq_kld_result r;
    expect_ok(dsq_kld_compute(s.c, s.c, s.tokens, s.n_tokens, &o, &r));
    printf("self: KLD %.3g (max %.3g), same top %.4f, PPL %.4f / %.4f\n", r.kld, r.kld_q[0], r.same_top, r.ppl,
           r.ppl_base);
    assert_int_equal(r.count, SCHUNKS * (SCTX - 1 - SCTX / 2));
    assert_true(fabs(r.kld) < 1e-5 && r.kld_q[0] < 1e-4);
    assert_true(r.same_top == 1);
    assert_true(r.ln_ratio == 0 && r.dp_rms == 0 && r.ppl == r.ppl_base);
    assert_true(r.ppl > 2 && r.ppl < 200);
    double self_noise = fmax(fabs(r.kld_q[0]), fabs(r.kld_q[DSQ_KLD_NQ - 1]));
    expect_ok(dsq_kld_compute(s.c, s.cq, s.tokens, s.n_tokens, &o, &r));
    printf("Q8_0: KLD %.3g +/- %.2g (max %.3g), same top %.4f, PPL %.4f / %.4f, RMS dp %.4f\n", r.kld, r.kld_err,
           r.kld_q[0], r.same_top, r.ppl, r.ppl_base, r.dp_rms);
    assert_true(r.kld > 10 * self_noise / 62 && r.kld > 1e-5); /* positive, above the 16-bit noise */
    assert_true(r.kld < 0.02);
    assert_true(r.same_top > 0.9 && r.same_top <= 1);
    assert_true(fabs(r.ln_ratio) < 0.05 && r.dp_rms > 0 && r.dp_rms < 0.05);
    smol_close(&s);
}

static bool same_result(const dsq_kld_result *a, const dsq_kld_result *b)
{
    dsq_kld_result x = *a, y = *b;
    x.seconds = y.seconds = 0;
    return !memcmp(&x, &y, sizeof x);
}

static void test_smollm2_file_path(void **state)
{
    (void)state;
    smol s;
    if (!smol_open(&s)) DSQ_TEST_SKIP();
    char *dir = dsq_test_mkdtemp(), path[4096];
    snprintf(path, sizeof path, "%s/base.kld", dir);
    dsq_kld_opts o;
    opts(&o);
    o.save_path = path;
    dsq_kld_result direct, from_file, r;
    expect_ok(dsq_kld_compute(s.c, s.cq, s.tokens, s.n_tokens, &o, &direct));
    /* Saving only (no quantized model) refuses an existing file unless told. */
    assert_int_equal(dsq_kld_compute(s.c, NULL, s.tokens, s.n_tokens, &o, NULL), DSQ_ERR_EXISTS);
    o.save_path = NULL;
    assert_int_equal(dsq_kld_compute(s.c, NULL, s.tokens, s.n_tokens, &o, NULL), DSQ_ERR_ARG);
    /* Read back: the same numbers as computing the base directly. */
    o.ctx = 0;
    expect_ok(dsq_kld_from_file(path, s.cq, s.tokens, s.n_tokens, &o, &from_file));
    assert_true(same_result(&direct, &from_file));
    expect_ok(dsq_kld_from_file(path, s.cq, NULL, 0, &o, &from_file)); /* without the text */
    assert_true(same_result(&direct, &from_file));
    o.chunks = 1; /* a prefix of the file */
    expect_ok(dsq_kld_from_file(path, s.cq, NULL, 0, &o, &r));
    assert_int_equal(r.count, SCTX - 1 - SCTX / 2);
    o.chunks = SCHUNKS;
    /* Mismatches, each named. */
    o.ctx = 32;
    assert_int_equal(dsq_kld_from_file(path, s.cq, NULL, 0, &o, &r), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "context of 64"));
    o.ctx = 0;
    o.bos = -1;
    assert_int_equal(dsq_kld_from_file(path, s.cq, NULL, 0, &o, &r), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "first in each chunk"));
    o.bos = 1;
    s.tokens[70] ^= 1;
    assert_int_equal(dsq_kld_from_file(path, s.cq, s.tokens, s.n_tokens, &o, &r), DSQ_ERR_ARG);
    assert_non_null(strstr(dsq_errmsg(), "token 70"));
    s.tokens[70] ^= 1;
    assert_int_equal(dsq_kld_from_file(path, s.cq, s.tokens, 100, &o, &r), DSQ_ERR_ARG); /* text too short */
    assert_int_equal(dsq_kld_from_file(dir, s.cq, NULL, 0, &o, &r), DSQ_ERR_IO);         /* a folder */
    /* Too little text for two chunks. */
    opts(&o);
    assert_int_equal(dsq_kld_compute(s.c, s.cq, s.tokens, 2 * SCTX - 1, &o, &r), DSQ_ERR_ARG);
    dsq_test_rmtmp(dir);
    smol_close(&s);
}

/* dsquant kld end to end: save the base, then compare against the file. */
static void test_cli(void **state)
{
    (void)state;
    char *model = dsq_test_default_model();
    if (!model) DSQ_TEST_SKIP();
    char *dir = dsq_test_mkdtemp(), cmd[16384], err[4096], text[8192] = "";
    for (int i = 0; i < 12; i++)
        strcat(text, "The river rose after the storm, and the people of the valley moved their animals to the hills. ");
    char *data = dsq_test_write(dir, "text.txt", text, strlen(text));
    snprintf(cmd, sizeof cmd, "%s kld %s --data %s --ctx 64 --chunks 2 --save-logits %s/b.kld --threads 2 > %s/save.out",
             DSQ_BINARY, model, data, dir, dir);
    if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s\n%s", cmd, err);
    snprintf(cmd, sizeof cmd, "%s kld --logits %s/b.kld %s --json > %s/out.json", DSQ_BINARY, dir, model, dir);
    if (dsq_test_run(cmd, err, sizeof err) != 0) fail_msg("%s\n%s", cmd, err);
    char p[4096], *js;
    size_t len;
    snprintf(p, sizeof p, "%s/out.json", dir);
    expect_ok(dsq_read_file(p, 1 << 20, &js, &len));
    cJSON *j = cJSON_Parse(js);
    assert_non_null(j);
    assert_int_equal(cJSON_GetObjectItem(j, "n_scored")->valueint, 2 * 31);
    double kld = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "kld"), "value")->valuedouble;
    double top = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "same_top"), "value")->valuedouble;
    assert_true(fabs(kld) < 1e-5 && top == 1);
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "kld_percentiles"), "99"));
    cJSON_Delete(j);
    free(js);
    /* Another text with the same file: refused, saying why. */
    char *other = dsq_test_write(dir, "other.txt", text + 4, strlen(text) - 4);
    snprintf(cmd, sizeof cmd, "%s kld --logits %s/b.kld %s --data %s > /dev/null", DSQ_BINARY, dir, model, other);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 1);
    assert_non_null(strstr(err, "another text or tokenizer"));
    /* Usage errors exit 2. */
    snprintf(cmd, sizeof cmd, "%s kld %s --data %s > /dev/null", DSQ_BINARY, model, data);
    assert_int_equal(dsq_test_run(cmd, err, sizeof err), 2);
    free(data), free(other), free(model);
    dsq_test_rmtmp(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_row),
        cmocka_unit_test(test_stats_vs_direct),
        cmocka_unit_test(test_file_round_trip),
        cmocka_unit_test(test_file_hostile),
        cmocka_unit_test(test_smollm2_self_and_q8),
        cmocka_unit_test(test_smollm2_file_path),
        cmocka_unit_test(test_cli),
    };
    return DSQ_TEST_RUN_GROUP(tests, NULL, NULL);
}
