/* One linear of a GPTQ or AWQ layer into GGUF blocks (seq_internal.h). */
#include <stdio.h>
#include <stdlib.h>

#include "calibration/method.h"
#include "calibration/seq_internal.h"
#include "core/bigbuf.h"
#include "core/dtype.h"
#include "core/log.h"
#include "quantizers/gptq_blocks.h"
#include "quantizers/qtypes.h"

/* A buffer for rows x cols weights in type. */
static dsq_status out_buffer(const char *name, dsq_type type, int64_t rows, int64_t cols, uint64_t *nbytes,
                             uint8_t **buf)
{
    uint64_t row_bytes = 0;
    DSQ_TRY(dsq_type_nbytes(type, (uint64_t)cols, &row_bytes));
    *nbytes = row_bytes * (uint64_t)rows;
    *buf = dsq_bigbuf_alloc((size_t)*nbytes);
    if (!*buf)
        return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for %llu bytes of %s", name, (unsigned long long)*nbytes,
                        dsq_type_name(type));
    return DSQ_OK;
}

/* GPTQ of w [rows x cols] into the blocks target names for (layer, id,
 * expert); the bytes to put, w replaced by their dequantized values (the
 * later groups and layers see what the file will hold). *done: whether the
 * target was a block type. */
static dsq_status gptq_into_blocks(const dsq_seq_opts *so, int layer, int id, int expert, const char *name, float *w,
                                   int64_t rows, int64_t cols, const dsq_hessian *H, dsq_seq_report *rep, bool *done)
{
    const dsq_seq_gguf *g = so->gguf;
    dsq_type type;
    const float *imp = NULL;
    *done = false;
    DSQ_TRY(g->target(g->user, layer, id, expert, &type, &imp));
    const dsq_qtype *qt = dsq_qtype_get(type);
    if (!qt || !qt->quantize_row) return DSQ_OK; /* the plan keeps it in float */
    uint64_t nbytes;
    uint8_t *buf;
    DSQ_TRY(out_buffer(name, type, rows, cols, &nbytes, &buf));
    dsq_gptq_blocks_opts o = {
        .type = type, .percdamp = so->damp, .act_order = so->act_order, .importance = imp, .name = name};
    dsq_gptq_report gr;
    dsq_status st = dsq_gptq_blocks_quantize(w, rows, cols, H->h, &o, buf, &gr);
    if (st == DSQ_OK) {
        rep->gptq_loss += gr.loss;
        DSQ_LOGD("gptq: %s -> %s, loss %.6g, dampening %g", name, dsq_type_name(type), gr.loss, gr.percdamp);
        st = dsq_dequantize(type, buf, w, rows, cols);
    }
    if (st == DSQ_OK) st = g->put(g->user, layer, id, expert, type, buf, nbytes);
    *done = st == DSQ_OK;
    free(buf);
    return st;
}

dsq_status dsq_seq_gguf_linear(dsq_seq_layer *s, int id, const dsq_hessian *H, dsq_seq_report *rep)
{
    char name[160];
    dsq_seq_lin_name(s, id, name, sizeof name);
    bool done;
    DSQ_TRY(gptq_into_blocks(s->o, s->l, id, -1, name, s->w[id], dsq_seq_lin_out(s, id), dsq_seq_lin_in(s, id), H,
                             rep, &done));
    if (done) s->has_gguf[id] = true;
    return DSQ_OK;
}

dsq_status dsq_seq_gguf_expert(dsq_seq_expert *x, int k, const dsq_hessian *H, dsq_seq_report *rep)
{
    char name[192];
    dsq_seq_expert_name(x, k, name, sizeof name);
    bool done;
    DSQ_TRY(gptq_into_blocks(x->s->o, x->s->l, x->id[k], x->e, name, x->w[k], x->out[k], x->in[k], H, rep, &done));
    x->has_gguf[k] = done;
    return DSQ_OK;
}

dsq_status dsq_seq_gguf_target(dsq_seq_layer *s, int id, dsq_type *type, const float **importance)
{
    const dsq_seq_gguf *g = s->o->gguf;
    return g->target(g->user, s->l, id, -1, type, importance);
}

bool dsq_seq_gguf_is_blocks(dsq_type type)
{
    const dsq_qtype *qt = dsq_qtype_get(type);
    return qt && qt->quantize_row;
}

/* w [rows x cols] in type with importance imp, handed to put as (layer, id,
 * expert), then replaced by what the file holds (block types). */
static dsq_status put_rows(const dsq_seq_opts *so, int layer, int id, int expert, const char *name, float *w,
                           int64_t rows, int64_t cols, dsq_type type, const float *imp)
{
    const dsq_seq_gguf *g = so->gguf;
    uint64_t nbytes;
    uint8_t *buf;
    DSQ_TRY(out_buffer(name, type, rows, cols, &nbytes, &buf));
    const size_t row_bytes = (size_t)(nbytes / (uint64_t)rows);
    /* rows in parallel (the type's quantizer is row by row); the first bad
     * row by index is the one reported */
    int64_t bad = rows;
    dsq_status bad_st = DSQ_OK;
    char msg[256] = "";
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t r = 0; r < rows; r++) {
        dsq_status e = dsq_quantize(type, w + r * cols, buf + (size_t)r * row_bytes, 1, cols, imp);
        if (e != DSQ_OK) {
#pragma omp critical(dsq_seq_gguf_put_error)
            if (r < bad) {
                bad = r, bad_st = e;
                snprintf(msg, sizeof msg, "%s", dsq_errmsg());
            }
        }
    }
    dsq_status st = bad_st == DSQ_OK ? DSQ_OK : dsq_fail(bad_st, "%s: row %lld: %s", name, (long long)bad, msg);
    /* the later layers' passes see what the file holds */
    if (st == DSQ_OK && dsq_seq_gguf_is_blocks(type)) st = dsq_dequantize(type, buf, w, rows, cols);
    if (st == DSQ_OK) st = g->put(g->user, layer, id, expert, type, buf, nbytes);
    free(buf);
    return st;
}

dsq_status dsq_seq_gguf_put(dsq_seq_layer *s, int id, dsq_type type, const float *imp)
{
    char name[160];
    dsq_seq_lin_name(s, id, name, sizeof name);
    DSQ_TRY(put_rows(s->o, s->l, id, -1, name, s->w[id], dsq_seq_lin_out(s, id), dsq_seq_lin_in(s, id), type, imp));
    s->has_gguf[id] = true;
    return DSQ_OK;
}

dsq_status dsq_seq_gguf_expert_target(const dsq_seq_expert *x, int k, dsq_type *type, const float **importance)
{
    const dsq_seq_gguf *g = x->s->o->gguf;
    return g->target(g->user, x->s->l, x->id[k], x->e, type, importance);
}

dsq_status dsq_seq_gguf_expert_put(dsq_seq_expert *x, int k, dsq_type type, const float *imp)
{
    char name[192];
    dsq_seq_expert_name(x, k, name, sizeof name);
    DSQ_TRY(put_rows(x->s->o, x->s->l, x->id[k], x->e, name, x->w[k], x->out[k], x->in[k], type, imp));
    x->has_gguf[k] = true;
    return DSQ_OK;
}
