/* AWQ (AutoAWQ's order, calibration/sequential.h): the float layer runs
 * once capturing the input of every scale group of the block description;
 * each group's scales are searched on the unmodified layer, then all are
 * folded in (into the norm or linear that produces the group's input), then
 * the clip search, then quantization. The search's loss is the output of the
 * group's whole half without its residual (AutoAWQ's module2inspect) or,
 * for a single-linear group, the quadratic form of that linear's error in
 * its input Gram matrix (the same MSE, computed exactly). */
#include <stdlib.h>
#include <string.h>

#include "calibration/method.h"
#include "calibration/seq_internal.h"
#include "core/clock.h"
#include "core/log.h"

typedef struct awq_st {
    dsq_seq_layer *s;
    dsq_seq_runner *r;
    int n_loss;                               /* samples in the loss */
    int64_t nt;                               /* tokens in the loss */
    int64_t all_tok;                          /* tokens captured */
    float *X[DSQ_BLOCK_MAX_GROUPS];           /* each group's captured input, all tokens */
    float *backup[DSQ_BLOCK_MAX_LINEARS];     /* unmodified weights during a search */
    float *yref, *y, *tx, *work;              /* loss buffers */
} awq_st;

typedef struct awq_group {
    awq_st *a;
    int g;
    int ids[DSQ_BLOCK_MAX_LINEARS], n;
    float *G; /* single-linear loss: x^T x / n of the input over all tokens */
} awq_group;

static double mse(const float *a, const float *b, size_t n)
{
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        acc += d * d;
    }
    return acc / (double)(n ? n : 1);
}

/* The half's first group: its input is the half's normed input. */
static int half_first_group(const dsq_block_desc *d, int half)
{
    for (int g = 0; g < d->n_groups; g++)
        if (d->groups[g].half == half) return g;
    return -1;
}

static int half_tail_group(const dsq_block_desc *d, int half)
{
    for (int g = d->n_groups - 1; g >= 0; g--)
        if (d->groups[g].half == half && d->groups[g].tail) return g;
    return -1;
}

/* The output of group g's half without its residual, on the loss samples,
 * with the layer's current weights. */
static dsq_status half_output(awq_st *a, int g, float *y)
{
    dsq_seq_layer *s = a->s;
    int half = s->d->groups[g].half;
    int g0 = half_first_group(s->d, half), tail = dsq_block_group_first(s->d, half_tail_group(s->d, half));
    dsq_ctx *c = a->r->ctx;
    DSQ_TRY(dsq_forward_tail_input(c, s->l, half, a->X[g0], a->tx, a->work, a->n_loss, a->r->seqlen));
    return dsq_ctx_matmul(c, &s->m->layers[s->l].lin[tail], a->tx, y, (int)a->nt);
}

static dsq_status group_loss(void *user, const float *sc, double *loss)
{
    awq_group *gr = user;
    awq_st *a = gr->a;
    dsq_seq_layer *s = a->s;
    for (int k = 0; k < gr->n; k++) {
        int id = gr->ids[k];
        DSQ_TRY(dsq_awq_fake_quant(a->backup[id], dsq_seq_lin_out(s, id), dsq_seq_lin_in(s, id), sc, &s->o->awq.q,
                                   s->w[id]));
    }
    if (gr->G) {
        int id = gr->ids[0];
        return dsq_awq_quad_loss(a->backup[id], s->w[id], dsq_seq_lin_out(s, id), dsq_seq_lin_in(s, id), gr->G,
                                 s->o->bf16, loss);
    }
    DSQ_TRY(half_output(a, gr->g, a->y));
    *loss = mse(a->y, a->yref, (size_t)(a->nt * s->m->dim));
    return DSQ_OK;
}

/* G = x^T x / n over every token of the group's input. */
static dsq_status input_gram(awq_st *a, awq_group *gr)
{
    int64_t cols = dsq_seq_lin_in(a->s, gr->ids[0]);
    dsq_hessian H;
    DSQ_TRY(dsq_hessian_init(&H, cols));
    H.bf16 = a->s->o->bf16;
    dsq_status st = dsq_hessian_add(&H, a->X[gr->g], a->all_tok);
    if (st == DSQ_OK) st = dsq_hessian_finalize(&H); /* 2/n x^T x */
    if (st == DSQ_OK && !(gr->G = malloc((size_t)(cols * cols) * sizeof *gr->G)))
        st = dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory for a %lld x %lld input Gram matrix", (long long)cols,
                      (long long)cols);
    for (int64_t i = 0; st == DSQ_OK && i < cols * cols; i++) gr->G[i] = (float)(0.5 * H.h[i]);
    dsq_hessian_free(&H);
    return st;
}

static dsq_status backup_weights(awq_group *gr)
{
    awq_st *a = gr->a;
    for (int k = 0; k < gr->n; k++) {
        int id = gr->ids[k];
        size_t nb = (size_t)(dsq_seq_lin_out(a->s, id) * dsq_seq_lin_in(a->s, id)) * sizeof(float);
        if (!(a->backup[id] = malloc(nb))) return dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
        memcpy(a->backup[id], a->s->w[id], nb);
    }
    return DSQ_OK;
}

static void restore_weights(awq_group *gr)
{
    awq_st *a = gr->a;
    for (int k = 0; k < gr->n; k++) {
        int id = gr->ids[k];
        if (a->backup[id])
            memcpy(a->s->w[id], a->backup[id],
                   (size_t)(dsq_seq_lin_out(a->s, id) * dsq_seq_lin_in(a->s, id)) * sizeof(float));
        free(a->backup[id]);
        a->backup[id] = NULL;
    }
}

static dsq_status search_group(awq_group *gr, float *best_s, dsq_seq_report *rep)
{
    awq_st *a = gr->a;
    dsq_seq_layer *s = a->s;
    int64_t cols = dsq_seq_lin_in(s, gr->ids[0]);
    const float *wl[DSQ_BLOCK_MAX_LINEARS];
    int64_t rows[DSQ_BLOCK_MAX_LINEARS];
    for (int k = 0; k < gr->n; k++) {
        wl[k] = s->w[gr->ids[k]];
        rows[k] = dsq_seq_lin_out(s, gr->ids[k]);
    }
    double t0 = dsq_now_s();
    float *xm = malloc((size_t)cols * sizeof *xm), *wm = malloc((size_t)cols * sizeof *wm);
    dsq_status st = xm && wm ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
    if (st == DSQ_OK) {
        dsq_awq_x_mean(a->X[gr->g], a->all_tok, cols, xm);
        st = dsq_awq_w_mean(wl, rows, gr->n, cols, s->o->q.group_size, wm);
    }
    if (st == DSQ_OK && !s->d->groups[gr->g].loss_half) st = input_gram(a, gr);
    else if (st == DSQ_OK) st = half_output(a, gr->g, a->yref); /* float reference */
    if (st == DSQ_OK) st = backup_weights(gr);
    dsq_awq_search info;
    if (st == DSQ_OK) st = dsq_awq_search_scale(xm, wm, cols, &s->o->awq, group_loss, gr, best_s, &info);
    restore_weights(gr);
    if (st == DSQ_OK) {
        rep->awq_loss_r0 += info.loss_r0;
        rep->awq_loss_best += info.best_loss;
        DSQ_LOGD("awq layer %d %s group: ratio %.2f, loss %.4g (ratio 0: %.4g), %.2f s", s->l,
                 s->d->groups[gr->g].name, info.best_ratio, info.best_loss, info.loss_r0, dsq_now_s() - t0);
    }
    free(xm);
    free(wm);
    free(gr->G);
    gr->G = NULL;
    return st;
}

/* Folds the scales: the producer of the input divides, the group's columns multiply. */
static void apply_group(awq_group *gr, const float *sc)
{
    awq_st *a = gr->a;
    dsq_seq_layer *s = a->s;
    const dsq_block_group *g = &s->d->groups[gr->g];
    int64_t cols = dsq_seq_lin_in(s, gr->ids[0]);
    if (g->src == DSQ_SRC_NORM) dsq_awq_div_vec(s->norm[g->src_index], sc, cols);
    else
        dsq_awq_div_rows(s->w[g->src_index], dsq_seq_lin_out(s, g->src_index), dsq_seq_lin_in(s, g->src_index),
                         s->bias[g->src_index], sc, cols);
    for (int k = 0; k < gr->n; k++) dsq_awq_scale_cols(s->w[gr->ids[k]], dsq_seq_lin_out(s, gr->ids[k]), cols, sc);
    dsq_awq_div_cols(a->X[gr->g], a->all_tok, cols, sc);
}

/* The groups whose scales are searched: every linear quantizable and, for a
 * group fed by another linear, that linear's rows matching the group's
 * input (AutoAWQ scales v -> o only without GQA). */
static bool group_searchable(const dsq_seq_layer *s, const awq_group *gr)
{
    for (int k = 0; k < gr->n; k++)
        if (!s->ok[gr->ids[k]]) return false;
    const dsq_block_group *g = &s->d->groups[gr->g];
    return g->src != DSQ_SRC_LINEAR || dsq_seq_lin_out(s, g->src_index) == dsq_seq_lin_in(s, gr->ids[0]);
}

static int build_groups(awq_st *a, awq_group *out)
{
    int n = 0;
    for (int g = 0; g < a->s->d->n_groups; g++) {
        awq_group gr;
        memset(&gr, 0, sizeof gr);
        gr.a = a;
        gr.g = g;
        gr.n = dsq_block_group_members(a->s->d, g, gr.ids, DSQ_BLOCK_MAX_LINEARS);
        if (gr.n > 0 && group_searchable(a->s, &gr)) out[n++] = gr;
    }
    return n;
}

static dsq_status awq_alloc(awq_st *a, dsq_seq_layer *s, dsq_seq_runner *r)
{
    memset(a, 0, sizeof *a);
    a->s = s;
    a->r = r;
    a->n_loss = s->o->awq_loss_samples > 0 && s->o->awq_loss_samples < r->n_samples ? s->o->awq_loss_samples
                                                                                    : r->n_samples;
    a->nt = (int64_t)a->n_loss * r->seqlen;
    a->all_tok = (int64_t)r->n_samples * r->seqlen;
    size_t nt = (size_t)a->nt;
    int64_t txw = 0, work = 0;
    for (int g = 0; g < s->d->n_groups; g++) {
        int64_t in = dsq_seq_lin_in(s, dsq_seq_group_first(s, g));
        if (!(a->X[g] = malloc((size_t)a->all_tok * (size_t)in * sizeof(float))))
            return dsq_fail(DSQ_ERR_NOMEM, "awq layer %d: out of memory for the captured inputs of %lld tokens",
                            s->l, (long long)a->all_tok);
        if (s->d->groups[g].tail && in > txw) txw = in;
    }
    for (int h = 0; h < s->d->n_halves; h++) {
        int64_t w = dsq_forward_tail_work(r->ctx, h, a->nt);
        work = w > work ? w : work;
    }
    a->yref = malloc(nt * (size_t)s->m->dim * sizeof(float));
    a->y = malloc(nt * (size_t)s->m->dim * sizeof(float));
    a->tx = malloc(nt * (size_t)txw * sizeof(float));
    a->work = malloc(((size_t)work ? (size_t)work : 1) * sizeof(float));
    if (!a->yref || !a->y || !a->tx || !a->work)
        return dsq_fail(DSQ_ERR_NOMEM, "awq layer %d: out of memory for the loss buffers of %zu tokens", s->l, nt);
    return DSQ_OK;
}

static void awq_free(awq_st *a)
{
    for (int g = 0; g < DSQ_BLOCK_MAX_GROUPS; g++) free(a->X[g]);
    free(a->yref);
    free(a->y);
    free(a->tx);
    free(a->work);
}

static dsq_status clip_linear(awq_st *a, int id)
{
    dsq_seq_layer *s = a->s;
    int64_t rows = dsq_seq_lin_out(s, id), cols = dsq_seq_lin_in(s, id), ng = cols / s->o->q.group_size;
    float *mv = malloc((size_t)(rows * ng) * sizeof *mv);
    if (!mv) return dsq_fail(DSQ_ERR_NOMEM, "awq clip: out of memory");
    dsq_status st =
        dsq_awq_search_clip(s->w[id], rows, cols, a->X[s->d->linears[id].group], a->all_tok, &s->o->awq, mv);
    if (st == DSQ_OK) dsq_awq_apply_clip(s->w[id], rows, cols, s->o->q.group_size, mv);
    free(mv);
    return st;
}

static dsq_status clip_and_quantize(awq_st *a)
{
    dsq_seq_layer *s = a->s;
    for (int id = 0; id < s->d->n_linears; id++) {
        if (!s->ok[id]) continue;
        if (s->o->awq.clip && !s->d->linears[id].scores) DSQ_TRY(clip_linear(a, id));
        DSQ_TRY(dsq_seq_quantize_rtn(s, id, DSQ_INTQ_RULE_AWQ));
    }
    return DSQ_OK;
}

static dsq_status awq_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout, dsq_seq_report *rep)
{
    awq_st a;
    dsq_status st = awq_alloc(&a, s, r);
    dsq_seq_hooks h;
    dsq_seq_hooks_init(&h);
    for (int g = 0; g < s->d->n_groups; g++) h.cap[dsq_seq_group_first(s, g)] = a.X[g];
    /* the float layer's output is the next layer's input, as in AutoAWQ */
    double t0 = dsq_now_s();
    if (st == DSQ_OK) st = dsq_seq_run_pass(r, s->l, DSQ_SEQ_WHOLE_LAYER, hin, hout, r->n_samples, &h);
    DSQ_LOGD("awq layer %d: float pass with captures %.2f s", s->l, dsq_now_s() - t0);
    awq_group g[DSQ_BLOCK_MAX_GROUPS];
    float *sc[DSQ_BLOCK_MAX_GROUPS] = {NULL};
    int ng = st == DSQ_OK ? build_groups(&a, g) : 0;
    for (int k = 0; k < ng && st == DSQ_OK; k++) {
        if (!(sc[k] = malloc((size_t)dsq_seq_lin_in(s, g[k].ids[0]) * sizeof(float))))
            st = dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
        else st = search_group(&g[k], sc[k], rep);
    }
    for (int k = 0; k < ng && st == DSQ_OK; k++) apply_group(&g[k], sc[k]);
    double t1 = dsq_now_s();
    if (st == DSQ_OK) st = clip_and_quantize(&a);
    DSQ_LOGD("awq layer %d: clip search and quantization %.2f s", s->l, dsq_now_s() - t1);
    for (int k = 0; k < ng; k++) free(sc[k]);
    awq_free(&a);
    return st;
}

static dsq_status awq_check(const dsq_seq_opts *o)
{
    if (o->q.group_size <= 0)
        return dsq_fail(DSQ_ERR_ARG, "awq: per-channel (group -1) is not supported; pick a group size");
    return DSQ_OK;
}

const dsq_method dsq_method_awq = {
    "awq", DSQ_STAT_MEAN_ABS | DSQ_STAT_INPUTS | DSQ_STAT_XTX, DSQ_INT_FORMAT_AWQ, 512, awq_check, awq_layer, NULL, NULL};
