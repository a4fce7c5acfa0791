#include "eval/perplexity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/cpu.h"

const char *dsq_ppl_protocol_name(dsq_ppl_protocol p) { return p == DSQ_PPL_HF ? "hf" : "llamacpp"; }

dsq_status dsq_ppl_protocol_from_name(const char *name, dsq_ppl_protocol *out)
{
    if (!strcmp(name, "llamacpp") || !strcmp(name, "llama.cpp")) {
        *out = DSQ_PPL_LLAMACPP;
    } else if (!strcmp(name, "hf")) {
        *out = DSQ_PPL_HF;
    } else {
        return dsq_fail(DSQ_ERR_ARG, "perplexity protocol \"%.40s\" is not one of llamacpp, hf", name);
    }
    return DSQ_OK;
}

void dsq_ppl_opts_default(dsq_ppl_opts *o)
{
    memset(o, 0, sizeof *o);
    o->protocol = DSQ_PPL_LLAMACPP;
    o->ctx = 512;
    o->bos = -1;
}

/* perplexity.cpp's log_softmax: -(logit[tok] - max - log(sum expf(l - max))). */
static double token_nll(const float *logits, int64_t vocab, int32_t tok)
{
    float mx = logits[0];
    for (int64_t i = 1; i < vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int64_t i = 0; i < vocab; i++) sum += expf(logits[i] - mx);
    return -((double)(logits[tok] - mx) - log(sum));
}

typedef struct acc {
    double nll, nll2;
    int64_t count;
} acc;

/* Scores rows of logits: row r predicts targets[r]. */
static void score_rows(const float *logits, int64_t vocab, const int32_t *targets, int rows, acc *a)
{
    double nll = 0, nll2 = 0;
#pragma omp parallel for reduction(+ : nll, nll2) schedule(static) num_threads(dsq_cpu_threads())
    for (int r = 0; r < rows; r++) {
        double v = token_nll(logits + (size_t)r * (size_t)vocab, vocab, targets[r]);
        nll += v;
        nll2 += v * v;
    }
    a->nll += nll;
    a->nll2 += nll2;
    a->count += rows;
}

/* One chunk: positions [0, ctx) of toks, scoring the rows whose position is
 * in [first, ctx - 1) against the next token. */
static dsq_status run_chunk(dsq_ctx *c, const int32_t *toks, int ctx, int batch, int first, float *logits, acc *a)
{
    int64_t vocab = dsq_ctx_model(c)->vocab;
    for (int b0 = 0; b0 < ctx; b0 += batch) {
        int nb = ctx - b0 < batch ? ctx - b0 : batch;
        int last = b0 + nb - 1 < ctx - 2 ? b0 + nb - 1 : ctx - 2; /* last scored position in this batch */
        int from = first > b0 ? first : b0;
        if (from > last) {
            DSQ_TRY(dsq_forward_range(c, toks + b0, nb, b0, nb - 1, NULL));
            continue;
        }
        DSQ_TRY(dsq_forward_range(c, toks + b0, nb, b0, from - b0, logits));
        score_rows(logits, vocab, toks + from + 1, last - from + 1, a);
    }
    return DSQ_OK;
}

static void finish(const acc *a, dsq_ppl_result *r)
{
    double mean = a->nll / (double)a->count, mean2 = a->nll2 / (double)a->count;
    r->nll_mean = mean;
    r->ppl = exp(mean);
    double var = mean2 - mean * mean;
    r->ppl_err = var > 0 && a->count > 1 ? sqrt(var / (double)(a->count - 1)) * r->ppl : 0;
    r->n_scored = a->count;
}

static dsq_status check_opts(const dsq_ctx *c, const dsq_ppl_opts *o, int64_t n_tokens, int *n_chunks)
{
    if (o->ctx < 4) return dsq_fail(DSQ_ERR_ARG, "perplexity: context %d is too small (at least 4)", o->ctx);
    if (o->ctx > dsq_ctx_n_ctx(c))
        return dsq_fail(DSQ_ERR_ARG, "perplexity: context %d exceeds the KV cache (%d)", o->ctx, dsq_ctx_n_ctx(c));
    int64_t need = o->protocol == DSQ_PPL_LLAMACPP ? 2 * (int64_t)o->ctx : o->ctx;
    if (n_tokens < need)
        return dsq_fail(DSQ_ERR_ARG, "perplexity: the text has %lld tokens; a context of %d needs at least %lld",
                        (long long)n_tokens, o->ctx, (long long)need);
    int64_t max = n_tokens / o->ctx;
    if (max > 1 << 30) max = 1 << 30;
    *n_chunks = o->chunks > 0 && o->chunks < max ? o->chunks : (int)max;
    if (o->protocol == DSQ_PPL_LLAMACPP && o->add_bos && (o->bos < 0 || o->bos >= dsq_ctx_model(c)->vocab))
        return dsq_fail(DSQ_ERR_ARG, "perplexity: BOS id %d is outside the vocabulary", (int)o->bos);
    return DSQ_OK;
}

static void report(const dsq_ppl_opts *o, int done, int n_chunks, const acc *a, double t0)
{
    if (!o->progress) return;
    double el = dsq_now_s() - t0;
    dsq_ppl_progress p = {done, n_chunks, a->count, exp(a->nll / (double)a->count),
                          el > 0 ? (double)done * o->ctx / el : 0, el / done * (n_chunks - done)};
    o->progress(o->user, &p);
}

dsq_status dsq_ppl_tokens(dsq_ctx *c, const int32_t *tokens, int64_t n_tokens, const dsq_ppl_opts *o,
                          dsq_ppl_result *r)
{
    memset(r, 0, sizeof *r);
    int n_chunks = 0;
    DSQ_TRY(check_opts(c, o, n_tokens, &n_chunks));
    int ctx = o->ctx, batch = o->batch > 0 && o->batch < ctx ? o->batch : ctx;
    /* LLAMACPP scores the second half (from ctx/2), HF all but the first token. */
    int first = o->protocol == DSQ_PPL_LLAMACPP ? ctx / 2 : 0;
    int64_t vocab = dsq_ctx_model(c)->vocab;
    int rows = batch < ctx - first ? batch : ctx - first;
    float *logits = malloc((size_t)rows * (size_t)vocab * sizeof(float));
    int32_t *chunk = malloc((size_t)ctx * sizeof(int32_t));
    if (!logits || !chunk) {
        free(logits);
        free(chunk);
        return dsq_fail(DSQ_ERR_NOMEM, "perplexity: out of memory for %d rows of logits", rows);
    }
    acc a = {0, 0, 0};
    double t0 = dsq_now_s();
    dsq_status s = DSQ_OK;
    for (int i = 0; i < n_chunks && s == DSQ_OK; i++) {
        memcpy(chunk, tokens + (int64_t)i * ctx, (size_t)ctx * sizeof(int32_t));
        if (o->protocol == DSQ_PPL_LLAMACPP && o->add_bos) chunk[0] = o->bos;
        s = run_chunk(c, chunk, ctx, batch, first, logits, &a);
        if (s != DSQ_OK) s = dsq_fail_context(s, "perplexity chunk %d", i + 1);
        else report(o, i + 1, n_chunks, &a, t0);
    }
    free(logits);
    free(chunk);
    DSQ_TRY(s);
    finish(&a, r);
    r->n_tokens = n_tokens;
    r->n_chunks = n_chunks;
    r->seconds = dsq_now_s() - t0;
    r->tokens_per_s = r->seconds > 0 ? (double)n_chunks * ctx / r->seconds : 0;
    return DSQ_OK;
}

dsq_status dsq_ppl_text(dsq_ctx *c, const dsq_tokenizer *tok, const char *text, size_t len, const dsq_ppl_opts *o,
                        dsq_ppl_result *r)
{
    if (dsq_tokenizer_add_eos(tok))
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "perplexity: the tokenizer appends EOS to every text (llama-perplexity "
                                             "refuses such tokenizers too)");
    dsq_tokens ids = {0};
    DSQ_TRY(dsq_tokenizer_encode(tok, text, len, true, false, &ids));
    dsq_ppl_opts oo = *o;
    oo.add_bos = dsq_tokenizer_add_bos(tok);
    oo.bos = dsq_tokenizer_bos(tok);
    dsq_status s = dsq_ppl_tokens(c, ids.ids, (int64_t)ids.n, &oo, r);
    dsq_tokens_free(&ids);
    return s;
}
