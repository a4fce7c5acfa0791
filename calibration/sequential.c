/* Layer-by-layer RTN / AWQ / GPTQ driver (calibration/sequential.h). */
#include "calibration/sequential.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "calibration/seq_internal.h"
#include "core/bigbuf.h"
#include "core/clock.h"
#include "core/grow.h"
#include "core/log.h"
#include "formats/block.h"

struct dsq_seq_keep {
    void **p;
    size_t n, cap;
};

dsq_status dsq_seq_keep_add(dsq_seq_keep *k, void *p)
{
    void **np = dsq_grow(k->p, &k->cap, k->n + 1, sizeof *np);
    if (!np) return dsq_fail(DSQ_ERR_NOMEM, "quantize: out of memory");
    k->p = np;
    k->p[k->n++] = p;
    return DSQ_OK;
}

size_t dsq_seq_keep_mark(const dsq_seq_keep *k) { return k->n; }

void dsq_seq_keep_rewind(dsq_seq_keep *k, size_t mark)
{
    if (mark < k->n) k->n = mark;
}

void dsq_seq_keep_free(dsq_seq_keep *k)
{
    if (!k) return;
    for (size_t i = 0; i < k->n; i++) free(k->p[i]);
    free(k->p);
    free(k);
}

dsq_seq_opts dsq_seq_default_opts(void)
{
    dsq_seq_opts o;
    memset(&o, 0, sizeof o);
    o.method = &dsq_method_rtn;
    o.awq = dsq_awq_default_opts();
    o.q = o.awq.q;
    o.damp = 0.01;
    return o;
}

dsq_seq_opts dsq_seq_w8_default_opts(const dsq_method *m)
{
    dsq_seq_opts o = dsq_seq_default_opts();
    o.method = m;
    o.q.bits = 8;
    o.q.group_size = -1;
    o.q.sym = true;
    o.w8.smooth = m == &dsq_method_smoothquant;
    o.w8.alpha = DSQ_SQ_ALPHA_FAMILY;
    o.w8.scheme = m == &dsq_method_fp8 ? dsq_w8_scheme_fp8_dynamic() : dsq_w8_scheme_w8a8(false);
    return o;
}

static long peak_rss_kb(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
}

dsq_status dsq_seq_check_groups(const dsq_model *m, const dsq_intq_params *q, bool skip, int64_t *n_bad)
{
    char list[512] = "";
    int64_t bad = 0, first_in = 0;
    bool seen[DSQ_BLOCK_MAX_LINEARS] = {false};
    for (int64_t l = 0; l < m->arch.n_layers; l++)
        for (int id = 0; id < m->block->n_linears; id++) {
            const dsq_block_linear *bl = &m->block->linears[id];
            if (!dsq_block_linear_present(m->block, &m->arch, l, id) || bl->router) continue;
            int64_t out, in;
            dsq_block_linear_shape(m->block, &m->arch, id, &out, &in);
            if (dsq_intq_fits(q, in)) continue;
            const dsq_linear *W = bl->expert ? &m->layers[l].experts[id][0] : &m->layers[l].lin[id];
            if (!bad++) first_in = W->in;
            if (seen[id]) continue;
            seen[id] = true;
            size_t u = strlen(list);
            char hf[128];
            /* an expert's path names every expert: "mlp.experts.*.gate_proj" */
            const char *pct = bl->expert ? strstr(bl->hf, "%d") : NULL;
            if (pct)
                snprintf(hf, sizeof hf, "%.*s*%s", (int)(pct - bl->hf), bl->hf, pct + 2);
            else
                snprintf(hf, sizeof hf, "%s", bl->hf);
            snprintf(list + u, sizeof list - u, "%s%s (in %lld)", u ? ", " : "", hf, (long long)W->in);
        }
    if (n_bad) *n_bad = bad;
    if (!bad) return DSQ_OK;
    /* the first failure's own reason, asked for once */
    char first_err[512];
    (void)dsq_intq_check(q, first_in);
    snprintf(first_err, sizeof first_err, "%s", dsq_errmsg());
    if (bad && !skip)
        return dsq_fail(DSQ_ERR_ARG,
                        "%lld linears cannot be quantized with bits %d, group %d: %s; %s (or pass --skip-indivisible "
                        "to leave them unquantized)",
                        (long long)bad, q->bits, q->group_size, list, first_err);
    return DSQ_OK;
}

float *dsq_seq_tail_buffer(dsq_seq_runner *r, size_t bytes)
{
    if (bytes <= r->tail_bytes) return r->tail;
    free(r->tail);
    r->tail = dsq_bigbuf_alloc(bytes);
    r->tail_bytes = r->tail ? bytes : 0;
    return r->tail;
}

/* ---- the driver ---- */

static dsq_status emit_layer(dsq_seq_layer *s)
{
    if (!s->o->emit) return DSQ_OK;
    dsq_seq_layer_out out;
    memset(&out, 0, sizeof out);
    out.layer = s->l;
    for (int i = 0; i < s->d->n_norms; i++) out.norm[i] = s->norm[i];
    for (int id = 0; id < s->d->n_linears; id++) {
        out.q[id] = s->has_q[id] ? &s->q[id] : NULL;
        out.q8[id] = s->has_q8[id] ? &s->q8[id] : NULL;
        out.w[id] = s->w[id];
        out.bias[id] = s->bias[id];
    }
    out.k_scale = s->k_scale;
    out.v_scale = s->v_scale;
    out.router_bias = s->m->layers[s->l].router_bias;
    return s->o->emit(s->o->user, &out);
}

static dsq_status one_layer(dsq_model *m, int l, const dsq_seq_opts *o, dsq_seq_runner *r, float *hin, float *hout,
                            dsq_seq_report *rep, dsq_seq_keep *keep, int64_t *counts)
{
    dsq_seq_layer s;
    DSQ_TRY_CTX(dsq_seq_layer_begin(&s, m, l, o), "layer %d", l);
    dsq_status st = o->method->layer(&s, r, hin, hout, rep);
    for (int id = 0; id < s.d->n_linears; id++) {
        if (!s.present[id] || s.d->linears[id].router) continue;
        if (s.has_q[id] || s.has_q8[id] || s.has_gguf[id])
            rep->n_quantized++;
        else if (st == DSQ_OK)
            rep->n_skipped++;
    }
    if (st == DSQ_OK) st = emit_layer(&s);
    if (st == DSQ_OK && dsq_arch_layer_is_moe(&m->arch, l)) st = dsq_seq_moe_layer(&s, r, hin, hout, rep, keep, counts);
    if (st != DSQ_OK) st = dsq_fail_context(st, "layer %d", l);
    dsq_status e = dsq_seq_layer_end(&s, st == DSQ_OK ? keep : NULL);
    return st != DSQ_OK ? st : e;
}

static dsq_status check_opts(const dsq_model *m, const dsq_calib_set *calib, const dsq_seq_opts *o)
{
    if (!o->method) return dsq_fail(DSQ_ERR_ARG, "quantize: no method");
    if (dsq_method_needs_data_for(o->method, o) && (!calib || calib->n_samples <= 0 || !calib->tokens))
        return dsq_fail(DSQ_ERR_ARG, "%s needs calibration samples", o->method->name);
    if (o->method->check) DSQ_TRY(o->method->check(o));
    if (o->gguf && o->method != &dsq_method_gptq && o->method != &dsq_method_awq)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s cannot write GGUF blocks (gptq and awq can)", o->method->name);
    if (m->arch.moe.n_routed > 0 && !o->method->expert)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s does not calibrate MoE experts yet (%s)", o->method->name,
                        m->arch.hf_architecture);
    if (o->q.bits != 2 && o->q.bits != 3 && o->q.bits != 4 && o->q.bits != 8)
        return dsq_fail(DSQ_ERR_ARG, "--w-bit %d: supported widths are 2, 3, 4 and 8", o->q.bits);
    for (int64_t t = 0; calib && t < (int64_t)calib->n_samples * calib->seqlen; t++)
        if (calib->tokens[t] < 0 || calib->tokens[t] >= m->vocab)
            return dsq_fail(DSQ_ERR_ARG, "calibration token %d outside the vocabulary (%lld)", calib->tokens[t],
                            (long long)m->vocab);
    return dsq_seq_check_groups(m, &o->q, o->skip_indivisible, NULL);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The report's coverage over every MoE layer's experts (counts: nl x E). */
static void coverage(const dsq_model *m, const dsq_seq_opts *o, int64_t *counts, int nl, dsq_seq_report *rep)
{
    int64_t E = m->arch.moe.n_routed, n = 0;
    int min_tok = o->expert_min_tokens > 0 ? o->expert_min_tokens : DSQ_EXPERT_MIN_TOKENS_DEFAULT;
    for (int l = 0; l < nl; l++) {
        if (!dsq_arch_layer_is_moe(&m->arch, l)) continue;
        memmove(counts + n, counts + (size_t)l * (size_t)E, (size_t)E * sizeof *counts);
        n += E;
        rep->moe_layers++;
    }
    if (!n) return;
    qsort(counts, (size_t)n, sizeof *counts, cmp_i64);
    rep->moe_experts = n;
    rep->moe_tok_min = counts[0], rep->moe_tok_median = counts[n / 2], rep->moe_tok_max = counts[n - 1];
    for (int64_t i = 0; i < n; i++) rep->moe_below += counts[i] < min_tok;
}

dsq_status dsq_seq_quantize(dsq_model *m, const dsq_calib_set *calib, const dsq_seq_opts *o_in, dsq_seq_report *rep,
                            dsq_seq_keep **keep_out)
{
    memset(rep, 0, sizeof *rep);
    if (keep_out) *keep_out = NULL;
    DSQ_TRY(dsq_block_require(m->block, &m->arch, DSQ_BLOCK_CAN_CALIBRATE, m->ckpt->path));
    dsq_seq_opts o = *o_in;
    o.awq.q = o.q;
    o.awq.q.rule = DSQ_INTQ_RULE_AWQ;
    memset(rep, 0, sizeof *rep);
    bool data = o.method && dsq_method_needs_data_for(o.method, &o);
    if (!data) o.bf16 = false; /* no passes to run */
    rep->bf16 = o.bf16;
    if (keep_out) *keep_out = NULL;
    DSQ_TRY(check_opts(m, calib, &o));
    if (!data) calib = NULL; /* the method looks at no data */
    double t0 = dsq_now_s();
    dsq_seq_runner r;
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
        ha = dsq_bigbuf_alloc(n * sizeof *ha);
        hb = dsq_bigbuf_alloc(n * sizeof *hb);
        r.scratch = malloc((size_t)calib->seqlen * (size_t)m->dim * sizeof *r.scratch);
        if (!ha || !hb || !r.scratch)
            st = dsq_fail(DSQ_ERR_NOMEM, "calibration: out of memory for %d x %d hidden states", calib->n_samples,
                          calib->seqlen);
        if (st == DSQ_OK) st = dsq_ctx_new(m, calib->seqlen, o.threads, &r.ctx);
        if (st == DSQ_OK) dsq_ctx_set_matmul(r.ctx, o.bf16 ? DSQ_MATMUL_BF16 : DSQ_MATMUL_DEFAULT);
        for (int i = 0; i < calib->n_samples && st == DSQ_OK; i++)
            st = dsq_forward_embed(r.ctx, calib->tokens + (size_t)i * (size_t)calib->seqlen, calib->seqlen,
                                   ha + (size_t)i * (size_t)calib->seqlen * (size_t)m->dim);
    }
    int nl = (int)m->arch.n_layers;
    if (o.max_layers > 0 && o.max_layers < nl) nl = o.max_layers;
    /* MoE coverage: tokens per expert of every MoE layer */
    int64_t E = m->arch.moe.n_routed > 0 ? m->arch.moe.n_routed : 0;
    int64_t *counts = E ? calloc((size_t)nl * (size_t)E, sizeof *counts) : NULL;
    if (E && !counts && st == DSQ_OK) st = dsq_fail(DSQ_ERR_NOMEM, "out of memory");
    for (int l = 0; l < nl && st == DSQ_OK; l++) {
        double tl = dsq_now_s();
        /* in place: the other buffer's pages are never touched on a dense model */
        const bool in_place = o.method->in_place && !dsq_arch_layer_is_moe(&m->arch, l);
        st = one_layer(m, l, &o, &r, ha, in_place ? ha : hb, rep, keep, counts ? counts + (size_t)l * (size_t)E : NULL);
        if (!in_place) {
            float *t = ha;
            ha = hb;
            hb = t;
        }
        double el = dsq_now_s() - t0;
        long rss = peak_rss_kb();
        if (o.layer_rss_kb) o.layer_rss_kb[l] = rss;
        DSQ_LOGI("%s: layer %d/%d done in %.1f s, ETA %.0f s, peak RSS %ld MiB", o.method->name, l + 1, nl,
                 dsq_now_s() - tl, el / (l + 1) * (nl - l - 1), rss / 1024);
    }
    if (st == DSQ_OK && counts && calib) coverage(m, &o, counts, nl, rep);
    free(counts);
    dsq_ctx_free(r.ctx);
    free(ha);
    free(hb);
    free(r.scratch);
    free(r.tail);
    rep->seconds = dsq_now_s() - t0;
    rep->peak_rss_kb = peak_rss_kb();
    if (st != DSQ_OK) {
        dsq_seq_keep_free(keep); /* layers done so far point into it: the model is unusable, as documented */
        return st;
    }
    if (keep_out)
        *keep_out = keep;
    else
        dsq_seq_keep_free(keep);
    return DSQ_OK;
}
