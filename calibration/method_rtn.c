/* RTN: each linear rounded to its groups' min/max grid (AutoAWQ's rule, as
 * llm-compressor's and AutoAWQ's RTN baselines use); no data. */
#include "calibration/method.h"
#include "calibration/seq_internal.h"

static dsq_status rtn_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout, dsq_seq_report *rep)
{
    (void)r, (void)hin, (void)hout, (void)rep;
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->ok[id]) DSQ_TRY(dsq_seq_quantize_rtn(s, id, DSQ_INTQ_RULE_AWQ));
    return DSQ_OK;
}

/* A routed expert: the same rule on each of its linears. */
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

const dsq_method dsq_method_rtn = {"rtn", 0, DSQ_INT_FORMAT_GPTQ, 0, NULL, rtn_layer, NULL, rtn_expert};
