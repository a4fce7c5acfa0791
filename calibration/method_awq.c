/* AWQ (AutoAWQ's order, calibration/sequential.h): the float layer runs
 * once capturing the input of every scale group of the block description;
 * each group's scales are searched on the unmodified layer, then all are
 * folded in (into the norm or linear that produces the group's input), then
 * the clip search, then quantization. The search's loss is the output of the
 * group's whole half without its residual (AutoAWQ's module2inspect) or,
 * for a single-linear group, the quadratic form of that linear's error in
 * its input Gram matrix (the same MSE, computed exactly).
 *
 * MoE layers, with memory bounded by one expert: the capture pass stops at
 * the routed experts (moe.c rebuilds the layer's output from the quantized
 * weights). The MLP input group (the norm before the shared experts, every
 * routed expert's gate/up and the router) is searched on the MoE output,
 * computed expert by expert for each candidate (moe.c's dsq_seq_moe_eval:
 * rows routed once by the float router, each expert's gate/up fake-
 * quantized under the candidate scales); its w_mean streams over the
 * experts. The scales fold into the norm, the shared experts and the
 * router's columns (routing unchanged) and, when moe.c copies them, each
 * expert's gate/up. Each expert then runs awq_expert on the tokens routed to
 * it: its own up -> down scales (quadratic-form loss), clip, quantize.
 *
 * Into GGUF blocks (`dsquant gguf --method awq`, s->o->gguf set): every
 * fake quantization of the searches is the planned block type's own
 * quantizer on w diag(s), with the importance of the scaled columns (the
 * imatrix entry when given, else mean x^2 of the captured input, divided by
 * s^2); no clip search (the block quantizers choose their own ranges; as in
 * llm-compressor's AWQ); then every linear of the layer is written in its
 * planned type with that importance, and gguf_calib.c writes the folded norms. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calibration/method.h"
#include "calibration/seq_internal.h"
#include "core/bigbuf.h"
#include "core/clock.h"
#include "core/log.h"
#include "kernels/cpu.h"
#include "kernels/vec.h"

typedef struct awq_st {
    dsq_seq_layer *s;
    dsq_seq_runner *r;
    const dsq_seq_hooks *h;              /* the running capture pass's hooks (its row0) */
    int n_loss;                          /* samples in the loss */
    int64_t nt;                          /* tokens in the loss */
    int part_win, n_parts;               /* the loss in parts of part_win samples */
    int64_t parts_run;                   /* loss parts computed (the log's screening figure) */
    int64_t all_tok;                     /* tokens captured */
    int first[DSQ_BLOCK_MAX_GROUPS];     /* each group's first linear in this layer, or -1 */
    bool searched[DSQ_BLOCK_MAX_GROUPS]; /* the group's scales are searched */
    /* What one half's capture pass keeps: its inputs stream into statistics,
     * so only a half's loss inputs are held for every token, not every group's. */
    float *X[DSQ_BLOCK_MAX_GROUPS];       /* the half's first group: its input on the loss tokens (in xin);
                                             a direct-loss group: its input on all tokens */
    bool direct[DSQ_BLOCK_MAX_GROUPS];    /* single-linear loss from the tokens (fewer than the columns) */
    double *xabs[DSQ_BLOCK_MAX_GROUPS];   /* sum over tokens of |x| per column (x_mean) */
    dsq_hessian H[DSQ_BLOCK_MAX_GROUPS];  /* single-linear loss: x^T x (h NULL: none) */
    double *sqs[DSQ_BLOCK_MAX_GROUPS];    /* GGUF blocks: sum over tokens of x^2 per column */
    float *xs[DSQ_BLOCK_MAX_GROUPS];      /* the clip search's sampled rows (scaled with the group) */
    int64_t clip_step, n_clip;            /* their stride over all tokens, their count */
    int tail;                             /* the linear whose float output the pass keeps in yref, or -1 */
    float *xin;                           /* [nt x widest half input] */
    float *backup[DSQ_BLOCK_MAX_LINEARS]; /* unmodified weights during a search */
    float *yref, *y, *tx, *work;          /* loss buffers: yref all nt tokens, the rest a part's */
    dsq_seq_moe_eval moe;                 /* MoE layers: the MLP on the loss rows */
    /* GGUF blocks: mean x^2 of each group's input before any scaling, the
     * scales each group took, a column buffer */
    float *xsq[DSQ_BLOCK_MAX_GROUPS];
    const float *gsc[DSQ_BLOCK_MAX_GROUPS];
    float *imp;
} awq_st;

typedef struct awq_group {
    awq_st *a;
    int g;
    int ids[DSQ_BLOCK_MAX_LINEARS], n; /* the members the layer holds, router aside */
    int64_t cols;
    bool experts;     /* routed experts are members too */
    const float *cur; /* the candidate scales a loss is computed for (NULL: float) */
    float *G;         /* single-linear loss: x^T x / n of the input over all tokens */
    uint16_t *Gp;     /* G packed for BF16 products (NULL: F32 products) */
} awq_group;

#define LOSS_PART_TOKENS 512 /* tokens per loss part: the products' best shape here, small buffers */
#define SSE_BLOCKS 64        /* fixed, so the sum's order does not depend on the threads */

/* sum (a - b)^2 in double, the same bits for any thread count. */
static double sse(const float *a, const float *b, size_t n)
{
    double part[SSE_BLOCKS];
    const size_t bs = (n + SSE_BLOCKS - 1) / SSE_BLOCKS;
#pragma omp parallel for schedule(static) num_threads(dsq_cpu_threads())
    for (int i = 0; i < SSE_BLOCKS; i++) {
        size_t lo = (size_t)i * bs, hi = lo + bs < n ? lo + bs : n;
        part[i] = lo < hi ? dsq_vec_sq_diff((int64_t)(hi - lo), a + lo, b + lo) : 0.0;
    }
    double t = 0;
    for (int i = 0; i < SSE_BLOCKS; i++) t += part[i];
    return t;
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

/* GGUF blocks: an expert member's fake quantization under the candidate
 * scales by its planned block type, with the importance of its unscaled
 * columns (the expert's part of the imatrix entry, else mean x^2 of the
 * group's captured input). */
static dsq_status gguf_fake_expert(awq_group *gr, dsq_seq_expert *x, int k)
{
    dsq_type type;
    const float *imp;
    DSQ_TRY(dsq_seq_gguf_expert_target(x, k, &type, &imp));
    if (!dsq_seq_gguf_is_blocks(type)) return DSQ_OK;
    if (!imp) imp = gr->a->xsq[gr->g];
    return dsq_awq_fake_quant_blocks(x->w[k], x->out[k], x->in[k], gr->cur, type, imp, x->w[k]);
}

/* A routed expert in an MoE loss run: its members of the group fake-quantized
 * under the candidate scales. */
static dsq_status edit_expert(void *user, dsq_seq_expert *x)
{
    awq_group *gr = user;
    for (int k = 0; gr->cur && k < DSQ_INT_EXPERT_LINEARS; k++) {
        if (x->s->d->linears[x->id[k]].group != gr->g) continue;
        if (x->s->o->gguf)
            DSQ_TRY(gguf_fake_expert(gr, x, k));
        else
            DSQ_TRY(dsq_awq_fake_quant(x->w[k], x->out[k], x->in[k], gr->cur, &x->s->o->awq.q, x->w[k]));
    }
    return DSQ_OK;
}

/* MoE: the output of the MLP (the experts under gr->cur) on the loss samples. */
static dsq_status moe_output(awq_st *a, awq_group *gr, float *y)
{
    return dsq_seq_moe_eval_run(&a->moe, edit_expert, gr, y);
}

/* Samples in loss part p, and their tokens. */
static int part_samples(const awq_st *a, int p)
{
    int w0 = p * a->part_win;
    return a->n_loss - w0 < a->part_win ? a->n_loss - w0 : a->part_win;
}

static int64_t part_tokens(const awq_st *a, int p) { return (int64_t)part_samples(a, p) * a->r->seqlen; }

/* The output of group gr's half without its residual on loss part p, with
 * the layer's current weights, into y [part tokens x dim]; its first token. */
static dsq_status half_part(awq_st *a, awq_group *gr, int p, float *y, int64_t *t0)
{
    dsq_seq_layer *s = a->s;
    int half = s->d->groups[gr->g].half;
    int g0 = half_first_group(s->d, half), tail = dsq_block_group_first(s->d, half_tail_group(s->d, half));
    int nw = part_samples(a, p);
    dsq_ctx *c = a->r->ctx;
    *t0 = (int64_t)p * a->part_win * a->r->seqlen;
    const float *x = a->X[g0] + *t0 * dsq_seq_lin_in(s, dsq_seq_group_first(s, g0));
    DSQ_TRY(dsq_forward_tail_input(c, s->l, half, x, a->tx, a->work, nw, a->r->seqlen));
    return dsq_ctx_matmul(c, &s->m->layers[s->l].lin[tail], a->tx, y, nw * a->r->seqlen);
}

/* The half's float output on every loss token into yref: the MoE MLP's,
 * computed here; a dense half's, kept by the capture pass (its tail linear
 * on the input it was given: the same numbers as running the half again). */
static dsq_status half_reference(awq_st *a, awq_group *gr) { return gr->experts ? moe_output(a, gr, a->yref) : DSQ_OK; }

/* Loss parts [p0, p1) of the half's output against yref, each its share of
 * the mean, added to *acc; stops once *acc > bound. */
static dsq_status half_loss(awq_st *a, awq_group *gr, int p0, int p1, double bound, double *acc)
{
    const int64_t dim = a->s->m->dim;
    const double n = (double)(a->nt * dim);
    dsq_status st = dsq_seq_pack_linears(a->r, a->s->l, a->s->d->groups[gr->g].half, NULL);
    int64_t t0;
    for (int p = p0; p < p1 && st == DSQ_OK && !(*acc > bound); p++) {
        st = half_part(a, gr, p, a->y, &t0);
        if (st == DSQ_OK) *acc += sse(a->y, a->yref + t0 * dim, (size_t)(part_tokens(a, p) * dim)) / n;
        a->parts_run++;
    }
    /* the members change with the next candidate; the rest stay packed
     * until the search ends */
    for (int k = 0; k < gr->n; k++) dsq_linear_bf16_unpack(&a->s->m->layers[a->s->l].lin[gr->ids[k]]);
    return st;
}

/* GGUF blocks: linear id's planned type and the importance of its columns
 * before scaling (its imatrix entry, else mean x^2 of its captured input). */
static dsq_status gguf_importance(awq_st *a, int id, dsq_type *type, const float **imp)
{
    DSQ_TRY(dsq_seq_gguf_target(a->s, id, type, imp));
    int g = a->s->d->linears[id].group;
    if (!*imp && g >= 0) *imp = a->xsq[g];
    return DSQ_OK;
}

/* The fake quantization of one member under scales sc, by its block type
 * (a member the plan keeps in float is its float self). */
static dsq_status gguf_fake(awq_st *a, int id, const float *sc)
{
    dsq_seq_layer *s = a->s;
    dsq_type type;
    const float *imp;
    DSQ_TRY(gguf_importance(a, id, &type, &imp));
    const int64_t rows = dsq_seq_lin_out(s, id), cols = dsq_seq_lin_in(s, id);
    if (!dsq_seq_gguf_is_blocks(type)) {
        memcpy(s->w[id], a->backup[id], (size_t)(rows * cols) * sizeof(float));
        return DSQ_OK;
    }
    return dsq_awq_fake_quant_blocks(a->backup[id], rows, cols, sc, type, imp, s->w[id]);
}

static dsq_status group_loss(void *user, const float *sc, int p0, int p1, double bound, double *acc)
{
    awq_group *gr = user;
    awq_st *a = gr->a;
    dsq_seq_layer *s = a->s;
    gr->cur = sc;
    for (int k = 0; k < gr->n; k++) {
        int id = gr->ids[k];
        if (s->o->gguf)
            DSQ_TRY(gguf_fake(a, id, sc));
        else
            DSQ_TRY(dsq_awq_fake_quant(a->backup[id], dsq_seq_lin_out(s, id), dsq_seq_lin_in(s, id), sc, &s->o->awq.q,
                                       s->w[id]));
    }
    double l = 0.0;
    const int id = gr->ids[0];
    if (a->direct[gr->g])
        DSQ_TRY(dsq_awq_direct_loss(a->backup[id], s->w[id], dsq_seq_lin_out(s, id), gr->cols, a->X[gr->g], a->all_tok,
                                    &l));
    else if (gr->G)
        DSQ_TRY(dsq_awq_quad_loss(a->backup[id], s->w[id], dsq_seq_lin_out(s, id), dsq_seq_lin_in(s, id), gr->G, gr->Gp,
                                  &l));
    else if (gr->experts) {
        DSQ_TRY(moe_output(a, gr, a->y));
        l = sse(a->y, a->yref, (size_t)(a->nt * s->m->dim)) / (double)(a->nt * s->m->dim);
    } else
        return half_loss(a, gr, p0, p1, bound, acc);
    *acc += l;
    return DSQ_OK;
}

/* *G = x^T x / n from H, the sums of x^T x (freed here); bf16: also *Gp, G
 * packed for BF16 products (else NULL). */
static dsq_status gram_finish(dsq_hessian *Hp, int64_t cols, bool bf16, float **G, uint16_t **Gp)
{
    dsq_hessian H = *Hp;
    memset(Hp, 0, sizeof *Hp);
    dsq_status st = dsq_hessian_finalize(&H); /* 2/n x^T x */
    if (st == DSQ_OK && !(*G = malloc((size_t)(cols * cols) * sizeof **G)))
        st = dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory for a %lld x %lld input Gram matrix", (long long)cols,
                      (long long)cols);
    for (int64_t i = 0; st == DSQ_OK && i < cols * cols; i++) (*G)[i] = (float)(0.5 * H.h[i]);
    dsq_hessian_free(&H);
    *Gp = NULL;
    if (st == DSQ_OK && bf16 && !(*Gp = dsq_awq_pack_gram(*G, cols)))
        st = dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory for a %lld x %lld input Gram matrix", (long long)cols,
                      (long long)cols);
    return st;
}

/* The same from n rows of x [n x cols]. */
static dsq_status gram(const float *x, int64_t n, int64_t cols, bool bf16, float **G, uint16_t **Gp)
{
    dsq_hessian H;
    DSQ_TRY(dsq_hessian_init(&H, cols));
    H.bf16 = bf16;
    dsq_status st = dsq_hessian_add(&H, x, n);
    if (st != DSQ_OK) {
        dsq_hessian_free(&H);
        return st;
    }
    return gram_finish(&H, cols, bf16, G, Gp);
}

/* w_mean's part from one routed expert's members of the group. */
typedef struct wmean_acc {
    awq_group *gr;
    double *acc;
    int64_t total;
} wmean_acc;

static dsq_status expert_w_mean(void *user, dsq_seq_expert *x)
{
    wmean_acc *w = user;
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++)
        if (x->s->d->linears[x->id[k]].group == w->gr->g)
            DSQ_TRY(dsq_awq_w_mean_add(w->acc, &w->total, x->w[k], x->out[k], x->in[k], x->s->o->q.group_size));
    return DSQ_OK;
}

/* w_mean over the group's members: the layer's own, then each routed expert. */
static dsq_status group_w_mean(awq_group *gr, float *wm)
{
    awq_st *a = gr->a;
    dsq_seq_layer *s = a->s;
    wmean_acc w = {gr, calloc((size_t)gr->cols, sizeof(double)), 0};
    if (!w.acc) return dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
    dsq_status st = DSQ_OK;
    for (int k = 0; k < gr->n && st == DSQ_OK; k++)
        st = dsq_awq_w_mean_add(w.acc, &w.total, s->w[gr->ids[k]], dsq_seq_lin_out(s, gr->ids[k]), gr->cols,
                                s->o->q.group_size);
    if (st == DSQ_OK && gr->experts) st = dsq_seq_moe_each_expert(&a->moe, expert_w_mean, &w);
    if (st == DSQ_OK) dsq_awq_w_mean_finish(w.acc, w.total, gr->cols, wm);
    free(w.acc);
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
    int64_t cols = gr->cols;
    double t0 = dsq_now_s();
    float *xm = malloc((size_t)cols * sizeof *xm), *wm = malloc((size_t)cols * sizeof *wm);
    dsq_status st = xm && wm ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
    if (st == DSQ_OK && gr->experts && !a->moe.b) st = dsq_seq_moe_eval_init(&a->moe, s, a->r, a->X[gr->g], a->nt);
    if (st == DSQ_OK) {
        dsq_awq_x_mean_finish(a->xabs[gr->g], a->all_tok, cols, xm);
        st = group_w_mean(gr, wm);
    }
    gr->cur = NULL;
    if (st == DSQ_OK && a->H[gr->g].h)
        st = gram_finish(&a->H[gr->g], cols, s->o->bf16, &gr->G, &gr->Gp);
    else if (st == DSQ_OK)
        st = half_reference(a, gr);
    if (st == DSQ_OK) st = backup_weights(gr);
    dsq_awq_search info;
    /* only a half's loss on the tokens comes in parts */
    const int n_parts = s->d->groups[gr->g].loss_half && !gr->experts ? a->n_parts : 1;
    a->parts_run = 0;
    if (st == DSQ_OK) st = dsq_awq_search_scale(xm, wm, cols, &s->o->awq, n_parts, group_loss, gr, best_s, &info);
    dsq_seq_unpack_linears(a->r, s->l);
    restore_weights(gr);
    if (st == DSQ_OK) {
        if (isfinite(info.loss_r0)) /* ratio 0 ran whole (not screened out) */
            rep->awq_loss_r0 += info.loss_r0, rep->awq_loss_best += info.best_loss;
        DSQ_LOGD("awq layer %d %s group: ratio %.2f, loss %.4g (ratio 0: %.4g), %lld of %d loss parts, %.2f s", s->l,
                 s->d->groups[gr->g].name, info.best_ratio, info.best_loss, info.loss_r0,
                 (long long)(n_parts > 1 ? a->parts_run : 0),
                 n_parts > 1 ? n_parts * (s->o->awq.n_grid > 0 ? s->o->awq.n_grid : 20) : 0, dsq_now_s() - t0);
    }
    free(xm);
    free(wm);
    free(gr->G);
    free(gr->Gp);
    gr->G = NULL;
    gr->Gp = NULL;
    return st;
}

/* Folds the scales (fold.c); the clip search's rows follow. */
static dsq_status apply_group(awq_group *gr, const float *sc)
{
    awq_st *a = gr->a;
    DSQ_TRY(dsq_seq_fold_scales(a->s, gr->g, sc, gr->cols));
    if (a->xs[gr->g]) dsq_awq_div_cols(a->xs[gr->g], a->n_clip, gr->cols, sc);
    a->gsc[gr->g] = sc;
    return DSQ_OK;
}

/* The groups whose scales are searched: captured, every member but the
 * router quantizable, the input's producer able to take the scales (v -> o
 * only without GQA, as AutoAWQ; MLA's value rows always). */
static int build_groups(awq_st *a, awq_group *out)
{
    int n = 0;
    for (int g = 0; g < a->s->d->n_groups; g++) {
        awq_group gr;
        memset(&gr, 0, sizeof gr);
        gr.a = a;
        gr.g = g;
        const dsq_seq_layer *s = a->s;
        int first = a->first[g];
        if (first < 0) continue;
        gr.cols = dsq_seq_lin_in(s, first);
        if (!dsq_seq_group_quantizable(s, g) || !dsq_seq_group_foldable(s, g, gr.cols)) continue;
        for (int id = 0; id < s->d->n_linears; id++)
            if (s->d->linears[id].group == g && s->ok[id]) gr.ids[gr.n++] = id;
        gr.experts = dsq_seq_group_has_experts(s, g);
        a->searched[g] = true;
        out[n++] = gr;
    }
    return n;
}

static dsq_status awq_alloc(awq_st *a, dsq_seq_layer *s, dsq_seq_runner *r)
{
    memset(a, 0, sizeof *a);
    a->s = s;
    a->r = r;
    a->tail = -1;
    a->n_loss =
        s->o->awq_loss_samples > 0 && s->o->awq_loss_samples < r->n_samples ? s->o->awq_loss_samples : r->n_samples;
    a->nt = (int64_t)a->n_loss * r->seqlen;
    a->all_tok = (int64_t)r->n_samples * r->seqlen;
    a->clip_step = dsq_awq_clip_step(a->all_tok, &s->o->awq);
    a->n_clip = (a->all_tok + a->clip_step - 1) / a->clip_step;
    const int part_tok = s->o->awq_part_tokens > 0 ? s->o->awq_part_tokens : LOSS_PART_TOKENS;
    a->part_win = r->seqlen >= part_tok ? 1 : part_tok / r->seqlen;
    if (a->part_win > a->n_loss) a->part_win = a->n_loss;
    a->n_parts = (a->n_loss + a->part_win - 1) / a->part_win;
    size_t nt = (size_t)a->nt, pt = (size_t)a->part_win * (size_t)r->seqlen;
    /* MoE layers: the MLP's loss is one part of every loss token */
    size_t yt = dsq_arch_layer_is_moe(&s->m->arch, s->l) ? nt : pt;
    int64_t txw = 0, work = 0, xin = 0;
    for (int g = 0; g < s->d->n_groups; g++) {
        /* -1: a group this layer lacks, or of routed experts only */
        int first = a->first[g] = dsq_seq_group_first(s, g);
        if (first < 0) continue;
        int64_t in = dsq_seq_lin_in(s, first);
        if (s->d->groups[g].tail && in > txw) txw = in;
        if (g == half_first_group(s->d, s->d->groups[g].half) && in > xin) xin = in;
    }
    for (int h = 0; h < s->d->n_halves; h++) {
        int64_t w = dsq_forward_tail_work(r->ctx, h, (int64_t)pt);
        work = w > work ? w : work;
    }
    if (s->o->gguf) {
        int64_t widest = 0;
        for (int id = 0; id < s->d->n_linears; id++)
            if (s->present[id] && dsq_seq_lin_in(s, id) > widest) widest = dsq_seq_lin_in(s, id);
        if (!(a->imp = malloc((size_t)(widest ? widest : 1) * sizeof(float))))
            return dsq_fail(DSQ_ERR_NOMEM, "awq layer %d: out of memory", s->l);
    }
    a->xin = dsq_bigbuf_alloc(nt * (size_t)(xin ? xin : 1) * sizeof(float));
    a->yref = dsq_bigbuf_alloc(nt * (size_t)s->m->dim * sizeof(float));
    a->y = malloc(yt * (size_t)s->m->dim * sizeof(float));
    a->tx = malloc(pt * (size_t)txw * sizeof(float));
    a->work = malloc(((size_t)work ? (size_t)work : 1) * sizeof(float));
    if (!a->xin || !a->yref || !a->y || !a->tx || !a->work)
        return dsq_fail(DSQ_ERR_NOMEM, "awq layer %d: out of memory for the loss buffers of %zu tokens", s->l, nt);
    return DSQ_OK;
}

/* What a half's pass kept for its searches (the clip rows and GGUF
 * statistics stay for the layer's end). */
static void free_half(awq_st *a)
{
    for (int g = 0; g < DSQ_BLOCK_MAX_GROUPS; g++) {
        if (a->direct[g]) free(a->X[g]);
        a->X[g] = NULL;
        a->direct[g] = false;
        free(a->xabs[g]);
        a->xabs[g] = NULL;
        dsq_hessian_free(&a->H[g]);
    }
    dsq_seq_moe_eval_free(&a->moe);
    a->tail = -1;
}

static void awq_free(awq_st *a)
{
    free_half(a);
    for (int g = 0; g < DSQ_BLOCK_MAX_GROUPS; g++) free(a->xsq[g]), free(a->sqs[g]), free(a->xs[g]);
    free(a->imp);
    free(a->xin);
    free(a->yref);
    free(a->y);
    free(a->tx);
    free(a->work);
}

/* The capture pass's own hook, after the runner's: each group's statistics
 * from its first linear's input, streamed, and on the loss tokens the tail's
 * float output. */
static dsq_status stream_hook(void *user, int layer, int which, int expert, const float *x, int n_tok, int64_t in)
{
    (void)layer, (void)expert; /* the runner passes no routed expert on */
    awq_st *a = user;
    const int64_t row0 = a->h->row0;
    if (which == a->tail && row0 < a->nt) {
        int rows = a->nt - row0 < n_tok ? (int)(a->nt - row0) : n_tok;
        DSQ_TRY(
            dsq_ctx_matmul(a->r->ctx, &a->s->m->layers[a->s->l].lin[which], x, a->yref + row0 * a->s->m->dim, rows));
    }
    const int g = a->s->d->linears[which].group;
    if (g < 0 || a->first[g] != which) return DSQ_OK;
    if (a->xabs[g]) dsq_awq_x_mean_add(a->xabs[g], x, n_tok, in);
    if (a->direct[g]) memcpy(a->X[g] + row0 * in, x, (size_t)n_tok * (size_t)in * sizeof *x);
    const int64_t step = a->clip_step;
    for (int64_t t = (row0 + step - 1) / step * step; a->xs[g] && t < row0 + n_tok; t += step)
        memcpy(a->xs[g] + t / step * in, x + (t - row0) * in, (size_t)in * sizeof *x);
    return DSQ_OK;
}

/* Whether the clip search will look at group g's input. */
static bool group_clipped(const awq_st *a, int g)
{
    const dsq_seq_layer *s = a->s;
    if (s->o->gguf || !s->o->awq.clip) return false;
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->d->linears[id].group == g && s->ok[id] && !s->d->linears[id].scores) return true;
    return false;
}

/* Sets up what half's capture pass keeps, in h and a. */
static dsq_status half_setup(awq_st *a, int half, dsq_seq_hooks *h)
{
    dsq_seq_layer *s = a->s;
    const int l = s->l;
    bool loss = false, experts = false;
    for (int g = 0; g < s->d->n_groups; g++) {
        const int first = a->first[g];
        if (s->d->groups[g].half != half || first < 0) continue;
        const int64_t cols = dsq_seq_lin_in(s, first);
        if (a->searched[g] && !(a->xabs[g] = calloc((size_t)cols, sizeof(double))))
            return dsq_fail(DSQ_ERR_NOMEM, "awq layer %d: out of memory", l);
        if (a->searched[g] && s->d->groups[g].loss_half) {
            loss = true;
            experts |= dsq_seq_group_has_experts(s, g);
        } else if (a->searched[g] && a->all_tok < cols) {
            a->direct[g] = true;
            if (!(a->X[g] = dsq_bigbuf_alloc((size_t)a->all_tok * (size_t)cols * sizeof(float))))
                return dsq_fail(DSQ_ERR_NOMEM, "awq layer %d: out of memory for the %s group's input", l,
                                s->d->groups[g].name);
        } else if (a->searched[g]) {
            DSQ_TRY(dsq_hessian_init(&a->H[g], cols));
            a->H[g].bf16 = s->o->bf16;
            h->H[first] = &a->H[g];
        }
        if (s->o->gguf) {
            if (!(a->sqs[g] = calloc((size_t)cols, sizeof(double))))
                return dsq_fail(DSQ_ERR_NOMEM, "awq layer %d: out of memory", l);
            h->sumsq[first] = a->sqs[g];
        }
        if (group_clipped(a, g) && !(a->xs[g] = malloc((size_t)(a->n_clip * cols) * sizeof(float))))
            return dsq_fail(DSQ_ERR_NOMEM, "awq layer %d: out of memory for the clip search's rows", l);
    }
    if (!loss) return DSQ_OK;
    const int g0 = half_first_group(s->d, half);
    if (a->first[g0] < 0) /* the loss runs the half from its first group's input */
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "awq layer %d: half %d lacks its %s group's linears", l, half,
                        s->d->groups[g0].name);
    a->X[g0] = h->cap[a->first[g0]] = a->xin;
    h->cap_tokens = a->nt;
    if (experts) return DSQ_OK; /* the MoE output is the reference (moe.c) */
    const int tg = half_tail_group(s->d, half);
    if (tg < 0 || a->first[tg] < 0) /* every block's halves end in a linear; a new one must too */
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "awq layer %d: half %d has no tail linear for its loss", l, half);
    a->tail = a->first[tg];
    return DSQ_OK;
}

/* GGUF blocks: mean x^2 per column of each group's input, before the scales
 * divide it (the imatrix statistic of this calibration set). */
static dsq_status gguf_xsq(awq_st *a, int half)
{
    dsq_seq_layer *s = a->s;
    for (int g = 0; g < s->d->n_groups; g++) {
        if (s->d->groups[g].half != half || !a->sqs[g]) continue;
        const int64_t cols = dsq_seq_lin_in(s, a->first[g]), n = a->all_tok;
        if (!(a->xsq[g] = malloc((size_t)cols * sizeof(float))))
            return dsq_fail(DSQ_ERR_NOMEM, "awq layer %d: out of memory", s->l);
        for (int64_t c = 0; c < cols; c++) a->xsq[g][c] = (float)(a->sqs[g][c] / (double)(n ? n : 1));
    }
    return DSQ_OK;
}

/* Half `half` of the float layer over every sample (from hin for the first,
 * in place in hout after), its statistics streamed, then the searches of
 * its groups on the unmodified layer. */
static dsq_status awq_half(awq_st *a, int half, awq_group *g, int ng, float **sc, const float *hin, float *hout,
                           dsq_seq_report *rep)
{
    dsq_seq_layer *s = a->s;
    dsq_seq_hooks h;
    dsq_seq_hooks_init(&h);
    h.extra = stream_hook;
    h.extra_user = a;
    a->h = &h;
    /* the float layer's output is the next layer's input, as in AutoAWQ; on
     * MoE layers the pass ends at the routed experts and moe.c rebuilds it */
    if (half > 0 && dsq_arch_layer_is_moe(&s->m->arch, s->l)) h.stop_after = dsq_block_first_expert(s->d);
    double t0 = dsq_now_s();
    dsq_status st = half_setup(a, half, &h);
    if (st == DSQ_OK) st = dsq_seq_run_pass(a->r, s->l, half, half == 0 ? hin : hout, hout, a->r->n_samples, &h);
    DSQ_LOGD("awq layer %d: float pass of half %d with statistics %.2f s", s->l, half, dsq_now_s() - t0);
    if (st == DSQ_OK && s->o->gguf) st = gguf_xsq(a, half);
    for (int k = 0; k < ng && st == DSQ_OK; k++) {
        if (s->d->groups[g[k].g].half != half) continue;
        if (!(sc[k] = malloc((size_t)g[k].cols * sizeof(float))))
            st = dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
        else
            st = search_group(&g[k], sc[k], rep);
    }
    free_half(a);
    a->h = NULL;
    return st;
}

static dsq_status clip_linear(awq_st *a, int id)
{
    dsq_seq_layer *s = a->s;
    int64_t rows = dsq_seq_lin_out(s, id), cols = dsq_seq_lin_in(s, id), ng = cols / s->o->q.group_size;
    const float *xs = a->xs[s->d->linears[id].group];
    if (!xs) return dsq_fail(DSQ_ERR_UNSUPPORTED, "awq layer %d: no clip rows for %s", s->l, s->d->linears[id].hf);
    float *mv = malloc((size_t)(rows * ng) * sizeof *mv);
    if (!mv) return dsq_fail(DSQ_ERR_NOMEM, "awq clip: out of memory");
    dsq_status st = dsq_awq_search_clip_sampled(s->w[id], rows, cols, xs, a->n_clip, &s->o->awq, mv);
    if (st == DSQ_OK) dsq_awq_apply_clip(s->w[id], rows, cols, s->o->q.group_size, mv);
    free(mv);
    return st;
}

/* GGUF blocks: every linear of the layer in its planned type, with the
 * importance of its (scaled) columns. */
static dsq_status gguf_write_layer(awq_st *a)
{
    dsq_seq_layer *s = a->s;
    for (int id = 0; id < s->d->n_linears; id++) {
        /* the router too: MoE layers fold the MLP input scales into its columns */
        if (!s->present[id]) continue;
        dsq_type type;
        const float *imp;
        DSQ_TRY(gguf_importance(a, id, &type, &imp));
        int g = s->d->linears[id].group;
        imp = dsq_awq_scaled_importance(imp, g >= 0 ? a->gsc[g] : NULL, dsq_seq_lin_in(s, id), a->imp);
        DSQ_TRY(dsq_seq_gguf_put(s, id, type, imp));
    }
    return DSQ_OK;
}

static dsq_status clip_and_quantize(awq_st *a)
{
    dsq_seq_layer *s = a->s;
    if (s->o->gguf) return gguf_write_layer(a);
    for (int id = 0; id < s->d->n_linears; id++) {
        if (!s->ok[id]) continue;
        if (s->o->awq.clip && !s->d->linears[id].scores) DSQ_TRY(clip_linear(a, id));
        DSQ_TRY(dsq_seq_quantize_rtn(s, id, DSQ_INTQ_RULE_AWQ, NULL));
    }
    return DSQ_OK;
}

static dsq_status awq_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout, dsq_seq_report *rep)
{
    awq_st a;
    dsq_status st = awq_alloc(&a, s, r);
    awq_group g[DSQ_BLOCK_MAX_GROUPS];
    float *sc[DSQ_BLOCK_MAX_GROUPS] = {NULL};
    int ng = st == DSQ_OK ? build_groups(&a, g) : 0;
    /* one half at a time: its loss inputs and reference, not the layer's, are held */
    for (int half = 0; half < s->d->n_halves && st == DSQ_OK; half++)
        st = awq_half(&a, half, g, ng, sc, hin, hout, rep);
    for (int k = 0; k < ng && st == DSQ_OK; k++) st = apply_group(&g[k], sc[k]);
    double t1 = dsq_now_s();
    if (st == DSQ_OK) st = clip_and_quantize(&a);
    DSQ_LOGD("awq layer %d: clip search and quantization %.2f s", s->l, dsq_now_s() - t1);
    for (int k = 0; k < ng; k++) free(sc[k]);
    awq_free(&a);
    return st;
}

/* ---- a routed expert (calibration/moe.c) ---- */

typedef struct awq_down {
    dsq_seq_expert *x;
    const float *backup, *G; /* G NULL: the loss from act itself (fewer rows than columns) */
    const uint16_t *Gp;      /* G packed (BF16 products), or NULL */
    const float *act;
    /* GGUF blocks: down's planned type and the importance of its unscaled columns */
    dsq_type type;
    const float *imp;
} awq_down;

/* mean x^2 per column of n rows of x [n x cols] into dst; NULL for no rows. */
static const float *mean_sq(const float *x, int64_t n, int64_t cols, float *dst)
{
    if (n <= 0) return NULL;
    for (int64_t c = 0; c < cols; c++) dst[c] = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t c = 0; c < cols; c++) dst[c] += x[t * cols + c] * x[t * cols + c];
    for (int64_t c = 0; c < cols; c++) dst[c] /= (float)n;
    return dst;
}

static dsq_status down_loss(void *user, const float *sc, int p0, int p1, double bound, double *acc)
{
    (void)p0, (void)p1, (void)bound; /* one part */
    awq_down *d = user;
    dsq_seq_expert *x = d->x;
    if (!x->s->o->gguf)
        DSQ_TRY(dsq_awq_fake_quant(d->backup, x->out[2], x->in[2], sc, &x->s->o->awq.q, x->w[2]));
    else if (dsq_seq_gguf_is_blocks(d->type))
        DSQ_TRY(dsq_awq_fake_quant_blocks(d->backup, x->out[2], x->in[2], sc, d->type, d->imp, x->w[2]));
    double l;
    if (!d->G)
        DSQ_TRY(dsq_awq_direct_loss(d->backup, x->w[2], x->out[2], x->in[2], d->act, x->n_tok, &l));
    else
        DSQ_TRY(dsq_awq_quad_loss(d->backup, x->w[2], x->out[2], x->in[2], d->G, d->Gp, &l));
    *acc += l;
    return DSQ_OK;
}

/* The up -> down scales from the activations act [n x ffn], folded; act
 * follows. keep: the scales go to the caller (GGUF blocks: down's importance). */
static dsq_status expert_down_scales(dsq_seq_expert *x, float *act, dsq_seq_report *rep, float **keep)
{
    int64_t F = x->in[2], n = x->n_tok;
    size_t nb = (size_t)(x->out[2] * F) * sizeof(float);
    awq_down d = {x, malloc(nb), NULL, NULL, act, DSQ_TYPE_F32, NULL};
    float *xm = malloc((size_t)F * sizeof *xm), *wm = malloc((size_t)F * sizeof *wm),
          *sc = malloc((size_t)F * sizeof *sc);
    float *imp = x->s->o->gguf ? malloc((size_t)F * sizeof *imp) : NULL;
    dsq_status st =
        d.backup && xm && wm && sc && (imp || !x->s->o->gguf) ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
    if (st == DSQ_OK && x->s->o->gguf) {
        st = dsq_seq_gguf_expert_target(x, 2, &d.type, &d.imp);
        if (!d.imp) d.imp = mean_sq(act, n, F, imp);
    }
    if (st == DSQ_OK) {
        memcpy((float *)d.backup, x->w[2], nb);
        dsq_awq_x_mean(act, n, F, xm);
        const float *w = x->w[2];
        st = dsq_awq_w_mean(&w, &x->out[2], 1, F, x->s->o->q.group_size, wm);
    }
    float *G = NULL;
    uint16_t *Gp = NULL;
    if (st == DSQ_OK && n >= F) st = gram(act, n, F, x->s->o->bf16, &G, &Gp);
    d.G = G;
    d.Gp = Gp;
    dsq_awq_search info;
    if (st == DSQ_OK) st = dsq_awq_search_scale(xm, wm, F, &x->s->o->awq, 1, down_loss, &d, sc, &info);
    if (d.backup) memcpy(x->w[2], d.backup, nb);
    if (st == DSQ_OK) {
        if (isfinite(info.loss_r0)) /* ratio 0 ran whole (not screened out) */
            rep->awq_loss_r0 += info.loss_r0, rep->awq_loss_best += info.best_loss;
        dsq_seq_expert_fold_down(x, sc);
        dsq_awq_div_cols(act, n, F, sc);
    }
    if (st == DSQ_OK && keep) *keep = sc, sc = NULL;
    free((float *)d.backup), free(G), free(Gp), free(xm), free(wm), free(sc), free(imp);
    return st;
}

/* GGUF blocks: expert x's three linears in their planned types, with the
 * importance of their scaled columns: the expert's part of the imatrix entry
 * divided by the scales its weight carries (the input group's for gate/up,
 * down_sc for down), else mean x^2 of the rows that feed it (already scaled). */
static dsq_status gguf_expert_write(dsq_seq_expert *x, const float *act, const float *down_sc)
{
    int64_t widest = x->in[0] > x->in[2] ? x->in[0] : x->in[2];
    float *buf = malloc((size_t)widest * sizeof *buf);
    if (!buf) return dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
    dsq_status st = DSQ_OK;
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS && st == DSQ_OK; k++) {
        dsq_type type;
        const float *imp;
        st = dsq_seq_gguf_expert_target(x, k, &type, &imp);
        const float *sc = k == 2 ? down_sc : x->s->expert_in;
        if (st == DSQ_OK && imp)
            imp = dsq_awq_scaled_importance(imp, sc, x->in[k], buf);
        else if (st == DSQ_OK)
            imp = mean_sq(k == 2 ? act : x->x, x->n_tok, x->in[k], buf);
        if (st == DSQ_OK) st = dsq_seq_gguf_expert_put(x, k, type, imp);
    }
    free(buf);
    return st;
}

/* A routed expert on its rows (its gate/up carry the input group's scales
 * already): its up -> down scales, the clip search of each linear on its own
 * input, then the AWQ rule. */
static dsq_status awq_expert(dsq_seq_expert *x, dsq_seq_report *rep)
{
    double t0 = dsq_now_s();
    size_t n = (size_t)x->n_tok * (size_t)x->out[0];
    float *act = dsq_bigbuf_alloc((n ? n : 1) * sizeof *act), *tmp = dsq_bigbuf_alloc((n ? n : 1) * sizeof *tmp);
    dsq_status st = act && tmp ? dsq_seq_expert_act(x, x->x, x->n_tok, act, tmp)
                               : dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory for an expert's activations");
    free(tmp);
    float *down_sc = NULL;
    if (st == DSQ_OK && x->ok[1] && x->ok[2] && x->n_tok > 0)
        st = expert_down_scales(x, act, rep, x->s->o->gguf ? &down_sc : NULL);
    if (x->s->o->gguf) { /* no clip: the block quantizers choose their ranges */
        if (st == DSQ_OK) st = gguf_expert_write(x, act, down_sc);
        free(down_sc);
        free(act);
        return st;
    }
    dsq_intq_params p = x->s->o->q;
    p.rule = DSQ_INTQ_RULE_AWQ;
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS && st == DSQ_OK; k++) {
        if (!x->ok[k]) continue;
        const float *in = k == 2 ? act : x->x;
        if (x->s->o->awq.clip && x->n_tok > 0) {
            int64_t ng = x->in[k] / p.group_size;
            float *mv = malloc((size_t)(x->out[k] * ng) * sizeof *mv);
            st = mv ? dsq_awq_search_clip(x->w[k], x->out[k], x->in[k], in, x->n_tok, &x->s->o->awq, mv)
                    : dsq_fail(DSQ_ERR_NOMEM, "awq clip: out of memory");
            if (st == DSQ_OK) dsq_awq_apply_clip(x->w[k], x->out[k], x->in[k], p.group_size, mv);
            free(mv);
        }
        if (st == DSQ_OK) st = dsq_intq_quantize(x->w[k], x->out[k], x->in[k], &p, NULL, &x->q[k]);
        if (st == DSQ_OK) x->has_q[k] = true, st = dsq_intq_dequantize(&x->q[k], x->w[k]);
    }
    free(act);
    DSQ_LOGD("awq layer %d expert %d: %lld tokens, %.2f s", x->s->l, x->e, (long long)x->n_tok, dsq_now_s() - t0);
    return st;
}

static dsq_status awq_check(const dsq_seq_opts *o)
{
    if (o->q.group_size <= 0)
        return dsq_fail(DSQ_ERR_ARG, "awq: per-channel (group -1) is not supported; pick a group size");
    return DSQ_OK;
}

const dsq_method dsq_method_awq = {"awq",
                                   DSQ_STAT_MEAN_ABS | DSQ_STAT_INPUTS | DSQ_STAT_XTX,
                                   DSQ_INT_FORMAT_AWQ,
                                   512,
                                   awq_check,
                                   awq_layer,
                                   NULL,
                                   awq_expert,
                                   DSQ_INTQ_GRID_MINMAX /* its clip search picks the range */,
                                   true /* the float pass of the first half is its last read of hin */};
