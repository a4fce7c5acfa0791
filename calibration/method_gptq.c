/* True-sequential GPTQ (IST-DASLab/gptq llama.py) over the block
 * description's groups: each group's Hessian comes from inputs computed with
 * the earlier groups already quantized, from a pass of the group's half that
 * stops at the group's first linear. A half's tail group keeps that input
 * when it fits (keep_tail_input), so the half is finished with one product
 * instead of a second pass (for a Llama block: o_proj, and down_proj at
 * calibration sizes where its wider input fits; else the MLP runs again). */
#include <stdlib.h>
#include <string.h>

#include "calibration/method.h"
#include "calibration/seq_internal.h"
#include "core/bigbuf.h"
#include "core/clock.h"
#include "core/log.h"

/* GPTQ of one F32 matrix with Hessian H; w becomes its dequantized value. */
static dsq_status gptq_one(const dsq_seq_opts *o, const char *name, float *w, int64_t out, int64_t in,
                           const dsq_hessian *H, dsq_intq *q, dsq_seq_report *rep)
{
    dsq_gptq_opts go = dsq_gptq_default_opts();
    go.q = o->q;
    go.q.rule = DSQ_INTQ_RULE_GPTQ;
    go.percdamp = o->damp;
    go.act_order = o->act_order;
    go.static_groups = o->static_groups;
    go.refit = o->refit;
    go.name = name;
    dsq_gptq_report gr;
    DSQ_TRY(dsq_gptq_quantize(w, out, in, H->h, &go, q, &gr));
    rep->gptq_loss += gr.loss;
    return dsq_intq_dequantize(q, w);
}

static dsq_status quantize_group(dsq_seq_layer *s, int g, const dsq_hessian *H, dsq_seq_report *rep)
{
    for (int id = 0; id < s->d->n_linears; id++) {
        if (s->d->linears[id].group != g || !s->ok[id]) continue;
        char name[160];
        if (s->o->gguf) {
            DSQ_TRY(dsq_seq_gguf_linear(s, id, H, rep));
            continue;
        }
        dsq_seq_lin_name(s, id, name, sizeof name);
        DSQ_TRY(gptq_one(s->o, name, s->w[id], dsq_seq_lin_out(s, id), dsq_seq_lin_in(s, id), H, &s->q[id], rep));
        s->has_q[id] = true;
    }
    return DSQ_OK;
}

/* Collects group g's Hessian from a pass of its half over in that stops at
 * the group's first linear (capturing that input into cap when not NULL),
 * then quantizes the group's linears. */
static dsq_status gptq_group(dsq_seq_layer *s, dsq_seq_runner *r, int g, const float *in, float *cap,
                             dsq_seq_report *rep)
{
    int first = dsq_seq_group_first(s, g);
    dsq_hessian H;
    DSQ_TRY(dsq_hessian_init(&H, dsq_seq_lin_in(s, first)));
    H.bf16 = s->o->bf16;
    dsq_seq_hooks h;
    dsq_seq_hooks_init(&h);
    h.H[first] = &H; /* the group's linears share this input */
    h.cap[first] = cap;
    h.stop_after = first;
    double t0 = dsq_now_s();
    dsq_status st = dsq_seq_run_pass(r, s->l, s->d->groups[g].half, in, NULL, r->n_samples, &h);
    if (st == DSQ_OK) st = dsq_hessian_finalize(&H);
    double t1 = dsq_now_s();
    if (st == DSQ_OK) st = quantize_group(s, g, &H, rep);
    DSQ_LOGD("gptq layer %d %s group: pass and Hessian %.2f s, quantization %.2f s", s->l, s->d->groups[g].name,
             t1 - t0, dsq_now_s() - t1);
    dsq_hessian_free(&H);
    return st;
}

/* out = in + the tail product on the captured inputs, sample by sample. */
static dsq_status finish_half(dsq_seq_layer *s, dsq_seq_runner *r, int half, const float *cap, int64_t in_w,
                              const float *in, float *out)
{
    size_t per = (size_t)r->seqlen * (size_t)in_w, rows = (size_t)r->seqlen * (size_t)r->dim;
    for (int i = 0; i < r->n_samples; i++) {
        if (out != in) memcpy(out + (size_t)i * rows, in + (size_t)i * rows, rows * sizeof *out);
        DSQ_TRY(dsq_forward_tail(r->ctx, s->l, half, cap + (size_t)i * per, out + (size_t)i * rows, r->seqlen));
    }
    return DSQ_OK;
}

/* A tail input of w columns is kept when it takes no more memory than the two
 * hidden-state buffers the driver holds already, or at most 512 MiB: the
 * second pass it saves costs more than the copy at any size, but memory
 * stays near one layer plus the activations. */
static bool keep_tail_input(const dsq_seq_runner *r, int64_t w)
{
    double tokens = (double)r->n_samples * (double)r->seqlen, bytes = tokens * (double)w * sizeof(float);
    return bytes <= 2.0 * tokens * (double)r->dim * sizeof(float) || bytes <= 512.0 * 1024 * 1024;
}

/* One half: its groups in order from in, then out = the half's output. */
static dsq_status gptq_half(dsq_seq_layer *s, dsq_seq_runner *r, int half, const float *in, float *out,
                            dsq_seq_report *rep)
{
    for (int g = 0; g < s->d->n_groups; g++) {
        const dsq_block_group *gd = &s->d->groups[g];
        if (gd->half != half || !dsq_seq_group_any(s, g)) continue;
        int64_t w = dsq_seq_lin_in(s, dsq_seq_group_first(s, g));
        if (!gd->tail || !keep_tail_input(r, w)) {
            DSQ_TRY(gptq_group(s, r, g, in, NULL, rep));
            continue;
        }
        float *cap = dsq_seq_tail_buffer(r, (size_t)r->seqlen * (size_t)w * (size_t)r->n_samples * sizeof *cap);
        if (!cap)
            return dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory for the %s group's inputs (%d x %d tokens)", gd->name,
                            r->n_samples, r->seqlen);
        dsq_status st = gptq_group(s, r, g, in, cap, rep);
        if (st == DSQ_OK) st = finish_half(s, r, half, cap, w, in, out);
        return st; /* the tail is the half's last group */
    }
    return dsq_seq_run_pass(r, s->l, half, in, out, r->n_samples, NULL);
}

dsq_status dsq_seq_gptq_layer(dsq_seq_layer *s, dsq_seq_runner *r, const float *hin, float *hout, dsq_seq_report *rep)
{
    const float *in = hin;
    for (int h = 0; h < s->d->n_halves; h++) {
        DSQ_TRY(gptq_half(s, r, h, in, hout, rep));
        in = hout; /* later halves run in place on the output */
    }
    return DSQ_OK;
}

/* Linears k of expert x from the Hessian of rows x (n of them). */
static dsq_status gptq_expert_linears(dsq_seq_expert *x, const int *ks, int nk, const float *rows, int64_t n,
                                      dsq_seq_report *rep)
{
    dsq_hessian H;
    DSQ_TRY(dsq_hessian_init(&H, x->in[ks[0]]));
    H.bf16 = x->s->o->bf16;
    dsq_status st = dsq_hessian_add(&H, rows, n);
    if (st == DSQ_OK) st = dsq_hessian_finalize(&H);
    for (int i = 0; i < nk && st == DSQ_OK; i++) {
        int k = ks[i];
        if (!x->ok[k]) continue;
        if (x->s->o->gguf) { /* GGUF blocks of the stacked expert tensor */
            st = dsq_seq_gguf_expert(x, k, &H, rep);
            continue;
        }
        char name[192];
        dsq_seq_expert_name(x, k, name, sizeof name);
        st = gptq_one(x->s->o, name, x->w[k], x->out[k], x->in[k], &H, &x->q[k], rep);
        x->has_q[k] = st == DSQ_OK;
    }
    dsq_hessian_free(&H);
    return st;
}

/* True-sequential within the expert: gate and up from the expert's input
 * rows, then down from the activations of the quantized gate and up. */
dsq_status dsq_seq_gptq_expert(dsq_seq_expert *x, dsq_seq_report *rep)
{
    DSQ_TRY(gptq_expert_linears(x, (const int[]){0, 1}, 2, x->x, x->n_tok, rep));
    size_t n = (size_t)x->n_tok * (size_t)x->out[0];
    float *act = dsq_bigbuf_alloc(n * sizeof *act), *tmp = dsq_bigbuf_alloc(n * sizeof *tmp);
    dsq_status st = act && tmp ? dsq_seq_expert_act(x, x->x, x->n_tok, act, tmp)
                               : dsq_fail(DSQ_ERR_NOMEM, "gptq: out of memory for an expert's activations");
    free(tmp);
    if (st == DSQ_OK) st = gptq_expert_linears(x, (const int[]){2}, 1, act, x->n_tok, rep);
    free(act);
    return st;
}

const dsq_method dsq_method_gptq = {
    "gptq", DSQ_STAT_XTX,        DSQ_INT_FORMAT_GPTQ,       2048, NULL, dsq_seq_gptq_layer,
    NULL,   dsq_seq_gptq_expert, DSQ_INTQ_GRID_IMATRIX_MSE, false};
