#include "calibration/int_export.h"
#include "formats/block.h"

#include <stdlib.h>
#include <string.h>

static dsq_status linear_rows(void *user, int64_t r0, int64_t nr, float *dst)
{
    return dsq_linear_rows_f32(user, r0, nr, dst);
}

static dsq_status emit(void *user, const dsq_seq_layer_out *l) { return dsq_int_writer_layer(user, l); }

static dsq_status emit_expert(void *user, const dsq_seq_expert_out *x) { return dsq_int_writer_expert(user, x); }

/* What the writer must know before the first layer: which linears the
 * driver will quantize and which carry biases. */
static dsq_status make_source(const dsq_model *m, const dsq_seq_opts *o, dsq_int_source *src)
{
    memset(src, 0, sizeof *src);
    int nl = m->block->n_linears;
    size_t n = (size_t)m->arch.n_layers * (size_t)nl;
    bool *q = calloc(n ? n : 1, sizeof *q), *b = calloc(n ? n : 1, sizeof *b);
    if (!q || !b) {
        free(q);
        free(b);
        return dsq_fail(DSQ_ERR_NOMEM, "export: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        int64_t l = (int64_t)(i / (size_t)nl);
        int id = (int)(i % (size_t)nl);
        const dsq_block_linear *bl = &m->block->linears[id];
        if (!dsq_block_linear_present(m->block, &m->arch, l, id) || bl->router) continue;
        int64_t out, in;
        dsq_block_linear_shape(m->block, &m->arch, id, &out, &in);
        q[i] = dsq_intq_fits(&o->q, in);
        b[i] = !bl->expert && m->layers[l].lin[id].bias != NULL;
    }
    src->ckpt = m->ckpt;
    src->arch = &m->arch;
    src->block = m->block;
    src->vocab = m->vocab;
    src->tied = m->tied;
    src->permute_qk = m->rope_layout == DSQ_ROPE_NORM && m->ckpt->kind == DSQ_CKPT_GGUF;
    src->quantized = q;
    src->has_bias = b;
    return DSQ_OK;
}

static dsq_status write_all(dsq_model *m, const dsq_calib_set *calib, dsq_seq_opts *o, dsq_int_writer *w,
                            dsq_seq_report *rep, dsq_seq_keep **keep)
{
    dsq_linear E;
    DSQ_TRY(dsq_linear_from_tensor(&E, &m->tok_embd));
    dsq_status s = dsq_int_writer_rows(w, m->vocab, m->dim, linear_rows, &E);
    dsq_linear_release(&E);
    DSQ_TRY(s);
    o->emit = emit;
    o->emit_expert = emit_expert;
    o->user = w;
    DSQ_TRY(dsq_seq_quantize(m, calib, o, rep, keep));
    DSQ_TRY(dsq_int_writer_vector(w, m->output_norm, (size_t)m->dim));
    if (!m->tied) DSQ_TRY(dsq_int_writer_rows(w, m->vocab, m->dim, linear_rows, &m->output));
    return DSQ_OK;
}

dsq_status dsq_int_export(dsq_model *m, const dsq_calib_set *calib, const dsq_seq_opts *o_in, const dsq_int_spec *spec,
                          const dsq_outdir *d, dsq_seq_report *rep, dsq_seq_keep **keep)
{
    if (keep) *keep = NULL;
    DSQ_TRY(dsq_block_require(m->block, &m->arch, DSQ_BLOCK_CAN_CALIBRATE, m->ckpt->path));
    dsq_seq_opts o = *o_in;
    if (o.max_layers > 0 && o.max_layers < m->arch.n_layers)
        return dsq_fail(DSQ_ERR_ARG, "export: an artifact holds every layer; max_layers %d of %lld is for in-memory runs",
                        o.max_layers, (long long)m->arch.n_layers);
    dsq_int_source src;
    DSQ_TRY(make_source(m, &o, &src));
    dsq_int_writer *w = NULL;
    dsq_status s = dsq_int_writer_new(dsq_outdir_tmp_path(d), &src, spec, &w);
    if (s == DSQ_OK) s = write_all(m, calib, &o, w, rep, keep);
    if (s == DSQ_OK) s = dsq_int_writer_finish(w, d);
    dsq_int_writer_free(w);
    free((void *)src.quantized);
    free((void *)src.has_bias);
    return s;
}
