/* The DeepSeek-V2/V3 block's forward (formats/block_deepseek.c describes
 * it), after transformers' modeling_deepseek_v3 / _v2 and DeepSeek's
 * inference/model.py:
 *
 * Attention (MLA): q = q_b(rmsnorm(q_a(x))) or q_proj(x), per head [nope |
 * rope]; kv_a(x) = [latent (kv_lora_rank) | shared rope key]; the latent is
 * normed (kv_a_layernorm) and, with the rotated rope key, is all the cache
 * keeps per position: kv_lora_rank + qk_rope_head_dim floats, not heads.
 * Two ways to the same attention:
 *  - expanded (prefill): kv_b turns every cached latent into per-head keys
 *    without rope and values; keys get the shared rope key appended; the
 *    usual attention runs on them.
 *  - absorbed (decode, few rows): kv_b's key rows fold into the query
 *    (q_lat = W_k^T q_nope per head), so scores are q_lat . latent +
 *    q_rope . rope key, one latent "KV head" for all query heads; the output
 *    latent goes through kv_b's value rows (W_v o_lat per head).
 * Softmax scale 1 / sqrt(qk head) times yarn's mscale(factor,
 * mscale_all_dim) squared.
 *
 * MLP: dense SwiGLU in the first layers; then MoE: the router (F32) picks
 * top_k experts per token (runtime/cpu/ops.h dsq_cpu_moe_route), each
 * expert runs once on its tokens (gathered), outputs are weighted and
 * scattered back, and the shared experts run on every token.
 * Every op goes through the context's backend; one op per line. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/block_deepseek.h"
#include "runtime/ctx_internal.h"

enum { HALF_ATTN = 0, HALF_MLP = 1 };

/* Up to this many query rows the absorbed form is cheaper: the expanded one
 * runs kv_b over every cached position on each call. */
#define ABSORB_MAX_ROWS 16

typedef struct ds_state {
    int64_t H, D, L, R, nope, vh, qk; /* heads, hidden, kv_lora, rope, nope, v head, q/k head */
    int64_t lr;                       /* L + R: a cache row */
    int64_t ffn;                      /* widest MLP intermediate (dense, shared, expert) */
    float attn_scale;
    dsq_rope rope_q, rope_k; /* the context's table with MLA's head strides */
    float **cache;           /* per layer: n_ctx x (L + R) */
    float **wk, **wv;        /* per layer, absorbed form (built on first use): [H][L x nope], [H][vh x L] */
    int cap;                 /* rows of the activation buffers */
    float *xn, *qa, *q, *kva, *lat, *kr, *att, *tmp, *qabs, *olat;
    float *gate, *up, *acc, *logits, *ex_x, *ex_y, *wt_e;
    int32_t *idx, *tok, *count;
    float *wt;
    int tcap; /* positions of the expanded keys and values */
    float *kvl, *kvx, *kx, *vx;
} ds_state;

static const float *norm_w(const dsq_ctx *c, int l, int i) { return c->m->layers[l].norm[i]; }

static float eps(const dsq_ctx *c) { return (float)c->m->arch.rms_norm_eps; }

static void free_rows(dsq_ctx *c, ds_state *s)
{
    float **f[] = {&s->xn,   &s->qa,   &s->q,  &s->kva, &s->lat,    &s->kr,   &s->att,  &s->tmp,  &s->qabs,
                   &s->olat, &s->gate, &s->up, &s->acc, &s->logits, &s->ex_x, &s->ex_y, &s->wt_e, &s->wt};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        c->be->free(*f[i]);
        *f[i] = NULL;
    }
    free(s->idx);
    free(s->tok);
    free(s->count);
    s->idx = s->tok = s->count = NULL;
    s->cap = 0;
}

static dsq_status reserve(dsq_ctx *c, ds_state *s, int n)
{
    if (n <= s->cap) return DSQ_OK;
    free_rows(c, s);
    const dsq_arch *a = &c->m->arch;
    int64_t E = a->moe.n_routed > 0 ? a->moe.n_routed : 1, K = a->moe.top_k > 0 ? a->moe.top_k : 1;
    int64_t qlr = a->mla.q_lora_rank > 0 ? a->mla.q_lora_rank : 1;
    struct {
        float **p;
        int64_t w;
    } want[] = {{&s->xn, s->D},          {&s->qa, qlr},      {&s->q, s->H * s->qk},
                {&s->kva, s->lr},        {&s->lat, s->L},    {&s->kr, s->R},
                {&s->att, s->H * s->vh}, {&s->tmp, s->D},    {&s->qabs, s->H * s->lr},
                {&s->olat, s->H * s->L}, {&s->gate, s->ffn}, {&s->up, s->ffn},
                {&s->acc, s->D},         {&s->logits, E},    {&s->ex_x, s->D},
                {&s->ex_y, s->D},        {&s->wt_e, 1},      {&s->wt, K}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!(*want[i].p = c->be->alloc((size_t)n * (size_t)want[i].w))) goto oom;
    s->idx = malloc((size_t)n * (size_t)K * sizeof *s->idx);
    s->tok = malloc((size_t)n * sizeof *s->tok);
    s->count = malloc((size_t)E * sizeof *s->count);
    if (!s->idx || !s->tok || !s->count) goto oom;
    s->cap = n;
    return DSQ_OK;
oom:
    free_rows(c, s);
    return dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory for %d rows of activations", n);
}

static void free_expanded(dsq_ctx *c, ds_state *s)
{
    float **f[] = {&s->kvl, &s->kvx, &s->kx, &s->vx};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        c->be->free(*f[i]);
        *f[i] = NULL;
    }
    s->tcap = 0;
}

static dsq_status reserve_expanded(dsq_ctx *c, ds_state *s, int T)
{
    if (T <= s->tcap) return DSQ_OK;
    free_expanded(c, s);
    size_t t = (size_t)T;
    s->kvl = c->be->alloc(t * (size_t)s->L);
    s->kvx = c->be->alloc(t * (size_t)(s->H * (s->nope + s->vh)));
    s->kx = c->be->alloc(t * (size_t)(s->H * s->qk));
    s->vx = c->be->alloc(t * (size_t)(s->H * s->vh));
    if (!s->kvl || !s->kvx || !s->kx || !s->vx) {
        free_expanded(c, s);
        return dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory expanding %d cached latents", T);
    }
    s->tcap = T;
    return DSQ_OK;
}

static void state_free(dsq_ctx *c, void *p)
{
    ds_state *s = p;
    if (!s) return;
    for (int64_t l = 0; l < c->m->arch.n_layers; l++) {
        if (s->cache) c->be->free(s->cache[l]);
        if (s->wk) c->be->free(s->wk[l]);
        if (s->wv) c->be->free(s->wv[l]);
    }
    free(s->cache);
    free(s->wk);
    free(s->wv);
    free_rows(c, s);
    free_expanded(c, s);
    free(s);
}

static int64_t max3(int64_t a, int64_t b, int64_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

static void set_shapes(const dsq_ctx *c, ds_state *s)
{
    const dsq_arch *a = &c->m->arch;
    s->H = a->n_heads, s->D = a->hidden_size, s->L = a->mla.kv_lora_rank, s->R = a->mla.qk_rope_head_dim;
    s->nope = a->mla.qk_nope_head_dim, s->vh = a->mla.v_head_dim, s->qk = s->nope + s->R, s->lr = s->L + s->R;
    s->ffn = max3(a->intermediate_size, a->moe.n_shared * a->moe.ffn, a->moe.ffn);
    double m = 1.0;
    if (a->rope_scaling == DSQ_ROPE_SCALING_YARN && a->mla.yarn_mscale_all_dim > 0)
        m = dsq_yarn_mscale(a->rope_factor, a->mla.yarn_mscale_all_dim);
    s->attn_scale = (float)(m * m / sqrt((double)s->qk));
    s->rope_q = c->rope;
    s->rope_q.head_stride = (int)s->qk;
    s->rope_k = c->rope;
}

static dsq_status state_new(dsq_ctx *c, void **out)
{
    ds_state *s = calloc(1, sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory");
    set_shapes(c, s);
    int64_t n_layers = c->m->arch.n_layers;
    dsq_status st = DSQ_OK;
    s->cache = calloc((size_t)n_layers, sizeof *s->cache);
    s->wk = calloc((size_t)n_layers, sizeof *s->wk);
    s->wv = calloc((size_t)n_layers, sizeof *s->wv);
    if (!s->cache || !s->wk || !s->wv) st = dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory");
    for (int64_t l = 0; st == DSQ_OK && l < n_layers; l++)
        if (!(s->cache[l] = c->be->alloc((size_t)c->n_seq * (size_t)c->n_ctx * (size_t)s->lr)))
            st = dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory for a latent KV cache of %d x %d positions (%.1f MiB)",
                          c->n_seq, c->n_ctx,
                          (double)c->n_seq * c->n_ctx * (double)s->lr * sizeof(float) * (double)n_layers / 1048576.0);
    if (st != DSQ_OK) {
        state_free(c, s);
        return st;
    }
    *out = s;
    return DSQ_OK;
}

/* ---- attention ---- */

/* The cache rows of sequence seq in layer l. */
static float *seq_cache(const dsq_ctx *c, const ds_state *s, int l, int seq)
{
    return s->cache[l] + (size_t)seq * (size_t)c->n_ctx * (size_t)s->lr;
}

/* q (n x H*qk) and the normed latent and rope key of every row; then per
 * segment the rope parts rotated at its positions and the latent and rope
 * key stored in its sequence's cache. */
static dsq_status project(dsq_ctx *c, ds_state *s, int l, const float *xn, const dsq_seg *sg, int ns, int n)
{
    const dsq_backend *be = c->be;
    if (c->m->arch.mla.q_lora_rank > 0) {
        DSQ_TRY(dsq_ctx_linear(c, l, DSQ_DS_Q_A, xn, s->qa, n));
        be->rmsnorm(&c->ex, s->qa, norm_w(c, l, DSQ_DS_NORM_QA), s->qa, n, c->m->arch.mla.q_lora_rank, eps(c));
        DSQ_TRY(dsq_ctx_linear(c, l, DSQ_DS_Q_B, s->qa, s->q, n));
    } else {
        DSQ_TRY(dsq_ctx_linear(c, l, DSQ_DS_Q, xn, s->q, n));
    }
    DSQ_TRY(dsq_ctx_linear(c, l, DSQ_DS_KV_A, xn, s->kva, n));
    be->copy_rows(s->lat, s->L, s->kva, s->lr, s->L, n);
    be->copy_rows(s->kr, s->R, s->kva + s->L, s->lr, s->R, n);
    be->rmsnorm(&c->ex, s->lat, norm_w(c, l, DSQ_DS_NORM_KVA), s->lat, n, s->L, eps(c));
    for (int i = 0, r0 = 0; i < ns; r0 += sg[i++].n) {
        const dsq_seg *g = &sg[i];
        float *kr = s->kr + (size_t)r0 * (size_t)s->R;
        be->rope(&c->ex, &s->rope_q, s->q + (size_t)r0 * (size_t)(s->H * s->qk) + s->nope, g->n, (int)s->H,
                 s->H * s->qk, g->pos0);
        be->rope(&c->ex, &s->rope_k, kr, g->n, 1, s->R, g->pos0);
        float *row = seq_cache(c, s, l, g->seq) + (size_t)g->pos0 * (size_t)s->lr;
        be->copy_rows(row, s->lr, s->lat + (size_t)r0 * (size_t)s->L, s->L, s->L, g->n);
        be->copy_rows(row + s->L, s->lr, kr, s->R, s->R, g->n);
    }
    return DSQ_OK;
}

static dsq_attn_shape shape_of(const ds_state *s, bool absorbed)
{
    dsq_attn_shape a = {(int)s->H, (int)s->H, (int)s->qk, 0, false, (int)s->vh, s->attn_scale, 0};
    if (absorbed) a = (dsq_attn_shape){(int)s->H, 1, (int)s->lr, 0, false, (int)s->L, s->attn_scale, s->lr};
    return a;
}

/* Keys and values of every cached position from their latents; the hook
 * sees kv_b's input of the new rows only. */
static dsq_status attend_expanded(dsq_ctx *c, ds_state *s, int l, const dsq_seg *g, int r0)
{
    const dsq_backend *be = c->be;
    int n = g->n, pos0 = g->pos0, T = pos0 + n;
    int64_t kvw = s->nope + s->vh;
    const float *cache = seq_cache(c, s, l, g->seq);
    DSQ_TRY(reserve_expanded(c, s, T));
    be->copy_rows(s->kvl, s->L, cache, s->lr, s->L, T);
    DSQ_TRY(dsq_ctx_hook(c, l, DSQ_DS_KV_B, -1, s->lat + (size_t)r0 * (size_t)s->L, n));
    DSQ_TRY_CTX(be->matmul(&c->ex, &c->m->layers[l].lin[DSQ_DS_KV_B], s->kvl, s->kvx, T), "layer %d, kv_b", l);
    for (int64_t h = 0; h < s->H; h++) {
        be->copy_rows(s->kx + h * s->qk, s->H * s->qk, s->kvx + h * kvw, s->H * kvw, s->nope, T);
        be->copy_rows(s->kx + h * s->qk + s->nope, s->H * s->qk, cache + s->L, s->lr, s->R, T);
        be->copy_rows(s->vx + h * s->vh, s->H * s->vh, s->kvx + h * kvw + s->nope, s->H * kvw, s->vh, T);
    }
    dsq_attn_shape sh = shape_of(s, false);
    return be->attention(&c->ex, &sh, s->q + (size_t)r0 * (size_t)(s->H * s->qk), s->kx, s->vx,
                         s->att + (size_t)r0 * (size_t)(s->H * s->vh), n, pos0);
}

/* Whether layer l has kv_b whole (HF) or only llama.cpp's split k_b / v_b (GGUF). */
static bool has_kv_b(const dsq_ctx *c, int l) { return c->m->layers[l].lin[DSQ_DS_KV_B].vt != NULL; }

/* GGUF: k_b is wk already, v_b is wv. */
static dsq_status absorb_split(dsq_ctx *c, ds_state *s, int l)
{
    const dsq_layer *L = &c->m->layers[l];
    float *wk = c->be->alloc((size_t)(s->H * s->L * s->nope)), *wv = c->be->alloc((size_t)(s->H * s->vh * s->L));
    if (!wk || !wv) {
        c->be->free(wk);
        c->be->free(wv);
        return dsq_fail(DSQ_ERR_NOMEM, "layer %d: out of memory for attn_k_b / attn_v_b", l);
    }
    L->k_b.vt->rows_f32(&L->k_b, 0, s->H * s->L, wk);
    L->v_b.vt->rows_f32(&L->v_b, 0, s->H * s->vh, wv);
    s->wk[l] = wk, s->wv[l] = wv;
    return DSQ_OK;
}

/* kv_b in F32, split per head for the absorbed form: wk[h] = W_k(h)^T
 * [L x nope], wv[h] = W_v(h) [vh x L]. */
static dsq_status absorb_weights(dsq_ctx *c, ds_state *s, int l)
{
    if (s->wk[l]) return DSQ_OK;
    if (!has_kv_b(c, l)) return absorb_split(c, s, l);
    const dsq_linear *W = &c->m->layers[l].lin[DSQ_DS_KV_B];
    int64_t kvw = s->nope + s->vh;
    float *rows = malloc((size_t)(s->H * kvw) * (size_t)s->L * sizeof *rows);
    float *wk = c->be->alloc((size_t)(s->H * s->L * s->nope)), *wv = c->be->alloc((size_t)(s->H * s->vh * s->L));
    if (!rows || !wk || !wv) {
        free(rows);
        c->be->free(wk);
        c->be->free(wv);
        return dsq_fail(DSQ_ERR_NOMEM, "layer %d: out of memory for kv_b's absorbed form", l);
    }
    W->vt->rows_f32(W, 0, s->H * kvw, rows);
    for (int64_t h = 0; h < s->H; h++) {
        const float *k = rows + h * kvw * s->L, *v = k + s->nope * s->L;
        float *kt = wk + h * s->L * s->nope;
        for (int64_t d = 0; d < s->nope; d++)
            for (int64_t j = 0; j < s->L; j++) kt[j * s->nope + d] = k[d * s->L + j];
        memcpy(wv + h * s->vh * s->L, v, (size_t)(s->vh * s->L) * sizeof *wv);
    }
    free(rows);
    s->wk[l] = wk, s->wv[l] = wv;
    return DSQ_OK;
}

static dsq_status attend_absorbed(dsq_ctx *c, ds_state *s, int l, const dsq_seg *g, int r0)
{
    const dsq_backend *be = c->be;
    int n = g->n;
    float *q = s->q + (size_t)r0 * (size_t)(s->H * s->qk), *qabs = s->qabs + (size_t)r0 * (size_t)(s->H * s->lr);
    float *olat = s->olat + (size_t)r0 * (size_t)(s->H * s->L);
    const float *cache = seq_cache(c, s, l, g->seq);
    DSQ_TRY(absorb_weights(c, s, l));
    DSQ_TRY(dsq_ctx_hook(c, l, DSQ_DS_KV_B, -1, s->lat + (size_t)r0 * (size_t)s->L, n));
    dsq_head_mm qk = {(int)s->H, s->L, s->nope, s->wk[l], s->L * s->nope, s->H * s->qk, s->qk, s->H * s->lr, s->lr};
    DSQ_TRY(be->head_matmul(&c->ex, &qk, q, qabs, n));
    for (int64_t h = 0; h < s->H; h++)
        be->copy_rows(qabs + h * s->lr + s->L, s->H * s->lr, q + h * s->qk + s->nope, s->H * s->qk, s->R, n);
    dsq_attn_shape sh = shape_of(s, true);
    DSQ_TRY(be->attention(&c->ex, &sh, qabs, cache, cache, olat, n, g->pos0));
    dsq_head_mm ov = {(int)s->H, s->vh, s->L, s->wv[l], s->vh * s->L, s->H * s->L, s->L, s->H * s->vh, s->vh};
    return be->head_matmul(&c->ex, &ov, olat, s->att + (size_t)r0 * (size_t)(s->H * s->vh), n);
}

static dsq_status attention_core(dsq_ctx *c, ds_state *s, int l, const float *xn, const dsq_seg *sg, int ns, int n)
{
    DSQ_TRY(project(c, s, l, xn, sg, ns, n));
    for (int i = 0, r0 = 0; i < ns; r0 += sg[i++].n) {
        /* a GGUF's split k_b / v_b serve the absorbed form only */
        if ((sg[i].n <= ABSORB_MAX_ROWS && sg[i].pos0 > 0) || !has_kv_b(c, l))
            DSQ_TRY(attend_absorbed(c, s, l, &sg[i], r0));
        else
            DSQ_TRY(attend_expanded(c, s, l, &sg[i], r0));
    }
    return DSQ_OK;
}

/* ---- MLP ---- */

/* silu(gate(x)) * up(x) into s->gate, then y = down(.) for the dense or shared MLP. */
static dsq_status swiglu_mlp(dsq_ctx *c, ds_state *s, int l, int g, int u, int d, const float *x, float *y, int n,
                             int64_t ffn)
{
    DSQ_TRY(dsq_ctx_linear(c, l, g, x, s->gate, n));
    DSQ_TRY(dsq_ctx_linear(c, l, u, x, s->up, n));
    c->be->swiglu(&c->ex, s->gate, s->up, s->gate, (size_t)n * (size_t)ffn);
    return dsq_ctx_linear(c, l, d, s->gate, y, n);
}

/* Expert e on the tokens routed to it: gathered, run once, weighted and added into acc. */
static dsq_status run_expert(dsq_ctx *c, ds_state *s, int l, int e, int n, const float *xn)
{
    const dsq_arch *a = &c->m->arch;
    int64_t K = a->moe.top_k;
    int cnt = 0;
    for (int t = 0; t < n; t++)
        for (int64_t j = 0; j < K; j++)
            if (s->idx[t * K + j] == e) {
                s->tok[cnt] = t;
                s->wt_e[cnt++] = s->wt[t * K + j];
            }
    if (cnt == 0) return DSQ_OK;
    const dsq_backend *be = c->be;
    be->gather_rows(s->ex_x, xn, s->tok, s->D, cnt);
    DSQ_TRY(dsq_ctx_expert_linear(c, l, DSQ_DS_EX_GATE, e, s->ex_x, s->gate, cnt));
    DSQ_TRY(dsq_ctx_expert_linear(c, l, DSQ_DS_EX_UP, e, s->ex_x, s->up, cnt));
    be->swiglu(&c->ex, s->gate, s->up, s->gate, (size_t)cnt * (size_t)a->moe.ffn);
    DSQ_TRY(dsq_ctx_expert_linear(c, l, DSQ_DS_EX_DOWN, e, s->gate, s->ex_y, cnt));
    be->scatter_add_rows(s->acc, s->ex_y, s->tok, s->wt_e, s->D, cnt);
    return DSQ_OK;
}

static dsq_status moe(dsq_ctx *c, ds_state *s, int l, const float *xn, int n)
{
    const dsq_arch *a = &c->m->arch;
    const dsq_backend *be = c->be;
    DSQ_TRY(dsq_ctx_linear_f32(c, l, DSQ_DS_ROUTER, xn, s->logits, n));
    DSQ_TRY(be->moe_route(&c->ex, &a->moe, s->logits, c->m->layers[l].router_bias, s->idx, s->wt, n));
    if (a->moe.n_shared > 0)
        DSQ_TRY(swiglu_mlp(c, s, l, DSQ_DS_SH_GATE, DSQ_DS_SH_UP, DSQ_DS_SH_DOWN, xn, s->acc, n,
                           a->moe.n_shared * a->moe.ffn));
    else
        memset(s->acc, 0, (size_t)n * (size_t)s->D * sizeof *s->acc);
    for (int e = 0; e < a->moe.n_routed; e++) DSQ_TRY(run_expert(c, s, l, e, n, xn));
    return DSQ_OK;
}

/* ---- the block ---- */

static dsq_status tail(dsq_ctx *c, int l, int h, const float *x, float *hidden, int n)
{
    ds_state *s = c->state;
    DSQ_TRY(reserve(c, s, n));
    DSQ_TRY(dsq_ctx_linear(c, l, h == HALF_ATTN ? DSQ_DS_O : DSQ_DS_DOWN, x, s->tmp, n));
    c->be->add(&c->ex, hidden, s->tmp, (size_t)n * (size_t)s->D);
    return DSQ_OK;
}

static dsq_status half(dsq_ctx *c, int l, int h, float *hidden, int n, int pos0)
{
    ds_state *s = c->state;
    DSQ_TRY(reserve(c, s, n));
    if (h == HALF_ATTN) {
        c->be->rmsnorm(&c->ex, hidden, norm_w(c, l, DSQ_DS_NORM_ATTN), s->xn, n, s->D, eps(c));
        int ns;
        const dsq_seg *sg = dsq_ctx_segs(c, n, pos0, &ns);
        DSQ_TRY(attention_core(c, s, l, s->xn, sg, ns, n));
        return tail(c, l, h, s->att, hidden, n);
    }
    c->be->rmsnorm(&c->ex, hidden, norm_w(c, l, DSQ_DS_NORM_FFN), s->xn, n, s->D, eps(c));
    if (!dsq_arch_layer_is_moe(&c->m->arch, l)) {
        DSQ_TRY(dsq_ctx_linear(c, l, DSQ_DS_GATE, s->xn, s->gate, n));
        DSQ_TRY(dsq_ctx_linear(c, l, DSQ_DS_UP, s->xn, s->up, n));
        c->be->swiglu(&c->ex, s->gate, s->up, s->gate, (size_t)n * (size_t)c->m->ffn_dim);
        return tail(c, l, h, s->gate, hidden, n);
    }
    DSQ_TRY(moe(c, s, l, s->xn, n));
    c->be->add(&c->ex, hidden, s->acc, (size_t)n * (size_t)s->D);
    return DSQ_OK;
}

/* The attention runs sequence by sequence (each at positions 0..); a dense
 * MLP on all rows at once. An MoE MLP has no tail product: its loss is
 * computed expert by expert (calibration/moe.c). */
static dsq_status tail_input(dsq_ctx *c, int l, int h, const float *xn, float *tx, float *work, int n_seq, int seqlen)
{
    ds_state *s = c->state;
    if (h == HALF_MLP && dsq_arch_layer_is_moe(&c->m->arch, l))
        return dsq_fail(DSQ_ERR_INTERNAL, "layer %d: an MoE MLP has no tail input", l);
    if (h == HALF_MLP) {
        int n = n_seq * seqlen;
        DSQ_TRY(dsq_ctx_linear(c, l, DSQ_DS_GATE, xn, tx, n));
        DSQ_TRY(dsq_ctx_linear(c, l, DSQ_DS_UP, xn, work, n));
        c->be->swiglu(&c->ex, tx, work, tx, (size_t)n * (size_t)c->m->arch.intermediate_size);
        return DSQ_OK;
    }
    DSQ_TRY(reserve(c, s, seqlen));
    size_t in = (size_t)seqlen * (size_t)s->D, out = (size_t)seqlen * (size_t)(s->H * s->vh);
    dsq_seg one = {0, 0, seqlen};
    for (int i = 0; i < n_seq; i++) {
        DSQ_TRY(attention_core(c, s, l, xn + (size_t)i * in, &one, 1, seqlen));
        c->be->copy(tx + (size_t)i * out, s->att, out);
    }
    return DSQ_OK;
}

static int64_t tail_work(const dsq_ctx *c, int h, int64_t n_tok)
{
    return h == HALF_MLP ? n_tok * c->m->arch.intermediate_size : 0;
}

const dsq_block_impl dsq_block_impl_deepseek2 = {&dsq_block_deepseek2, state_new, state_free, half, tail,
                                                 tail_input,           tail_work};
