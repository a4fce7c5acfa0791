/* RTN: each linear rounded to its groups' grid by AutoAWQ's rule (as
 * llm-compressor's and AutoAWQ's RTN baselines use). The grid is the
 * groups' min/max, or a searched clip ratio per group (--grid,
 * quantizers/intq_search.h): "mse" looks at no data; "imatrix-mse" weighs
 * each input channel by its mean x^2 on the calibration windows, taken on
 * the layer as the quantized layers before it leave its input, after which
 * the quantized layer runs again for the next layer's input. */
#include <stdlib.h>

#include "calibration/method.h"
#include "calibration/seq_internal.h"
#include "calibration/sequential.h"
#include "quantizers/intq_search.h"

static bool weighted(const dsq_seq_opts *o)
{
    const dsq_intq_grid_info *g = dsq_intq_grid_get(o->q.grid);
    return g && g->weighted;
}

/* imp[g] = mean x^2 of group g's input over the calibration tokens. */
static dsq_status importance(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float **imp)
{
    double *sum[DSQ_BLOCK_MAX_GROUPS] = {NULL};
    dsq_seq_hooks h;
    dsq_seq_hooks_init(&h);
    dsq_status st = DSQ_OK;
    for (int g = 0; g < s->d->n_groups && st == DSQ_OK; g++) {
        int first = dsq_seq_group_first(s, g);
        if (first < 0 || !dsq_seq_group_any(s, g)) continue;
        int64_t in = dsq_seq_lin_in(s, first);
        sum[g] = calloc((size_t)in, sizeof(double));
        imp[g] = malloc((size_t)in * sizeof(float));
        if (!sum[g] || !imp[g])
            st = dsq_fail(DSQ_ERR_NOMEM, "rtn: out of memory for the importance of %lld inputs", (long long)in);
        h.sumsq[first] = sum[g];
    }
    if (st == DSQ_OK) st = dsq_seq_run_pass(r, s->l, DSQ_SEQ_WHOLE_LAYER, hin, NULL, r->n_samples, &h);
    double n_tok = (double)r->n_samples * (double)r->seqlen;
    for (int g = 0; g < s->d->n_groups; g++) {
        if (st == DSQ_OK && sum[g])
            for (int64_t c = 0; c < dsq_seq_lin_in(s, dsq_seq_group_first(s, g)); c++)
                imp[g][c] = (float)(sum[g][c] / n_tok);
        free(sum[g]);
    }
    return st;
}

static dsq_status rtn_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout, dsq_seq_report *rep)
{
    (void)rep;
    if (!weighted(s->o)) {
        for (int id = 0; id < s->d->n_linears; id++)
            if (s->ok[id]) DSQ_TRY(dsq_seq_quantize_rtn(s, id, DSQ_INTQ_RULE_AWQ, NULL));
        return DSQ_OK;
    }
    if (dsq_arch_layer_is_moe(&s->m->arch, s->l))
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "rtn --grid imatrix-mse: MoE layers are not supported yet (--grid mse is)");
    float *imp[DSQ_BLOCK_MAX_GROUPS] = {NULL};
    dsq_status st = importance(s, r, hin, imp);
    for (int id = 0; id < s->d->n_linears && st == DSQ_OK; id++)
        if (s->ok[id]) st = dsq_seq_quantize_rtn(s, id, DSQ_INTQ_RULE_AWQ, imp[s->d->linears[id].group]);
    for (int g = 0; g < DSQ_BLOCK_MAX_GROUPS; g++) free(imp[g]);
    if (st != DSQ_OK) return st;
    dsq_seq_hooks h;
    dsq_seq_hooks_init(&h);
    return dsq_seq_run_pass(r, s->l, DSQ_SEQ_WHOLE_LAYER, hin, hout, r->n_samples, &h);
}

/* A routed expert: the same rule and grid on each of its linears (the
 * weighted grid never gets here: rtn_layer refuses MoE layers for it). */
static dsq_status rtn_expert(dsq_seq_expert *x, dsq_seq_report *rep)
{
    (void)rep;
    dsq_intq_params p = x->s->o->q;
    p.rule = DSQ_INTQ_RULE_AWQ;
    for (int k = 0; k < DSQ_INT_EXPERT_LINEARS; k++) {
        if (!x->ok[k]) continue;
        DSQ_TRY(dsq_intq_quantize(x->w[k], x->out[k], x->in[k], &p, NULL, &x->q[k]));
        x->has_q[k] = true;
        DSQ_TRY(dsq_intq_dequantize(&x->q[k], x->w[k]));
    }
    return DSQ_OK;
}

static unsigned rtn_stats(const dsq_seq_opts *o) { return weighted(o) ? DSQ_STAT_IMATRIX : 0; }

const dsq_method dsq_method_rtn = {"rtn",     0,          DSQ_INT_FORMAT_GPTQ, 0,    NULL, rtn_layer,
                                   rtn_stats, rtn_expert, DSQ_INTQ_GRID_MSE,   false};
