/* The steps SmoothQuant W8A8 and FP8 share (calibration/seq_internal.h):
 * finite checks, RTN into an 8-bit scheme, GPTQ's INT8 codes as an 8-bit
 * weight, and the last pass over a finished layer that gives the next
 * layer's input together with static input scales and FP8 KV-cache scales. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calibration/seq_internal.h"
#include "calibration/smooth.h"
#include "runtime/cpu/ops.h"

static dsq_status finite_vec(const float *v, int64_t n, int64_t cols, const char *what, int l, const char *hf)
{
    for (int64_t i = 0; v && i < n; i++)
        if (!isfinite(v[i])) {
            if (cols > 0)
                return dsq_fail(DSQ_ERR_NUMERIC, "model.layers.%d.%s.%s [%lld, %lld] is %s", l, hf, what,
                                (long long)(i / cols), (long long)(i % cols), isnan(v[i]) ? "NaN" : "Inf");
            return dsq_fail(DSQ_ERR_NUMERIC, "model.layers.%d.%s.%s [%lld] is %s", l, hf, what, (long long)i,
                            isnan(v[i]) ? "NaN" : "Inf");
        }
    return DSQ_OK;
}

dsq_status dsq_seq_w8_check_finite(const dsq_seq_layer *s)
{
    for (int i = 0; i < s->d->n_norms; i++)
        DSQ_TRY(finite_vec(s->norm[i], dsq_block_norm_dim(s->d, &s->m->arch, i), 0, "weight", s->l,
                           s->d->norms[i].hf));
    for (int id = 0; id < s->d->n_linears; id++) {
        if (!s->present[id]) continue;
        int64_t out = dsq_seq_lin_out(s, id), in = dsq_seq_lin_in(s, id);
        DSQ_TRY(finite_vec(s->w[id], out * in, in, "weight", s->l, s->d->linears[id].hf));
        DSQ_TRY(finite_vec(s->bias[id], out, 0, "bias", s->l, s->d->linears[id].hf));
    }
    return DSQ_OK;
}

dsq_status dsq_seq_w8_expert_check_finite(const dsq_seq_expert *x)
{
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
        char leaf[128];
        snprintf(leaf, sizeof leaf, x->s->d->linears[x->id[k]].hf, x->e);
        DSQ_TRY(finite_vec(x->w[k], x->out[k] * x->in[k], x->in[k], "weight", x->s->l, leaf));
    }
    return DSQ_OK;
}

dsq_status dsq_seq_w8_expert_rtn(dsq_seq_expert *x)
{
    DSQ_TRY(dsq_seq_w8_expert_check_finite(x));
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
        char name[192];
        dsq_seq_expert_name(x, k, name, sizeof name);
        DSQ_TRY(dsq_w8q_quantize(x->w[k], x->out[k], x->in[k], &x->s->o->w8.scheme, name, &x->q8[k]));
        x->has_q8[k] = true;
        DSQ_TRY(dsq_w8q_dequantize(&x->q8[k], x->w[k]));
    }
    return DSQ_OK;
}

dsq_status dsq_seq_w8_rtn(dsq_seq_layer *s, int id)
{
    char name[160];
    dsq_seq_lin_name(s, id, name, sizeof name);
    DSQ_TRY(
        dsq_w8q_quantize(s->w[id], dsq_seq_lin_out(s, id), dsq_seq_lin_in(s, id), &s->o->w8.scheme, name, &s->q8[id]));
    s->has_q8[id] = true;
    return dsq_w8q_dequantize(&s->q8[id], s->w[id]);
}

/* GPTQ's rule at 8 bits, symmetric, one group per row gives
 * s = (xmax - xmin) / 255 = 2 amax / 255 = amax / 127.5 and z = 128, the
 * compressed-tensors INT8 grid (s = amax / 127.5, q in [-128, 127]); its
 * dequantized value (code - 128) * s is the INT8 value code - 128 times s,
 * bit for bit. (A row without negative weights keeps xmin = 0 under GPTQ's
 * rule, so s = amax / 255 there: still an INT8 grid, a finer one.) */
/* q -> out under sch; w holds GPTQ's dequantized weights, which the INT8
 * weight must give bit for bit. */
static dsq_status w8_from_intq(const dsq_intq *q, const float *w, const dsq_w8_scheme *sch, const char *name,
                               dsq_w8q *o)
{
    if (q->bits != 8 || !q->sym || q->n_groups != 1 || q->g_idx)
        return dsq_fail(DSQ_ERR_ARG,
                        "%s: GPTQ codes are %d-bit, %s, %lld groups per row; INT8 W8A8 needs 8-bit "
                        "symmetric per-channel codes",
                        name, q->bits, q->sym ? "sym" : "asym", (long long)q->n_groups);
    DSQ_TRY(dsq_w8q_alloc(sch, q->rows, q->cols, o));
    for (int64_t r = 0; r < q->rows; r++) {
        if (q->zeros[r] != 128) {
            dsq_w8q_free(o);
            return dsq_fail(DSQ_ERR_ARG, "%s: row %lld has GPTQ zero point %d, not 128", name, (long long)r,
                            q->zeros[r]);
        }
        o->scales[r] = q->scales[r];
        for (int64_t c = 0; c < q->cols; c++)
            o->codes[r * q->cols + c] = (uint8_t)(int8_t)((int)q->codes[r * q->cols + c] - 128);
    }
    size_t n = (size_t)(q->rows * q->cols);
    float *chk = malloc(n * sizeof *chk);
    dsq_status st = chk ? dsq_w8q_dequantize(o, chk) : dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", name);
    for (size_t i = 0; st == DSQ_OK && i < n; i++)
        if (memcmp(&chk[i], &w[i], sizeof *chk))
            st = dsq_fail(DSQ_ERR_NUMERIC, "%s: INT8 weight in row %zu (%g) differs from GPTQ's (%g)", name,
                          i / (size_t)q->cols, (double)chk[i], (double)w[i]);
    free(chk);
    if (st != DSQ_OK) dsq_w8q_free(o);
    return st;
}

dsq_status dsq_seq_w8_from_gptq(dsq_seq_layer *s, int id)
{
    char name[160];
    dsq_seq_lin_name(s, id, name, sizeof name);
    DSQ_TRY(w8_from_intq(&s->q[id], s->w[id], &s->o->w8.scheme, name, &s->q8[id]));
    s->has_q8[id] = true;
    s->has_q[id] = false;
    dsq_intq_free(&s->q[id]);
    return DSQ_OK;
}

dsq_status dsq_seq_w8_expert_from_gptq(dsq_seq_expert *x)
{
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
        if (!x->has_q[k]) continue;
        char name[192];
        dsq_seq_expert_name(x, k, name, sizeof name);
        DSQ_TRY(w8_from_intq(&x->q[k], x->w[k], &x->s->o->w8.scheme, name, &x->q8[k]));
        x->has_q8[k] = true;
        x->has_q[k] = false;
        dsq_intq_free(&x->q[k]);
    }
    return DSQ_OK;
}

static float max_abs(const float *x, int64_t n)
{
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

dsq_status dsq_seq_w8_expert_act_scales(dsq_seq_expert *x)
{
    dsq_w8_kind kind = x->s->o->w8.scheme.kind;
    float s_in = dsq_w8_static_scale(kind, max_abs(x->x, x->n_tok * x->in[0]));
    x->q8[0].act_scale = x->q8[1].act_scale = s_in;
    size_t n = (size_t)x->n_tok * (size_t)x->out[0];
    float *act = malloc((n ? n : 1) * sizeof *act), *tmp = malloc((n ? n : 1) * sizeof *tmp);
    dsq_status st = act && tmp ? dsq_seq_expert_act(x, x->x, x->n_tok, act, tmp)
                               : dsq_fail(DSQ_ERR_NOMEM, "out of memory for an expert's activations");
    if (st == DSQ_OK) x->q8[2].act_scale = dsq_w8_static_scale(kind, max_abs(act, (int64_t)n));
    free(act);
    free(tmp);
    return st;
}

/* ---- the last pass ---- */

/* The linears whose outputs the KV cache holds: the description's key
 * (scores, K width) and value (V width) projections. */
static int kv_linear(const dsq_block_desc *d, bool key)
{
    for (int id = 0; id < d->n_linears; id++) {
        const dsq_block_linear *L = &d->linears[id];
        if (key && L->scores && L->out == DSQ_DIM_K) return id;
        if (!key && !L->scores && L->out == DSQ_DIM_V) return id;
    }
    return -1;
}

typedef struct kv_st {
    dsq_seq_layer *s;
    int k, v;
    dsq_rope rope;
    float *y; /* [seqlen x max(k, v width)] */
    float kmax, vmax;
} kv_st;

static float abs_max(const float *y, int64_t n)
{
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) m = fabsf(y[i]) > m ? fabsf(y[i]) : m;
    return m;
}

/* K as the cache holds it: the (quantized) k projection of x, rotated by the
 * runtime's RoPE at the sample's positions 0..n-1; V is the v projection. */
static dsq_status on_kv(void *user, int layer, int which, int expert, const float *x, int n_tok, int64_t in)
{
    (void)expert, (void)in;
    kv_st *kv = user;
    if (which != kv->k && which != kv->v) return DSQ_OK;
    const dsq_linear *W = &kv->s->m->layers[layer].lin[which];
    DSQ_TRY(dsq_linear_forward(W, x, kv->y, n_tok));
    if (which == kv->k) {
        dsq_cpu_rope(&kv->rope, kv->y, n_tok, (int)kv->s->m->arch.n_kv_heads, W->out, 0);
        float m = abs_max(kv->y, (int64_t)n_tok * W->out);
        kv->kmax = m > kv->kmax ? m : kv->kmax;
    } else {
        float m = abs_max(kv->y, (int64_t)n_tok * W->out);
        kv->vmax = m > kv->vmax ? m : kv->vmax;
    }
    return DSQ_OK;
}

static dsq_status kv_init(kv_st *kv, dsq_seq_layer *s, int seqlen)
{
    memset(kv, 0, sizeof *kv);
    kv->s = s;
    kv->k = kv_linear(s->d, true);
    kv->v = kv_linear(s->d, false);
    if (kv->k < 0 || kv->v < 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "--kv-cache-fp8: the %s block has no key/value projections", s->d->name);
    int64_t w =
        dsq_seq_lin_out(s, kv->k) > dsq_seq_lin_out(s, kv->v) ? dsq_seq_lin_out(s, kv->k) : dsq_seq_lin_out(s, kv->v);
    DSQ_TRY(dsq_rope_init(&kv->rope, &s->m->arch, s->m->rope_layout, s->m->rope_freq_factors));
    if (!(kv->y = malloc((size_t)seqlen * (size_t)w * sizeof *kv->y))) {
        dsq_rope_free(&kv->rope);
        return dsq_fail(DSQ_ERR_NOMEM, "--kv-cache-fp8: out of memory");
    }
    return DSQ_OK;
}

static void kv_free(kv_st *kv)
{
    if (!kv->s) return;
    dsq_rope_free(&kv->rope);
    free(kv->y);
}

/* Every quantized linear of group g gets the static scale of its input. */
static void set_act_scales(dsq_seq_layer *s, int g, const float *amax, int64_t in)
{
    float m = 0.0f;
    for (int64_t c = 0; c < in; c++) m = amax[c] > m ? amax[c] : m;
    float sc = dsq_w8_static_scale(s->o->w8.scheme.kind, m);
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->d->linears[id].group == g && s->has_q8[id]) s->q8[id].act_scale = sc;
}

dsq_status dsq_seq_w8_final_pass(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout)
{
    bool stat = s->o->w8.scheme.act == DSQ_W8_ACT_TENSOR && !s->o->w8.smooth_only;
    dsq_seq_hooks h;
    dsq_seq_hooks_init(&h);
    float *amax[DSQ_BLOCK_MAX_GROUPS] = {NULL};
    dsq_status st = DSQ_OK;
    for (int g = 0; stat && g < s->d->n_groups && st == DSQ_OK; g++) {
        int first = dsq_seq_group_first(s, g);
        if (first < 0) continue;
        if (!(amax[g] = calloc((size_t)dsq_seq_lin_in(s, first), sizeof(float))))
            st = dsq_fail(DSQ_ERR_NOMEM, "layer %d: out of memory", s->l);
        h.amax[first] = amax[g];
    }
    kv_st kv;
    memset(&kv, 0, sizeof kv);
    if (st == DSQ_OK && s->o->w8.kv_fp8 && (st = kv_init(&kv, s, r->seqlen)) == DSQ_OK) {
        h.extra = on_kv;
        h.extra_user = &kv;
    }
    if (st == DSQ_OK) st = dsq_seq_run_pass(r, s->l, DSQ_SEQ_WHOLE_LAYER, hin, hout, r->n_samples, &h);
    for (int g = 0; st == DSQ_OK && g < s->d->n_groups; g++)
        if (amax[g]) set_act_scales(s, g, amax[g], dsq_seq_lin_in(s, dsq_seq_group_first(s, g)));
    if (st == DSQ_OK && s->o->w8.kv_fp8) {
        s->k_scale = dsq_w8_static_scale(DSQ_W8_FP8, kv.kmax);
        s->v_scale = dsq_w8_static_scale(DSQ_W8_FP8, kv.vmax);
    }
    kv_free(&kv);
    for (int g = 0; g < DSQ_BLOCK_MAX_GROUPS; g++) free(amax[g]);
    return st;
}
