/* One linear of a GPTQ layer into GGUF blocks (seq_internal.h). */
#include <stdlib.h>

#include "calibration/method.h"
#include "calibration/seq_internal.h"
#include "core/bigbuf.h"
#include "core/dtype.h"
#include "core/log.h"
#include "quantizers/gptq_blocks.h"
#include "quantizers/qtypes.h"

dsq_status dsq_seq_gguf_linear(dsq_seq_layer *s, int id, const dsq_hessian *H, dsq_seq_report *rep)
{
    const dsq_seq_gguf *g = s->o->gguf;
    dsq_type type;
    const float *imp = NULL;
    DSQ_TRY(g->target(g->user, s->l, id, &type, &imp));
    const dsq_qtype *qt = dsq_qtype_get(type);
    if (!qt || !qt->quantize_row) return DSQ_OK; /* the plan keeps it in float */
    char name[160];
    dsq_seq_lin_name(s, id, name, sizeof name);
    const int64_t rows = dsq_seq_lin_out(s, id), cols = dsq_seq_lin_in(s, id);
    uint64_t row_bytes = 0;
    DSQ_TRY(dsq_type_nbytes(type, (uint64_t)cols, &row_bytes));
    const uint64_t nbytes = row_bytes * (uint64_t)rows;
    void *buf = dsq_bigbuf_alloc((size_t)nbytes);
    if (!buf)
        return dsq_fail(DSQ_ERR_NOMEM, "gptq: %s: out of memory for %llu bytes", name, (unsigned long long)nbytes);
    dsq_gptq_blocks_opts o = {
        .type = type, .percdamp = s->o->damp, .act_order = s->o->act_order, .importance = imp, .name = name};
    dsq_gptq_report gr;
    dsq_status st = dsq_gptq_blocks_quantize(s->w[id], rows, cols, H->h, &o, buf, &gr);
    if (st == DSQ_OK) {
        rep->gptq_loss += gr.loss;
        DSQ_LOGD("gptq: %s -> %s, loss %.6g, dampening %g", name, dsq_type_name(type), gr.loss, gr.percdamp);
        /* the later groups and layers see what the file will hold */
        st = dsq_dequantize(type, buf, s->w[id], rows, cols);
    }
    if (st == DSQ_OK) st = g->put(g->user, s->l, id, type, buf, nbytes);
    if (st == DSQ_OK) s->has_gguf[id] = true;
    free(buf);
    return st;
}
