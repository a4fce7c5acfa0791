/* SmoothQuant W8A8 (calibration/smooth.h for the formula and its sources):
 * per layer, the layer (its input from the already quantized layers before
 * it) runs once collecting max |x| per channel of every group's input; each
 * smoothed group gets s from those maxima and its weights' column maxima at
 * alpha (fixed, the family's default, or searched on the captured inputs),
 * s is folded into the producer of the input and the group's columns; then
 * the weights are quantized to per-channel symmetric INT8 by RTN
 * (compressed-tensors' rule, quantizers/w8.h) or by GPTQ at 8 bits (the
 * Hessians then come from the smoothed layer, true-sequential), and the
 * quantized layer runs once more to give the next layer's input and, for
 * static activations, each input's max |x| over every calibration token.
 *
 * Groups smoothed: those fed by a norm (q/k/v, gate/up), and with
 * smooth_all those fed by a linear whose output width is the group's input
 * width: up -> down (SwiGLU multiplies up's output channel by channel), and
 * v -> o only without GQA (with fewer KV heads one v channel feeds several
 * heads' outputs, so o's columns have no one-to-one producer row). Each
 * group's input depends only on its own scales (the others keep their
 * products unchanged), so every group's statistics come from the one
 * float pass. MLA: its value rows -> o with smooth_all (each head has its
 * own values).
 *
 * MoE layers, with memory bounded by one expert: the pass stops before the
 * routed experts. The MLP input group (shared experts, every routed
 * expert's gate/up, the router) takes its weight maxima streaming over the
 * experts and, with alpha auto, its error summed over the shared experts on
 * the captured rows and each expert on the captured rows routed to it; the
 * scales fold into the norm, the shared experts, the router's columns
 * (routing unchanged) and each expert's gate/up as moe.c copies it. Each
 * expert then runs sq_expert on its routed tokens: its own up -> down
 * smoothing (smooth_all), INT8 by RTN or GPTQ, static input scales. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibration/method.h"
#include "calibration/seq_internal.h"
#include "calibration/smooth.h"
#include "core/log.h"
#include "quantizers/awq.h"

typedef struct sq_st {
    dsq_seq_layer *s;
    int64_t n_cap;                     /* tokens captured for alpha auto */
    float *amax[DSQ_BLOCK_MAX_GROUPS]; /* max |x| of each group's input */
    float *X[DSQ_BLOCK_MAX_GROUPS];    /* alpha auto: the first n_cap tokens of each group's input */
} sq_st;

static bool group_smoothed(const dsq_seq_layer *s, int g)
{
    const dsq_block_group *gd = &s->d->groups[g];
    int first = dsq_seq_group_first(s, g);
    if (first < 0 || !dsq_seq_group_quantizable(s, g)) return false;
    if (gd->src != DSQ_SRC_NORM && !s->o->w8.smooth_all) return false;
    return dsq_seq_group_foldable(s, g, dsq_seq_lin_in(s, first));
}

static void sq_free(sq_st *a)
{
    for (int g = 0; g < DSQ_BLOCK_MAX_GROUPS; g++) {
        free(a->amax[g]);
        free(a->X[g]);
    }
}

/* The float pass: statistics (and captures) of every smoothed group's input. */
static dsq_status collect(sq_st *a, dsq_seq_runner *r, const float *hin)
{
    dsq_seq_layer *s = a->s;
    bool autoa = s->o->w8.alpha == DSQ_SQ_ALPHA_AUTO;
    int64_t all = (int64_t)r->n_samples * r->seqlen;
    int64_t want = s->o->w8.search_tokens > 0 ? s->o->w8.search_tokens : 2048;
    a->n_cap = want < all ? want : all;
    dsq_seq_hooks h;
    dsq_seq_hooks_init(&h);
    h.cap_tokens = a->n_cap;
    for (int g = 0; g < s->d->n_groups; g++) {
        if (!group_smoothed(s, g)) continue;
        int first = dsq_seq_group_first(s, g);
        size_t in = (size_t)dsq_seq_lin_in(s, first);
        if (!(a->amax[g] = calloc(in, sizeof(float))) ||
            (autoa && !(a->X[g] = malloc((size_t)a->n_cap * in * sizeof(float)))))
            return dsq_fail(DSQ_ERR_NOMEM, "smoothquant layer %d: out of memory for the %s inputs", s->l,
                            s->d->groups[g].name);
        h.amax[first] = a->amax[g];
        h.cap[first] = a->X[g];
        if (first > h.stop_after) h.stop_after = first;
    }
    /* routed experts never run here (their statistics come from moe.c) */
    if (dsq_arch_layer_is_moe(&s->m->arch, s->l) && h.stop_after < 0) h.stop_after = dsq_block_first_expert(s->d);
    /* the float layer's output is not needed (the quantized one feeds the next
     * layer): the pass stops at the last input it measures, so for the default
     * groups the MLP's products never run */
    return dsq_seq_run_pass(r, s->l, DSQ_SEQ_WHOLE_LAYER, hin, NULL, r->n_samples, &h);
}

static double layer_alpha(const dsq_seq_layer *s)
{
    double a = s->o->w8.alpha;
    return a >= 0.0 && a <= 1.0 ? a : dsq_sq_default_alpha(&s->m->arch);
}

/* A group being smoothed: its members the layer holds (router aside). */
typedef struct sq_group {
    sq_st *a;
    dsq_seq_runner *r;
    int g;
    int ids[DSQ_BLOCK_MAX_LINEARS], n;
    int64_t cols;
    bool experts;
    dsq_seq_moe_eval moe; /* experts: the captured rows, routed */
    float *wmax;
    double *err; /* alpha auto: the summed errors of the candidates */
    double weight;
} sq_group;

/* An expert's part of the weight maxima, or of the search's errors on its rows. */
static dsq_status expert_wmax(void *user, dsq_seq_expert *x)
{
    sq_group *q = user;
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
        if (x->s->d->linears[x->id[k]].group != q->g) continue;
        float *m = malloc((size_t)q->cols * sizeof *m);
        if (!m) return dsq_fail(DSQ_ERR_NOMEM, "smoothquant: out of memory");
        const float *w = x->w[k];
        dsq_sq_weight_amax(&w, &x->out[k], 1, q->cols, m);
        for (int64_t c = 0; c < q->cols; c++) q->wmax[c] = m[c] > q->wmax[c] ? m[c] : q->wmax[c];
        free(m);
    }
    return DSQ_OK;
}

/* weight x the error of linears w on n rows of x at every candidate alpha. */
static dsq_status add_errors(sq_group *q, const float *x, int64_t n, const float *const *w, const int64_t *rows, int nw)
{
    if (n == 0 || nw == 0) return DSQ_OK;
    dsq_seq_layer *s = q->a->s;
    dsq_sq_eval e;
    DSQ_TRY(dsq_sq_eval_init(&e, x, n, q->cols, w, rows, nw, &s->o->w8.scheme));
    /* with experts, each part weighs by its products (n x rows); alone, 1 */
    double wt = q->experts ? 0 : 1;
    for (int k = 0; q->experts && k < nw; k++) wt += (double)n * (double)rows[k];
    dsq_status st = dsq_sq_grid_errors(&e, q->a->amax[q->g], q->wmax, layer_alpha(s), wt, q->err);
    dsq_sq_eval_free(&e);
    q->weight += wt;
    return st;
}

static dsq_status expert_errors(void *user, dsq_seq_expert *x)
{
    sq_group *q = user;
    const float *w[DSQ_INT_EXPERT_LINEARS];
    int64_t rows[DSQ_INT_EXPERT_LINEARS];
    int nw = 0;
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++)
        if (x->s->d->linears[x->id[k]].group == q->g) w[nw] = x->w[k], rows[nw++] = x->out[k];
    return add_errors(q, x->x, x->n_tok, w, rows, nw);
}

/* The alpha for the group: fixed, or the search's choice. */
static dsq_status choose_alpha(sq_group *q, double *alpha, dsq_seq_report *rep)
{
    dsq_seq_layer *s = q->a->s;
    *alpha = layer_alpha(s);
    if (s->o->w8.alpha != DSQ_SQ_ALPHA_AUTO) return DSQ_OK;
    const float *w[DSQ_BLOCK_MAX_LINEARS];
    int64_t rows[DSQ_BLOCK_MAX_LINEARS];
    for (int k = 0; k < q->n; k++) w[k] = s->w[q->ids[k]], rows[k] = dsq_seq_lin_out(s, q->ids[k]);
    double err[DSQ_SQ_GRID_N] = {0};
    q->err = err;
    dsq_status st = add_errors(q, q->a->X[q->g], q->a->n_cap, w, rows, q->n);
    if (st == DSQ_OK && q->experts) st = dsq_seq_moe_each_expert(&q->moe, expert_errors, q);
    q->err = NULL;
    if (st != DSQ_OK) return st;
    dsq_sq_search res;
    dsq_sq_grid_pick(err, *alpha, &res);
    double norm = q->weight > 0 ? q->weight : 1;
    rep->sq_err_default += res.start_err / norm;
    rep->sq_err_best += res.err / norm;
    *alpha = res.alpha;
    return DSQ_OK;
}

/* The weight maxima of every member, the experts streamed. */
static dsq_status group_wmax(sq_group *q)
{
    dsq_seq_layer *s = q->a->s;
    const float *w[DSQ_BLOCK_MAX_LINEARS];
    int64_t rows[DSQ_BLOCK_MAX_LINEARS];
    for (int k = 0; k < q->n; k++) w[k] = s->w[q->ids[k]], rows[k] = dsq_seq_lin_out(s, q->ids[k]);
    dsq_sq_weight_amax(w, rows, q->n, q->cols, q->wmax);
    return q->experts ? dsq_seq_moe_each_expert(&q->moe, expert_wmax, q) : DSQ_OK;
}

static dsq_status smooth_group(sq_st *a, dsq_seq_runner *r, int g, dsq_seq_report *rep, char *log, size_t cap)
{
    dsq_seq_layer *s = a->s;
    sq_group q;
    memset(&q, 0, sizeof q);
    q.a = a, q.r = r, q.g = g, q.cols = dsq_seq_lin_in(s, dsq_seq_group_first(s, g));
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->d->linears[id].group == g && s->ok[id]) q.ids[q.n++] = id;
    q.experts = dsq_seq_group_has_experts(s, g);
    q.wmax = malloc((size_t)q.cols * sizeof *q.wmax);
    float *sc = malloc((size_t)q.cols * sizeof *sc);
    dsq_status st = q.wmax && sc ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "smoothquant: out of memory");
    bool autoa = s->o->w8.alpha == DSQ_SQ_ALPHA_AUTO;
    if (st == DSQ_OK && q.experts) st = dsq_seq_moe_eval_init(&q.moe, s, r, a->X[g], autoa ? a->n_cap : 0);
    double alpha = 0;
    if (st == DSQ_OK) st = group_wmax(&q);
    if (st == DSQ_OK) st = choose_alpha(&q, &alpha, rep);
    if (st == DSQ_OK) {
        dsq_sq_scales(a->amax[g], q.wmax, q.cols, alpha, sc);
        st = dsq_seq_fold_scales(s, g, sc, q.cols);
    }
    if (st == DSQ_OK) {
        rep->n_smoothed++;
        if (s->o->w8.alpha_out) s->o->w8.alpha_out[(size_t)s->l * DSQ_BLOCK_MAX_GROUPS + (size_t)g] = (float)alpha;
        size_t u = strlen(log);
        snprintf(log + u, cap - u, "%s %s %.2f", u ? "," : "", s->d->groups[g].name, alpha);
    }
    dsq_seq_moe_eval_free(&q.moe);
    free(q.wmax);
    free(sc);
    return st;
}

static dsq_status smooth_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, dsq_seq_report *rep)
{
    sq_st a;
    memset(&a, 0, sizeof a);
    a.s = s;
    dsq_status st = collect(&a, r, hin);
    char log[256] = "";
    for (int g = 0; g < s->d->n_groups && st == DSQ_OK; g++)
        if (a.amax[g]) st = smooth_group(&a, r, g, rep, log, sizeof log);
    if (st == DSQ_OK) DSQ_LOGI("smoothquant layer %d: alpha%s", s->l, log[0] ? log : " (no group smoothed)");
    sq_free(&a);
    return st;
}

/* ---- a routed expert (calibration/moe.c) ---- */

/* up -> down smoothing of an expert from its activations on its rows. */
static dsq_status expert_smooth_down(dsq_seq_expert *x, dsq_seq_report *rep)
{
    const dsq_seq_w8_opts *w8 = &x->s->o->w8;
    int64_t F = x->in[2], n = x->n_tok;
    size_t na = (size_t)n * (size_t)F;
    float *act = malloc(na * sizeof *act), *tmp = malloc(na * sizeof *tmp);
    float *xmax = calloc((size_t)F, sizeof *xmax), *wmax = malloc((size_t)F * sizeof *wmax),
          *sc = malloc((size_t)F * sizeof *sc);
    dsq_status st = act && tmp && xmax && wmax && sc ? dsq_seq_expert_act(x, x->x, n, act, tmp)
                                                     : dsq_fail(DSQ_ERR_NOMEM, "smoothquant: out of memory");
    if (st == DSQ_OK && dsq_sq_amax_update(xmax, act, n, F) >= 0) {
        char name[192];
        dsq_seq_expert_name(x, 2, name, sizeof name);
        st = dsq_fail(DSQ_ERR_NUMERIC, "layer %d: the input of %s is not finite", x->s->l, name);
    }
    double alpha = layer_alpha(x->s);
    const float *wd = x->w[2];
    if (st == DSQ_OK) dsq_sq_weight_amax(&wd, &x->out[2], 1, F, wmax);
    if (st == DSQ_OK && w8->alpha == DSQ_SQ_ALPHA_AUTO) {
        int64_t want = w8->search_tokens > 0 ? w8->search_tokens : 2048;
        dsq_sq_eval e;
        st = dsq_sq_eval_init(&e, act, n < want ? n : want, F, &wd, &x->out[2], 1, &w8->scheme);
        dsq_sq_search res;
        if (st == DSQ_OK) st = dsq_sq_search_alpha(&e, xmax, wmax, alpha, &res);
        if (st == DSQ_OK) alpha = res.alpha, rep->sq_err_default += res.start_err, rep->sq_err_best += res.err;
        dsq_sq_eval_free(&e);
    }
    if (st == DSQ_OK) {
        dsq_sq_scales(xmax, wmax, F, alpha, sc);
        dsq_seq_expert_fold_down(x, sc);
        rep->n_smoothed++;
    }
    free(act), free(tmp), free(xmax), free(wmax), free(sc);
    return st;
}

/* A routed expert on its rows (gate/up carry the input group's scales). */
static dsq_status sq_expert(dsq_seq_expert *x, dsq_seq_report *rep)
{
    const dsq_seq_w8_opts *w8 = &x->s->o->w8;
    if (w8->kv_fp8)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "smoothquant: KV-cache scales of MLA's latent cache are not collected yet");
    DSQ_TRY(dsq_seq_w8_expert_check_finite(x));
    if (w8->smooth && w8->smooth_all && x->n_tok > 0 && x->ok[1] && x->ok[2]) DSQ_TRY(expert_smooth_down(x, rep));
    if (w8->smooth_only) return DSQ_OK;
    if (w8->gptq) {
        DSQ_TRY(dsq_seq_gptq_expert(x, rep));
        DSQ_TRY(dsq_seq_w8_expert_from_gptq(x));
    } else {
        DSQ_TRY(dsq_seq_w8_expert_rtn(x));
    }
    return w8->scheme.act == DSQ_W8_ACT_TENSOR ? dsq_seq_w8_expert_act_scales(x) : DSQ_OK;
}

static dsq_status quantize_weights(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout,
                                   dsq_seq_report *rep)
{
    if (s->o->w8.gptq) {
        DSQ_TRY(dsq_seq_gptq_layer(s, r, hin, hout, rep));
        for (int id = 0; id < s->d->n_linears; id++)
            if (s->has_q[id]) DSQ_TRY(dsq_seq_w8_from_gptq(s, id));
        return DSQ_OK;
    }
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->ok[id]) DSQ_TRY(dsq_seq_w8_rtn(s, id));
    return DSQ_OK;
}

static dsq_status sq_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout, dsq_seq_report *rep)
{
    const dsq_seq_w8_opts *w = &s->o->w8;
    for (int g = 0; s->o->w8.alpha_out && g < DSQ_BLOCK_MAX_GROUPS; g++)
        w->alpha_out[(size_t)s->l * DSQ_BLOCK_MAX_GROUPS + (size_t)g] = NAN;
    DSQ_TRY(dsq_sq_check_model(&s->m->arch, s->d));
    DSQ_TRY(dsq_seq_w8_check_finite(s));
    if (w->smooth) DSQ_TRY(smooth_layer(s, r, hin, rep));
    if (!w->smooth_only) DSQ_TRY(quantize_weights(s, r, hin, hout, rep));
    /* GPTQ's passes already left hout; the last pass is for what they do not collect */
    bool pass = r->ctx && (!w->gptq || w->smooth_only || w->scheme.act == DSQ_W8_ACT_TENSOR || w->kv_fp8);
    return pass ? dsq_seq_w8_final_pass(s, r, hin, hout) : DSQ_OK;
}

static unsigned sq_stats(const dsq_seq_opts *o)
{
    unsigned st = 0;
    if (o->w8.smooth || o->w8.scheme.act == DSQ_W8_ACT_TENSOR || o->w8.kv_fp8) st |= DSQ_STAT_MAX_ABS;
    if (o->w8.smooth && o->w8.alpha == DSQ_SQ_ALPHA_AUTO) st |= DSQ_STAT_INPUTS;
    if (o->w8.gptq && !o->w8.smooth_only) st |= DSQ_STAT_XTX;
    return st;
}

static dsq_status sq_check(const dsq_seq_opts *o)
{
    const dsq_seq_w8_opts *w = &o->w8;
    double a = w->alpha;
    if (!(a >= 0.0 && a <= 1.0) && a != DSQ_SQ_ALPHA_AUTO && a != DSQ_SQ_ALPHA_FAMILY)
        return dsq_fail(DSQ_ERR_ARG, "smoothquant: alpha %g is outside [0, 1]", a);
    if (w->scheme.kind != DSQ_W8_INT8 || w->scheme.wgran != DSQ_W8_W_CHANNEL ||
        (w->scheme.act != DSQ_W8_ACT_TOKEN && w->scheme.act != DSQ_W8_ACT_TENSOR))
        return dsq_fail(DSQ_ERR_ARG, "smoothquant: the scheme must be INT8 per-channel weights with per-token or "
                                     "per-tensor activations (dsq_w8_scheme_w8a8)");
    if (o->q.bits != 8 || o->q.group_size != -1 || !o->q.sym)
        return dsq_fail(DSQ_ERR_ARG,
                        "smoothquant: weights are 8-bit, per channel (group -1), symmetric; got %d "
                        "bits, group %d, %s",
                        o->q.bits, o->q.group_size, o->q.sym ? "sym" : "asym");
    if (w->smooth_only && !w->smooth) return dsq_fail(DSQ_ERR_ARG, "smoothquant: smooth_only without smoothing");
    return DSQ_OK;
}

const dsq_method dsq_method_smoothquant = {
    "smoothquant", DSQ_STAT_MAX_ABS, DSQ_INT_FORMAT_CT,    512,  sq_check, sq_layer,
    sq_stats,      sq_expert,        DSQ_INTQ_GRID_MINMAX, false};
