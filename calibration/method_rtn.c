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

const dsq_method dsq_method_rtn = {"rtn", 0, DSQ_INT_FORMAT_GPTQ, 0, NULL, rtn_layer, NULL};
