#include "runtime/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ctx_internal.h"

#define ROPE_TABLE_MAX_POS 8192 /* positions whose rotation angles are tabulated */

const dsq_model *dsq_ctx_model(const dsq_ctx *c) { return c->m; }
int dsq_ctx_n_ctx(const dsq_ctx *c) { return c->n_ctx; }
int dsq_ctx_n_seq(const dsq_ctx *c) { return c->n_seq; }

const dsq_seg *dsq_ctx_segs(dsq_ctx *c, int n, int pos0, int *n_segs)
{
    if (c->segs) {
        *n_segs = c->n_segs;
        return c->segs;
    }
    c->one = (dsq_seg){0, pos0, n};
    *n_segs = 1;
    return &c->one;
}
const dsq_backend *dsq_ctx_backend(const dsq_ctx *c) { return c->be; }

void dsq_ctx_set_matmul(dsq_ctx *c, dsq_matmul_mode mode) { c->ex.mode = mode; }

dsq_matmul_mode dsq_ctx_matmul_mode(const dsq_ctx *c) { return c->ex.mode; }

void dsq_ctx_set_hooks(dsq_ctx *c, dsq_linear_hook_fn on_linear, dsq_layer_hook_fn on_layer, void *user)
{
    c->on_linear = on_linear;
    c->on_layer = on_layer;
    c->user = user;
}

/* Grows the residual-stream buffer of dsq_forward to n rows. */
static dsq_status reserve(dsq_ctx *c, int n)
{
    if (n <= c->cap) return DSQ_OK;
    c->be->free(c->h);
    c->cap = 0;
    if (!(c->h = c->be->alloc((size_t)n * (size_t)c->m->dim)))
        return dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory for %d rows of activations", n);
    c->cap = n;
    return DSQ_OK;
}

dsq_status dsq_ctx_new_seqs(const dsq_model *m, const dsq_backend *be, int n_ctx, int n_seq, int n_threads,
                            dsq_ctx **out)
{
    *out = NULL;
    if (n_ctx <= 0) return dsq_fail(DSQ_ERR_ARG, "context size must be positive, not %d", n_ctx);
    if (n_seq <= 0 || (int64_t)n_seq * n_ctx > INT32_MAX)
        return dsq_fail(DSQ_ERR_ARG, "forward: %d sequences of %d positions", n_seq, n_ctx);
    const dsq_block_impl *impl = dsq_block_impl_of(m->block);
    if (!impl) return dsq_fail(DSQ_ERR_UNSUPPORTED, "forward: no block implementation for %s", m->block->name);
    dsq_ctx *c = calloc(1, sizeof *c);
    if (!c) return dsq_fail(DSQ_ERR_NOMEM, "forward: out of memory");
    c->m = m;
    c->be = be;
    c->impl = impl;
    c->n_ctx = n_ctx;
    c->n_seq = n_seq;
    c->ex.threads = n_threads;
    /* MLA rotates only qk_rope_head_dim of each query/key head */
    dsq_arch ra = m->arch;
    if (ra.family == DSQ_ARCH_DEEPSEEK2) ra.head_dim = ra.mla.qk_rope_head_dim;
    dsq_status s = dsq_rope_init(&c->rope, &ra, m->rope_layout, m->rope_freq_factors);
    /* the angles of the context's positions, up to a table of a few MiB */
    if (s == DSQ_OK) s = dsq_rope_table(&c->rope, n_ctx < ROPE_TABLE_MAX_POS ? n_ctx : ROPE_TABLE_MAX_POS);
    if (s == DSQ_OK) s = impl->state_new(c, &c->state);
    if (s != DSQ_OK) {
        dsq_ctx_free(c);
        return s;
    }
    *out = c;
    return DSQ_OK;
}

dsq_status dsq_ctx_new_on(const dsq_model *m, const dsq_backend *be, int n_ctx, int n_threads, dsq_ctx **out)
{
    return dsq_ctx_new_seqs(m, be, n_ctx, 1, n_threads, out);
}

dsq_status dsq_ctx_new(const dsq_model *m, int n_ctx, int n_threads, dsq_ctx **out)
{
    return dsq_ctx_new_on(m, &dsq_backend_cpu, n_ctx, n_threads, out);
}

void dsq_ctx_free(dsq_ctx *c)
{
    if (!c) return;
    if (c->state) c->impl->state_free(c, c->state);
    c->be->free(c->h);
    c->be->free(c->hn);
    dsq_rope_free(&c->rope);
    free(c);
}

static dsq_status check_range(const dsq_ctx *c, int n, int pos0)
{
    if (n <= 0 || pos0 < 0 || pos0 > c->n_ctx - n)
        return dsq_fail(DSQ_ERR_ARG, "forward: %d tokens at position %d do not fit a context of %d", n, pos0, c->n_ctx);
    return DSQ_OK;
}

dsq_status dsq_ctx_linear(dsq_ctx *c, int layer, int id, const float *x, float *y, int n)
{
    const dsq_linear *W = &c->m->layers[layer].lin[id];
    if (c->on_linear && !c->hooks_off) DSQ_TRY(c->on_linear(c->user, layer, id, -1, x, n, W->in));
    dsq_status s = c->be->matmul(&c->ex, W, x, y, n);
    if (s != DSQ_OK) return dsq_fail_context(s, "layer %d, %s", layer, dsq_model_linear_role(c->m, id));
    return DSQ_OK;
}

dsq_status dsq_ctx_hook(dsq_ctx *c, int layer, int id, int expert, const float *x, int n)
{
    if (!c->on_linear || c->hooks_off) return DSQ_OK;
    const dsq_linear *W = expert >= 0 ? &c->m->layers[layer].experts[id][expert] : &c->m->layers[layer].lin[id];
    return c->on_linear(c->user, layer, id, expert, x, n, W->in);
}

dsq_status dsq_ctx_expert_linear(dsq_ctx *c, int layer, int id, int e, const float *x, float *y, int n)
{
    DSQ_TRY(dsq_ctx_hook(c, layer, id, e, x, n));
    dsq_status s = c->be->matmul(&c->ex, &c->m->layers[layer].experts[id][e], x, y, n);
    if (s != DSQ_OK) return dsq_fail_context(s, "layer %d, %s, expert %d", layer, dsq_model_linear_role(c->m, id), e);
    return DSQ_OK;
}

dsq_status dsq_ctx_linear_f32(dsq_ctx *c, int layer, int id, const float *x, float *y, int n)
{
    DSQ_TRY(dsq_ctx_hook(c, layer, id, -1, x, n));
    dsq_exec ex = c->ex;
    ex.mode = DSQ_MATMUL_DEFAULT;
    dsq_status s = c->be->matmul(&ex, &c->m->layers[layer].lin[id], x, y, n);
    if (s != DSQ_OK) return dsq_fail_context(s, "layer %d, %s", layer, dsq_model_linear_role(c->m, id));
    return DSQ_OK;
}

dsq_status dsq_ctx_matmul_f32(dsq_ctx *c, const dsq_linear *W, const float *x, float *y, int n)
{
    dsq_exec ex = c->ex;
    ex.mode = DSQ_MATMUL_DEFAULT;
    return c->be->matmul(&ex, W, x, y, n);
}

void dsq_ctx_rmsnorm(dsq_ctx *c, const float *x, const float *w, float *y, int n, int64_t dim)
{
    c->be->rmsnorm(&c->ex, x, w, y, n, dim, (float)c->m->arch.rms_norm_eps);
}

void dsq_ctx_swiglu(dsq_ctx *c, const float *gate, const float *up, float *out, size_t n)
{
    c->be->swiglu(&c->ex, gate, up, out, n);
}

dsq_status dsq_ctx_moe_route(dsq_ctx *c, const dsq_arch_moe *m, const float *logits, const float *bias, int32_t *idx,
                             float *wt, int n)
{
    return c->be->moe_route(&c->ex, m, logits, bias, idx, wt, n);
}

dsq_status dsq_ctx_matmul(dsq_ctx *c, const dsq_linear *W, const float *x, float *y, int n)
{
    return c->be->matmul(&c->ex, W, x, y, n);
}

static dsq_status layer_call(dsq_ctx *c, int layer, int n, int pos0)
{
    DSQ_TRY(check_range(c, n, pos0));
    if (layer < 0 || layer >= c->m->arch.n_layers)
        return dsq_fail(DSQ_ERR_ARG, "forward: layer %d of %lld", layer, (long long)c->m->arch.n_layers);
    return DSQ_OK;
}

static dsq_status half_call(dsq_ctx *c, int layer, int half, int n, int pos0)
{
    DSQ_TRY(layer_call(c, layer, n, pos0));
    if (half < 0 || half >= c->m->block->n_halves)
        return dsq_fail(DSQ_ERR_ARG, "forward: half %d of a %d-half block", half, c->m->block->n_halves);
    return DSQ_OK;
}

dsq_status dsq_forward_half(dsq_ctx *c, int layer, int half, float *hidden, int n, int pos0)
{
    DSQ_TRY(half_call(c, layer, half, n, pos0));
    return c->impl->half(c, layer, half, hidden, n, pos0);
}

dsq_status dsq_forward_tail(dsq_ctx *c, int layer, int half, const float *x, float *hidden, int n)
{
    DSQ_TRY(half_call(c, layer, half, n, 0));
    return c->impl->tail(c, layer, half, x, hidden, n);
}

int64_t dsq_forward_tail_work(const dsq_ctx *c, int half, int64_t n_tok) { return c->impl->tail_work(c, half, n_tok); }

dsq_status dsq_forward_tail_input(dsq_ctx *c, int layer, int half, const float *xn, float *tx, float *work, int n_seq,
                                  int seqlen)
{
    DSQ_TRY(half_call(c, layer, half, seqlen, 0));
    if (n_seq <= 0) return dsq_fail(DSQ_ERR_ARG, "forward: %d sequences", n_seq);
    return c->impl->tail_input(c, layer, half, xn, tx, work, n_seq, seqlen);
}

/* Both halves and the layer hook; the rows are the batch's segments, or n at pos0. */
static dsq_status layer_run(dsq_ctx *c, int layer, float *hidden, int n, int pos0)
{
    for (int h = 0; h < c->m->block->n_halves; h++) DSQ_TRY(c->impl->half(c, layer, h, hidden, n, pos0));
    if (c->on_layer && !c->hooks_off) DSQ_TRY(c->on_layer(c->user, layer, hidden, n, c->m->dim));
    return DSQ_OK;
}

dsq_status dsq_forward_layer(dsq_ctx *c, int layer, float *hidden, int n, int pos0)
{
    DSQ_TRY(layer_call(c, layer, n, pos0));
    return layer_run(c, layer, hidden, n, pos0);
}

dsq_status dsq_forward_embed(dsq_ctx *c, const int32_t *tokens, int n, float *hidden)
{
    return c->be->embed(&c->ex, &c->m->tok_embd, tokens, n, hidden);
}

dsq_status dsq_forward_head(dsq_ctx *c, const float *hidden, int n, float *logits)
{
    const dsq_model *m = c->m;
    if (n > c->hcap) {
        c->be->free(c->hn);
        c->hcap = 0;
        if (!(c->hn = c->be->alloc((size_t)n * (size_t)m->dim)))
            return dsq_fail(DSQ_ERR_NOMEM, "output head: out of memory for %d rows", n);
        c->hcap = n;
    }
    c->be->rmsnorm(&c->ex, hidden, m->output_norm, c->hn, n, m->dim, (float)m->arch.rms_norm_eps);
    dsq_status s = c->be->matmul(&c->ex, &m->output, c->hn, logits, n);
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
        DSQ_TRY(layer_run(c, l, c->h, n, pos0));
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
    c->segs = NULL;
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

/* Segments in range, each sequence at most once; output rows increasing. */
static dsq_status check_batch(const dsq_ctx *c, const dsq_seg *sg, int ns, const int *out_rows, int n_out, int *n)
{
    if (ns <= 0) return dsq_fail(DSQ_ERR_ARG, "forward: a batch of %d segments", ns);
    int64_t total = 0;
    for (int i = 0; i < ns; i++) {
        if (sg[i].seq < 0 || sg[i].seq >= c->n_seq)
            return dsq_fail(DSQ_ERR_ARG, "forward: sequence %d of %d", sg[i].seq, c->n_seq);
        if (sg[i].n <= 0 || sg[i].pos0 < 0 || sg[i].pos0 > c->n_ctx - sg[i].n)
            return dsq_fail(DSQ_ERR_ARG, "forward: sequence %d: %d tokens at position %d do not fit a context of %d",
                            sg[i].seq, sg[i].n, sg[i].pos0, c->n_ctx);
        for (int j = 0; j < i; j++)
            if (sg[j].seq == sg[i].seq)
                return dsq_fail(DSQ_ERR_ARG, "forward: sequence %d twice in a batch", sg[i].seq);
        total += sg[i].n;
    }
    if (total > INT32_MAX / 2) return dsq_fail(DSQ_ERR_ARG, "forward: a batch of %lld rows", (long long)total);
    for (int i = 0; i < n_out; i++)
        if (out_rows[i] < 0 || out_rows[i] >= total || (i > 0 && out_rows[i] <= out_rows[i - 1]))
            return dsq_fail(DSQ_ERR_ARG, "forward: output row %d (of %lld rows) out of order", out_rows[i],
                            (long long)total);
    *n = (int)total;
    return DSQ_OK;
}

dsq_status dsq_forward_batch(dsq_ctx *c, const int32_t *tokens, const dsq_seg *segs, int n_segs, const int *out_rows,
                             int n_out, float *logits)
{
    int n = 0;
    DSQ_TRY(check_batch(c, segs, n_segs, out_rows, n_out, &n));
    DSQ_TRY(reserve(c, n));
    c->segs = segs;
    c->n_segs = n_segs;
    int unused;
    dsq_status s = run_layers(c, tokens, n, 0, false, &unused);
    if (s == DSQ_OK && logits && n_out > 0) {
        size_t dim = (size_t)c->m->dim;
        /* rows move down only (out_rows increase), so in place is safe */
        for (int i = 0; i < n_out; i++)
            if (out_rows[i] != i) c->be->copy(c->h + (size_t)i * dim, c->h + (size_t)out_rows[i] * dim, dim);
        s = dsq_forward_head(c, c->h, n_out, logits);
        int64_t bad = s == DSQ_OK ? first_nonfinite(logits, (size_t)n_out * (size_t)c->m->vocab) : -1;
        if (bad >= 0) {
            int row = out_rows[bad / c->m->vocab], r0 = 0, k = 0;
            while (k < n_segs - 1 && row >= r0 + segs[k].n) r0 += segs[k++].n;
            s = trace_nan(c, tokens, n, 0, row, bad % c->m->vocab);
            dsq_fail_context(s, "sequence %d, position %d", segs[k].seq, segs[k].pos0 + row - r0);
        }
    }
    c->segs = NULL;
    return s;
}
