/* HF <-> GGUF tensor names: the block rows from the architecture's block
 * description (formats/block.h; gguf-py tensor_mapping.py) and LlamaModel.permute from llama.cpp's converter. */
#include "formats/hf_names.h"

#include "formats/block.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A name row: one side's spelling of a tensor stem. Layer rows come from the
 * block description (formats/block.h); these are the model-level ones. */
typedef struct name_row {
    const char *hf;   /* after "model.layers.N." or the whole name */
    const char *gguf; /* after "blk.N." or the whole name */
    dsq_permute_kind perm;
    bool bias; /* a bias tensor is allowed for this model */
} name_row;

static const name_row g_global_rows[] = {
    {"model.embed_tokens", "token_embd", DSQ_PERMUTE_NONE, false},
    {"model.norm", "output_norm", DSQ_PERMUTE_NONE, false},
    {"lm_head", "output", DSQ_PERMUTE_NONE, false},
};

#define N_GLOBAL_ROWS (sizeof g_global_rows / sizeof g_global_rows[0])

typedef enum side { SIDE_HF, SIDE_GGUF } side;

static const char *row_name(const name_row *r, side s) { return s == SIDE_HF ? r->hf : r->gguf; }

static bool stem_is(const char *name, const char *stem, size_t len)
{
    return strlen(name) == len && !memcmp(name, stem, len);
}

/* The block row (a norm or a linear of a's block) spelled stem on side s. */
static bool find_layer_row(const dsq_arch *a, side s, const char *stem, size_t len, name_row *out)
{
    const dsq_block_desc *d = dsq_block_desc_of(a);
    for (int i = 0; i < d->n_norms; i++) {
        const dsq_block_norm *n = &d->norms[i];
        if (!stem_is(s == SIDE_HF ? n->hf : n->gguf, stem, len)) continue;
        *out = (name_row){n->hf, n->gguf, DSQ_PERMUTE_NONE, false};
        return true;
    }
    for (int i = 0; i < d->n_linears; i++) {
        const dsq_block_linear *l = &d->linears[i];
        if (!stem_is(s == SIDE_HF ? l->hf : l->gguf, stem, len)) continue;
        *out = (name_row){l->hf, l->gguf, l->perm, dsq_block_linear_has_bias(l, a)};
        return true;
    }
    return false;
}

/* A layer index: digits only, no sign, no leading zero, below n_layers. */
static bool parse_layer(const char *s, size_t n, int64_t n_layers, int64_t *out)
{
    if (n == 0 || n > 10 || (n > 1 && s[0] == '0')) return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v >= n_layers) return false;
    *out = v;
    return true;
}

/* Splits "<stem>.weight" / "<stem>.bias": returns the stem length, 0 when
 * the name has neither suffix. */
static size_t split_suffix(const char *name, size_t len, bool *is_bias)
{
    if (len > 7 && !strcmp(name + len - 7, ".weight")) {
        *is_bias = false;
        return len - 7;
    }
    if (len > 5 && !strcmp(name + len - 5, ".bias")) {
        *is_bias = true;
        return len - 5;
    }
    return 0;
}

static bool find_global_row(side s, const char *stem, size_t len, name_row *out)
{
    for (size_t i = 0; i < N_GLOBAL_ROWS; i++)
        if (stem_is(row_name(&g_global_rows[i], s), stem, len)) {
            *out = g_global_rows[i];
            return true;
        }
    return false;
}

typedef struct parsed {
    name_row row;
    int64_t layer; /* -1 for global tensors */
    bool is_bias;
} parsed;

/* Parses a name of side s: prefix "model.layers." / "blk." + index + "." +
 * row + suffix, or a global row + suffix. */
static bool parse_name(const dsq_arch *a, side s, const char *name, parsed *p)
{
    size_t len = strlen(name);
    size_t stem = split_suffix(name, len, &p->is_bias);
    if (stem == 0) return false;
    const char *prefix = s == SIDE_HF ? "model.layers." : "blk.";
    size_t plen = strlen(prefix);
    p->layer = -1;
    if (stem > plen && !strncmp(name, prefix, plen)) {
        const char *idx = name + plen;
        const char *dot = memchr(idx, '.', stem - plen);
        if (!dot || !parse_layer(idx, (size_t)(dot - idx), a->n_layers, &p->layer)) return false;
        if (!find_layer_row(a, s, dot + 1, (size_t)(name + stem - dot - 1), &p->row)) return false;
    } else if (!find_global_row(s, name, stem, &p->row)) {
        return false;
    }
    return !p->is_bias || p->row.bias;
}

/* Writes p's name on side `to`; false when it does not fit in cap bytes. */
static bool format_name(const parsed *p, side to, char *out, size_t cap)
{
    const char *suffix = p->is_bias ? "bias" : "weight";
    int n = p->layer < 0 ? snprintf(out, cap, "%s.%s", row_name(&p->row, to), suffix)
                         : snprintf(out, cap, "%s%lld.%s.%s", to == SIDE_HF ? "model.layers." : "blk.",
                                    (long long)p->layer, row_name(&p->row, to), suffix);
    return n >= 0 && (size_t)n < cap;
}

static void set_perm(const parsed *p, dsq_permute_kind *perm)
{
    /* the description says which rows llama.cpp's converter permutes (Llama's q/k, never Qwen2's) */
    if (perm) *perm = p->row.perm;
}

static bool find_name(const dsq_arch *a, side from, const char *name, char *out, size_t cap, dsq_permute_kind *perm)
{
    parsed p;
    if (!parse_name(a, from, name, &p) || !format_name(&p, from == SIDE_HF ? SIDE_GGUF : SIDE_HF, out, cap)) return false;
    set_perm(&p, perm);
    return true;
}

static dsq_status map_name(const dsq_arch *a, side from, const char *name, char *out, size_t cap,
                           dsq_permute_kind *perm)
{
    parsed p;
    if (!parse_name(a, from, name, &p))
        return dsq_fail(DSQ_ERR_NOT_FOUND, "tensor %s has no %s name for a %s model with %lld layers", name,
                        from == SIDE_HF ? "GGUF" : "Hugging Face", a->hf_architecture[0] ? a->hf_architecture : "llama",
                        (long long)a->n_layers);
    if (!format_name(&p, from == SIDE_HF ? SIDE_GGUF : SIDE_HF, out, cap))
        return dsq_fail(DSQ_ERR_ARG, "tensor name buffer of %zu bytes is too small", cap);
    set_perm(&p, perm);
    return DSQ_OK;
}

dsq_status dsq_name_hf_to_gguf(const dsq_arch *a, const char *hf, char *out, size_t cap, dsq_permute_kind *perm)
{
    return map_name(a, SIDE_HF, hf, out, cap, perm);
}

dsq_status dsq_name_gguf_to_hf(const dsq_arch *a, const char *gguf, char *out, size_t cap, dsq_permute_kind *perm)
{
    return map_name(a, SIDE_GGUF, gguf, out, cap, perm);
}

bool dsq_name_find_gguf(const dsq_arch *a, const char *hf, char *out, size_t cap, dsq_permute_kind *perm)
{
    return find_name(a, SIDE_HF, hf, out, cap, perm);
}

bool dsq_name_find_hf(const dsq_arch *a, const char *gguf, char *out, size_t cap, dsq_permute_kind *perm)
{
    return find_name(a, SIDE_GGUF, gguf, out, cap, perm);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

bool dsq_name_hf_is_ignored(const char *hf) { return ends_with(hf, ".rotary_emb.inv_freq"); }

bool dsq_name_gguf_is_ignored(const char *gguf) { return !strcmp(gguf, "rope_freqs.weight"); }

/* LlamaModel.permute: w.reshape(heads, 2, rows/heads/2, ...).swapaxes(1, 2):
 * inside each head of hd rows, GGUF row 2*i + j is HF row j*hd/2 + i. */
static void permute_copy(const uint8_t *src, uint8_t *dst, int64_t heads, int64_t hd, size_t row_bytes, bool to_gguf)
{
    const int64_t half = hd / 2;
    for (int64_t h = 0; h < heads; h++) {
        for (int64_t i = 0; i < half; i++) {
            for (int64_t j = 0; j < 2; j++) {
                int64_t g = h * hd + 2 * i + j, f = h * hd + j * half + i;
                int64_t d = to_gguf ? g : f, s = to_gguf ? f : g;
                memcpy(dst + (size_t)d * row_bytes, src + (size_t)s * row_bytes, row_bytes);
            }
        }
    }
}

dsq_status dsq_permute_check(const dsq_arch *a, dsq_permute_kind kind, int64_t rows)
{
    if (kind == DSQ_PERMUTE_NONE) return DSQ_OK;
    if (kind != DSQ_PERMUTE_Q && kind != DSQ_PERMUTE_K) return dsq_fail(DSQ_ERR_ARG, "unknown permutation %d", kind);
    int64_t heads = kind == DSQ_PERMUTE_Q ? a->n_heads : a->n_kv_heads;
    if (heads <= 0 || rows <= 0 || rows % (2 * heads) != 0)
        return dsq_fail(DSQ_ERR_FORMAT, "%s permutation: %lld rows are not divisible into %lld heads of rotary pairs",
                        kind == DSQ_PERMUTE_Q ? "q_proj" : "k_proj", (long long)rows, (long long)heads);
    return DSQ_OK;
}

dsq_status dsq_permute_rows(const dsq_arch *a, dsq_permute_kind kind, bool to_gguf, void *data, int64_t rows,
                            size_t row_bytes, void *scratch)
{
    if (kind == DSQ_PERMUTE_NONE) return DSQ_OK;
    DSQ_TRY(dsq_permute_check(a, kind, rows));
    int64_t heads = kind == DSQ_PERMUTE_Q ? a->n_heads : a->n_kv_heads;
    if (row_bytes == 0 || (uint64_t)rows > SIZE_MAX / row_bytes)
        return dsq_fail(DSQ_ERR_ARG, "permutation: %lld rows of %zu bytes do not fit in memory", (long long)rows,
                        row_bytes);
    size_t total = (size_t)rows * row_bytes;
    void *tmp = scratch ? scratch : malloc(total);
    if (!tmp) return dsq_fail(DSQ_ERR_NOMEM, "out of memory for a %zu-byte permutation buffer", total);
    memcpy(tmp, data, total);
    permute_copy(tmp, data, heads, rows / heads, row_bytes, to_gguf);
    if (!scratch) free(tmp);
    return DSQ_OK;
}
