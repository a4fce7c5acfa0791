/* Per-layer weight error of a quantized GGUF against its base (layer_error.h). */
#include "eval/layer_error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/fileio.h"
#include "formats/gguf.h"
#include "formats/gguf_quantize.h"
#include "quantizers/qtypes.h"

typedef struct acc {
    dsq_layer_error *e;
    size_t n;
} acc;

static dsq_layer_error *slot(acc *a, int layer)
{
    for (size_t i = 0; i < a->n; i++)
        if (a->e[i].layer == layer) return &a->e[i];
    dsq_layer_error *e = realloc(a->e, (a->n + 1) * sizeof *e);
    if (!e) return NULL;
    a->e = e;
    size_t at = a->n;
    while (at > 0 && e[at - 1].layer > layer) { /* keep ascending */
        e[at] = e[at - 1];
        at--;
    }
    e[at] = (dsq_layer_error){.layer = layer};
    a->n++;
    return &e[at];
}

static bool same_shape(const dsq_gguf_tensor_info *a, const dsq_gguf_tensor_info *b)
{
    if (a->n_dims != b->n_dims) return false;
    for (uint32_t d = 0; d < a->n_dims; d++)
        if (a->ne[d] != b->ne[d]) return false;
    return true;
}

/* One row's weighted squared error and norm: base x, quantized y, column weights w (NULL: 1). */
static void add_row(dsq_layer_error *e, const float *x, const float *y, const float *w, int64_t n)
{
    for (int64_t j = 0; j < n; j++) {
        double c = w ? w[j] : 1.0, d = (double)x[j] - (double)y[j];
        e->err += c * d * d;
        e->norm += c * (double)x[j] * (double)x[j];
    }
}

/* Row by row, so memory stays at two rows. */
static dsq_status compare(const dsq_gguf *gb, uint64_t ib, const dsq_gguf *gq, uint64_t iq, const float *w,
                          dsq_layer_error *e)
{
    const dsq_gguf_tensor_info *t = &gq->tensors[iq];
    int64_t ne0 = t->ne[0], rows = 1, ne1 = t->n_dims > 1 ? t->ne[1] : 1;
    for (uint32_t d = 1; d < t->n_dims; d++) rows *= t->ne[d];
    dsq_tensor vb, vq;
    DSQ_TRY(dsq_gguf_tensor(gb, ib, &vb));
    DSQ_TRY(dsq_gguf_tensor(gq, iq, &vq));
    const dsq_type_info *tb = dsq_type_get((int)vb.type), *tq = dsq_type_get((int)vq.type);
    size_t rb = (size_t)(ne0 / tb->block_elems) * tb->block_bytes,
           rq = (size_t)(ne0 / tq->block_elems) * tq->block_bytes;
    float *x = malloc((size_t)ne0 * 2 * sizeof *x);
    if (!x) return dsq_fail(DSQ_ERR_NOMEM, "layer errors: tensor %s: out of memory", t->name);
    dsq_status st = DSQ_OK;
    for (int64_t r = 0; st == DSQ_OK && r < rows; r++) {
        st = dsq_dequantize(vb.type, (const uint8_t *)vb.data + (size_t)r * rb, x, 1, ne0);
        if (st == DSQ_OK) st = dsq_dequantize(vq.type, (const uint8_t *)vq.data + (size_t)r * rq, x + ne0, 1, ne0);
        if (st == DSQ_OK) add_row(e, x, x + ne0, w ? w + ((r / ne1) % (t->n_dims > 2 ? t->ne[2] : 1)) * ne0 : NULL, ne0);
    }
    free(x);
    if (st != DSQ_OK) return dsq_fail_context(st, "layer errors: tensor %s", t->name);
    e->n_tensors++;
    return DSQ_OK;
}

static int layer_of(const char *name)
{
    int layer = -1;
    if (sscanf(name, "blk.%d.", &layer) != 1 || layer < 0) layer = -1;
    return layer;
}

/* A Hugging Face base: its tensors as the GGUF quantizer sees them (F32, named,
 * ordered and stacked as in the file: q/k rows permuted, experts stacked, MLA's
 * kv_b split), each compared with the quantized file's tensor of that name. */
typedef struct hf_walk {
    const dsq_gguf *gq;
    acc *a;
} hf_walk;

static dsq_status visit_hf(void *user, const dsq_gguf_quantize_tensor *t, const float *x, const float *w)
{
    hf_walk *h = user;
    int64_t iq = dsq_gguf_find_tensor(h->gq, t->name);
    if (iq < 0) return DSQ_OK;
    const dsq_gguf_tensor_info *q = &h->gq->tensors[iq];
    const dsq_type_info *ti = dsq_type_get((int)q->type);
    bool same = ti && ti->quantized && (int)q->n_dims == t->n_dims;
    for (int d = 0; same && d < t->n_dims; d++) same = (int64_t)q->ne[d] == t->ne[d];
    if (!same) return DSQ_OK;
    dsq_tensor vq;
    DSQ_TRY(dsq_gguf_tensor(h->gq, (uint64_t)iq, &vq));
    int64_t ne0 = t->ne[0], ne1 = t->n_dims > 1 ? t->ne[1] : 1, rows = 1;
    for (int d = 1; d < t->n_dims; d++) rows *= t->ne[d];
    size_t rq = (size_t)(ne0 / ti->block_elems) * ti->block_bytes;
    float *y = malloc((size_t)ne0 * sizeof *y);
    dsq_layer_error *e = slot(h->a, layer_of(t->name));
    if (!y || !e) {
        free(y);
        return dsq_fail(DSQ_ERR_NOMEM, "layer errors: tensor %s: out of memory", t->name);
    }
    dsq_status st = DSQ_OK;
    for (int64_t r = 0; st == DSQ_OK && r < rows; r++) {
        st = dsq_dequantize(vq.type, (const uint8_t *)vq.data + (size_t)r * rq, y, 1, ne0);
        if (st == DSQ_OK)
            add_row(e, x + r * ne0, y, w ? w + ((r / ne1) % (t->n_dims > 2 ? t->ne[2] : 1)) * ne0 : NULL, ne0);
    }
    free(y);
    if (st != DSQ_OK) return dsq_fail_context(st, "layer errors: tensor %s", t->name);
    e->n_tensors++;
    return DSQ_OK;
}

static dsq_status walk_hf(const char *base, const dsq_gguf *gq, const dsq_imatrix *im, acc *a)
{
    /* any plan that quantizes every matrix; its types do not matter, only its
     * walk: the values are the source's */
    dsq_gguf_quantize_options o = dsq_gguf_quantize_defaults(DSQ_FTYPE_Q8_0);
    o.imatrix = im;
    hf_walk h = {gq, a};
    return dsq_gguf_quantize_visit(base, &o, visit_hf, &h);
}

static dsq_status walk(const dsq_gguf *gb, const dsq_gguf *gq, const dsq_imatrix *im, acc *a)
{
    for (uint64_t iq = 0; iq < gq->n_tensors; iq++) {
        const dsq_gguf_tensor_info *t = &gq->tensors[iq];
        int64_t ib = dsq_gguf_find_tensor(gb, t->name);
        const dsq_type_info *ti = dsq_type_get((int)t->type);
        if (ib < 0 || !ti || !ti->quantized || !same_shape(&gb->tensors[ib], t)) continue;
        const float *w = NULL;
        if (im) DSQ_TRY(dsq_imatrix_for_tensor(im, t->name, t->ne[0], t->n_dims > 2 ? t->ne[2] : 1, &w));
        dsq_layer_error *e = slot(a, layer_of(t->name));
        if (!e) return dsq_fail(DSQ_ERR_NOMEM, "layer errors: out of memory");
        DSQ_TRY(compare(gb, (uint64_t)ib, gq, iq, w, e));
    }
    return DSQ_OK;
}

dsq_status dsq_layer_errors(const char *base, const char *quant, const dsq_imatrix *im, dsq_layer_error **out,
                            size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    dsq_gguf *gb = NULL, *gq = NULL;
    acc a = {0};
    bool hf = dsq_is_dir(base);
    dsq_status st = hf ? DSQ_OK : dsq_gguf_open(base, &gb);
    if (st == DSQ_OK) st = dsq_gguf_open(quant, &gq);
    if (st == DSQ_OK) st = hf ? walk_hf(base, gq, im, &a) : walk(gb, gq, im, &a);
    dsq_gguf_close(gb);
    dsq_gguf_close(gq);
    if (st != DSQ_OK) {
        free(a.e);
        return st;
    }
    *out = a.e;
    *n_out = a.n;
    return DSQ_OK;
}
