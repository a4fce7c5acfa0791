#include "eval/perplexity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "eval/chunks.h"
#include "eval/nll.h"

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

/* The chunk pass's rows callback: position p predicts chunk[p + 1]. */
typedef struct scorer {
    const int32_t *chunk;
    int64_t vocab;
    dsq_nll_acc *acc;
} scorer;

static dsq_status score(void *user, int pos, int n, const float *logits)
{
    const scorer *s = user;
    dsq_nll_acc_rows(s->acc, logits, s->vocab, s->chunk + pos + 1, n);
    return DSQ_OK;
}

static void finish(const dsq_nll_acc *a, dsq_ppl_result *r)
{
    r->nll_mean = a->nll / (double)a->count;
    dsq_nll_acc_ppl(a, &r->ppl, &r->ppl_err);
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
    *n_chunks = dsq_chunk_count(n_tokens, o->ctx, o->chunks, 1 << 30);
    if (o->protocol == DSQ_PPL_LLAMACPP && o->add_bos && (o->bos < 0 || o->bos >= dsq_ctx_model(c)->vocab))
        return dsq_fail(DSQ_ERR_ARG, "perplexity: BOS id %d is outside the vocabulary", (int)o->bos);
    return DSQ_OK;
}

static void report(const dsq_ppl_opts *o, int done, int n_chunks, const dsq_nll_acc *a, double t0)
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
    if (!logits) return dsq_fail(DSQ_ERR_NOMEM, "perplexity: out of memory for %d rows of logits", rows);
    dsq_chunk_iter it;
    int32_t bos = o->protocol == DSQ_PPL_LLAMACPP && o->add_bos ? o->bos : -1;
    dsq_status s = dsq_chunk_iter_init(&it, tokens, ctx, n_chunks, bos);
    dsq_nll_acc a = {0, 0, 0};
    scorer sc = {NULL, vocab, &a};
    /* Positions first .. ctx-2 are scored against the next token. */
    dsq_chunk_pass pass = {ctx, batch, first, ctx - 2, logits, false, score, &sc};
    double t0 = dsq_now_s();
    for (int i = 0; s == DSQ_OK && dsq_chunk_next(&it, &sc.chunk, NULL); i++) {
        s = dsq_chunk_forward(c, sc.chunk, &pass);
        if (s != DSQ_OK) s = dsq_fail_context(s, "perplexity chunk %d", i + 1);
        else report(o, i + 1, n_chunks, &a, t0);
    }
    free(logits);
    dsq_chunk_iter_free(&it);
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
