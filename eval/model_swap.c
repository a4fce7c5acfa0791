#include "eval/model_swap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quantizers/qtypes.h"

/* One swapped storage: a linear (W set) or the embedding (W NULL). */
typedef struct swap_item {
    dsq_linear *W;
    dsq_linear saved;
    dsq_tensor saved_embd;
    uint8_t *buf; /* the copy, owned by this item (the first of a stacked tensor's) or NULL */
} swap_item;

struct dsq_swap {
    swap_item *it;
    size_t n, cap;
};

typedef enum kind { K_NONE, K_EMBD, K_OUTPUT, K_LINEAR, K_EXPERTS, K_KB, K_VB } kind;

/* What `name` is in m: kind, layer and block linear id. */
static kind resolve(const dsq_model *m, const char *name, int *layer, int *id)
{
    *layer = -1, *id = -1;
    if (!strcmp(name, "token_embd.weight")) return m->tok_embd.data ? K_EMBD : K_NONE;
    if (!strcmp(name, "output.weight")) return m->output.vt && !m->tied ? K_OUTPUT : K_NONE;
    int l, used = 0;
    char stem[64];
    if (sscanf(name, "blk.%d.%63[^.].weight%n", &l, stem, &used) != 2 || name[used] || l < 0 || l >= m->arch.n_layers)
        return K_NONE;
    *layer = l;
    const dsq_layer *L = &m->layers[l];
    if (!strcmp(stem, "attn_k_b")) return L->k_b.vt ? K_KB : K_NONE;
    if (!strcmp(stem, "attn_v_b")) return L->v_b.vt ? K_VB : K_NONE;
    for (int i = 0; i < m->block->n_linears; i++) {
        if (strcmp(m->block->linears[i].gguf, stem)) continue;
        *id = i;
        if (m->block->linears[i].expert) return L->experts[i] ? K_EXPERTS : K_NONE;
        return L->lin[i].vt ? K_LINEAR : K_NONE;
    }
    return K_NONE;
}

bool dsq_swap_supported(const dsq_model *m, const char *name)
{
    int l, id;
    return resolve(m, name, &l, &id) != K_NONE;
}

static dsq_status push(dsq_swap **sw, swap_item it)
{
    if (!*sw && !(*sw = calloc(1, sizeof **sw))) return dsq_fail(DSQ_ERR_NOMEM, "swap: out of memory");
    dsq_swap *s = *sw;
    if (s->n == s->cap) {
        size_t cap = s->cap * 2 + 16;
        swap_item *p = realloc(s->it, cap * sizeof *p);
        if (!p) return dsq_fail(DSQ_ERR_NOMEM, "swap: out of memory");
        s->it = p, s->cap = cap;
    }
    s->it[s->n++] = it;
    return DSQ_OK;
}

static void undo(dsq_model *m, swap_item *it)
{
    if (it->W)
        *it->W = it->saved;
    else
        m->tok_embd = it->saved_embd;
    free(it->buf);
}

/* Rows [0, rows) of width cols, their F32 values from get, quantized to type
 * into out (row_bytes apart) with importance imp, a chunk of rows at a time. */
typedef dsq_status (*rows_fn)(const void *src, int64_t r0, int64_t nr, int64_t cols, float *dst);

static dsq_status linear_rows(const void *src, int64_t r0, int64_t nr, int64_t cols, float *dst)
{
    (void)cols;
    return dsq_linear_rows_f32(src, r0, nr, dst);
}

static dsq_status embd_rows(const void *src, int64_t r0, int64_t nr, int64_t cols, float *dst)
{
    const dsq_tensor *E = src;
    uint64_t rb = 0;
    DSQ_TRY(dsq_type_nbytes(E->type, (uint64_t)cols, &rb));
    return dsq_dequantize(E->type, (const uint8_t *)E->data + (uint64_t)r0 * rb, dst, nr, cols);
}

#define CHUNK_ROWS 64

static dsq_status requantize(rows_fn get, const void *src, int64_t rows, int64_t cols, dsq_type type, const float *imp,
                             uint8_t *out)
{
    uint64_t rb = 0;
    DSQ_TRY(dsq_type_nbytes(type, (uint64_t)cols, &rb));
    float *f = malloc((size_t)(CHUNK_ROWS * cols) * sizeof *f);
    if (!f) return dsq_fail(DSQ_ERR_NOMEM, "swap: out of memory");
    dsq_status st = DSQ_OK;
    for (int64_t r0 = 0; r0 < rows && st == DSQ_OK; r0 += CHUNK_ROWS) {
        int64_t nr = rows - r0 < CHUNK_ROWS ? rows - r0 : CHUNK_ROWS;
        st = get(src, r0, nr, cols, f);
        if (st == DSQ_OK) st = dsq_quantize(type, f, out + (uint64_t)r0 * rb, nr, cols, imp);
    }
    free(f);
    return st;
}

/* n linears of one shape (a stacked tensor's experts, or one) replaced by
 * views into one buffer of their copies in type. */
static dsq_status swap_linears(dsq_swap **sw, dsq_linear *const *W, int64_t n, const char *name, dsq_type type,
                               const dsq_imatrix *im)
{
    const int64_t out = W[0]->out, in = W[0]->in;
    const float *imp = NULL;
    if (im) DSQ_TRY(dsq_imatrix_for_tensor(im, name, in, n, &imp));
    uint64_t rb = 0;
    DSQ_TRY(dsq_type_nbytes(type, (uint64_t)in, &rb));
    uint8_t *buf = malloc((size_t)((uint64_t)n * (uint64_t)out * rb));
    if (!buf) return dsq_fail(DSQ_ERR_NOMEM, "swap: %s: out of memory", name);
    dsq_status st = DSQ_OK;
    for (int64_t e = 0; e < n && st == DSQ_OK; e++)
        st = requantize(linear_rows, W[e], out, in, type, imp ? imp + e * in : NULL, buf + (uint64_t)(e * out) * rb);
    size_t first = *sw ? (*sw)->n : 0;
    bool owned = false; /* by the first pushed item, which frees buf on undo */
    for (int64_t e = 0; e < n && st == DSQ_OK; e++) {
        swap_item it = {.W = W[e], .saved = *W[e], .buf = e == 0 ? buf : NULL};
        dsq_linear nw;
        st = dsq_linear_init(&nw, type, buf + (uint64_t)(e * out) * rb, out, in);
        if (st == DSQ_OK) st = push(sw, it);
        if (st == DSQ_OK) owned = true, nw.bias = W[e]->bias, *W[e] = nw;
    }
    if (st != DSQ_OK) {
        while (*sw && (*sw)->n > first) undo(NULL, &(*sw)->it[--(*sw)->n]);
        if (!owned) free(buf);
        return dsq_fail_context(st, "swap %s", name);
    }
    return DSQ_OK;
}

static dsq_status swap_embd(dsq_model *m, dsq_swap **sw, dsq_type type, const dsq_imatrix *im)
{
    dsq_tensor *E = &m->tok_embd;
    const int64_t rows = E->shape[0], cols = E->shape[1];
    const float *imp = NULL;
    if (im) DSQ_TRY(dsq_imatrix_for_tensor(im, "token_embd.weight", cols, 1, &imp));
    uint64_t rb = 0;
    DSQ_TRY(dsq_type_nbytes(type, (uint64_t)cols, &rb));
    uint8_t *buf = malloc((size_t)((uint64_t)rows * rb));
    if (!buf) return dsq_fail(DSQ_ERR_NOMEM, "swap: token_embd.weight: out of memory");
    dsq_status st = requantize(embd_rows, E, rows, cols, type, imp, buf);
    dsq_linear head;
    if (st == DSQ_OK && m->tied) st = dsq_linear_init(&head, type, buf, rows, cols);
    if (st == DSQ_OK) st = push(sw, (swap_item){.saved_embd = *E, .buf = buf});
    if (st != DSQ_OK) {
        free(buf);
        return dsq_fail_context(st, "swap token_embd.weight");
    }
    E->type = type, E->data = buf, E->nbytes = (uint64_t)rows * rb;
    if (m->tied) { /* the head is a view of the embedding: it follows */
        dsq_status s2 = push(sw, (swap_item){.W = &m->output, .saved = m->output});
        if (s2 != DSQ_OK) {
            undo(m, &(*sw)->it[--(*sw)->n]);
            return s2;
        }
        head.bias = m->output.bias;
        m->output = head;
    }
    return DSQ_OK;
}

dsq_status dsq_swap_tensor(dsq_model *m, dsq_swap **sw, const char *name, dsq_type type, const dsq_imatrix *im)
{
    int l, id;
    kind k = resolve(m, name, &l, &id);
    dsq_layer *L = l >= 0 ? &m->layers[l] : NULL;
    switch (k) {
    case K_EMBD: return swap_embd(m, sw, type, im);
    case K_OUTPUT: return swap_linears(sw, (dsq_linear *[]){&m->output}, 1, name, type, im);
    case K_LINEAR: return swap_linears(sw, (dsq_linear *[]){&L->lin[id]}, 1, name, type, im);
    case K_KB: return swap_linears(sw, (dsq_linear *[]){&L->k_b}, 1, name, type, im);
    case K_VB: return swap_linears(sw, (dsq_linear *[]){&L->v_b}, 1, name, type, im);
    case K_EXPERTS: {
        int64_t E = m->arch.moe.n_routed;
        dsq_linear **W = malloc((size_t)E * sizeof *W);
        if (!W) return dsq_fail(DSQ_ERR_NOMEM, "swap: out of memory");
        for (int64_t e = 0; e < E; e++) W[e] = &L->experts[id][e];
        dsq_status st = swap_linears(sw, W, E, name, type, im);
        free(W);
        return st;
    }
    case K_NONE: break;
    }
    return dsq_fail(DSQ_ERR_NOT_FOUND, "swap: %s is not a tensor of the loaded model this can replace", name);
}

void dsq_swap_restore(dsq_model *m, dsq_swap *sw)
{
    if (!sw) return;
    while (sw->n) undo(m, &sw->it[--sw->n]);
    free(sw->it);
    free(sw);
}
