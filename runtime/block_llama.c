/* The Llama block's forward (formats/block_llama.c describes it): RMSNorm,
 * q/k/v, RoPE, causal GQA over an F32 KV cache, o_proj, residual; RMSNorm,
 * gate/up, SwiGLU, down, residual. Qwen2 is the same block with biases.
 * Every op runs through the context's backend; one op per line. */
#include <stdlib.h>
#include <string.h>

#include "formats/block_llama.h"
#include "runtime/ctx_internal.h"

enum { HALF_ATTN = 0, HALF_MLP = 1 };

typedef struct llama_state {
    dsq_attn_shape attn;
    float **kcache, **vcache; /* per layer: n_seq x n_ctx x kv width */
    int64_t kw, vw;           /* key and value widths of a cache row */
    /* activation buffers for up to cap rows */
    int cap;
    float *xn, *q, *k, *v, *att, *gate, *up, *tmp;
} llama_state;

static void free_buffers(dsq_ctx *c, llama_state *s)
{
    float **bufs[] = {&s->xn, &s->q, &s->k, &s->v, &s->att, &s->gate, &s->up, &s->tmp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        c->be->free(*bufs[i]);
        *bufs[i] = NULL;
    }
    s->cap = 0;
}

/* Grows the activation buffers to n rows. */
static dsq_status reserve(dsq_ctx *c, llama_state *s, int n)
{
    if (n <= s->cap) return DSQ_OK;
    free_buffers(c, s);
    const dsq_model *m = c->m;
    size_t rows = (size_t)n;
    struct {
        float **p;
        int64_t w;
    } want[] = {{&s->xn, m->dim},        {&s->q, m->q_dim},     {&s->k, s->kw},     {&s->v, s->vw},
                {&s->att, m->q_dim},     {&s->gate, m->ffn_dim}, {&s->up, m->ffn_dim}, {&s->tmp, m->dim}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!(*want[i].p = c->be->alloc(rows * (size_t)want[i].w))) {
            free_buffers(c, s);
            return dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory for %d rows of activations", n);
        }
    }
    s->cap = n;
    return DSQ_OK;
}

static void state_free(dsq_ctx *c, void *p)
{
    llama_state *s = p;
    if (!s) return;
    for (int64_t l = 0; s->kcache && l < c->m->arch.n_layers; l++) c->be->free(s->kcache[l]);
    for (int64_t l = 0; s->vcache && l < c->m->arch.n_layers; l++) c->be->free(s->vcache[l]);
    free(s->kcache);
    free(s->vcache);
    free_buffers(c, s);
    free(s);
}

static dsq_status state_new(dsq_ctx *c, void **out)
{
    const dsq_model *m = c->m;
    llama_state *s = calloc(1, sizeof *s);
    if (!s) return dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory");
    const dsq_arch *a = &m->arch;
    s->attn = (dsq_attn_shape){(int)a->n_heads, (int)a->n_kv_heads, (int)a->head_dim, (int)a->sliding_window, false,
                               (int)a->head_dim, 0.0f, 0};
    s->kw = dsq_block_dim(a, DSQ_DIM_K);
    s->vw = dsq_block_dim(a, DSQ_DIM_V);
    int64_t L = a->n_layers;
    dsq_status st = DSQ_OK;
    s->kcache = calloc((size_t)L, sizeof *s->kcache);
    s->vcache = calloc((size_t)L, sizeof *s->vcache);
    if (!s->kcache || !s->vcache) st = dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory");
    for (int64_t l = 0; st == DSQ_OK && l < L; l++) {
        size_t pos = (size_t)c->n_seq * (size_t)c->n_ctx;
        s->kcache[l] = c->be->alloc(pos * (size_t)s->kw);
        s->vcache[l] = c->be->alloc(pos * (size_t)s->vw);
        if (!s->kcache[l] || !s->vcache[l])
            st = dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory for a KV cache of %zu positions (%.1f MiB)", pos,
                          (double)pos * (double)(s->kw + s->vw) * sizeof(float) * (double)L / 1048576.0);
    }
    if (st != DSQ_OK) {
        state_free(c, s);
        return st;
    }
    *out = s;
    return DSQ_OK;
}

static const float *norm_w(const dsq_ctx *c, int l, int i) { return c->m->layers[l].norm[i]; }

static float eps(const dsq_ctx *c) { return (float)c->m->arch.rms_norm_eps; }

/* One segment's rows (from row r0): rotated at its positions, stored in its
 * sequence's cache, attending over that cache. */
static dsq_status attend_segment(dsq_ctx *c, llama_state *s, int l, const dsq_seg *g, int r0)
{
    const dsq_model *m = c->m;
    float *q = s->q + (size_t)r0 * (size_t)m->q_dim, *k = s->k + (size_t)r0 * (size_t)s->kw;
    size_t base = (size_t)g->seq * (size_t)c->n_ctx;
    float *kc = s->kcache[l] + base * (size_t)s->kw, *vc = s->vcache[l] + base * (size_t)s->vw;
    c->be->rope(&c->ex, &c->rope, q, g->n, s->attn.n_heads, m->q_dim, g->pos0);
    c->be->rope(&c->ex, &c->rope, k, g->n, s->attn.n_kv_heads, s->kw, g->pos0);
    c->be->copy(kc + (size_t)g->pos0 * (size_t)s->kw, k, (size_t)g->n * (size_t)s->kw);
    c->be->copy(vc + (size_t)g->pos0 * (size_t)s->vw, s->v + (size_t)r0 * (size_t)s->vw, (size_t)g->n * (size_t)s->vw);
    return c->be->attention(&c->ex, &s->attn, q, kc, vc, s->att + (size_t)r0 * (size_t)m->q_dim, g->n, g->pos0);
}

/* q, k, v of xn (every segment's rows together), then each segment's
 * attention into s->att. */
static dsq_status attention_core(dsq_ctx *c, llama_state *s, int l, const float *xn, const dsq_seg *sg, int ns, int n)
{
    DSQ_TRY(dsq_ctx_linear(c, l, DSQ_LLAMA_Q, xn, s->q, n));
    DSQ_TRY(dsq_ctx_linear(c, l, DSQ_LLAMA_K, xn, s->k, n));
    DSQ_TRY(dsq_ctx_linear(c, l, DSQ_LLAMA_V, xn, s->v, n));
    for (int i = 0, r0 = 0; i < ns; r0 += sg[i++].n) DSQ_TRY(attend_segment(c, s, l, &sg[i], r0));
    return DSQ_OK;
}

/* hidden += W x for the tail linear of half h. */
static dsq_status tail(dsq_ctx *c, int l, int h, const float *x, float *hidden, int n)
{
    llama_state *s = c->state;
    DSQ_TRY(reserve(c, s, n));
    DSQ_TRY(dsq_ctx_linear(c, l, h == HALF_ATTN ? DSQ_LLAMA_O : DSQ_LLAMA_DOWN, x, s->tmp, n));
    c->be->add(&c->ex, hidden, s->tmp, (size_t)n * (size_t)c->m->dim);
    return DSQ_OK;
}

/* silu(gate(xn)) * up(xn) into gate. */
static dsq_status mlp_core(dsq_ctx *c, int l, const float *xn, float *gate, float *up, int n)
{
    DSQ_TRY(dsq_ctx_linear(c, l, DSQ_LLAMA_GATE, xn, gate, n));
    DSQ_TRY(dsq_ctx_linear(c, l, DSQ_LLAMA_UP, xn, up, n));
    c->be->swiglu(&c->ex, gate, up, gate, (size_t)n * (size_t)c->m->ffn_dim);
    return DSQ_OK;
}

static dsq_status half(dsq_ctx *c, int l, int h, float *hidden, int n, int pos0)
{
    llama_state *s = c->state;
    const dsq_model *m = c->m;
    DSQ_TRY(reserve(c, s, n));
    if (h == HALF_ATTN) {
        c->be->rmsnorm(&c->ex, hidden, norm_w(c, l, DSQ_LLAMA_NORM_ATTN), s->xn, n, m->dim, eps(c));
        int ns;
        const dsq_seg *sg = dsq_ctx_segs(c, n, pos0, &ns);
        DSQ_TRY(attention_core(c, s, l, s->xn, sg, ns, n));
        return tail(c, l, h, s->att, hidden, n);
    }
    c->be->rmsnorm(&c->ex, hidden, norm_w(c, l, DSQ_LLAMA_NORM_FFN), s->xn, n, m->dim, eps(c));
    DSQ_TRY(mlp_core(c, l, s->xn, s->gate, s->up, n));
    return tail(c, l, h, s->gate, hidden, n);
}

static int64_t tail_work(const dsq_ctx *c, int h, int64_t n_tok)
{
    return h == HALF_MLP ? n_tok * c->m->ffn_dim : 0;
}

/* The attention runs sequence by sequence (each at positions 0..); the MLP
 * on all rows at once (its products see no positions). */
static dsq_status tail_input(dsq_ctx *c, int l, int h, const float *xn, float *tx, float *work, int n_seq, int seqlen)
{
    llama_state *s = c->state;
    if (h == HALF_MLP) return mlp_core(c, l, xn, tx, work, n_seq * seqlen);
    DSQ_TRY(reserve(c, s, seqlen));
    size_t in = (size_t)seqlen * (size_t)c->m->dim, out = (size_t)seqlen * (size_t)c->m->q_dim;
    dsq_seg one = {0, 0, seqlen};
    for (int i = 0; i < n_seq; i++) {
        DSQ_TRY(attention_core(c, s, l, xn + (size_t)i * in, &one, 1, seqlen));
        c->be->copy(tx + (size_t)i * out, s->att, out);
    }
    return DSQ_OK;
}

const dsq_block_impl dsq_block_impl_llama = {&dsq_block_llama, state_new, state_free, half, tail, tail_input, tail_work};
const dsq_block_impl dsq_block_impl_qwen2 = {&dsq_block_qwen2, state_new, state_free, half, tail, tail_input, tail_work};
