/* Loading walks GGUF tensor names ("blk.N.attn_q.weight"); for a Hugging Face
 * folder each name is mapped to its HF twin with formats/hf_names.h. A folder
 * whose config.json has a quantization_config (AWQ GEMM, GPTQ,
 * compressed-tensors pack-quantized) gets its packed linears as INT group
 * storages, an 8-bit one (compressed-tensors int/float/naive-quantized, vLLM
 * fp8, ModelOpt FP8) its linears as 8-bit storages and its FP8 KV-cache
 * scales (runtime/model_quant.h); the rest of the model loads as usual. */
#include "runtime/model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/grow.h"
#include "core/log.h"
#include "formats/block_deepseek.h"
#include "formats/gguf.h"
#include "formats/hf_names.h"
#include "runtime/model_quant.h"

const char *dsq_model_linear_role(const dsq_model *m, int i)
{
    return i >= 0 && i < m->block->n_linears ? m->block->linears[i].role : "?";
}

const char *dsq_model_linear_gguf(const dsq_model *m, int i)
{
    return i >= 0 && i < m->block->n_linears ? m->block->linears[i].gguf : "?";
}

static dsq_status keep(dsq_model *m, void *p)
{
    void **o = dsq_grow(m->owned, &m->cap_owned, m->n_owned + 1, sizeof *o);
    if (!o) {
        free(p);
        return dsq_fail(DSQ_ERR_NOMEM, "model: out of memory");
    }
    m->owned = o;
    m->owned[m->n_owned++] = p;
    return DSQ_OK;
}

/* The tensor named `gguf` (GGUF spelling); *found = false when absent. */
static dsq_status find(const dsq_model *m, const char *gguf, dsq_tensor *t, bool *found)
{
    const dsq_checkpoint *c = m->ckpt;
    int64_t idx = -1;
    if (c->kind == DSQ_CKPT_GGUF) {
        idx = dsq_gguf_find_tensor(c->gguf, gguf);
    } else {
        char hf[256];
        dsq_permute_kind perm;
        if (dsq_name_find_hf(&m->arch, gguf, hf, sizeof hf, &perm)) idx = dsq_st_model_find(c->st, hf);
    }
    *found = idx >= 0;
    if (!*found) return DSQ_OK;
    return dsq_checkpoint_tensor(c, (uint64_t)idx, t);
}

static dsq_status require(const dsq_model *m, const char *gguf, dsq_tensor *t)
{
    bool found;
    DSQ_TRY(find(m, gguf, t, &found));
    if (!found) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: tensor %s is missing", m->ckpt->path, gguf);
    return DSQ_OK;
}

static dsq_status check_shape(const dsq_tensor *t, int n_dims, int64_t d0, int64_t d1)
{
    bool ok = t->n_dims == n_dims && t->shape[0] == d0 && (n_dims < 2 || t->shape[1] == d1);
    if (ok) return DSQ_OK;
    if (n_dims == 1) return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: expected shape [%lld]", t->name, (long long)d0);
    return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: expected shape [%lld, %lld]", t->name, (long long)d0, (long long)d1);
}

/* F32 view of a vector, or an F32 copy when it has another type or sits
 * misaligned (safetensors only aligns the data section start). */
static dsq_status f32_vector(dsq_model *m, const dsq_tensor *t, int64_t n, const float **out)
{
    DSQ_TRY(check_shape(t, 1, n, 0));
    if (t->type == DSQ_TYPE_F32 && (uintptr_t)t->data % sizeof(float) == 0) {
        *out = t->data;
        return DSQ_OK;
    }
    const dsq_type_info *ti = dsq_type_get((int)t->type);
    if (!ti || !ti->is_float)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: type %s where a float vector was expected", t->name,
                        dsq_type_name(t->type));
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return dsq_fail(DSQ_ERR_NOMEM, "tensor %s: out of memory", t->name);
    DSQ_TRY(keep(m, v));
    if (t->type == DSQ_TYPE_F32) {
        memcpy(v, t->data, (size_t)n * sizeof *v);
    } else {
        dsq_status s = dsq_to_f32_row(t->type, t->data, v, (size_t)n);
        if (s != DSQ_OK) return dsq_fail_context(s, "tensor %s", t->name);
    }
    *out = v;
    return DSQ_OK;
}

/* Safetensors only aligns the start of its data section: a tensor whose
 * elements sit misaligned is copied, so rows can be read as their type
 * (GGUF block structs hold 16-bit fields, hence 2 for block types). */
static dsq_status align_data(dsq_model *m, dsq_tensor *t)
{
    const dsq_type_info *ti = dsq_type_get((int)t->type);
    size_t align = !ti ? 1 : ti->quantized ? 2 : ti->block_bytes;
    if (align <= 1 || (uintptr_t)t->data % align == 0) return DSQ_OK;
    void *copy = malloc(t->nbytes ? t->nbytes : 1);
    if (!copy) return dsq_fail(DSQ_ERR_NOMEM, "tensor %s: out of memory", t->name);
    DSQ_TRY(keep(m, copy));
    memcpy(copy, t->data, t->nbytes);
    t->data = copy;
    return DSQ_OK;
}

static dsq_status linear_from(dsq_model *m, dsq_tensor *t, int64_t out, int64_t in, dsq_linear *W)
{
    DSQ_TRY(check_shape(t, 2, out, in));
    DSQ_TRY(align_data(m, t));
    return dsq_linear_from_tensor(W, t);
}

/* ---- quantized HF checkpoints (runtime/model_quant.h) ---- */

/* Loads the linear whose HF module is `module` from its packed INTn / 8-bit
 * tensors when the checkpoint has a quantization_config and packs it. */
static dsq_status quant_module(const dsq_model *m, const dsq_hfq *qc, const char *module, int64_t out, int64_t in,
                               dsq_linear *W, bool *loaded)
{
    *loaded = false;
    if (!qc || qc->method == DSQ_HFQ_NONE || m->ckpt->kind == DSQ_CKPT_GGUF) return DSQ_OK;
    return dsq_hfq_load_linear(qc, m->ckpt->st, module, out, in, W, loaded);
}

/* The same for the linear whose GGUF weight name is `gguf`. */
static dsq_status quant_linear(const dsq_model *m, const dsq_hfq *qc, const char *gguf, int64_t out, int64_t in,
                               dsq_linear *W, bool *loaded)
{
    *loaded = false;
    if (!qc || qc->method == DSQ_HFQ_NONE || m->ckpt->kind == DSQ_CKPT_GGUF) return DSQ_OK;
    char hf[256];
    dsq_permute_kind perm;
    DSQ_TRY(dsq_name_gguf_to_hf(&m->arch, gguf, hf, sizeof hf, &perm));
    size_t n = strlen(hf);
    if (n < 7 || strcmp(hf + n - 7, ".weight") != 0)
        return dsq_fail(DSQ_ERR_INTERNAL, "%s: %s is not a weight name", m->ckpt->path, hf);
    hf[n - 7] = '\0'; /* the module name */
    return quant_module(m, qc, hf, out, in, W, loaded);
}

/* ---- end of quantized HF checkpoints ---- */

static dsq_status load_bias(dsq_model *m, int layer, int id, dsq_linear *W, int64_t out)
{
    char name[96];
    dsq_tensor t;
    bool found;
    snprintf(name, sizeof name, "blk.%d.%s.bias", layer, m->block->linears[id].gguf);
    DSQ_TRY(find(m, name, &t, &found));
    if (!found) return DSQ_OK;
    const float *b;
    DSQ_TRY(f32_vector(m, &t, out, &b));
    return dsq_linear_set_bias(W, DSQ_TYPE_F32, b, out);
}

static dsq_status load_linear(dsq_model *m, const dsq_hfq *qc, int layer, int id)
{
    char name[96];
    dsq_tensor t;
    dsq_linear *W = &m->layers[layer].lin[id];
    int64_t out, in;
    dsq_block_linear_shape(m->block, &m->arch, id, &out, &in);
    snprintf(name, sizeof name, "blk.%d.%s.weight", layer, m->block->linears[id].gguf);
    bool quantized = false;
    if (!m->block->linears[id].router) DSQ_TRY(quant_linear(m, qc, name, out, in, W, &quantized));
    if (!quantized) {
        DSQ_TRY(require(m, name, &t));
        DSQ_TRY(linear_from(m, &t, out, in, W));
    }
    return load_bias(m, layer, id, W, out);
}

/* A HF tensor by its full name; *found = false when absent. */
static dsq_status find_hf(const dsq_model *m, const char *hf, dsq_tensor *t, bool *found)
{
    int64_t idx = dsq_st_model_find(m->ckpt->st, hf);
    *found = idx >= 0;
    return *found ? dsq_checkpoint_tensor(m->ckpt, (uint64_t)idx, t) : DSQ_OK;
}

/* Expert e's linear `id`: HF folders name each expert's module. */
static dsq_status load_expert(dsq_model *m, const dsq_hfq *qc, int layer, int id, int e, dsq_linear *W)
{
    char module[160], name[192];
    int64_t out, in;
    dsq_block_linear_shape(m->block, &m->arch, id, &out, &in);
    char leaf[96];
    snprintf(leaf, sizeof leaf, m->block->linears[id].hf, e);
    snprintf(module, sizeof module, "model.layers.%d.%s", layer, leaf);
    bool quantized;
    DSQ_TRY(quant_module(m, qc, module, out, in, W, &quantized));
    if (quantized) return DSQ_OK;
    snprintf(name, sizeof name, "%s.weight", module);
    dsq_tensor t;
    bool found;
    DSQ_TRY(find_hf(m, name, &t, &found));
    if (!found)
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: tensor %s is missing (expert %d of %lld)", m->ckpt->path, name, e,
                        (long long)m->arch.moe.n_routed);
    return linear_from(m, &t, out, in, W);
}

/* Rows [r0, r0 + rows) of a tensor as a 2-D view of cols columns (a slice of a 3-D GGUF tensor). */
static dsq_status slice_2d(const dsq_tensor *t, int64_t r0, int64_t rows, int64_t cols, dsq_tensor *out)
{
    const dsq_type_info *ti = dsq_type_get((int)t->type);
    uint64_t n = dsq_tensor_nelems(t);
    if (!ti || cols % ti->block_elems || (uint64_t)((r0 + rows) * cols) > n)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: cannot take rows %lld..%lld of %lld columns", t->name,
                        (long long)r0, (long long)(r0 + rows), (long long)cols);
    *out = *t;
    size_t row_bytes = (size_t)(cols / ti->block_elems) * ti->block_bytes;
    out->data = (const uint8_t *)t->data + (size_t)r0 * row_bytes;
    out->n_dims = 2, out->shape[0] = rows, out->shape[1] = cols;
    out->nbytes = (uint64_t)rows * row_bytes;
    return DSQ_OK;
}

/* GGUF: expert e of the stacked [n_expert, out, in] tensor. */
static dsq_status load_expert_gguf(dsq_model *m, const dsq_tensor *stack, int id, int e, dsq_linear *W)
{
    int64_t out, in, E = m->arch.moe.n_routed;
    dsq_block_linear_shape(m->block, &m->arch, id, &out, &in);
    if (stack->n_dims != 3 || stack->shape[0] != E || stack->shape[1] != out || stack->shape[2] != in)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: expected shape [%lld, %lld, %lld] (experts x out x in)",
                        stack->name, (long long)E, (long long)out, (long long)in);
    dsq_tensor t;
    DSQ_TRY(slice_2d(stack, (int64_t)e * out, out, in, &t));
    return linear_from(m, &t, out, in, W);
}

static dsq_status load_experts(dsq_model *m, const dsq_hfq *qc, int layer, int id)
{
    int64_t n = m->arch.moe.n_routed;
    dsq_linear *E = calloc((size_t)n, sizeof *E);
    if (!E) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory for %lld experts", m->ckpt->path, (long long)n);
    m->layers[layer].experts[id] = E;
    if (m->ckpt->kind == DSQ_CKPT_GGUF) {
        char name[96];
        dsq_tensor stack;
        snprintf(name, sizeof name, "blk.%d.%s.weight", layer, m->block->linears[id].gguf);
        DSQ_TRY(require(m, name, &stack));
        for (int e = 0; e < n; e++) DSQ_TRY(load_expert_gguf(m, &stack, id, e, &E[e]));
        return DSQ_OK;
    }
    for (int e = 0; e < n; e++) DSQ_TRY(load_expert(m, qc, layer, id, e, &E[e]));
    return DSQ_OK;
}

/* llama.cpp's deepseek2 GGUFs hold attn_k_b / attn_v_b instead of attn_kv_b. */
static bool mla_split(const dsq_model *m, int l)
{
    char name[96];
    snprintf(name, sizeof name, "blk.%d.attn_kv_b.weight", l);
    return m->arch.family == DSQ_ARCH_DEEPSEEK2 && m->ckpt->kind == DSQ_CKPT_GGUF &&
           dsq_gguf_find_tensor(m->ckpt->gguf, name) < 0;
}

static dsq_status load_mla_split(dsq_model *m, int l)
{
    const dsq_arch *a = &m->arch;
    int64_t H = a->n_heads, L = a->mla.kv_lora_rank, N = a->mla.qk_nope_head_dim, D = a->mla.v_head_dim;
    const struct {
        const char *stem;
        int64_t d1, d2; /* per head */
        dsq_linear *W;
    } parts[2] = {{"attn_k_b", L, N, &m->layers[l].k_b}, {"attn_v_b", D, L, &m->layers[l].v_b}};
    for (int i = 0; i < 2; i++) {
        char name[96];
        dsq_tensor t, v;
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, parts[i].stem);
        DSQ_TRY(require(m, name, &t));
        if (t.n_dims != 3 || t.shape[0] != H || t.shape[1] != parts[i].d1 || t.shape[2] != parts[i].d2)
            return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: expected shape [%lld, %lld, %lld]", name, (long long)H,
                            (long long)parts[i].d1, (long long)parts[i].d2);
        DSQ_TRY(slice_2d(&t, 0, H * parts[i].d1, parts[i].d2, &v));
        DSQ_TRY(linear_from(m, &v, H * parts[i].d1, parts[i].d2, parts[i].W));
    }
    return DSQ_OK;
}

/* noaux_tc routers select experts by score + e_score_correction_bias. */
static dsq_status load_router_bias(dsq_model *m, int l)
{
    if (m->arch.moe.topk_method != DSQ_TOPK_NOAUX_TC) return DSQ_OK;
    char name[128];
    dsq_tensor t;
    bool found;
    if (m->ckpt->kind == DSQ_CKPT_GGUF) {
        snprintf(name, sizeof name, "blk.%d.%s", l, DSQ_DS_ROUTER_BIAS_GGUF);
        DSQ_TRY(find(m, name, &t, &found));
    } else {
        snprintf(name, sizeof name, "model.layers.%d.%s", l, DSQ_DS_ROUTER_BIAS_HF);
        DSQ_TRY(find_hf(m, name, &t, &found));
    }
    if (!found)
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: tensor %s is missing (noaux_tc routing needs it)", m->ckpt->path, name);
    return f32_vector(m, &t, m->arch.moe.n_routed, &m->layers[l].router_bias);
}

static dsq_status load_layer(dsq_model *m, const dsq_hfq *qc, int l)
{
    char name[96];
    dsq_tensor t;
    dsq_layer *L = &m->layers[l];
    const dsq_block_desc *d = m->block;
    for (int i = 0; i < d->n_norms; i++) {
        if (!dsq_block_norm_present(d, &m->arch, l, i)) continue;
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, d->norms[i].gguf);
        DSQ_TRY(require(m, name, &t));
        DSQ_TRY(f32_vector(m, &t, dsq_block_norm_dim(d, &m->arch, i), &L->norm[i]));
    }
    bool split = mla_split(m, l);
    for (int i = 0; i < d->n_linears; i++) {
        if (!dsq_block_linear_present(d, &m->arch, l, i)) continue;
        if (split && i == DSQ_DS_KV_B) continue;
        DSQ_TRY(d->linears[i].expert ? load_experts(m, qc, l, i) : load_linear(m, qc, l, i));
    }
    if (split) DSQ_TRY(load_mla_split(m, l));
    if (dsq_arch_layer_is_moe(&m->arch, l)) DSQ_TRY(load_router_bias(m, l));
    if (qc->method == DSQ_HFQ_W8 && m->ckpt->kind == DSQ_CKPT_HF_DIR && m->arch.family != DSQ_ARCH_DEEPSEEK2)
        DSQ_TRY(dsq_hfq_load_kv(qc, m->ckpt->st, l, &L->k_scale, &L->v_scale));
    return DSQ_OK;
}

static dsq_status load_globals(dsq_model *m, const dsq_hfq *qc)
{
    dsq_tensor t;
    bool found;
    DSQ_TRY(require(m, "token_embd.weight", &m->tok_embd));
    if (m->tok_embd.n_dims != 2 || m->tok_embd.shape[1] != m->dim)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: expected [vocab, %lld]", m->tok_embd.name, (long long)m->dim);
    m->vocab = m->tok_embd.shape[0];
    if (m->arch.vocab_size > 0 && m->arch.vocab_size != m->vocab)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s has %lld rows but the model's vocab_size is %lld", m->tok_embd.name,
                        (long long)m->vocab, (long long)m->arch.vocab_size);
    DSQ_TRY(align_data(m, &m->tok_embd));
    /* The embedding is read row by row through the linear storage's rules. */
    dsq_linear probe;
    DSQ_TRY(dsq_linear_from_tensor(&probe, &m->tok_embd));
    dsq_linear_release(&probe);
    DSQ_TRY(require(m, "output_norm.weight", &t));
    DSQ_TRY(f32_vector(m, &t, m->dim, &m->output_norm));
    bool quantized;
    DSQ_TRY(quant_linear(m, qc, "output.weight", m->vocab, m->dim, &m->output, &quantized));
    DSQ_TRY(find(m, "output.weight", &t, &found));
    m->tied = !found && !quantized;
    if (!quantized) DSQ_TRY(linear_from(m, found ? &t : &m->tok_embd, m->vocab, m->dim, &m->output));
    if (m->ckpt->kind == DSQ_CKPT_GGUF) {
        DSQ_TRY(find(m, "rope_freqs.weight", &t, &found));
        if (found) DSQ_TRY(f32_vector(m, &t, m->arch.head_dim / 2, &m->rope_freq_factors));
    }
    return DSQ_OK;
}

static dsq_status setup_arch(dsq_model *m)
{
    DSQ_TRY(dsq_checkpoint_require_arch(m->ckpt));
    m->arch = m->ckpt->arch;
    const dsq_arch *a = &m->arch;
    m->block = dsq_block_desc_of(a);
    DSQ_TRY(dsq_arch_validate(a, m->ckpt->path));
    if (a->n_layers > 100000 || a->hidden_size > (1 << 20) || a->intermediate_size > (1 << 22) ||
        a->n_heads > 4096 || a->head_dim > 1024)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: implausible model sizes", m->ckpt->path);
    m->dim = a->hidden_size;
    m->q_dim = a->n_heads * a->head_dim;
    m->kv_dim = a->n_kv_heads * a->head_dim;
    m->ffn_dim = a->intermediate_size;
    if (a->n_mtp_layers > 0)
        DSQ_LOGI("%s: skipping %lld multi-token-prediction layer%s (model.layers.%lld and up), as transformers and "
                     "vLLM do",
                     m->ckpt->path, (long long)a->n_mtp_layers, a->n_mtp_layers == 1 ? "" : "s",
                     (long long)a->n_layers);
    bool gguf_llama = m->ckpt->kind == DSQ_CKPT_GGUF && a->family == DSQ_ARCH_LLAMA;
    m->rope_layout = gguf_llama ? DSQ_ROPE_NORM : DSQ_ROPE_NEOX;
    /* DeepSeek keeps its rope dims in interleaved pairs (V3's rope_interleave) */
    if (a->family == DSQ_ARCH_DEEPSEEK2) m->rope_layout = a->mla.rope_interleave ? DSQ_ROPE_NORM : DSQ_ROPE_NEOX;
    return DSQ_OK;
}

static dsq_status load(dsq_model *m, const dsq_model_opts *o)
{
    DSQ_TRY(setup_arch(m));
    m->layers = calloc((size_t)m->arch.n_layers, sizeof *m->layers);
    if (!m->layers) return dsq_fail(DSQ_ERR_NOMEM, "model: out of memory");
    dsq_hfq qc;
    if (m->ckpt->kind == DSQ_CKPT_HF_DIR)
        DSQ_TRY(dsq_hfq_from_dir(m->ckpt->path, &qc));
    else
        memset(&qc, 0, sizeof qc);
    if (o && o->w8_weight_only && qc.method == DSQ_HFQ_W8) {
        qc.w8.act = DSQ_W8_ACT_NONE;
        qc.w8.act_group = 0;
    }
    dsq_status s = load_globals(m, &qc);
    for (int l = 0; s == DSQ_OK && l < m->arch.n_layers; l++) s = load_layer(m, &qc, l);
    dsq_hfq_free(&qc);
    return s;
}

dsq_status dsq_model_open(const char *path, dsq_model **out) { return dsq_model_open_with(path, NULL, out); }

dsq_status dsq_model_open_with(const char *path, const dsq_model_opts *o, dsq_model **out)
{
    *out = NULL;
    dsq_model *m = calloc(1, sizeof *m);
    if (!m) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    dsq_status s = dsq_checkpoint_open(path, &m->ckpt);
    if (s == DSQ_OK) s = load(m, o);
    if (s != DSQ_OK) {
        dsq_model_close(m);
        return s;
    }
    *out = m;
    return DSQ_OK;
}

/* Packs W; its blocks' pages leave the resident set when they are a view
 * into the GGUF file's read-only mapping (nothing else may be dropped). */
static dsq_status pack_one(const dsq_model *m, dsq_linear *W)
{
    if (!W->data) return DSQ_OK; /* a linear the layer does not have */
    bool had = W->q8_packed != NULL;
    DSQ_TRY(dsq_linear_q8_pack(W));
    if (had || !W->q8_packed || W->owned || !m->ckpt || !m->ckpt->gguf) return DSQ_OK;
    const dsq_mmap *map = &m->ckpt->gguf->map;
    const uint8_t *p = W->data;
    size_t n = W->row_bytes * (size_t)W->out;
    if (map->data && p >= map->data && n <= map->size && (size_t)(p - map->data) <= map->size - n) dsq_release_pages(p, n);
    return DSQ_OK;
}

dsq_status dsq_model_pack_int8(dsq_model *m)
{
    for (int64_t l = 0; l < m->arch.n_layers; l++) {
        dsq_layer *L = &m->layers[l];
        for (int i = 0; i < m->block->n_linears; i++) {
            dsq_status s = pack_one(m, &L->lin[i]);
            for (int64_t e = 0; s == DSQ_OK && L->experts[i] && e < m->arch.moe.n_routed; e++)
                s = pack_one(m, &L->experts[i][e]);
            if (s != DSQ_OK) return dsq_fail_context(s, "layer %lld, %s", (long long)l, dsq_model_linear_role(m, i));
        }
        DSQ_TRY(pack_one(m, &L->k_b));
        DSQ_TRY(pack_one(m, &L->v_b));
    }
    dsq_status s = pack_one(m, &m->output);
    return s == DSQ_OK ? DSQ_OK : dsq_fail_context(s, "output");
}

void dsq_model_close(dsq_model *m)
{
    if (!m) return;
    if (m->layers)
        for (int64_t l = 0; l < m->arch.n_layers; l++)
            for (int i = 0; i < m->block->n_linears; i++) {
                dsq_linear_release(&m->layers[l].lin[i]);
                dsq_linear *E = m->layers[l].experts[i];
                for (int64_t e = 0; E && e < m->arch.moe.n_routed; e++) dsq_linear_release(&E[e]);
                free(E);
            }
    for (int64_t l = 0; m->layers && l < m->arch.n_layers; l++) {
        dsq_linear_release(&m->layers[l].k_b);
        dsq_linear_release(&m->layers[l].v_b);
    }
    dsq_linear_release(&m->output);
    free(m->layers);
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    dsq_checkpoint_close(m->ckpt);
    free(m);
}
