/* quantization_config keys as the writers put them: AutoAWQ
 * (awq/models/_config.py to_transformers_dict), AutoGPTQ / GPTQModel
 * (BaseQuantizeConfig.to_dict, "checkpoint_format" or newer "format"), and
 * compressed-tensors (quantization/quant_config.py: format, config_groups,
 * ignore); formats/pack_*.h cite the sources of the tensor layouts. */
#include "runtime/model_quant.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "core/json.h"
#include "formats/pack_awq.h"
#include "formats/pack_ct.h"

#define CONFIG_MAX_BYTES (16u << 20)

void dsq_hfq_free(dsq_hfq *q)
{
    if (!q) return;
    for (size_t i = 0; i < q->n_skip; i++) free(q->skip[i]);
    free(q->skip);
    memset(q, 0, sizeof *q);
}

/* ---- config parsing ---- */

static dsq_status int_field(const cJSON *o, const char *key, bool required, int def, int *out, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.%s is missing", path, key);
        *out = def;
        return DSQ_OK;
    }
    /* range first: converting an out-of-range double to int is undefined */
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= -1 && v->valuedouble <= 1e6) ||
        v->valuedouble != (double)(int)v->valuedouble)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.%s is not a small integer", path, key);
    *out = (int)v->valuedouble;
    return DSQ_OK;
}

static dsq_status bool_field(const cJSON *o, const char *key, bool def, bool *out, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return DSQ_OK;
    }
    if (!cJSON_IsBool(v)) return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.%s is not a boolean", path, key);
    *out = cJSON_IsTrue(v);
    return DSQ_OK;
}

/* A string field, or def when absent or null. */
static const char *str_field(const cJSON *o, const char *key, const char *def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) && v->valuestring ? v->valuestring : def;
}

static dsq_status skip_list(const cJSON *o, const char *key, dsq_hfq *q, const char *path)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!a || cJSON_IsNull(a)) return DSQ_OK;
    if (!cJSON_IsArray(a)) return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.%s is not a list", path, key);
    int n = cJSON_GetArraySize(a);
    q->skip = calloc(n > 0 ? (size_t)n : 1, sizeof *q->skip);
    if (!q->skip) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
    for (const cJSON *e = a->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !e->valuestring)
            return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config.%s holds a non-string", path, key);
        if (!(q->skip[q->n_skip] = strdup(e->valuestring))) return dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path);
        q->n_skip++;
    }
    return DSQ_OK;
}

static dsq_status parse_awq(const cJSON *c, dsq_hfq *q, const char *path)
{
    const char *version = str_field(c, "version", "gemm");
    if (strcasecmp(version, "gemm") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: AWQ version \"%s\" is not supported (only \"gemm\")", path, version);
    DSQ_TRY(int_field(c, "bits", true, 0, &q->bits, path));
    if (q->bits != 4) return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: AWQ with %d bits is not supported (only 4)", path, q->bits);
    DSQ_TRY(int_field(c, "group_size", true, 0, &q->group_size, path));
    bool zero_point = true;
    DSQ_TRY(bool_field(c, "zero_point", true, &zero_point, path));
    q->sym = !zero_point;
    return skip_list(c, "modules_to_not_convert", q, path);
}

static dsq_status parse_gptq(const cJSON *c, dsq_hfq *q, const char *path)
{
    const char *fmt = str_field(c, "checkpoint_format", str_field(c, "format", "gptq"));
    if (!strcmp(fmt, "gptq"))
        q->gptq_format = DSQ_GPTQ_FORMAT_V1;
    else if (!strcmp(fmt, "gptq_v2"))
        q->gptq_format = DSQ_GPTQ_FORMAT_V2;
    else
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: GPTQ checkpoint_format \"%s\" is not supported (gptq, gptq_v2)", path,
                        fmt);
    DSQ_TRY(int_field(c, "bits", true, 0, &q->bits, path));
    DSQ_TRY(int_field(c, "group_size", false, -1, &q->group_size, path));
    DSQ_TRY(bool_field(c, "sym", true, &q->sym, path));
    return skip_list(c, "modules_to_not_convert", q, path);
}

/* The one config group that targets Linear; weight-only integer quantization. */
static dsq_status parse_ct_group(const cJSON *g, const char *name, dsq_hfq *q, const char *path)
{
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(g, "input_activations");
    if (in && !cJSON_IsNull(in))
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: compressed-tensors group %s quantizes activations (only weight-only)",
                        path, name);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
    if (!cJSON_IsObject(w)) return dsq_fail(DSQ_ERR_FORMAT, "%s: compressed-tensors group %s has no weights", path, name);
    const char *type = str_field(w, "type", "int"), *strategy = str_field(w, "strategy", "group");
    if (strcmp(type, "int") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: compressed-tensors weights of type \"%s\" are not supported (int)",
                        path, type);
    DSQ_TRY(int_field(w, "num_bits", true, 0, &q->bits, path));
    DSQ_TRY(bool_field(w, "symmetric", true, &q->sym, path));
    if (!strcmp(strategy, "channel")) {
        q->group_size = -1;
        return DSQ_OK;
    }
    if (strcmp(strategy, "group") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: compressed-tensors strategy \"%s\" is not supported (group, channel)",
                        path, strategy);
    return int_field(w, "group_size", true, 0, &q->group_size, path);
}

static bool targets_linear(const cJSON *g)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(g, "targets");
    for (const cJSON *e = cJSON_IsArray(t) ? t->child : NULL; e; e = e->next)
        if (cJSON_IsString(e) && e->valuestring && !strcmp(e->valuestring, "Linear")) return true;
    return false;
}

static dsq_status parse_ct(const cJSON *c, dsq_hfq *q, const char *path)
{
    const char *fmt = str_field(c, "format", NULL);
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(c, "config_groups");
    if (!cJSON_IsObject(groups) || !groups->child)
        return dsq_fail(DSQ_ERR_FORMAT, "%s: compressed-tensors config has no config_groups", path);
    const cJSON *found = NULL;
    for (const cJSON *g = groups->child; g; g = g->next) {
        if (!targets_linear(g))
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: compressed-tensors group %s does not target Linear", path,
                            g->string ? g->string : "?");
        if (found)
            return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: several compressed-tensors groups target Linear", path);
        found = g;
    }
    if (!fmt) fmt = str_field(found, "format", "?");
    if (strcmp(fmt, "pack-quantized") != 0)
        return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: compressed-tensors format \"%s\" is not supported (pack-quantized)",
                        path, fmt);
    DSQ_TRY(parse_ct_group(found, found->string ? found->string : "?", q, path));
    return skip_list(c, "ignore", q, path);
}

static dsq_status parse(const cJSON *c, dsq_hfq *q, const char *path)
{
    const char *method = str_field(c, "quant_method", NULL);
    if (!method) return dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config has no quant_method", path);
    if (!strcmp(method, "awq")) {
        q->method = DSQ_HFQ_AWQ;
        return parse_awq(c, q, path);
    }
    if (!strcmp(method, "gptq")) {
        q->method = DSQ_HFQ_GPTQ;
        return parse_gptq(c, q, path);
    }
    if (!strcmp(method, "compressed-tensors")) {
        q->method = DSQ_HFQ_CT;
        return parse_ct(c, q, path);
    }
    return dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: quant_method \"%s\" is not supported (awq, gptq, compressed-tensors)",
                    path, method);
}

dsq_status dsq_hfq_from_dir(const char *dir, dsq_hfq *out)
{
    memset(out, 0, sizeof *out);
    char path[4096];
    DSQ_TRY(dsq_path_join(path, sizeof path, dir, "config.json"));
    if (!dsq_exists(path)) return DSQ_OK;
    char *text = NULL;
    size_t len = 0;
    DSQ_TRY(dsq_read_file(path, CONFIG_MAX_BYTES, &text, &len));
    dsq_status why = DSQ_OK;
    cJSON *root = dsq_json_parse(text, len, NULL, &why);
    free(text);
    if (!root) return why == DSQ_ERR_NOMEM ? dsq_fail(DSQ_ERR_NOMEM, "%s: out of memory", path)
                                           : dsq_fail(DSQ_ERR_FORMAT, "%s: not valid JSON", path);
    const cJSON *qc = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    dsq_status s = DSQ_OK;
    if (qc && !cJSON_IsNull(qc))
        s = cJSON_IsObject(qc) ? parse(qc, out, path)
                               : dsq_fail(DSQ_ERR_FORMAT, "%s: quantization_config is not an object", path);
    cJSON_Delete(root);
    if (s == DSQ_OK && out->method != DSQ_HFQ_NONE && out->bits != 2 && out->bits != 3 && out->bits != 4 &&
        out->bits != 8)
        s = dsq_fail(DSQ_ERR_UNSUPPORTED, "%s: %d-bit weights are not supported (2, 3, 4 or 8)", path, out->bits);
    if (s != DSQ_OK) dsq_hfq_free(out);
    return s;
}

/* ---- which modules stay dense ---- */

/* compressed-tensors "re:" patterns use Python's re.match (anchored at the
 * start only); POSIX extended syntax covers the patterns seen in practice. */
static bool regex_matches(const char *pattern, const char *module)
{
    size_t n = strlen(pattern);
    char *anchored = malloc(n + 4);
    if (!anchored) return false;
    snprintf(anchored, n + 4, "^(%s)", pattern);
    regex_t re;
    bool hit = false;
    if (regcomp(&re, anchored, REG_EXTENDED | REG_NOSUB) == 0) {
        hit = regexec(&re, module, 0, NULL, 0) == 0;
        regfree(&re);
    }
    free(anchored);
    return hit;
}

bool dsq_hfq_skips(const dsq_hfq *q, const char *module)
{
    for (size_t i = 0; i < q->n_skip; i++) {
        const char *s = q->skip[i];
        if (q->method == DSQ_HFQ_CT) {
            if (!strncmp(s, "re:", 3) ? regex_matches(s + 3, module) : !strcmp(s, module)) return true;
        } else if (*s && strstr(module, s)) {
            return true;
        }
    }
    return false;
}

/* ---- loading one linear ---- */

/* The tensor "<module>.<suffix>"; *found false when absent. */
static dsq_status part(const dsq_st_model *st, const char *module, const char *suffix, dsq_tensor *t, bool *found)
{
    char name[512];
    if (snprintf(name, sizeof name, "%s.%s", module, suffix) >= (int)sizeof name)
        return dsq_fail(DSQ_ERR_FORMAT, "module name %.64s... is too long", module);
    int64_t i = dsq_st_model_find(st, name);
    *found = i >= 0;
    return *found ? dsq_st_model_view(st, (size_t)i, t) : DSQ_OK;
}

static dsq_status need(const dsq_st_model *st, const char *module, const char *suffix, dsq_tensor *t)
{
    bool found;
    DSQ_TRY(part(st, module, suffix, t, &found));
    if (!found) return dsq_fail(DSQ_ERR_NOT_FOUND, "quantized module %s: tensor %s.%s is missing", module, module, suffix);
    return DSQ_OK;
}

static dsq_status unpack(const dsq_hfq *q, const dsq_st_model *st, const char *module, dsq_intq *iq)
{
    dsq_tensor a, b, c, d, e;
    bool has_d, has_e;
    switch (q->method) {
    case DSQ_HFQ_AWQ:
        DSQ_TRY(need(st, module, "qweight", &a));
        DSQ_TRY(need(st, module, "qzeros", &b));
        DSQ_TRY(need(st, module, "scales", &c));
        return dsq_awq_unpack(&a, &b, &c, q->group_size, iq);
    case DSQ_HFQ_GPTQ:
        DSQ_TRY(need(st, module, "qweight", &a));
        DSQ_TRY(need(st, module, "qzeros", &b));
        DSQ_TRY(need(st, module, "scales", &c));
        DSQ_TRY(part(st, module, "g_idx", &d, &has_d));
        return dsq_gptq_unpack(&a, &b, &c, has_d ? &d : NULL, q->bits, q->group_size, q->sym, q->gptq_format, iq);
    case DSQ_HFQ_CT:
        DSQ_TRY(need(st, module, "weight_packed", &a));
        DSQ_TRY(need(st, module, "weight_scale", &b));
        DSQ_TRY(need(st, module, "weight_shape", &c));
        DSQ_TRY(part(st, module, "weight_zero_point", &d, &has_d));
        DSQ_TRY(part(st, module, "weight_g_idx", &e, &has_e));
        return dsq_ct_unpack(&a, &b, has_d ? &d : NULL, &c, has_e ? &e : NULL, q->bits, q->group_size, q->sym, iq);
    case DSQ_HFQ_NONE: break;
    }
    return dsq_fail(DSQ_ERR_INTERNAL, "quantized module %s: no method", module);
}

/* The tensor whose presence marks a module as packed. */
static const char *marker(dsq_hfq_method m) { return m == DSQ_HFQ_CT ? "weight_packed" : "qweight"; }

dsq_status dsq_hfq_load_linear(const dsq_hfq *q, const dsq_st_model *st, const char *module, int64_t out, int64_t in,
                               dsq_linear *W, bool *loaded)
{
    *loaded = false;
    if (q->method == DSQ_HFQ_NONE || dsq_hfq_skips(q, module)) return DSQ_OK;
    dsq_tensor t;
    bool packed;
    DSQ_TRY(part(st, module, marker(q->method), &t, &packed));
    if (!packed) return DSQ_OK; /* left dense by the quantizer (e.g. lm_head): its .weight must be there */
    dsq_intq iq;
    memset(&iq, 0, sizeof iq);
    dsq_status s = unpack(q, st, module, &iq);
    if (s == DSQ_OK && (iq.rows != out || iq.cols != in))
        s = dsq_fail(DSQ_ERR_FORMAT, "quantized module %s: unpacked [%lld x %lld], expected [%lld x %lld]", module,
                     (long long)iq.rows, (long long)iq.cols, (long long)out, (long long)in);
    if (s == DSQ_OK) s = dsq_linear_init_intq(W, &iq);
    dsq_intq_free(&iq);
    if (s != DSQ_OK) return dsq_fail_context(s, "quantized module %s", module);
    *loaded = true;
    return DSQ_OK;
}
