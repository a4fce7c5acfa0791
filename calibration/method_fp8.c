/* FP8 E4M3 by RTN under one of the schemes of quantizers/w8.h, as
 * llm-compressor's FP8 presets (QuantizationModifier with FP8_DYNAMIC, FP8,
 * FP8_BLOCK; weight-only: FP8 weights with no input_activations): dynamic,
 * block and weight-only need no data; static per-tensor activations take
 * their input_scale from max |x| over every calibration token of the
 * quantized layer's inputs, and --kv-cache-fp8 its k_scale / v_scale
 * (calibration/w8_layer.c). */
#include <math.h>
#include <stdlib.h>

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

static float max_abs(const float *x, int64_t n)
{
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

/* Static per-tensor input scales of an expert from its statistics rows (the
 * tokens routed to it): gate and up from its input, down from the
 * activations of the quantized gate and up. */
static dsq_status expert_act_scales(dsq_seq_expert *x)
{
    float s_in = dsq_w8_static_scale(DSQ_W8_FP8, max_abs(x->x, x->n_tok * x->in[0]));
    x->q8[0].act_scale = x->q8[1].act_scale = s_in;
    size_t n = (size_t)x->n_tok * (size_t)x->out[0];
    float *act = malloc(n * sizeof *act), *tmp = malloc(n * sizeof *tmp);
    dsq_status st = act && tmp ? dsq_seq_expert_act(x, x->x, x->n_tok, act, tmp)
                               : dsq_fail(DSQ_ERR_NOMEM, "fp8: out of memory for an expert's activations");
    if (st == DSQ_OK) x->q8[2].act_scale = dsq_w8_static_scale(DSQ_W8_FP8, max_abs(act, (int64_t)n));
    free(act);
    free(tmp);
    return st;
}

/* A routed expert: RTN under the scheme; static schemes take their input
 * scales from the expert's routed tokens. */
static dsq_status fp8_expert(dsq_seq_expert *x, dsq_seq_report *rep)
{
    (void)rep;
    if (x->s->o->w8.kv_fp8)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "fp8: KV-cache scales of MLA's latent cache are not collected yet");
    DSQ_TRY(dsq_seq_w8_expert_rtn(x));
    return x->s->o->w8.scheme.act == DSQ_W8_ACT_TENSOR ? expert_act_scales(x) : DSQ_OK;
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

const dsq_method dsq_method_fp8 = {
    "fp8", DSQ_STAT_MAX_ABS, DSQ_INT_FORMAT_CT, 512, fp8_check, fp8_layer, fp8_stats, fp8_expert};
