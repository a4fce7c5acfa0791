#include "runtime/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "runtime/cpu/ops.h"

struct dsq_ctx {
    const dsq_model *m;
    int n_ctx, n_threads;
    dsq_rope rope;
    dsq_attn_shape attn;
    float **kcache, **vcache; /* per layer: n_ctx x kv_dim */
    /* Activation buffers for up to cap rows. */
    int cap;
    float *h, *xn, *q, *k, *v, *att, *gate, *up, *tmp;
    dsq_linear_hook_fn on_linear;
    dsq_layer_hook_fn on_layer;
    void *user;
    int hooks_off; /* while a NaN is being traced */
    dsq_matmul_mode matmul;
};

const dsq_model *dsq_ctx_model(const dsq_ctx *c) { return c->m; }
int dsq_ctx_n_ctx(const dsq_ctx *c) { return c->n_ctx; }

/* The attention shape carries the BF16 flag down to dsq_cpu_attention. */
static void set_matmul(dsq_ctx *c, dsq_matmul_mode mode)
{
    c->matmul = mode;
    c->attn.bf16 = mode == DSQ_MATMUL_BF16;
}

void dsq_ctx_set_llamacpp_act(dsq_ctx *c, bool llamacpp)
{
    set_matmul(c, llamacpp ? DSQ_MATMUL_LLAMACPP : DSQ_MATMUL_DEFAULT);
}

void dsq_ctx_set_bf16(dsq_ctx *c, bool bf16) { set_matmul(c, bf16 ? DSQ_MATMUL_BF16 : DSQ_MATMUL_DEFAULT); }

void dsq_ctx_set_hooks(dsq_ctx *c, dsq_linear_hook_fn on_linear, dsq_layer_hook_fn on_layer, void *user)
{
    c->on_linear = on_linear;
    c->on_layer = on_layer;
    c->user = user;
}

static void free_buffers(dsq_ctx *c)
{
    float **bufs[] = {&c->h, &c->xn, &c->q, &c->k, &c->v, &c->att, &c->gate, &c->up, &c->tmp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        free(*bufs[i]);
        *bufs[i] = NULL;
    }
    c->cap = 0;
}

/* Grows the activation buffers to n rows. */
static dsq_status reserve(dsq_ctx *c, int n)
{
    if (n <= c->cap) return DSQ_OK;
    free_buffers(c);
    const dsq_model *m = c->m;
    size_t rows = (size_t)n;
    struct {
        float **p;
        int64_t w;
    } want[] = {{&c->h, m->dim},      {&c->xn, m->dim},        {&c->q, m->q_dim},
                {&c->k, m->kv_dim},   {&c->v, m->kv_dim},      {&c->att, m->q_dim},
                {&c->gate, m->ffn_dim}, {&c->up, m->ffn_dim}, {&c->tmp, m->dim}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        *want[i].p = malloc(rows * (size_t)want[i].w * sizeof(float));
        if (!*want[i].p) {
            free_buffers(c);
            return dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory for %d rows of activations", n);
        }
    }
    c->cap = n;
    return DSQ_OK;
}

dsq_status dsq_ctx_new(const dsq_model *m, int n_ctx, int n_threads, dsq_ctx **out)
{
    *out = NULL;
    if (n_ctx <= 0) return dsq_fail(DSQ_ERR_ARG, "context size must be positive, not %d", n_ctx);
    dsq_ctx *c = calloc(1, sizeof *c);
    if (!c) return dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory");
    c->m = m;
    c->n_ctx = n_ctx;
    c->n_threads = n_threads;
    c->attn = (dsq_attn_shape){(int)m->arch.n_heads, (int)m->arch.n_kv_heads, (int)m->arch.head_dim,
                               (int)m->arch.sliding_window, false};
    dsq_status s = dsq_rope_init(&c->rope, &m->arch, m->rope_layout, m->rope_freq_factors);
    int64_t L = m->arch.n_layers;
    if (s == DSQ_OK) {
        c->kcache = calloc((size_t)L, sizeof *c->kcache);
        c->vcache = calloc((size_t)L, sizeof *c->vcache);
        if (!c->kcache || !c->vcache) s = dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory");
    }
    size_t per = (size_t)n_ctx * (size_t)m->kv_dim * sizeof(float);
    for (int64_t l = 0; s == DSQ_OK && l < L; l++) {
        c->kcache[l] = malloc(per);
        c->vcache[l] = malloc(per);
        if (!c->kcache[l] || !c->vcache[l])
            s = dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory for a KV cache of %d positions (%.1f MiB)", n_ctx,
                         2.0 * (double)per * (double)L / 1048576.0);
    }
    if (s != DSQ_OK) {
        dsq_ctx_free(c);
        return s;
    }
    *out = c;
    return DSQ_OK;
}

void dsq_ctx_free(dsq_ctx *c)
{
    if (!c) return;
    for (int64_t l = 0; c->kcache && l < c->m->arch.n_layers; l++) free(c->kcache[l]);
    for (int64_t l = 0; c->vcache && l < c->m->arch.n_layers; l++) free(c->vcache[l]);
    free(c->kcache);
    free(c->vcache);
    free_buffers(c);
    dsq_rope_free(&c->rope);
    free(c);
}

static dsq_status check_range(const dsq_ctx *c, int n, int pos0)
{
    if (n <= 0 || pos0 < 0 || pos0 > c->n_ctx - n)
        return dsq_fail(DSQ_ERR_ARG, "forward: %d tokens at position %d do not fit a context of %d", n, pos0, c->n_ctx);
    return DSQ_OK;
}

static dsq_status linear(dsq_ctx *c, int layer, dsq_linear_id id, const float *x, float *y, int n)
{
    const dsq_linear *W = &c->m->layers[layer].lin[id];
    if (c->on_linear && !c->hooks_off) DSQ_TRY(c->on_linear(c->user, layer, id, x, n, W->in));
    dsq_status s = dsq_cpu_matmul(W, x, y, n, c->matmul);
    if (s != DSQ_OK) return dsq_fail_context(s, "layer %d, %s", layer, dsq_linear_id_name(id));
    return DSQ_OK;
}

static dsq_status attn_output(dsq_ctx *c, int l, const float *att, float *h, int n)
{
    DSQ_TRY(linear(c, l, DSQ_LIN_O, att, c->tmp, n));
    dsq_cpu_add(h, c->tmp, (size_t)n * (size_t)c->m->dim);
    return DSQ_OK;
}

static dsq_status attention_block(dsq_ctx *c, int l, float *h, int n, int pos0)
{
    const dsq_model *m = c->m;
    dsq_cpu_rmsnorm(h, m->layers[l].attn_norm, c->xn, n, m->dim, (float)m->arch.rms_norm_eps);
    DSQ_TRY(linear(c, l, DSQ_LIN_Q, c->xn, c->q, n));
    DSQ_TRY(linear(c, l, DSQ_LIN_K, c->xn, c->k, n));
    DSQ_TRY(linear(c, l, DSQ_LIN_V, c->xn, c->v, n));
    dsq_cpu_rope(&c->rope, c->q, n, c->attn.n_heads, m->q_dim, pos0);
    dsq_cpu_rope(&c->rope, c->k, n, c->attn.n_kv_heads, m->kv_dim, pos0);
    size_t kvb = (size_t)n * (size_t)m->kv_dim * sizeof(float);
    memcpy(c->kcache[l] + (size_t)pos0 * (size_t)m->kv_dim, c->k, kvb);
    memcpy(c->vcache[l] + (size_t)pos0 * (size_t)m->kv_dim, c->v, kvb);
    DSQ_TRY(dsq_cpu_attention(&c->attn, c->q, c->kcache[l], c->vcache[l], c->att, n, pos0));
    return attn_output(c, l, c->att, h, n);
}

static dsq_status mlp_block(dsq_ctx *c, int l, float *h, int n)
{
    const dsq_model *m = c->m;
    dsq_cpu_rmsnorm(h, m->layers[l].ffn_norm, c->xn, n, m->dim, (float)m->arch.rms_norm_eps);
    DSQ_TRY(linear(c, l, DSQ_LIN_GATE, c->xn, c->gate, n));
    DSQ_TRY(linear(c, l, DSQ_LIN_UP, c->xn, c->up, n));
    if (c->matmul == DSQ_MATMUL_BF16) dsq_cpu_swiglu_fast(c->gate, c->up, c->gate, (size_t)n * (size_t)m->ffn_dim);
    else dsq_cpu_swiglu(c->gate, c->up, c->gate, (size_t)n * (size_t)m->ffn_dim);
    DSQ_TRY(linear(c, l, DSQ_LIN_DOWN, c->gate, c->tmp, n));
    dsq_cpu_add(h, c->tmp, (size_t)n * (size_t)m->dim);
    return DSQ_OK;
}

static void use_threads(const dsq_ctx *c)
{
    if (c->n_threads > 0) dsq_cpu_set_threads(c->n_threads);
}

static dsq_status layer_call(dsq_ctx *c, int layer, int n, int pos0)
{
    DSQ_TRY(check_range(c, n, pos0));
    if (layer < 0 || layer >= c->m->arch.n_layers)
        return dsq_fail(DSQ_ERR_ARG, "forward: layer %d of %lld", layer, (long long)c->m->arch.n_layers);
    use_threads(c);
    return reserve(c, n);
}

dsq_status dsq_forward_attn(dsq_ctx *c, int layer, float *hidden, int n, int pos0)
{
    DSQ_TRY(layer_call(c, layer, n, pos0));
    return attention_block(c, layer, hidden, n, pos0);
}

dsq_status dsq_forward_mlp(dsq_ctx *c, int layer, float *hidden, int n)
{
    DSQ_TRY(layer_call(c, layer, n, 0));
    return mlp_block(c, layer, hidden, n);
}

dsq_status dsq_forward_attn_output(dsq_ctx *c, int layer, const float *att, float *hidden, int n)
{
    DSQ_TRY(layer_call(c, layer, n, 0));
    return attn_output(c, layer, att, hidden, n);
}

dsq_status dsq_forward_layer(dsq_ctx *c, int layer, float *hidden, int n, int pos0)
{
    DSQ_TRY(layer_call(c, layer, n, pos0));
    DSQ_TRY(attention_block(c, layer, hidden, n, pos0));
    DSQ_TRY(mlp_block(c, layer, hidden, n));
    if (c->on_layer && !c->hooks_off) DSQ_TRY(c->on_layer(c->user, layer, hidden, n, c->m->dim));
    return DSQ_OK;
}

dsq_status dsq_forward_embed(dsq_ctx *c, const int32_t *tokens, int n, float *hidden)
{
    use_threads(c);
    return dsq_cpu_embed(&c->m->tok_embd, tokens, n, hidden);
}

dsq_status dsq_forward_head(dsq_ctx *c, const float *hidden, int n, float *logits)
{
    const dsq_model *m = c->m;
    use_threads(c);
    DSQ_TRY(reserve(c, n));
    dsq_cpu_rmsnorm(hidden, m->output_norm, c->xn, n, m->dim, (float)m->arch.rms_norm_eps);
    dsq_status s = dsq_cpu_matmul(&m->output, c->xn, logits, n, c->matmul);
    if (s != DSQ_OK) return dsq_fail_context(s, "output head");
    return DSQ_OK;
}

/* Index of the first non-finite value, or -1. */
static int64_t first_nonfinite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (int64_t)i;
    return -1;
}

static dsq_status run_layers(dsq_ctx *c, const int32_t *tokens, int n, int pos0, bool check, int *bad_layer)
{
    const dsq_model *m = c->m;
    size_t hn = (size_t)n * (size_t)m->dim;
    DSQ_TRY(dsq_forward_embed(c, tokens, n, c->h));
    if (check && first_nonfinite(c->h, hn) >= 0) {
        *bad_layer = -1;
        return DSQ_OK;
    }
    for (int l = 0; l < m->arch.n_layers; l++) {
        DSQ_TRY(dsq_forward_layer(c, l, c->h, n, pos0));
        if (check && first_nonfinite(c->h, hn) >= 0) {
            *bad_layer = l;
            return DSQ_OK;
        }
    }
    return DSQ_OK;
}

/* Logits were not finite: run again checking every layer's output. Same
 * inputs, so the cache ends up as it was. */
static dsq_status trace_nan(dsq_ctx *c, const int32_t *tokens, int n, int pos0, int64_t row, int64_t col)
{
    int bad = -2;
    c->hooks_off = 1;
    dsq_status s = run_layers(c, tokens, n, pos0, true, &bad);
    c->hooks_off = 0;
    DSQ_TRY(s);
    int64_t at = bad == -2 ? -1 : first_nonfinite(c->h, (size_t)n * (size_t)c->m->dim);
    if (bad == -1)
        return dsq_fail(DSQ_ERR_NUMERIC, "non-finite value in the token embeddings (row %lld)",
                        (long long)(at / c->m->dim));
    if (bad >= 0)
        return dsq_fail(DSQ_ERR_NUMERIC, "non-finite hidden state first appears after decoder layer %d (position %lld)",
                        bad, (long long)(pos0 + at / c->m->dim));
    return dsq_fail(DSQ_ERR_NUMERIC,
                    "non-finite logit (position %lld, token %lld) while every decoder layer's output is finite: "
                    "the final norm or the output head overflowed",
                    (long long)(pos0 + row), (long long)col);
}

dsq_status dsq_forward_range(dsq_ctx *c, const int32_t *tokens, int n, int pos0, int first_out, float *logits)
{
    DSQ_TRY(check_range(c, n, pos0));
    if (first_out < 0 || first_out >= n)
        return dsq_fail(DSQ_ERR_ARG, "forward: first output row %d outside [0, %d)", first_out, n);
    DSQ_TRY(reserve(c, n));
    int unused;
    DSQ_TRY(run_layers(c, tokens, n, pos0, false, &unused));
    if (!logits) return DSQ_OK;
    int n_out = n - first_out;
    DSQ_TRY(dsq_forward_head(c, c->h + (size_t)first_out * (size_t)c->m->dim, n_out, logits));
    int64_t bad = first_nonfinite(logits, (size_t)n_out * (size_t)c->m->vocab);
    if (bad >= 0) return trace_nan(c, tokens, n, pos0, first_out + bad / c->m->vocab, bad % c->m->vocab);
    return DSQ_OK;
}

dsq_status dsq_forward(dsq_ctx *c, const int32_t *tokens, int n, int pos0, float *logits)
{
    return dsq_forward_range(c, tokens, n, pos0, 0, logits);
}
