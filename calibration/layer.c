/* One layer's working copies and the passes over the calibration samples
 * (calibration/seq_internal.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibration/seq_internal.h"
#include "calibration/smooth.h"
#include "core/fileio.h"

int64_t dsq_seq_lin_out(const dsq_seq_layer *s, int id) { return s->orig[id].out; }
int64_t dsq_seq_lin_in(const dsq_seq_layer *s, int id) { return s->orig[id].in; }

void dsq_seq_lin_name(const dsq_seq_layer *s, int id, char *buf, size_t cap)
{
    snprintf(buf, cap, "model.layers.%d.%s", s->l, s->d->linears[id].hf);
}

static void lin_view(dsq_linear *W, float *w, float *bias, int64_t out, int64_t in)
{
    /* an F32 view cannot fail: F32 rows have no block constraint */
    (void)dsq_linear_init(W, DSQ_TYPE_F32, w, out, in);
    W->bias = bias;
}

bool dsq_seq_lin_present(const dsq_seq_layer *s, int id) { return s->present[id]; }

int dsq_seq_group_first(const dsq_seq_layer *s, int g)
{
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->d->linears[id].group == g && s->present[id]) return id;
    return -1;
}

static void free_copies(dsq_seq_layer *s)
{
    for (int id = 0; id < s->d->n_linears; id++) {
        free(s->w[id]);
        free(s->bias[id]);
        s->w[id] = s->bias[id] = NULL;
    }
    for (int i = 0; i < s->d->n_norms; i++) {
        free(s->norm[i]);
        s->norm[i] = NULL;
    }
    free(s->expert_in);
    s->expert_in = NULL;
}

/* Every copy, before the model is touched. */
static dsq_status make_copies(dsq_seq_layer *s)
{
    const dsq_layer *L = &s->m->layers[s->l];
    for (int i = 0; i < s->d->n_norms; i++) {
        if (!L->norm[i]) continue; /* a norm this layer lacks */
        size_t dim = (size_t)dsq_block_norm_dim(s->d, &s->m->arch, i);
        if (!(s->norm[i] = malloc(dim * sizeof(float))))
            return dsq_fail(DSQ_ERR_NOMEM, "layer %d %s: out of memory", s->l, s->d->norms[i].role);
        memcpy(s->norm[i], L->norm[i], dim * sizeof(float));
    }
    for (int id = 0; id < s->d->n_linears; id++) {
        const dsq_linear *W = &s->orig[id];
        if (!s->present[id]) continue;
        if (!(s->w[id] = malloc((size_t)(W->out * W->in) * sizeof(float))))
            return dsq_fail(DSQ_ERR_NOMEM, "layer %d %s: out of memory", s->l, s->d->linears[id].role);
        DSQ_TRY(dsq_linear_rows_f32(W, 0, W->out, s->w[id]));
        if (!W->bias) continue;
        if (!(s->bias[id] = malloc((size_t)W->out * sizeof(float))))
            return dsq_fail(DSQ_ERR_NOMEM, "layer %d %s: out of memory", s->l, s->d->linears[id].role);
        memcpy(s->bias[id], W->bias, (size_t)W->out * sizeof(float));
    }
    return DSQ_OK;
}

dsq_status dsq_seq_layer_begin(dsq_seq_layer *s, dsq_model *m, int l, const dsq_seq_opts *o)
{
    memset(s, 0, sizeof *s);
    s->m = m;
    s->d = m->block;
    s->l = l;
    s->o = o;
    dsq_layer *L = &m->layers[l];
    for (int i = 0; i < s->d->n_norms; i++) s->orig_norm[i] = L->norm[i];
    for (int id = 0; id < s->d->n_linears; id++) {
        const dsq_block_linear *bl = &s->d->linears[id];
        s->orig[id] = L->lin[id];
        /* routed experts are copied one at a time (calibration/moe.c); the router stays as it is */
        s->present[id] = dsq_block_linear_present(s->d, &m->arch, l, id) && !bl->expert;
        s->ok[id] = s->present[id] && !bl->router && dsq_intq_fits(&o->q, L->lin[id].in);
    }
    dsq_status st = make_copies(s);
    if (st != DSQ_OK) {
        free_copies(s);
        return st;
    }
    /* the model now runs on the copies, so every change below is what the forward sees */
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->present[id]) lin_view(&L->lin[id], s->w[id], s->bias[id], s->orig[id].out, s->orig[id].in);
    for (int i = 0; i < s->d->n_norms; i++)
        if (s->norm[i]) L->norm[i] = s->norm[i];
    s->installed = true;
    return DSQ_OK;
}

/* Hands every copy to keep; on failure none has moved and the model is put back. */
static dsq_status keep_copies(dsq_seq_layer *s, dsq_seq_keep *keep)
{
    size_t mark = dsq_seq_keep_mark(keep);
    dsq_status st = DSQ_OK;
    for (int id = 0; id < s->d->n_linears && st == DSQ_OK; id++) {
        if (!s->w[id]) continue;
        st = dsq_seq_keep_add(keep, s->w[id]);
        if (st == DSQ_OK && s->bias[id]) st = dsq_seq_keep_add(keep, s->bias[id]);
    }
    for (int i = 0; i < s->d->n_norms && st == DSQ_OK; i++)
        if (s->norm[i]) st = dsq_seq_keep_add(keep, s->norm[i]);
    if (st != DSQ_OK) {
        dsq_seq_keep_rewind(keep, mark);
        return st;
    }
    for (int id = 0; id < s->d->n_linears; id++) {
        if (!s->present[id]) continue;
        dsq_linear_release(&s->orig[id]);
        s->w[id] = s->bias[id] = NULL;
    }
    for (int i = 0; i < s->d->n_norms; i++) s->norm[i] = NULL;
    return DSQ_OK;
}

static void restore(dsq_seq_layer *s)
{
    dsq_layer *L = &s->m->layers[s->l];
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->present[id]) L->lin[id] = s->orig[id];
    for (int i = 0; i < s->d->n_norms; i++) L->norm[i] = s->orig_norm[i];
}

dsq_status dsq_seq_layer_end(dsq_seq_layer *s, dsq_seq_keep *keep)
{
    dsq_status st = DSQ_OK;
    if (s->installed) {
        /* The layer's input weights are done with: drop their mapped pages so
         * the resident set stays near one layer whatever the model size. */
        for (int id = 0; id < s->d->n_linears; id++)
            if (s->present[id] && !s->orig[id].owned && s->orig[id].data)
                dsq_release_pages(s->orig[id].data, (uint64_t)s->orig[id].out * (uint64_t)s->orig[id].row_bytes);
        if (keep) st = keep_copies(s, keep);
        if (!keep || st != DSQ_OK) restore(s);
        s->installed = false;
    }
    free_copies(s);
    for (int id = 0; id < s->d->n_linears; id++) {
        dsq_intq_free(&s->q[id]);
        dsq_w8q_free(&s->q8[id]);
    }
    return st;
}

dsq_status dsq_seq_quantize_rtn(dsq_seq_layer *s, int id, dsq_intq_rule rule, const float *imp)
{
    dsq_intq_params p = s->o->q;
    p.rule = rule;
    dsq_status st =
        dsq_intq_quantize_weighted(s->w[id], dsq_seq_lin_out(s, id), dsq_seq_lin_in(s, id), &p, NULL, imp, &s->q[id]);
    if (st != DSQ_OK) {
        char name[160];
        dsq_seq_lin_name(s, id, name, sizeof name);
        return dsq_fail_context(st, "%s", name);
    }
    s->has_q[id] = true;
    return dsq_intq_dequantize(&s->q[id], s->w[id]);
}

bool dsq_seq_group_any(const dsq_seq_layer *s, int g)
{
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->d->linears[id].group == g && s->ok[id]) return true;
    return false;
}

/* ---- passes ---- */

void dsq_seq_hooks_init(dsq_seq_hooks *h)
{
    memset(h, 0, sizeof *h);
    h->stop_after = -1;
}

/* The rows of x a capture keeps: all, or those below cap_tokens. */
static int64_t cap_rows(const dsq_seq_hooks *h, int n_tok)
{
    if (h->cap_tokens <= 0) return n_tok;
    int64_t left = h->cap_tokens - h->row0;
    return left <= 0 ? 0 : left < n_tok ? left : n_tok;
}

static dsq_status on_linear(void *user, int layer, int which, int expert, const float *x, int n_tok, int64_t in)
{
    dsq_seq_hooks *h = user;
    /* routed experts get their statistics from calibration/moe.c, not from the layer's passes */
    if (expert >= 0) return which == h->stop_after ? DSQ_STOP : DSQ_OK;
    int64_t keep = h->cap[which] ? cap_rows(h, n_tok) : 0;
    if (keep > 0) memcpy(h->cap[which] + h->row0 * in, x, (size_t)keep * (size_t)in * sizeof *x);
    if (h->amax[which]) {
        int64_t bad = dsq_sq_amax_update(h->amax[which], x, n_tok, in);
        if (bad >= 0) {
            int64_t tok = h->row0 + bad / in;
            int sl = h->seqlen > 0 ? h->seqlen : n_tok;
            return dsq_fail(DSQ_ERR_NUMERIC, "layer %d: the input of %s is %s at sample %lld, token %lld, channel %lld",
                            layer, h->d ? h->d->linears[which].hf : "a linear", isnan(x[bad]) ? "NaN" : "Inf",
                            (long long)(tok / sl), (long long)(tok % sl), (long long)(bad % in));
        }
    }
    if (h->sumsq[which])
        for (int t = 0; t < n_tok; t++)
            for (int64_t c = 0; c < in; c++) h->sumsq[which][c] += (double)x[t * in + c] * (double)x[t * in + c];
    if (h->H[which]) DSQ_TRY(dsq_hessian_add(h->H[which], x, n_tok));
    if (h->extra) DSQ_TRY(h->extra(h->extra_user, layer, which, expert, x, n_tok, in));
    return which == h->stop_after ? DSQ_STOP : DSQ_OK;
}

/* Whether linear id's product runs in a pass of `half` that h may stop: the
 * block lists linears in the order the forward runs them, and a stop comes at
 * the stopping linear's input. A linear wrongly left out only packs per call. */
static bool pass_runs(const dsq_block_desc *d, int id, int half, const dsq_seq_hooks *h)
{
    if (half != DSQ_SEQ_WHOLE_LAYER && d->groups[d->linears[id].group].half != half) return false;
    return !h || h->stop_after < 0 || id < h->stop_after;
}

dsq_status dsq_seq_pack_linears(dsq_seq_runner *r, int l, int half, const dsq_seq_hooks *h)
{
    if (dsq_ctx_matmul_mode(r->ctx) != DSQ_MATMUL_BF16) return DSQ_OK;
    const dsq_block_desc *d = dsq_ctx_model(r->ctx)->block;
    dsq_layer *L = &dsq_ctx_model(r->ctx)->layers[l];
    const dsq_arch *a = &dsq_ctx_model(r->ctx)->arch;
    for (int id = 0; id < d->n_linears; id++)
        if (pass_runs(d, id, half, h) && dsq_block_linear_present(d, a, l, id) && !d->linears[id].expert)
            DSQ_TRY(dsq_linear_bf16_pack(&L->lin[id]));
    return DSQ_OK;
}

void dsq_seq_unpack_linears(dsq_seq_runner *r, int l)
{
    dsq_layer *L = &dsq_ctx_model(r->ctx)->layers[l];
    for (int id = 0; id < dsq_ctx_model(r->ctx)->block->n_linears; id++) dsq_linear_bf16_unpack(&L->lin[id]);
}

dsq_status dsq_seq_run_pass(dsq_seq_runner *r, int l, int half, const float *in, float *out, int n, dsq_seq_hooks *h)
{
    size_t rows = (size_t)r->seqlen * (size_t)r->dim;
    if (h) {
        h->seqlen = r->seqlen;
        h->d = dsq_ctx_model(r->ctx)->block;
    }
    dsq_ctx_set_hooks(r->ctx, h ? on_linear : NULL, NULL, h);
    /* the layer's weights hold still for the whole pass: BF16 passes pack
     * them once instead of once per sample */
    dsq_status s = dsq_seq_pack_linears(r, l, half, h);
    for (int i = 0; i < n && s == DSQ_OK; i++) {
        float *buf = out ? out + (size_t)i * rows : r->scratch;
        if (buf != in + (size_t)i * rows) memcpy(buf, in + (size_t)i * rows, rows * sizeof *buf);
        if (h) h->row0 = (int64_t)i * r->seqlen;
        if (half == DSQ_SEQ_WHOLE_LAYER)
            s = dsq_forward_layer(r->ctx, l, buf, r->seqlen, 0);
        else
            s = dsq_forward_half(r->ctx, l, half, buf, r->seqlen, 0);
        if (s == DSQ_STOP) s = DSQ_OK; /* the stop we asked for */
    }
    dsq_seq_unpack_linears(r, l);
    dsq_ctx_set_hooks(r->ctx, NULL, NULL, NULL);
    return s;
}
