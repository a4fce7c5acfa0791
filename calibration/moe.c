/* MoE layers, with memory bounded by one expert: after the method has done
 * the layer's attention, router-free dense and shared-expert linears (its
 * layer function, on the layer's copies), the routed experts go one at a
 * time. The calibration tokens are routed once per layer with the
 * unquantized router (it stays unquantized, so routing is what inference
 * will do); each expert is copied to F32, quantized by the method's expert
 * function on its statistics rows, emitted, and freed (or kept for in-memory
 * evaluation). The layer's output, the next layer's input, is rebuilt from
 * the quantized weights: attention half, then shared experts on every token
 * and each routed expert on its routed tokens, weighted.
 *
 * Statistics rows: the tokens routed to the expert (DSQ_EXPERT_CALIB_ROUTED;
 * an expert with fewer than expert_min_tokens of them takes every token
 * instead), or every token (DSQ_EXPERT_CALIB_ALL, llm-compressor's
 * moe_calibrate_all_experts). Coverage (tokens per expert) goes to the log
 * and the report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibration/seq_internal.h"
#include "core/bigbuf.h"
#include "core/fileio.h"
#include "core/log.h"
#include "formats/block.h"
#include "quantizers/awq.h"

/* The expert linears in description order (gate, up, down). */
static int expert_ids(const dsq_block_desc *d, int *id)
{
    int n = 0;
    for (int i = 0; i < d->n_linears; i++)
        if (d->linears[i].expert && n < DSQ_INT_EXPERT_LINEARS) id[n++] = i;
    return n;
}

void dsq_seq_expert_name(const dsq_seq_expert *x, int k, char *buf, size_t cap)
{
    char leaf[128];
    snprintf(leaf, sizeof leaf, x->s->d->linears[x->id[k]].hf, x->e);
    snprintf(buf, cap, "model.layers.%d.%s", x->s->l, leaf);
}

static void f32_view(dsq_linear *W, float *w, int64_t out, int64_t in)
{
    (void)dsq_linear_init(W, DSQ_TYPE_F32, w, out, in); /* an F32 view cannot fail */
}

dsq_status dsq_seq_expert_act(const dsq_seq_expert *x, const float *in, int64_t n, float *y, float *tmp)
{
    dsq_linear G, U;
    f32_view(&G, x->w[0], x->out[0], x->in[0]);
    f32_view(&U, x->w[1], x->out[1], x->in[1]);
    DSQ_TRY(dsq_ctx_matmul(x->r->ctx, &G, in, y, (int)n));
    DSQ_TRY(dsq_ctx_matmul(x->r->ctx, &U, in, tmp, (int)n));
    dsq_ctx_swiglu(x->r->ctx, y, tmp, y, (size_t)n * (size_t)x->out[0]);
    return DSQ_OK;
}

/* ---- one expert ---- */

static void expert_free(dsq_seq_expert *x)
{
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
        free(x->w[k]);
        x->w[k] = NULL;
        dsq_intq_free(&x->q[k]);
        dsq_w8q_free(&x->q8[k]);
    }
}

static dsq_status expert_copy(dsq_seq_expert *x, dsq_seq_layer *s, dsq_seq_runner *r, const int *id, int e)
{
    memset(x, 0, sizeof *x);
    x->s = s, x->r = r, x->e = e;
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
        const dsq_linear *W = &s->m->layers[s->l].experts[id[k]][e];
        x->id[k] = id[k], x->out[k] = W->out, x->in[k] = W->in;
        x->ok[k] = dsq_intq_fits(&s->o->q, W->in);
        if (!(x->w[k] = malloc((size_t)(W->out * W->in) * sizeof(float)))) {
            expert_free(x);
            return dsq_fail(DSQ_ERR_NOMEM, "layer %d expert %d: out of memory", s->l, e);
        }
        dsq_status st = dsq_linear_rows_f32(W, 0, W->out, x->w[k]);
        if (st != DSQ_OK) {
            expert_free(x);
            return st;
        }
        /* the input group's scales, folded into the norm before it (fold.c) */
        if (s->expert_in && s->d->groups[s->d->linears[id[k]].group].src == DSQ_SRC_NORM)
            dsq_awq_scale_cols(x->w[k], W->out, W->in, s->expert_in);
    }
    return DSQ_OK;
}

static dsq_status expert_emit(const dsq_seq_expert *x)
{
    if (!x->s->o->emit_expert) return DSQ_OK;
    dsq_seq_expert_out out;
    memset(&out, 0, sizeof out);
    out.layer = x->s->l, out.expert = x->e;
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
        out.q[k] = x->has_q[k] ? &x->q[k] : NULL;
        out.q8[k] = x->has_q8[k] ? &x->q8[k] : NULL;
        out.w[k] = x->w[k];
    }
    return x->s->o->emit_expert(x->s->o->user, &out);
}

/* keep: the dequantized copies replace the expert in the model; else they go. */
static dsq_status expert_end(dsq_seq_expert *x, dsq_seq_keep *keep)
{
    if (keep) {
        size_t mark = dsq_seq_keep_mark(keep);
        for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
            dsq_status st = dsq_seq_keep_add(keep, x->w[k]);
            if (st != DSQ_OK) {
                dsq_seq_keep_rewind(keep, mark);
                expert_free(x);
                return st;
            }
        }
        for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
            dsq_linear *W = &x->s->m->layers[x->s->l].experts[x->id[k]][x->e];
            dsq_linear_release(W);
            f32_view(W, x->w[k], x->out[k], x->in[k]);
            x->w[k] = NULL;
        }
    } else {
        for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
            const dsq_linear *W = &x->s->m->layers[x->s->l].experts[x->id[k]][x->e];
            if (!W->owned && W->data) dsq_release_pages(W->data, (uint64_t)W->out * (uint64_t)W->row_bytes);
        }
    }
    expert_free(x);
    return DSQ_OK;
}

static dsq_status count_quantized(const dsq_seq_expert *x, dsq_seq_report *rep)
{
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
        if (x->has_q[k] || x->has_q8[k] || x->has_gguf[k])
            rep->n_quantized++;
        else
            rep->n_skipped++;
    }
    return DSQ_OK;
}

/* ---- the layer's routing and output ---- */

typedef struct moe_bufs {
    int64_t N, D, E, K, F;
    const float *in; /* the N normed rows the experts read: xn, or the eval's own */
    float *xn, *logits, *wt, *xe, *ye, *act, *tmp, *tw;
    int32_t *idx, *tok;
} moe_bufs;

static void bufs_free(moe_bufs *b)
{
    free(b->xn), free(b->logits), free(b->wt), free(b->xe), free(b->ye), free(b->act), free(b->tmp), free(b->tw);
    free(b->idx), free(b->tok);
    memset(b, 0, sizeof *b);
}

/* Buffers for N rows; in NULL: the rows are computed into b->xn. */
static dsq_status bufs_alloc(moe_bufs *b, const dsq_seq_layer *s, const dsq_seq_runner *r, int64_t n, const float *in)
{
    const dsq_arch *a = &s->m->arch;
    memset(b, 0, sizeof *b);
    b->N = n, b->D = s->m->dim, b->E = a->moe.n_routed, b->K = a->moe.top_k;
    b->F = a->moe.ffn;
    size_t N = (size_t)(b->N > 0 ? b->N : 1), D = (size_t)b->D; /* an eval of no rows streams experts only */
    b->xn = in ? NULL : dsq_bigbuf_alloc(N * D * sizeof(float));
    b->in = in ? in : b->xn;
    b->xe = dsq_bigbuf_alloc(N * D * sizeof(float));
    b->ye = dsq_bigbuf_alloc(N * D * sizeof(float));
    /* act / tmp: an expert's activations on every token, or the shared experts' on one sample */
    size_t fa = N * (size_t)b->F, fs = (size_t)r->seqlen * (size_t)(a->moe.n_shared * a->moe.ffn);
    b->act = dsq_bigbuf_alloc((fa > fs ? fa : fs) * sizeof(float));
    b->tmp = dsq_bigbuf_alloc((fa > fs ? fa : fs) * sizeof(float));
    b->logits = malloc(N * (size_t)b->E * sizeof(float));
    b->wt = malloc(N * (size_t)b->K * sizeof(float));
    b->idx = malloc(N * (size_t)b->K * sizeof(int32_t));
    b->tok = malloc(N * sizeof(int32_t));
    b->tw = malloc(N * sizeof(float));
    if (b->in && b->xe && b->ye && b->act && b->tmp && b->logits && b->wt && b->idx && b->tok && b->tw) return DSQ_OK;
    bufs_free(b);
    return dsq_fail(DSQ_ERR_NOMEM, "layer %d: out of memory for the MoE calibration buffers (%lld tokens)", s->l,
                    (long long)N);
}

/* The tokens routed to expert e and their weights; returns how many. */
static int64_t routed(const moe_bufs *b, int e)
{
    int64_t n = 0;
    for (int64_t t = 0; t < b->N; t++)
        for (int64_t j = 0; j < b->K; j++)
            if (b->idx[t * b->K + j] == e) {
                b->tok[n] = (int32_t)t;
                b->tw[n++] = b->wt[t * b->K + j];
            }
    return n;
}

/* hout += the shared experts of every token (quantized copies in the model). */
static dsq_status add_shared(dsq_seq_layer *s, dsq_seq_runner *r, moe_bufs *b, float *hout)
{
    if (s->m->arch.moe.n_shared <= 0) return DSQ_OK;
    const dsq_layer *L = &s->m->layers[s->l];
    int g = dsq_block_find_linear(s->d, "gate_shexp"), u = dsq_block_find_linear(s->d, "up_shexp"),
        dn = dsq_block_find_linear(s->d, "down_shexp");
    if (g < 0 || u < 0 || dn < 0) return dsq_fail(DSQ_ERR_INTERNAL, "layer %d: no shared expert linears", s->l);
    int64_t F = L->lin[g].out;
    for (int64_t t0 = 0; t0 < b->N; t0 += r->seqlen) {
        const float *x = b->in + t0 * b->D;
        int n = b->N - t0 < r->seqlen ? (int)(b->N - t0) : r->seqlen;
        float *tmp = b->tmp, *act = b->act; /* sized for one sample of the shared MLP */
        DSQ_TRY(dsq_ctx_matmul(r->ctx, &L->lin[g], x, act, n));
        DSQ_TRY(dsq_ctx_matmul(r->ctx, &L->lin[u], x, tmp, n));
        dsq_ctx_swiglu(r->ctx, act, tmp, act, (size_t)n * (size_t)F);
        DSQ_TRY(dsq_ctx_matmul(r->ctx, &L->lin[dn], act, b->ye, n));
        float *h = hout + t0 * b->D;
        for (int64_t i = 0; i < (int64_t)n * b->D; i++) h[i] += b->ye[i];
    }
    return DSQ_OK;
}

/* hout[tok] += w * expert(x[tok]) with the expert's quantized weights. */
static dsq_status add_routed(dsq_seq_expert *x, moe_bufs *b, int64_t n, float *hout)
{
    if (n == 0) return DSQ_OK;
    DSQ_TRY(dsq_seq_expert_act(x, b->xe, n, b->act, b->tmp));
    dsq_linear Dn;
    f32_view(&Dn, x->w[2], x->out[2], x->in[2]);
    DSQ_TRY(dsq_ctx_matmul(x->r->ctx, &Dn, b->act, b->ye, (int)n));
    for (int64_t i = 0; i < n; i++) {
        float *h = hout + (int64_t)b->tok[i] * b->D, w = b->tw[i];
        const float *y = b->ye + i * b->D;
        for (int64_t c = 0; c < b->D; c++) h[c] += w * y[c];
    }
    return DSQ_OK;
}

static void gather(const moe_bufs *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        memcpy(b->xe + i * b->D, b->in + (int64_t)b->tok[i] * b->D, (size_t)b->D * sizeof(float));
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void log_coverage(const dsq_seq_layer *s, const int64_t *counts, int64_t E, int min_tok, int64_t below)
{
    int64_t *c = malloc((size_t)E * sizeof *c);
    if (!c) return;
    memcpy(c, counts, (size_t)E * sizeof *c);
    qsort(c, (size_t)E, sizeof *c, cmp_i64);
    DSQ_LOGI("layer %d: calibration tokens per expert min %lld, median %lld, max %lld; %lld of %lld experts under %d%s",
             s->l, (long long)c[0], (long long)c[E / 2], (long long)c[E - 1], (long long)below, (long long)E, min_tok,
             below && s->o->expert_calib == DSQ_EXPERT_CALIB_ROUTED ? " (their statistics from every token)" : "");
    free(c);
}

/* The expert linears must all be there (a GGUF or artifact without them was refused at load). */
static dsq_status check_experts(const dsq_seq_layer *s, const int *id, int n)
{
    if (n != DSQ_INT_EXPERT_LINEARS)
        return dsq_fail(DSQ_ERR_INTERNAL, "%s block: %d expert linears, expected gate, up, down", s->d->name, n);
    for (int k = 0; k < n; k++)
        if (!s->m->layers[s->l].experts[id[k]])
            return dsq_fail(DSQ_ERR_INTERNAL, "layer %d: %s has no experts loaded", s->l, s->d->linears[id[k]].role);
    return DSQ_OK;
}

static dsq_status experts_without_data(dsq_seq_layer *s, dsq_seq_runner *r, const int *id, dsq_seq_report *rep,
                                       dsq_seq_keep *keep)
{
    for (int e = 0; e < s->m->arch.moe.n_routed; e++) {
        dsq_seq_expert x;
        DSQ_TRY(expert_copy(&x, s, r, id, e));
        dsq_status st = s->o->method->expert(&x, rep);
        if (st == DSQ_OK) st = count_quantized(&x, rep);
        if (st == DSQ_OK) st = expert_emit(&x);
        if (st != DSQ_OK) {
            expert_free(&x);
            return dsq_fail_context(st, "expert %d", e);
        }
        DSQ_TRY(expert_end(&x, keep));
    }
    return DSQ_OK;
}

static dsq_status one_expert(dsq_seq_layer *s, dsq_seq_runner *r, const int *id, int e, moe_bufs *b, float *hout,
                             dsq_seq_report *rep, dsq_seq_keep *keep, int64_t *count)
{
    int min_tok = s->o->expert_min_tokens > 0 ? s->o->expert_min_tokens : DSQ_EXPERT_MIN_TOKENS_DEFAULT;
    int64_t n = routed(b, e);
    *count = n;
    gather(b, n);
    dsq_seq_expert x;
    DSQ_TRY(expert_copy(&x, s, r, id, e));
    bool all = s->o->expert_calib == DSQ_EXPERT_CALIB_ALL || n < min_tok;
    x.x = all ? b->xn : b->xe;
    x.n_tok = all ? b->N : n;
    dsq_status st = s->o->method->expert(&x, rep);
    if (st == DSQ_OK) st = count_quantized(&x, rep);
    if (st == DSQ_OK) st = add_routed(&x, b, n, hout);
    if (st == DSQ_OK) st = expert_emit(&x);
    if (st != DSQ_OK) {
        expert_free(&x);
        return dsq_fail_context(st, "expert %d", e);
    }
    return expert_end(&x, keep);
}

/* The MLP half's input norm: the one the experts' input group reads. */
static const float *mlp_norm(const dsq_seq_layer *s, int gate_id)
{
    const dsq_block_group *g = &s->d->groups[s->d->linears[gate_id].group];
    return g->src == DSQ_SRC_NORM ? s->m->layers[s->l].norm[g->src_index] : NULL;
}

static int router_of(const dsq_block_desc *d)
{
    for (int i = 0; i < d->n_linears; i++)
        if (d->linears[i].router) return i;
    return -1;
}

/* The top-k experts and weights of every row of b->in, by the layer's float router. */
static dsq_status route_rows(dsq_seq_layer *s, dsq_seq_runner *r, moe_bufs *b)
{
    const dsq_layer *L = &s->m->layers[s->l];
    int router = router_of(s->d);
    if (router < 0) return dsq_fail(DSQ_ERR_INTERNAL, "layer %d: no router", s->l);
    if (b->N == 0) return DSQ_OK;
    DSQ_TRY(dsq_ctx_matmul_f32(r->ctx, &L->lin[router], b->in, b->logits, (int)b->N));
    return dsq_ctx_moe_route(r->ctx, &s->m->arch.moe, b->logits, L->router_bias, b->idx, b->wt, (int)b->N);
}

static dsq_status experts_with_data(dsq_seq_layer *s, dsq_seq_runner *r, const int *id, const float *hin, float *hout,
                                    dsq_seq_report *rep, dsq_seq_keep *keep, int64_t *counts)
{
    moe_bufs b;
    DSQ_TRY(bufs_alloc(&b, s, r, (int64_t)r->n_samples * r->seqlen, NULL));
    const float *nw = mlp_norm(s, id[0]);
    dsq_status st = nw ? DSQ_OK : dsq_fail(DSQ_ERR_INTERNAL, "layer %d: no MLP norm", s->l);
    /* the attention half with its quantized weights, then the routing of every token */
    if (st == DSQ_OK) st = dsq_seq_run_pass(r, s->l, 0, hin, hout, r->n_samples, NULL);
    if (st == DSQ_OK) dsq_ctx_rmsnorm(r->ctx, hout, nw, b.xn, (int)b.N, b.D);
    if (st == DSQ_OK) st = route_rows(s, r, &b);
    if (st == DSQ_OK) st = add_shared(s, r, &b, hout);
    int64_t below = 0;
    int min_tok = s->o->expert_min_tokens > 0 ? s->o->expert_min_tokens : DSQ_EXPERT_MIN_TOKENS_DEFAULT;
    for (int e = 0; e < b.E && st == DSQ_OK; e++) {
        st = one_expert(s, r, id, e, &b, hout, rep, keep, &counts[e]);
        below += counts[e] < min_tok;
    }
    if (st == DSQ_OK) log_coverage(s, counts, b.E, min_tok, below);
    bufs_free(&b);
    return st;
}

dsq_status dsq_seq_moe_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout, dsq_seq_report *rep,
                             dsq_seq_keep *keep, int64_t *counts)
{
    int id[DSQ_INT_EXPERT_LINEARS];
    DSQ_TRY(check_experts(s, id, expert_ids(s->d, id)));
    if (!s->o->method->expert)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s does not calibrate MoE experts yet", s->o->method->name);
    if (!r->ctx) return experts_without_data(s, r, id, rep, keep);
    return experts_with_data(s, r, id, hin, hout, rep, keep, counts);
}

/* ---- the MLP as the methods' loss (seq_internal.h dsq_seq_moe_eval) ---- */

dsq_status dsq_seq_moe_eval_init(dsq_seq_moe_eval *e, dsq_seq_layer *s, dsq_seq_runner *r, const float *x, int64_t n)
{
    memset(e, 0, sizeof *e);
    int id[DSQ_INT_EXPERT_LINEARS];
    DSQ_TRY(check_experts(s, id, expert_ids(s->d, id)));
    moe_bufs *b = calloc(1, sizeof *b);
    if (!b) return dsq_fail(DSQ_ERR_NOMEM, "layer %d: out of memory", s->l);
    dsq_status st = bufs_alloc(b, s, r, n, x);
    if (st == DSQ_OK) st = route_rows(s, r, b);
    if (st != DSQ_OK) {
        bufs_free(b);
        free(b);
        return st;
    }
    e->s = s, e->r = r, e->b = b;
    return DSQ_OK;
}

void dsq_seq_moe_eval_free(dsq_seq_moe_eval *e)
{
    if (e->b) bufs_free(e->b);
    free(e->b);
    e->b = NULL;
}

/* Expert ex on its rows: copied, edited, added into y (NULL: statistics only). */
static dsq_status eval_expert(dsq_seq_moe_eval *e, int ex, dsq_seq_expert_edit_fn fn, void *user, float *y)
{
    moe_bufs *b = e->b;
    int id[DSQ_INT_EXPERT_LINEARS];
    expert_ids(e->s->d, id);
    int64_t n = routed(b, ex);
    if (y && n == 0) return DSQ_OK; /* adds nothing */
    gather(b, n);
    dsq_seq_expert x;
    DSQ_TRY(expert_copy(&x, e->s, e->r, id, ex));
    x.x = b->xe, x.n_tok = n;
    dsq_status st = fn ? fn(user, &x) : DSQ_OK;
    if (st == DSQ_OK && y) st = add_routed(&x, b, n, y);
    if (st != DSQ_OK) {
        expert_free(&x);
        return dsq_fail_context(st, "expert %d", ex);
    }
    return expert_end(&x, NULL);
}

dsq_status dsq_seq_moe_eval_run(dsq_seq_moe_eval *e, dsq_seq_expert_edit_fn edit, void *user, float *y)
{
    moe_bufs *b = e->b;
    memset(y, 0, (size_t)(b->N * b->D) * sizeof *y);
    DSQ_TRY(add_shared(e->s, e->r, b, y));
    for (int ex = 0; ex < b->E; ex++) DSQ_TRY(eval_expert(e, ex, edit, user, y));
    return DSQ_OK;
}

dsq_status dsq_seq_moe_each_expert(dsq_seq_moe_eval *e, dsq_seq_expert_edit_fn fn, void *user)
{
    for (int ex = 0; ex < ((moe_bufs *)e->b)->E; ex++) DSQ_TRY(eval_expert(e, ex, fn, user, NULL));
    return DSQ_OK;
}
