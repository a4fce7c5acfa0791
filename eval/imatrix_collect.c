#include "eval/imatrix_collect.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "eval/chunks.h"
#include "eval/nll.h"
#include "core/log.h"
#include "formats/block.h"

/* One tensor's sums. A routed-expert linear is one entry for the stacked
 * tensor (llama.cpp's MUL_MAT_ID entries, blk.N.ffn_gate_exps.weight): expert
 * e's sums at e * in, its own token count. */
typedef struct entry {
    double *sum2;     /* [max(1, n_expert) * in] */
    int64_t *count;   /* [max(1, n_expert)]: tokens, the same for every column of one product */
    int64_t in;       /* 0: the layer has no such tensor; nothing is collected */
    int64_t n_expert; /* experts stacked in the tensor, 0 for a plain linear */
    int32_t ncall;
    int32_t seen; /* expert entries: the router call their last batch came with */
} entry;

struct dsq_imatrix_collector {
    const dsq_model *m;
    int n_layers, n_lin; /* n_lin: linears per layer (the block description's) */
    entry *e;            /* n_layers x n_lin */
    int32_t *routed;     /* [n_layers]: router calls so far, one per forward call of an MoE layer */
};

/* Whether layer l multiplies linear k as a tensor of the file: present in its
 * config, and (plain linears) held whole. A GGUF's split attn_k_b / attn_v_b
 * leave kv_b empty; the absorbed attention multiplies them per head, which a
 * plain entry does not describe, so they get none (llama-quantize quantizes a
 * tensor without an entry without one). */
static int64_t entry_width(const dsq_model *m, int64_t l, int k, int64_t *n_expert)
{
    const dsq_block_linear *bl = &m->block->linears[k];
    *n_expert = 0;
    if (!dsq_block_linear_present(m->block, &m->arch, l, k)) return 0;
    if (bl->expert) {
        const dsq_linear *E = m->layers[l].experts[k];
        if (!E) return 0;
        *n_expert = m->arch.moe.n_routed;
        return E[0].in;
    }
    return m->layers[l].lin[k].vt ? m->layers[l].lin[k].in : 0;
}

dsq_status dsq_imatrix_collector_new(const dsq_model *m, dsq_imatrix_collector **out)
{
    *out = NULL;
    DSQ_TRY(dsq_block_require(m->block, &m->arch, DSQ_BLOCK_CAN_CALIBRATE, m->ckpt->path));
    dsq_imatrix_collector *c = calloc(1, sizeof *c);
    int n = (int)m->arch.n_layers, nl = m->block->n_linears;
    if (c) c->e = calloc((size_t)n * (size_t)nl, sizeof *c->e);
    if (c) c->routed = calloc((size_t)n, sizeof *c->routed);
    if (!c || !c->e || !c->routed) {
        dsq_imatrix_collector_free(c);
        return dsq_fail(DSQ_ERR_NOMEM, "imatrix: out of memory");
    }
    c->m = m;
    c->n_layers = n;
    c->n_lin = nl;
    for (int l = 0; l < n; l++)
        for (int k = 0; k < nl; k++) {
            entry *e = &c->e[l * nl + k];
            e->in = entry_width(m, l, k, &e->n_expert);
            if (!e->in) continue;
            int64_t slots = e->n_expert ? e->n_expert : 1;
            e->sum2 = calloc((size_t)(slots * e->in), sizeof *e->sum2);
            e->count = calloc((size_t)slots, sizeof *e->count);
            if (!e->sum2 || !e->count) {
                dsq_imatrix_collector_free(c);
                return dsq_fail(DSQ_ERR_NOMEM, "imatrix: out of memory");
            }
        }
    *out = c;
    return DSQ_OK;
}

void dsq_imatrix_collector_free(dsq_imatrix_collector *c)
{
    if (!c) return;
    for (int i = 0; c->e && i < c->n_layers * c->n_lin; i++) free(c->e[i].sum2), free(c->e[i].count);
    free(c->e);
    free(c->routed);
    free(c);
}

static void entry_name(const dsq_imatrix_collector *c, int layer, int which, char *buf, size_t cap)
{
    snprintf(buf, cap, "blk.%d.%s.weight", layer, dsq_model_linear_gguf(c->m, which));
}

/* Sums of squares of n_tok rows into sum2[0, in), then the finiteness check. */
static dsq_status accumulate(const dsq_imatrix_collector *c, int layer, int which, double *sum2, const float *x,
                             int n_tok, int64_t in)
{
    for (int t = 0; t < n_tok; t++) {
        const float *row = x + (size_t)t * (size_t)in;
        for (int64_t j = 0; j < in; j++) sum2[j] += (double)row[j] * row[j];
    }
    for (int64_t j = 0; j < in; j++)
        if (!isfinite(sum2[j])) {
            char name[64];
            entry_name(c, layer, which, name, sizeof name);
            return dsq_fail(DSQ_ERR_NUMERIC, "imatrix: %s: non-finite sum of squares in column %lld", name,
                            (long long)j);
        }
    return DSQ_OK;
}

dsq_status dsq_imatrix_collect_hook(void *user, int layer, int which, int expert, const float *x, int n_tok, int64_t in)
{
    dsq_imatrix_collector *c = user;
    if (layer < 0 || layer >= c->n_layers || which < 0 || which >= c->n_lin)
        return dsq_fail(DSQ_ERR_INTERNAL, "imatrix: hook called for layer %d, linear %d", layer, which);
    entry *e = &c->e[layer * c->n_lin + which];
    char name[64];
    if (!e->in) return DSQ_OK; /* not a tensor of this model (entry_width) */
    /* llama.cpp counts a stacked-expert product once per forward call, for all
     * its tokens; the router runs once per call, before the experts */
    if (c->m->block->linears[which].router) c->routed[layer]++;
    if ((expert >= 0) != (e->n_expert > 0) || expert >= e->n_expert)
        return dsq_fail(DSQ_ERR_INTERNAL, "imatrix: hook called for layer %d, linear %d, expert %d", layer, which,
                        expert);
    /* llama.cpp ignores plain products over fewer rows; expert products never */
    if (expert < 0 && n_tok < DSQ_IMATRIX_MIN_ROWS) return DSQ_OK;
    if (in != e->in) {
        entry_name(c, layer, which, name, sizeof name);
        return dsq_fail(DSQ_ERR_INTERNAL, "imatrix: %s: input of %lld columns, the weight has %lld", name,
                        (long long)in, (long long)e->in);
    }
    int64_t slot = expert >= 0 ? expert : 0;
    DSQ_TRY(accumulate(c, layer, which, e->sum2 + slot * in, x, n_tok, in));
    e->count[slot] += n_tok;
    if (expert < 0)
        e->ncall++;
    else if (e->seen != c->routed[layer]) {
        e->ncall++;
        e->seen = c->routed[layer];
    }
    return DSQ_OK;
}

int32_t dsq_imatrix_collector_calls(const dsq_imatrix_collector *c)
{
    int32_t m = 0;
    for (int i = 0; i < c->n_layers * c->n_lin; i++) m = c->e[i].ncall > m ? c->e[i].ncall : m;
    return m;
}

/* Entry (l, k) into im, unless it has no data: a stacked tensor with an expert
 * no token reached is left out whole, as llama-imatrix leaves out entries with
 * partial data (a zero would tell the quantizer those columns do not matter). */
static dsq_status add_entry(const dsq_imatrix_collector *c, int l, int k, dsq_imatrix *im, float *mean)
{
    const entry *e = &c->e[l * c->n_lin + k];
    int64_t slots = e->n_expert ? e->n_expert : 1, empty = 0;
    for (int64_t x = 0; x < slots; x++) empty += e->count && !e->count[x];
    if (!e->in || empty == slots) return DSQ_OK;
    char name[64];
    entry_name(c, l, k, name, sizeof name);
    if (empty) {
        DSQ_LOGW("imatrix: %s: %lld of %lld experts got no token; the entry is left out", name, (long long)empty,
                 (long long)slots);
        return DSQ_OK;
    }
    for (int64_t x = 0; x < slots; x++)
        for (int64_t j = 0; j < e->in; j++)
            mean[x * e->in + j] = (float)(e->sum2[x * e->in + j] / (double)e->count[x]);
    return dsq_imatrix_add(im, name, e->ncall, mean, (uint32_t)(slots * e->in));
}

dsq_status dsq_imatrix_collector_result(const dsq_imatrix_collector *c, const char *dataset, dsq_imatrix **out)
{
    *out = NULL;
    int32_t calls = dsq_imatrix_collector_calls(c);
    if (!calls)
        return dsq_fail(DSQ_ERR_ARG, "imatrix: nothing was collected (forward calls need at least %d tokens)",
                        DSQ_IMATRIX_MIN_ROWS);
    int64_t max_n = 1;
    for (int i = 0; i < c->n_layers * c->n_lin; i++) {
        int64_t n = c->e[i].in * (c->e[i].n_expert ? c->e[i].n_expert : 1);
        max_n = n > max_n ? n : max_n;
    }
    float *mean = malloc((size_t)max_n * sizeof *mean);
    dsq_imatrix *im = NULL;
    dsq_status s = mean ? dsq_imatrix_new(&im) : dsq_fail(DSQ_ERR_NOMEM, "imatrix: out of memory");
    for (int l = 0; s == DSQ_OK && l < c->n_layers; l++)
        for (int k = 0; s == DSQ_OK && k < c->n_lin; k++) s = add_entry(c, l, k, im, mean);
    if (s == DSQ_OK) s = dsq_imatrix_set_trailer(im, calls, dataset);
    free(mean);
    if (s != DSQ_OK) {
        dsq_imatrix_free(im);
        return s;
    }
    *out = im;
    return DSQ_OK;
}

/* ================================================================ runs */

void dsq_imatrix_opts_default(dsq_imatrix_opts *o)
{
    memset(o, 0, sizeof *o);
    o->ctx = 512;
    o->batch = 512;
    o->bos = -1;
}

dsq_status dsq_imatrix_tokenize(const dsq_tokenizer *tok, const char *text, size_t len, dsq_imatrix_opts *o,
                                dsq_tokens *out)
{
    if (dsq_tokenizer_add_eos(tok))
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "imatrix: the tokenizer appends EOS to every text (llama-imatrix refuses "
                                             "such tokenizers too)");
    o->bos = dsq_tokenizer_add_bos(tok) ? dsq_tokenizer_bos(tok) : -1;
    return dsq_tokenizer_encode(tok, text, len, true, false, out);
}

/* The chunk pass's rows callback: position p predicts the stream's token p + 1. */
typedef struct scorer {
    const int32_t *orig;
    int64_t vocab;
    dsq_nll_acc *acc;
} scorer;

static dsq_status score(void *user, int pos, int n, const float *logits)
{
    const scorer *s = user;
    dsq_nll_acc_rows(s->acc, logits, s->vocab, s->orig + pos + 1, n);
    return DSQ_OK;
}

static dsq_status check_run(const dsq_ctx *c, int64_t n_tokens, const dsq_imatrix_opts *o, int *n_chunks)
{
    if (o->ctx < 4) return dsq_fail(DSQ_ERR_ARG, "imatrix: context %d is too small (at least 4)", o->ctx);
    if (o->ctx > dsq_ctx_n_ctx(c))
        return dsq_fail(DSQ_ERR_ARG, "imatrix: context %d exceeds the KV cache (%d)", o->ctx, dsq_ctx_n_ctx(c));
    if (n_tokens < 2 * (int64_t)o->ctx)
        return dsq_fail(DSQ_ERR_ARG, "imatrix: the text has %lld tokens; a context of %d needs at least %lld",
                        (long long)n_tokens, o->ctx, 2 * (long long)o->ctx);
    if (o->bos >= dsq_ctx_model(c)->vocab)
        return dsq_fail(DSQ_ERR_ARG, "imatrix: BOS id %d outside the vocabulary", (int)o->bos);
    *n_chunks = dsq_chunk_count(n_tokens, o->ctx, o->chunks, 1 << 30);
    return DSQ_OK;
}

static void report(const dsq_imatrix_opts *o, int done, int n, const dsq_nll_acc *a, double t0)
{
    if (!o->progress) return;
    double el = dsq_now_s() - t0;
    dsq_imatrix_progress p = {done, n, a->count ? exp(a->nll / (double)a->count) : 0,
                              el > 0 ? (double)done * o->ctx / el : 0, el / done * (n - done)};
    o->progress(o->user, &p);
}

dsq_status dsq_imatrix_run(dsq_ctx *c, dsq_imatrix_collector *col, const int32_t *tokens, int64_t n_tokens,
                           const dsq_imatrix_opts *o, dsq_imatrix_run_result *r)
{
    memset(r, 0, sizeof *r);
    int n_chunks = 0;
    DSQ_TRY(check_run(c, n_tokens, o, &n_chunks));
    int ctx = o->ctx, batch = o->batch > 0 && o->batch < ctx ? o->batch : ctx;
    int rows = batch < ctx - ctx / 2 ? batch : ctx - ctx / 2;
    int64_t vocab = dsq_ctx_model(c)->vocab;
    float *logits = o->no_ppl ? NULL : malloc((size_t)rows * (size_t)vocab * sizeof *logits);
    if (!logits && !o->no_ppl) return dsq_fail(DSQ_ERR_NOMEM, "imatrix: out of memory");
    dsq_chunk_iter it;
    dsq_status s = dsq_chunk_iter_init(&it, tokens, ctx, n_chunks, o->bos >= 0 ? o->bos : -1);
    dsq_nll_acc a = {0, 0, 0};
    scorer sc = {NULL, vocab, &a};
    /* Rows from ctx/2 on give the perplexity (positions up to ctx-2 have a next token), unless no_ppl. */
    dsq_chunk_pass pass = {ctx, batch, ctx / 2, o->no_ppl ? -1 : ctx - 2, logits, false, score, &sc};
    dsq_ctx_set_hooks(c, dsq_imatrix_collect_hook, NULL, col);
    double t0 = dsq_now_s();
    const int32_t *chunk;
    for (int i = 0; s == DSQ_OK && dsq_chunk_next(&it, &chunk, &sc.orig); i++) {
        s = dsq_chunk_forward(c, chunk, &pass);
        if (s != DSQ_OK) s = dsq_fail_context(s, "imatrix chunk %d", i + 1);
        else report(o, i + 1, n_chunks, &a, t0);
    }
    dsq_ctx_set_hooks(c, NULL, NULL, NULL);
    free(logits);
    dsq_chunk_iter_free(&it);
    DSQ_TRY(s);
    r->n_chunks = n_chunks;
    r->n_tokens = (int64_t)n_chunks * ctx;
    r->seconds = dsq_now_s() - t0;
    dsq_nll_acc_ppl(&a, &r->ppl, &r->ppl_err);
    return DSQ_OK;
}
