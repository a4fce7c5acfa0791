/* llama-quantize's per-tensor type choice. Follows llama.cpp src/llama-quant.cpp
 * (llama_tensor_get_type, llama_model_quantize_impl) at c392e509, checked
 * against the stored revision 059325d9 of that file (identical rules), and
 * src/llama-model-loader.h (weight_name_comparer) for the visiting order.
 * Rules for the IQ1/IQ2/IQ3/TQ ftypes are left out: we cannot produce those
 * types, and dsq_ftype_from_name does not accept them. */
#include "quantizers/mixes.h"

#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"

/* ---- ftypes ---- */

typedef struct ftype_row {
    const char *name;
    dsq_ftype ftype;
    dsq_type def;
} ftype_row;

/* llama-quantize's QUANT_OPTIONS names (examples/quantize/quantize.cpp) for the
 * ftypes we plan, with the default types of llama_model_quantize_impl. */
static const ftype_row g_ftypes[] = {
    {"Q4_0", DSQ_FTYPE_Q4_0, DSQ_TYPE_Q4_0},       {"Q4_1", DSQ_FTYPE_Q4_1, DSQ_TYPE_Q4_1},
    {"Q5_0", DSQ_FTYPE_Q5_0, DSQ_TYPE_Q5_0},       {"Q5_1", DSQ_FTYPE_Q5_1, DSQ_TYPE_Q5_1},
    {"Q8_0", DSQ_FTYPE_Q8_0, DSQ_TYPE_Q8_0},       {"Q2_K", DSQ_FTYPE_Q2_K, DSQ_TYPE_Q2_K},
    {"Q2_K_S", DSQ_FTYPE_Q2_K_S, DSQ_TYPE_Q2_K},   {"Q3_K_S", DSQ_FTYPE_Q3_K_S, DSQ_TYPE_Q3_K},
    {"Q3_K_M", DSQ_FTYPE_Q3_K_M, DSQ_TYPE_Q3_K},   {"Q3_K_L", DSQ_FTYPE_Q3_K_L, DSQ_TYPE_Q3_K},
    {"Q4_K_S", DSQ_FTYPE_Q4_K_S, DSQ_TYPE_Q4_K},   {"Q4_K_M", DSQ_FTYPE_Q4_K_M, DSQ_TYPE_Q4_K},
    {"Q5_K_S", DSQ_FTYPE_Q5_K_S, DSQ_TYPE_Q5_K},   {"Q5_K_M", DSQ_FTYPE_Q5_K_M, DSQ_TYPE_Q5_K},
    {"Q6_K", DSQ_FTYPE_Q6_K, DSQ_TYPE_Q6_K},       {"IQ4_NL", DSQ_FTYPE_IQ4_NL, DSQ_TYPE_IQ4_NL},
    {"IQ4_XS", DSQ_FTYPE_IQ4_XS, DSQ_TYPE_IQ4_XS}, {"F16", DSQ_FTYPE_F16, DSQ_TYPE_F16},
    {"BF16", DSQ_FTYPE_BF16, DSQ_TYPE_BF16},       {"F32", DSQ_FTYPE_ALL_F32, DSQ_TYPE_F32},
};

static const struct {
    const char *alias;
    dsq_ftype ftype;
} g_aliases[] = {{"Q3_K", DSQ_FTYPE_Q3_K_M}, {"Q4_K", DSQ_FTYPE_Q4_K_M}, {"Q5_K", DSQ_FTYPE_Q5_K_M}};

#define N_FTYPES (sizeof g_ftypes / sizeof g_ftypes[0])

static const ftype_row *ftype_row_of(dsq_ftype f)
{
    for (size_t i = 0; i < N_FTYPES; i++)
        if (g_ftypes[i].ftype == f) return &g_ftypes[i];
    return NULL;
}

const char *dsq_ftype_names(void)
{
    return "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q2_K_S, Q3_K_S, Q3_K_M (Q3_K), Q3_K_L, Q4_K_S, "
           "Q4_K_M (Q4_K), Q5_K_S, Q5_K_M (Q5_K), Q6_K, IQ4_NL, IQ4_XS, F16, BF16, F32";
}

/* llama-quantize also takes the ftype number ("15"). */
static bool ftype_from_number(const char *s, dsq_ftype *out)
{
    char *end = NULL;
    if (!*s || !isdigit((unsigned char)*s)) return false;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > INT_MAX || !ftype_row_of((dsq_ftype)v)) return false;
    *out = (dsq_ftype)v;
    return true;
}

dsq_status dsq_ftype_from_name(const char *name, dsq_ftype *out)
{
    if (!name) return dsq_fail(DSQ_ERR_ARG, "no quantization type given (valid: %s)", dsq_ftype_names());
    for (size_t i = 0; i < N_FTYPES; i++) {
        if (!strcasecmp(g_ftypes[i].name, name)) {
            *out = g_ftypes[i].ftype;
            return DSQ_OK;
        }
    }
    for (size_t i = 0; i < sizeof g_aliases / sizeof g_aliases[0]; i++) {
        if (!strcasecmp(g_aliases[i].alias, name)) {
            *out = g_aliases[i].ftype;
            return DSQ_OK;
        }
    }
    if (ftype_from_number(name, out)) return DSQ_OK;
    return dsq_fail(DSQ_ERR_ARG, "unknown quantization type \"%s\" (valid: %s)", name, dsq_ftype_names());
}

const char *dsq_ftype_name(dsq_ftype f)
{
    const ftype_row *r = ftype_row_of(f);
    return r ? r->name : NULL;
}

dsq_status dsq_ftype_default_type(dsq_ftype f, dsq_type *out)
{
    const ftype_row *r = ftype_row_of(f);
    if (!r) return dsq_fail(DSQ_ERR_UNSUPPORTED, "file type %d cannot be produced (valid: %s)", (int)f, dsq_ftype_names());
    *out = r->def;
    return DSQ_OK;
}

dsq_mix_options dsq_mix_options_default(dsq_ftype ftype)
{
    dsq_mix_options o = {0};
    o.ftype = ftype;
    o.output_type = DSQ_MIX_NO_TYPE;
    o.token_embd_type = DSQ_MIX_NO_TYPE;
    return o;
}

bool dsq_mix_guess_70b(const char *arch, int n_layer, int n_head, int n_head_kv, int n_expert)
{
    if (!arch || n_layer != 80) return false;
    if (!strcmp(arch, "llama")) return n_expert != 8 && n_head != n_head_kv; /* equal heads: LLaMA-1 65B */
    return !strcmp(arch, "deci") || !strcmp(arch, "qwen2");
}

/* ---- small helpers ---- */

bool dsq_mix_use_more_bits(int i_layer, int n_layers)
{
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

int dsq_mix_ggml_n_dims(const int64_t ne[4])
{
    for (int i = 3; i >= 1; i--)
        if (ne[i] > 1) return i + 1;
    return 1;
}

static bool has(const char *name, const char *part) { return strstr(name, part) != NULL; }
static bool is(const char *name, const char *exact) { return strcmp(name, exact) == 0; }

static int64_t blck(dsq_type t)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    return ti ? (int64_t)ti->block_elems : 1;
}

static bool is_quantized(dsq_type t)
{
    const dsq_type_info *ti = dsq_type_get((int)t);
    return ti && ti->quantized;
}

/* sscanf(name, "blk.%d.", &layer) == 1: %d skips white space and takes a sign;
 * the trailing '.' need not match. Out-of-range numbers clamp. */
static bool parse_blk_layer(const char *name, int *layer)
{
    if (strncmp(name, "blk.", 4) != 0) return false;
    const char *p = name + 4;
    while (isspace((unsigned char)*p)) p++;
    bool neg = *p == '-';
    if (*p == '-' || *p == '+') p++;
    if (!isdigit((unsigned char)*p)) return false;
    long long v = 0;
    for (; isdigit((unsigned char)*p); p++)
        if (v <= INT_MAX) v = v * 10 + (*p - '0');
    if (v > INT_MAX) v = INT_MAX;
    *layer = (int)(neg ? -v : v);
    return true;
}

/* ---- which tensors are quantized at all (llama_model_quantize_impl) ---- */

bool dsq_mix_is_quantizable(const char *name, int ggml_n_dims, const dsq_mix_options *opt, const char **why_not)
{
    static const char *const never[] = {
        "ffn_gate_inp.weight",  "ssm_conv1d.weight",        "time_mix_first.weight",
        "time_mix_w1.weight",   "time_mix_w2.weight",       "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight",
    };
    const char *why = NULL;
    size_t len = strlen(name);
    /* llama.cpp tests name.rfind("weight") == size()-6; for a 5-character name
     * both sides are npos, so such a name counts as ending in "weight". */
    bool ends_weight = len == 5 || (len >= 6 && !strcmp(name + len - 6, "weight"));
    if (!ends_weight) why = "not a weight";
    else if (ggml_n_dims < 2) why = "1-D tensor";
    else if (has(name, "_norm.weight")) why = "norm";
    else if (opt && opt->leave_output && is(name, "output.weight")) why = "--leave-output-tensor";
    else if (is(name, "position_embd.weight") || is(name, "token_types.weight")) why = "position/token-type embedding";
    else {
        for (size_t i = 0; i < sizeof never / sizeof never[0] && !why; i++)
            if (has(name, never[i])) why = "never quantized by llama.cpp";
    }
    if (why_not) *why_not = why;
    return why == NULL;
}

/* ---- tensor order ---- */

typedef struct order_key {
    int layer;
    const char *name;
    size_t idx;
} order_key;

static int cmp_order_key(const void *pa, const void *pb)
{
    const order_key *a = pa, *b = pb;
    if (a->layer != b->layer) return a->layer < b->layer ? -1 : 1;
    int c = strcmp(a->name, b->name);
    if (c) return c;
    return a->idx < b->idx ? -1 : a->idx > b->idx;
}

dsq_status dsq_mix_order(const dsq_mix_tensor *tensors, size_t n, size_t *order)
{
    if (n == 0) return DSQ_OK;
    order_key *keys = calloc(n, sizeof *keys);
    if (!keys) return dsq_fail(DSQ_ERR_NOMEM, "tensor order: out of memory for %zu tensors", n);
    for (size_t i = 0; i < n; i++) {
        keys[i].layer = -1;
        (void)parse_blk_layer(tensors[i].name, &keys[i].layer);
        keys[i].name = tensors[i].name;
        keys[i].idx = i;
    }
    qsort(keys, n, sizeof *keys, cmp_order_key);
    dsq_status st = DSQ_OK;
    for (size_t k = 0; k < n; k++) {
        order[k] = keys[k].idx;
        if (k > 0 && !strcmp(keys[k].name, keys[k - 1].name))
            st = dsq_fail(DSQ_ERR_FORMAT, "tensor %s appears twice", keys[k].name);
    }
    free(keys);
    return st;
}

/* ---- the mix (llama_tensor_get_type) ---- */

typedef struct mix_state {
    const dsq_mix_model *m;
    const dsq_mix_options *o;
    dsq_ftype ft;
    bool falcon;
    int n_gqa;
    int n_expert_raw; /* hparams.n_expert as stored: the "== 8" tests use it */
    int n_attention_wv, i_attention_wv;
    int n_ffn_down, i_ffn_down, n_ffn_gate, i_ffn_gate, n_ffn_up, i_ffn_up;
    int n_k_quantized, n_fallback;
    bool has_output;
} mix_state;

static void why(dsq_mix_choice *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void why(dsq_mix_choice *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->reason, sizeof c->reason, fmt, ap);
    va_end(ap);
}

/* Layer of an ffn tensor: the running counter for dense models, the blk.N.
 * number for MoE (llama.cpp: experts are not stored in layer order). */
static dsq_status ffn_layer(const mix_state *s, int counter, int n_layer, const char *name, int *layer)
{
    *layer = counter;
    if (s->m->n_expert <= 1) return DSQ_OK;
    if (!parse_blk_layer(name, layer))
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: failed to determine its layer", name);
    if (*layer < 0 || *layer >= n_layer)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: bad layer %d, must be in [0, %d)", name, *layer, n_layer);
    return DSQ_OK;
}

/* Rule A: output.weight, or token_embd.weight standing in for a missing output. */
static dsq_type rule_output(const mix_state *s, dsq_type t, int64_t ne0, dsq_mix_choice *c)
{
    if (s->o->output_type != DSQ_MIX_NO_TYPE) {
        why(c, "output: --output-tensor-type");
        return s->o->output_type;
    }
    if (s->falcon || ne0 % blck(t) != 0) {
        why(c, s->falcon ? "output: falcon" : "output: row not a multiple of the default block");
        return DSQ_TYPE_Q8_0;
    }
    if (t != DSQ_TYPE_Q8_0) {
        why(c, "output: q6_K");
        return DSQ_TYPE_Q6_K;
    }
    why(c, "output: keeps q8_0");
    return t;
}

static dsq_type rule_attn_v(mix_state *s, dsq_type t, dsq_mix_choice *c)
{
    const dsq_ftype ft = s->ft;
    const int iv = s->i_attention_wv, nv = s->n_attention_wv;
    why(c, "attn_v: default");
    if (ft == DSQ_FTYPE_Q2_K) {
        t = s->n_gqa >= 4 ? DSQ_TYPE_Q4_K : DSQ_TYPE_Q3_K;
        why(c, "attn_v: Q2_K, n_gqa %d", s->n_gqa);
    } else if (ft == DSQ_FTYPE_Q2_K_S && s->n_gqa >= 4) {
        t = DSQ_TYPE_Q4_K;
        why(c, "attn_v: Q2_K_S, n_gqa %d >= 4", s->n_gqa);
    } else if (ft == DSQ_FTYPE_Q3_K_M) {
        t = iv < 2 ? DSQ_TYPE_Q5_K : DSQ_TYPE_Q4_K;
        why(c, "attn_v: Q3_K_M, i_attention_wv %d", iv);
    } else if (ft == DSQ_FTYPE_Q3_K_L) {
        t = DSQ_TYPE_Q5_K;
        why(c, "attn_v: Q3_K_L");
    } else if ((ft == DSQ_FTYPE_IQ4_NL || ft == DSQ_FTYPE_IQ4_XS) && s->n_gqa >= 4) {
        t = DSQ_TYPE_Q5_K;
        why(c, "attn_v: IQ4, n_gqa %d >= 4", s->n_gqa);
    } else if ((ft == DSQ_FTYPE_Q4_K_M || ft == DSQ_FTYPE_Q5_K_M) && dsq_mix_use_more_bits(iv, nv)) {
        t = DSQ_TYPE_Q6_K;
        why(c, "attn_v: use_more_bits(%d,%d)", iv, nv);
    } else if (ft == DSQ_FTYPE_Q4_K_S && iv < 4) {
        t = DSQ_TYPE_Q5_K;
        why(c, "attn_v: Q4_K_S, i_attention_wv %d < 4", iv);
    }
    if (s->m->is_70b && (t == DSQ_TYPE_Q3_K || t == DSQ_TYPE_Q4_K)) {
        t = DSQ_TYPE_Q5_K;
        why(c, "attn_v: 70B model");
    }
    if (s->n_expert_raw == 8) {
        t = DSQ_TYPE_Q8_0;
        why(c, "attn_v: 8 experts");
    }
    s->i_attention_wv++;
    return t;
}

static dsq_status rule_ffn_down(mix_state *s, const char *name, dsq_type *t, dsq_mix_choice *c)
{
    const dsq_ftype ft = s->ft;
    int L = 0;
    const int N = s->n_ffn_down;
    DSQ_TRY(ffn_layer(s, s->i_ffn_down, N, name, &L));
    const bool umb = dsq_mix_use_more_bits(L, N);
    why(c, "ffn_down: default (layer %d of %d)", L, N);
    if (ft == DSQ_FTYPE_Q2_K) {
        *t = DSQ_TYPE_Q3_K;
        why(c, "ffn_down: Q2_K");
    } else if (ft == DSQ_FTYPE_Q2_K_S) {
        if (L < N / 8) {
            *t = DSQ_TYPE_Q4_K;
            why(c, "ffn_down: Q2_K_S, layer %d < %d/8", L, N);
        }
    } else if (ft == DSQ_FTYPE_Q3_K_M) {
        *t = L < N / 16 ? DSQ_TYPE_Q5_K : (!s->falcon || umb) ? DSQ_TYPE_Q4_K : DSQ_TYPE_Q3_K;
        why(c, "ffn_down: Q3_K_M, layer %d of %d", L, N);
    } else if (ft == DSQ_FTYPE_Q3_K_L) {
        *t = s->falcon ? DSQ_TYPE_Q4_K : DSQ_TYPE_Q5_K;
        why(c, "ffn_down: Q3_K_L");
    } else if (ft == DSQ_FTYPE_Q4_K_M) {
        if (s->falcon) {
            *t = L < N / 16 ? DSQ_TYPE_Q6_K : umb ? DSQ_TYPE_Q5_K : DSQ_TYPE_Q4_K;
            why(c, "ffn_down: Q4_K_M falcon, layer %d of %d", L, N);
        } else if (umb) {
            *t = DSQ_TYPE_Q6_K;
            why(c, "ffn_down: use_more_bits(%d,%d)", L, N);
        }
    } else if (L < N / 8 && (ft == DSQ_FTYPE_IQ4_NL || ft == DSQ_FTYPE_IQ4_XS) && !s->o->has_imatrix) {
        *t = DSQ_TYPE_Q5_K;
        why(c, "ffn_down: IQ4 without imatrix, layer %d < %d/8", L, N);
    } else if (ft == DSQ_FTYPE_Q5_K_M && umb) {
        *t = DSQ_TYPE_Q6_K;
        why(c, "ffn_down: use_more_bits(%d,%d)", L, N);
    } else if (ft == DSQ_FTYPE_Q4_K_S && !s->falcon && L < N / 8) {
        *t = DSQ_TYPE_Q5_K;
        why(c, "ffn_down: Q4_K_S, layer %d < %d/8", L, N);
    } else if ((ft == DSQ_FTYPE_Q4_0 || ft == DSQ_FTYPE_Q5_0) && s->o->has_imatrix && L < N / 8) {
        *t = ft == DSQ_FTYPE_Q4_0 ? DSQ_TYPE_Q4_1 : DSQ_TYPE_Q5_1;
        why(c, "ffn_down: imatrix, layer %d < %d/8", L, N);
    }
    s->i_ffn_down++;
    return DSQ_OK;
}

static dsq_type rule_attn_output(const mix_state *s, dsq_type t, dsq_mix_choice *c)
{
    const dsq_ftype ft = s->ft;
    why(c, "attn_output: default");
    if (s->falcon) {
        if (ft == DSQ_FTYPE_Q3_K_L) {
            why(c, "attn_output: falcon Q3_K_L");
            return DSQ_TYPE_Q4_K;
        }
        return t;
    }
    if (s->n_expert_raw == 8) {
        if (ft == DSQ_FTYPE_Q2_K || ft == DSQ_FTYPE_Q3_K_S || ft == DSQ_FTYPE_Q3_K_M || ft == DSQ_FTYPE_IQ4_NL ||
            ft == DSQ_FTYPE_Q4_K_S || ft == DSQ_FTYPE_Q4_K_M || ft == DSQ_FTYPE_IQ4_XS) {
            why(c, "attn_output: 8 experts");
            return DSQ_TYPE_Q5_K;
        }
        return t;
    }
    if (ft == DSQ_FTYPE_Q2_K) t = DSQ_TYPE_Q3_K;
    else if (ft == DSQ_FTYPE_Q3_K_M) t = DSQ_TYPE_Q4_K;
    else if (ft == DSQ_FTYPE_Q3_K_L) t = DSQ_TYPE_Q5_K;
    else return t;
    why(c, "attn_output: %s", dsq_ftype_name(ft));
    return t;
}

static dsq_type rule_attn_qkv(const mix_state *s, dsq_type t, dsq_mix_choice *c)
{
    const dsq_ftype ft = s->ft;
    why(c, "attn_qkv: default");
    if (ft == DSQ_FTYPE_Q3_K_M || ft == DSQ_FTYPE_Q3_K_L) t = DSQ_TYPE_Q4_K;
    else if (ft == DSQ_FTYPE_Q4_K_M) t = DSQ_TYPE_Q5_K;
    else if (ft == DSQ_FTYPE_Q5_K_M) t = DSQ_TYPE_Q6_K;
    else return t;
    why(c, "attn_qkv: %s", dsq_ftype_name(ft));
    return t;
}

/* ffn_gate / ffn_up only change for IQ3_XS (not planned); llama.cpp still
 * parses the layer (an MoE name without one is an error) and counts. */
static dsq_status rule_ffn_other(mix_state *s, const char *name, int *counter, int n, dsq_mix_choice *c)
{
    int L = 0;
    DSQ_TRY(ffn_layer(s, *counter, n, name, &L));
    (*counter)++;
    why(c, "%s: default", has(name, "ffn_gate") ? "ffn_gate" : "ffn_up");
    return DSQ_OK;
}

/* The end of llama_tensor_get_type: a row length the type's block does not
 * divide gets a related type with 32-element blocks, else F16. */
static dsq_status block_fallback(mix_state *s, const dsq_mix_tensor *tn, dsq_type *t, dsq_mix_choice *c)
{
    const int64_t nx = tn->ne[0], ny = tn->ne[1], qk = blck(*t);
    if (nx % qk == 0) {
        s->n_k_quantized++;
        return DSQ_OK;
    }
    dsq_type nt;
    switch (*t) {
    case DSQ_TYPE_TQ1_0:
    case DSQ_TYPE_TQ2_0: nt = DSQ_TYPE_Q4_0; break;
    case DSQ_TYPE_IQ2_XXS:
    case DSQ_TYPE_IQ2_XS:
    case DSQ_TYPE_IQ2_S:
    case DSQ_TYPE_IQ3_XXS:
    case DSQ_TYPE_IQ3_S:
    case DSQ_TYPE_IQ1_S:
    case DSQ_TYPE_IQ1_M:
    case DSQ_TYPE_Q2_K:
    case DSQ_TYPE_Q3_K:
    case DSQ_TYPE_IQ4_XS: nt = DSQ_TYPE_IQ4_NL; break;
    case DSQ_TYPE_Q4_K: nt = DSQ_TYPE_Q5_0; break;
    case DSQ_TYPE_Q5_K: nt = DSQ_TYPE_Q5_1; break;
    case DSQ_TYPE_Q6_K: nt = DSQ_TYPE_Q8_0; break;
    default:
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "tensor %s: row length %lld is not a multiple of %lld (%s) and has no fallback",
                        tn->name, (long long)nx, (long long)qk, dsq_type_name(*t));
    }
    if (nx % blck(nt) != 0) nt = DSQ_TYPE_F16;
    if (!s->o->quiet)
        DSQ_LOGW("%s: tensor cols %lld x %lld are not divisible by %lld, required for %s - using fallback "
                 "quantization %s",
                 tn->name, (long long)nx, (long long)ny, (long long)qk, dsq_type_name(*t), dsq_type_name(nt));
    size_t used = strlen(c->reason);
    snprintf(c->reason + used, sizeof c->reason - used, "; %s -> fallback %s (cols %lld)", dsq_type_name(*t),
             dsq_type_name(nt), (long long)nx);
    *t = nt;
    c->fallback = true;
    s->n_fallback++;
    return DSQ_OK;
}

static dsq_status get_type(mix_state *s, const dsq_mix_tensor *tn, dsq_type *t, dsq_mix_choice *c)
{
    const char *name = tn->name;
    if (is(name, "output.weight") || (!s->has_output && is(name, "token_embd.weight"))) {
        *t = rule_output(s, *t, tn->ne[0], c);
    } else if (is(name, "token_embd.weight")) {
        if (s->o->token_embd_type != DSQ_MIX_NO_TYPE) {
            *t = s->o->token_embd_type;
            why(c, "token_embd: --token-embedding-type");
        } else {
            why(c, "token_embd: default");
        }
    } else if (has(name, "attn_v.weight")) {
        *t = rule_attn_v(s, *t, c);
    } else if (has(name, "attn_k.weight")) {
        why(c, "attn_k: default");
        if (s->n_expert_raw == 8) {
            *t = DSQ_TYPE_Q8_0;
            why(c, "attn_k: 8 experts");
        }
    } else if (has(name, "attn_q.weight")) {
        why(c, "attn_q: default");
    } else if (has(name, "ffn_down")) {
        DSQ_TRY(rule_ffn_down(s, name, t, c));
    } else if (has(name, "attn_output.weight")) {
        *t = rule_attn_output(s, *t, c);
    } else if (has(name, "attn_qkv.weight")) {
        *t = rule_attn_qkv(s, *t, c);
    } else if (has(name, "ffn_gate")) {
        DSQ_TRY(rule_ffn_other(s, name, &s->i_ffn_gate, s->n_ffn_gate, c));
    } else if (has(name, "ffn_up")) {
        DSQ_TRY(rule_ffn_other(s, name, &s->i_ffn_up, s->n_ffn_up, c));
    } else {
        why(c, "default");
    }
    return block_fallback(s, tn, t, c);
}

/* ---- the per-tensor pipeline (llama_model_quantize_impl's loop) ---- */

static dsq_status check_tensor(const dsq_mix_tensor *tn)
{
    if (!tn->name || !*tn->name) return dsq_fail(DSQ_ERR_ARG, "tensor without a name");
    if (tn->n_dims < 1 || tn->n_dims > 4)
        return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: %d dimensions (1..4 expected)", tn->name, tn->n_dims);
    for (int i = 0; i < 4; i++) {
        /* Dimensions past n_dims may be left 0 or 1 by the caller. */
        bool ok = i < tn->n_dims ? tn->ne[i] >= 1 : (tn->ne[i] == 0 || tn->ne[i] == 1);
        if (!ok)
            return dsq_fail(DSQ_ERR_FORMAT, "tensor %s: bad dimension ne[%d] = %lld", tn->name, i, (long long)tn->ne[i]);
    }
    return DSQ_OK;
}

/* A type chosen after the mix (override, --pure) must fit the row: llama.cpp
 * asserts there, so this is where it would stop. */
static dsq_status check_fits(const dsq_mix_tensor *tn, dsq_type t, const char *origin)
{
    if (tn->ne[0] % blck(t) == 0) return DSQ_OK;
    return dsq_fail(DSQ_ERR_ARG, "tensor %s: row length %lld is not a multiple of %lld, required for %s (%s; llama-quantize aborts here)",
                    tn->name, (long long)tn->ne[0], (long long)blck(t), dsq_type_name(t), origin);
}

static dsq_status check_source(const mix_state *s, const dsq_mix_tensor *tn, dsq_type t)
{
    const dsq_type src = tn->type;
    if (is_quantized(src)) {
        if (!s->o->allow_requantize)
            return dsq_fail(DSQ_ERR_ARG, "tensor %s: requantizing from type %s is disabled (allow it with --allow-requantize)",
                            tn->name, dsq_type_name(src));
        return DSQ_OK;
    }
    if (src != DSQ_TYPE_F32 && src != DSQ_TYPE_F16 && src != DSQ_TYPE_BF16)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "tensor %s: cannot convert type %s to %s", tn->name, dsq_type_name(src),
                        dsq_type_name(t));
    return DSQ_OK;
}

static dsq_status plan_one(mix_state *s, dsq_type def, const dsq_mix_tensor *tn, dsq_mix_choice *c)
{
    memset(c, 0, sizeof *c);
    c->type = tn->type;
    const char *why_not = NULL;
    if (!dsq_mix_is_quantizable(tn->name, dsq_mix_ggml_n_dims(tn->ne), s->o, &why_not)) {
        why(c, "kept: %s", why_not);
        return DSQ_OK;
    }
    dsq_type t = def;
    if (s->o->pure) why(c, "--pure");
    else if (!is_quantized(def)) why(c, "default");
    else DSQ_TRY(get_type(s, tn, &t, c));
    const char *origin = s->o->pure ? "--pure" : "default type";
    if (s->o->token_embd_type != DSQ_MIX_NO_TYPE && is(tn->name, "token_embd.weight")) {
        t = s->o->token_embd_type;
        origin = "--token-embedding-type";
        why(c, "token_embd: --token-embedding-type");
    }
    if (s->o->output_type != DSQ_MIX_NO_TYPE && is(tn->name, "output.weight")) {
        t = s->o->output_type;
        origin = "--output-tensor-type";
        why(c, "output: --output-tensor-type");
    }
    DSQ_TRY(check_fits(tn, t, origin));
    if (t == tn->type) {
        size_t used = strlen(c->reason);
        snprintf(c->reason + used, sizeof c->reason - used, "; already %s, copied", dsq_type_name(t));
        return DSQ_OK;
    }
    DSQ_TRY(check_source(s, tn, t));
    c->quantize = true;
    c->type = t;
    return DSQ_OK;
}

/* The pre-pass over all tensors and the attention-layer sanity check. */
static dsq_status init_state(mix_state *s, const dsq_mix_model *m, const dsq_mix_options *o, const dsq_mix_tensor *tensors,
                             size_t n)
{
    memset(s, 0, sizeof *s);
    s->m = m;
    s->o = o;
    s->ft = o->ftype;
    s->falcon = m->arch && !strcmp(m->arch, "falcon");
    s->n_gqa = m->n_head_kv > 0 ? m->n_head / m->n_head_kv : 0;
    s->n_expert_raw = m->n_expert;
    for (size_t i = 0; i < n; i++) {
        const char *name = tensors[i].name;
        if (has(name, "attn_v.weight") || has(name, "attn_qkv.weight") || has(name, "attn_kv_b.weight"))
            s->n_attention_wv++;
        else if (is(name, "output.weight"))
            s->has_output = true;
    }
    s->n_ffn_down = s->n_ffn_gate = s->n_ffn_up = m->n_layer;
    const int n_attn = m->n_attn_layer > 0 ? m->n_attn_layer : m->n_layer;
    if (s->n_attention_wv != 0 && s->n_attention_wv != n_attn)
        return dsq_fail(DSQ_ERR_FORMAT, "model has %d attn_v/attn_qkv tensors but %d attention layers",
                        s->n_attention_wv, n_attn);
    return DSQ_OK;
}

static dsq_status check_inputs(const dsq_mix_model *m, const dsq_mix_options *o, dsq_type *def)
{
    if (!m || !o) return dsq_fail(DSQ_ERR_ARG, "mix plan: model or options missing");
    DSQ_TRY(dsq_ftype_default_type(o->ftype, def));
    /* examples/quantize/quantize.cpp refuses these before quantizing anything. */
    if (o->ftype == DSQ_FTYPE_Q2_K_S && !o->has_imatrix)
        return dsq_fail(DSQ_ERR_ARG, "Q2_K_S needs an importance matrix (llama-quantize refuses it without one)");
    if (m->n_layer < 0 || m->n_head < 0 || m->n_head_kv < 0 || m->n_expert < 0)
        return dsq_fail(DSQ_ERR_ARG, "mix plan: negative model hyperparameter");
    const dsq_type ov[2] = {o->output_type, o->token_embd_type};
    for (int i = 0; i < 2; i++) {
        if (ov[i] != DSQ_MIX_NO_TYPE && !dsq_type_is_ggml(ov[i]))
            return dsq_fail(DSQ_ERR_ARG, "mix plan: %s type %d is not a GGUF type",
                            i ? "token embedding" : "output", (int)ov[i]);
    }
    return DSQ_OK;
}

dsq_status dsq_mix_plan(const dsq_mix_model *model, const dsq_mix_options *opt, const dsq_mix_tensor *tensors,
                        size_t n, dsq_mix_choice *out, dsq_mix_stats *stats)
{
    dsq_type def = DSQ_TYPE_F32;
    DSQ_TRY(check_inputs(model, opt, &def));
    for (size_t i = 0; i < n; i++) DSQ_TRY(check_tensor(&tensors[i]));
    size_t *order = n ? malloc(n * sizeof *order) : NULL;
    if (n && !order) return dsq_fail(DSQ_ERR_NOMEM, "mix plan: out of memory");
    mix_state s = {0};
    dsq_status st = dsq_mix_order(tensors, n, order);
    if (st == DSQ_OK) st = init_state(&s, model, opt, tensors, n);
    for (size_t k = 0; st == DSQ_OK && k < n; k++) st = plan_one(&s, def, &tensors[order[k]], &out[order[k]]);
    free(order);
    if (st != DSQ_OK) return st;
    if (s.n_fallback > 0 && !opt->quiet)
        DSQ_LOGW("%d of %d tensor(s) required fallback quantization", s.n_fallback, s.n_k_quantized + s.n_fallback);
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->n_attention_wv = s.n_attention_wv;
        stats->has_output = s.has_output;
        stats->n_k_quantized = s.n_k_quantized;
        stats->n_fallback = s.n_fallback;
        for (size_t i = 0; i < n; i++) {
            if (out[i].quantize) stats->n_quantize++;
            else stats->n_copy++;
        }
    }
    return DSQ_OK;
}
