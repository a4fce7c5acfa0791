/* The architecture table and the helpers every walker of a block description uses. */
#include "formats/block.h"

#include <string.h>

/* One row per family of dsq_arch (formats/hf_config.h). */
static const struct {
    dsq_arch_family family;
    const dsq_block_desc *desc;
} g_archs[] = {
    {DSQ_ARCH_LLAMA, &dsq_block_llama},
    {DSQ_ARCH_QWEN2, &dsq_block_qwen2},
    {DSQ_ARCH_DEEPSEEK2, &dsq_block_deepseek2},
};

const dsq_block_desc *dsq_block_desc_of(const dsq_arch *a)
{
    for (size_t i = 0; i < sizeof g_archs / sizeof g_archs[0]; i++)
        if (g_archs[i].family == a->family) return g_archs[i].desc;
    return &dsq_block_llama; /* unreachable: every family has a row (test_block checks) */
}

int64_t dsq_block_dim(const dsq_arch *a, dsq_dim d)
{
    switch (d) {
    case DSQ_DIM_MODEL: return a->hidden_size;
    case DSQ_DIM_Q: return a->n_heads * a->head_dim;
    case DSQ_DIM_K: return a->n_kv_heads * a->head_dim;
    case DSQ_DIM_V: return a->n_kv_heads * a->head_dim;
    case DSQ_DIM_ATT: return a->n_heads * (a->family == DSQ_ARCH_DEEPSEEK2 ? a->mla.v_head_dim : a->head_dim);
    case DSQ_DIM_FFN: return a->intermediate_size;
    case DSQ_DIM_QLORA: return a->mla.q_lora_rank;
    case DSQ_DIM_KVA: return a->mla.kv_lora_rank + a->mla.qk_rope_head_dim;
    case DSQ_DIM_KVLORA: return a->mla.kv_lora_rank;
    case DSQ_DIM_KVB: return a->n_heads * (a->mla.qk_nope_head_dim + a->mla.v_head_dim);
    case DSQ_DIM_SHEXP: return a->moe.n_shared * a->moe.ffn;
    case DSQ_DIM_EXPFFN: return a->moe.ffn;
    case DSQ_DIM_EXPERTS: return a->moe.n_routed;
    }
    return 0;
}

static bool when_holds(dsq_block_when w, const dsq_arch *a, int64_t l)
{
    switch (w) {
    case DSQ_WHEN_ALWAYS: return true;
    case DSQ_WHEN_Q_LORA: return a->mla.q_lora_rank > 0;
    case DSQ_WHEN_NO_Q_LORA: return a->mla.q_lora_rank == 0;
    case DSQ_WHEN_DENSE: return !dsq_arch_layer_is_moe(a, l);
    case DSQ_WHEN_MOE: return dsq_arch_layer_is_moe(a, l);
    case DSQ_WHEN_SHARED: return dsq_arch_layer_is_moe(a, l) && a->moe.n_shared > 0;
    }
    return false;
}

bool dsq_block_norm_present(const dsq_block_desc *d, const dsq_arch *a, int64_t l, int i)
{
    return when_holds(d->norms[i].when, a, l);
}

bool dsq_block_linear_present(const dsq_block_desc *d, const dsq_arch *a, int64_t l, int i)
{
    return when_holds(d->linears[i].when, a, l);
}

int64_t dsq_block_norm_dim(const dsq_block_desc *d, const dsq_arch *a, int i)
{
    return dsq_block_dim(a, d->norms[i].dim);
}

dsq_status dsq_block_require(const dsq_block_desc *d, const dsq_arch *a, unsigned caps, const char *what)
{
    if ((d->caps & caps) == caps) return DSQ_OK;
    return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: %s models (%s blocks) are not supported yet", what,
                    a->hf_architecture[0] ? a->hf_architecture : d->name, d->name);
}

void dsq_block_linear_shape(const dsq_block_desc *d, const dsq_arch *a, int i, int64_t *out, int64_t *in)
{
    *out = dsq_block_dim(a, d->linears[i].out);
    *in = dsq_block_dim(a, d->linears[i].in);
}

bool dsq_block_linear_has_bias(const dsq_block_linear *l, const dsq_arch *a)
{
    switch (l->bias) {
    case DSQ_BIAS_NEVER: return false;
    case DSQ_BIAS_ALWAYS: return true;
    case DSQ_BIAS_ATTENTION: return a->attention_bias;
    case DSQ_BIAS_MLP: return a->mlp_bias;
    }
    return false;
}

int dsq_block_group_members(const dsq_block_desc *d, int g, int *ids, int cap)
{
    int n = 0;
    for (int i = 0; i < d->n_linears; i++) {
        if (d->linears[i].group != g) continue;
        if (n < cap) ids[n] = i;
        n++;
    }
    return n;
}

int dsq_block_group_first(const dsq_block_desc *d, int g)
{
    int id = -1;
    return dsq_block_group_members(d, g, &id, 1) > 0 ? id : -1;
}

int dsq_block_find_linear(const dsq_block_desc *d, const char *role)
{
    for (int i = 0; i < d->n_linears; i++)
        if (!strcmp(d->linears[i].role, role)) return i;
    return -1;
}

int64_t dsq_block_src_row(const dsq_block_desc *d, const dsq_arch *a, int g, int64_t c)
{
    if (d->groups[g].src != DSQ_SRC_MLA_VALUES) return c;
    int64_t vh = a->mla.v_head_dim, nope = a->mla.qk_nope_head_dim;
    return (c / vh) * (nope + vh) + nope + c % vh;
}

int dsq_block_first_expert(const dsq_block_desc *d)
{
    for (int i = 0; i < d->n_linears; i++)
        if (d->linears[i].expert) return i;
    return -1;
}
