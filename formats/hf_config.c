/* config.json <-> dsq_arch <-> GGUF <arch>.* metadata for Llama, Mistral and
 * Qwen2 checkpoints.
 *
 * Defaults are transformers' (LlamaConfig, MistralConfig, Qwen2Config): a key
 * a config may leave out gets the value transformers would give it, because
 * llama.cpp's converter reads configs through AutoConfig and so sees those
 * defaults too. The GGUF keys, their value types and the rope handling follow
 * llama.cpp's conversion/base.py (TextModel.set_gguf_parameters) and
 * conversion/llama.py (LlamaModel). */
#include "formats/hf_config.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/json.h"

enum {
    CONFIG_MAX_BYTES = 16 << 20,
    /* Every size goes into a GGUF uint32; llama.cpp keeps them in int32. */
    SIZE_LIMIT = 1 << 30,
};

typedef struct arch_row {
    const char *hf_architecture;
    const char *model_type;
    dsq_arch_family family;
    int64_t default_max_pos; /* transformers' max_position_embeddings default */
} arch_row;

static const arch_row g_archs[] = {
    {"LlamaForCausalLM", "llama", DSQ_ARCH_LLAMA, 2048},
    {"MistralForCausalLM", "mistral", DSQ_ARCH_LLAMA, 4096 * 32},
    {"Qwen2ForCausalLM", "qwen2", DSQ_ARCH_QWEN2, 32768},
    {"DeepseekV2ForCausalLM", "deepseek_v2", DSQ_ARCH_DEEPSEEK2, 2048},
    {"DeepseekV3ForCausalLM", "deepseek_v3", DSQ_ARCH_DEEPSEEK2, 4096},
};
#define N_ARCHS (sizeof g_archs / sizeof g_archs[0])

/* ------------------------------------------------------------ JSON reading */

typedef struct cfg {
    const cJSON *root;
    const char *path;
} cfg;

static const cJSON *field(const cJSON *o, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

/* An integer field; absent or null gives dflt, or an error naming the field
 * when required. */
static dsq_status get_int(const cfg *c, const cJSON *o, const char *key, bool required, int64_t dflt, int64_t *out)
{
    const cJSON *it = field(o, key);
    if (!it) {
        if (required) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: missing required field \"%s\"", c->path, key);
        *out = dflt;
        return DSQ_OK;
    }
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!(v == floor(v) && fabs(v) <= 9007199254740992.0))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: field \"%s\" must be an integer", c->path, key);
    *out = (int64_t)v;
    return DSQ_OK;
}

static dsq_status get_num(const cfg *c, const cJSON *o, const char *key, bool required, double dflt, double *out)
{
    const cJSON *it = field(o, key);
    if (!it) {
        if (required) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: missing required field \"%s\"", c->path, key);
        *out = dflt;
        return DSQ_OK;
    }
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: field \"%s\" must be a finite number", c->path, key);
    *out = it->valuedouble;
    return DSQ_OK;
}

static dsq_status get_bool(const cfg *c, const cJSON *o, const char *key, bool dflt, bool *out)
{
    const cJSON *it = field(o, key);
    if (!it) {
        *out = dflt;
        return DSQ_OK;
    }
    if (!cJSON_IsBool(it)) return dsq_fail(DSQ_ERR_FORMAT, "%s: field \"%s\" must be true or false", c->path, key);
    *out = cJSON_IsTrue(it);
    return DSQ_OK;
}

/* eos_token_id may be a list (Llama 3.1 Instruct); the first entry is kept. */
static dsq_status get_token_id(const cfg *c, const char *key, int64_t *out)
{
    const cJSON *it = field(c->root, key);
    *out = -1;
    if (!it) return DSQ_OK;
    if (cJSON_IsArray(it)) it = cJSON_GetArrayItem(it, 0);
    if (!it) return DSQ_OK;
    double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!(v == floor(v) && v >= 0 && v < 4294967296.0))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: field \"%s\" must be a token id", c->path, key);
    *out = (int64_t)v;
    return DSQ_OK;
}

static const arch_row *find_arch(const char *name)
{
    for (size_t i = 0; i < N_ARCHS; i++)
        if (!strcmp(g_archs[i].hf_architecture, name)) return &g_archs[i];
    return NULL;
}

static dsq_status read_architecture(const cfg *c, dsq_arch *a, const arch_row **row)
{
    const cJSON *arr = field(c->root, "architectures");
    if (!arr) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: missing required field \"architectures\"", c->path);
    const cJSON *first = cJSON_IsArray(arr) ? cJSON_GetArrayItem(arr, 0) : NULL;
    if (!cJSON_IsString(first))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: field \"architectures\" must be a list of names", c->path);
    *row = find_arch(first->valuestring);
    if (!*row)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: architecture \"%.64s\" is not supported (supported: LlamaForCausalLM, "
                        "MistralForCausalLM, Qwen2ForCausalLM, DeepseekV2ForCausalLM, DeepseekV3ForCausalLM)",
                        c->path, first->valuestring);
    a->family = (*row)->family;
    snprintf(a->hf_architecture, sizeof a->hf_architecture, "%s", (*row)->hf_architecture);
    const cJSON *mt = field(c->root, "model_type");
    if (mt && !cJSON_IsString(mt))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: field \"model_type\" must be a string", c->path);
    if (mt && strlen(mt->valuestring) >= sizeof a->model_type)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: field \"model_type\" is too long", c->path);
    snprintf(a->model_type, sizeof a->model_type, "%s", mt ? mt->valuestring : (*row)->model_type);
    return DSQ_OK;
}

static dsq_status read_sizes(const cfg *c, const arch_row *row, dsq_arch *a)
{
    const cJSON *o = c->root;
    DSQ_TRY(get_int(c, o, "hidden_size", true, 0, &a->hidden_size));
    DSQ_TRY(get_int(c, o, "intermediate_size", true, 0, &a->intermediate_size));
    DSQ_TRY(get_int(c, o, "num_hidden_layers", true, 0, &a->n_layers));
    DSQ_TRY(get_int(c, o, "num_attention_heads", true, 0, &a->n_heads));
    DSQ_TRY(get_int(c, o, "vocab_size", true, 0, &a->vocab_size));
    DSQ_TRY(get_int(c, o, "num_key_value_heads", false, a->n_heads, &a->n_kv_heads));
    a->has_head_dim = field(o, "head_dim") != NULL;
    if (!a->has_head_dim && a->n_heads > 0 && a->hidden_size % a->n_heads != 0)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: hidden_size %lld is not divisible by num_attention_heads %lld", c->path,
                        (long long)a->hidden_size, (long long)a->n_heads);
    DSQ_TRY(get_int(c, o, "head_dim", false, a->n_heads > 0 ? a->hidden_size / a->n_heads : 0, &a->head_dim));
    DSQ_TRY(get_int(c, o, "max_position_embeddings", false, row->default_max_pos, &a->max_position_embeddings));
    DSQ_TRY(get_num(c, o, "rms_norm_eps", false, 1e-6, &a->rms_norm_eps));
    return DSQ_OK;
}

/* The rope parameters object: transformers >= 4.57 writes "rope_parameters"
 * (rope_theta inside it), older ones "rope_scaling" beside "rope_theta". */
static const cJSON *rope_object(const cfg *c)
{
    const cJSON *rp = field(c->root, "rope_parameters");
    if (cJSON_IsObject(rp)) return rp;
    return field(c->root, "rope_scaling");
}

static dsq_status read_rope_kind(const cfg *c, const cJSON *rp, const char **kind)
{
    const cJSON *t = field(rp, "rope_type");
    if (!t) t = field(rp, "type");
    if (t && !cJSON_IsString(t))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: field \"rope_scaling.rope_type\" must be a string", c->path);
    *kind = t ? t->valuestring : "default";
    return DSQ_OK;
}

static dsq_status read_rope_llama3(const cfg *c, const cJSON *rp, dsq_arch *a)
{
    a->rope_scaling = DSQ_ROPE_SCALING_LLAMA3;
    /* The converter's defaults when a key is missing (generate_extra_tensors). */
    DSQ_TRY(get_num(c, rp, "factor", false, 8.0, &a->rope_factor));
    DSQ_TRY(get_num(c, rp, "low_freq_factor", false, 1.0, &a->rope_low_freq_factor));
    DSQ_TRY(get_num(c, rp, "high_freq_factor", false, 4.0, &a->rope_high_freq_factor));
    return get_int(c, rp, "original_max_position_embeddings", false, 8192, &a->rope_original_max_pos);
}

static dsq_status read_rope_yarn(const cfg *c, const cJSON *rp, dsq_arch *a)
{
    a->rope_scaling = DSQ_ROPE_SCALING_YARN;
    DSQ_TRY(get_num(c, rp, "factor", true, 0, &a->rope_factor));
    DSQ_TRY(get_int(c, rp, "original_max_position_embeddings", true, 0, &a->rope_original_max_pos));
    DSQ_TRY(get_num(c, rp, "beta_fast", false, 0, &a->yarn_beta_fast));
    DSQ_TRY(get_num(c, rp, "beta_slow", false, 0, &a->yarn_beta_slow));
    const char *af = field(rp, "attention_factor") ? "attention_factor" : "attn_factor";
    return get_num(c, rp, af, false, 0, &a->yarn_attn_factor);
}

static dsq_status read_rope(const cfg *c, dsq_arch *a)
{
    const cJSON *rp = rope_object(c);
    double theta_top = 10000.0;
    DSQ_TRY(get_num(c, c->root, "rope_theta", false, 10000.0, &theta_top));
    a->rope_theta = theta_top;
    a->rope_scaling = DSQ_ROPE_SCALING_NONE;
    if (!rp) return DSQ_OK;
    if (!cJSON_IsObject(rp))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: field \"rope_scaling\" must be an object or null", c->path);
    DSQ_TRY(get_num(c, rp, "rope_theta", false, theta_top, &a->rope_theta));
    const char *kind = "default";
    DSQ_TRY(read_rope_kind(c, rp, &kind));
    if (!strcmp(kind, "default")) return DSQ_OK;
    if (!strcmp(kind, "linear")) {
        a->rope_scaling = DSQ_ROPE_SCALING_LINEAR;
        return get_num(c, rp, "factor", true, 0, &a->rope_factor);
    }
    if (!strcmp(kind, "llama3")) return read_rope_llama3(c, rp, a);
    if (!strcmp(kind, "yarn")) return read_rope_yarn(c, rp, a);
    return dsq_fail(DSQ_ERR_UNSUPPORTED,
                    "%s: rope scaling type \"%.32s\" is not supported (supported: linear, llama3, yarn)", c->path,
                    kind);
}

static dsq_status read_flags(const cfg *c, dsq_arch *a)
{
    const cJSON *o = c->root;
    DSQ_TRY(get_bool(c, o, "tie_word_embeddings", false, &a->tie_word_embeddings));
    /* Qwen2 always has q/k/v biases; its config has no attention_bias key. */
    DSQ_TRY(get_bool(c, o, "attention_bias", a->family == DSQ_ARCH_QWEN2, &a->attention_bias));
    if (a->family == DSQ_ARCH_QWEN2) a->attention_bias = true;
    DSQ_TRY(get_bool(c, o, "mlp_bias", false, &a->mlp_bias));
    DSQ_TRY(get_token_id(c, "bos_token_id", &a->bos_token_id));
    DSQ_TRY(get_token_id(c, "eos_token_id", &a->eos_token_id));
    const cJSON *dt = field(o, "torch_dtype");
    if (!dt) dt = field(o, "dtype");
    if (cJSON_IsString(dt) && strlen(dt->valuestring) < sizeof a->torch_dtype)
        snprintf(a->torch_dtype, sizeof a->torch_dtype, "%s", dt->valuestring);
    /* MistralConfig and Qwen2Config both default sliding_window to 4096;
     * Qwen2 uses it only with use_sliding_window. */
    bool sliding = !strcmp(a->model_type, "mistral");
    if (a->family == DSQ_ARCH_QWEN2) DSQ_TRY(get_bool(c, o, "use_sliding_window", false, &sliding));
    if (sliding)
        DSQ_TRY(get_int(c, o, "sliding_window", false, cJSON_GetObjectItemCaseSensitive(o, "sliding_window") ? 0 : 4096,
                        &a->sliding_window));
    return DSQ_OK;
}

/* ---------------------------------------------------------------- DeepSeek */

/* transformers' DeepseekV2Config / DeepseekV3Config defaults, for keys a
 * config leaves out (real checkpoints state them all). */
typedef struct ds_defaults {
    int64_t q_lora_rank, moe_ffn, n_routed, n_shared, top_k, n_group, topk_group, first_dense;
    const char *topk_method, *scoring;
    bool norm_topk_prob;
    double routed_scaling;
} ds_defaults;

static const ds_defaults g_ds_v2 = {1536, 1407, 64, 2, 0, 1, 1, 0, "greedy", "softmax", false, 1.0};
static const ds_defaults g_ds_v3 = {1536, 2048, 256, 1, 8, 8, 4, 3, "noaux_tc", "sigmoid", true, 2.5};

static dsq_status get_str(const cfg *c, const char *key, const char *dflt, const char **out)
{
    const cJSON *it = field(c->root, key);
    if (it && !cJSON_IsString(it)) return dsq_fail(DSQ_ERR_FORMAT, "%s: field \"%s\" must be a string", c->path, key);
    *out = it ? it->valuestring : dflt;
    return DSQ_OK;
}

static dsq_status read_topk_method(const cfg *c, const ds_defaults *d, dsq_arch_moe *m)
{
    const char *v = NULL;
    DSQ_TRY(get_str(c, "topk_method", d->topk_method, &v));
    static const struct {
        const char *name;
        dsq_topk_method method;
    } k[] = {{"greedy", DSQ_TOPK_GREEDY}, {"group_limited_greedy", DSQ_TOPK_GROUP_LIMITED}, {"noaux_tc", DSQ_TOPK_NOAUX_TC}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(v, k[i].name)) {
            m->topk_method = k[i].method;
            return DSQ_OK;
        }
    return dsq_fail(DSQ_ERR_UNSUPPORTED,
                    "%s: field \"topk_method\" is \"%.32s\" (supported: greedy, group_limited_greedy, noaux_tc)",
                    c->path, v);
}

static dsq_status read_scoring(const cfg *c, const ds_defaults *d, dsq_arch_moe *m)
{
    const char *v = NULL;
    DSQ_TRY(get_str(c, "scoring_func", d->scoring, &v));
    if (!strcmp(v, "softmax")) m->scoring = DSQ_SCORING_SOFTMAX;
    else if (!strcmp(v, "sigmoid")) m->scoring = DSQ_SCORING_SIGMOID;
    else
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: field \"scoring_func\" is \"%.32s\" (supported: softmax, sigmoid)",
                        c->path, v);
    return DSQ_OK;
}

static dsq_status read_moe(const cfg *c, const ds_defaults *d, dsq_arch *a)
{
    const cJSON *o = c->root;
    dsq_arch_moe *m = &a->moe;
    DSQ_TRY(get_int(c, o, "n_routed_experts", false, d->n_routed, &m->n_routed));
    DSQ_TRY(get_int(c, o, "n_shared_experts", false, d->n_shared, &m->n_shared));
    DSQ_TRY(get_int(c, o, "num_experts_per_tok", false, d->top_k, &m->top_k));
    DSQ_TRY(get_int(c, o, "moe_intermediate_size", false, d->moe_ffn, &m->ffn));
    DSQ_TRY(get_int(c, o, "n_group", false, d->n_group, &m->n_group));
    DSQ_TRY(get_int(c, o, "topk_group", false, d->topk_group, &m->topk_group));
    DSQ_TRY(get_int(c, o, "first_k_dense_replace", false, d->first_dense, &m->first_dense));
    DSQ_TRY(get_int(c, o, "moe_layer_freq", false, 1, &m->layer_freq));
    DSQ_TRY(get_bool(c, o, "norm_topk_prob", d->norm_topk_prob, &m->norm_topk_prob));
    DSQ_TRY(get_num(c, o, "routed_scaling_factor", false, d->routed_scaling, &m->routed_scaling));
    DSQ_TRY(read_topk_method(c, d, m));
    return read_scoring(c, d, m);
}

static dsq_status read_mla(const cfg *c, const ds_defaults *d, dsq_arch *a)
{
    const cJSON *o = c->root;
    dsq_arch_mla *m = &a->mla;
    /* null q_lora_rank means a plain q_proj (V2-Lite): field() treats null as absent */
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(o, "q_lora_rank");
    if (q && cJSON_IsNull(q))
        m->q_lora_rank = 0;
    else
        DSQ_TRY(get_int(c, o, "q_lora_rank", false, d->q_lora_rank, &m->q_lora_rank));
    DSQ_TRY(get_int(c, o, "kv_lora_rank", false, 512, &m->kv_lora_rank));
    DSQ_TRY(get_int(c, o, "qk_nope_head_dim", false, 128, &m->qk_nope_head_dim));
    DSQ_TRY(get_int(c, o, "qk_rope_head_dim", false, 64, &m->qk_rope_head_dim));
    DSQ_TRY(get_int(c, o, "v_head_dim", false, 128, &m->v_head_dim));
    /* V2's rope is always on interleaved pairs (complex multiplication); V3 says so in rope_interleave */
    DSQ_TRY(get_bool(c, o, "rope_interleave", true, &m->rope_interleave));
    const cJSON *rp = rope_object(c);
    if (cJSON_IsObject(rp)) {
        DSQ_TRY(get_num(c, rp, "mscale", false, 0, &m->yarn_mscale));
        DSQ_TRY(get_num(c, rp, "mscale_all_dim", false, 0, &m->yarn_mscale_all_dim));
    }
    return DSQ_OK;
}

/* The MLA and MoE fields; head_dim becomes the query/key head and the KV
 * head count the query head count (config.json's head_dim is transformers'
 * rope width, its num_key_value_heads unused by MLA). */
static dsq_status read_deepseek(const cfg *c, dsq_arch *a)
{
    const ds_defaults *d = !strcmp(a->hf_architecture, "DeepseekV2ForCausalLM") ? &g_ds_v2 : &g_ds_v3;
    DSQ_TRY(read_mla(c, d, a));
    DSQ_TRY(read_moe(c, d, a));
    DSQ_TRY(get_int(c, c->root, "num_nextn_predict_layers", false, 0, &a->n_mtp_layers));
    a->head_dim = a->mla.qk_nope_head_dim + a->mla.qk_rope_head_dim;
    a->has_head_dim = true;
    a->n_kv_heads = a->n_heads;
    return DSQ_OK;
}

bool dsq_arch_layer_is_moe(const dsq_arch *a, int64_t l)
{
    if (a->family != DSQ_ARCH_DEEPSEEK2 || a->moe.n_routed <= 0) return false;
    return l >= a->moe.first_dense && a->moe.layer_freq > 0 && l % a->moe.layer_freq == 0;
}

dsq_status dsq_arch_from_hf_json(const char *json, const char *path, dsq_arch *out)
{
    memset(out, 0, sizeof *out);
    if (!path) path = "config.json";
    dsq_status why;
    cJSON *root = dsq_json_parse(json, strlen(json), NULL, &why);
    if (!root && why == DSQ_ERR_NOMEM) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory parsing JSON", path);
    if (!root) return dsq_fail(DSQ_ERR_FORMAT, "%s: not valid JSON", path);
    cfg c = {root, path};
    const arch_row *row = NULL;
    dsq_status st = cJSON_IsObject(root) ? DSQ_OK : dsq_fail(DSQ_ERR_FORMAT, "%s: not a JSON object", path);
    if (st == DSQ_OK) st = read_architecture(&c, out, &row);
    if (st == DSQ_OK) st = read_sizes(&c, row, out);
    if (st == DSQ_OK) st = read_rope(&c, out);
    if (st == DSQ_OK) st = read_flags(&c, out);
    if (st == DSQ_OK && out->family == DSQ_ARCH_DEEPSEEK2) st = read_deepseek(&c, out);
    cJSON_Delete(root);
    if (st == DSQ_OK) st = dsq_arch_validate(out, path);
    if (st != DSQ_OK) memset(out, 0, sizeof *out);
    return st;
}

dsq_status dsq_arch_from_hf_dir(const char *dir, dsq_arch *out)
{
    char path[4096];
    DSQ_TRY(dsq_path_join(path, sizeof path, dir, "config.json"));
    char *text = NULL;
    DSQ_TRY(dsq_read_file(path, CONFIG_MAX_BYTES, &text, NULL));
    dsq_status st = dsq_arch_from_hf_json(text, path, out);
    free(text);
    return st;
}

/* -------------------------------------------------------------- validation */

static bool size_ok(int64_t v) { return v > 0 && v <= SIZE_LIMIT; }

static dsq_status check_size(const char *what, const char *name, int64_t v)
{
    if (size_ok(v)) return DSQ_OK;
    return dsq_fail(DSQ_ERR_FORMAT, "%s: %s = %lld is out of range (1 .. %d)", what, name, (long long)v, SIZE_LIMIT);
}

/* GGUF stores these as float32 and the runtime computes with them in
 * float32: a value that rounds to 0 or infinity there (1e-50, 1e300) would
 * convert to a GGUF no reader takes back. */
static bool f32_positive(double v)
{
    float f = (float)v;
    return isfinite(v) && isfinite(f) && f > 0;
}

static dsq_status check_rope(const dsq_arch *a, const char *what)
{
    if (!f32_positive(a->rope_theta))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: rope_theta %g must be positive (as a float32)", what, a->rope_theta);
    if (a->rope_scaling == DSQ_ROPE_SCALING_NONE) return DSQ_OK;
    if (!f32_positive(a->rope_factor))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: rope scaling factor %g must be positive", what, a->rope_factor);
    if (a->rope_scaling == DSQ_ROPE_SCALING_LINEAR) return DSQ_OK;
    DSQ_TRY(check_size(what, "rope original_max_position_embeddings", a->rope_original_max_pos));
    if (a->rope_scaling == DSQ_ROPE_SCALING_LLAMA3 &&
        !(f32_positive(a->rope_low_freq_factor) && f32_positive(a->rope_high_freq_factor) &&
          (float)a->rope_high_freq_factor > (float)a->rope_low_freq_factor))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: llama3 rope needs 0 < low_freq_factor (%g) < high_freq_factor (%g)", what,
                        a->rope_low_freq_factor, a->rope_high_freq_factor);
    return DSQ_OK;
}

static dsq_status check_mla(const dsq_arch *a, const char *what)
{
    const dsq_arch_mla *m = &a->mla;
    if (m->q_lora_rank != 0) DSQ_TRY(check_size(what, "q_lora_rank", m->q_lora_rank));
    DSQ_TRY(check_size(what, "kv_lora_rank", m->kv_lora_rank));
    DSQ_TRY(check_size(what, "qk_nope_head_dim", m->qk_nope_head_dim));
    DSQ_TRY(check_size(what, "qk_rope_head_dim", m->qk_rope_head_dim));
    DSQ_TRY(check_size(what, "v_head_dim", m->v_head_dim));
    if (m->qk_rope_head_dim % 2 != 0)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: qk_rope_head_dim %lld must be even (rotary pairs)", what,
                        (long long)m->qk_rope_head_dim);
    /* Released models use about 0.7 .. 1; the bound keeps the value and GGUF's
     * 0.1 x mscale_all_dim (yarn_log_multiplier, a float32) representable. */
    if (!(m->yarn_mscale >= 0 && m->yarn_mscale_all_dim >= 0 && m->yarn_mscale <= 1e4 &&
          m->yarn_mscale_all_dim <= 1e4))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: rope mscale / mscale_all_dim must lie in [0, 10000]", what);
    return DSQ_OK;
}

static dsq_status check_moe(const dsq_arch *a, const char *what)
{
    const dsq_arch_moe *m = &a->moe;
    DSQ_TRY(check_size(what, "n_routed_experts", m->n_routed));
    DSQ_TRY(check_size(what, "moe_intermediate_size", m->ffn));
    DSQ_TRY(check_size(what, "moe_layer_freq", m->layer_freq));
    if (m->n_shared < 0 || m->n_shared > 1024 || m->first_dense < 0 || m->n_routed > 65536)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: n_shared_experts, n_routed_experts or first_k_dense_replace is out of range",
                        what);
    if (m->top_k < 1 || m->top_k > m->n_routed)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: num_experts_per_tok %lld must be 1 .. n_routed_experts (%lld)", what,
                        (long long)m->top_k, (long long)m->n_routed);
    if (!(isfinite(m->routed_scaling) && m->routed_scaling > 0))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: routed_scaling_factor %g must be positive", what, m->routed_scaling);
    if (m->topk_method == DSQ_TOPK_GREEDY) return DSQ_OK;
    if (m->n_group < 1 || m->n_routed % m->n_group != 0)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: n_group %lld must divide n_routed_experts %lld", what,
                        (long long)m->n_group, (long long)m->n_routed);
    int64_t per = m->n_routed / m->n_group;
    if (m->topk_group < 1 || m->topk_group > m->n_group || m->topk_group * per < m->top_k)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: topk_group %lld of %lld groups cannot hold num_experts_per_tok %lld", what,
                        (long long)m->topk_group, (long long)m->n_group, (long long)m->top_k);
    if (m->topk_method == DSQ_TOPK_NOAUX_TC && per < 2)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: noaux_tc ranks groups by their two best experts; groups of %lld", what,
                        (long long)per);
    return DSQ_OK;
}

static dsq_status check_deepseek(const dsq_arch *a, const char *what)
{
    DSQ_TRY(check_mla(a, what));
    DSQ_TRY(check_moe(a, what));
    if (a->head_dim != a->mla.qk_nope_head_dim + a->mla.qk_rope_head_dim || a->n_kv_heads != a->n_heads)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: MLA head widths are inconsistent", what);
    if (a->n_mtp_layers < 0 || a->n_mtp_layers > 64)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: num_nextn_predict_layers is out of range", what);
    return DSQ_OK;
}

dsq_status dsq_arch_validate(const dsq_arch *a, const char *what)
{
    if (!what) what = "model";
    DSQ_TRY(check_size(what, "hidden_size", a->hidden_size));
    DSQ_TRY(check_size(what, "intermediate_size", a->intermediate_size));
    DSQ_TRY(check_size(what, "num_hidden_layers", a->n_layers));
    DSQ_TRY(check_size(what, "num_attention_heads", a->n_heads));
    DSQ_TRY(check_size(what, "num_key_value_heads", a->n_kv_heads));
    DSQ_TRY(check_size(what, "head_dim", a->head_dim));
    DSQ_TRY(check_size(what, "vocab_size", a->vocab_size));
    DSQ_TRY(check_size(what, "max_position_embeddings", a->max_position_embeddings));
    if (a->n_heads % a->n_kv_heads != 0)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
                        what, (long long)a->n_heads, (long long)a->n_kv_heads);
    /* MLA rotates qk_rope_head_dim of each head only (check_mla) */
    if (a->head_dim % 2 != 0 && a->family != DSQ_ARCH_DEEPSEEK2)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: head_dim %lld must be even (rotary pairs)", what, (long long)a->head_dim);
    if (a->n_heads * a->head_dim > SIZE_LIMIT)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: num_attention_heads x head_dim is too large", what);
    if (!f32_positive(a->rms_norm_eps))
        return dsq_fail(DSQ_ERR_FORMAT, "%s: rms_norm_eps %g must be positive (as a float32)", what, a->rms_norm_eps);
    if (a->sliding_window < 0) return dsq_fail(DSQ_ERR_FORMAT, "%s: sliding_window must not be negative", what);
    if (a->family == DSQ_ARCH_DEEPSEEK2) DSQ_TRY(check_deepseek(a, what));
    return check_rope(a, what);
}

/* ------------------------------------------------------------ JSON writing */

static bool add_num(cJSON *o, const char *key, double v) { return cJSON_AddNumberToObject(o, key, v) != NULL; }

static bool add_rope_scaling(cJSON *o, const dsq_arch *a)
{
    if (a->rope_scaling == DSQ_ROPE_SCALING_NONE) return cJSON_AddNullToObject(o, "rope_scaling") != NULL;
    cJSON *r = cJSON_AddObjectToObject(o, "rope_scaling");
    if (!r) return false;
    bool ok = true;
    switch (a->rope_scaling) {
    case DSQ_ROPE_SCALING_LINEAR:
        ok = cJSON_AddStringToObject(r, "rope_type", "linear") && add_num(r, "factor", a->rope_factor);
        break;
    case DSQ_ROPE_SCALING_LLAMA3:
        ok = cJSON_AddStringToObject(r, "rope_type", "llama3") && add_num(r, "factor", a->rope_factor) &&
             add_num(r, "low_freq_factor", a->rope_low_freq_factor) &&
             add_num(r, "high_freq_factor", a->rope_high_freq_factor) &&
             add_num(r, "original_max_position_embeddings", (double)a->rope_original_max_pos);
        break;
    default:
        ok = cJSON_AddStringToObject(r, "rope_type", "yarn") && add_num(r, "factor", a->rope_factor) &&
             add_num(r, "original_max_position_embeddings", (double)a->rope_original_max_pos);
        if (ok && a->yarn_beta_fast != 0) ok = add_num(r, "beta_fast", a->yarn_beta_fast);
        if (ok && a->yarn_beta_slow != 0) ok = add_num(r, "beta_slow", a->yarn_beta_slow);
        if (ok && a->yarn_attn_factor != 0) ok = add_num(r, "attention_factor", a->yarn_attn_factor);
        if (ok && a->mla.yarn_mscale != 0) ok = add_num(r, "mscale", a->mla.yarn_mscale);
        if (ok && a->mla.yarn_mscale_all_dim != 0) ok = add_num(r, "mscale_all_dim", a->mla.yarn_mscale_all_dim);
        break;
    }
    return ok;
}

static bool add_token_id(cJSON *o, const char *key, int64_t id)
{
    return id < 0 ? cJSON_AddNullToObject(o, key) != NULL : add_num(o, key, (double)id);
}

static const char *topk_method_name(dsq_topk_method m)
{
    return m == DSQ_TOPK_NOAUX_TC ? "noaux_tc" : m == DSQ_TOPK_GROUP_LIMITED ? "group_limited_greedy" : "greedy";
}

/* DeepseekV2Config / DeepseekV3Config's keys (and the routing keys DeepSeek's
 * own configs carry, which transformers' classes imply). */
static bool add_deepseek_keys(cJSON *o, const dsq_arch *a)
{
    const dsq_arch_mla *m = &a->mla;
    const dsq_arch_moe *e = &a->moe;
    bool ok = cJSON_AddBoolToObject(o, "attention_bias", a->attention_bias) &&
              (m->q_lora_rank > 0 ? add_num(o, "q_lora_rank", (double)m->q_lora_rank)
                                  : cJSON_AddNullToObject(o, "q_lora_rank") != NULL) &&
              add_num(o, "kv_lora_rank", (double)m->kv_lora_rank) &&
              add_num(o, "qk_nope_head_dim", (double)m->qk_nope_head_dim) &&
              add_num(o, "qk_rope_head_dim", (double)m->qk_rope_head_dim) &&
              add_num(o, "v_head_dim", (double)m->v_head_dim) && cJSON_AddBoolToObject(o, "rope_interleave", m->rope_interleave) &&
              add_num(o, "moe_intermediate_size", (double)e->ffn) && add_num(o, "n_routed_experts", (double)e->n_routed) &&
              add_num(o, "n_shared_experts", (double)e->n_shared) && add_num(o, "num_experts_per_tok", (double)e->top_k) &&
              add_num(o, "n_group", (double)e->n_group) && add_num(o, "topk_group", (double)e->topk_group) &&
              cJSON_AddStringToObject(o, "topk_method", topk_method_name(e->topk_method)) &&
              cJSON_AddStringToObject(o, "scoring_func", e->scoring == DSQ_SCORING_SIGMOID ? "sigmoid" : "softmax") &&
              cJSON_AddBoolToObject(o, "norm_topk_prob", e->norm_topk_prob) &&
              add_num(o, "routed_scaling_factor", e->routed_scaling) &&
              add_num(o, "first_k_dense_replace", (double)e->first_dense) && add_num(o, "moe_layer_freq", (double)e->layer_freq) &&
              add_num(o, "num_nextn_predict_layers", (double)a->n_mtp_layers);
    return ok;
}

/* Family-specific keys transformers writes for these classes. */
static bool add_family_keys(cJSON *o, const dsq_arch *a)
{
    bool ok = true;
    if (a->family == DSQ_ARCH_DEEPSEEK2) return add_deepseek_keys(o, a);
    if (a->family == DSQ_ARCH_LLAMA) {
        ok = cJSON_AddBoolToObject(o, "attention_bias", a->attention_bias) &&
             cJSON_AddBoolToObject(o, "mlp_bias", a->mlp_bias);
        if (ok && !strcmp(a->model_type, "mistral"))
            ok = a->sliding_window > 0 ? add_num(o, "sliding_window", (double)a->sliding_window)
                                       : cJSON_AddNullToObject(o, "sliding_window") != NULL;
        return ok;
    }
    ok = cJSON_AddBoolToObject(o, "use_sliding_window", a->sliding_window > 0) &&
         add_num(o, "sliding_window",
                 (double)(a->sliding_window > 0 ? a->sliding_window : a->max_position_embeddings)) &&
         add_num(o, "max_window_layers", (double)a->n_layers);
    return ok;
}

static bool fill_config(cJSON *o, const dsq_arch *a)
{
    cJSON *archs = cJSON_AddArrayToObject(o, "architectures");
    if (!archs) return false;
    cJSON *name = cJSON_CreateString(a->hf_architecture);
    if (!name || !cJSON_AddItemToArray(archs, name)) return false;
    bool ok = cJSON_AddStringToObject(o, "model_type", a->model_type) &&
              cJSON_AddStringToObject(o, "hidden_act", "silu") && add_num(o, "hidden_size", (double)a->hidden_size) &&
              add_num(o, "intermediate_size", (double)a->intermediate_size) &&
              add_num(o, "num_hidden_layers", (double)a->n_layers) &&
              add_num(o, "num_attention_heads", (double)a->n_heads) &&
              add_num(o, "num_key_value_heads", (double)a->n_kv_heads);
    /* DeepseekV2/V3Config keep transformers' rope width there */
    if (ok && a->family == DSQ_ARCH_DEEPSEEK2) ok = add_num(o, "head_dim", (double)a->mla.qk_rope_head_dim);
    else if (ok && (a->has_head_dim || a->head_dim * a->n_heads != a->hidden_size))
        ok = add_num(o, "head_dim", (double)a->head_dim);
    ok = ok && add_num(o, "vocab_size", (double)a->vocab_size) &&
         add_num(o, "max_position_embeddings", (double)a->max_position_embeddings) &&
         add_num(o, "rms_norm_eps", a->rms_norm_eps) && add_num(o, "rope_theta", a->rope_theta) &&
         add_rope_scaling(o, a) && cJSON_AddBoolToObject(o, "tie_word_embeddings", a->tie_word_embeddings) &&
         add_token_id(o, "bos_token_id", a->bos_token_id) && add_token_id(o, "eos_token_id", a->eos_token_id) &&
         add_family_keys(o, a) && add_num(o, "initializer_range", 0.02) && add_num(o, "attention_dropout", 0.0) &&
         cJSON_AddBoolToObject(o, "use_cache", true);
    if (ok && a->torch_dtype[0]) ok = cJSON_AddStringToObject(o, "torch_dtype", a->torch_dtype) != NULL;
    return ok;
}

dsq_status dsq_arch_to_hf_json(const dsq_arch *a, char **out_json)
{
    *out_json = NULL;
    DSQ_TRY(dsq_arch_validate(a, "config.json"));
    cJSON *o = cJSON_CreateObject();
    bool ok = o && fill_config(o, a);
    char *text = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!text) return dsq_fail(DSQ_ERR_NOMEM, "out of memory writing config.json");
    *out_json = text;
    return DSQ_OK;
}

/* ------------------------------------------------------------- GGUF reading */

const char *dsq_arch_gguf_name(const dsq_arch *a)
{
    return a->family == DSQ_ARCH_QWEN2 ? "qwen2" : a->family == DSQ_ARCH_DEEPSEEK2 ? "deepseek2" : "llama";
}

typedef struct gkeys {
    const dsq_gguf *g;
    const char *arch;
} gkeys;

static void key_of(const gkeys *k, const char *suffix, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.%s", k->arch, suffix);
}

/* A count stored as any integer type; absent gives dflt, or an error naming
 * the key when required. */
static dsq_status g_count(const gkeys *k, const char *suffix, bool required, int64_t dflt, int64_t *out)
{
    char key[128];
    key_of(k, suffix, key, sizeof key);
    if (!dsq_gguf_get(k->g, key)) {
        if (required) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: missing required key %s", k->g->path, key);
        *out = dflt;
        return DSQ_OK;
    }
    uint64_t v;
    DSQ_TRY(dsq_gguf_get_u64(k->g, key, &v));
    if (v > (uint64_t)SIZE_LIMIT)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: %s = %llu is out of range", k->g->path, key, (unsigned long long)v);
    *out = (int64_t)v;
    return DSQ_OK;
}

/* The shortest decimal that reads back as the same float32: GGUF stores
 * 1e-5 as 9.99999974737875e-06, and config.json should say 1e-05 again. */
static double tidy_f32(float f)
{
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

static dsq_status g_float(const gkeys *k, const char *suffix, bool required, double dflt, double *out)
{
    char key[128];
    key_of(k, suffix, key, sizeof key);
    if (!dsq_gguf_get(k->g, key)) {
        if (required) return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: missing required key %s", k->g->path, key);
        *out = dflt;
        return DSQ_OK;
    }
    float f;
    DSQ_TRY(dsq_gguf_get_f32(k->g, key, &f));
    *out = tidy_f32(f);
    return DSQ_OK;
}

static dsq_status g_family(const dsq_gguf *g, dsq_arch *a)
{
    const char *name = NULL;
    if (dsq_gguf_get_str(g, "general.architecture", &name) != DSQ_OK)
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: missing general.architecture", g->path);
    if (!strcmp(name, "llama")) {
        a->family = DSQ_ARCH_LLAMA;
        snprintf(a->hf_architecture, sizeof a->hf_architecture, "LlamaForCausalLM");
        snprintf(a->model_type, sizeof a->model_type, "llama");
    } else if (!strcmp(name, "qwen2")) {
        a->family = DSQ_ARCH_QWEN2;
        snprintf(a->hf_architecture, sizeof a->hf_architecture, "Qwen2ForCausalLM");
        snprintf(a->model_type, sizeof a->model_type, "qwen2");
    } else if (!strcmp(name, "deepseek2")) {
        /* GGUF does not say V2 or V3; V3 when routing is sigmoid (g_deepseek) */
        a->family = DSQ_ARCH_DEEPSEEK2;
        snprintf(a->hf_architecture, sizeof a->hf_architecture, "DeepseekV2ForCausalLM");
        snprintf(a->model_type, sizeof a->model_type, "deepseek_v2");
    } else {
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: GGUF architecture \"%.64s\" is not supported (supported: llama, qwen2, deepseek2)", g->path,
                        name);
    }
    return DSQ_OK;
}

static dsq_status g_sizes(const gkeys *k, dsq_arch *a)
{
    DSQ_TRY(g_count(k, "block_count", true, 0, &a->n_layers));
    DSQ_TRY(g_count(k, "context_length", true, 0, &a->max_position_embeddings));
    DSQ_TRY(g_count(k, "embedding_length", true, 0, &a->hidden_size));
    DSQ_TRY(g_count(k, "feed_forward_length", true, 0, &a->intermediate_size));
    DSQ_TRY(g_count(k, "attention.head_count", true, 0, &a->n_heads));
    DSQ_TRY(g_count(k, "attention.head_count_kv", false, a->n_heads, &a->n_kv_heads));
    char key[128];
    key_of(k, "attention.key_length", key, sizeof key);
    a->has_head_dim = dsq_gguf_get(k->g, key) != NULL;
    int64_t dflt = a->n_heads > 0 ? a->hidden_size / a->n_heads : 0;
    DSQ_TRY(g_count(k, "attention.key_length", false, dflt, &a->head_dim));
    int64_t vdim, rot;
    DSQ_TRY(g_count(k, "attention.value_length", false, a->head_dim, &vdim));
    DSQ_TRY(g_count(k, "rope.dimension_count", false, a->head_dim, &rot));
    /* deepseek2: these are MLA's latent widths (g_deepseek reads its own keys) */
    if (a->family != DSQ_ARCH_DEEPSEEK2 && (vdim != a->head_dim || rot != a->head_dim))
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: key_length %lld, value_length %lld and rope.dimension_count %lld differ (partial rotary "
                        "or asymmetric heads are not supported)",
                        k->g->path, (long long)a->head_dim, (long long)vdim, (long long)rot);
    return g_float(k, "attention.layer_norm_rms_epsilon", true, 0, &a->rms_norm_eps);
}

static dsq_status g_vocab_size(const gkeys *k, dsq_arch *a)
{
    char key[128];
    key_of(k, "vocab_size", key, sizeof key);
    if (dsq_gguf_get(k->g, key)) return g_count(k, "vocab_size", true, 0, &a->vocab_size);
    /* llama.cpp's loader falls back to the token list's length. */
    const dsq_gguf_array *toks = NULL;
    if (dsq_gguf_get_arr(k->g, "tokenizer.ggml.tokens", DSQ_GGUF_STRING, &toks) != DSQ_OK)
        return dsq_fail(DSQ_ERR_NOT_FOUND, "%s: neither %s nor tokenizer.ggml.tokens gives the vocabulary size",
                        k->g->path, key);
    a->vocab_size = toks->n > (uint64_t)SIZE_LIMIT ? -1 : (int64_t)toks->n;
    return DSQ_OK;
}

static dsq_status g_token_id(const dsq_gguf *g, const char *key, int64_t *out)
{
    *out = -1;
    if (!dsq_gguf_get(g, key)) return DSQ_OK;
    uint64_t v;
    DSQ_TRY(dsq_gguf_get_u64(g, key, &v));
    *out = v < 0xFFFFFFFFull ? (int64_t)v : -1;
    return DSQ_OK;
}

/* Reads F32 rope_freqs.weight into a malloc'd array of n = head_dim/2. */
static dsq_status read_rope_freqs(const dsq_gguf *g, int64_t idx, int64_t n, float **out)
{
    dsq_tensor t;
    DSQ_TRY(dsq_gguf_tensor(g, (uint64_t)idx, &t));
    if (t.type != DSQ_TYPE_F32 || dsq_tensor_nelems(&t) != (uint64_t)n || t.nbytes != (uint64_t)n * 4)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: rope_freqs.weight must be F32 with head_dim/2 = %lld values", g->path,
                        (long long)n);
    float *f = malloc((size_t)n * sizeof *f);
    if (!f) return dsq_fail(DSQ_ERR_NOMEM, "out of memory reading rope_freqs.weight");
    memcpy(f, t.data, (size_t)n * sizeof *f);
    *out = f;
    return DSQ_OK;
}

static double round_sig(double v, int digits)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.*g", digits, v);
    return strtod(buf, NULL);
}

static bool freqs_match(const dsq_arch *a, const float *want, float *tmp, int64_t n)
{
    if (dsq_arch_llama3_rope_freqs(a, tmp, n) != DSQ_OK) return false;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(tmp[i] - want[i]) > 1e-5f * fmaxf(1.0f, fabsf(want[i]))) return false;
    return true;
}

/* In the blended band 1/v = (1-s)/factor + s with s = orig/wavelen*a + b,
 * a = 1/(high-low), b = -low/(high-low): two band points give a and b, and
 * with orig known (8192, the converter's default, unless the GGUF says
 * otherwise) low and high follow. */
static bool fit_llama3(dsq_arch *a, const float *v, float *tmp, int64_t n)
{
    double x[2], s[2];
    int m = 0;
    for (int64_t i = 0; i < n && m < 2; i++) {
        if (v[i] <= 1.0f + 1e-6f || v[i] >= (float)a->rope_factor * (1.0f - 1e-6f)) continue;
        double freq = 1.0 / pow(a->rope_theta, (double)(2 * i) / (double)a->head_dim);
        x[m] = (double)a->rope_original_max_pos * freq / (2.0 * M_PI);
        s[m] = (1.0 / v[i] - 1.0 / a->rope_factor) / (1.0 - 1.0 / a->rope_factor);
        m++;
    }
    if (m == 2 && x[1] != x[0]) {
        double slope = (s[1] - s[0]) / (x[1] - x[0]), icpt = s[0] - slope * x[0];
        /* The fit is close, not exact: keep the fewest significant digits
         * that reproduce the table (config.json says 1.0, not 0.9999987). */
        double width = slope > 0 ? 1.0 / slope : 0, low = -icpt * width;
        for (int p = 1; p <= 9 && slope > 0; p++) {
            a->rope_low_freq_factor = round_sig(low, p);
            a->rope_high_freq_factor = round_sig(low + width, p);
            if (freqs_match(a, v, tmp, n)) return true;
        }
    }
    a->rope_low_freq_factor = 1.0; /* the converter's defaults */
    a->rope_high_freq_factor = 4.0;
    return freqs_match(a, v, tmp, n);
}

/* GGUF has no llama3 rope keys, only the rope_freqs.weight table; the
 * parameters are recovered from it (see fit_llama3) and checked by
 * recomputing the table. */
static dsq_status g_llama3(const gkeys *k, int64_t idx, dsq_arch *a)
{
    int64_t n = a->head_dim / 2;
    float *v = NULL;
    DSQ_TRY(read_rope_freqs(k->g, idx, n, &v));
    float *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) {
        free(v);
        return dsq_fail(DSQ_ERR_NOMEM, "out of memory checking rope_freqs.weight");
    }
    a->rope_scaling = DSQ_ROPE_SCALING_LLAMA3;
    a->rope_factor = tidy_f32(v[n - 1]);
    dsq_status st = g_count(k, "rope.scaling.original_context_length", false, 8192, &a->rope_original_max_pos);
    bool ok = st == DSQ_OK && a->rope_factor > 1.0 && fit_llama3(a, v, tmp, n);
    free(v);
    free(tmp);
    if (st != DSQ_OK) return st;
    if (!ok)
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "%s: rope_freqs.weight does not follow llama3 rope scaling with original context %lld",
                        k->g->path, (long long)a->rope_original_max_pos);
    return DSQ_OK;
}

static dsq_status g_rope(const gkeys *k, dsq_arch *a)
{
    DSQ_TRY(g_float(k, "rope.freq_base", false, 10000.0, &a->rope_theta));
    char key[128];
    key_of(k, "rope.scaling.type", key, sizeof key);
    const char *type = "none";
    if (dsq_gguf_get(k->g, key)) DSQ_TRY(dsq_gguf_get_str(k->g, key, &type));
    int64_t freqs = dsq_gguf_find_tensor(k->g, "rope_freqs.weight");
    if (!strcmp(type, "none")) {
        if (freqs >= 0 && a->family == DSQ_ARCH_LLAMA) return g_llama3(k, freqs, a);
        return DSQ_OK;
    }
    if (!strcmp(type, "linear")) {
        a->rope_scaling = DSQ_ROPE_SCALING_LINEAR;
        return g_float(k, "rope.scaling.factor", true, 0, &a->rope_factor);
    }
    if (strcmp(type, "yarn") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: %s \"%.32s\" is not supported (supported: none, linear, yarn)",
                        k->g->path, key, type);
    a->rope_scaling = DSQ_ROPE_SCALING_YARN;
    DSQ_TRY(g_float(k, "rope.scaling.factor", true, 0, &a->rope_factor));
    DSQ_TRY(g_count(k, "rope.scaling.original_context_length", true, 0, &a->rope_original_max_pos));
    DSQ_TRY(g_float(k, "rope.scaling.yarn_beta_fast", false, 0, &a->yarn_beta_fast));
    DSQ_TRY(g_float(k, "rope.scaling.yarn_beta_slow", false, 0, &a->yarn_beta_slow));
    return g_float(k, "rope.scaling.yarn_attn_factor", false, 0, &a->yarn_attn_factor);
}

static const char *dtype_of_tensor(const dsq_gguf *g, const char *name)
{
    int64_t i = dsq_gguf_find_tensor(g, name);
    if (i < 0) return "";
    switch (g->tensors[i].type) {
    case DSQ_TYPE_F32: return "float32";
    case DSQ_TYPE_F16: return "float16";
    case DSQ_TYPE_BF16: return "bfloat16";
    default: return "";
    }
}

/* What only the tensor list tells: a tied head, biases, the float type. */
static void g_from_tensors(const dsq_gguf *g, dsq_arch *a)
{
    a->tie_word_embeddings = dsq_gguf_find_tensor(g, "output.weight") < 0;
    bool qkv_bias = dsq_gguf_find_tensor(g, "blk.0.attn_q.bias") >= 0;
    a->attention_bias = a->family == DSQ_ARCH_QWEN2 || qkv_bias;
    a->mlp_bias = dsq_gguf_find_tensor(g, "blk.0.ffn_up.bias") >= 0;
    snprintf(a->torch_dtype, sizeof a->torch_dtype, "%s", dtype_of_tensor(g, "token_embd.weight"));
}

static dsq_status g_bool(const gkeys *k, const char *suffix, bool *out)
{
    char key[128];
    key_of(k, suffix, key, sizeof key);
    const dsq_gguf_value *v = dsq_gguf_get(k->g, key);
    *out = false;
    if (!v) return DSQ_OK;
    if (v->type != DSQ_GGUF_BOOL) return dsq_fail(DSQ_ERR_FORMAT, "%s: %s is not a bool", k->g->path, key);
    *out = v->v.b;
    return DSQ_OK;
}

/* llama.cpp's deepseek2 keys (conversion/deepseek.py, src/models/deepseek2.cpp):
 * key_length_mla = qk_nope + qk_rope, value_length_mla = v_head_dim,
 * kv_lora_rank, q_lora_rank (absent: a plain q_proj), rope.dimension_count =
 * qk_rope; the routing method is not stored: sigmoid gating with the
 * selection bias is V3's noaux_tc, softmax over groups V2's
 * group_limited_greedy, else greedy; yarn_log_multiplier is 0.1 x
 * mscale_all_dim (llama.cpp takes mscale equal to it). */
static dsq_status g_deepseek(const gkeys *k, dsq_arch *a)
{
    dsq_arch_mla *m = &a->mla;
    dsq_arch_moe *e = &a->moe;
    int64_t kmla, gating, rot;
    DSQ_TRY(g_count(k, "attention.q_lora_rank", false, 0, &m->q_lora_rank));
    DSQ_TRY(g_count(k, "attention.kv_lora_rank", true, 0, &m->kv_lora_rank));
    DSQ_TRY(g_count(k, "attention.key_length_mla", true, 0, &kmla));
    DSQ_TRY(g_count(k, "attention.value_length_mla", true, 0, &m->v_head_dim));
    DSQ_TRY(g_count(k, "rope.dimension_count", true, 0, &rot));
    if (rot <= 0 || kmla <= rot)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: deepseek2.attention.key_length_mla %lld must exceed rope.dimension_count %lld",
                        k->g->path, (long long)kmla, (long long)rot);
    m->qk_rope_head_dim = rot, m->qk_nope_head_dim = kmla - rot, m->rope_interleave = true;
    DSQ_TRY(g_count(k, "expert_count", true, 0, &e->n_routed));
    DSQ_TRY(g_count(k, "expert_used_count", true, 0, &e->top_k));
    DSQ_TRY(g_count(k, "expert_shared_count", true, 0, &e->n_shared));
    DSQ_TRY(g_count(k, "expert_feed_forward_length", true, 0, &e->ffn));
    DSQ_TRY(g_count(k, "leading_dense_block_count", false, 0, &e->first_dense));
    DSQ_TRY(g_count(k, "expert_group_count", false, 1, &e->n_group));
    DSQ_TRY(g_count(k, "expert_group_used_count", false, 1, &e->topk_group));
    DSQ_TRY(g_count(k, "expert_gating_func", false, 1, &gating));
    DSQ_TRY(g_float(k, "expert_weights_scale", false, 1.0, &e->routed_scaling));
    DSQ_TRY(g_bool(k, "expert_weights_norm", &e->norm_topk_prob));
    if (gating != 1 && gating != 2)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: deepseek2.expert_gating_func %lld is not supported (1 softmax, 2 sigmoid)",
                        k->g->path, (long long)gating);
    e->layer_freq = 1;
    e->scoring = gating == 2 ? DSQ_SCORING_SIGMOID : DSQ_SCORING_SOFTMAX;
    e->topk_method = gating == 2 ? DSQ_TOPK_NOAUX_TC : e->n_group > 1 ? DSQ_TOPK_GROUP_LIMITED : DSQ_TOPK_GREEDY;
    if (e->routed_scaling == 0) e->routed_scaling = 1.0;
    if (gating == 2) {
        snprintf(a->hf_architecture, sizeof a->hf_architecture, "DeepseekV3ForCausalLM");
        snprintf(a->model_type, sizeof a->model_type, "deepseek_v3");
    }
    double logmul = 0;
    DSQ_TRY(g_float(k, "rope.scaling.yarn_log_multiplier", false, 0, &logmul));
    if (logmul > 0) m->yarn_mscale = m->yarn_mscale_all_dim = tidy_f32((float)(logmul / 0.1));
    a->head_dim = kmla;
    a->has_head_dim = true;
    a->n_kv_heads = a->n_heads;
    return DSQ_OK;
}

dsq_status dsq_arch_from_gguf(const dsq_gguf *g, dsq_arch *out)
{
    memset(out, 0, sizeof *out);
    dsq_status st = g_family(g, out);
    gkeys k = {g, dsq_arch_gguf_name(out)};
    if (st == DSQ_OK) st = g_sizes(&k, out);
    if (st == DSQ_OK) st = g_vocab_size(&k, out);
    if (st == DSQ_OK && out->family == DSQ_ARCH_DEEPSEEK2) st = g_deepseek(&k, out);
    if (st == DSQ_OK && out->head_dim > 0 && (out->head_dim % 2 == 0 || out->family == DSQ_ARCH_DEEPSEEK2))
        st = g_rope(&k, out);
    if (st == DSQ_OK) st = g_token_id(g, "tokenizer.ggml.bos_token_id", &out->bos_token_id);
    if (st == DSQ_OK) st = g_token_id(g, "tokenizer.ggml.eos_token_id", &out->eos_token_id);
    if (st == DSQ_OK) {
        g_from_tensors(g, out);
        st = dsq_arch_validate(out, g->path);
    }
    if (st != DSQ_OK) memset(out, 0, sizeof *out);
    return st;
}

/* ------------------------------------------------------------- GGUF writing */

static dsq_status w_u32(dsq_gguf_writer *w, const char *arch, const char *suffix, int64_t v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return dsq_gguf_set_u32(w, key, (uint32_t)v);
}

static dsq_status w_f32(dsq_gguf_writer *w, const char *arch, const char *suffix, double v)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return dsq_gguf_set_f32(w, key, (float)v);
}

/* rope scaling keys, as TextModel.set_gguf_parameters writes them (llama3
 * writes none: its factors travel in the rope_freqs.weight tensor). */
static dsq_status w_rope_scaling(dsq_gguf_writer *w, const char *arch, const dsq_arch *a)
{
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (a->rope_scaling == DSQ_ROPE_SCALING_LINEAR) {
        DSQ_TRY(dsq_gguf_set_str(w, key, "linear"));
        return w_f32(w, arch, "rope.scaling.factor", a->rope_factor);
    }
    if (a->rope_scaling != DSQ_ROPE_SCALING_YARN) return DSQ_OK;
    DSQ_TRY(dsq_gguf_set_str(w, key, "yarn"));
    DSQ_TRY(w_f32(w, arch, "rope.scaling.factor", a->rope_factor));
    DSQ_TRY(w_u32(w, arch, "rope.scaling.original_context_length", a->rope_original_max_pos));
    if (a->yarn_attn_factor != 0) DSQ_TRY(w_f32(w, arch, "rope.scaling.yarn_attn_factor", a->yarn_attn_factor));
    if (a->yarn_beta_fast != 0) DSQ_TRY(w_f32(w, arch, "rope.scaling.yarn_beta_fast", a->yarn_beta_fast));
    if (a->yarn_beta_slow != 0) DSQ_TRY(w_f32(w, arch, "rope.scaling.yarn_beta_slow", a->yarn_beta_slow));
    return DSQ_OK;
}

/* The keys of llama.cpp's DeepseekV2Model.set_gguf_parameters after the
 * common ones (head_count_kv 1: MLA caches one latent "head"). */
static dsq_status w_deepseek(dsq_gguf_writer *w, const char *arch, const dsq_arch *a)
{
    const dsq_arch_mla *m = &a->mla;
    const dsq_arch_moe *e = &a->moe;
    char key[128];
    /* GGUF has no topk_method: readers infer it (sigmoid gating -> noaux_tc,
     * softmax with groups -> group-limited, else greedy), so a routing that
     * would read back as another one is refused, and greedy routing, which
     * ignores groups, is written with one group. */
    bool sigmoid = e->scoring == DSQ_SCORING_SIGMOID, greedy = e->topk_method == DSQ_TOPK_GREEDY;
    if (sigmoid != (e->topk_method == DSQ_TOPK_NOAUX_TC))
        return dsq_fail(DSQ_ERR_UNSUPPORTED,
                        "topk_method %s with scoring_func %s has no GGUF form (GGUF readers take sigmoid gating "
                        "for noaux_tc routing and softmax for the others)",
                        greedy ? "greedy" : e->topk_method == DSQ_TOPK_NOAUX_TC ? "noaux_tc" : "group_limited_greedy",
                        sigmoid ? "sigmoid" : "softmax");
    DSQ_TRY(w_u32(w, arch, "expert_count", e->n_routed));
    DSQ_TRY(w_u32(w, arch, "expert_used_count", e->top_k));
    DSQ_TRY(w_u32(w, arch, "expert_group_count", greedy ? 1 : e->n_group));
    DSQ_TRY(w_u32(w, arch, "expert_group_used_count", greedy ? 1 : e->topk_group));
    DSQ_TRY(w_u32(w, arch, "expert_gating_func", e->scoring == DSQ_SCORING_SIGMOID ? 2 : 1));
    DSQ_TRY(w_u32(w, arch, "leading_dense_block_count", e->first_dense));
    DSQ_TRY(w_u32(w, arch, "vocab_size", a->vocab_size));
    if (m->q_lora_rank > 0) DSQ_TRY(w_u32(w, arch, "attention.q_lora_rank", m->q_lora_rank));
    DSQ_TRY(w_u32(w, arch, "attention.kv_lora_rank", m->kv_lora_rank));
    DSQ_TRY(w_u32(w, arch, "attention.key_length", m->kv_lora_rank + m->qk_rope_head_dim));
    DSQ_TRY(w_u32(w, arch, "attention.value_length", m->kv_lora_rank));
    DSQ_TRY(w_u32(w, arch, "attention.key_length_mla", m->qk_nope_head_dim + m->qk_rope_head_dim));
    DSQ_TRY(w_u32(w, arch, "attention.value_length_mla", m->v_head_dim));
    DSQ_TRY(w_u32(w, arch, "expert_feed_forward_length", e->ffn));
    DSQ_TRY(w_u32(w, arch, "expert_shared_count", e->n_shared));
    DSQ_TRY(w_f32(w, arch, "expert_weights_scale", e->routed_scaling));
    if (e->norm_topk_prob) {
        snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
        DSQ_TRY(dsq_gguf_set_bool(w, key, true));
    }
    DSQ_TRY(w_u32(w, arch, "rope.dimension_count", m->qk_rope_head_dim));
    if (a->rope_scaling == DSQ_ROPE_SCALING_YARN && m->yarn_mscale_all_dim > 0)
        DSQ_TRY(w_f32(w, arch, "rope.scaling.yarn_log_multiplier", 0.1 * m->yarn_mscale_all_dim));
    return DSQ_OK;
}

dsq_status dsq_arch_to_gguf(const dsq_arch *a, dsq_gguf_writer *w)
{
    DSQ_TRY(dsq_arch_validate(a, "GGUF metadata"));
    const char *arch = dsq_arch_gguf_name(a);
    DSQ_TRY(dsq_gguf_set_str(w, "general.architecture", arch));
    DSQ_TRY(w_u32(w, arch, "block_count", a->n_layers));
    DSQ_TRY(w_u32(w, arch, "context_length", a->max_position_embeddings));
    DSQ_TRY(w_u32(w, arch, "embedding_length", a->hidden_size));
    DSQ_TRY(w_u32(w, arch, "feed_forward_length", a->intermediate_size));
    DSQ_TRY(w_u32(w, arch, "attention.head_count", a->n_heads));
    bool mla = a->family == DSQ_ARCH_DEEPSEEK2;
    DSQ_TRY(w_u32(w, arch, "attention.head_count_kv", mla ? 1 : a->n_kv_heads));
    DSQ_TRY(w_rope_scaling(w, arch, a));
    DSQ_TRY(w_f32(w, arch, "rope.freq_base", a->rope_theta));
    DSQ_TRY(w_f32(w, arch, "attention.layer_norm_rms_epsilon", a->rms_norm_eps));
    /* The converter writes key/value_length only when config.json names
     * head_dim; a head_dim that differs from hidden/heads needs them anyway. */
    if (!mla && (a->has_head_dim || a->head_dim * a->n_heads != a->hidden_size)) {
        DSQ_TRY(w_u32(w, arch, "attention.key_length", a->head_dim));
        DSQ_TRY(w_u32(w, arch, "attention.value_length", a->head_dim));
    }
    if (a->family == DSQ_ARCH_DEEPSEEK2) return w_deepseek(w, arch, a);
    if (a->family != DSQ_ARCH_LLAMA) return DSQ_OK;
    DSQ_TRY(w_u32(w, arch, "vocab_size", a->vocab_size));
    return w_u32(w, arch, "rope.dimension_count", a->head_dim);
}

/* ------------------------------------------------------------ llama3 table */

dsq_status dsq_arch_llama3_rope_freqs(const dsq_arch *a, float *out, int64_t n)
{
    if (a->head_dim <= 0 || a->head_dim % 2 || n != a->head_dim / 2)
        return dsq_fail(DSQ_ERR_ARG, "llama3 rope_freqs: %lld values asked, head_dim is %lld", (long long)n,
                        (long long)a->head_dim);
    if (!(a->rope_high_freq_factor > a->rope_low_freq_factor) || a->rope_original_max_pos <= 0 || a->rope_factor <= 0)
        return dsq_fail(DSQ_ERR_ARG, "llama3 rope_freqs: bad rope parameters");
    /* Python floats are doubles; torch casts them to float32 where they meet
     * the float32 frequency tensor, so every step below is a float op. */
    const float base = (float)a->rope_theta, dim = (float)a->head_dim, factor = (float)a->rope_factor;
    const float low = (float)a->rope_low_freq_factor;
    const float band = (float)(a->rope_high_freq_factor - a->rope_low_freq_factor);
    const float old_ctx = (float)a->rope_original_max_pos;
    const float low_wavelen = (float)((double)a->rope_original_max_pos / a->rope_low_freq_factor);
    const float high_wavelen = (float)((double)a->rope_original_max_pos / a->rope_high_freq_factor);
    const float two_pi = (float)(2.0 * M_PI);
    for (int64_t i = 0; i < n; i++) {
        float freq = 1.0f / powf(base, (float)(2 * i) / dim);
        float wavelen = two_pi / freq;
        if (wavelen < high_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            out[i] = factor;
        } else {
            float smooth = (old_ctx / wavelen - low) / band;
            out[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
    return DSQ_OK;
}
