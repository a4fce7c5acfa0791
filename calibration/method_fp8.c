/* FP8 E4M3 by RTN under one of the schemes of quantizers/w8.h, as
 * llm-compressor's FP8 presets (QuantizationModifier with FP8_DYNAMIC, FP8,
 * FP8_BLOCK; weight-only: FP8 weights with no input_activations): dynamic,
 * block and weight-only need no data; static per-tensor activations take
 * their input_scale from max |x| over every calibration token of the
 * quantized layer's inputs, and --kv-cache-fp8 its k_scale / v_scale
 * (calibration/w8_layer.c). */

#include "calibration/method.h"
#include "calibration/seq_internal.h"

static dsq_status fp8_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout, dsq_seq_report *rep)
{
    (void)rep;
    DSQ_TRY(dsq_seq_w8_check_finite(s));
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->ok[id]) DSQ_TRY(dsq_seq_w8_rtn(s, id));
    return r->ctx ? dsq_seq_w8_final_pass(s, r, hin, hout) : DSQ_OK;
}

/* A routed expert: RTN under the scheme; static schemes take their input
 * scales from the expert's routed tokens. */
static dsq_status fp8_expert(dsq_seq_expert *x, dsq_seq_report *rep)
{
    (void)rep;
    if (x->s->o->w8.kv_fp8)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "fp8: KV-cache scales of MLA's latent cache are not collected yet");
    DSQ_TRY(dsq_seq_w8_expert_rtn(x));
    return x->s->o->w8.scheme.act == DSQ_W8_ACT_TENSOR ? dsq_seq_w8_expert_act_scales(x) : DSQ_OK;
}

static unsigned fp8_stats(const dsq_seq_opts *o)
{
    return o->w8.scheme.act == DSQ_W8_ACT_TENSOR || o->w8.kv_fp8 ? DSQ_STAT_MAX_ABS : 0;
}

static dsq_status fp8_check(const dsq_seq_opts *o)
{
    DSQ_TRY(dsq_w8_scheme_check(&o->w8.scheme));
    if (o->w8.scheme.kind != DSQ_W8_FP8) return dsq_fail(DSQ_ERR_ARG, "fp8: the scheme is not an FP8 one");
    if (o->q.bits != 8 || o->q.group_size != -1)
        return dsq_fail(DSQ_ERR_ARG,
                        "fp8: weights are 8-bit with the scheme's own scales (group -1); got %d bits, "
                        "group %d",
                        o->q.bits, o->q.group_size);
    if (o->w8.smooth_only || o->w8.gptq)
        return dsq_fail(DSQ_ERR_ARG, "fp8: smoothing and GPTQ are smoothquant options");
    return DSQ_OK;
}

const dsq_method dsq_method_fp8 = {"fp8",     DSQ_STAT_MAX_ABS, DSQ_INT_FORMAT_CT,    512,  fp8_check, fp8_layer,
                                   fp8_stats, fp8_expert,       DSQ_INTQ_GRID_MINMAX, false};
