/* Folding per-channel scales into a layer (calibration/seq_internal.h),
 * shared by AWQ and SmoothQuant: a group's input x becomes x / s in the
 * operation that produces it and the group's columns take s, so the float
 * function is unchanged. Producers: a norm (its weight divides), a linear
 * whose rows map one to one onto the input columns (SwiGLU's up, v without
 * GQA), or MLA's kv_b value rows (formats/block.h DSQ_SRC_MLA_VALUES). On
 * MoE layers the router is a member of the MLP input group: its columns
 * take the scales too, unquantized, so routing is what it was; the routed
 * experts take them when moe.c copies them (s->expert_in). */
#include <stdlib.h>
#include <string.h>

#include "calibration/seq_internal.h"
#include "quantizers/awq.h"

bool dsq_seq_group_foldable(const dsq_seq_layer *s, int g, int64_t cols)
{
    const dsq_block_group *gd = &s->d->groups[g];
    if (gd->src == DSQ_SRC_NORM) return s->norm[gd->src_index] != NULL;
    if (!s->present[gd->src_index]) return false;
    int64_t rows = dsq_seq_lin_out(s, gd->src_index);
    if (gd->src == DSQ_SRC_LINEAR) return rows == cols;
    const dsq_arch *a = &s->m->arch;
    return rows == a->n_heads * (a->mla.qk_nope_head_dim + a->mla.v_head_dim) && cols == a->n_heads * a->mla.v_head_dim;
}

bool dsq_seq_group_has_experts(const dsq_seq_layer *s, int g)
{
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->d->linears[id].group == g && s->d->linears[id].expert &&
            dsq_block_linear_present(s->d, &s->m->arch, s->l, id))
            return true;
    return false;
}

bool dsq_seq_group_quantizable(const dsq_seq_layer *s, int g)
{
    bool any = false;
    for (int id = 0; id < s->d->n_linears; id++) {
        const dsq_block_linear *bl = &s->d->linears[id];
        if (bl->group != g || bl->router || !dsq_block_linear_present(s->d, &s->m->arch, s->l, id)) continue;
        bool ok = bl->expert ? dsq_intq_fits(&s->o->q, s->m->layers[s->l].experts[id][0].in) : s->ok[id];
        if (!ok) return false;
        any = true;
    }
    return any;
}

static void div_src_rows(dsq_seq_layer *s, int g, const float *sc, int64_t cols)
{
    int src = s->d->groups[g].src_index;
    int64_t in = dsq_seq_lin_in(s, src);
    for (int64_t c = 0; c < cols; c++) {
        int64_t r = dsq_block_src_row(s->d, &s->m->arch, g, c);
        for (int64_t j = 0; j < in; j++) s->w[src][r * in + j] /= sc[c];
        if (s->bias[src]) s->bias[src][r] /= sc[c];
    }
}

dsq_status dsq_seq_fold_scales(dsq_seq_layer *s, int g, const float *sc, int64_t cols)
{
    const dsq_block_group *gd = &s->d->groups[g];
    if (dsq_seq_group_has_experts(s, g)) {
        free(s->expert_in);
        if (!(s->expert_in = malloc((size_t)cols * sizeof *s->expert_in)))
            return dsq_fail(DSQ_ERR_NOMEM, "layer %d: out of memory for the experts' input scales", s->l);
        memcpy(s->expert_in, sc, (size_t)cols * sizeof *sc);
        s->expert_in_cols = cols;
    }
    if (gd->src == DSQ_SRC_NORM) dsq_awq_div_vec(s->norm[gd->src_index], sc, cols);
    else div_src_rows(s, g, sc, cols);
    for (int id = 0; id < s->d->n_linears; id++)
        if (s->d->linears[id].group == g && s->present[id])
            dsq_awq_scale_cols(s->w[id], dsq_seq_lin_out(s, id), cols, sc);
    return DSQ_OK;
}

void dsq_seq_expert_fold_down(dsq_seq_expert *x, const float *sc)
{
    int64_t F = x->out[1], in = x->in[1];
    for (int64_t r = 0; r < F; r++)
        for (int64_t j = 0; j < in; j++) x->w[1][r * in + j] /= sc[r];
    dsq_awq_scale_cols(x->w[2], x->out[2], x->in[2], sc);
}
