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
 * float pass. */
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
    if (first < 0) return false;
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->d->linears[id].group == g && !s->ok[id]) return false;
    if (gd->src == DSQ_SRC_NORM) return true;
    return s->o->w8.smooth_all && dsq_seq_lin_out(s, gd->src_index) == dsq_seq_lin_in(s, first);
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

/* The alpha for group g: fixed, or the search's choice. */
static dsq_status choose_alpha(sq_st *a, int g, const int *ids, int n, const float *wmax, double *alpha,
                               dsq_seq_report *rep)
{
    dsq_seq_layer *s = a->s;
    *alpha = layer_alpha(s);
    if (s->o->w8.alpha != DSQ_SQ_ALPHA_AUTO) return DSQ_OK;
    const float *w[DSQ_BLOCK_MAX_LINEARS];
    int64_t rows[DSQ_BLOCK_MAX_LINEARS];
    for (int k = 0; k < n; k++) w[k] = s->w[ids[k]], rows[k] = dsq_seq_lin_out(s, ids[k]);
    dsq_sq_eval e;
    DSQ_TRY(dsq_sq_eval_init(&e, a->X[g], a->n_cap, dsq_seq_lin_in(s, ids[0]), w, rows, n, &s->o->w8.scheme));
    dsq_sq_search res;
    dsq_status st = dsq_sq_search_alpha(&e, a->amax[g], wmax, *alpha, &res);
    dsq_sq_eval_free(&e);
    if (st != DSQ_OK) return st;
    rep->sq_err_default += res.start_err;
    rep->sq_err_best += res.err;
    *alpha = res.alpha;
    return DSQ_OK;
}

/* s into the producer of group g's input (divided) and its columns (multiplied). */
static void fold(dsq_seq_layer *s, int g, const int *ids, int n, const float *sc)
{
    const dsq_block_group *gd = &s->d->groups[g];
    int64_t cols = dsq_seq_lin_in(s, ids[0]);
    if (gd->src == DSQ_SRC_NORM)
        dsq_awq_div_vec(s->norm[gd->src_index], sc, cols);
    else
        dsq_awq_div_rows(s->w[gd->src_index], dsq_seq_lin_out(s, gd->src_index), dsq_seq_lin_in(s, gd->src_index),
                         s->bias[gd->src_index], sc, cols);
    for (int k = 0; k < n; k++) dsq_awq_scale_cols(s->w[ids[k]], dsq_seq_lin_out(s, ids[k]), cols, sc);
}

static dsq_status smooth_group(sq_st *a, int g, dsq_seq_report *rep, char *log, size_t cap)
{
    dsq_seq_layer *s = a->s;
    int ids[DSQ_BLOCK_MAX_LINEARS];
    int n = dsq_block_group_members(s->d, g, ids, DSQ_BLOCK_MAX_LINEARS);
    int64_t cols = dsq_seq_lin_in(s, ids[0]);
    const float *w[DSQ_BLOCK_MAX_LINEARS];
    int64_t rows[DSQ_BLOCK_MAX_LINEARS];
    for (int k = 0; k < n; k++) w[k] = s->w[ids[k]], rows[k] = dsq_seq_lin_out(s, ids[k]);
    float *wmax = malloc((size_t)cols * sizeof *wmax), *sc = malloc((size_t)cols * sizeof *sc);
    dsq_status st = wmax && sc ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "smoothquant: out of memory");
    double alpha = 0;
    if (st == DSQ_OK) {
        dsq_sq_weight_amax(w, rows, n, cols, wmax);
        st = choose_alpha(a, g, ids, n, wmax, &alpha, rep);
    }
    if (st == DSQ_OK) {
        dsq_sq_scales(a->amax[g], wmax, cols, alpha, sc);
        fold(s, g, ids, n, sc);
        rep->n_smoothed++;
        if (s->o->w8.alpha_out) s->o->w8.alpha_out[(size_t)s->l * DSQ_BLOCK_MAX_GROUPS + (size_t)g] = (float)alpha;
        size_t u = strlen(log);
        snprintf(log + u, cap - u, "%s %s %.2f", u ? "," : "", s->d->groups[g].name, alpha);
    }
    free(wmax);
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
        if (a.amax[g]) st = smooth_group(&a, g, rep, log, sizeof log);
    if (st == DSQ_OK) DSQ_LOGI("smoothquant layer %d: alpha%s", s->l, log[0] ? log : " (no group smoothed)");
    sq_free(&a);
    return st;
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
    "smoothquant", DSQ_STAT_MAX_ABS, DSQ_INT_FORMAT_CT, 512, sq_check, sq_layer, sq_stats, NULL};
