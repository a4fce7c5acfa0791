/* quantization_config of the 8-bit folders; what each key is and where it
 * comes from is in pack_w8_config.h. Objects are built with their children
 * attached as they are created, so deleting the root frees everything, and
 * keys go in the order the producers' json.dump(sort_keys=True) gives. */
#include "formats/pack_w8_config.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "formats/pack_w8.h"

const char *dsq_w8_ct_format(const dsq_w8_scheme *s)
{
    if (s->act == DSQ_W8_ACT_NONE) return "naive-quantized";
    return s->kind == DSQ_W8_INT8 ? "int-quantized" : "float-quantized";
}

static const char *type_name(dsq_w8_kind k) { return k == DSQ_W8_INT8 ? "int" : "float"; }

static bool add_strings(cJSON *o, const char *key, const char *const *v, size_t n)
{
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (size_t i = 0; a && i < n; i++) {
        cJSON *s = cJSON_CreateString(v[i]);
        if (!s || !cJSON_AddItemToArray(a, s)) {
            cJSON_Delete(s);
            return false;
        }
    }
    return a != NULL;
}

static bool add_pair(cJSON *o, const char *key, int a, int b)
{
    const int v[2] = {a, b};
    cJSON *arr = cJSON_CreateIntArray(v, 2);
    if (arr && cJSON_AddItemToObject(o, key, arr)) return true;
    cJSON_Delete(arr);
    return false;
}

/* ---- compressed-tensors ---- */

/* QuantizationArgs as 0.20.1 dumps them: dynamic, group_size, num_bits,
 * observer (only when set), strategy, symmetric, type; block_structure first
 * for blocks. */
static bool ct_args(cJSON *a, dsq_w8_kind k, const char *strategy, bool dynamic, int group, const int *block,
                    const char *observer)
{
    bool ok = !block || add_pair(a, "block_structure", block[0], block[1]);
    ok = ok && cJSON_AddBoolToObject(a, "dynamic", dynamic);
    ok = ok && (group > 0 ? cJSON_AddNumberToObject(a, "group_size", group) != NULL
                          : cJSON_AddNullToObject(a, "group_size") != NULL);
    ok = ok && cJSON_AddNumberToObject(a, "num_bits", 8);
    ok = ok && (!observer || cJSON_AddStringToObject(a, "observer", observer));
    return ok && cJSON_AddStringToObject(a, "strategy", strategy) && cJSON_AddTrueToObject(a, "symmetric") &&
           cJSON_AddStringToObject(a, "type", type_name(k));
}

static bool ct_weights(cJSON *g, const dsq_w8_scheme *s)
{
    cJSON *w = cJSON_AddObjectToObject(g, "weights");
    if (!w) return false;
    const int block[2] = {s->block_rows, s->block_cols};
    switch (s->wgran) {
    case DSQ_W8_W_TENSOR: return ct_args(w, s->kind, "tensor", false, 0, NULL, NULL);
    case DSQ_W8_W_CHANNEL: return ct_args(w, s->kind, "channel", false, 0, NULL, NULL);
    default: return ct_args(w, s->kind, "block", false, 0, block, NULL);
    }
}

static bool ct_inputs(cJSON *g, const dsq_w8_scheme *s)
{
    if (s->act == DSQ_W8_ACT_NONE) return cJSON_AddNullToObject(g, "input_activations") != NULL;
    cJSON *a = cJSON_AddObjectToObject(g, "input_activations");
    if (!a) return false;
    switch (s->act) {
    case DSQ_W8_ACT_TOKEN: return ct_args(a, s->kind, "token", true, 0, NULL, NULL);
    case DSQ_W8_ACT_TENSOR: return ct_args(a, s->kind, "tensor", false, 0, NULL, "static_minmax");
    default: return ct_args(a, s->kind, "group", true, s->act_group, NULL, NULL);
    }
}

static bool ct_group(cJSON *o, const dsq_w8_scheme *s)
{
    cJSON *groups = cJSON_AddObjectToObject(o, "config_groups");
    cJSON *g = groups ? cJSON_AddObjectToObject(groups, "group_0") : NULL;
    const char *const linear[] = {"Linear"};
    return g && cJSON_AddStringToObject(g, "format", dsq_w8_ct_format(s)) && ct_inputs(g, s) &&
           cJSON_AddNullToObject(g, "output_activations") && add_strings(g, "targets", linear, 1) && ct_weights(g, s);
}

static bool ct_config(cJSON *o, const dsq_w8_config *c)
{
    bool ok = ct_group(o, &c->sch) && cJSON_AddStringToObject(o, "format", dsq_w8_ct_format(&c->sch)) &&
              cJSON_AddNullToObject(o, "global_compression_ratio") && add_strings(o, "ignore", c->ignore, c->n_ignore);
    if (ok && c->kv_fp8) {
        cJSON *kv = cJSON_AddObjectToObject(o, "kv_cache_scheme");
        ok = kv && ct_args(kv, DSQ_W8_FP8, "tensor", false, 0, NULL, NULL);
    } else if (ok) {
        ok = cJSON_AddNullToObject(o, "kv_cache_scheme") != NULL;
    }
    return ok && cJSON_AddNullToObject(o, "moe_sparsity_config") &&
           cJSON_AddStringToObject(o, "quant_method", "compressed-tensors") &&
           cJSON_AddStringToObject(o, "quantization_status", "compressed") &&
           cJSON_AddObjectToObject(o, "sparsity_config") && cJSON_AddObjectToObject(o, "transform_config") &&
           cJSON_AddStringToObject(o, "version", DSQ_W8_CT_VERSION);
}

/* ---- vLLM fp8 ---- */

static bool fp8_config(cJSON *o, const dsq_w8_config *c)
{
    const dsq_w8_scheme *s = &c->sch;
    bool ok = cJSON_AddStringToObject(o, "activation_scheme", s->act == DSQ_W8_ACT_TENSOR ? "static" : "dynamic") &&
              cJSON_AddStringToObject(o, "fmt", "e4m3");
    /* lm_head is never an fp8 linear in vLLM (ParallelLMHead); list it only beside others */
    if (ok && c->n_ignore > 1) ok = add_strings(o, "ignored_layers", c->ignore, c->n_ignore);
    ok = ok && cJSON_AddStringToObject(o, "quant_method", "fp8");
    if (ok && s->wgran == DSQ_W8_W_BLOCK) ok = add_pair(o, "weight_block_size", s->block_rows, s->block_cols);
    return ok;
}

/* ---- ModelOpt ---- */

static bool producer(cJSON *o)
{
    cJSON *p = cJSON_AddObjectToObject(o, "producer");
    return p && cJSON_AddStringToObject(p, "name", "modelopt") &&
           cJSON_AddStringToObject(p, "version", DSQ_W8_MODELOPT_VERSION);
}

static bool fp8_static_args(cJSON *g, const char *key)
{
    cJSON *a = cJSON_AddObjectToObject(g, key);
    return a && cJSON_AddFalseToObject(a, "dynamic") && cJSON_AddNumberToObject(a, "num_bits", 8) &&
           cJSON_AddStringToObject(a, "type", "float");
}

static bool modelopt_config(cJSON *o, const dsq_w8_config *c)
{
    cJSON *groups = cJSON_AddObjectToObject(o, "config_groups");
    cJSON *g = groups ? cJSON_AddObjectToObject(groups, "group_0") : NULL;
    const char *const linear[] = {"Linear"};
    bool ok = g && fp8_static_args(g, "input_activations") && fp8_static_args(g, "weights") &&
              add_strings(g, "targets", linear, 1) && add_strings(o, "ignore", c->ignore, c->n_ignore) &&
              cJSON_AddStringToObject(o, "quant_algo", "FP8");
    if (ok && c->kv_fp8) {
        cJSON *kv = cJSON_AddObjectToObject(o, "kv_cache_scheme");
        ok = kv && cJSON_AddFalseToObject(kv, "dynamic") && cJSON_AddNumberToObject(kv, "num_bits", 8) &&
             cJSON_AddStringToObject(kv, "type", "float");
    }
    return ok && producer(o) && cJSON_AddStringToObject(o, "quant_method", "modelopt");
}

dsq_status dsq_w8_config_json(const dsq_w8_config *c, struct cJSON **out)
{
    *out = NULL;
    DSQ_TRY(dsq_w8_format_check(c->format, &c->sch));
    cJSON *o = cJSON_CreateObject();
    bool ok = o != NULL;
    if (ok && c->format == DSQ_INT_FORMAT_CT)
        ok = ct_config(o, c);
    else if (ok && c->format == DSQ_INT_FORMAT_FP8)
        ok = fp8_config(o, c);
    else if (ok)
        ok = modelopt_config(o, c);
    if (!ok) {
        cJSON_Delete(o);
        return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory building quantization_config",
                        dsq_int_format_name(c->format));
    }
    *out = o;
    return DSQ_OK;
}

dsq_status dsq_w8_hf_quant_config_json(const dsq_w8_config *c, struct cJSON **out)
{
    *out = NULL;
    if (c->format != DSQ_INT_FORMAT_MODELOPT)
        return dsq_fail(DSQ_ERR_ARG, "hf_quant_config.json belongs to modelopt folders, not %s",
                        dsq_int_format_name(c->format));
    DSQ_TRY(dsq_w8_format_check(c->format, &c->sch));
    cJSON *o = cJSON_CreateObject();
    cJSON *q = o && producer(o) ? cJSON_AddObjectToObject(o, "quantization") : NULL;
    bool ok = q && cJSON_AddStringToObject(q, "quant_algo", "FP8") &&
              (c->kv_fp8 ? cJSON_AddStringToObject(q, "kv_cache_quant_algo", "FP8") != NULL
                         : cJSON_AddNullToObject(q, "kv_cache_quant_algo") != NULL) &&
              add_strings(q, "exclude_modules", c->ignore, c->n_ignore);
    if (!ok) {
        cJSON_Delete(o);
        return dsq_fail(DSQ_ERR_NOMEM, "hf_quant_config.json: out of memory");
    }
    *out = o;
    return DSQ_OK;
}
