#include "eval/kld.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/grow.h"
#include "eval/chunks.h"
#include "eval/kld_file.h"
#include "kernels/cpu.h"

const double dsq_kld_quantiles[DSQ_KLD_NQ] = {1, 0.999, 0.99, 0.95, 0.9, 0.5, 0.1, 0.05, 0.01, 0.001, 0};
const double dsq_kld_dp_quantiles[DSQ_KLD_DP_NQ] = {1, 0.999, 0.99, 0.95, 0.9, 0.75, 0.5, 0.25, 0.1, 0.05, 0.01, 0.001, 0};

/* What one scored position contributes. */
typedef struct row_stat {
    float nll, nll_base, p_diff;
    double kld;
    int same_top;
} row_stat;

struct dsq_kld_acc {
    double sum_nll, sum_nll2, sum_nll_base, sum_nll_base2, sum_nll_nll_base;
    double sum_kld, sum_kld2, sum_p_diff, sum_p_diff2, sum_p_diff4;
    float max_p_diff;
    int64_t n_same_top, count;
    float *kld_values, *p_diff_values; /* per position, for the quantiles */
    size_t cap;
    row_stat *tmp;
    size_t tmp_cap;
};

dsq_status dsq_kld_acc_new(dsq_kld_acc **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "kld: out of memory");
}

void dsq_kld_acc_free(dsq_kld_acc *a)
{
    if (!a) return;
    free(a->kld_values);
    free(a->p_diff_values);
    free(a->tmp);
    free(a);
}

/* perplexity.cpp's log_softmax(n_vocab, logits, base_log_prob, tok, kld),
 * float and double exactly where it has them; tok is not used to read the
 * base row (the row holds the exact NLL of its own target). */
static void score_row(const float *logits, int64_t vocab, const uint8_t *base, int32_t tok, row_stat *st)
{
    float max_logit = logits[0];
    int64_t imax = 0;
    for (int64_t i = 1; i < vocab; i++)
        if (logits[i] > max_logit) max_logit = logits[i], imax = i;
    double sum_exp = 0;
    for (int64_t i = 0; i < vocab; i++) sum_exp += expf(logits[i] - max_logit);
    const float log_sum_exp = (float)log(sum_exp);
    float head[3];
    memcpy(head, base, sizeof head);
    const float scale = head[0], min_log_prob = head[1];
    const uint16_t *q = (const uint16_t *)(const void *)(base + sizeof head);
    st->nll = max_logit + log_sum_exp - logits[tok];
    st->nll_base = head[2]; /* exact; llama.cpp reads it from q[tok] (eval/kld_file.h) */
    max_logit += log_sum_exp;
    double sum = 0;
    int64_t imax_base = -1;
    float p_log_base_max = 0;
    for (int64_t i = 0; i < vocab; i++) {
        const float p_log_base = scale * q[i] + min_log_prob;
        if (i == 0 || p_log_base > p_log_base_max) p_log_base_max = p_log_base, imax_base = i;
        if (p_log_base > -16.f) {
            const float p_base = expf(p_log_base);
            sum += p_base * (p_log_base - logits[i] + max_logit);
        }
    }
    st->kld = sum;
    st->same_top = imax == imax_base;
    st->p_diff = expf(-st->nll) - expf(-st->nll_base);
}

static dsq_status reserve(dsq_kld_acc *a, int n)
{
    size_t need = (size_t)a->count + (size_t)n;
    /* Two arrays, one capacity: each grows from the same count to the same size. */
    size_t cap_k = a->cap, cap_p = a->cap;
    float *k = dsq_grow(a->kld_values, &cap_k, need, sizeof *k);
    if (k) a->kld_values = k;
    float *p = k ? dsq_grow(a->p_diff_values, &cap_p, need, sizeof *p) : NULL;
    if (p) a->p_diff_values = p;
    if (!k || !p) return dsq_fail(DSQ_ERR_NOMEM, "kld: out of memory for %zu positions", need);
    a->cap = cap_k;
    if ((size_t)n > a->tmp_cap) {
        row_stat *t = realloc(a->tmp, (size_t)n * sizeof *t);
        if (!t) return dsq_fail(DSQ_ERR_NOMEM, "kld: out of memory");
        a->tmp = t;
        a->tmp_cap = (size_t)n;
    }
    return DSQ_OK;
}

dsq_status dsq_kld_acc_add(dsq_kld_acc *a, const uint8_t *base_rows, const float *logits, int64_t vocab,
                           const int32_t *targets, int n)
{
    if (n <= 0) return DSQ_OK;
    for (int i = 0; i < n; i++)
        if (targets[i] < 0 || targets[i] >= vocab)
            return dsq_fail(DSQ_ERR_ARG, "kld: target token %d outside the vocabulary of %lld", (int)targets[i],
                            (long long)vocab);
    DSQ_TRY(reserve(a, n));
    size_t rb = dsq_kld_row_bytes(vocab);
    row_stat *t = a->tmp;
#pragma omp parallel for schedule(static) num_threads(dsq_cpu_threads())
    for (int i = 0; i < n; i++) score_row(logits + (size_t)i * (size_t)vocab, vocab, base_rows + (size_t)i * rb, targets[i], &t[i]);
    /* Summed in order, so the result does not depend on the thread count. */
    for (int i = 0; i < n; i++) {
        const row_stat *s = &t[i];
        a->sum_nll += s->nll;
        a->sum_nll2 += s->nll * s->nll;
        a->sum_nll_base += s->nll_base;
        a->sum_nll_base2 += s->nll_base * s->nll_base;
        a->sum_nll_nll_base += s->nll * s->nll_base;
        a->sum_kld += s->kld;
        a->sum_kld2 += s->kld * s->kld;
        a->n_same_top += s->same_top;
        a->sum_p_diff += s->p_diff;
        const double p_diff2 = s->p_diff * s->p_diff;
        a->sum_p_diff2 += p_diff2;
        a->sum_p_diff4 += p_diff2 * p_diff2;
        a->max_p_diff = fmaxf(a->max_p_diff, fabsf(s->p_diff));
        a->kld_values[a->count] = (float)s->kld;
        a->p_diff_values[a->count] = s->p_diff;
        a->count++;
    }
    return DSQ_OK;
}

/* perplexity.cpp's mean_and_uncertainty and covariance. */
static void mean_unc(double sum, double sum2, int64_t count, double *f, double *df)
{
    *f = *df = 0;
    if (count < 1) return;
    *f = sum / (double)count;
    double v = sum2 / (double)count - *f * *f;
    *df = v > 0 && count > 10 ? sqrt(v / (double)(count - 1)) : 0;
}

static double covariance(double a, double b, double ab, int64_t count)
{
    if (count < 10) return 0;
    double n = (double)count;
    return (ab / n - (a / n) * (b / n)) / (n - 1);
}

static double safe_sqrt(double v) { return v > 0 ? sqrt(v) : 0; }

static int cmp_float(const void *x, const void *y)
{
    float a = *(const float *)x, b = *(const float *)y;
    return (a > b) - (a < b);
}

/* perplexity.cpp's percentile lambda; the median as its own formula. */
static double quantile(const float *v, size_t n, double fraction)
{
    if (fraction == 0.5)
        return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
    float fr = (float)fraction;
    if (fr <= 0) return v[0];
    if (fr >= 1) return v[n - 1];
    float p = fr * (float)(n - 1);
    size_t ip = (size_t)p;
    p -= (float)ip;
    return (1 - p) * v[ip] + p * v[ip + 1 < n ? ip + 1 : n - 1];
}

static dsq_status quantiles(const float *vals, size_t n, const double *fr, int nq, double *out)
{
    float *s = malloc(n * sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "kld: out of memory for the quantiles");
    memcpy(s, vals, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_float);
    for (int i = 0; i < nq; i++) out[i] = quantile(s, n, fr[i]);
    free(s);
    return DSQ_OK;
}

static void ppl_stats(const dsq_kld_acc *a, dsq_kld_result *r)
{
    double lp, lp_err, lb, lb_err;
    mean_unc(a->sum_nll, a->sum_nll2, a->count, &lp, &lp_err);
    mean_unc(a->sum_nll_base, a->sum_nll_base2, a->count, &lb, &lb_err);
    double cov = covariance(a->sum_nll, a->sum_nll_base, a->sum_nll_nll_base, a->count);
    r->ppl = exp(lp);
    r->ppl_err = r->ppl * lp_err;
    r->ppl_base = exp(lb);
    r->ppl_base_err = r->ppl_base * lb_err;
    r->cor = lp_err > 0 && lb_err > 0 ? cov / (lp_err * lb_err) : 0;
    r->ln_ratio = lp - lb;
    r->ln_ratio_err = safe_sqrt(lp_err * lp_err + lb_err * lb_err - 2 * cov);
    r->ratio = exp(r->ln_ratio);
    r->ratio_err = r->ratio * r->ln_ratio_err;
    double ppl_cov = r->ppl * r->ppl_base * cov;
    r->diff = r->ppl - r->ppl_base;
    r->diff_err = safe_sqrt(r->ppl_err * r->ppl_err + r->ppl_base_err * r->ppl_base_err - 2 * ppl_cov);
}

dsq_status dsq_kld_acc_result(const dsq_kld_acc *a, bool with_quantiles, dsq_kld_result *r)
{
    memset(r, 0, sizeof *r);
    r->count = a->count;
    if (a->count == 0) return dsq_fail(DSQ_ERR_ARG, "kld: no positions were scored");
    ppl_stats(a, r);
    mean_unc(a->sum_kld, a->sum_kld2, a->count, &r->kld, &r->kld_err);
    mean_unc(a->sum_p_diff, a->sum_p_diff2, a->count, &r->dp, &r->dp_err);
    double mse, mse_err;
    mean_unc(a->sum_p_diff2, a->sum_p_diff4, a->count, &mse, &mse_err);
    r->dp_rms = sqrt(mse);
    r->dp_rms_err = r->dp_rms > 0 ? 0.5 / r->dp_rms * mse_err : 0;
    r->same_top = (double)a->n_same_top / (double)a->count;
    r->same_top_err = a->count > 1 ? safe_sqrt(r->same_top * (1 - r->same_top) / (double)(a->count - 1)) : 0;
    if (!with_quantiles) return DSQ_OK;
    DSQ_TRY(quantiles(a->kld_values, (size_t)a->count, dsq_kld_quantiles, DSQ_KLD_NQ, r->kld_q));
    DSQ_TRY(quantiles(a->p_diff_values, (size_t)a->count, dsq_kld_dp_quantiles, DSQ_KLD_DP_NQ, r->dp_q));
    r->has_quantiles = true;
    return DSQ_OK;
}

/* ================================================================ runs */

void dsq_kld_opts_default(dsq_kld_opts *o)
{
    memset(o, 0, sizeof *o);
    o->ctx = 512;
    o->bos = -1;
}

dsq_status dsq_kld_tokenize(const dsq_tokenizer *tok, const char *text, size_t len, dsq_kld_opts *o, dsq_tokens *out)
{
    if (dsq_tokenizer_add_eos(tok))
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "kld: the tokenizer appends EOS to every text (llama-perplexity refuses "
                                             "such tokenizers too)");
    o->bos = dsq_tokenizer_add_bos(tok) ? dsq_tokenizer_bos(tok) : -1;
    return dsq_tokenizer_encode(tok, text, len, true, false, out);
}

/* Everything one run needs. */
typedef struct run {
    dsq_ctx *base, *quant;
    dsq_kld_reader *in;
    dsq_kld_writer *out;
    const int32_t *tokens;
    int ctx, batch, first, rows, n_chunks;
    int32_t bos;
    int64_t vocab;
    dsq_chunk_iter it;
    const int32_t *chunk; /* ctx tokens, BOS put first */
    float *logits;        /* (ctx - first) x vocab */
    uint8_t *packed; /* rows packed base rows */
    dsq_kld_acc *acc;
    const dsq_kld_opts *o;
} run;

/* Logits of positions first .. ctx-1 of the chunk into R->logits. */
static dsq_status chunk_logits(run *R, dsq_ctx *c)
{
    dsq_chunk_pass pass = {R->ctx, R->batch, R->first, R->ctx - 1, R->logits, true, NULL, NULL};
    return dsq_chunk_forward(c, R->chunk, &pass);
}

static dsq_status base_rows(run *R)
{
    if (R->in) return dsq_kld_reader_rows(R->in, R->packed, (size_t)R->rows);
    DSQ_TRY(chunk_logits(R, R->base));
    size_t rb = dsq_kld_row_bytes(R->vocab);
#pragma omp parallel for schedule(static) num_threads(dsq_cpu_threads())
    for (int i = 0; i < R->rows; i++)
        dsq_kld_pack_row(R->logits + (size_t)i * (size_t)R->vocab, R->vocab, R->chunk[R->first + 1 + i],
                         R->packed + (size_t)i * rb);
    if (R->out) DSQ_TRY(dsq_kld_writer_rows(R->out, R->packed, (size_t)R->rows));
    return DSQ_OK;
}

static void report(const run *R, int done, double t0)
{
    if (!R->o->progress) return;
    dsq_kld_result part;
    bool have = R->quant && dsq_kld_acc_result(R->acc, false, &part) == DSQ_OK;
    double el = dsq_now_s() - t0;
    int models = (R->base ? 1 : 0) + (R->quant ? 1 : 0);
    dsq_kld_progress p = {done, R->n_chunks, have ? &part : NULL,
                          el > 0 ? (double)done * R->ctx * models / el : 0, el / done * (R->n_chunks - done)};
    R->o->progress(R->o->user, &p);
}

static dsq_status run_chunks(run *R, dsq_kld_result *r)
{
    double t0 = dsq_now_s();
    const int32_t *src;
    for (int i = 0; dsq_chunk_next(&R->it, &R->chunk, &src); i++) {
        dsq_status s = base_rows(R);
        if (s == DSQ_OK && R->quant) s = chunk_logits(R, R->quant);
        if (s == DSQ_OK && R->quant)
            s = dsq_kld_acc_add(R->acc, R->packed, R->logits, R->vocab, src + R->first + 1, R->rows);
        if (s != DSQ_OK) return dsq_fail_context(s, "kld chunk %d", i + 1);
        report(R, i + 1, t0);
    }
    if (!r) return DSQ_OK;
    if (R->quant) DSQ_TRY(dsq_kld_acc_result(R->acc, true, r));
    else memset(r, 0, sizeof *r);
    r->n_chunks = R->n_chunks;
    r->ctx = R->ctx;
    r->seconds = dsq_now_s() - t0;
    return DSQ_OK;
}

static dsq_status run_alloc(run *R)
{
    R->first = R->ctx / 2;
    R->rows = R->ctx - 1 - R->first;
    R->batch = R->o->batch > 0 && R->o->batch < R->ctx ? R->o->batch : R->ctx;
    DSQ_TRY(dsq_chunk_iter_init(&R->it, R->tokens, R->ctx, R->n_chunks, R->bos));
    R->logits = malloc((size_t)(R->ctx - R->first) * (size_t)R->vocab * sizeof *R->logits);
    R->packed = malloc((size_t)R->rows * dsq_kld_row_bytes(R->vocab));
    if (!R->logits || !R->packed)
        return dsq_fail(DSQ_ERR_NOMEM, "kld: out of memory for %d rows of %lld logits", R->rows, (long long)R->vocab);
    return dsq_kld_acc_new(&R->acc);
}

static void run_free(run *R)
{
    dsq_chunk_iter_free(&R->it);
    free(R->logits);
    free(R->packed);
    dsq_kld_acc_free(R->acc);
}

static dsq_status check_ctx(const dsq_ctx *c, int ctx, const char *which)
{
    if (c && ctx > dsq_ctx_n_ctx(c))
        return dsq_fail(DSQ_ERR_ARG, "kld: context %d exceeds the %s model's KV cache (%d)", ctx, which,
                        dsq_ctx_n_ctx(c));
    return DSQ_OK;
}

static dsq_status compute_args(run *R, int64_t n_tokens)
{
    const dsq_kld_opts *o = R->o;
    if (!R->quant && !o->save_path)
        return dsq_fail(DSQ_ERR_ARG, "kld: nothing to do (no quantized model and no file to save the base to)");
    if (o->ctx < 4) return dsq_fail(DSQ_ERR_ARG, "kld: context %d is too small (at least 4)", o->ctx);
    DSQ_TRY(check_ctx(R->base, o->ctx, "base"));
    DSQ_TRY(check_ctx(R->quant, o->ctx, "quantized"));
    if (R->quant && dsq_ctx_model(R->quant)->vocab != R->vocab)
        return dsq_fail(DSQ_ERR_ARG, "kld: the base model has %lld tokens in its vocabulary, the quantized one %lld",
                        (long long)R->vocab, (long long)dsq_ctx_model(R->quant)->vocab);
    if (n_tokens < 2 * (int64_t)o->ctx)
        return dsq_fail(DSQ_ERR_ARG, "kld: the text has %lld tokens; a context of %d needs at least %lld",
                        (long long)n_tokens, o->ctx, 2 * (long long)o->ctx);
    if (o->bos >= R->vocab) return dsq_fail(DSQ_ERR_ARG, "kld: BOS id %d outside the vocabulary", (int)o->bos);
    R->n_chunks = dsq_chunk_count(n_tokens, o->ctx, o->chunks, (int64_t)DSQ_KLD_MAX_TOKENS / o->ctx);
    R->ctx = o->ctx;
    R->bos = o->bos < 0 ? -1 : o->bos;
    return DSQ_OK;
}

dsq_status dsq_kld_compute(dsq_ctx *base, dsq_ctx *quant, const int32_t *tokens, int64_t n_tokens,
                           const dsq_kld_opts *o, dsq_kld_result *r)
{
    if (r) memset(r, 0, sizeof *r);
    run R = {.base = base, .quant = quant, .tokens = tokens, .o = o, .vocab = dsq_ctx_model(base)->vocab};
    DSQ_TRY(compute_args(&R, n_tokens));
    dsq_status s = run_alloc(&R);
    if (s == DSQ_OK && o->save_path) {
        dsq_kld_header h = {(uint32_t)R.vocab, (uint32_t)R.ctx, (uint32_t)R.n_chunks, (uint32_t)R.first, R.bos};
        s = dsq_kld_writer_open(o->save_path, o->overwrite, &h, tokens, &R.out);
    }
    if (s == DSQ_OK) s = run_chunks(&R, r);
    if (R.out) {
        if (s == DSQ_OK) s = dsq_kld_writer_commit(R.out);
        else dsq_kld_writer_abort(R.out);
    }
    run_free(&R);
    return s;
}

/* The file must describe what quant is about to be run on. */
static dsq_status check_file(const char *path, const dsq_kld_header *h, const dsq_ctx *quant, const int32_t *ftok,
                             const int32_t *check, int64_t n_check, const dsq_kld_opts *o, int n_chunks)
{
    int64_t v = dsq_ctx_model(quant)->vocab;
    if ((int64_t)h->n_vocab != v)
        return dsq_fail(DSQ_ERR_ARG, "%s was made with a vocabulary of %u tokens; this model has %lld", path,
                        h->n_vocab, (long long)v);
    if (o->ctx != 0 && (uint32_t)o->ctx != h->n_ctx)
        return dsq_fail(DSQ_ERR_ARG, "%s was made with a context of %u; --ctx %d asks for another", path, h->n_ctx,
                        o->ctx);
    DSQ_TRY(check_ctx(quant, (int)h->n_ctx, "quantized"));
    int32_t bos = o->bos < 0 ? -1 : o->bos;
    if (h->bos != bos)
        return dsq_fail(DSQ_ERR_ARG, "%s put token %d first in each chunk; this model's tokenizer would put %d", path,
                        (int)h->bos, (int)bos);
    if (!check) return DSQ_OK;
    int64_t need = (int64_t)n_chunks * h->n_ctx;
    if (n_check < need)
        return dsq_fail(DSQ_ERR_ARG, "%s holds %lld tokens for %d chunks; the text gives only %lld", path,
                        (long long)need, n_chunks, (long long)n_check);
    for (int64_t i = 0; i < need; i++)
        if (ftok[i] != check[i])
            return dsq_fail(DSQ_ERR_ARG, "%s: token %lld is %d in the file but %d in the text: the file was made from "
                                         "another text or tokenizer",
                            path, (long long)i, (int)ftok[i], (int)check[i]);
    return DSQ_OK;
}

dsq_status dsq_kld_from_file(const char *path, dsq_ctx *quant, const int32_t *check_tokens, int64_t n_check,
                             const dsq_kld_opts *o, dsq_kld_result *r)
{
    memset(r, 0, sizeof *r);
    dsq_kld_reader *in;
    DSQ_TRY(dsq_kld_reader_open(path, &in));
    const dsq_kld_header *h = dsq_kld_reader_header(in);
    run R = {.quant = quant, .in = in, .tokens = dsq_kld_reader_tokens(in), .o = o, .vocab = h->n_vocab,
             .ctx = (int)h->n_ctx, .bos = h->bos};
    R.n_chunks = o->chunks > 0 && (uint32_t)o->chunks < h->n_chunks ? o->chunks : (int)h->n_chunks;
    dsq_status s = check_file(path, h, quant, R.tokens, check_tokens, n_check, o, R.n_chunks);
    if (s == DSQ_OK) s = run_alloc(&R);
    if (s == DSQ_OK) s = run_chunks(&R, r);
    /* Checksums are verified at the end of the stream: read to it when every chunk was used. */
    if (s == DSQ_OK && (uint32_t)R.n_chunks == h->n_chunks) s = dsq_kld_reader_finish(in);
    run_free(&R);
    dsq_kld_reader_close(in);
    return s;
}
