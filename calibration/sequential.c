/* Layer-by-layer RTN / AWQ / GPTQ driver (calibration/sequential.h). */
#include "calibration/sequential.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/fileio.h"
#include "core/log.h"
#include "quantizers/gptq.h"
#include "runtime/cpu/ops.h"
#include "runtime/forward.h"

struct dsq_seq_keep {
    void **p;
    size_t n, cap;
};

static dsq_status keep_add(dsq_seq_keep *k, void *p)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 64;
        void **np = realloc(k->p, cap * sizeof *np);
        if (!np) return dsq_fail(DSQ_ERR_NOMEM, "quantize: out of memory");
        k->p = np;
        k->cap = cap;
    }
    k->p[k->n++] = p;
    return DSQ_OK;
}

void dsq_seq_keep_free(dsq_seq_keep *k)
{
    if (!k) return;
    for (size_t i = 0; i < k->n; i++) free(k->p[i]);
    free(k->p);
    free(k);
}

const char *dsq_qmethod_name(dsq_qmethod m)
{
    switch (m) {
    case DSQ_QMETHOD_RTN: return "rtn";
    case DSQ_QMETHOD_AWQ: return "awq";
    case DSQ_QMETHOD_GPTQ: return "gptq";
    }
    return "?";
}

dsq_seq_opts dsq_seq_default_opts(void)
{
    dsq_seq_opts o;
    memset(&o, 0, sizeof o);
    o.method = DSQ_QMETHOD_RTN;
    o.awq = dsq_awq_default_opts();
    o.q = o.awq.q;
    o.damp = 0.01;
    return o;
}

static long peak_rss_kb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

dsq_status dsq_seq_check_groups(const dsq_model *m, const dsq_intq_params *q, bool skip, int64_t *n_bad)
{
    char list[512] = "";
    char first_err[512] = "";
    int64_t bad = 0;
    bool seen[DSQ_LIN_COUNT] = {false};
    for (int64_t l = 0; l < m->arch.n_layers; l++)
        for (int id = 0; id < DSQ_LIN_COUNT; id++) {
            const dsq_linear *W = &m->layers[l].lin[id];
            if (dsq_intq_check(q, W->in) == DSQ_OK) continue;
            bad++;
            if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s", dsq_errmsg());
            if (seen[id]) continue;
            seen[id] = true;
            size_t u = strlen(list);
            snprintf(list + u, sizeof list - u, "%s%s_proj (in %lld)", u ? ", " : "", dsq_linear_id_name((dsq_linear_id)id),
                     (long long)W->in);
        }
    dsq_clear_error();
    if (n_bad) *n_bad = bad;
    if (bad && !skip)
        return dsq_fail(DSQ_ERR_ARG,
                        "%lld linears cannot be quantized with bits %d, group %d: %s; %s (or pass --skip-indivisible "
                        "to leave them unquantized)",
                        (long long)bad, q->bits, q->group_size, list, first_err);
    return DSQ_OK;
}

/* ---- per-layer state ---- */

typedef struct layer_st {
    dsq_model *m;
    int l;
    const dsq_seq_opts *o;
    dsq_linear orig[DSQ_LIN_COUNT];
    const float *orig_attn, *orig_ffn;
    float *w[DSQ_LIN_COUNT], *bias[DSQ_LIN_COUNT];
    float *attn_norm, *ffn_norm;
    dsq_intq q[DSQ_LIN_COUNT];
    bool has_q[DSQ_LIN_COUNT], ok[DSQ_LIN_COUNT];
} layer_st;

static void lin_view(dsq_linear *W, float *w, float *bias, int64_t out, int64_t in)
{
    /* an F32 view cannot fail: F32 rows have no block constraint */
    (void)dsq_linear_init(W, DSQ_TYPE_F32, w, out, in);
    W->bias = bias;
}

static dsq_status layer_begin(layer_st *s, dsq_model *m, int l, const dsq_seq_opts *o)
{
    memset(s, 0, sizeof *s);
    s->m = m;
    s->l = l;
    s->o = o;
    dsq_layer *L = &m->layers[l];
    s->orig_attn = L->attn_norm;
    s->orig_ffn = L->ffn_norm;
    s->attn_norm = malloc((size_t)m->dim * sizeof(float));
    s->ffn_norm = malloc((size_t)m->dim * sizeof(float));
    if (!s->attn_norm || !s->ffn_norm) return dsq_fail(DSQ_ERR_NOMEM, "layer %d: out of memory", l);
    memcpy(s->attn_norm, L->attn_norm, (size_t)m->dim * sizeof(float));
    memcpy(s->ffn_norm, L->ffn_norm, (size_t)m->dim * sizeof(float));
    for (int id = 0; id < DSQ_LIN_COUNT; id++) {
        dsq_linear *W = &L->lin[id];
        s->orig[id] = *W;
        s->ok[id] = dsq_intq_check(&o->q, W->in) == DSQ_OK;
        s->w[id] = malloc((size_t)(W->out * W->in) * sizeof(float));
        if (!s->w[id]) return dsq_fail(DSQ_ERR_NOMEM, "layer %d %s: out of memory", l, dsq_linear_id_name(id));
        DSQ_TRY(dsq_linear_rows_f32(W, 0, W->out, s->w[id]));
        if (W->bias) {
            if (!(s->bias[id] = malloc((size_t)W->out * sizeof(float))))
                return dsq_fail(DSQ_ERR_NOMEM, "layer %d: out of memory", l);
            memcpy(s->bias[id], W->bias, (size_t)W->out * sizeof(float));
        }
    }
    dsq_clear_error();
    /* the model now runs on the copies, so every change below is what the forward sees */
    for (int id = 0; id < DSQ_LIN_COUNT; id++)
        lin_view(&L->lin[id], s->w[id], s->bias[id], s->orig[id].out, s->orig[id].in);
    L->attn_norm = s->attn_norm;
    L->ffn_norm = s->ffn_norm;
    return DSQ_OK;
}

/* Puts the model back (keep NULL) or leaves the quantized copies in it. */
static dsq_status layer_end(layer_st *s, dsq_seq_keep *keep)
{
    dsq_layer *L = &s->m->layers[s->l];
    dsq_status st = DSQ_OK;
    /* The layer's input weights are done with: drop their mapped pages so the
     * resident set stays near one layer whatever the model size. */
    for (int id = 0; id < DSQ_LIN_COUNT; id++)
        if (!s->orig[id].owned && s->orig[id].data)
            dsq_release_pages(s->orig[id].data, (uint64_t)s->orig[id].out * (uint64_t)s->orig[id].row_bytes);
    for (int id = 0; id < DSQ_LIN_COUNT; id++) {
        if (keep && st == DSQ_OK && s->w[id]) {
            st = keep_add(keep, s->w[id]);
            if (st == DSQ_OK && s->bias[id]) st = keep_add(keep, s->bias[id]);
            if (st == DSQ_OK) {
                dsq_linear_release(&s->orig[id]);
                s->w[id] = s->bias[id] = NULL;
                continue;
            }
        }
        L->lin[id] = s->orig[id];
        free(s->w[id]);
        free(s->bias[id]);
        s->w[id] = s->bias[id] = NULL;
    }
    if (keep && st == DSQ_OK && (st = keep_add(keep, s->attn_norm)) == DSQ_OK &&
        (st = keep_add(keep, s->ffn_norm)) == DSQ_OK) {
        s->attn_norm = s->ffn_norm = NULL;
    } else {
        L->attn_norm = s->orig_attn;
        L->ffn_norm = s->orig_ffn;
        free(s->attn_norm);
        free(s->ffn_norm);
        s->attn_norm = s->ffn_norm = NULL;
    }
    for (int id = 0; id < DSQ_LIN_COUNT; id++) dsq_intq_free(&s->q[id]);
    return st;
}

static int64_t lin_out(const layer_st *s, int id) { return s->orig[id].out; }
static int64_t lin_in(const layer_st *s, int id) { return s->orig[id].in; }

/* Quantizes s->w[id] (rule from the method; GPTQ uses H), then replaces it by its dequantized value. */
static dsq_status quantize_rtn(layer_st *s, int id, dsq_intq_rule rule)
{
    dsq_intq_params p = s->o->q;
    p.rule = rule;
    DSQ_TRY(dsq_intq_quantize(s->w[id], lin_out(s, id), lin_in(s, id), &p, NULL, &s->q[id]));
    s->has_q[id] = true;
    return dsq_intq_dequantize(&s->q[id], s->w[id]);
}

/* ---- running the layer over the samples, with hooks ---- */

typedef struct hook_ctx {
    float *cap[DSQ_LIN_COUNT]; /* capture buffers [tokens x in] */
    int64_t row0;              /* token offset of the current sample */
    dsq_hessian *H[DSQ_LIN_COUNT];
    int stop_after; /* a dsq_linear_id, or -1 */
    bool stopped;
} hook_ctx;

static dsq_status on_linear(void *user, int layer, dsq_linear_id which, const float *x, int n_tok, int64_t in)
{
    (void)layer;
    hook_ctx *h = user;
    if (h->cap[which]) memcpy(h->cap[which] + h->row0 * in, x, (size_t)n_tok * (size_t)in * sizeof *x);
    if (h->H[which]) DSQ_TRY(dsq_hessian_add(h->H[which], x, n_tok));
    if ((int)which == h->stop_after) {
        h->stopped = true;
        return dsq_fail(DSQ_ERR_INTERNAL, "calibration: pass stopped after %s (not an error)", dsq_linear_id_name(which));
    }
    return DSQ_OK;
}

typedef struct runner {
    dsq_ctx *ctx;
    int n_samples, seqlen;
    int64_t dim;
    float *scratch; /* [seqlen x dim] */
} runner;

/* Which part of the layer a pass runs. */
typedef enum pass_kind { PASS_LAYER, PASS_ATTN, PASS_MLP } pass_kind;

/* Runs samples [0, n) of layer l (or one block of it) from in; out NULL:
 * results dropped; out == in: in place. */
static dsq_status run_pass(runner *r, int l, pass_kind kind, const float *in, float *out, int n, hook_ctx *h)
{
    size_t rows = (size_t)r->seqlen * (size_t)r->dim;
    dsq_ctx_set_hooks(r->ctx, h ? on_linear : NULL, NULL, h);
    dsq_status s = DSQ_OK;
    for (int i = 0; i < n && s == DSQ_OK; i++) {
        float *buf = out ? out + (size_t)i * rows : r->scratch;
        if (buf != in + (size_t)i * rows) memcpy(buf, in + (size_t)i * rows, rows * sizeof *buf);
        if (h) {
            h->row0 = (int64_t)i * r->seqlen;
            h->stopped = false;
        }
        if (kind == PASS_ATTN) s = dsq_forward_attn(r->ctx, l, buf, r->seqlen, 0);
        else if (kind == PASS_MLP) s = dsq_forward_mlp(r->ctx, l, buf, r->seqlen);
        else s = dsq_forward_layer(r->ctx, l, buf, r->seqlen, 0);
        if (s != DSQ_OK && h && h->stopped) {
            dsq_clear_error();
            s = DSQ_OK;
        }
    }
    dsq_ctx_set_hooks(r->ctx, NULL, NULL, NULL);
    return s;
}

static dsq_status run_samples(runner *r, int l, const float *in, float *out, int n, hook_ctx *h)
{
    return run_pass(r, l, PASS_LAYER, in, out, n, h);
}

/* ---- GPTQ ---- */

static const int g_subsets[4][3] = {
    {DSQ_LIN_Q, DSQ_LIN_K, DSQ_LIN_V}, {DSQ_LIN_O, -1, -1}, {DSQ_LIN_GATE, DSQ_LIN_UP, -1}, {DSQ_LIN_DOWN, -1, -1}};

static bool subset_any(const layer_st *s, const int *ids)
{
    bool any = false;
    for (int k = 0; k < 3 && ids[k] >= 0; k++) any = any || s->ok[ids[k]];
    return any;
}

/* Collects the subset's Hessian from a pass of `kind` over in that stops at
 * the subset's first linear (capturing its input into cap when not NULL),
 * then quantizes the subset's linears with GPTQ. */
static dsq_status gptq_subset(layer_st *s, runner *r, pass_kind kind, const float *hin, const int *ids, float *cap,
                              dsq_seq_report *rep)
{
    dsq_hessian H;
    hook_ctx h;
    memset(&h, 0, sizeof h);
    DSQ_TRY(dsq_hessian_init(&H, lin_in(s, ids[0])));
    H.bf16 = s->o->bf16;
    h.H[ids[0]] = &H; /* the subset's linears share this input */
    h.cap[ids[0]] = cap;
    h.stop_after = ids[0];
    double t0 = now_s();
    dsq_status st = run_pass(r, s->l, kind, hin, NULL, r->n_samples, &h);
    if (st == DSQ_OK) st = dsq_hessian_finalize(&H);
    double t1 = now_s();
    for (int k = 0; k < 3 && ids[k] >= 0 && st == DSQ_OK; k++) {
        int id = ids[k];
        if (!s->ok[id]) continue;
        char name[96];
        snprintf(name, sizeof name, "model.layers.%d.%s_proj", s->l, dsq_linear_id_name(id));
        dsq_gptq_opts go = dsq_gptq_default_opts();
        go.q = s->o->q;
        go.q.rule = DSQ_INTQ_RULE_GPTQ;
        go.percdamp = s->o->damp;
        go.act_order = s->o->act_order;
        go.static_groups = s->o->static_groups;
        go.name = name;
        dsq_gptq_report gr;
        st = dsq_gptq_quantize(s->w[id], lin_out(s, id), lin_in(s, id), H.h, &go, &s->q[id], &gr);
        if (st != DSQ_OK) break;
        s->has_q[id] = true;
        rep->gptq_loss += gr.loss;
        st = dsq_intq_dequantize(&s->q[id], s->w[id]);
    }
    DSQ_LOGD("gptq layer %d %s_proj subset: pass and Hessian %.2f s, quantization %.2f s", s->l,
             dsq_linear_id_name(ids[0]), t1 - t0, now_s() - t1);
    dsq_hessian_free(&H);
    return st;
}

/* The attention half with q/k/v already quantized: o_proj's inputs are kept
 * (one activation-sized buffer) so that, once o is quantized, the residual
 * stream is finished with one product instead of a second attention pass. */
static dsq_status gptq_attention(layer_st *s, runner *r, const float *hin, float *hout, dsq_seq_report *rep)
{
    if (!subset_any(s, g_subsets[1])) return run_pass(r, s->l, PASS_ATTN, hin, hout, r->n_samples, NULL);
    size_t per = (size_t)r->seqlen * (size_t)lin_in(s, DSQ_LIN_O), rows = (size_t)r->seqlen * (size_t)r->dim;
    float *att = malloc(per * (size_t)r->n_samples * sizeof *att);
    if (!att) return dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory for o_proj's inputs (%d x %d tokens)", r->n_samples,
                              r->seqlen);
    dsq_status st = gptq_subset(s, r, PASS_ATTN, hin, g_subsets[1], att, rep);
    for (int i = 0; i < r->n_samples && st == DSQ_OK; i++) {
        memcpy(hout + (size_t)i * rows, hin + (size_t)i * rows, rows * sizeof *hout);
        st = dsq_forward_attn_output(r->ctx, s->l, att + (size_t)i * per, hout + (size_t)i * rows, r->seqlen);
    }
    free(att);
    return st;
}

/* True-sequential GPTQ (IST-DASLab/gptq llama.py): each subset's Hessian
 * comes from inputs computed with the earlier subsets already quantized.
 * Every product runs once per token except gate/up (twice: for down's
 * Hessian and for the layer's output); attention runs once. */
static dsq_status layer_gptq(layer_st *s, runner *r, const float *hin, float *hout, dsq_seq_report *rep)
{
    if (subset_any(s, g_subsets[0])) DSQ_TRY(gptq_subset(s, r, PASS_ATTN, hin, g_subsets[0], NULL, rep));
    DSQ_TRY(gptq_attention(s, r, hin, hout, rep));
    for (int k = 2; k < 4; k++)
        if (subset_any(s, g_subsets[k])) DSQ_TRY(gptq_subset(s, r, PASS_MLP, hout, g_subsets[k], NULL, rep));
    return run_pass(r, s->l, PASS_MLP, hout, hout, r->n_samples, NULL);
}

/* ---- AWQ ---- */

typedef struct awq_st {
    layer_st *s;
    runner *r;
    const float *hin;
    int n_loss;                   /* samples in the loss */
    int64_t nt;                   /* tokens in the loss */
    float *X[DSQ_LIN_COUNT];      /* captured inputs, all tokens (Q: of q/k/v, GATE: of gate/up) */
    float *backup[DSQ_LIN_COUNT]; /* unmodified weights during a search */
    float *yref, *y, *tmp, *tmp2; /* loss buffers */
} awq_st;

static dsq_status linear_apply(const awq_st *a, const float *w, const float *bias, int64_t out, int64_t in,
                               const float *x, int64_t n, float *y)
{
    dsq_linear W;
    lin_view(&W, (float *)w, (float *)bias, out, in);
    return dsq_cpu_matmul(&W, x, y, (int)n, a->s->o->bf16 ? DSQ_MATMUL_BF16 : DSQ_MATMUL_DEFAULT);
}

static double mse(const float *a, const float *b, size_t n)
{
    double acc = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        acc += d * d;
    }
    return acc / (double)(n ? n : 1);
}

/* The MLP block of the layer on x [nt x dim] with the current weights. */
static dsq_status mlp_out(awq_st *a, const float *x, float *y)
{
    layer_st *s = a->s;
    int64_t f = lin_out(s, DSQ_LIN_GATE);
    DSQ_TRY(linear_apply(a, s->w[DSQ_LIN_GATE], s->bias[DSQ_LIN_GATE], f, lin_in(s, DSQ_LIN_GATE), x, a->nt, a->tmp));
    DSQ_TRY(linear_apply(a, s->w[DSQ_LIN_UP], s->bias[DSQ_LIN_UP], f, lin_in(s, DSQ_LIN_UP), x, a->nt, a->tmp2));
    if (s->o->bf16) dsq_cpu_swiglu_fast(a->tmp, a->tmp2, a->tmp, (size_t)(a->nt * f));
    else dsq_cpu_swiglu(a->tmp, a->tmp2, a->tmp, (size_t)(a->nt * f));
    return linear_apply(a, s->w[DSQ_LIN_DOWN], s->bias[DSQ_LIN_DOWN], lin_out(s, DSQ_LIN_DOWN), f, a->tmp, a->nt, y);
}

/* The attention block's output (o_proj applied) with the current weights. */
static dsq_status attn_out(awq_st *a, float *y)
{
    hook_ctx h;
    memset(&h, 0, sizeof h);
    h.cap[DSQ_LIN_O] = a->tmp;
    h.stop_after = DSQ_LIN_O;
    DSQ_TRY(run_samples(a->r, a->s->l, a->hin, NULL, a->n_loss, &h));
    layer_st *s = a->s;
    return linear_apply(a, s->w[DSQ_LIN_O], s->bias[DSQ_LIN_O], lin_out(s, DSQ_LIN_O), lin_in(s, DSQ_LIN_O), a->tmp,
                        a->nt, y);
}

typedef struct awq_group {
    awq_st *a;
    float *G;      /* block 2: x^T x / n of its input over all tokens (the loss is a quadratic form in it) */
    int prev;      /* -1: an RMSNorm (0: attn, 1: ffn via norm_ffn); else the previous linear */
    bool norm_ffn;
    int ids[3], n;
    int x_id;      /* whose captured input */
    int block;     /* 0: attention, 1: mlp, 2: the single linear ids[0] (loss from G, see group_loss) */
} awq_group;

/* The output of a block 0 or 1 group on the loss samples. */
static dsq_status group_output(awq_group *g, float *y)
{
    awq_st *a = g->a;
    if (g->block == 0) return attn_out(a, y);
    return mlp_out(a, a->X[DSQ_LIN_GATE], y);
}

static dsq_status group_loss(void *user, const float *sc, double *loss)
{
    awq_group *g = user;
    layer_st *s = g->a->s;
    for (int k = 0; k < g->n; k++) {
        int id = g->ids[k];
        DSQ_TRY(dsq_awq_fake_quant(g->a->backup[id], lin_out(s, id), lin_in(s, id), sc, &s->o->awq.q, s->w[id]));
    }
    if (g->G) {
        int id = g->ids[0];
        return dsq_awq_quad_loss(g->a->backup[id], s->w[id], lin_out(s, id), lin_in(s, id), g->G, s->o->bf16, loss);
    }
    DSQ_TRY(group_output(g, g->a->y));
    *loss = mse(g->a->y, g->a->yref, (size_t)(g->a->nt * s->m->dim));
    return DSQ_OK;
}

/* G = x^T x / n over every token of the group's input (block 2 only). */
static dsq_status input_gram(awq_st *a, awq_group *g)
{
    int64_t cols = lin_in(a->s, g->ids[0]), all_tok = (int64_t)a->r->n_samples * a->r->seqlen;
    dsq_hessian H;
    DSQ_TRY(dsq_hessian_init(&H, cols));
    H.bf16 = a->s->o->bf16;
    dsq_status st = dsq_hessian_add(&H, a->X[g->x_id], all_tok);
    if (st == DSQ_OK) st = dsq_hessian_finalize(&H); /* 2/n x^T x */
    if (st == DSQ_OK && !(g->G = malloc((size_t)(cols * cols) * sizeof *g->G)))
        st = dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory for a %lld x %lld input Gram matrix", (long long)cols,
                      (long long)cols);
    for (int64_t i = 0; st == DSQ_OK && i < cols * cols; i++) g->G[i] = (float)(0.5 * H.h[i]);
    dsq_hessian_free(&H);
    return st;
}

static dsq_status search_group(awq_group *g, float *best_s, dsq_seq_report *rep)
{
    awq_st *a = g->a;
    layer_st *s = a->s;
    int64_t cols = lin_in(s, g->ids[0]);
    const float *wl[3];
    int64_t rows[3];
    for (int k = 0; k < g->n; k++) {
        wl[k] = s->w[g->ids[k]];
        rows[k] = lin_out(s, g->ids[k]);
    }
    double t0 = now_s();
    float *xm = malloc((size_t)cols * sizeof *xm), *wm = malloc((size_t)cols * sizeof *wm);
    dsq_status st = xm && wm ? DSQ_OK : dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
    int64_t all_tok = (int64_t)a->r->n_samples * a->r->seqlen;
    if (st == DSQ_OK) {
        dsq_awq_x_mean(a->X[g->x_id], all_tok, cols, xm);
        st = dsq_awq_w_mean(wl, rows, g->n, cols, s->o->q.group_size, wm);
    }
    if (st == DSQ_OK && g->block == 2) st = input_gram(a, g);
    else if (st == DSQ_OK) st = group_output(g, a->yref); /* float reference */
    for (int k = 0; k < g->n && st == DSQ_OK; k++) {
        int id = g->ids[k];
        size_t nb = (size_t)(lin_out(s, id) * lin_in(s, id)) * sizeof(float);
        if (!(a->backup[id] = malloc(nb))) st = dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
        else memcpy(a->backup[id], s->w[id], nb);
    }
    dsq_awq_search info;
    if (st == DSQ_OK) st = dsq_awq_search_scale(xm, wm, cols, &s->o->awq, group_loss, g, best_s, &info);
    for (int k = 0; k < g->n; k++) {
        int id = g->ids[k];
        if (a->backup[id]) memcpy(s->w[id], a->backup[id], (size_t)(lin_out(s, id) * lin_in(s, id)) * sizeof(float));
        free(a->backup[id]);
        a->backup[id] = NULL;
    }
    if (st == DSQ_OK) {
        rep->awq_loss_r0 += info.loss_r0;
        rep->awq_loss_best += info.best_loss;
        DSQ_LOGD("awq layer %d %s_proj group: ratio %.2f, loss %.4g (ratio 0: %.4g), %.2f s", s->l,
                 dsq_linear_id_name(g->ids[0]), info.best_ratio, info.best_loss, info.loss_r0, now_s() - t0);
    }
    free(xm);
    free(wm);
    free(g->G);
    g->G = NULL;
    return st;
}

static void apply_group(awq_group *g, const float *sc)
{
    awq_st *a = g->a;
    layer_st *s = a->s;
    int64_t cols = lin_in(s, g->ids[0]);
    if (g->prev < 0) dsq_awq_div_vec(g->norm_ffn ? s->ffn_norm : s->attn_norm, sc, cols);
    else dsq_awq_div_rows(s->w[g->prev], lin_out(s, g->prev), lin_in(s, g->prev), s->bias[g->prev], sc, cols);
    for (int k = 0; k < g->n; k++) dsq_awq_scale_cols(s->w[g->ids[k]], lin_out(s, g->ids[k]), cols, sc);
    dsq_awq_div_cols(a->X[g->x_id], (int64_t)a->r->n_samples * a->r->seqlen, cols, sc);
}

static int build_groups(awq_st *a, awq_group *g)
{
    layer_st *s = a->s;
    int n = 0;
    const awq_group all[4] = {
        {a, NULL, -1, false, {DSQ_LIN_Q, DSQ_LIN_K, DSQ_LIN_V}, 3, DSQ_LIN_Q, 0},
        {a, NULL, DSQ_LIN_V, false, {DSQ_LIN_O, 0, 0}, 1, DSQ_LIN_O, 2},
        {a, NULL, -1, true, {DSQ_LIN_GATE, DSQ_LIN_UP, 0}, 2, DSQ_LIN_GATE, 1},
        {a, NULL, DSQ_LIN_UP, false, {DSQ_LIN_DOWN, 0, 0}, 1, DSQ_LIN_DOWN, 2},
    };
    for (int k = 0; k < 4; k++) {
        bool ok = true;
        for (int j = 0; j < all[k].n; j++) ok = ok && s->ok[all[k].ids[j]];
        /* AutoAWQ scales o_proj only when v_proj and o_proj have the same shape (no GQA) */
        if (k == 1)
            ok = ok && lin_out(s, DSQ_LIN_V) == lin_out(s, DSQ_LIN_O) && lin_in(s, DSQ_LIN_V) == lin_in(s, DSQ_LIN_O);
        if (ok) g[n++] = all[k];
    }
    return n;
}

static dsq_status awq_alloc(awq_st *a, layer_st *s, runner *r, const float *hin)
{
    memset(a, 0, sizeof *a);
    a->s = s;
    a->r = r;
    a->hin = hin;
    a->n_loss = s->o->awq_loss_samples > 0 && s->o->awq_loss_samples < r->n_samples ? s->o->awq_loss_samples
                                                                                    : r->n_samples;
    a->nt = (int64_t)a->n_loss * r->seqlen;
    size_t all_tok = (size_t)r->n_samples * (size_t)r->seqlen, nt = (size_t)a->nt;
    int64_t f = lin_out(s, DSQ_LIN_GATE), qd = lin_in(s, DSQ_LIN_O), wide = f > qd ? f : qd;
    if (s->m->dim > wide) wide = s->m->dim;
    a->X[DSQ_LIN_Q] = malloc(all_tok * (size_t)lin_in(s, DSQ_LIN_Q) * sizeof(float));
    a->X[DSQ_LIN_O] = malloc(all_tok * (size_t)qd * sizeof(float));
    a->X[DSQ_LIN_GATE] = malloc(all_tok * (size_t)lin_in(s, DSQ_LIN_GATE) * sizeof(float));
    a->X[DSQ_LIN_DOWN] = malloc(all_tok * (size_t)lin_in(s, DSQ_LIN_DOWN) * sizeof(float));
    a->yref = malloc(nt * (size_t)wide * sizeof(float));
    a->y = malloc(nt * (size_t)wide * sizeof(float));
    a->tmp = malloc(nt * (size_t)wide * sizeof(float));
    a->tmp2 = malloc(nt * (size_t)wide * sizeof(float));
    if (!a->X[DSQ_LIN_Q] || !a->X[DSQ_LIN_O] || !a->X[DSQ_LIN_GATE] || !a->X[DSQ_LIN_DOWN] || !a->yref || !a->y ||
        !a->tmp || !a->tmp2)
        return dsq_fail(DSQ_ERR_NOMEM, "awq layer %d: out of memory for the captured inputs of %zu tokens", s->l,
                        all_tok);
    return DSQ_OK;
}

static void awq_free(awq_st *a)
{
    for (int id = 0; id < DSQ_LIN_COUNT; id++) free(a->X[id]);
    free(a->yref);
    free(a->y);
    free(a->tmp);
    free(a->tmp2);
}

static dsq_status awq_clip_and_quantize(awq_st *a)
{
    layer_st *s = a->s;
    static const int x_of[DSQ_LIN_COUNT] = {DSQ_LIN_Q, DSQ_LIN_Q, DSQ_LIN_Q, DSQ_LIN_O, DSQ_LIN_GATE, DSQ_LIN_GATE,
                                            DSQ_LIN_DOWN};
    int64_t all_tok = (int64_t)a->r->n_samples * a->r->seqlen;
    for (int id = 0; id < DSQ_LIN_COUNT; id++) {
        if (!s->ok[id]) continue;
        /* AutoAWQ skips q and k: their error is not measured by their own output */
        if (s->o->awq.clip && id != DSQ_LIN_Q && id != DSQ_LIN_K) {
            int64_t ng = lin_in(s, id) / s->o->q.group_size;
            float *mv = malloc((size_t)(lin_out(s, id) * ng) * sizeof *mv);
            if (!mv) return dsq_fail(DSQ_ERR_NOMEM, "awq clip: out of memory");
            dsq_status st = dsq_awq_search_clip(s->w[id], lin_out(s, id), lin_in(s, id), a->X[x_of[id]], all_tok,
                                                &s->o->awq, mv);
            if (st == DSQ_OK) dsq_awq_apply_clip(s->w[id], lin_out(s, id), lin_in(s, id), s->o->q.group_size, mv);
            free(mv);
            DSQ_TRY(st);
        }
        DSQ_TRY(quantize_rtn(s, id, DSQ_INTQ_RULE_AWQ));
    }
    return DSQ_OK;
}

static dsq_status layer_awq(layer_st *s, runner *r, const float *hin, float *hout, dsq_seq_report *rep)
{
    awq_st a;
    dsq_status st = awq_alloc(&a, s, r, hin);
    hook_ctx h;
    memset(&h, 0, sizeof h);
    h.stop_after = -1;
    h.cap[DSQ_LIN_Q] = a.X[DSQ_LIN_Q];
    h.cap[DSQ_LIN_O] = a.X[DSQ_LIN_O];
    h.cap[DSQ_LIN_GATE] = a.X[DSQ_LIN_GATE];
    h.cap[DSQ_LIN_DOWN] = a.X[DSQ_LIN_DOWN];
    /* the float layer's output is the next layer's input, as in AutoAWQ */
    double t0 = now_s();
    if (st == DSQ_OK) st = run_samples(r, s->l, hin, hout, r->n_samples, &h);
    DSQ_LOGD("awq layer %d: float pass with captures %.2f s", s->l, now_s() - t0);
    awq_group g[4];
    float *sc[4] = {NULL};
    int ng = st == DSQ_OK ? build_groups(&a, g) : 0;
    for (int k = 0; k < ng && st == DSQ_OK; k++) {
        if (!(sc[k] = malloc((size_t)lin_in(s, g[k].ids[0]) * sizeof(float))))
            st = dsq_fail(DSQ_ERR_NOMEM, "awq: out of memory");
        else st = search_group(&g[k], sc[k], rep);
    }
    for (int k = 0; k < ng && st == DSQ_OK; k++) apply_group(&g[k], sc[k]);
    double t1 = now_s();
    if (st == DSQ_OK) st = awq_clip_and_quantize(&a);
    DSQ_LOGD("awq layer %d: clip search and quantization %.2f s", s->l, now_s() - t1);
    for (int k = 0; k < 4; k++) free(sc[k]);
    awq_free(&a);
    return st;
}

/* ---- the driver ---- */

static dsq_status emit_layer(layer_st *s)
{
    if (!s->o->emit) return DSQ_OK;
    dsq_seq_layer_out out;
    memset(&out, 0, sizeof out);
    out.layer = s->l;
    out.attn_norm = s->attn_norm;
    out.ffn_norm = s->ffn_norm;
    for (int id = 0; id < DSQ_LIN_COUNT; id++) {
        out.q[id] = s->has_q[id] ? &s->q[id] : NULL;
        out.w[id] = s->w[id];
        out.bias[id] = s->bias[id];
    }
    return s->o->emit(s->o->user, &out);
}

static dsq_status one_layer(dsq_model *m, int l, const dsq_seq_opts *o, runner *r, float *hin, float *hout,
                            dsq_seq_report *rep, dsq_seq_keep *keep)
{
    layer_st s;
    dsq_status st = layer_begin(&s, m, l, o);
    if (st == DSQ_OK) {
        if (o->method == DSQ_QMETHOD_GPTQ) st = layer_gptq(&s, r, hin, hout, rep);
        else if (o->method == DSQ_QMETHOD_AWQ) st = layer_awq(&s, r, hin, hout, rep);
        for (int id = 0; id < DSQ_LIN_COUNT && st == DSQ_OK && o->method == DSQ_QMETHOD_RTN; id++)
            if (s.ok[id]) st = quantize_rtn(&s, id, DSQ_INTQ_RULE_AWQ);
    }
    for (int id = 0; id < DSQ_LIN_COUNT; id++) {
        if (s.has_q[id]) rep->n_quantized++;
        else if (st == DSQ_OK) rep->n_skipped++;
    }
    if (st == DSQ_OK) st = emit_layer(&s);
    if (st != DSQ_OK) st = dsq_fail_context(st, "layer %d", l);
    dsq_status e = layer_end(&s, st == DSQ_OK ? keep : NULL);
    return st != DSQ_OK ? st : e;
}

static dsq_status check_opts(const dsq_model *m, const dsq_calib_set *calib, const dsq_seq_opts *o)
{
    if (o->method != DSQ_QMETHOD_RTN && (!calib || calib->n_samples <= 0 || !calib->tokens))
        return dsq_fail(DSQ_ERR_ARG, "%s needs calibration samples", dsq_qmethod_name(o->method));
    if (o->q.group_size <= 0 && o->method == DSQ_QMETHOD_AWQ)
        return dsq_fail(DSQ_ERR_ARG, "awq: per-channel (group -1) is not supported; pick a group size");
    if (o->q.bits != 2 && o->q.bits != 3 && o->q.bits != 4 && o->q.bits != 8)
        return dsq_fail(DSQ_ERR_ARG, "--w-bit %d: supported widths are 2, 3, 4 and 8", o->q.bits);
    for (int64_t t = 0; calib && t < (int64_t)calib->n_samples * calib->seqlen; t++)
        if (calib->tokens[t] < 0 || calib->tokens[t] >= m->vocab)
            return dsq_fail(DSQ_ERR_ARG, "calibration token %d outside the vocabulary (%lld)", calib->tokens[t],
                            (long long)m->vocab);
    return dsq_seq_check_groups(m, &o->q, o->skip_indivisible, NULL);
}

dsq_status dsq_seq_quantize(dsq_model *m, const dsq_calib_set *calib, const dsq_seq_opts *o_in, dsq_seq_report *rep,
                            dsq_seq_keep **keep_out)
{
    dsq_seq_opts o = *o_in;
    o.awq.q = o.q;
    o.awq.q.rule = DSQ_INTQ_RULE_AWQ;
    memset(rep, 0, sizeof *rep);
    if (o.method == DSQ_QMETHOD_RTN) o.bf16 = false; /* no passes to run */
    rep->bf16 = o.bf16;
    if (keep_out) *keep_out = NULL;
    DSQ_TRY(check_opts(m, calib, &o));
    if (o.method == DSQ_QMETHOD_RTN) calib = NULL; /* RTN looks at no data */
    double t0 = now_s();
    runner r;
    memset(&r, 0, sizeof r);
    r.dim = m->dim;
    float *ha = NULL, *hb = NULL;
    dsq_seq_keep *keep = NULL;
    dsq_status st = DSQ_OK;
    if (o.keep_fake_quant && !(keep = calloc(1, sizeof *keep))) st = dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    if (calib && st == DSQ_OK) {
        r.n_samples = calib->n_samples;
        r.seqlen = calib->seqlen;
        size_t n = (size_t)calib->n_samples * (size_t)calib->seqlen * (size_t)m->dim;
        ha = malloc(n * sizeof *ha);
        hb = malloc(n * sizeof *hb);
        r.scratch = malloc((size_t)calib->seqlen * (size_t)m->dim * sizeof *r.scratch);
        if (!ha || !hb || !r.scratch)
            st = dsq_fail(DSQ_ERR_NOMEM, "calibration: out of memory for %d x %d hidden states", calib->n_samples,
                          calib->seqlen);
        if (st == DSQ_OK) st = dsq_ctx_new(m, calib->seqlen, o.threads, &r.ctx);
        if (st == DSQ_OK) dsq_ctx_set_bf16(r.ctx, o.bf16);
        for (int i = 0; i < calib->n_samples && st == DSQ_OK; i++)
            st = dsq_forward_embed(r.ctx, calib->tokens + (size_t)i * (size_t)calib->seqlen, calib->seqlen,
                                   ha + (size_t)i * (size_t)calib->seqlen * (size_t)m->dim);
    }
    int nl = (int)m->arch.n_layers;
    if (o.max_layers > 0 && o.max_layers < nl) nl = o.max_layers;
    for (int l = 0; l < nl && st == DSQ_OK; l++) {
        double tl = now_s();
        st = one_layer(m, l, &o, &r, ha, hb, rep, keep);
        float *t = ha;
        ha = hb;
        hb = t;
        double el = now_s() - t0;
        DSQ_LOGI("%s: layer %d/%d done in %.1f s, ETA %.0f s, peak RSS %ld MiB", dsq_qmethod_name(o.method), l + 1, nl,
                 now_s() - tl, el / (l + 1) * (nl - l - 1), peak_rss_kb() / 1024);
    }
    dsq_ctx_free(r.ctx);
    free(ha);
    free(hb);
    free(r.scratch);
    rep->seconds = now_s() - t0;
    rep->peak_rss_kb = peak_rss_kb();
    if (st != DSQ_OK) {
        dsq_seq_keep_free(keep); /* layers done so far point into it: the model is unusable, as documented */
        return st;
    }
    if (keep_out) *keep_out = keep;
    else dsq_seq_keep_free(keep);
    return DSQ_OK;
}
